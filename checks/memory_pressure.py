"""memory_pressure: containers whose working set stayed close to their memory limit.

Signal (cAdvisor and kube-state-metrics, queries.md §2): the working set of each container divided by its memory
limit, both aggregated ``by (namespace, pod, container)`` before dividing (cAdvisor and kube-state-metrics carry
different ``job``/``instance`` labels, and a restarted container's new cAdvisor ``id`` merges into the same key)::

    ratio = max by (namespace, pod, container) (last_over_time(container_memory_working_set_bytes{container!="",
                                                                    container!="POD", image!=""}[59999ms]))
            / on (namespace, pod, container)
            max by (namespace, pod, container) (last_over_time(kube_pod_container_resource_limits{resource="memory",
                                                                    unit="byte"}[59999ms]) > 0)

    sustained: max_over_time(min_over_time(ratio[15m:1m])[<window>:1m]) > 0.85
    minutes:   count_over_time((ratio > 0.85)[<window>:1m])
    since:     min_over_time(timestamp(ratio > 0.85)[<window>:1m])
    peak:      max by (namespace, pod, container) (max_over_time(container_memory_working_set_bytes{…}[<window>]))
               / on (namespace, pod, container) max by (namespace, pod, container) (max_over_time(limits[<window>]))

Each minute reads the scrapes of that minute only (``[59999ms]``: `checks.promql.step_read`), and every subquery
range is open on the left (`checks.promql.open_range`), so that VictoriaMetrics and Prometheus read the same samples:
a bare selector reads back as far as the engine's look-back, five minutes in Prometheus (a container OOM-killed at
06:15 would stay at 99 % of its limit until 06:20), and Prometheus 2 closes ranges on the left (one more minute).

Thresholds: 85 % of the limit for 15 minutes in a row is the ``ContainerMemNearLimit`` rule added after 2026-07-20
(seed 001): the feed aggregator's backend climbed from 4.8 GiB to 99.6 % of its 8 GiB limit before the 06:15 OOM
kill, and a sustained 85 % is what would have warned before the kill rather than after it. 95 % for 15 minutes is
critical: there is no room left for a burst, the next allocation spike is an OOM kill. Fifteen minutes, not one
scrape, so that a short burst (a GC cycle, a cache warm-up) does not count. The peak is raw samples over the
window's largest limit, so a one-scrape spike still shows in the explanation.

Default penalties are 0: the seed rule grades (an OOM kill costs its point in ``oom_kills``); this check explains
what came before it. The policy file can give it points.

Cost: ``sustained``, ``minutes`` and ``since`` step through the window minute by minute, nested for ``sustained``;
over a whole cluster they were most of a digest's backend time. They are asked only about the candidates, whose
highest working set over their lowest limit (from as early as those subqueries reach) crosses the warning ratio::

    candidates: max by (…) (max_over_time(working_set[<window + sustain + 15m>]))
                / min by (…) (min_over_time(limits[<window + sustain + 15m>]) > 0) >= 0.85

That bound is at least every per-minute ratio, so a container below it cannot be found above the threshold by the
subqueries (a limit lowered under a steady working set is still caught); ``peak`` is asked of them only too. Of the
others the backend answers only what is said of them: the highest peak (``topk(1, peak)``) and how many crossed the
warning ratio (``count(peak >= 0.85)``) — one series each, where every container's peak was 30,000 series on a
1,000-node cluster. The ``presence`` query is asked only when no container has a peak, to say which of cAdvisor,
kube-state-metrics or the limits is missing.

No cAdvisor series at all, or kube-state-metrics not scraped (the limits come from it): UNKNOWN. cAdvisor and
kube-state-metrics present but no memory limit on any container: OK, "no memory limits set" — nothing can be near a
limit that does not exist.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace

from . import coverage
from .contract import (
    Finding,
    Input,
    Need,
    Offender,
    Quantity,
    Sample,
    SourceError,
    Sources,
    Status,
    Unit,
    Window,
    fmt_percent,
    grade,
    local_time,
    metrics_look,
    unknown,
)
from .presence import kube_state_metrics_up_query
from .promql import CONTAINER_LABELS, ContainerKey, container_key, open_range, step_read, with_matchers
from .restarted import narrowing

NAME = "memory_pressure"
# Where a reader sees one offender: its own series over the window (`checks.contract.Look`).
_LOOK = "max by (namespace, pod, container) (container_memory_working_set_bytes{})"
_LOOK_KEYS = ("namespace", "pod", "container")

# What this check reads, for `digest doctor` (the queries below are what it sends).
INPUTS: tuple[Input, ...] = (
    Input("series", "up", "kube-state-metrics scraped", policy_key="memory_pressure.ksm_job", by_job=True),
    Input(
        "series", "container_memory_working_set_bytes", "working sets", fix="the kubelets' /metrics/cadvisor scraped"
    ),
    Input("series", "kube_pod_container_resource_limits", "memory limits", fix="kube-state-metrics' pod metrics"),
)
# The backend's look-back for the sample at each step (Prometheus: 5 min; VictoriaMetrics adapts it to the scrape
# interval), with room to spare: part of how far before the window a per-minute ratio can reach.
_LOOK_BACK_SECONDS = 15 * 60


@dataclass(frozen=True)
class MemoryPressurePolicy:
    """Ratios of the memory limit, how long they must last, and what they cost (nothing by default)."""

    enabled: bool = True
    warn_ratio: float = 0.85
    crit_ratio: float = 0.95
    sustain_minutes: int = 15
    warn_penalty: int = 0
    crit_penalty: int = 0
    ksm_job: str = ".*kube-state-metrics.*"
    top: int = 5


@dataclass(frozen=True)
class MemoryPressureCheck:
    """Working set against memory limit per container: sustained ratio, peak and minutes above."""

    policy: MemoryPressurePolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        return (coverage.kube_state_metrics(self.policy.ksm_job), coverage.cadvisor())

    def queries(self, window: Window, matchers: str | None = None) -> dict[str, str]:
        """The PromQL this check sends, by purpose; ``matchers`` narrow the per-minute subqueries to candidates."""
        rng = window.promql_range()
        warn = self.policy.warn_ratio
        working_set = 'container_memory_working_set_bytes{container!="", container!="POD", image!=""}'
        limits = 'kube_pod_container_resource_limits{resource="memory", unit="byte"}'
        narrow_ws = with_matchers(working_set, matchers or "")
        narrow_limits = with_matchers(limits, matchers or "")
        # Each minute reads the last scrape of that minute only: a bare selector would read back as far as the
        # engine's look-back, and Prometheus' five minutes keep a killed container's working set after its death.
        ratio = (
            f"(max by (namespace, pod, container) ({step_read(narrow_ws, 60)}) / on (namespace, pod, container) "
            f"max by (namespace, pod, container) ({step_read(narrow_limits, 60)} > 0))"
        )
        steps = open_range(window.seconds)  # (start, end]: not the previous day's last minute
        peak = (
            f"max by (namespace, pod, container) (max_over_time({working_set}[{rng}])) / on (namespace, pod, "
            f"container) max by (namespace, pod, container) (max_over_time({limits}[{rng}]) > 0)"
        )
        reach = f"{window.seconds + self.policy.sustain_minutes * 60 + _LOOK_BACK_SECONDS}s"
        return {
            # Asked only when `peak` is empty, to tell which of the things "no pressure" needs is missing (whether
            # kube-state-metrics was up, `ksm_up` has said already).
            "presence": (
                f'label_replace(count(count_over_time({working_set}[{rng}])), "signal", "cadvisor", "", "") or '
                f'label_replace(count(count_over_time({limits}[{rng}])), "signal", "limits", "", "")'
            ),
            "ksm_up": kube_state_metrics_up_query(self.policy.ksm_job, window),
            # Every container's peak is a series per container (30,000 on a 1,000-node cluster): the backend answers
            # the highest one, how many crossed the warning ratio, and (narrowed) the candidates' own peaks.
            "highest": f"topk(1, {peak})",
            "crossed": f"count({peak} >= {warn})",
            "peak": (
                f"max by (namespace, pod, container) (max_over_time({narrow_ws}[{rng}])) / on (namespace, pod, "
                f"container) max by (namespace, pod, container) (max_over_time({narrow_limits}[{rng}]) > 0)"
            ),
            # An upper bound of every per-minute ratio below: the highest working set over the lowest limit, from
            # as far back as the sustained minimum and the look-back reach. Below the threshold, no subquery can
            # find the container above it.
            "candidates": (
                f"max by (namespace, pod, container) (max_over_time({working_set}[{reach}])) / on (namespace, pod, "
                f"container) min by (namespace, pod, container) (min_over_time({limits}[{reach}]) > 0) >= {warn}"
            ),
            "sustained": (
                f"max_over_time((min_over_time({ratio}[{open_range(self.policy.sustain_minutes * 60)}:1m]))"
                f"[{steps}:1m]) > {warn}"
            ),
            "minutes": f"count_over_time(({ratio} > {warn})[{steps}:1m])",
            # When it first crossed: the explanation must show that the pressure came before the kill.
            "since": f"min_over_time(timestamp({ratio} > {warn})[{steps}:1m])",
        }

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        queries = self.queries(window)
        at = window.end
        try:
            ksm_up, highest, crossed, candidates = await asyncio.gather(
                *(sources.metrics.instant(queries[key], at) for key in ("ksm_up", "highest", "crossed", "candidates"))
            )
        except SourceError as exc:
            return unknown(NAME, "memory pressure not checked: the metrics backend did not answer", str(exc))
        ksm_seen = bool(ksm_up) and max(sample.value for sample in ksm_up) >= 1
        if not highest:
            blind = await self._why_no_peak(sources, window, queries["presence"], ksm_seen)
            if blind is not None:
                return blind
        elif not ksm_seen:
            return self._no_kube_state_metrics()
        keys = sorted({container_key(sample.labels) for sample in candidates})
        sustained: Sequence[Sample] = ()
        minutes: Sequence[Sample] = ()
        since: Sequence[Sample] = ()
        peak: Sequence[Sample] = ()
        if keys:
            narrowed = self.queries(window, narrowing(keys))
            try:
                sustained, minutes, since, peak = await asyncio.gather(
                    *(sources.metrics.instant(narrowed[key], at) for key in ("sustained", "minutes", "since", "peak"))
                )
            except SourceError as exc:
                return unknown(NAME, "memory pressure not checked: the metrics backend did not answer", str(exc))
        crossed_count = round(crossed[0].value) if crossed else 0
        return self._finding(window, sustained, minutes, since, peak, highest, crossed_count)

    async def _why_no_peak(
        self, sources: Sources, window: Window, presence_query: str, ksm_seen: bool
    ) -> Finding | None:
        """No container has both a working set and a limit: an UNKNOWN naming what is missing, or None (OK)."""
        try:
            presence = await sources.metrics.instant(presence_query, window.end)
        except SourceError as exc:
            return unknown(NAME, "memory pressure not checked: the metrics backend did not answer", str(exc))
        signals = {sample.labels.get("signal", ""): sample.value for sample in presence}
        if signals.get("cadvisor", 0) < 1:
            return unknown(
                NAME,
                "memory pressure not checked: no cAdvisor working-set series in the window",
                "no container_memory_working_set_bytes in the window",
                hint="Is the kubelet's /metrics/cadvisor endpoint scraped?",
            )
        if not ksm_seen:
            return self._no_kube_state_metrics()
        if signals.get("limits", 0) < 1:
            return Finding(
                name=NAME,
                status=Status.OK,
                penalty=0,
                value=0,
                summary="no memory limits set: no container can be near one",
            )
        return None  # limits and working sets exist but never for the same container: nothing is near a limit

    def _no_kube_state_metrics(self) -> Finding:
        return unknown(
            NAME,
            "memory pressure not checked: kube-state-metrics (the memory limits) was not scraped in the window",
            f'no up{{job=~"{self.policy.ksm_job}"}} = 1 in the window',
            hint="Is kube-state-metrics running and scraped? Set memory_pressure.ksm_job in the policy if its "
            "job has another name.",
        )

    def _finding(
        self,
        window: Window,
        sustained: Sequence[Sample],
        minutes: Sequence[Sample],
        since: Sequence[Sample],
        peak: Sequence[Sample],
        highest: Sequence[Sample],
        crossed: int,
    ) -> Finding:
        policy = self.policy
        minutes_by = {container_key(sample.labels): round(sample.value) for sample in minutes}
        since_by = {container_key(sample.labels): local_time(sample.value, window) for sample in since}
        peak_by = {container_key(sample.labels): sample.value for sample in peak}
        ranked = sorted(sustained, key=lambda sample: (-sample.value, container_key(sample.labels)))
        worst = ranked[0].value if ranked else 0.0
        level = 2 if worst >= policy.crit_ratio else 1 if ranked else 0
        status, penalty = grade(level, policy.warn_penalty, policy.crit_penalty)
        top = [(sample, container_key(sample.labels)) for sample in ranked[: policy.top]]
        offenders = [
            Offender(
                labels={**dict(zip(CONTAINER_LABELS, key, strict=True)), "since": since_by.get(key, "")},
                value=round(sample.value, 4),
                facts=_facts(peak_by.get(key), minutes_by.get(key)),
            )
            for sample, key in top
        ]

        def peak_text(sample: Sample, key: ContainerKey) -> str:
            # A container the peak query did not answer for shows its sustained level, a floor of that peak.
            return _percent(peak_by.get(key, sample.value))

        sustain = f"{policy.sustain_minutes} min"
        if offenders:
            sample, key = top[0]
            first_at = since_by.get(key, "")
            since_text = f", first at {first_at}" if first_at else ""
            summary = (
                f"{'/'.join(key)} stayed at ≥ {fmt_percent(worst)} of its memory limit for {sustain} "
                f"(peak {peak_text(sample, key)} %, {minutes_by.get(key, 0)} min above "
                f"{fmt_percent(policy.warn_ratio)}{since_text})"
            )
            if len(ranked) > 1:
                summary += f"; {len(ranked)} containers in all"
            # The summary names the first container; the evidence lines name the others.
            evidence = [
                f"then {'/'.join(key)}: ≥ {fmt_percent(round(sample.value, 4))} for {sustain}, "
                f"peak {peak_text(sample, key)} %, {minutes_by.get(key, 0)} min above"
                for sample, key in top[1:]
            ]
            hint = (
                "Compare the working set's growth with the workload's traffic: a limit raise buys time, a bound on "
                "the growth (queue, retries, cache) fixes it. An OOM kill usually follows within the hour."
            )
            return Finding(
                name=NAME,
                status=status,
                penalty=penalty,
                value=round(worst, 4),
                summary=summary,
                offenders=[replace(one, look=metrics_look(_LOOK, one.labels, _LOOK_KEYS)) for one in offenders],
                hint=hint,
                evidence=evidence,
            )
        summary = f"no container above {fmt_percent(policy.warn_ratio)} of its memory limit for {sustain}"
        brief_crossings: list[str] = []
        if highest:
            top_one = max(highest, key=lambda sample: sample.value)
            namespace, pod, container = container_key(top_one.labels)
            summary += f" (highest peak {fmt_percent(top_one.value)}: {namespace}/{pod}/{container})"
            if crossed:
                brief_crossings.append(
                    f"{crossed} container(s) crossed {fmt_percent(policy.warn_ratio)} for less than {sustain}"
                )
        return Finding(name=NAME, status=status, penalty=penalty, value=0, summary=summary, evidence=brief_crossings)


def _facts(peak: float | None, minutes_above: int | None) -> dict[str, Quantity]:
    """What was measured about one container; a query that did not answer for it leaves its fact out, not 0."""
    facts: dict[str, Quantity] = {}
    if peak is not None:
        facts["peak_ratio"] = Quantity(peak, Unit.RATIO)
    if minutes_above is not None:
        facts["minutes_above"] = Quantity(minutes_above, Unit.MINUTES)
    return facts


def _percent(ratio: float) -> str:
    """A ratio as a percentage with one decimal (99.6), precise enough to tell 95 % from 99 %."""
    return f"{ratio * 100:.1f}"

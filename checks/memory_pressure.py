"""memory_pressure: containers whose working set stayed close to their memory limit.

Signal (cAdvisor and kube-state-metrics, queries.md §2): the working set of each container divided by its memory
limit, both aggregated ``by (namespace, pod, container)`` before dividing (cAdvisor and kube-state-metrics carry
different ``job``/``instance`` labels, and a restarted container's new cAdvisor ``id`` merges into the same key)::

    ratio = max by (namespace, pod, container) (container_memory_working_set_bytes{container!="", container!="POD",
                                                                                  image!=""})
            / on (namespace, pod, container)
            max by (namespace, pod, container) (kube_pod_container_resource_limits{resource="memory", unit="byte"} > 0)

    sustained: max_over_time(min_over_time(ratio[15m:1m])[<window>:1m]) > 0.85
    minutes:   count_over_time((ratio > 0.85)[<window>:1m])
    since:     min_over_time(timestamp(ratio > 0.85)[<window>:1m])
    peak:      max by (namespace, pod, container) (max_over_time(container_memory_working_set_bytes{…}[<window>]))
               / on (namespace, pod, container) max by (namespace, pod, container) (max_over_time(limits[<window>]))

Thresholds: 85 % of the limit for 15 minutes in a row is the ``ContainerMemNearLimit`` rule added after 2026-07-20
(seed 001): the feed aggregator's backend climbed from 4.8 GiB to 99.6 % of its 8 GiB limit before the 06:15 OOM
kill, and a sustained 85 % is what would have warned before the kill rather than after it. 95 % for 15 minutes is
critical: there is no room left for a burst, the next allocation spike is an OOM kill. Fifteen minutes, not one
scrape, so that a short burst (a GC cycle, a cache warm-up) does not count. The peak is raw samples over the
window's largest limit, so a one-scrape spike still shows in the explanation.

Default penalties are 0: the seed rule grades (an OOM kill costs its point in ``oom_kills``); this check explains
what came before it. The policy file can give it points.

No cAdvisor series at all, or kube-state-metrics not scraped (the limits come from it): UNKNOWN. cAdvisor and
kube-state-metrics present but no memory limit on any container: OK, "no memory limits set" — nothing can be near a
limit that does not exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from checks.contract import (
    Finding,
    Offender,
    Sample,
    SourceError,
    Sources,
    Status,
    Window,
    fmt_percent,
    grade,
    local_time,
    unknown,
)

NAME = "memory_pressure"
_KEY = ("namespace", "pod", "container")


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

    def queries(self, window: Window) -> dict[str, str]:
        """The PromQL this check sends, by purpose."""
        rng = window.promql_range()
        warn = self.policy.warn_ratio
        working_set = 'container_memory_working_set_bytes{container!="", container!="POD", image!=""}'
        limits = 'kube_pod_container_resource_limits{resource="memory", unit="byte"}'
        ratio = (
            f"(max by (namespace, pod, container) ({working_set}) / on (namespace, pod, container) "
            f"max by (namespace, pod, container) ({limits} > 0))"
        )
        job = self.policy.ksm_job.replace('"', "")
        return {
            # One answer for the three things that must exist before "no pressure" can mean healthy.
            "presence": (
                f'label_replace(count(count_over_time({working_set}[{rng}])), "signal", "cadvisor", "", "") or '
                f'label_replace(count(count_over_time({limits}[{rng}])), "signal", "limits", "", "") or '
                f'label_replace(max(max_over_time(up{{job=~"{job}"}}[{rng}])), "signal", "ksm", "", "")'
            ),
            "sustained": (
                f"max_over_time((min_over_time({ratio}[{self.policy.sustain_minutes}m:1m]))[{rng}:1m]) > {warn}"
            ),
            "minutes": f"count_over_time(({ratio} > {warn})[{rng}:1m])",
            # When it first crossed: the explanation must show that the pressure came before the kill.
            "since": f"min_over_time(timestamp({ratio} > {warn})[{rng}:1m])",
            "peak": (
                f"max by (namespace, pod, container) (max_over_time({working_set}[{rng}])) / on (namespace, pod, "
                f"container) max by (namespace, pod, container) (max_over_time({limits}[{rng}]) > 0)"
            ),
        }

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        queries = self.queries(window)
        try:
            presence = await sources.metrics.instant(queries["presence"], window.end)
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
        if signals.get("ksm", 0) < 1:
            return unknown(
                NAME,
                "memory pressure not checked: kube-state-metrics (the memory limits) was not scraped in the window",
                f'no up{{job=~"{self.policy.ksm_job}"}} = 1 in the window',
                hint="Is kube-state-metrics running and scraped? Set memory_pressure.ksm_job in the policy if its "
                "job has another name.",
            )
        if signals.get("limits", 0) < 1:
            return Finding(
                name=NAME,
                status=Status.OK,
                penalty=0,
                value=0,
                summary="no memory limits set: no container can be near one",
            )
        try:
            sustained = await sources.metrics.instant(queries["sustained"], window.end)
            minutes = await sources.metrics.instant(queries["minutes"], window.end)
            since = await sources.metrics.instant(queries["since"], window.end)
            peak = await sources.metrics.instant(queries["peak"], window.end)
        except SourceError as exc:
            return unknown(NAME, "memory pressure not checked: the metrics backend did not answer", str(exc))
        return self._finding(window, sustained, minutes, since, peak)

    def _finding(
        self,
        window: Window,
        sustained: Sequence[Sample],
        minutes: Sequence[Sample],
        since: Sequence[Sample],
        peak: Sequence[Sample],
    ) -> Finding:
        policy = self.policy
        minutes_by = {_key(sample): round(sample.value) for sample in minutes}
        since_by = {_key(sample): local_time(sample.value, window) for sample in since}
        peak_by = {_key(sample): sample.value for sample in peak}
        ranked = sorted(sustained, key=lambda sample: (-sample.value, _key(sample)))
        worst = ranked[0].value if ranked else 0.0
        level = 2 if worst >= policy.crit_ratio else 1 if ranked else 0
        status, penalty = grade(level, policy.warn_penalty, policy.crit_penalty)
        offenders = [
            Offender(
                labels={
                    **dict(zip(_KEY, _key(sample), strict=True)),
                    "peak_percent": _percent(peak_by.get(_key(sample), sample.value)),
                    "minutes_above": str(minutes_by.get(_key(sample), 0)),
                    "since": since_by.get(_key(sample), ""),
                },
                value=round(sample.value, 4),
            )
            for sample in ranked[: policy.top]
        ]
        sustain = f"{policy.sustain_minutes} min"
        if offenders:
            first = offenders[0].labels
            since_text = f", first at {first['since']}" if first["since"] else ""
            summary = (
                f"{first['namespace']}/{first['pod']}/{first['container']} stayed at ≥ {fmt_percent(worst)} of its "
                f"memory limit for {sustain} (peak {first['peak_percent']} %, {first['minutes_above']} min above "
                f"{fmt_percent(policy.warn_ratio)}{since_text})"
            )
            if len(ranked) > 1:
                summary += f"; {len(ranked)} containers in all"
            # The summary names the first container; the evidence lines name the others.
            evidence = [
                f"then {offender.labels['namespace']}/{offender.labels['pod']}/{offender.labels['container']}: "
                f"≥ {fmt_percent(offender.value)} for {sustain}, peak {offender.labels['peak_percent']} %, "
                f"{offender.labels['minutes_above']} min above"
                for offender in offenders[1:]
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
                offenders=offenders,
                hint=hint,
                evidence=evidence,
            )
        summary = f"no container above {fmt_percent(policy.warn_ratio)} of its memory limit for {sustain}"
        brief_crossings: list[str] = []
        if peak:
            highest = max(peak, key=lambda sample: sample.value)
            namespace, pod, container = _key(highest)
            summary += f" (highest peak {fmt_percent(highest.value)}: {namespace}/{pod}/{container})"
            briefly = [sample for sample in peak if sample.value >= policy.warn_ratio]
            if briefly:
                brief_crossings.append(
                    f"{len(briefly)} container(s) crossed {fmt_percent(policy.warn_ratio)} for less than {sustain}"
                )
        return Finding(name=NAME, status=status, penalty=penalty, value=0, summary=summary, evidence=brief_crossings)


def _key(sample: Sample) -> tuple[str, str, str]:
    labels = sample.labels
    return labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", "")


def _percent(ratio: float) -> str:
    """A ratio as a percentage label with one decimal (99.6), precise enough to tell 95 % from 99 %."""
    return f"{ratio * 100:.1f}"

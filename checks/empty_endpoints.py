"""empty_endpoints: Services that had no ready endpoint, for how long and in how many episodes.

Signal (kube-state-metrics, queries.md §5.3): a Service is empty at a moment when its EndpointSlices exist
(``kube_endpointslice_info``) and none lists a ready address (``kube_endpointslice_endpoints{ready="true"}``). A slice
with no endpoint emits no ``*_endpoints`` series at all, so emptiness is computed with ``unless``. Slices are mapped
to their Service through ``kube_endpointslice_labels{label_kubernetes_io_service_name}`` when kube-state-metrics
exports that label (``--metric-labels-allowlist=endpointslices=[kubernetes.io/service-name]``), else through the
slice's name without its generated ``-xxxxx`` suffix; a Service with several slices (IPv4 and IPv6, more than 100
endpoints) is empty only when all of them are. Without any EndpointSlice series the legacy Endpoints families
(``kube_endpoint_info`` / ``kube_endpoint_address{ready="true"}``, not enabled by default since ksm 2.18) are used::

    service = max by (namespace, endpointslice, service) (
        label_replace(last_over_time(kube_endpointslice_labels{label_kubernetes_io_service_name!=""}[29999ms]),
                      "service", "$1", "label_kubernetes_io_service_name", "(.+)")
      or on (namespace, endpointslice)
        label_replace(last_over_time(kube_endpointslice_info[29999ms]),
                      "service", "$1", "endpointslice", "(.+?)(-[a-z0-9]{5})?"))
    empty = count by (namespace, service) (last_over_time(kube_endpointslice_info[29999ms])
                                            * on (namespace, endpointslice) group_left(service) service)
            unless on (namespace, service)
            count by (namespace, service) (last_over_time(kube_endpointslice_endpoints{ready="true"}[29999ms])
                                            * on (namespace, endpointslice) group_left(service) service)

    seconds:  count_over_time(empty[<window, open on the left>:30s]) × 30
    episodes: a range query of ``empty`` over the window at the same step; consecutive steps are one episode.

Resolution: the step is the scrape interval actually present in the data (`checks.resolution`: 15 s scrapes give
15 s steps and 15 s precision; ``scrape_interval_seconds`` in the policy overrides it, 0 = measure), and every
selector reads a range of one interval instead of the engine's look-back, so each step sees exactly one scrape and a
scrape without a ready address is one empty step. Ranges are open on the left (`checks.promql.open_range`, hence
``29999ms``): Prometheus 2 closes them and would read the scrape exactly one step back too. With
the default look-back (5 min in Prometheus, a few scrapes in VictoriaMetrics) a short gap would be papered over by the
previous sample: seed 003's Recreate rollout emptied ``status-page`` for 15 s, 101 s and 58 s, which 30 s scrapes
see as 1, 4 and 2 scrapes — and a 1-minute step would miss the first one. Durations are therefore bounded by
whole scrapes (30, 120 and 60 s); the truth lies within one scrape of them.

Thresholds: any Service with no ready endpoint is a WARN — every request to it failed (Envoy answers 503 UH, seed
000's readiness spiral and seed 003's Recreate rollout). Five minutes in total is CRIT: beyond a rollout's blip, an
outage users notice (08-12: 30 minutes over seven episodes). Seed 004's services had full endpoints all day and must
stay OK.

Default penalties are 0: the seed rule grades (the UH the empty Service causes costs its points in ``envoy_flags``);
this check says why. Neither EndpointSlice nor Endpoints series in the window: UNKNOWN.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from . import coverage
from .contract import (
    Finding,
    Input,
    Look,
    Need,
    Offender,
    Quantity,
    Sample,
    SourceError,
    Sources,
    Span,
    Unit,
    Window,
    fmt_duration,
    fmt_int,
    grade,
    local_time,
    unknown,
)
from .promql import any_of, open_range, quote, regex_literal
from .resolution import Resolution, resolve, step_for

NAME = "empty_endpoints"


def _look(labels: Mapping[str, str]) -> Look:
    """The Service's endpoints over the window, ready or not, per slice: the gaps and dips are the empty times.

    Slices are named after their Service (``<service>-xxxxx``), as the check maps them without the label.
    """
    slices = f"{regex_literal(labels.get('service', ''))}(-[a-z0-9]{{5}})?"
    return Look(
        metrics="count by (namespace, endpointslice, ready) (kube_endpointslice_endpoints"
        f'{{namespace="{quote(labels.get("namespace", ""))}", endpointslice=~"{quote(slices)}"}})'
    )


# What this check reads, for `digest doctor` (the queries below are what it sends).
# The label that names a slice's Service (`service_of_slice_expression`), read by every check that maps slices.
SERVICE_NAME_INPUT = Input(
    "series",
    "kube_endpointslice_labels",
    "the Service's name",
    required=False,
    fix="kube-state-metrics' --metric-labels-allowlist",
)
INPUTS: tuple[Input, ...] = (
    Input("series", "kube_endpointslice_info", "Services' slices", fix="kube-state-metrics' endpointslices"),
    Input("series", "kube_endpointslice_endpoints", "ready addresses", fix="kube-state-metrics' endpointslices"),
    SERVICE_NAME_INPUT,
    Input(
        "series",
        "kube_endpoint_info",
        "legacy Endpoints",
        required=False,
        fix="kube-state-metrics' endpoints",
        instead_of="kube_endpointslice_info",
    ),
    Input(
        "series",
        "kube_endpoint_address",
        "legacy ready addresses",
        required=False,
        fix="kube-state-metrics' endpoints",
        instead_of="kube_endpointslice_endpoints",
    ),
)


@dataclass(frozen=True)
class EmptyEndpointsPolicy:
    """The scrape resolution, how long empty is critical, and what it costs (nothing by default)."""

    enabled: bool = True
    scrape_interval_seconds: int = 0  # 0: measured in the data (checks.resolution)
    assumed_interval_seconds: int = 30  # when the data cannot tell
    crit_seconds: int = 300
    warn_penalty: int = 0
    crit_penalty: int = 0
    top: int = 5


@dataclass(frozen=True)
class _Service:
    namespace: str
    service: str
    empty_seconds: int
    episodes: int
    longest_seconds: int
    runs: tuple[tuple[float, int, int], ...]  # (first step's moment, seconds, step): a step at t is (t - step, t]


@dataclass(frozen=True)
class EmptyEndpointsCheck:
    """Seconds without a ready endpoint per Service, with its episodes, from EndpointSlice (or Endpoints) series."""

    policy: EmptyEndpointsPolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        return (coverage.kube_state_metrics(coverage.KSM_JOB),)

    def step(self, window: Window, interval: int) -> int:
        """The evaluation step: the scrape interval, coarser only when the window would exceed the point limit."""
        return step_for(window, interval)

    def empty_expression(self, window: Window, legacy: bool, interval: int) -> str:
        """The PromQL that is non-empty, per (namespace, service), at each moment the Service has no ready address."""
        # One scrape back and no further, on every backend (`open_range`: Prometheus 2 would also read the scrape
        # exactly one step back, and see an endpoint one scrape after it left).
        look = f"[{open_range(self.step(window, interval))}]"
        if legacy:
            # Endpoints objects are named like their Service.
            info = f'label_replace(last_over_time(kube_endpoint_info{look}), "service", "$1", "endpoint", "(.+)")'
            ready = (
                f'label_replace(last_over_time(kube_endpoint_address{{ready="true"}}{look}), "service", "$1", '
                '"endpoint", "(.+)")'
            )
            return (
                f"(count by (namespace, service) ({info}) unless on (namespace, service) "
                f"count by (namespace, service) ({ready}))"
            )
        service_of_slice = service_of_slice_expression(look)
        slices = (
            f"count by (namespace, service) (last_over_time(kube_endpointslice_info{look}) "
            f"* on (namespace, endpointslice) group_left(service) {service_of_slice})"
        )
        ready = (
            f'count by (namespace, service) (last_over_time(kube_endpointslice_endpoints{{ready="true"}}{look}) '
            f"* on (namespace, endpointslice) group_left(service) {service_of_slice})"
        )
        return f"({slices} unless on (namespace, service) {ready})"

    def queries(self, window: Window, legacy: bool = False, interval: int = 30) -> dict[str, str]:
        """The PromQL this check sends, by purpose (``episodes`` is a range query at ``step``)."""
        rng = window.promql_range()
        empty = self.empty_expression(window, legacy, interval)
        return {
            # Objects, not series: an HA pair of scrapers writes every series twice.
            "presence": (
                "label_replace(count(count by (namespace, endpointslice) "
                f'(count_over_time(kube_endpointslice_info[{rng}]))), "family", "endpointslice", "", "") or '
                "label_replace(count(count by (namespace, endpoint) "
                f'(count_over_time(kube_endpoint_info[{rng}]))), "family", "endpoint", "", "")'
            ),
            "empty_steps": f"count_over_time({empty}[{open_range(window.seconds)}:{self.step(window, interval)}s])",
            "episodes": empty,
        }

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        try:
            presence = await sources.metrics.instant(self.queries(window)["presence"], window.end)
        except SourceError as exc:
            return unknown(NAME, "endpoints not checked: the metrics backend did not answer", str(exc))
        families = {sample.labels.get("family", ""): sample.value for sample in presence if sample.value > 0}
        if not families:
            return unknown(
                NAME,
                "endpoints not checked: no EndpointSlice or Endpoints series in the window",
                "no kube_endpointslice_info or kube_endpoint_info in the window",
                hint="Is kube-state-metrics scraped, with the endpointslices resource enabled (the default)?",
            )
        legacy = "endpointslice" not in families
        resolution = await self.resolution(sources, window, legacy)
        # One part per scrape interval: a slice's ready endpoints are series of their own (``ready="true"``), so a
        # read looking back further than its part's scrape would see an endpoint that left as still there.
        parts = self.parts(window, resolution)
        step = parts[0][1]
        seconds: dict[tuple[str, str], float] = defaultdict(float)
        runs: dict[tuple[str, str], list[tuple[float, int, int]]] = defaultdict(list)
        empty_steps: list[Sample] = []
        episodes_error: str | None = None
        for part, part_step in parts:
            queries = self.queries(part, legacy, part_step)
            try:
                counted = await sources.metrics.instant(queries["empty_steps"], part.end)
            except SourceError as exc:
                return unknown(NAME, "endpoints not checked: the metrics backend did not answer", str(exc))
            empty_steps.extend(counted)
            for sample in counted:
                seconds[_service_key(sample.labels)] += round(sample.value) * part_step
            if not counted or episodes_error:
                continue
            try:
                # The same steps as the subquery: (start, end], every `step` seconds.
                episodes = await sources.metrics.range(
                    queries["episodes"], part.start + timedelta(seconds=part_step), part.end, part_step
                )
            except SourceError as exc:
                episodes_error = str(exc)
                continue
            for series in episodes:
                runs[_service_key(series.labels)].extend(
                    (at, length, part_step) for at, length in _runs(series.points, part_step)
                )
        members: dict[tuple[str, str], list[str]] = {}
        if empty_steps and not legacy:
            members = await self._members(sources, window, empty_steps)
        services = [
            _service(key, total, [] if episodes_error else _joined(runs.get(key, []))) for key, total in seconds.items()
        ]
        return self._finding(window, step, resolution, legacy, families, services, episodes_error, members)

    def parts(self, window: Window, resolution: Resolution) -> list[tuple[Window, int]]:
        """The window's parts at one scrape interval each, with their steps (one part when the interval held)."""
        segments = resolution.segments
        if len(segments) < 2:
            return [(window, self.step(window, resolution.seconds))]
        out: list[tuple[Window, int]] = []
        start = window.start
        for index, segment in enumerate(segments):
            last = index == len(segments) - 1
            end = window.end if last else datetime.fromtimestamp(segment.until, tz=UTC)
            if end > start:
                part = Window(start, end, window.zone, window.label)
                out.append((part, self.step(part, segment.seconds)))
            start = end
        return out or [(window, self.step(window, resolution.seconds))]

    async def _members(
        self, sources: Sources, window: Window, empty_steps: Sequence[Sample]
    ) -> dict[tuple[str, str], list[str]]:
        """The pods each empty Service listed in the window (from the slices' targetref), to tie it to a Deployment.

        Only for the few Services found empty; an error here loses the tie, not the finding.
        """
        rng = window.promql_range()
        namespaces = any_of(sample.labels.get("namespace", "") for sample in empty_steps)
        query = (
            "max by (namespace, service, targetref_name) (last_over_time(kube_endpointslice_endpoints"
            f'{{targetref_kind="Pod", namespace=~"{namespaces}"}}[{rng}]) '
            f"* on (namespace, endpointslice) group_left(service) {service_of_slice_expression(f'[{rng}]')})"
        )
        try:
            rows = await sources.metrics.instant(query, window.end)
        except SourceError:
            return {}
        members: dict[tuple[str, str], list[str]] = {}
        for row in rows:
            members.setdefault(_service_key(row.labels), []).append(row.labels.get("targetref_name", ""))
        return members

    async def resolution(self, sources: Sources, window: Window, legacy: bool) -> Resolution:
        """The scrape interval of the slices' series (or the policy's, when it sets one)."""
        family = "kube_endpoint_info" if legacy else "kube_endpointslice_info"
        policy = self.policy
        return await resolve(sources, window, family, policy.scrape_interval_seconds, policy.assumed_interval_seconds)

    def _finding(
        self,
        window: Window,
        step: int,
        resolution: Resolution,
        legacy: bool,
        families: dict[str, float],
        services: list[_Service],
        episodes_error: str | None,
        members: Mapping[tuple[str, str], list[str]] | None = None,
    ) -> Finding:
        policy = self.policy
        services.sort(key=lambda item: (-item.empty_seconds, item.namespace, item.service))
        worst = services[0].empty_seconds if services else 0
        level = 2 if worst >= policy.crit_seconds else 1 if services else 0
        status, penalty = grade(level, policy.warn_penalty, policy.crit_penalty)
        source = "Endpoints" if legacy else "EndpointSlice"
        evidence: list[str] = []
        if legacy:
            evidence.append("no EndpointSlice series: read from the legacy Endpoints families")
        if episodes_error:
            evidence.append(f"episodes unknown: {episodes_error}")
        observed = (
            ("kube_endpoint_info", "kube_endpoint_address")
            if legacy
            else ("kube_endpointslice_info", "kube_endpointslice_endpoints")
        )
        if not services:
            count = round(families.get("endpoint" if legacy else "endpointslice", 0))
            return Finding(
                name=NAME,
                status=status,
                penalty=penalty,
                value=0,
                summary=f"every Service had a ready endpoint ({fmt_int(count)} {source} objects seen, "
                f"checked every {step} s)",
                evidence=[*evidence, _bound(resolution, step)],
                observed=observed,
            )
        offenders = [
            Offender(
                labels={
                    "namespace": item.namespace,
                    "service": item.service,
                    # The pods it listed in the window: which Deployment backs it (at most 20, sorted).
                    **(
                        {"pods": ",".join(sorted(set(members[(item.namespace, item.service)]))[:20])}
                        if members and (item.namespace, item.service) in members
                        else {}
                    ),
                },
                value=item.empty_seconds,
                facts={
                    "empty_seconds": Quantity(item.empty_seconds, Unit.SECONDS),
                    "resolution_seconds": Quantity(step, Unit.SECONDS),
                    # Episodes are known only when the range query answered: absent, not zero, otherwise.
                    **(
                        {
                            "episodes": Quantity(item.episodes, Unit.COUNT),
                            "longest_seconds": Quantity(item.longest_seconds, Unit.SECONDS),
                        }
                        if not episodes_error
                        else {}
                    ),
                },
                # A step at t stands for the scrape in (t - step, t].
                spans=tuple(Span(at - each, at - each + length) for at, length, each in item.runs),
            )
            for item in services[: policy.top]
        ]
        first = services[0]
        summary = f"{first.namespace}/{first.service} had no ready endpoint for {fmt_duration(first.empty_seconds)}"
        if first.episodes:
            times = "once" if first.episodes == 1 else f"{first.episodes} times"
            summary += (
                f" ({times}, longest {fmt_duration(first.longest_seconds)}, first at "
                f"{local_time(first.runs[0][0], window)})"
            )
        if len(services) > 1:
            summary += f"; {len(services)} Services in all"
        # The summary names the first Service; the evidence lines name the others.
        evidence[:0] = [
            f"then {item.namespace}/{item.service}: {fmt_duration(item.empty_seconds)}"
            + (f" in {item.episodes} episode(s), longest {fmt_duration(item.longest_seconds)}" if item.episodes else "")
            for item in services[1 : policy.top]
        ]
        if first.runs:
            shown = ", ".join(f"{local_time(at, window)} {fmt_duration(length)}" for at, length, _ in first.runs[:8])
            more = f" and {len(first.runs) - 8} more" if len(first.runs) > 8 else ""
            evidence.insert(0, f"{first.namespace}/{first.service} empty at {shown}{more}")
        evidence.append(_bound(resolution, step))
        return Finding(
            name=NAME,
            status=status,
            penalty=penalty,
            value=worst,
            summary=summary,
            offenders=[replace(one, look=_look(one.labels)) for one in offenders],
            hint="A Service without ready endpoints answers every request with an error (Envoy: 503 UH). Put its "
            "episodes beside its pods' readiness (readiness), its Deployment's rollouts (deployments) and its nodes' "
            "condition: the explanation names the one that overlaps, when the data shows one.",
            evidence=evidence,
            observed=observed,
            unobserved=(f"episodes: {episodes_error}",) if episodes_error else (),
        )


def service_of_slice_expression(look: str) -> str:
    """PromQL: each EndpointSlice with its Service's name (labels family, else the slice's name), read over ``look``."""
    return (
        "max by (namespace, endpointslice, service) ("
        'label_replace(last_over_time(kube_endpointslice_labels{label_kubernetes_io_service_name!=""}'
        f'{look}), "service", "$1", "label_kubernetes_io_service_name", "(.+)") '
        f'or on (namespace, endpointslice) label_replace(last_over_time(kube_endpointslice_info{look}), "service", '
        '"$1", "endpointslice", "(.+?)(-[a-z0-9]{5})?"))'
    )


def _service_key(labels: Mapping[str, str]) -> tuple[str, str]:
    return labels.get("namespace", ""), labels.get("service", "")


def _service(key: tuple[str, str], seconds: float, runs: Sequence[tuple[float, int, int]]) -> _Service:
    return _Service(
        namespace=key[0],
        service=key[1],
        empty_seconds=round(seconds),
        episodes=len(runs),
        longest_seconds=max((length for _, length, _ in runs), default=0),
        runs=tuple(runs),
    )


def _joined(runs: Sequence[tuple[float, int, int]]) -> list[tuple[float, int, int]]:
    """Runs of consecutive parts as one when the second begins where the first ended (an episode across a change)."""
    out: list[tuple[float, int, int]] = []
    for at, length, step in sorted(runs):
        if out:
            first_at, first_length, first_step = out[-1]
            end = first_at - first_step + first_length
            if at - step <= end + step / 2:
                out[-1] = (first_at, round(max(end, at - step + length) - (first_at - first_step)), first_step)
                continue
        out.append((at, length, step))
    return out


def _runs(points: Sequence[tuple[float, float]], step: int) -> list[tuple[float, int]]:
    """Consecutive empty steps as (first moment, seconds): a gap of more than one step ends an episode."""
    runs: list[tuple[float, int]] = []
    previous: float | None = None
    for moment, _ in sorted(points):
        if previous is not None and moment - previous <= step * 1.5:
            start, length = runs[-1]
            runs[-1] = (start, length + step)
        else:
            runs.append((moment, step))
        previous = moment
    return runs


def _bound(resolution: Resolution, step: int) -> str:
    """The precision the durations were measured at, said once under them."""
    if step > resolution.seconds:
        return f"measured every {step} s (the window is too long for each {resolution.seconds} s scrape)"
    return resolution.bound()

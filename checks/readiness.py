"""readiness: pods that were not ready, for how long, without or with a restart, per pod and per Service.

A pod that is not ready is out of its Service's endpoints: it serves nothing, yet nothing restarts and no counter of
restarts moves. Seed 000's readiness spiral (08-12) is that: four CPU-throttled pods went unready for 32-38 minutes
each and never restarted. Every cluster with kube-state-metrics has the signal; the kubelet's prober metrics, which
count the failed probes behind it, are scraped by few (``/metrics/probes``), so they only add to it.

Signal (kube-state-metrics, queries.md §5.2), read one scrape per step at the scrape interval measured in the data
(`checks.resolution`), leaving out pods in phase Succeeded, Failed or Pending (a completed Job is not ready by
design, a pending pod is not running yet)::

    ready = max by (namespace, pod) (last_over_time(kube_pod_status_ready{condition="true"}[<interval>]))
    steps not ready: count_over_time(((ready == 0) unless on (namespace, pod) (<phase Succeeded|Failed|Pending> == 1))
                                     [<window>:<interval>])

Every range there is open on the left (`checks.promql.open_range`: ``[29999ms]`` for 30 s), as VictoriaMetrics reads
it; Prometheus 2 closes ranges and would read one more scrape per step (and the previous day's last step).

``condition="true" == 0`` rather than ``condition="false" == 1``: a pod whose node stopped reporting has its Ready
condition ``Unknown`` or ``False`` depending on the node controller's timing, and is out of its Service either way.
For the pods that were not ready (the ``detail_pods`` worst), ``ready`` is read as a range at the same step to find
the episodes, and to tell a pod that was ready and then left its Service from one still starting: the first run of
a pod created in the window, before it was ever ready, is start-up, shown only when it lasts ``startup_minutes``.
A pod that never became ready at all (a crash-looping new ReplicaSet) is named as such. For the same pods: their
restarts in the window, their node (``kube_pod_info``), their Service (EndpointSlice ``targetref_name``), and
the nodes that were NotReady (``kube_node_status_condition{condition="Ready", status="true"} == 0``) with when.
Failed readiness probes per pod come from ``prober_probe_total`` when it is scraped, counted exactly
(`checks.promql.counted_increase`; Prometheus' ``increase()`` extrapolates: 399.11 for 400); the finding says which
of these sources it read and which it did not find.

Thresholds: a pod not ready for 2 minutes in all (after it had been ready) is a WARN: beyond a probe's flap, its
share of traffic went to the others or nowhere. 30 minutes is CRIT: a pod out of service for half an hour is an
outage of that replica, not a blip (08-12: 32-38 min per pod). Start-up is not counted: every rollout has some.

Default penalties are 0: the seed rule grades (the UH an empty Service causes costs its points in ``envoy_flags``);
this check says whose pods were out, for how long, and whether anything restarted. Without kube-state-metrics, or
with it but no ``kube_pod_status_ready`` at all: UNKNOWN.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta

from . import coverage
from .contract import (
    Event,
    Finding,
    Input,
    Need,
    Offender,
    Quantity,
    RangeSeries,
    SourceError,
    Sources,
    Span,
    Unit,
    Window,
    fmt_duration,
    fmt_int,
    grade,
    local_time,
    metrics_look,
    unknown,
)
from .empty_endpoints import SERVICE_NAME_INPUT, service_of_slice_expression
from .error_lines import owned_by
from .nodes import NODE_NAMES_INPUT, node_names
from .presence import family_missing, kube_state_metrics_missing, kube_state_metrics_up_query
from .promql import any_of, counted_increase, open_range
from .resolution import Resolution, resolve, runs, step_for

NAME = "readiness"
# Where a reader sees one offender: its own series over the window (`checks.contract.Look`).
_LOOK = "max by (namespace, pod, condition) (kube_pod_status_ready{})"
_LOOK_KEYS = ("namespace", "pod")

# What this check reads, for `digest doctor` (the queries below are what it sends).
INPUTS: tuple[Input, ...] = (
    Input("series", "up", "kube-state-metrics scraped", policy_key="readiness.ksm_job", by_job=True),
    Input("series", "kube_pod_status_ready", "pods' readiness", fix="kube-state-metrics' pod metrics"),
    Input(
        "series",
        "kube_pod_status_phase",
        "finished pods left out",
        required=False,
        fix="kube-state-metrics' pod metrics",
    ),
    Input(
        "series",
        "kube_pod_container_status_restarts_total",
        "whether it restarted",
        required=False,
        fix="kube-state-metrics' pod metrics",
    ),
    Input("series", "kube_pod_info", "the pod's node", required=False, fix="kube-state-metrics' pod metrics"),
    Input(
        "series",
        "kube_endpointslice_endpoints",
        "the pod's Service",
        required=False,
        fix="kube-state-metrics' endpointslices",
    ),
    Input(
        "series",
        "kube_endpointslice_info",
        "the pod's Service",
        required=False,
        fix="kube-state-metrics' endpointslices",
    ),
    SERVICE_NAME_INPUT,
    Input(
        "series",
        "kube_node_status_condition",
        "nodes NotReady",
        required=False,
        fix="kube-state-metrics' node metrics",
    ),
    Input(
        "series",
        "up",
        "the nodes' kubelets answered",
        required=False,
        policy_key="readiness.node_liveness_jobs",
        by_job=True,
    ),
    Input(
        "series", "prober_probe_total", "failed readiness probes", required=False, fix="the kubelets' /metrics/probes"
    ),
    NODE_NAMES_INPUT,
)
READY = 'kube_pod_status_ready{condition="true"}'
_NODE_READY = 'kube_node_status_condition{condition="Ready", status="true"}'
READINESS_FAILED = 'prober_probe_total{probe_type="Readiness", result="failed"}'
_OBSERVED = "__observed__"


@dataclass(frozen=True)
class ReadinessPolicy:
    """How long not ready is a warning or critical, how long a start-up may take, and the cost (nothing by default)."""

    enabled: bool = True
    warn_minutes: float = 2
    crit_minutes: float = 30
    startup_minutes: float = 5
    warn_penalty: int = 0
    crit_penalty: int = 0
    ksm_job: str = ".*kube-state-metrics.*"
    scrape_interval_seconds: int = 0  # 0: measured in the data (checks.resolution)
    assumed_interval_seconds: int = 30  # when the data cannot tell
    detail_pods: int = 50
    top: int = 5
    # The targets whose answers prove a node kept reporting: its kubelet (what keeps a node Ready; node_exporter may
    # answer while the kubelet hangs, 11-12). Read when the cluster has no node conditions, so that a pod unready on a
    # node whose kubelet answered throughout is not blamed on the node.
    node_liveness_jobs: str = "kubelet"


@dataclass
class _Pod:
    namespace: str
    pod: str
    steps: int  # not-ready steps in the window, start-up included
    step: int  # seconds per step
    detailed: bool = False
    unready: list[Span] = field(default_factory=list)  # after it had been ready (or since before the window)
    startup: Span | None = None
    never_ready: bool = False
    restarts: int | None = None
    node: str = ""
    owner: tuple[str, str] | None = None  # (kind, workload) from kube_pod_info's controller labels
    services: tuple[str, ...] = ()
    readiness_failures: int | None = None
    with_node_seconds: float = 0.0
    node_reported_seconds: float | None = None  # of its unready time, how much its node's kubelet answered

    @property
    def unready_seconds(self) -> float:
        # A pod not read in detail has its count of not-ready steps and no episodes: no moment is invented for it.
        return sum(span.seconds for span in self.unready) if self.detailed else self.steps * self.step

    @property
    def startup_seconds(self) -> float:
        return self.startup.seconds if self.startup is not None else 0.0


@dataclass(frozen=True)
class ReadinessCheck:
    """Time not ready per pod, its episodes, whether it restarted, and its Service and node."""

    policy: ReadinessPolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        return (coverage.kube_state_metrics(self.policy.ksm_job),)

    def step(self, window: Window, interval: int) -> int:
        """The evaluation step: the scrape interval, coarser only when the window would exceed the point limit."""
        return step_for(window, interval)

    def ready_expression(self, step: int, pods: str = "", lookback: int = 0) -> str:
        """Per running pod, 1 when ready and 0 when not, read one scrape per step; ``pods`` narrows the selector.

        Each step reads back one scrape (``lookback``: the coarsest interval of the window, `checks.resolution`).
        """
        narrowed = READY[:-1] + f", {pods}}}" if pods else READY
        # One scrape back, on every backend (see `checks.promql.open_range`).
        look = f"[{open_range(max(step, lookback))}]"
        return (
            f"(max by (namespace, pod) (last_over_time({narrowed}{look})) unless on (namespace, pod) "
            f"(max by (namespace, pod) (last_over_time(kube_pod_status_phase"
            f'{{phase=~"Succeeded|Failed|Pending"}}{look})) == 1))'
        )

    def queries(
        self, window: Window, interval: int = 30, pods: Sequence[tuple[str, str]] = (), lookback: int = 0
    ) -> dict[str, str]:
        """The PromQL this check sends, by purpose; ``pods`` (namespace, pod) narrow the detail queries to them."""
        rng = window.promql_range()
        step = self.step(window, interval)
        look = open_range(max(step, lookback))
        matchers = ""
        targets = ""
        if pods:
            namespaces, names = any_of(p[0] for p in pods), any_of(p[1] for p in pods)
            matchers = f'namespace=~"{namespaces}", pod=~"{names}"'
            targets = f', namespace=~"{namespaces}", targetref_name=~"{names}"'
        narrowed = f"{{{matchers}}}" if matchers else ""
        slices = service_of_slice_expression(f"[{rng}]")
        return {
            "ksm_up": kube_state_metrics_up_query(self.policy.ksm_job, window),
            "not_ready": (
                f"count_over_time(({self.ready_expression(step, lookback=lookback)} == 0)"
                f"[{open_range(window.seconds)}:{step}s]) > 0"
            ),
            "detail": self.ready_expression(step, matchers, lookback),
            "restarts": (
                "sum by (namespace, pod) (max_over_time(kube_pod_container_status_restarts_total"
                f"{narrowed}[{rng}]) - min_over_time(kube_pod_container_status_restarts_total{narrowed}[{rng}]))"
            ),
            # With the pod's controller: its kind and workload, as a reader names it (`checks.error_lines.owned_by`).
            "nodes": (
                "max by (namespace, pod, node, created_by_kind, created_by_name) "
                f"(last_over_time(kube_pod_info{narrowed}[{rng}]))"
            ),
            "services": (
                "max by (namespace, service, pod) (label_replace(last_over_time(kube_endpointslice_endpoints"
                f'{{targetref_kind="Pod"{targets}}}[{rng}]), "pod", "$1", "targetref_name", "(.+)") '
                f"* on (namespace, endpointslice) group_left(service) {slices})"
            ),
            "node_not_ready": f"(max by (node) (last_over_time({_NODE_READY}[{look}])) == 0)",
            "node_condition_present": f"count(count_over_time({_NODE_READY}[{rng}]))",
            # Without node conditions: whether each node's kubelet answered, step by step.
            "node_targets": (
                f'max by (instance) (max_over_time(up{{job=~"{self.policy.node_liveness_jobs.replace(chr(34), "")}"}}'
                f"[{look}])) >= 1"
            ),
            # The failed counts, plus one marker row saying whether the prober is scraped at all.
            "probes": (
                # One series per container first: an HA pair of scrapers writes each probe counter twice.
                "sum by (namespace, pod) (max by (namespace, pod, container) "
                f"({counted_increase(READINESS_FAILED, window.seconds)})) > 0 "
                "or label_replace(count(count_over_time("
                f'prober_probe_total{{probe_type="Readiness"}}[{rng}])), "pod", "{_OBSERVED}", "", "")'
            ),
        }

    async def resolution(self, sources: Sources, window: Window) -> Resolution:
        """The scrape interval of the readiness series (or the policy's, when it sets one)."""
        policy = self.policy
        return await resolve(sources, window, READY, policy.scrape_interval_seconds, policy.assumed_interval_seconds)

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        missing = await kube_state_metrics_missing(sources, window, NAME, "readiness", self.policy.ksm_job)
        if missing is not None:
            return missing
        resolution = await self.resolution(sources, window)
        step = self.step(window, resolution.seconds)
        queries = self.queries(window, resolution.seconds, lookback=resolution.look)
        try:
            not_ready, probes, node_rows, node_present = await asyncio.gather(
                sources.metrics.instant(queries["not_ready"], window.end),
                sources.metrics.instant(queries["probes"], window.end),
                sources.metrics.range(
                    queries["node_not_ready"], window.start + timedelta(seconds=step), window.end, step
                ),
                sources.metrics.instant(queries["node_condition_present"], window.end),
            )
        except SourceError as exc:
            return unknown(NAME, "readiness not checked: the metrics backend did not answer", str(exc))
        if not not_ready:
            absent = await family_missing(sources, window, NAME, "readiness", "kube_pod_status_ready")
            if absent is not None:
                return absent
        pods = {
            (sample.labels.get("namespace", ""), sample.labels.get("pod", "")): _Pod(
                sample.labels.get("namespace", ""), sample.labels.get("pod", ""), round(sample.value), step
            )
            for sample in not_ready
        }
        probes_observed = any(s.labels.get("pod") == _OBSERVED and s.value > 0 for s in probes)
        for sample in probes:
            key = (sample.labels.get("namespace", ""), sample.labels.get("pod", ""))
            if key in pods:
                pods[key].readiness_failures = round(sample.value)
        if probes_observed:
            for item in pods.values():
                if item.readiness_failures is None:
                    item.readiness_failures = 0
        node_spans = {series.labels.get("node", ""): runs([t for t, _ in series.points], step) for series in node_rows}
        detail_error = await self._detail(
            sources, window, step, pods, liveness=not node_present, lookback=resolution.look
        )
        return self._finding(
            window, step, resolution, pods, node_spans, probes_observed, bool(node_present), detail_error
        )

    async def _detail(
        self,
        sources: Sources,
        window: Window,
        step: int,
        pods: dict[tuple[str, str], _Pod],
        liveness: bool,
        lookback: int = 0,
    ) -> str:
        """Episodes, restarts, node and Service of the worst pods; the error that prevented it, or "".

        With ``liveness`` (no node conditions in the cluster), also whether their nodes kept reporting.
        """
        worst = sorted(pods.values(), key=lambda item: (-item.steps, item.namespace, item.pod))[
            : self.policy.detail_pods
        ]
        if not worst:
            return ""
        asked = {(p.namespace, p.pod) for p in worst}
        queries = self.queries(window, step, sorted(asked), lookback)
        try:
            detail, restarts, nodes, services = await asyncio.gather(
                sources.metrics.range(queries["detail"], window.start + timedelta(seconds=step), window.end, step),
                sources.metrics.instant(queries["restarts"], window.end),
                sources.metrics.instant(queries["nodes"], window.end),
                sources.metrics.instant(queries["services"], window.end),
            )
        except SourceError as exc:
            return str(exc)
        for series in detail:
            item = pods.get((series.labels.get("namespace", ""), series.labels.get("pod", "")))
            if item is not None and (item.namespace, item.pod) in asked:
                _episodes(item, series, window, step)
        for sample in restarts:
            item = pods.get((sample.labels.get("namespace", ""), sample.labels.get("pod", "")))
            if item is not None:
                item.restarts = round(sample.value)
        for item in worst:
            if item.restarts is None and item.detailed:
                item.restarts = 0  # no restart counter moved: kube-state-metrics vouches for it (ksm was up)
        for sample in nodes:
            item = pods.get((sample.labels.get("namespace", ""), sample.labels.get("pod", "")))
            if item is not None:
                item.node = sample.labels.get("node", "")
                labels = sample.labels
                item.owner = owned_by(labels.get("created_by_kind", ""), labels.get("created_by_name", ""), item.pod)
        by_pod: dict[tuple[str, str], set[str]] = defaultdict(set)
        for sample in services:
            by_pod[(sample.labels.get("namespace", ""), sample.labels.get("pod", ""))].add(
                sample.labels.get("service", "")
            )
        for key, names in by_pod.items():
            if key in pods:
                pods[key].services = tuple(sorted(names))
        if liveness and any(item.node and item.unready for item in worst):
            # On failure the pods keep no liveness fact: the explanation then says the node's state cannot be told.
            with contextlib.suppress(SourceError):
                await self._node_liveness(sources, window, step, queries, worst)
        return ""

    async def _node_liveness(
        self, sources: Sources, window: Window, step: int, queries: Mapping[str, str], worst: Sequence[_Pod]
    ) -> None:
        """How much of each pod's unready time its node's kubelet answered (up = 1)."""
        targets, named = await asyncio.gather(
            sources.metrics.range(queries["node_targets"], window.start + timedelta(seconds=step), window.end, step),
            node_names(sources, window),  # kubelets scraped by IP are matched to their node by kube_node_info
        )
        alive: dict[str, set[float]] = defaultdict(set)
        for series in targets:
            alive[named(series.labels.get("instance", ""))].update(moment for moment, _ in series.points)
        spans = {node: runs(sorted(moments), step) for node, moments in alive.items()}
        for item in worst:
            if item.node and item.unready:
                item.node_reported_seconds = sum(
                    a.shared_seconds(b) for a in item.unready for b in spans.get(item.node, [])
                )

    def _finding(
        self,
        window: Window,
        step: int,
        resolution: Resolution,
        pods: Mapping[tuple[str, str], _Pod],
        node_spans: Mapping[str, list[Span]],
        probes_observed: bool,
        node_condition_present: bool,
        detail_error: str,
    ) -> Finding:
        policy = self.policy
        for item in pods.values():
            spans = node_spans.get(item.node, [])
            item.with_node_seconds = sum(a.shared_seconds(b) for a in item.unready for b in spans)
        slow = policy.startup_minutes * 60

        def counted(item: _Pod) -> float:
            return item.unready_seconds if not item.never_ready else item.startup_seconds

        flagged = sorted(
            (
                item
                for item in pods.values()
                if item.unready_seconds >= policy.warn_minutes * 60 or item.startup_seconds >= slow
            ),
            key=lambda item: (-counted(item), item.namespace, item.pod),
        )
        worst = max((counted(item) for item in flagged), default=0.0)
        level = 2 if worst >= policy.crit_minutes * 60 else 1 if flagged else 0
        status, penalty = grade(level, policy.warn_penalty, policy.crit_penalty)
        observed = ["kube_pod_status_ready"]
        unobserved: list[str] = []
        if probes_observed:
            observed.append("prober_probe_total")
        else:
            unobserved.append(
                "prober_probe_total: the kubelet's /metrics/probes is not scraped (failed probes not counted)"
            )
        if node_condition_present:
            observed.append("kube_node_status_condition")
        else:
            unobserved.append("kube_node_status_condition: no node conditions (nodes' readiness not seen)")
        if detail_error:
            unobserved.append(f"episodes, restarts, nodes and Services of the pods: {detail_error}")
        events = [
            Event("node_not_ready", {"node": node}, span)
            for node, spans in sorted(node_spans.items())
            for span in spans
        ]
        evidence: list[str] = []
        for node, spans in sorted(node_spans.items()):
            total = sum(span.seconds for span in spans)
            evidence.append(
                f"node {node} NotReady {fmt_duration(total)}: "
                + ", ".join(f"{local_time(span.start, window)}–{local_time(span.end, window)}" for span in spans[:4])
            )
        if not flagged:
            summary = "every running pod stayed ready"
            if pods:
                summary = f"no pod was out of service for {fmt_duration(policy.warn_minutes * 60)} or more"
                brief = sorted(pods.values(), key=lambda item: (-item.steps, item.namespace, item.pod))[:3]
                evidence.append(
                    "briefly not ready (start-ups included): "
                    + ", ".join(f"{item.namespace}/{item.pod} {fmt_duration(item.steps * step)}" for item in brief)
                    + (f" and {len(pods) - 3} more" if len(pods) > 3 else "")
                )
            return Finding(
                name=NAME,
                status=status,
                penalty=penalty,
                value=0,
                summary=summary,
                evidence=[*evidence, resolution.bound()] if pods else evidence,
                observed=tuple(observed),
                unobserved=tuple(unobserved),
                events=tuple(events),
            )
        offenders = [self._offender(item, step) for item in flagged[: policy.top]]
        summary = _describe(flagged[0], window)
        if len(flagged) > 1:
            summary += f"; {len(flagged)} pods in all"
        evidence[:0] = [f"then {_describe(item, window)}" for item in flagged[1 : policy.top]]
        services: dict[tuple[str, str], list[_Pod]] = defaultdict(list)
        for item in flagged:
            for service in item.services:
                services[(item.namespace, service)].append(item)
        for (namespace, service), members in sorted(services.items(), key=lambda kv: -len(kv[1]))[:3]:
            shortest, longest = (fmt_duration(f(counted(item) for item in members)) for f in (min, max))
            spread = shortest if shortest == longest else f"{shortest} to {longest}"
            evidence.append(
                f"Service {namespace}/{service}: {len(members)} pod(s) not ready, {spread}"
                + (" each" if len(members) > 1 else "")
            )
        undetailed = [item for item in flagged if not item.detailed]
        if undetailed:
            evidence.append(
                f"{len(undetailed)} pod(s) counted without their episodes (start-up included): only the "
                f"{policy.detail_pods} worst are read in detail"
            )
        evidence.append(resolution.bound() if step == resolution.seconds else f"measured every {step} s")
        return Finding(
            name=NAME,
            status=status,
            penalty=penalty,
            value=len(flagged),
            summary=summary,
            offenders=[replace(one, look=metrics_look(_LOOK, one.labels, _LOOK_KEYS)) for one in offenders],
            hint=_hint(flagged),
            evidence=evidence,
            observed=tuple(observed),
            unobserved=tuple(unobserved),
            events=tuple(events),
        )

    def _offender(self, item: _Pod, step: int) -> Offender:
        facts: dict[str, Quantity] = {
            "not_ready_seconds": Quantity(item.unready_seconds, Unit.SECONDS),
            "resolution_seconds": Quantity(step, Unit.SECONDS),
        }
        if item.detailed:
            facts["episodes"] = Quantity(len(item.unready), Unit.COUNT)
            facts["longest_seconds"] = Quantity(max((s.seconds for s in item.unready), default=0.0), Unit.SECONDS)
            facts["startup_seconds"] = Quantity(item.startup_seconds, Unit.SECONDS)
            if item.node:
                facts["with_node_not_ready_seconds"] = Quantity(item.with_node_seconds, Unit.SECONDS)
            if item.node_reported_seconds is not None:
                facts["node_reported_seconds"] = Quantity(item.node_reported_seconds, Unit.SECONDS)
        if item.restarts is not None:
            facts["restarts"] = Quantity(item.restarts, Unit.COUNT)
        if item.readiness_failures is not None:
            facts["readiness_failures"] = Quantity(item.readiness_failures, Unit.COUNT)
        labels = {"namespace": item.namespace, "pod": item.pod, "state": _state(item)}
        if item.owner is not None:
            labels["kind"], labels["workload"] = item.owner
        if item.node:
            labels["node"] = item.node
        if item.services:
            labels["service"] = ",".join(item.services)
        spans = tuple(item.unready) + ((item.startup,) if item.startup is not None and item.never_ready else ())
        return Offender(labels=labels, value=item.unready_seconds or item.startup_seconds, facts=facts, spans=spans)


def _episodes(item: _Pod, series: RangeSeries, window: Window, step: int) -> None:
    """Split one pod's ready/not-ready steps into start-up and not-ready episodes."""
    item.detailed = True
    points = sorted(series.points)
    if not points:
        return
    first_moment = points[0][0]
    created_in_window = first_moment - step > window.start.timestamp() + step
    ever_ready = any(value >= 1 for _, value in points)
    episodes = runs([t for t, value in points if value < 1], step)
    if not ever_ready and created_in_window:
        item.never_ready = True
        item.startup = episodes[0] if episodes else None
        return
    if episodes and created_in_window and episodes[0].start <= first_moment - step:
        item.startup = episodes.pop(0)
    item.unready = episodes


def _state(item: _Pod) -> str:
    if not item.detailed:
        return "not ready"
    if item.never_ready:
        return "never ready"
    if item.unready:
        return "not ready"
    return "slow start"


def _describe(item: _Pod, window: Window) -> str:
    who = f"{item.namespace}/{item.pod}"
    if item.never_ready:
        text = f"{who} never became ready ({fmt_duration(item.startup_seconds)} since it started"
        if item.restarts:
            text += ", restarting: see restarts"
        return text + ")"
    if item.detailed and not item.unready:
        return f"{who} took {fmt_duration(item.startup_seconds)} to become ready"
    text = f"{who} not ready {fmt_duration(item.unready_seconds)}"
    if item.detailed and len(item.unready) > 1:
        text += f" in {len(item.unready)} episodes"
    if item.detailed:
        text += f" from {local_time(item.unready[0].start, window)}"
    if item.restarts == 0:
        text += " without a restart"
    elif item.restarts:
        # The count is the restarts check's (counted from each pod's first scrape); saying it twice invites a mismatch.
        text += " with restarts (see restarts)"
    if item.readiness_failures:
        text += f", {fmt_int(item.readiness_failures)} failed readiness probes"
    if item.with_node_seconds >= item.unready_seconds / 2 and item.with_node_seconds > 0:
        text += f", node {item.node} NotReady meanwhile"
    return text


def _hint(flagged: Sequence[_Pod]) -> str:
    """Where to look, for the kinds of unreadiness actually seen."""
    hints = ["A pod not ready is out of its Service."]
    if any(item.with_node_seconds > 0 for item in flagged):
        hints.append("Its node stopped reporting: the node's kubelet and container runtime at that time.")
    if any((item.unready or not item.detailed) and item.with_node_seconds == 0 for item in flagged):
        hints.append(
            "Its readiness probe failed: `kubectl describe pod` shows the last failures; compare the probe's timeout "
            "with the container's latency under load (cpu_throttling) and with its dependencies."
        )
    if any(item.never_ready or (item.startup is not None and not item.unready) for item in flagged):
        hints.append(
            "Never (or slowly) ready after it started: `kubectl logs --previous`, image pulls, init containers."
        )
    return " ".join(hints)

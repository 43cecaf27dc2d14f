"""restarts: container restarts with their reasons, and failed liveness probes.

Signal (kube-state-metrics and the kubelet's prober, queries.md §5.1, §5.2):

* restarts per container, portable PromQL (the positive steps of the counter, so a pod created in the window is not
  counted for the restarts it had before its first scrape — VictoriaMetrics' ``increase()`` would)::

      sum by (namespace, pod, container) (sum_over_time(
          max by (namespace, pod, container) (clamp_min(restarts_total - (restarts_total offset 1m
                                                 or min_over_time(restarts_total[1m])), 0))[<window>:1m]))

* the reason of each restart, with the freshness-checked join of §1.2 B: the last-terminated reason counts only when
  its series is as fresh as the restart counter, because the old ``reason`` series lingers without a staleness
  marker when the reason changes (07-20: OOMKilled at 06:15, then Error at 17:03 — two restarts, two reasons)::

      sum by (namespace, pod, container, reason) (sum_over_time((
          (max by (namespace, pod, container, reason) (timestamp(last_terminated_reason{reason=~".+"}))
             >= bool on (namespace, pod, container) group_left()
             max by (namespace, pod, container) (timestamp(restarts_total)))
          * on (namespace, pod, container) group_left()
          max by (namespace, pod, container) (<the restart steps above>)
      )[<window>:1m]))

* failed liveness probes, from the kubelet's ``/metrics/probes`` (when it is scraped; few clusters do), counted
  exactly (`checks.promql.counted_increase`: the counter appears at its first failure, at 1, which Prometheus'
  ``increase()`` would not count, and it would extrapolate the rest to 4.0068 — 07-20 had 5)::

      max by (namespace, pod, container) (<rise of prober_probe_total{probe_type="Liveness", result="failed"}
                                           minute by minute over the window>) > 0

Init containers have counters of their own (``kube_pod_init_container_status_restarts_total`` and its
last-terminated reason): a pod stuck in ``Init:CrashLoopBackOff`` never moves its containers' counter, so the same
questions are asked of the init families, and such a container is named "(init container)". A pod's init and app
containers never share a name, so one key per container holds both.

Pods that were not ready without restarting are the ``readiness`` check's: a restart counter says nothing about
them, so this check never speaks for them.

Thresholds: any restart is a WARN — each is a moment the container did not serve (seed 001: the feed aggregator's
OOM kill and its liveness kill). Five restarts of one container in the window is CRIT: that is a crash loop (the
kubelet's back-off reaches minutes by then), not an incident. Liveness failures are shown, not graded: the restart
they cause is what is counted.

Default penalties are 0: the seed rule grades (OOM kills cost their point in ``oom_kills``); this check explains.
Without kube-state-metrics (no ``up`` for its job, or never 1): UNKNOWN.

Cost: the restart and reason subqueries step through the window minute by minute, so they are asked only about the
containers whose counter changed (`checks.restarted`) — a dozen on a normal day, not the cluster's thousands.

Each restarted pod is named by its controller, one narrowed query of ``kube_pod_info``'s ``created_by_kind`` and
``created_by_name`` (`checks.error_lines.owned_by`): a bare pod is said to be one, not taken for a StatefulSet's.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping, Sequence
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
    Unit,
    Window,
    fmt_int,
    grade,
    metrics_look,
    unknown,
)
from .error_lines import SAID_KINDS, owned_by
from .presence import family_missing, kube_state_metrics_missing, kube_state_metrics_up_query
from .promql import (
    CONTAINER_LABELS,
    MAX_NARROWED,
    ContainerKey,
    any_of,
    container_key,
    counted_increase,
    open_range,
    restart_steps,
    with_matchers,
)
from .restarted import (
    INIT_RESTARTS_TOTAL,
    RESTARTS_TOTAL,
    narrowing,
    restarted_containers,
    restarted_query,
)

NAME = "restarts"
# Where a reader sees one offender: its own series over the window (`checks.contract.Look`).
_LOOK = "max by (namespace, pod, container) (kube_pod_container_status_restarts_total{})"
_INIT_LOOK = "max by (namespace, pod, container) (kube_pod_init_container_status_restarts_total{})"
_LOOK_KEYS = ("namespace", "pod", "container")

# What this check reads, for `digest doctor` (the queries below are what it sends).
INPUTS: tuple[Input, ...] = (
    Input("series", "up", "kube-state-metrics scraped", policy_key="restarts.ksm_job", by_job=True),
    Input("series", "kube_pod_container_status_restarts_total", "restarts", fix="kube-state-metrics' pod metrics"),
    Input(
        "series",
        "kube_pod_container_status_last_terminated_reason",
        "why they restarted",
        required=False,
        fix="kube-state-metrics' pod metrics",
    ),
    Input(
        "series",
        "kube_pod_init_container_status_restarts_total",
        "init containers' restarts (Init:CrashLoopBackOff)",
        required=False,
        fix="kube-state-metrics' pod metrics",
    ),
    Input(
        "series",
        "kube_pod_init_container_status_last_terminated_reason",
        "why init containers restarted",
        required=False,
        fix="kube-state-metrics' pod metrics",
    ),
    Input(
        "series",
        "prober_probe_total",
        "failed liveness probes",
        required=False,
        fix="the kubelets' /metrics/probes scraped",
    ),
)
LIVENESS_FAILED = 'prober_probe_total{probe_type="Liveness", result="failed"}'
_REASON = 'kube_pod_container_status_last_terminated_reason{reason=~".+"}'
_INIT_REASON = 'kube_pod_init_container_status_last_terminated_reason{reason=~".+"}'


@dataclass(frozen=True)
class RestartsPolicy:
    """What a crash loop is, which job is kube-state-metrics, and what restarts cost (nothing by default)."""

    enabled: bool = True
    crash_loop_restarts: int = 5
    warn_penalty: int = 0
    crit_penalty: int = 0
    ksm_job: str = ".*kube-state-metrics.*"
    top: int = 5


@dataclass
class _Container:
    restarts: int = 0
    reasons: dict[str, int] | None = None
    liveness_failures: int = 0


@dataclass(frozen=True)
class RestartsCheck:
    """Restarts and their reasons per container, and failed liveness probes."""

    policy: RestartsPolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        return (coverage.kube_state_metrics(self.policy.ksm_job),)

    def queries(self, window: Window, matchers: str | None = None, init: bool = False) -> dict[str, str]:
        """The PromQL this check sends, by purpose; ``matchers`` narrow the per-minute subqueries (`restarted`).

        ``init``: the same questions of the init containers' own families (``kube_pod_init_container_status_*``).
        """
        steps = open_range(window.seconds)  # (start, end]: not the previous day's last minute
        restarts = with_matchers(INIT_RESTARTS_TOTAL if init else RESTARTS_TOTAL, matchers or "")
        reason_selector = with_matchers(_INIT_REASON if init else _REASON, matchers or "")
        # `max by` on every side: two kube-state-metrics replicas scraped side by side must neither double the
        # count nor make the join many-to-many.
        by = "max by (namespace, pod, container)"
        step = restart_steps(restarts)
        fresh_reason = (
            f"max by (namespace, pod, container, reason) (timestamp({reason_selector})) "
            f">= bool on (namespace, pod, container) group_left() {by} (timestamp({restarts}))"
        )
        return {
            "ksm_up": kube_state_metrics_up_query(self.policy.ksm_job, window),
            "restarted": restarted_query(window, INIT_RESTARTS_TOTAL if init else RESTARTS_TOTAL),
            "restarts": f"sum by (namespace, pod, container) (sum_over_time({step}[{steps}:1m])) > 0",
            "reasons": (
                "sum by (namespace, pod, container, reason) (sum_over_time(("
                f"({fresh_reason}) * on (namespace, pod, container) group_left() {step}"
                f")[{steps}:1m])) > 0"
            ),
            # `max`, not `sum`: a container has one liveness probe, and an HA pair of scrapers writes it twice.
            "probes": f"max by (namespace, pod, container) ({counted_increase(LIVENESS_FAILED, window.seconds)}) > 0",
        }

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        queries = self.queries(window)
        missing = await kube_state_metrics_missing(sources, window, NAME, "restarts", self.policy.ksm_job)
        if missing is not None:
            return missing
        try:
            (restarts, reasons), (init_restarts, init_reasons), probes = await asyncio.gather(
                self._restarts(sources, window),
                self._restarts(sources, window, init=True),
                sources.metrics.instant(queries["probes"], window.end),
            )
        except SourceError as exc:
            return unknown(NAME, "restarts not checked: the metrics backend did not answer", str(exc))
        if not restarts and not init_restarts:
            absent = await family_missing(sources, window, NAME, "restarts", RESTARTS_TOTAL)
            if absent is not None:
                return absent
        # A pod's init and app containers never share a name (the API refuses it): one key space, the init ones marked.
        init = {container_key(sample.labels) for sample in init_restarts}
        owners = await self._owners(sources, window, [*restarts, *init_restarts])
        return self._finding([*restarts, *init_restarts], [*reasons, *init_reasons], probes, init, owners)

    async def _owners(
        self, sources: Sources, window: Window, restarts: Sequence[Sample]
    ) -> dict[_Pod, tuple[str, str]]:
        """The kind and workload of the pods that restarted (the most restarted first, at most `MAX_NARROWED`).

        One instant query of ``kube_pod_info``'s controller labels, only when some container restarted. Unanswered,
        the pods are named from their names, as before: who owns a pod is a name's detail, not the finding.
        """
        worst = sorted(restarts, key=lambda sample: -sample.value)
        pods = list(dict.fromkeys((s.labels.get("namespace", ""), s.labels.get("pod", "")) for s in worst))
        pods = pods[:MAX_NARROWED]
        if not pods:
            return {}
        namespaces, names = zip(*pods, strict=True)
        query = (
            "max by (namespace, pod, created_by_kind, created_by_name) (last_over_time(kube_pod_info{"
            f'namespace=~"{any_of(namespaces)}", pod=~"{any_of(names)}"}}[{open_range(window.seconds)}]))'
        )
        try:
            samples = await sources.metrics.instant(query, window.end)
        except SourceError:
            return {}
        owners: dict[_Pod, tuple[str, str]] = {}
        for sample in samples:
            pod = (sample.labels.get("namespace", ""), sample.labels.get("pod", ""))
            labels = sample.labels
            owner = owned_by(labels.get("created_by_kind", ""), labels.get("created_by_name", ""), pod[1])
            if owner is not None:
                owners[pod] = owner
        return owners

    async def _restarts(
        self, sources: Sources, window: Window, init: bool = False
    ) -> tuple[list[Sample], list[Sample]]:
        """Restarts and their reasons, asked only about the containers whose counter changed."""
        containers = await restarted_containers(sources, window, INIT_RESTARTS_TOTAL if init else RESTARTS_TOTAL)
        if not containers:
            return [], []
        queries = self.queries(window, narrowing(containers), init)
        restarts, reasons = await asyncio.gather(
            sources.metrics.instant(queries["restarts"], window.end),
            sources.metrics.instant(queries["reasons"], window.end),
        )
        return restarts, reasons

    def _finding(
        self,
        restarts: Sequence[Sample],
        reasons: Sequence[Sample],
        probes: Sequence[Sample],
        init: frozenset[ContainerKey] | set[ContainerKey] = frozenset(),
        owners: Mapping[_Pod, tuple[str, str]] | None = None,
    ) -> Finding:
        policy = self.policy
        containers: dict[tuple[str, str, str], _Container] = defaultdict(_Container)
        for sample in restarts:
            containers[container_key(sample.labels)].restarts += round(sample.value)
        for sample in reasons:
            container = containers[container_key(sample.labels)]
            if container.reasons is None:
                container.reasons = {}
            reason = sample.labels.get("reason", "?")
            container.reasons[reason] = container.reasons.get(reason, 0) + round(sample.value)
        for sample in probes:
            containers[container_key(sample.labels)].liveness_failures += round(sample.value)

        flagged = sorted(
            (key for key, container in containers.items() if container.restarts),
            key=lambda key: (-containers[key].restarts, key),
        )
        most = max((container.restarts for container in containers.values()), default=0)
        level = 2 if most >= policy.crash_loop_restarts else 1 if flagged else 0
        status, penalty = grade(level, policy.warn_penalty, policy.crit_penalty)
        offenders = [
            Offender(
                labels={
                    **dict(zip(CONTAINER_LABELS, key, strict=True)),
                    "reasons": _reasons(containers[key]),
                    **({"init": "true"} if key in init else {}),
                    **_owner_labels((owners or {}).get((key[0], key[1]))),
                },
                value=containers[key].restarts,
                facts={
                    "restarts": Quantity(containers[key].restarts, Unit.COUNT),
                    # Only when some were counted: without the prober's metrics, none seen is not none.
                    **(
                        {"liveness_failures": Quantity(containers[key].liveness_failures, Unit.COUNT)}
                        if containers[key].liveness_failures
                        else {}
                    ),
                },
            )
            for key in flagged[: policy.top]
        ]
        total_restarts = sum(container.restarts for container in containers.values())
        evidence = [f"then {_describe(offender)}" for offender in offenders[1:]]
        liveness = sorted(
            (
                (container.liveness_failures, key)
                for key, container in containers.items()
                if container.liveness_failures
            ),
            reverse=True,
        )
        if liveness:
            evidence.append(
                "failed liveness probes: "
                + ", ".join(f"{key[0]}/{key[1]}/{key[2]} {fmt_int(count)}" for count, key in liveness[: policy.top])
            )
        observed = ("kube_pod_container_status_restarts_total", "kube_pod_container_status_last_terminated_reason")
        if not offenders:
            return Finding(
                name=NAME,
                status=status,
                penalty=penalty,
                value=0,
                summary="no container restarted",
                evidence=evidence,
                observed=observed,
            )
        summary = _describe(offenders[0])
        if total_restarts > offenders[0].value:
            summary += f"; {fmt_int(total_restarts)} restarts in the cluster"
        return Finding(
            name=NAME,
            status=status,
            penalty=penalty,
            value=total_restarts,
            summary=summary,
            offenders=[
                replace(one, look=metrics_look(_INIT_LOOK if "init" in one.labels else _LOOK, one.labels, _LOOK_KEYS))
                for one in offenders
            ],
            hint="For each restart reason: OOMKilled → compare the working set with the limit (memory_pressure); "
            "Error → the container's last logs (kubectl logs --previous) and its liveness probe.",
            evidence=evidence,
            observed=observed,
        )


def _reasons(container: _Container) -> str:
    """The restart reasons, most frequent first; restarts without a fresh reason are named as such."""
    reasons = dict(container.reasons or {})
    missing = container.restarts - sum(reasons.values())
    if missing > 0:
        reasons["reason unknown"] = missing
    return ", ".join(reason for reason, _ in sorted(reasons.items(), key=lambda item: (-item[1], item[0])))


_Pod = tuple[str, str]  # (namespace, pod)


def _owner_labels(owner: tuple[str, str] | None) -> dict[str, str]:
    """The pod's kind and workload as offender labels (none when kube_pod_info did not say)."""
    return {"kind": owner[0], "workload": owner[1]} if owner else {}


def _describe(offender: Offender) -> str:
    labels = offender.labels
    restarts = round(offender.value)
    word = "restart" if restarts == 1 else "restarts"
    # An init container that crashes keeps its pod Pending (Init:CrashLoopBackOff): no app container ever starts.
    init = " (init container)" if labels.get("init") else ""
    said = SAID_KINDS.get(labels.get("kind", ""))
    init += f" ({said})" if said else ""
    return (
        f"{labels['namespace']}/{labels['pod']}/{labels['container']}{init}: {fmt_int(restarts)} {word} "
        f"({labels['reasons']})"
    )

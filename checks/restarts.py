"""restarts: container restarts with their reasons, failed readiness probes, and time spent not ready.

Signal (kube-state-metrics and the kubelet's prober, queries.md §5.1, §5.2):

* restarts per container, portable PromQL (the positive steps of the counter, so a pod created in the window is not
  counted for the restarts it had before its first scrape — VictoriaMetrics' ``increase()`` would)::

      sum by (namespace, pod, container) (sum_over_time(
          max by (namespace, pod, container) (clamp_min(restarts_total - restarts_total offset 1m, 0))[<window>:1m]))

* the reason of each restart, with the freshness-checked join of §1.2 B: the last-terminated reason counts only when
  its series is as fresh as the restart counter, because the old ``reason`` series lingers without a staleness
  marker when the reason changes (07-20: OOMKilled at 06:15, then Error at 17:03 — two restarts, two reasons)::

      sum by (namespace, pod, container, reason) (sum_over_time((
          (max by (namespace, pod, container, reason) (timestamp(last_terminated_reason{reason=~".+"}))
             >= bool on (namespace, pod, container) group_left()
             max by (namespace, pod, container) (timestamp(restarts_total)))
          * on (namespace, pod, container) group_left()
          max by (namespace, pod, container) (clamp_min(restarts_total - restarts_total offset 1m, 0))
      )[<window>:1m]))

* failed probes, from the kubelet's ``/metrics/probes`` (when it is scraped; its absence only means readiness was
  not observed)::

      sum by (namespace, pod, container, probe_type)
        (increase(prober_probe_total{probe_type=~"Readiness|Liveness", result="failed"}[<window>])) > 0

* minutes not ready per pod: ``kube_pod_status_ready{condition="false"}`` at 1-minute steps, leaving out pods whose
  phase is Succeeded, Failed or Pending (completed Jobs are not ready by design, a pending pod is not running yet).
  The phase is excluded rather than ``Running`` required, so that a kube-state-metrics without the phase family
  (or the corpus) still shows not-ready pods.

Thresholds: any restart or failed readiness probe is a WARN — each is a moment the container did not serve (seed
000: the four shop/api pods failed 1,295 readiness probes under a 500m CPU limit and left the EndpointSlice seven
times; seed 001: the feed aggregator's OOM kill and its liveness kill). Five restarts of one container in the window
is CRIT: that is a crash loop (the kubelet's back-off reaches minutes by then), not an incident. Liveness failures and
minutes not ready are shown, not graded: the restart they cause is what is counted.

Default penalties are 0: the seed rule grades (OOM kills cost their point in ``oom_kills``); this check explains.
Without kube-state-metrics (no ``up`` for its job, or never 1): UNKNOWN.

Cost: the restart and reason subqueries step through the window minute by minute, so they are asked only about the
containers whose counter changed (`checks.restarted`) — a dozen on a normal day, not the cluster's thousands.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from checks import coverage
from checks.contract import (
    Finding,
    Need,
    Offender,
    Sample,
    SourceError,
    Sources,
    Window,
    fmt_int,
    grade,
    unknown,
)
from checks.presence import family_missing, kube_state_metrics_missing, kube_state_metrics_up_query
from checks.promql import CONTAINER_LABELS, container_key, with_matchers
from checks.restarted import RESTARTS_TOTAL, narrowing, restarted_containers, restarted_query

NAME = "restarts"
_PROBES_OBSERVED = "__observed__"


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
    readiness_failures: int = 0
    liveness_failures: int = 0


@dataclass(frozen=True)
class RestartsCheck:
    """Restarts and their reasons per container, failed probes, and minutes not ready per pod."""

    policy: RestartsPolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        return (coverage.kube_state_metrics(self.policy.ksm_job),)

    def queries(self, window: Window, matchers: str | None = None) -> dict[str, str]:
        """The PromQL this check sends, by purpose; ``matchers`` narrow the per-minute subqueries (`restarted`)."""
        rng = window.promql_range()
        restarts = with_matchers(RESTARTS_TOTAL, matchers or "")
        reason_selector = with_matchers(
            'kube_pod_container_status_last_terminated_reason{reason=~".+"}', matchers or ""
        )
        # `max by` on every side: two kube-state-metrics replicas scraped side by side must neither double the
        # count nor make the join many-to-many.
        by = "max by (namespace, pod, container)"
        step = f"{by} (clamp_min({restarts} - {restarts} offset 1m, 0))"
        fresh_reason = (
            f"max by (namespace, pod, container, reason) (timestamp({reason_selector})) "
            f">= bool on (namespace, pod, container) group_left() {by} (timestamp({restarts}))"
        )
        return {
            "ksm_up": kube_state_metrics_up_query(self.policy.ksm_job, window),
            "restarted": restarted_query(window),
            "restarts": f"sum by (namespace, pod, container) (sum_over_time({step}[{rng}:1m])) > 0",
            "reasons": (
                "sum by (namespace, pod, container, reason) (sum_over_time(("
                f"({fresh_reason}) * on (namespace, pod, container) group_left() {step}"
                f")[{rng}:1m])) > 0"
            ),
            # The failed counts, plus one marker row saying whether the prober is scraped at all.
            "probes": (
                "sum by (namespace, pod, container, probe_type) (increase(prober_probe_total{"
                f'probe_type=~"Readiness|Liveness", result="failed"}}[{rng}])) > 0 or label_replace(count('
                f'count_over_time(prober_probe_total{{probe_type="Readiness"}}[{rng}])), "probe_type", '
                f'"{_PROBES_OBSERVED}", "", "")'
            ),
            "not_ready": (
                'count_over_time(((max by (namespace, pod) (kube_pod_status_ready{condition="false"}) == 1) '
                "unless on (namespace, pod) (max by (namespace, pod) "
                f'(kube_pod_status_phase{{phase=~"Succeeded|Failed|Pending"}}) == 1))[{rng}:1m])'
            ),
        }

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        queries = self.queries(window)
        missing = await kube_state_metrics_missing(sources, window, NAME, "restarts", self.policy.ksm_job)
        if missing is not None:
            return missing
        try:
            (restarts, reasons), probes, not_ready = await asyncio.gather(
                self._restarts(sources, window),
                sources.metrics.instant(queries["probes"], window.end),
                sources.metrics.instant(queries["not_ready"], window.end),
            )
        except SourceError as exc:
            return unknown(NAME, "restarts not checked: the metrics backend did not answer", str(exc))
        if not restarts:
            absent = await family_missing(sources, window, NAME, "restarts", RESTARTS_TOTAL)
            if absent is not None:
                return absent
        return self._finding(restarts, reasons, probes, not_ready)

    async def _restarts(self, sources: Sources, window: Window) -> tuple[list[Sample], list[Sample]]:
        """Restarts and their reasons, asked only about the containers whose counter changed."""
        containers = await restarted_containers(sources, window)
        if not containers:
            return [], []
        queries = self.queries(window, narrowing(containers))
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
        not_ready: Sequence[Sample],
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
        probes_observed = False
        for sample in probes:
            probe_type = sample.labels.get("probe_type", "")
            if probe_type == _PROBES_OBSERVED:
                probes_observed = sample.value > 0
            elif probe_type == "Readiness":
                containers[container_key(sample.labels)].readiness_failures += round(sample.value)
            elif probe_type == "Liveness":
                containers[container_key(sample.labels)].liveness_failures += round(sample.value)
        not_ready_by = {
            (sample.labels.get("namespace", ""), sample.labels.get("pod", "")): round(sample.value)
            for sample in not_ready
            if sample.value > 0
        }

        flagged = sorted(
            (key for key, container in containers.items() if container.restarts or container.readiness_failures),
            key=lambda key: (-containers[key].restarts, -containers[key].readiness_failures, key),
        )
        most = max((container.restarts for container in containers.values()), default=0)
        level = 2 if most >= policy.crash_loop_restarts else 1 if flagged else 0
        status, penalty = grade(level, policy.warn_penalty, policy.crit_penalty)
        offenders = [
            Offender(
                labels={
                    **dict(zip(CONTAINER_LABELS, key, strict=True)),
                    "restarts": str(containers[key].restarts),
                    "reasons": _reasons(containers[key]),
                    "readiness_failures": str(containers[key].readiness_failures),
                    "not_ready_minutes": str(not_ready_by.get(key[:2], 0)),
                },
                value=containers[key].restarts,
            )
            for key in flagged[: policy.top]
        ]
        total_restarts = sum(container.restarts for container in containers.values())
        total_readiness = sum(container.readiness_failures for container in containers.values())
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
        unexplained = sorted(
            ((minutes, pod) for pod, minutes in not_ready_by.items() if not any(key[:2] == pod for key in flagged)),
            reverse=True,
        )
        if unexplained:
            evidence.append(
                "not ready without a restart or failed readiness probe: "
                + ", ".join(f"{namespace}/{pod} {minutes} min" for minutes, (namespace, pod) in unexplained[:3])
            )
        if not probes_observed:
            evidence.append("readiness not observed: the kubelet's prober_probe_total (/metrics/probes) is not scraped")

        if not offenders:
            summary = "no container restarted" + (", no readiness probe failed" if probes_observed else "")
            return Finding(name=NAME, status=status, penalty=penalty, value=0, summary=summary, evidence=evidence)
        summary = _describe(offenders[0])
        more: list[str] = []
        if total_restarts > int(offenders[0].labels["restarts"]):
            more.append(f"{fmt_int(total_restarts)} restarts")
        if total_readiness > int(offenders[0].labels["readiness_failures"]):
            more.append(f"{fmt_int(total_readiness)} failed readiness probes")
        if more:
            summary += f"; {' and '.join(more)} in the cluster"
        hints = []
        if total_restarts:
            hints.append(
                "For each restart reason: OOMKilled → compare the working set with the limit (memory_pressure); "
                "Error → the container's last logs (kubectl logs --previous) and its liveness probe."
            )
        if total_readiness:
            hints.append(
                "Failed readiness probes take the pod out of its Service: check the probe's timeout against the "
                "container's latency under load (CPU throttling?), and whether all replicas fail at once."
            )
        return Finding(
            name=NAME,
            status=status,
            penalty=penalty,
            value=total_restarts,
            summary=summary,
            offenders=offenders,
            hint=" ".join(hints),
            evidence=evidence,
        )


def _reasons(container: _Container) -> str:
    """The restart reasons, most frequent first; restarts without a fresh reason are named as such."""
    reasons = dict(container.reasons or {})
    missing = container.restarts - sum(reasons.values())
    if missing > 0:
        reasons["reason unknown"] = missing
    return ", ".join(reason for reason, _ in sorted(reasons.items(), key=lambda item: (-item[1], item[0])))


def _describe(offender: Offender) -> str:
    labels = offender.labels
    parts = []
    restarts = int(labels["restarts"])
    if restarts:
        word = "restart" if restarts == 1 else "restarts"
        parts.append(f"{fmt_int(restarts)} {word} ({labels['reasons']})")
    failures = int(labels["readiness_failures"])
    if failures:
        parts.append(f"{fmt_int(failures)} failed readiness probes")
    minutes = int(labels["not_ready_minutes"])
    if minutes:
        parts.append(f"not ready {fmt_int(minutes)} min")
    return f"{labels['namespace']}/{labels['pod']}/{labels['container']}: {', '.join(parts)}"

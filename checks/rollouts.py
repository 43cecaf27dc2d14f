"""rollouts: Deployments that ran with unavailable replicas in the window, and for how long.

Signal (kube-state-metrics, queries.md §5.4): ``kube_deployment_status_replicas_unavailable{namespace, deployment}``
(STABLE), desired replicas minus available ones. Counted per scrape, so that a rollout that lasts one scrape is
seen; each step reads a ``[30s]`` range (the scrape interval) rather than the engine's look-back, which would
repeat the previous sample over a gap::

    scrapes:  count_over_time((max by (namespace, deployment) (max_over_time(unavailable[30s])) > 0)[<window>:30s])
    maximum:  max by (namespace, deployment) (max_over_time(unavailable[<window>])) > 0
    in a row: max by (namespace, deployment) (max_over_time(min_over_time(unavailable[15m])[<window>:1m])) > 0
    strategy: max by (namespace, deployment)
                (max_over_time(kube_deployment_spec_strategy_rollingupdate_max_surge[<window>]))

``min_over_time`` over raw samples is positive only when every scrape of the 15 minutes had an unavailable replica
(§5.4's ``min_over_time((x > 0)[15m:1m])`` would skip the steps the filter removed and pass on one bad scrape).
kube-state-metrics exports the rolling-update parameters only for ``strategy: RollingUpdate`` (its tests emit
none for a Deployment without them), so a Deployment missing them while others have them is probably ``Recreate``.

Thresholds: one scrape with an unavailable replica is a WARN — for a single-replica Deployment it is an outage
(seed 003: ``shop/status-page`` with strategy Recreate was unavailable at 7 scrapes over three rollouts, and its
Service had no endpoint each time); for a larger one it is lost capacity (seed 000: the four shop/api pods left
service one after the other under CPU throttling). Fifteen minutes in a row is CRIT: no rollout takes that long
when it works, so a rollout is stuck (a crash-looping new ReplicaSet, an image that does not pull, a quota) or
replicas cannot become ready.

Default penalties are 0: the seed rule grades; this check explains. Without kube-state-metrics: UNKNOWN.
"""

from __future__ import annotations

import asyncio
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

NAME = "rollouts"
_UNAVAILABLE = "kube_deployment_status_replicas_unavailable"


@dataclass(frozen=True)
class RolloutsPolicy:
    """The scrape resolution, how long is stuck, which job is kube-state-metrics, and the cost (nothing by default)."""

    enabled: bool = True
    scrape_interval_seconds: int = 30
    crit_minutes: int = 15
    warn_penalty: int = 0
    crit_penalty: int = 0
    ksm_job: str = ".*kube-state-metrics.*"
    top: int = 5


@dataclass(frozen=True)
class RolloutsCheck:
    """Unavailable replicas per Deployment: how many scrapes, the maximum, and whether it lasted."""

    policy: RolloutsPolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        return (coverage.kube_state_metrics(self.policy.ksm_job),)

    def queries(self, window: Window) -> dict[str, str]:
        """The PromQL this check sends, by purpose."""
        rng = window.promql_range()
        scrape = self.policy.scrape_interval_seconds
        by = "max by (namespace, deployment)"
        return {
            "ksm_up": kube_state_metrics_up_query(self.policy.ksm_job, window),
            "scrapes": f"count_over_time(({by} (max_over_time({_UNAVAILABLE}[{scrape}s])) > 0)[{rng}:{scrape}s])",
            "maximum": f"{by} (max_over_time({_UNAVAILABLE}[{rng}])) > 0",
            "in_a_row": (
                f"{by} (max_over_time(min_over_time({_UNAVAILABLE}[{self.policy.crit_minutes}m])[{rng}:1m])) > 0"
            ),
            "strategy": f"{by} (max_over_time(kube_deployment_spec_strategy_rollingupdate_max_surge[{rng}]))",
        }

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        queries = self.queries(window)
        missing = await kube_state_metrics_missing(sources, window, NAME, "rollouts", self.policy.ksm_job)
        if missing is not None:
            return missing
        try:
            scrapes, maximum, in_a_row = await asyncio.gather(
                *(sources.metrics.instant(queries[key], window.end) for key in ("scrapes", "maximum", "in_a_row"))
            )
        except SourceError as exc:
            return unknown(NAME, "rollouts not checked: the metrics backend did not answer", str(exc))
        if not scrapes and not maximum:
            absent = await family_missing(sources, window, NAME, "rollouts", _UNAVAILABLE)
            if absent is not None:
                return absent
        strategy: Sequence[Sample] = ()
        if scrapes or maximum:
            try:
                strategy = await sources.metrics.instant(queries["strategy"], window.end)
            except SourceError:
                strategy = ()  # the strategy only explains; the unavailability is known
        return self._finding(scrapes, maximum, in_a_row, strategy)

    def _finding(
        self,
        scrapes: Sequence[Sample],
        maximum: Sequence[Sample],
        in_a_row: Sequence[Sample],
        strategy: Sequence[Sample],
    ) -> Finding:
        policy = self.policy
        scrapes_by = {_key(sample): round(sample.value) for sample in scrapes if sample.value > 0}
        maximum_by = {_key(sample): sample.value for sample in maximum}
        stuck = {_key(sample) for sample in in_a_row}
        surge_by = {_key(sample): sample.value for sample in strategy}
        keys = sorted(
            set(scrapes_by) | set(maximum_by),
            key=lambda key: (key not in stuck, -scrapes_by.get(key, 0), -maximum_by.get(key, 0.0), key),
        )
        level = 2 if stuck else 1 if keys else 0
        status, penalty = grade(level, policy.warn_penalty, policy.crit_penalty)
        if not keys:
            return Finding(
                name=NAME,
                status=status,
                penalty=penalty,
                value=0,
                summary="no Deployment had an unavailable replica",
            )
        scrape_minutes = policy.scrape_interval_seconds / 60
        offenders = [
            Offender(
                labels={
                    "namespace": key[0],
                    "deployment": key[1],
                    "unavailable_minutes": _minutes(scrapes_by.get(key, 0) * scrape_minutes),
                    "unavailable_scrapes": str(scrapes_by.get(key, 0)),
                    "max_unavailable": str(round(maximum_by.get(key, 0.0))),
                    **({"max_surge": str(round(surge_by[key]))} if key in surge_by else {}),
                },
                value=scrapes_by.get(key, 0) * scrape_minutes,
            )
            for key in keys[: policy.top]
        ]
        first = offenders[0].labels
        summary = (
            f"{first['namespace']}/{first['deployment']} had {_replicas(first['max_unavailable'])} unavailable for "
            f"{first['unavailable_minutes']} min ({fmt_int(float(first['unavailable_scrapes']))} scrapes)"
        )
        if keys[0] in stuck:
            summary += f", {policy.crit_minutes} min or more in a row"
        if len(keys) > 1:
            summary += f"; {len(keys)} Deployments in all"
        # The summary names the first Deployment; the evidence lines name the others.
        evidence = [
            f"then {offender.labels['namespace']}/{offender.labels['deployment']}: "
            f"{_replicas(offender.labels['max_unavailable'])} unavailable for "
            f"{offender.labels['unavailable_minutes']} min"
            for offender in offenders[1:]
        ]
        if surge_by:
            # Only meaningful when kube-state-metrics exports the parameters for some Deployments.
            evidence.extend(
                f"{key[0]}/{key[1]} has no rolling-update parameters: strategy Recreate? (every rollout stops the "
                "old pods before the new ones are ready)"
                for key in keys[: policy.top]
                if key not in surge_by
            )
        return Finding(
            name=NAME,
            status=status,
            penalty=penalty,
            value=len(keys),
            summary=summary,
            offenders=offenders,
            hint="Short unavailability at each rollout: strategy Recreate, or maxSurge 0 on few replicas — use "
            "RollingUpdate with maxUnavailable 0 / maxSurge 1 and a readiness probe. Long: `kubectl rollout status` "
            "and the new ReplicaSet's events (image pull, crash loop, quota, readiness failing).",
            evidence=evidence,
        )


def _key(sample: Sample) -> tuple[str, str]:
    return sample.labels.get("namespace", ""), sample.labels.get("deployment", "")


def _minutes(minutes: float) -> str:
    """Minutes with the half minute a 30 s scrape can add: 3.5, 58."""
    return f"{minutes:g}" if minutes >= 10 or float(minutes * 2).is_integer() else f"{minutes:.1f}"


def _replicas(count: str) -> str:
    return "1 replica" if count == "1" else f"up to {count} replicas"

"""deployments: Deployments that ran with unavailable replicas, and the rollouts of the window with their strategy.

Two different things, kept apart on purpose. *Unavailable replicas* are desired replicas not available: a rollout
causes them, but so do pods that fail readiness, a node that stops reporting, or a quota. A *rollout* is claimed
only on rollout evidence: a ReplicaSet created in the window and owned by the Deployment, or (a rollback reuses an
old ReplicaSet) a change of the Deployment's ``metadata.generation``. Without either, unavailable replicas are said
to be only that, and when kube-state-metrics does not export the ReplicaSet families the finding says rollouts
could not be observed instead of guessing.

Signal (kube-state-metrics, queries.md §5.4), read one scrape per step at the scrape interval measured in the data
(`checks.resolution`), every range open on the left (`checks.promql.open_range`, as VictoriaMetrics reads it;
Prometheus 2 would read one more scrape per step). The replicas a Deployment lacks are desired minus available —
not the controller's ``unavailableReplicas``, which counts a surge pod not ready yet and so reads every healthy
maxSurge step as a loss; that family stands in only where the other two are missing::

    short = clamp_min(spec_replicas - status_replicas_available, 0) or status_replicas_unavailable   (per scrape)
    unavailable: count_over_time((short > 0)[<window>:<interval>])
    maximum:     max_over_time(short[<window>:<interval>]) > 0
    in a row:    the episodes of ``short > 0`` (a range query for the Deployments found short), ≥ 15 min
    created:     max by (namespace, replicaset) (last_over_time(kube_replicaset_created[<window>])) >= <start> < <end>
    owner:       kube_replicaset_owner{owner_kind="Deployment"}              (for the ReplicaSets created)
    progress:    ready - spec replicas of each new ReplicaSet, at each step  (≥ 0: the rollout is complete)
    generation:  max by (namespace, deployment) (changes(kube_deployment_metadata_generation[<window>])) > 0
    strategy:    kube_deployment_spec_strategy_rollingupdate_max_unavailable / _max_surge

kube-state-metrics exports the rolling-update parameters only for ``strategy: RollingUpdate`` (resolved against the
replicas: maxUnavailable rounded down, maxSurge up). A Deployment without them while others have them is
``Recreate``; when no Deployment has them the family is filtered out and the strategy is not known.

Thresholds: one scrape with an unavailable replica is a WARN — for a single-replica Deployment it is an outage
(seed 003: ``shop/status-page`` with strategy Recreate was unavailable at 7 scrapes over three rollouts), for a
larger one lost capacity. Fifteen minutes in a row is CRIT, and so is a rollout still incomplete 15 minutes after
its ReplicaSet was created: no rollout takes that long when it works (a crash-looping new ReplicaSet, an image that
does not pull, a quota). A rollout that completed is shown, not graded.

Default penalties are 0: the seed rule grades; this check explains. Without kube-state-metrics: UNKNOWN.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
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
    metrics_look,
    unknown,
)
from .presence import family_missing, kube_state_metrics_missing, kube_state_metrics_up_query
from .promql import any_of, open_range
from .resolution import Resolution, resolve, runs, step_for

NAME = "deployments"
# Where a reader sees one offender: its own series over the window (`checks.contract.Look`).
_LOOK = "max by (namespace, deployment) (kube_deployment_status_replicas_unavailable{})"
_LOOK_KEYS = ("namespace", "deployment")

# What this check reads, for `digest doctor` (the queries below are what it sends).
INPUTS: tuple[Input, ...] = (
    Input("series", "up", "kube-state-metrics scraped", policy_key="deployments.ksm_job", by_job=True),
    Input(
        "series",
        "kube_deployment_status_replicas_unavailable",
        "unavailable replicas",
        fix="kube-state-metrics' deployments",
    ),
    Input(
        "series",
        "kube_deployment_spec_replicas",
        "desired replicas",
        required=False,
        fix="kube-state-metrics' deployments",
    ),
    Input(
        "series",
        "kube_deployment_status_replicas_available",
        "available replicas",
        required=False,
        fix="kube-state-metrics' deployments",
    ),
    Input(
        "series", "kube_replicaset_created", "new ReplicaSets", required=False, fix="kube-state-metrics' replicasets"
    ),
    Input("series", "kube_replicaset_owner", "their Deployment", required=False, fix="kube-state-metrics' replicasets"),
    Input(
        "series",
        "kube_replicaset_status_ready_replicas",
        "rollout progress",
        required=False,
        fix="kube-state-metrics' replicasets",
    ),
    Input(
        "series",
        "kube_replicaset_spec_replicas",
        "rollout progress",
        required=False,
        fix="kube-state-metrics' replicasets",
    ),
    Input(
        "series",
        "kube_deployment_metadata_generation",
        "rollbacks",
        required=False,
        fix="kube-state-metrics' deployments",
    ),
    Input(
        "series",
        "kube_deployment_spec_strategy_rollingupdate_max_unavailable",
        "the strategy",
        required=False,
        fix="kube-state-metrics' deployments",
    ),
    Input(
        "series",
        "kube_deployment_spec_strategy_rollingupdate_max_surge",
        "the strategy",
        required=False,
        fix="kube-state-metrics' deployments",
    ),
)
_UNAVAILABLE = "kube_deployment_status_replicas_unavailable"
# The optional families the verdict leans on, by what each makes observable.
_FAMILIES = {
    "replicaset": "kube_replicaset_created",
    "generation": "kube_deployment_metadata_generation",
    "strategy": "kube_deployment_spec_strategy_rollingupdate_max_surge",
    "progress": "kube_replicaset_status_ready_replicas",
}

Key = tuple[str, str]  # (namespace, deployment)


@dataclass(frozen=True)
class DeploymentsPolicy:
    """How long is stuck, which job is kube-state-metrics, the scrape interval, and the cost (nothing by default)."""

    enabled: bool = True
    crit_minutes: int = 15
    warn_penalty: int = 0
    crit_penalty: int = 0
    ksm_job: str = ".*kube-state-metrics.*"
    scrape_interval_seconds: int = 0  # 0: measured in the data (checks.resolution)
    assumed_interval_seconds: int = 30  # when the data cannot tell
    top: int = 5


@dataclass(frozen=True)
class Rollout:
    """One rollout seen in the window: the Deployment, its new ReplicaSet (or "" for a generation change), when."""

    namespace: str
    deployment: str
    replicaset: str
    created: float
    completed: float | None  # None: not complete by the window's end (or not observable, see ``progress_seen``)
    progress_seen: bool


@dataclass(frozen=True)
class Strategy:
    """A Deployment's strategy as kube-state-metrics shows it; ``kind`` "" when the data cannot tell."""

    kind: str
    max_unavailable: float | None = None
    max_surge: float | None = None

    def describe(self) -> str:
        if self.kind == "RollingUpdate":
            surge = fmt_int(self.max_surge) if self.max_surge is not None else "?"
            return f"RollingUpdate maxUnavailable {fmt_int(self.max_unavailable or 0)}, maxSurge {surge}"
        return self.kind or "strategy not observable"


@dataclass(frozen=True)
class DeploymentsCheck:
    """Unavailable replicas per Deployment, and the rollouts of the window with their strategy and progress."""

    policy: DeploymentsPolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        return (coverage.kube_state_metrics(self.policy.ksm_job),)

    def step(self, window: Window, interval: int) -> int:
        """The evaluation step: the scrape interval, coarser only when the window would exceed the point limit."""
        return step_for(window, interval)

    def queries(self, window: Window, interval: int = 30, lookback: int = 0) -> dict[str, str]:
        """The PromQL this check sends, by purpose (``unavailable_spans`` and ``progress`` are range queries).

        Each step reads back one scrape: ``lookback``, the coarsest interval of the window (`checks.resolution`).
        """
        rng = window.promql_range()
        step = self.step(window, interval)
        look = max(step, lookback)
        by = "max by (namespace, deployment)"
        start, end = round(window.start.timestamp()), round(window.end.timestamp())
        return {
            "ksm_up": kube_state_metrics_up_query(self.policy.ksm_job, window),
            "unavailable": f"count_over_time(({shortfall(look)} > 0)[{open_range(window.seconds)}:{step}s])",
            "maximum": f"max_over_time({shortfall(look)}[{open_range(window.seconds)}:{step}s]) > 0",
            "unavailable_spans": f"{shortfall(look)} > 0",
            "created": (
                f"max by (namespace, replicaset) (last_over_time(kube_replicaset_created[{rng}])) >= {start} < {end}"
            ),
            "owners": (
                "max by (namespace, replicaset, owner_name) (last_over_time("
                f'kube_replicaset_owner{{owner_kind="Deployment"}}[{rng}]))'
            ),
            "progress": (
                "max by (namespace, replicaset) (last_over_time(kube_replicaset_status_ready_replicas"
                f"[{open_range(look)}])) - max by (namespace, replicaset) (last_over_time(kube_replicaset_spec_replicas"
                f"[{open_range(look)}]))"
            ),
            "generation": f"{by} (changes(kube_deployment_metadata_generation[{rng}])) > 0",
            "families": " or ".join(
                f'label_replace(count(count_over_time({metric}[{rng}])), "family", "{family}", "", "")'
                for family, metric in _FAMILIES.items()
            ),
            "max_unavailable": (
                f"{by} (last_over_time(kube_deployment_spec_strategy_rollingupdate_max_unavailable[{rng}]))"
            ),
            "max_surge": f"{by} (last_over_time(kube_deployment_spec_strategy_rollingupdate_max_surge[{rng}]))",
        }

    async def resolution(self, sources: Sources, window: Window) -> Resolution:
        """The scrape interval of the Deployments' series (or the policy's, when it sets one)."""
        policy = self.policy
        return await resolve(
            sources, window, _UNAVAILABLE, policy.scrape_interval_seconds, policy.assumed_interval_seconds
        )

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        missing = await kube_state_metrics_missing(sources, window, NAME, "Deployments", self.policy.ksm_job)
        if missing is not None:
            return missing
        resolution = await self.resolution(sources, window)
        step = self.step(window, resolution.seconds)
        lookback = resolution.look
        queries = self.queries(window, resolution.seconds, lookback)
        metrics = sources.metrics
        try:
            unavailable, maximum, created, generation, families = await asyncio.gather(
                *(
                    metrics.instant(queries[key], window.end)
                    for key in ("unavailable", "maximum", "created", "generation", "families")
                )
            )
        except SourceError as exc:
            return unknown(NAME, "Deployments not checked: the metrics backend did not answer", str(exc))
        if not unavailable and not maximum:
            absent = await family_missing(sources, window, NAME, "Deployments", _UNAVAILABLE)
            if absent is not None:
                return absent
        present = {sample.labels.get("family", "") for sample in families if sample.value > 0}
        try:
            rollouts = await self._rollouts(sources, window, step, created, generation, "progress" in present, lookback)
            strategies = await self._strategies(sources, window, "strategy" in present)
            flagged = {_key(s) for s in unavailable if s.value > 0} | {_key(s) for s in maximum}
            spans = await self._spans(sources, window, step, flagged, lookback)
        except SourceError as exc:
            return unknown(NAME, "Deployments not checked: the metrics backend did not answer", str(exc))
        return self._finding(window, step, resolution, present, unavailable, maximum, rollouts, strategies, spans)

    async def _rollouts(
        self,
        sources: Sources,
        window: Window,
        step: int,
        created: Sequence[Sample],
        generation: Sequence[Sample],
        progress_observable: bool,
        lookback: int = 0,
    ) -> list[Rollout]:
        """The rollouts of the window: new ReplicaSets with their owner and progress, then bare generation changes."""
        queries = self.queries(window, step, lookback)
        rollouts: list[Rollout] = []
        if created:
            names = any_of(sample.labels.get("replicaset", "") for sample in created)
            owners_query = queries["owners"].replace(
                'owner_kind="Deployment"', f'owner_kind="Deployment", replicaset=~"{names}"'
            )
            progress_query = queries["progress"].replace("[", f'{{replicaset=~"{names}"}}[')
            owners_rows = await sources.metrics.instant(owners_query, window.end)
            progress_rows: Sequence[RangeSeries] = ()
            if progress_observable:
                progress_rows = await sources.metrics.range(
                    progress_query, window.start + timedelta(seconds=step), window.end, step
                )
            owner = {
                (row.labels.get("namespace", ""), row.labels.get("replicaset", "")): row.labels.get("owner_name", "")
                for row in owners_rows
            }
            progress = {
                (series.labels.get("namespace", ""), series.labels.get("replicaset", "")): series.points
                for series in progress_rows
            }
            for sample in created:
                key = (sample.labels.get("namespace", ""), sample.labels.get("replicaset", ""))
                deployment = owner.get(key)
                if not deployment:
                    continue  # a bare ReplicaSet, or one a StatefulSet-like controller owns: not a Deployment rollout
                rollouts.append(
                    Rollout(
                        key[0],
                        deployment,
                        key[1],
                        sample.value,
                        _completed(progress.get(key, ()), sample.value, step),
                        key in progress,
                    )
                )
        with_replicaset = {(r.namespace, r.deployment) for r in rollouts}
        changed = [sample for sample in generation if _key(sample) not in with_replicaset]
        if changed:
            # A rollback or a template change back to an old ReplicaSet: no new ReplicaSet, but a new generation.
            names = any_of(sample.labels.get("deployment", "") for sample in changed)
            series = await sources.metrics.range(
                "max by (namespace, deployment) (last_over_time("
                f'kube_deployment_metadata_generation{{deployment=~"{names}"}}[{open_range(max(step, lookback))}]))',
                window.start,
                window.end,
                step,
            )
            for row in series:
                for moment in _changes(row.points):
                    rollouts.append(
                        Rollout(
                            row.labels.get("namespace", ""), row.labels.get("deployment", ""), "", moment, None, False
                        )
                    )
        return sorted(rollouts, key=lambda r: (r.created, r.namespace, r.deployment))

    async def _strategies(self, sources: Sources, window: Window, observable: bool) -> dict[Key, Strategy]:
        if not observable:
            return {}
        queries = self.queries(window)
        unavailable, surge = await asyncio.gather(
            sources.metrics.instant(queries["max_unavailable"], window.end),
            sources.metrics.instant(queries["max_surge"], window.end),
        )
        surge_by = {_key(sample): sample.value for sample in surge}
        return {
            _key(sample): Strategy("RollingUpdate", sample.value, surge_by.get(_key(sample))) for sample in unavailable
        }

    async def _spans(
        self, sources: Sources, window: Window, step: int, flagged: set[Key], lookback: int = 0
    ) -> dict[Key, list[Span]]:
        if not flagged:
            return {}
        names = any_of(deployment for _, deployment in flagged)
        query = f"{shortfall(max(step, lookback), f'deployment=~{chr(34)}{names}{chr(34)}')} > 0"
        rows = await sources.metrics.range(query, window.start + timedelta(seconds=step), window.end, step)
        return {_key_of(series.labels): runs([t for t, _ in series.points], step) for series in rows}

    def _finding(
        self,
        window: Window,
        step: int,
        resolution: Resolution,
        present: set[str],
        unavailable: Sequence[Sample],
        maximum: Sequence[Sample],
        rollouts: Sequence[Rollout],
        strategies: Mapping[Key, Strategy],
        spans: Mapping[Key, list[Span]],
    ) -> Finding:
        policy = self.policy
        end = window.end.timestamp()
        steps_by = {_key(sample): round(sample.value) for sample in unavailable if sample.value > 0}
        maximum_by = {_key(sample): sample.value for sample in maximum}
        # Unavailable for the whole of one stretch of crit_minutes: read from the episodes, one scrape precise.
        stuck_unavailable = {
            key for key, runs in spans.items() if any(span.seconds >= policy.crit_minutes * 60 for span in runs)
        }
        rollouts_observable = "replicaset" in present or "generation" in present

        def strategy(key: Key) -> Strategy:
            if key in strategies:
                return strategies[key]
            # The family exists for others and not for this one: RollingUpdate parameters are absent, so Recreate.
            return Strategy("Recreate") if "strategy" in present else Strategy("")

        stuck_rollouts = [
            r
            for r in rollouts
            if r.replicaset and r.progress_seen and r.completed is None and end - r.created >= policy.crit_minutes * 60
        ]
        keys = sorted(
            set(steps_by) | set(maximum_by) | {(r.namespace, r.deployment) for r in stuck_rollouts},
            key=lambda key: (
                key not in stuck_unavailable and key not in {(r.namespace, r.deployment) for r in stuck_rollouts},
                -steps_by.get(key, 0),
                -maximum_by.get(key, 0.0),
                key,
            ),
        )
        level = 2 if stuck_unavailable or stuck_rollouts else 1 if keys else 0
        status, penalty = grade(level, policy.warn_penalty, policy.crit_penalty)
        events = [
            Event(
                "rollout",
                {
                    "namespace": r.namespace,
                    "deployment": r.deployment,
                    "replicaset": r.replicaset,
                    "strategy": strategy((r.namespace, r.deployment)).kind,
                    "state": _rollout_state(r, end, policy.crit_minutes),
                    "evidence": "new ReplicaSet" if r.replicaset else "generation change",
                },
                Span(r.created, r.completed if r.completed is not None else end),
                facts=_strategy_facts(strategy((r.namespace, r.deployment))),
            )
            for r in rollouts
        ]
        observed = [_UNAVAILABLE]
        unobserved: list[str] = []
        if "replicaset" in present:
            observed += ["kube_replicaset_created", "kube_replicaset_owner"]
        else:
            unobserved.append("kube_replicaset_created: new ReplicaSets not observable")
        if "generation" in present:
            observed.append("kube_deployment_metadata_generation")
        else:
            unobserved.append("kube_deployment_metadata_generation: generation changes not observable")
        if "strategy" in present:
            observed.append("kube_deployment_spec_strategy_rollingupdate_max_surge")
        else:
            unobserved.append("kube_deployment_spec_strategy_rollingupdate_*: strategies not observable")
        if "progress" in present:
            observed.append("kube_replicaset_status_ready_replicas")
        elif rollouts:
            unobserved.append("kube_replicaset_status_ready_replicas: rollout progress not observable")
        evidence = [
            _rollout_line(r, strategy((r.namespace, r.deployment)), window, end, policy.crit_minutes)
            for r in rollouts[:6]
        ]
        if len(rollouts) > 6:
            evidence.append(f"and {len(rollouts) - 6} more rollouts")
        if not rollouts_observable:
            evidence.append(
                "rollouts not observable: no kube_replicaset_created nor kube_deployment_metadata_generation"
            )
        if not keys:
            summary = "no Deployment had an unavailable replica"
            if rollouts:
                summary += (
                    f"; {len(rollouts)} rollout(s), all complete"
                    if not any(r.completed is None for r in rollouts)
                    else f"; {len(rollouts)} rollout(s)"
                )
            return Finding(
                name=NAME,
                status=status,
                penalty=penalty,
                value=0,
                summary=summary,
                evidence=evidence,
                observed=tuple(observed),
                unobserved=tuple(unobserved),
                events=tuple(events),
            )
        offenders = []
        for key in keys[: policy.top]:
            own = [r for r in rollouts if (r.namespace, r.deployment) == key]
            facts = {
                "unavailable_seconds": Quantity(steps_by.get(key, 0) * step, Unit.SECONDS),
                "max_unavailable_replicas": Quantity(maximum_by.get(key, 0.0), Unit.COUNT),
                "resolution_seconds": Quantity(step, Unit.SECONDS),
                **_strategy_facts(strategy(key)),
            }
            if rollouts_observable:
                facts["rollouts"] = Quantity(len(own), Unit.COUNT)
            offenders.append(
                Offender(
                    labels={"namespace": key[0], "deployment": key[1], "strategy": strategy(key).kind},
                    value=steps_by.get(key, 0) * step,
                    facts=facts,
                    spans=tuple(spans.get(key, ())),
                )
            )

        def describe(key: Key) -> str:
            return self._describe(
                key,
                steps_by,
                maximum_by,
                rollouts,
                stuck_rollouts,
                stuck_unavailable,
                rollouts_observable,
                window,
                step,
            )

        summary = describe(keys[0])
        if len(keys) > 1:
            summary += f"; {len(keys)} Deployments in all"
        evidence[:0] = ["then " + describe(key) for key in keys[1 : policy.top]]
        evidence.append(resolution.bound() if step == resolution.seconds else f"measured every {step} s")
        return Finding(
            name=NAME,
            status=status,
            penalty=penalty,
            value=len(keys),
            summary=summary,
            offenders=[replace(one, look=metrics_look(_LOOK, one.labels, _LOOK_KEYS)) for one in offenders],
            hint=_hint(rollouts, stuck_rollouts, strategy),
            evidence=evidence,
            observed=tuple(observed),
            unobserved=tuple(unobserved),
            events=tuple(events),
        )

    def _describe(
        self,
        key: Key,
        steps_by: Mapping[Key, int],
        maximum_by: Mapping[Key, float],
        rollouts: Sequence[Rollout],
        stuck_rollouts: Sequence[Rollout],
        stuck_unavailable: set[Key],
        rollouts_observable: bool,
        window: Window,
        step: int,
    ) -> str:
        who = f"{key[0]}/{key[1]}"
        own = [r for r in rollouts if (r.namespace, r.deployment) == key]
        stuck = [r for r in stuck_rollouts if (r.namespace, r.deployment) == key]
        parts = []
        if stuck:
            first = stuck[0]
            parts.append(
                f"{who}: rollout stuck — new ReplicaSet {first.replicaset} created at "
                f"{local_time(first.created, window)} never became ready"
            )
        count = steps_by.get(key, 0)
        if count or key in maximum_by:
            replicas = _replicas(maximum_by.get(key, 0.0))
            text = f"{replicas} unavailable for {fmt_duration(count * step)}"
            if key in stuck_unavailable:
                text += f", {self.policy.crit_minutes} min or more in a row"
            if not stuck:
                if own:
                    text = f"{who} had {text} during {len(own)} rollout(s)"
                elif rollouts_observable:
                    text = f"{who} had {text}, with no rollout (no new ReplicaSet, generation unchanged)"
                else:
                    text = f"{who} had {text} (rollouts not observable)"
            parts.append(text)
        return "; ".join(parts)


def shortfall(step: int, matchers: str = "") -> str:
    """PromQL: per Deployment, the replicas it lacked at each scrape (read one scrape back, ``step`` seconds).

    Desired minus available (``spec_replicas - status_replicas_available``), not ``status_replicas_unavailable``:
    the controller counts a surge pod that is not ready yet as unavailable (its total is the ReplicaSets' replicas),
    so a healthy maxSurge step would read as lost capacity. Where kube-state-metrics lacks either family, the
    unavailable count stands in.
    """
    inner = f"{{{matchers}}}" if matchers else ""
    by = "max by (namespace, deployment)"

    def last(family: str) -> str:
        return f"{by} (last_over_time({family}{inner}[{open_range(step)}]))"

    return (
        f"(clamp_min({last('kube_deployment_spec_replicas')} - {last('kube_deployment_status_replicas_available')}, 0)"
        f" or {last(_UNAVAILABLE)})"
    )


def _key(sample: Sample) -> Key:
    return _key_of(sample.labels)


def _key_of(labels: Mapping[str, str]) -> Key:
    return labels.get("namespace", ""), labels.get("deployment", "")


def _completed(points: Sequence[tuple[float, float]], created: float, step: int) -> float | None:
    """The first moment after creation when the new ReplicaSet had all its replicas ready (ready - spec ≥ 0)."""
    for moment, value in sorted(points):
        if moment > created + step and value >= 0:
            return moment
    return None


def _changes(points: Sequence[tuple[float, float]]) -> list[float]:
    ordered = sorted(points)
    return [t for (_, a), (t, b) in itertools.pairwise(ordered) if b != a]


def _strategy_facts(strategy: Strategy) -> dict[str, Quantity]:
    facts = {}
    if strategy.max_unavailable is not None:
        facts["max_unavailable_setting"] = Quantity(strategy.max_unavailable, Unit.COUNT)
    if strategy.max_surge is not None:
        facts["max_surge_setting"] = Quantity(strategy.max_surge, Unit.COUNT)
    return facts


def _rollout_state(rollout: Rollout, end: float, crit_minutes: int) -> str:
    if not rollout.replicaset or not rollout.progress_seen:
        return "progress not observable"
    if rollout.completed is not None:
        return "complete"
    return "stuck" if end - rollout.created >= crit_minutes * 60 else "in progress"


def _rollout_line(rollout: Rollout, strategy: Strategy, window: Window, end: float, crit_minutes: int) -> str:
    who = f"{rollout.namespace}/{rollout.deployment}"
    at = local_time(rollout.created, window)
    if not rollout.replicaset:
        return f"rollout of {who} at {at} (generation changed, no new ReplicaSet: a rollback?), {strategy.describe()}"
    state = _rollout_state(rollout, end, crit_minutes)
    if state == "complete" and rollout.completed is not None:
        state = f"complete after about {fmt_duration(rollout.completed - rollout.created)} (to one scrape)"
    return f"rollout of {who} at {at}: ReplicaSet {rollout.replicaset}, {strategy.describe()}, {state}"


def _replicas(count: float) -> str:
    return "1 replica" if round(count) == 1 else f"up to {fmt_int(count)} replicas"


def _hint(rollouts: Sequence[Rollout], stuck: Sequence[Rollout], strategy: Callable[[Key], Strategy]) -> str:
    """Where to look, from what was seen: the advice for a strategy only when a rollout with it happened."""
    hints = []
    if stuck:
        hints.append(
            "A rollout that does not complete: `kubectl rollout status` and the new ReplicaSet's pods (crash loop, "
            "image pull, quota); `kubectl rollout undo` to go back."
        )
    if any(strategy((r.namespace, r.deployment)).kind == "Recreate" for r in rollouts):
        hints.append(
            "Strategy Recreate stops the old pods before the new ones are ready: use RollingUpdate with "
            "maxUnavailable 0 / maxSurge 1 and a readiness probe."
        )
    if not rollouts:
        hints.append("Unavailable without a rollout: see readiness (pods not ready) and the nodes' condition.")
    return " ".join(hints) or "Unavailable during a rollout: compare its progress with its strategy's parameters."

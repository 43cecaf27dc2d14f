"""workloads: StatefulSets and DaemonSets short of ready pods or stuck in a rollout, and Jobs that failed.

The ``deployments`` check reads Deployments; a cluster's other controllers fail in their own ways and are read here,
each from kube-state-metrics' family of its kind, minute by minute over the window (a subquery at one-minute steps,
each step reading the last sample of the two minutes before it, so a 30 s or 60 s scrape is read at every step):

* a **StatefulSet short of ready pods**: ``kube_statefulset_replicas - kube_statefulset_status_replicas_ready > 0``;
* a **StatefulSet rollout not complete**: its update revision is not its current revision (``kube_statefulset_status
  _update_revision`` and ``_current_revision`` carry the revision as a label; a StatefulSet's pods are replaced one at
  a time, newest ordinal first, so a pod that does not become ready stops the rollout where it is);
* a **DaemonSet short of available pods**: ``kube_daemonset_status_desired_number_scheduled -
  kube_daemonset_status_number_available > 0`` (a node's pod crash-looping, not schedulable, or not pulling);
* a **DaemonSet rollout not complete**: ``desired_number_scheduled - updated_number_scheduled > 0``;
* a **Job that failed in the window**: ``kube_job_failed{condition="true"}`` at 1 at some minute of the window, when
  the Job was seen not failed before that, or was created in the window (``kube_job_created``): a failed Job lingers
  until its TTL or its CronJob's history limit, and yesterday's failure is not today's.

Every side is reduced to one series per object (``max by``), so an HA pair of scrapers reads as one.

Thresholds: any minute short or any failed Job is a WARN: a StatefulSet is usually one replica of a database, and a
rolling update of three takes a few minutes — shown, not alarming. Fifteen minutes short in all, or a rollout not
complete for fifteen minutes, is CRIT: no rollout of a healthy pod takes that long (a crash-looping init container,
an image that does not pull, a volume that does not attach). Default penalties are 0: the seed rule grades, this
check explains, and a finding names the workload with its kind ("StatefulSet data/postgres").

A cluster that has none of these controllers has no series of their families: nothing to read, OK. A cluster whose
pods say they belong to one (``kube_pod_info{created_by_kind}``) while its family is absent has a kube-state-metrics
that does not export it (``--resources``): that kind is said to be not observable, and the check is UNKNOWN when
nothing else was found. Without kube-state-metrics: UNKNOWN.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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
    fmt_duration,
    fmt_int,
    grade,
    local_time,
    metrics_look,
    unknown,
)
from .presence import kube_state_metrics_missing, kube_state_metrics_up_query
from .promql import open_range

NAME = "workloads"

INPUTS: tuple[Input, ...] = (
    Input("series", "up", "kube-state-metrics scraped", policy_key="workloads.ksm_job", by_job=True),
    Input(
        "series",
        "kube_statefulset_replicas",
        "StatefulSets' desired pods",
        required=False,
        fix="kube-state-metrics' statefulsets resource",
    ),
    Input(
        "series",
        "kube_statefulset_status_replicas_ready",
        "StatefulSets' ready pods",
        required=False,
        fix="kube-state-metrics' statefulsets resource",
    ),
    Input(
        "series",
        "kube_statefulset_status_replicas_updated",
        "StatefulSets' updated pods",
        required=False,
        fix="kube-state-metrics' statefulsets resource",
    ),
    Input(
        "series",
        "kube_statefulset_status_update_revision",
        "a StatefulSet's rollout target",
        required=False,
        fix="kube-state-metrics' statefulsets resource",
    ),
    Input(
        "series",
        "kube_statefulset_status_current_revision",
        "a StatefulSet's revision now",
        required=False,
        fix="kube-state-metrics' statefulsets resource",
    ),
    Input(
        "series",
        "kube_daemonset_status_desired_number_scheduled",
        "DaemonSets' desired pods",
        required=False,
        fix="kube-state-metrics' daemonsets resource",
    ),
    Input(
        "series",
        "kube_daemonset_status_number_available",
        "DaemonSets' available pods",
        required=False,
        fix="kube-state-metrics' daemonsets resource",
    ),
    Input(
        "series",
        "kube_daemonset_status_updated_number_scheduled",
        "DaemonSets' updated pods",
        required=False,
        fix="kube-state-metrics' daemonsets resource",
    ),
    Input("series", "kube_job_failed", "failed Jobs", required=False, fix="kube-state-metrics' jobs resource"),
    Input("series", "kube_job_created", "when a Job was created", required=False, fix="kube-state-metrics' jobs"),
    Input(
        "series",
        "kube_job_owner",
        "the CronJob a Job ran for",
        required=False,
        fix="kube-state-metrics' jobs resource",
    ),
    Input(
        "series",
        "kube_pod_info",
        "which kinds the pods belong to (created_by_kind)",
        required=False,
        fix="kube-state-metrics' pods resource",
    ),
)

_STS = "namespace, statefulset"
_DS = "namespace, daemonset"
_JOB = "namespace, job_name"
_JOB_FAILED = 'kube_job_failed{condition="true"}'
# Where a reader sees one offender, by kind: its shortfall over the window.
_LOOKS = {
    "StatefulSet": (
        "max by (namespace, statefulset) (kube_statefulset_replicas{}) - "
        "max by (namespace, statefulset) (kube_statefulset_status_replicas_ready{})",
        ("namespace", "statefulset"),
    ),
    "DaemonSet": (
        "max by (namespace, daemonset) (kube_daemonset_status_desired_number_scheduled{}) - "
        "max by (namespace, daemonset) (kube_daemonset_status_number_available{})",
        ("namespace", "daemonset"),
    ),
    "Job": ('max by (namespace, job_name) (kube_job_failed{condition="true"}{})', ("namespace", "job_name")),
}
# Families whose presence says a kind is observed, and the pods' kind that says it should be.
_FAMILIES = {
    "StatefulSet": "kube_statefulset_replicas",
    "DaemonSet": "kube_daemonset_status_desired_number_scheduled",
    "Job": "kube_job_failed",
}


def _read(selector: str, by: str) -> str:
    """The last sample of ``selector`` in the two minutes before each step, one series per object."""
    return f"max by ({by}) (last_over_time({selector}[{open_range(120)}]))"


@dataclass(frozen=True)
class WorkloadsPolicy:
    """How long is stuck, which job is kube-state-metrics, and the cost (nothing by default)."""

    enabled: bool = True
    crit_minutes: int = 15
    warn_penalty: int = 0
    crit_penalty: int = 0
    ksm_job: str = ".*kube-state-metrics.*"
    top: int = 5


@dataclass(frozen=True)
class _Trouble:
    """One object's trouble in the window: what it was, for how many minutes, and since when."""

    kind: str
    namespace: str
    name: str
    what: str  # "not ready", "rollout", "failed"
    minutes: float
    first: float  # unix seconds
    detail: str = ""


@dataclass(frozen=True)
class WorkloadsCheck:
    """StatefulSets, DaemonSets and Jobs: short of pods, stuck rollouts, failures."""

    policy: WorkloadsPolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        return (coverage.kube_state_metrics(self.policy.ksm_job),)

    def conditions(self) -> dict[str, str]:
        """Each trouble as a PromQL condition of one step (a series while it holds)."""
        sts_short = (
            f"{_read('kube_statefulset_replicas', _STS)} - {_read('kube_statefulset_status_replicas_ready', _STS)} > 0"
        )
        # Revisions apart, and pods not yet updated: the value is how many (a rollout finishing reads 0 and ends).
        sts_rollout = (
            f"({_read('kube_statefulset_replicas', _STS)} - "
            f"{_read('kube_statefulset_status_replicas_updated', _STS)} > 0) and on ({_STS}) ("
            f"max by ({_STS}, revision) (last_over_time(kube_statefulset_status_update_revision[{open_range(120)}])) "
            f"unless on ({_STS}, revision) "
            f"max by ({_STS}, revision) (last_over_time(kube_statefulset_status_current_revision[{open_range(120)}])))"
        )
        ds_short = (
            f"{_read('kube_daemonset_status_desired_number_scheduled', _DS)} - "
            f"{_read('kube_daemonset_status_number_available', _DS)} > 0"
        )
        ds_rollout = (
            f"{_read('kube_daemonset_status_desired_number_scheduled', _DS)} - "
            f"{_read('kube_daemonset_status_updated_number_scheduled', _DS)} > 0"
        )
        job_failed = f"{_read(_JOB_FAILED, _JOB)} >= 1"
        return {
            "statefulset_short": sts_short,
            "statefulset_rollout": sts_rollout,
            "daemonset_short": ds_short,
            "daemonset_rollout": ds_rollout,
            "job_failed": job_failed,
        }

    def queries(self, window: Window) -> dict[str, str]:
        """The PromQL this check sends, by purpose (instant queries at the window's end)."""
        steps = f"[{open_range(window.seconds)}:1m]"
        rng = window.promql_range()
        out = {"ksm_up": kube_state_metrics_up_query(self.policy.ksm_job, window)}
        for purpose, condition in self.conditions().items():
            # Minutes the condition held, the first minute it held, and (a shortfall) its largest value.
            out[f"{purpose}_minutes"] = f"count_over_time(({condition}){steps})"
            out[f"{purpose}_first"] = f"min_over_time(((({condition}) * 0) + time()){steps})"
            out[f"{purpose}_worst"] = f"max_over_time(({condition}){steps})"
        # A failed Job is today's when it was seen not failed earlier in the window, or created in it.
        out["job_seen"] = f"min_over_time((({_read('kube_job_failed', _JOB)} * 0) + time()){steps})"
        out["job_created"] = f"max by ({_JOB}) (last_over_time(kube_job_created[{rng}]))"
        out["job_owner"] = (
            f'max by ({_JOB}, owner_kind, owner_name) (last_over_time(kube_job_owner{{owner_kind!=""}}[{rng}]))'
        )
        # Which controller families exist, and which kinds the pods say they belong to.
        out["families"] = " or ".join(
            f'label_replace(count(count_over_time({metric}[{rng}])), "kind", "{kind}", "", "")'
            for kind, metric in _FAMILIES.items()
        )
        out["pod_kinds"] = (
            f'count by (created_by_kind) (last_over_time(kube_pod_info{{created_by_kind=~"{"|".join(_FAMILIES)}"}}'
            f"[{rng}]))"
        )
        return out

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        missing = await kube_state_metrics_missing(sources, window, NAME, "workloads", self.policy.ksm_job)
        if missing is not None:
            return missing
        queries = self.queries(window)
        # First how long each condition held; the when and how bad only of those that held at all (a calm day asks
        # seven questions, not twenty).
        first = [name for name in queries if name.endswith("_minutes") or name in ("families", "pod_kinds")]
        try:
            rows = await _ask(sources, window, queries, first)
            held = [name.removesuffix("_minutes") for name in first if name.endswith("_minutes") and rows[name]]
            then = [f"{purpose}_{part}" for purpose in held for part in ("first", "worst")]
            if "job_failed" in held:
                then += ["job_seen", "job_created", "job_owner"]
            rows.update(await _ask(sources, window, queries, then))
        except SourceError as exc:
            return unknown(NAME, "workloads not checked: the metrics backend did not answer", str(exc))
        for name in queries:
            rows.setdefault(name, [])
        troubles = _troubles(rows, window)
        exported = {sample.labels.get("kind", "") for sample in rows["families"] if sample.value > 0}
        expected = {sample.labels.get("created_by_kind", "") for sample in rows["pod_kinds"] if sample.value > 0}
        blind = sorted(expected - exported)
        return self._finding(window, troubles, blind)

    def _finding(self, window: Window, troubles: Sequence[_Trouble], blind: Sequence[str]) -> Finding:
        policy = self.policy
        unobserved = tuple(f"{_FAMILIES[kind]}: not exported, though pods of {kind}s ran" for kind in blind)
        worst_level = 0
        offenders: list[Offender] = []
        ordered = sorted(troubles, key=lambda one: (-one.minutes, one.kind, one.namespace, one.name, one.what))
        for one in ordered:
            level = 2 if one.minutes >= policy.crit_minutes and one.what != "failed" else 1
            worst_level = max(worst_level, level)
        for one in ordered[: policy.top]:
            key = {"StatefulSet": "statefulset", "DaemonSet": "daemonset", "Job": "job_name"}[one.kind]
            # A CronJob's run is named after its CronJob, as its pods are (`checks.error_lines.workload_of`).
            workload = one.detail.split(" ", 1)[1] if one.detail.startswith("CronJob ") else one.name
            labels = {"namespace": one.namespace, key: one.name, "workload": workload, "kind": one.kind}
            labels["trouble"] = _noun(one)
            expression, keys = _LOOKS[one.kind]
            offenders.append(
                Offender(
                    labels=labels,
                    value=one.minutes,
                    facts={"minutes": Quantity(round(one.minutes), Unit.MINUTES)},
                    look=metrics_look(expression, labels, keys),
                )
            )
        status, penalty = grade(worst_level, policy.warn_penalty, policy.crit_penalty)
        if not troubles:
            if blind:
                return unknown(
                    NAME,
                    f"workloads not checked: kube-state-metrics exports no {', '.join(_FAMILIES[k] for k in blind)}",
                    "; ".join(unobserved),
                    hint="Enable the statefulsets, daemonsets and jobs resources in kube-state-metrics (--resources).",
                )
            return Finding(
                name=NAME,
                status=Status.OK,
                penalty=0,
                value=0,
                summary="no StatefulSet or DaemonSet short of pods or stuck in a rollout, no Job failed",
                unobserved=unobserved,
            )
        evidence = [f"then {_describe(one, window)}" for one in ordered[1 : policy.top]]
        if len(ordered) > policy.top:
            evidence.append(f"and {len(ordered) - policy.top} more")
        if unobserved:
            evidence.append("not observable: " + "; ".join(unobserved))
        return Finding(
            name=NAME,
            status=status,
            penalty=penalty,
            value=len({(one.kind, one.namespace, one.name) for one in troubles}),
            summary=_describe(ordered[0], window),
            offenders=offenders,
            hint="A StatefulSet or DaemonSet short of pods: its pods' restarts and events (kubectl describe pod: "
            "an init container, an image, a volume). A failed Job: its last pod's logs (kubectl logs job/<name>).",
            evidence=evidence,
            unobserved=unobserved,
        )


async def _ask(
    sources: Sources, window: Window, queries: Mapping[str, str], names: Sequence[str]
) -> dict[str, Sequence[Sample]]:
    answers = await asyncio.gather(*(sources.metrics.instant(queries[name], window.end) for name in names))
    return dict(zip(names, answers, strict=True))


def _troubles(rows: Mapping[str, Sequence[Sample]], window: Window) -> list[_Trouble]:
    """Each object's troubles, from the minutes, first minutes and worst values of each condition."""
    start = window.start.timestamp()
    out: list[_Trouble] = []
    kinds = {
        "statefulset_short": ("StatefulSet", "statefulset", "not ready"),
        "statefulset_rollout": ("StatefulSet", "statefulset", "rollout"),
        "daemonset_short": ("DaemonSet", "daemonset", "not available"),
        "daemonset_rollout": ("DaemonSet", "daemonset", "rollout"),
        "job_failed": ("Job", "job_name", "failed"),
    }
    seen = {_object(sample.labels, "job_name"): sample.value for sample in rows["job_seen"]}
    created = {_object(sample.labels, "job_name"): sample.value for sample in rows["job_created"]}
    owners = {
        _object(sample.labels, "job_name"): f"{sample.labels.get('owner_kind', '')} {sample.labels.get('owner_name')}"
        for sample in rows["job_owner"]
    }
    for purpose, (kind, key, what) in kinds.items():
        firsts = {_object(sample.labels, key): sample.value for sample in rows[f"{purpose}_first"]}
        worst = {_object(sample.labels, key): sample.value for sample in rows[f"{purpose}_worst"]}
        for sample in rows[f"{purpose}_minutes"]:
            if sample.value <= 0:
                continue
            namespace, name = _object(sample.labels, key)
            first = firsts.get((namespace, name), start)
            detail = ""
            if what == "failed":
                # Failed before the window and still listed: not today's, unless seen otherwise or created today.
                before = seen.get((namespace, name), first)
                if not (first > before or created.get((namespace, name), 0.0) >= start):
                    continue
                detail = owners.get((namespace, name), "").strip()
            elif what in ("not ready", "not available", "rollout"):
                detail = f"{fmt_int(worst.get((namespace, name), 0.0))} pod(s)"
            # Each step stands for the minute before it: from its first step to the window's end, at most.
            minutes = max(1.0, min(sample.value, (window.end.timestamp() - first) / 60))
            out.append(_Trouble(kind, namespace, name, what, minutes, first, detail))
    return out


def _object(labels: Mapping[str, str], key: str) -> tuple[str, str]:
    return labels.get("namespace", ""), labels.get(key, "")


def _noun(one: _Trouble) -> str:
    """What the headline's "to look at" says of it: "StatefulSet not ready", "DaemonSet rollout stuck", "Job failed"."""
    if one.what == "rollout":
        return f"{one.kind} rollout not complete"
    return f"{one.kind} {one.what}"


def _describe(one: _Trouble, window: Window) -> str:
    since = f" from {local_time(one.first, window)}"
    lasted = fmt_duration(one.minutes * 60)
    if one.what == "failed":
        run = f" (a run of {one.detail})" if one.detail.startswith("CronJob") else ""
        return f"Job {one.namespace}/{one.name} failed by {local_time(one.first, window)}{run}"
    if one.what == "rollout":
        return (
            f"{one.kind} {one.namespace}/{one.name}: rollout not complete for {lasted}{since} "
            f"({one.detail} not updated at worst)"
        )
    return f"{one.kind} {one.namespace}/{one.name}: {one.detail} {one.what} for {lasted}{since}"

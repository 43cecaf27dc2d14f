"""The Kubernetes object model of the corpus: containers, pods, Services, Deployments, ReplicaSets and nodes.

Frozen records of what kube-state-metrics, cAdvisor and node_exporter describe; a day module changes them with
``dataclasses.replace``. Pod names follow the controllers (Deployment ``<deploy>-<rs hash 10>-<5>``, StatefulSet
``<name>-<ordinal>``, DaemonSet ``<name>-<5>``) and derive from (workload, revision), where ``REVISIONS`` holds the
dates each workload's pod template last changed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from digest.testbed.corpus.identity import (
    ENVOY_DEPLOYMENT,
    ENVOY_NAMESPACE,
    day_start,
    pod_ip,
    safe_token,
    salt_of,
    stable_uid,
)

CONNTRACK_LIMIT = 131_072

MemoryFn = Callable[[int, int], float]
CfsFn = Callable[[Sequence[int]], tuple[list[float], list[float]]]


@dataclass(frozen=True)
class Container:
    """A container spec: what kube-state-metrics and cAdvisor report about it."""

    name: str
    image: str
    memory_base: float
    memory_limit: int | None = None
    cpu_limit: float | None = None
    probes: tuple[str, ...] = ("Readiness", "Liveness")
    cpu_busy: float = 0.2
    throttled_ratio: float = 0.03


@dataclass(frozen=True)
class Termination:
    """One container termination (``lastState.terminated``) and the restart that followed."""

    container: str
    finished_s: int
    reason: str
    exit_code: int
    restarted_s: int

    @property
    def observed_s(self) -> int:
        """When kube-state-metrics can see it: the kubelet posts the status a few seconds after finishedAt."""
        return self.finished_s + 5


@dataclass(frozen=True)
class Pod:
    """A pod and everything that happens to it over the series span."""

    namespace: str
    workload: str
    kind: str
    name: str
    uid: str
    node: str
    ip: str
    start_s: int
    containers: tuple[Container, ...]
    end_s: int | None = None
    ready_from_s: int | None = None
    not_ready: tuple[tuple[int, int], ...] = ()
    terminations: tuple[Termination, ...] = ()
    probe_failures: Mapping[tuple[str, str], tuple[int, ...]] = field(default_factory=dict)
    memory: Mapping[str, MemoryFn] = field(default_factory=dict)
    cfs: Mapping[str, CfsFn] = field(default_factory=dict)
    # metadata.deletionTimestamp: from then the pod is terminating (out of the ready endpoints, no longer counted by
    # its ReplicaSet) until ``end_s``, when the object is gone. None: the pod simply ends at ``end_s``.
    deleted_s: int | None = None

    @property
    def workload_key(self) -> str:
        """``<namespace>/<workload>``, the key every per-workload fact uses."""
        return f"{self.namespace}/{self.workload}"

    @property
    def replicaset(self) -> str:
        """The owning ReplicaSet of a Deployment pod (``<deploy>-<rs hash 10>``); empty for other kinds."""
        return self.name.rsplit("-", 1)[0] if self.kind == "Deployment" else ""

    @property
    def counted_until(self) -> int:
        """When its ReplicaSet stops counting the pod: deletion (scale-down, eviction) or the end of the object."""
        if self.deleted_s is not None:
            return self.deleted_s
        return self.end_s if self.end_s is not None else 2**62

    def alive(self, t: int) -> bool:
        """Whether the pod object exists at ``t``."""
        return self.start_s <= t and (self.end_s is None or t < self.end_s)

    def terminating(self, t: int) -> bool:
        """Whether the pod exists with a deletion timestamp at ``t``."""
        return self.deleted_s is not None and self.deleted_s <= t and self.alive(t)

    def ready(self, t: int) -> bool:
        """Whether the pod's Ready condition is true at ``t`` (never once it is terminating)."""
        if not self.alive(t):
            return False
        if t < (self.ready_from_s if self.ready_from_s is not None else self.start_s):
            return False
        if self.deleted_s is not None and t >= self.deleted_s:
            return False
        return not any(a <= t < b for a, b in self.not_ready)

    def container(self, name: str) -> Container:
        """Return the container spec called ``name``."""
        for c in self.containers:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no container {name!r}")

    def instances(self, container: str) -> list[tuple[int, int, int]]:
        """Return ``(restart_count, start_s, end_s)`` for each run of a container (end exclusive)."""
        terms = sorted((x for x in self.terminations if x.container == container), key=lambda x: x.finished_s)
        end_of_pod = self.end_s if self.end_s is not None else 2**62
        runs: list[tuple[int, int, int]] = []
        begin = self.start_s
        for i, term in enumerate(terms):
            runs.append((i, begin, term.finished_s))
            begin = term.restarted_s
        runs.append((len(terms), begin, end_of_pod))
        return runs


def deployment_pod(
    namespace: str,
    deployment: str,
    revision: str,
    index: int,
    node: str,
    containers: tuple[Container, ...],
    start_s: int,
    slot: int | None = None,
) -> Pod:
    """Return a Deployment pod ``<deploy>-<rs hash 10>-<5>`` for ``revision`` (one ReplicaSet per revision)."""
    rs_hash = safe_token(10, "rs", namespace, deployment, revision)
    suffix = safe_token(5, "pod", namespace, deployment, revision, str(index))
    name = f"{deployment}-{rs_hash}-{suffix}"
    key = f"{namespace}/{deployment}"
    return Pod(
        namespace=namespace,
        workload=deployment,
        kind="Deployment",
        name=name,
        uid=stable_uid(namespace, name),
        node=node,
        ip=pod_ip(key, node, index if slot is None else slot),
        start_s=start_s,
        containers=containers,
    )


def statefulset_pod(
    namespace: str,
    statefulset: str,
    revision: str,
    ordinal: int,
    node: str,
    containers: tuple[Container, ...],
    start_s: int,
) -> Pod:
    """Return a StatefulSet pod ``<name>-<ordinal>`` (a recreated pod keeps the name, not the uid)."""
    name = f"{statefulset}-{ordinal}"
    key = f"{namespace}/{statefulset}"
    return Pod(
        namespace=namespace,
        workload=statefulset,
        kind="StatefulSet",
        name=name,
        uid=stable_uid(namespace, name, revision),
        node=node,
        ip=pod_ip(key, node, ordinal),
        start_s=start_s,
        containers=containers,
    )


def daemonset_pod(
    namespace: str, daemonset: str, revision: str, node: str, containers: tuple[Container, ...], start_s: int
) -> Pod:
    """Return a DaemonSet pod ``<name>-<5>`` on ``node``."""
    name = f"{daemonset}-{safe_token(5, 'ds', namespace, daemonset, revision, node)}"
    key = f"{namespace}/{daemonset}"
    return Pod(
        namespace=namespace,
        workload=daemonset,
        kind="DaemonSet",
        name=name,
        uid=stable_uid(namespace, name),
        node=node,
        ip=pod_ip(key, node, 0),
        start_s=start_s,
        containers=containers,
    )


@dataclass(frozen=True)
class Service:
    """A Service and its single IPv4 EndpointSlice (``<service>-<5>``)."""

    namespace: str
    name: str
    workload: str
    port: int

    @property
    def slice_name(self) -> str:
        """The EndpointSlice name: generateName ``<service>-`` plus five safe characters."""
        return f"{self.name}-{safe_token(5, 'slice', self.namespace, self.name)}"

    @property
    def workload_key(self) -> str:
        """``<namespace>/<workload>`` of the pods the Service selects."""
        return f"{self.namespace}/{self.workload}"


STRATEGIES = ("RollingUpdate", "Recreate")


def scaled_value(value: int | str, total: int, round_up: bool) -> int:
    """Resolve an int-or-percent against ``total`` like ``intstr.GetScaledValueFromIntOrPercent``."""
    if isinstance(value, int):
        return value
    if not value.endswith("%"):
        raise ValueError(f"an int-or-percent string ends with %, got {value!r}")
    pct = int(value[:-1])
    return -(-pct * total // 100) if round_up else pct * total // 100


@dataclass(frozen=True)
class Deployment:
    """A Deployment's spec: desired replicas and rollout strategy (what kube-state-metrics reports about it).

    ``max_unavailable`` and ``max_surge`` matter only for ``RollingUpdate``; kube-state-metrics resolves them
    against ``replicas`` (maxUnavailable rounds down, maxSurge rounds up) and exports none for ``Recreate``.
    """

    namespace: str
    name: str
    replicas: int
    strategy: str = "RollingUpdate"
    max_unavailable: int | str = "25%"
    max_surge: int | str = "25%"

    def __post_init__(self) -> None:
        """Reject an unknown strategy."""
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")

    @property
    def workload_key(self) -> str:
        """``<namespace>/<name>``."""
        return f"{self.namespace}/{self.name}"

    @property
    def max_unavailable_replicas(self) -> int | None:
        """The maxUnavailable kube-state-metrics reports: resolved, rounded down; None for Recreate."""
        if self.strategy != "RollingUpdate":
            return None
        return scaled_value(self.max_unavailable, self.replicas, round_up=False)

    @property
    def max_surge_replicas(self) -> int | None:
        """The maxSurge kube-state-metrics reports: resolved, rounded up; None for Recreate."""
        if self.strategy != "RollingUpdate":
            return None
        return scaled_value(self.max_surge, self.replicas, round_up=True)

    @property
    def generation_base(self) -> int:
        """A stable metadata.generation offset (scale changes and edits before the corpus also bumped it)."""
        return 2 + salt_of("generation", self.namespace, self.name) % 9


@dataclass(frozen=True)
class ReplicaSet:
    """One ReplicaSet (revision) of a Deployment and the pods it owned over the series span.

    ``spec`` follows the rollout: a pod is counted from its ReplicaSet's scale-up (a moment before the pod is
    created) until it is deleted (scale-down, eviction), so a pod replaced without a template change hands its
    count to its replacement in the same ReplicaSet.
    """

    namespace: str
    name: str
    deployment: str
    created_s: int
    pods: tuple[Pod, ...] = ()

    def spec(self, t: int) -> int:
        """spec.replicas at ``t``."""
        return sum(1 for p in self.pods if p.start_s - 1 <= t < p.counted_until)

    def ready(self, t: int) -> int:
        """status.readyReplicas at ``t``."""
        return sum(1 for p in self.pods if p.ready(t))


REVISION_HISTORY_LIMIT = 10


def deployment_replicasets(dep: Deployment, pods: Sequence[Pod], d: dt.date) -> list[ReplicaSet]:
    """The ReplicaSets of a Deployment on day ``d``, oldest first: from its pods, plus the revisions kept at 0.

    A ReplicaSet of a revision in ``REVISIONS`` was created just before 10:00Z on the revision date; any other
    (a day's own rollout) just before its first pod. The controller keeps ``revisionHistoryLimit`` (10) old ones.
    """
    members: dict[str, list[Pod]] = {}
    for p in pods:
        if p.workload_key == dep.workload_key and p.kind == "Deployment":
            members.setdefault(p.replicaset, []).append(p)
    created: dict[str, int] = {}
    for rev in REVISIONS.get(dep.workload_key, ()):
        if dt.date.fromisoformat(rev) <= d:
            created[f"{dep.name}-{safe_token(10, 'rs', dep.namespace, dep.name, rev)}"] = revision_start(rev) - 1
    for name, ps in members.items():
        created.setdefault(name, min(p.start_s for p in ps) - 1)
    out = [
        ReplicaSet(
            dep.namespace,
            name,
            dep.name,
            at,
            tuple(sorted(members.get(name, ()), key=lambda p: (p.start_s, p.name))),
        )
        for name, at in created.items()
    ]
    out.sort(key=lambda r: (r.created_s, r.name))
    return out[-(REVISION_HISTORY_LIMIT + 1) :]


def _zero(t: int) -> int:
    del t
    return 0


@dataclass(frozen=True)
class NodeModel:
    """What node_exporter reports for one node."""

    name: str
    conntrack: Callable[[int], int]
    drop: Callable[[int], int] = _zero
    early_drop: Callable[[int], int] = _zero
    oom_kill: Callable[[int], int] = _zero


# Revisions: the date a workload's pod template last changed before a day. Pods are created at 10:00Z that day.
REVISIONS: Mapping[str, tuple[str, ...]] = {
    "feeds/feed-aggregator": ("2026-06-12", "2026-07-27", "2026-09-02", "2026-10-01"),
    "shop/api": ("2026-07-02", "2026-08-11", "2026-08-15", "2026-09-02", "2026-10-01", "2026-10-14", "2026-10-22"),
    "shop/web": ("2026-07-02", "2026-08-03", "2026-09-02", "2026-10-01"),
    "monitoring/victoria-metrics": ("2026-07-02", "2026-09-02"),
    "logging/vector": ("2026-07-02", "2026-07-21", "2026-09-02"),
    f"{ENVOY_NAMESPACE}/{ENVOY_DEPLOYMENT}": ("2026-07-02", "2026-08-03", "2026-09-02", "2026-10-01"),
}


def revision(workload_key: str, d: dt.date) -> str:
    """Return the revision (change date) of a workload in force on day ``d``."""
    current = REVISIONS[workload_key][0]
    for rev in REVISIONS[workload_key]:
        if dt.date.fromisoformat(rev) <= d:
            current = rev
    return current


def revision_start(rev: str) -> int:
    """Pods of a revision were created at 10:00Z on the revision date."""
    return day_start(dt.date.fromisoformat(rev[:10])) + 10 * 3_600

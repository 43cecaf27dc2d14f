"""The homelab cluster every corpus day runs on: identities, normal behaviour, and the shared generators.

Cluster "homelab": three Raspberry Pi 5 nodes (``pi5-1..3``) running a feed aggregator, a small shop (api + web),
VictoriaMetrics, Vector and an Envoy Gateway proxy. A day module starts from ``Homelab.standard(date)``, changes
what its incident changed (a pod restarts, an endpoint empties, a node's conntrack table fills) and lets
``HomelabDay`` turn the result into exporter series, Vector log records and the expected digest.

Why the numbers are what they are:

* Baselines are functions of absolute time and pod identities are derived from (workload, revision), so two
  adjacent days (07-19/07-20, 08-16/08-17) produce identical samples where their series overlap
  (D 00:00Z-00:30Z of the later day), except where the later day's incident has already begun.
* Normal conntrack is a few thousand entries per node with a diurnal shape; the limit is 131,072 (Pi 5, 16 GiB).
* The feed aggregator writes about 3,000 lines an hour (write-up 001); the shop and the gateway follow a
  European homelab's day: quiet at 03:00-05:00Z, busiest at 18:00-20:00Z.
* Every count that lands in ``Expected.facts`` comes from a plan computed before any line is rendered, so the
  counts are exact and cheap, and ``log_chunks()`` only streams (it never holds a day of lines in memory).
"""

from __future__ import annotations

import abc
import calendar
import datetime as dt
import hashlib
import itertools
import json
import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from digest.corpus.model import Expected, Series

SCRAPE_S = 30
DAY_S = 86_400
MINUTES = 1_440
LOOKBACK_S = 2 * 3_600
TAIL_S = 30 * 60
CHUNK_RECORDS = 20_000
BLOCK_S = 10

GIB = 1 << 30
MIB = 1 << 20

NODES = ("pi5-1", "pi5-2", "pi5-3")
NODE_INDEX = {"pi5-1": 0, "pi5-2": 1, "pi5-3": 2}
CONNTRACK_LIMIT = 131_072

# Kubernetes' rand.String / SafeEncodeString alphabet: no vowels (no words), no 0/1/3 (no look-alikes).
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

KSM = {"job": "kube-state-metrics", "instance": "kube-state-metrics.monitoring:8080"}
VMALERT = {"job": "vmalert", "instance": "vmalert.monitoring:8880"}
CADVISOR = {"job": "kubelet", "metrics_path": "/metrics/cadvisor"}
PROBES = {"job": "kubelet", "metrics_path": "/metrics/probes"}

ENVOY_DEPLOYMENT = "envoy-default-eg-e41e7b31"
ENVOY_NAMESPACE = "envoy-gateway-system"

ERROR_LEVELS = frozenset({"error", "err", "fatal", "critical", "panic"})
_ERROR_WORD = re.compile(r"\berror\b", re.IGNORECASE)


def is_error_record(level: str | None, message: str) -> bool:
    """Apply the digest's default error-line rule to one record.

    A record with a ``level`` field is an error when the level is error/err/fatal/critical/panic (any case);
    without one, when its message contains the word "error" (any case, word boundaries as VictoriaLogs tokenises:
    letters, digits and ``_`` are word characters, so ``errors`` and ``error_count`` are not the word).
    """
    if level is not None:
        return level.lower() in ERROR_LEVELS
    return _ERROR_WORD.search(message) is not None


# --------------------------------------------------------------------------------------------------- time


@dataclass(frozen=True)
class Window:
    """The digest window of one day, plus the wider span its metric series cover."""

    date: dt.date

    @cached_property
    def start_s(self) -> int:
        """Unix seconds of D 00:00Z."""
        return calendar.timegm(self.date.timetuple())

    @property
    def end_s(self) -> int:
        """Unix seconds of D+1 00:00Z (exclusive end of the window)."""
        return self.start_s + DAY_S

    @property
    def series_start_s(self) -> int:
        """Series begin at D-1 22:00Z so look-backs and ``offset`` before the window find data."""
        return self.start_s - LOOKBACK_S

    @property
    def series_end_s(self) -> int:
        """Series end at D+1 00:30Z so an instant query at the window end has fresh samples."""
        return self.end_s + TAIL_S

    def scrapes(self) -> list[int]:
        """Every scrape time (unix seconds) of the series span, both ends included."""
        return list(range(self.series_start_s, self.series_end_s + 1, SCRAPE_S))

    def at(self, hhmmss: str, day_offset: int = 0) -> int:
        """Unix seconds of ``HH:MM[:SS]`` UTC on the window's day (or a neighbouring one)."""
        parts = [int(p) for p in hhmmss.split(":")]
        while len(parts) < 3:
            parts.append(0)
        return self.start_s + day_offset * DAY_S + parts[0] * 3_600 + parts[1] * 60 + parts[2]

    def in_window(self, t: int) -> bool:
        """Whether ``t`` falls in ``[D 00:00Z, D+1 00:00Z)``."""
        return self.start_s <= t < self.end_s


def iso(t: int) -> str:
    """Format unix seconds as ``2026-07-20T06:15:00Z``."""
    return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def day_start(d: dt.date) -> int:
    """Unix seconds of ``d`` 00:00Z."""
    return calendar.timegm(d.timetuple())


# --------------------------------------------------------------------------------------------------- identity


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()


def salt_of(*parts: str) -> int:
    """Return a stable 32-bit integer for a name (seeds every deterministic choice)."""
    return int.from_bytes(_digest(*parts)[:4], "big")


def safe_token(length: int, *parts: str) -> str:
    """Return ``length`` characters of Kubernetes' safe alphabet, derived from ``parts``."""
    raw = _digest(*parts)
    while len(raw) < length:
        raw += _digest(raw.hex())
    return "".join(SAFE_ALPHABET[b % len(SAFE_ALPHABET)] for b in raw[:length])


def stable_uid(*parts: str) -> str:
    """Return a UUIDv4-shaped id (what the API server assigns to a pod)."""
    h = _digest("uid", *parts).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) % 4]}{h[17:20]}-{h[20:32]}"


def container_id(*parts: str) -> str:
    """Return a containerd container id (64 hex characters)."""
    return _digest("cid", *parts).hex()


# Pod IPs: 10.42.<node>.<workload base + slot> (k3s' default pod CIDR). Disjoint bases keep every address unique.
_IP_BASE = {
    "feeds/feed-aggregator": 10,
    "shop/api": 20,
    "shop/web": 30,
    "monitoring/victoria-metrics": 40,
    "logging/vector": 50,
    f"{ENVOY_NAMESPACE}/{ENVOY_DEPLOYMENT}": 60,
    "shop/status-page": 70,
    "pricing/pricing": 80,
}


def pod_ip(workload_key: str, node: str, slot: int) -> str:
    """Return the pod IP for slot ``slot`` of a workload on ``node``."""
    return f"10.42.{NODE_INDEX[node]}.{_IP_BASE[workload_key] + slot}"


# --------------------------------------------------------------------------------------------------- baselines

# Share of a European homelab's peak traffic per UTC hour (value at the middle of the hour).
USER_PROFILE = (
    0.34,
    0.24,
    0.17,
    0.13,
    0.12,
    0.16,
    0.28,
    0.45,
    0.60,
    0.68,
    0.72,
    0.76,
    0.80,
    0.78,
    0.75,
    0.77,
    0.83,
    0.92,
    1.00,
    1.00,
    0.94,
    0.82,
    0.63,
    0.46,
)


def user_profile(t: float) -> float:
    """Traffic share (0.12-1.0) at unix time ``t``, interpolated between hour centres."""
    x = (t % DAY_S) / 3_600.0 - 0.5
    i = math.floor(x)
    f = x - i
    return USER_PROFILE[i % 24] * (1.0 - f) + USER_PROFILE[(i + 1) % 24] * f


def flat_profile(t: float) -> float:
    """Constant profile for scheduled work (collectors, pool stats)."""
    del t
    return 1.0


def wobble(t: int, salt: int) -> float:
    """Deterministic noise in [-1, 1] for the 30 s step containing ``t`` (same value on every day that has it)."""
    x = ((t // SCRAPE_S) * 2_654_435_761 + salt * 97_531) % 1_000_003
    return x / 500_001.5 - 1.0


def memory_baseline(t: int, base: float, salt: int) -> float:
    """Working set of a steady container: ±3 % diurnal drift plus ±1 % scrape noise."""
    phase = (salt % 628) / 100.0
    return float(round(base * (1.0 + 0.03 * math.sin(2 * math.pi * t / DAY_S + phase) + 0.01 * wobble(t, salt))))


_CONNTRACK_BASE = {"pi5-1": (2_600, 1_500), "pi5-2": (3_400, 1_300), "pi5-3": (2_300, 1_100)}
_CONNTRACK_SALT = {node: salt_of("conntrack", node) for node in NODES}


def conntrack_baseline(node: str, t: int) -> int:
    """Return the normal conntrack entries of a node: a few thousand, following the users' day."""
    base, amp = _CONNTRACK_BASE[node]
    return int(base + amp * user_profile(t) + 120 * wobble(t, _CONNTRACK_SALT[node]))


def cfs_baseline(start_s: int, salt: int, busy: float, throttled_ratio: float) -> CfsFn:
    """Closed-form CFS counters of a container with a CPU limit (100 ms periods, diurnal activity).

    ``busy`` is the average share of periods in which the container ran; closed form keeps adjacent days equal.
    """
    omega = 2 * math.pi / DAY_S
    peak = 19 * 3_600 + salt % 3_600
    a0 = busy
    a1 = busy * 0.6

    def integral(t: float) -> float:
        wave = math.sin(omega * (t - peak)) - math.sin(omega * (start_s - peak))
        return 10.0 * (a0 * (t - start_s) + (a1 / omega) * wave)

    def counters(times: Sequence[int]) -> tuple[list[float], list[float]]:
        periods = [float(math.floor(integral(t))) for t in times]
        throttled = [float(math.floor(p * throttled_ratio)) for p in periods]
        return periods, throttled

    return counters


# --------------------------------------------------------------------------------------------------- workloads

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

# The 500m CPU limit on shop/api was removed on 2026-08-15 (write-up 000, !299). A chart upgrade brought the chart's
# default (500m) back on 2026-10-14; it was removed again on 2026-10-22, after the spiral of 2026-10-20.
API_CPU_LIMIT_REMOVED = dt.date(2026, 8, 15)
API_CPU_LIMIT_BACK = (dt.date(2026, 10, 14), dt.date(2026, 10, 22))


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


def feed_container() -> Container:
    """Return the feed aggregator's backend: FastAPI + Node.js relay, 8 GiB limit since 2026-06-12."""
    return Container("backend", "ghcr.io/homelab/feed-aggregator:2026.06.3", 4.8 * GIB, memory_limit=8 * GIB)


def api_container(d: dt.date) -> Container:
    """shop/api's uvicorn container; the 500m CPU limit exists before 2026-08-15 and from 2026-10-14 to 2026-10-21."""
    limited = d < API_CPU_LIMIT_REMOVED or API_CPU_LIMIT_BACK[0] <= d < API_CPU_LIMIT_BACK[1]
    cpu = 0.5 if limited else None
    return Container(
        "api",
        "ghcr.io/homelab/shop-api:1.12.0",
        180 * MIB,
        memory_limit=512 * MIB,
        cpu_limit=cpu,
        cpu_busy=0.25,
        throttled_ratio=0.04,
    )


# --------------------------------------------------------------------------------------------------- series


def _series(name: str, labels: Mapping[str, str], times: Sequence[int], values: Sequence[float]) -> Series:
    return Series(labels={"__name__": name, **labels}, timestamps_ms=[t * 1_000 for t in times], values=values)


Intervals = Sequence[tuple[int, int]]


def _inside(t: int, spans: Intervals) -> bool:
    return any(a <= t < b for a, b in spans)


def up_series(
    w: Window, prober_scraped: bool = True, kubelet_down: Mapping[str, Intervals] | None = None
) -> Iterator[Series]:
    """``up`` for kube-state-metrics, vmalert, every node_exporter and every kubelet endpoint.

    vmalert runs every day (the homelab had alerting on 07-20; it just had no rule that fired): its ``up`` is what
    lets the digest say "no alert fired" rather than "alerting not observable". A kubelet that hangs fails its
    scrapes (``up`` 0 on both of its endpoints); a cluster that does not scrape ``/metrics/probes`` has no target.
    """
    times = w.scrapes()
    ones = [1.0] * len(times)
    down = kubelet_down or {}
    yield _series("up", KSM, times, ones)
    yield _series("up", VMALERT, times, ones)
    for node in NODES:
        kubelet = [0.0 if _inside(t, down.get(node, ())) else 1.0 for t in times]
        yield _series("up", {"job": "node-exporter", "instance": f"{node}:9100"}, times, ones)
        yield _series("up", {**CADVISOR, "instance": node}, times, kubelet)
        if prober_scraped:
            yield _series("up", {**PROBES, "instance": node}, times, kubelet)


# The nodes' addresses on the home LAN, as kube-state-metrics' kube_node_info{internal_ip} reports them.
NODE_IPS = {"pi5-1": "192.168.1.21", "pi5-2": "192.168.1.22", "pi5-3": "192.168.1.23"}


def node_object_series(w: Window, unknown: Mapping[str, Intervals] | None = None) -> Iterator[Series]:
    """kube-state-metrics' node objects: info (with the internal IP), schedulable, and the Ready condition.

    Ready is true all day, except in the ``unknown`` spans of a node (its kubelet silent for the grace period).
    """
    times = w.scrapes()
    ones, zeros = [1.0] * len(times), [0.0] * len(times)
    for node in NODES:
        lost = (unknown or {}).get(node, ())
        ready = [0.0 if _inside(t, lost) else 1.0 for t in times] if lost else ones
        not_known = [1.0 if _inside(t, lost) else 0.0 for t in times] if lost else zeros
        info = {
            **KSM,
            "node": node,
            "internal_ip": NODE_IPS[node],
            "kernel_version": "6.6.31+rpt-rpi-2712",
            "os_image": "Debian GNU/Linux 12 (bookworm)",
            "container_runtime_version": "containerd://1.7.17-k3s1",
            "kubelet_version": "v1.30.2+k3s2",
        }
        yield _series("kube_node_info", info, times, ones)
        yield _series("kube_node_spec_unschedulable", {**KSM, "node": node}, times, zeros)
        for status, values in (("true", ready), ("false", zeros), ("unknown", not_known)):
            labels = {**KSM, "node": node, "condition": "Ready", "status": status}
            yield _series("kube_node_status_condition", labels, times, values)


def node_series(w: Window, nodes: Sequence[NodeModel]) -> Iterator[Series]:
    """node_exporter's conntrack and vmstat families for each node."""
    times = w.scrapes()
    for node in nodes:
        base = {"job": "node-exporter", "instance": f"{node.name}:9100"}
        yield _series("node_nf_conntrack_entries", base, times, [float(node.conntrack(t)) for t in times])
        yield _series("node_nf_conntrack_entries_limit", base, times, [float(CONNTRACK_LIMIT)] * len(times))
        yield _series("node_nf_conntrack_stat_drop", base, times, [float(node.drop(t)) for t in times])
        yield _series("node_nf_conntrack_stat_early_drop", base, times, [float(node.early_drop(t)) for t in times])
        yield _series("node_scrape_collector_success", {**base, "collector": "conntrack"}, times, [1.0] * len(times))
        yield _series("node_vmstat_oom_kill", base, times, [float(node.oom_kill(t)) for t in times])


def _probe_first(pod: Pod, container: str, probe_type: str) -> int:
    # initialDelaySeconds 10 plus a per-container phase: kubelet staggers probe workers.
    return pod.start_s + 10 + salt_of(pod.uid, container, probe_type) % 10


def first_probe(pod: Pod, container: str, probe_type: str = "Readiness") -> int:
    """When the kubelet first probes a container (a new pod becomes ready at its first successful readiness probe)."""
    return _probe_first(pod, container, probe_type)


def probe_times(pod: Pod, container: str, probe_type: str, a: int, b: int) -> list[int]:
    """Return the times (unix seconds) of the probes of one container in ``[a, b)`` (period 10 s)."""
    first = _probe_first(pod, container, probe_type)
    k0 = max(0, -(-(a - first) // 10))
    out: list[int] = []
    t = first + 10 * k0
    while t < b:
        if pod.alive(t):
            out.append(t)
        t += 10
    return out


def readiness_intervals(probes: Sequence[int], failures: set[int], threshold: int = 3) -> list[tuple[int, int]]:
    """Not-ready spans implied by probe results: down at the ``threshold``-th consecutive failure, up at a success."""
    out: list[tuple[int, int]] = []
    consecutive = 0
    down_since: int | None = None
    for p in probes:
        if p in failures:
            consecutive += 1
            if consecutive == threshold and down_since is None:
                down_since = p
        else:
            consecutive = 0
            if down_since is not None:
                out.append((down_since, p))
                down_since = None
    if down_since is not None:
        out.append((down_since, probes[-1] + 10))
    return out


def _probes_before(pod: Pod, container: str, probe_type: str, t: int) -> int:
    first = _probe_first(pod, container, probe_type)
    if t <= first:
        return 0
    return (t - first - 1) // 10 + 1


def pod_series(w: Window, pod: Pod, prober_scraped: bool = True, kubelet_down: Intervals = ()) -> Iterator[Series]:
    """kube-state-metrics, cAdvisor and prober series of one pod, for the scrapes when it existed.

    ``kubelet_down``: spans when the kubelet of the pod's node answered no scrape (no cAdvisor, no prober sample,
    and no probe run); ``prober_scraped`` False: ``/metrics/probes`` is not scraped at all.
    """
    times = [t for t in w.scrapes() if pod.alive(t)]
    if not times:
        return
    ident = {"namespace": pod.namespace, "pod": pod.name, "uid": pod.uid}
    placed = {**KSM, **ident, "node": pod.node, "host_ip": NODE_IPS[pod.node]}
    yield _series("kube_pod_info", placed, times, [1.0] * len(times))
    if pod.deleted_s is not None:
        deleting = [t for t in times if t >= pod.deleted_s]
        if deleting:
            yield _series(
                "kube_pod_deletion_timestamp", {**KSM, **ident}, deleting, [float(pod.deleted_s)] * len(deleting)
            )
    ready = [pod.ready(t) for t in times]
    for condition, vals in (
        ("true", [1.0 if r else 0.0 for r in ready]),
        ("false", [0.0 if r else 1.0 for r in ready]),
        ("unknown", [0.0] * len(times)),
    ):
        yield _series("kube_pod_status_ready", {**KSM, **ident, "condition": condition}, times, vals)
    for c in pod.containers:
        yield from _container_series(pod, c, times, ident, prober_scraped, kubelet_down)


def _container_series(
    pod: Pod,
    c: Container,
    times: list[int],
    ident: Mapping[str, str],
    prober_scraped: bool = True,
    kubelet_down: Intervals = (),
) -> Iterator[Series]:
    cid = {**KSM, **ident, "container": c.name}
    terms = sorted((x for x in pod.terminations if x.container == c.name), key=lambda x: x.finished_s)
    restarts = [float(sum(1 for x in terms if x.observed_s <= t)) for t in times]
    yield _series("kube_pod_container_status_restarts_total", cid, times, restarts)
    if c.memory_limit is not None:
        yield _series(
            "kube_pod_container_resource_limits",
            {**cid, "node": pod.node, "resource": "memory", "unit": "byte"},
            times,
            [float(c.memory_limit)] * len(times),
        )
    if c.cpu_limit is not None:
        yield _series(
            "kube_pod_container_resource_limits",
            {**cid, "node": pod.node, "resource": "cpu", "unit": "core"},
            times,
            [c.cpu_limit] * len(times),
        )
    yield from _termination_series(terms, cid, times)
    kubelet_times = [t for t in times if not _inside(t, kubelet_down)] if kubelet_down else times
    yield from _cadvisor_series(pod, c, kubelet_times)
    if prober_scraped:
        yield from _prober_series(pod, c, kubelet_times, kubelet_down)


def _termination_series(terms: Sequence[Termination], cid: Mapping[str, str], times: list[int]) -> Iterator[Series]:
    # The reason series carries the reason as a label: when it changes, kube-state-metrics simply stops exposing
    # the old series (no staleness marker reaches VictoriaMetrics through import) and starts the new one.
    if not terms:
        return
    by_reason: dict[str, tuple[list[int], list[float]]] = {}
    ts_t: list[int] = []
    ts_v: list[float] = []
    ex_v: list[float] = []
    for t in times:
        seen = [x for x in terms if x.observed_s <= t]
        if not seen:
            continue
        last = seen[-1]
        ts_t.append(t)
        ts_v.append(float(last.finished_s))
        ex_v.append(float(last.exit_code))
        slot = by_reason.setdefault(last.reason, ([], []))
        slot[0].append(t)
        slot[1].append(1.0)
    for reason, (rt, rv) in by_reason.items():
        yield _series("kube_pod_container_status_last_terminated_reason", {**cid, "reason": reason}, rt, rv)
    if ts_t:
        yield _series("kube_pod_container_status_last_terminated_timestamp", cid, ts_t, ts_v)
        yield _series("kube_pod_container_status_last_terminated_exitcode", cid, ts_t, ex_v)


def _cadvisor_series(pod: Pod, c: Container, times: list[int]) -> Iterator[Series]:
    salt = salt_of(pod.uid, c.name)
    memory_fn = pod.memory.get(c.name)
    for restart, a, b in pod.instances(c.name):
        inst_times = [t for t in times if a <= t < b]
        if not inst_times:
            continue
        cid = container_id(pod.uid, c.name, str(restart))
        labels = {
            **CADVISOR,
            "instance": pod.node,
            "namespace": pod.namespace,
            "pod": pod.name,
            "container": c.name,
            "id": f"/kubepods/burstable/pod{pod.uid}/{cid}",
            "image": c.image,
            "name": cid,
        }
        if memory_fn is not None:
            mem = [float(round(memory_fn(t, restart))) for t in inst_times]
        else:
            mem = [memory_baseline(t, c.memory_base, salt) for t in inst_times]
        yield _series("container_memory_working_set_bytes", labels, inst_times, mem)
        if c.cpu_limit is None:
            continue
        cfs_fn = pod.cfs.get(c.name) or cfs_baseline(a, salt, c.cpu_busy, c.throttled_ratio)
        periods, throttled = cfs_fn(inst_times)
        yield _series("container_cpu_cfs_periods_total", labels, inst_times, periods)
        yield _series("container_cpu_cfs_throttled_periods_total", labels, inst_times, throttled)


def _prober_series(pod: Pod, c: Container, times: list[int], kubelet_down: Intervals = ()) -> Iterator[Series]:
    for probe_type in c.probes:
        failures = sorted(pod.probe_failures.get((c.name, probe_type), ()))
        labels = {
            **PROBES,
            "instance": pod.node,
            "namespace": pod.namespace,
            "pod": pod.name,
            "container": c.name,
            "pod_uid": pod.uid,
            "probe_type": probe_type,
        }
        total = [_probes_before(pod, c.name, probe_type, t) for t in times]
        if kubelet_down:
            # A hung kubelet runs no probe: its counters resume where they stopped.
            skipped = [
                (_probes_before(pod, c.name, probe_type, a), _probes_before(pod, c.name, probe_type, b))
                for a, b in kubelet_down
            ]
            total = [n - sum(min(n, hi) - min(n, lo) for lo, hi in skipped) for n in total]
        failed = [bisect_left(failures, t) for t in times]
        ok_t = [t for t, n in zip(times, total, strict=True) if n > 0]
        ok_v = [float(n - f) for n, f in zip(total, failed, strict=True) if n > 0]
        if ok_t:
            yield _series("prober_probe_total", {**labels, "result": "successful"}, ok_t, ok_v)
        # The kubelet creates the "failed" child of the counter vector at the first failure.
        f_t = [t for t, f in zip(times, failed, strict=True) if f > 0]
        f_v = [float(f) for f in failed if f > 0]
        if f_t:
            yield _series("prober_probe_total", {**labels, "result": "failed"}, f_t, f_v)


def endpointslice_series(w: Window, svc: Service, pods: Sequence[Pod]) -> Iterator[Series]:
    """kube-state-metrics' EndpointSlice families: info, labels, and one series per (address, conditions)."""
    times = w.scrapes()
    base = {**KSM, "namespace": svc.namespace, "endpointslice": svc.slice_name}
    ones = [1.0] * len(times)
    yield _series("kube_endpointslice_info", {**base, "addresstype": "IPv4"}, times, ones)
    yield _series("kube_endpointslice_labels", {**base, "label_kubernetes_io_service_name": svc.name}, times, ones)
    members = [p for p in pods if p.workload_key == svc.workload_key]
    collected: dict[tuple[str, str, str, str], tuple[Pod, list[int]]] = {}
    for t in times:
        for p in members:
            listed_from = p.ready_from_s if p.ready_from_s is not None else p.start_s
            if not p.alive(t) or t < listed_from:
                # A pod still being created (image pull, sandbox) has no address yet: the slice lists nothing.
                continue
            r = "true" if p.ready(t) else "false"
            term = "true" if p.terminating(t) else "false"
            collected.setdefault((p.name, r, p.ip, term), (p, []))[1].append(t)
    for (_, r, ip, term), (p, ts) in sorted(collected.items()):
        labels = {
            **base,
            "address": ip,
            "ready": r,
            "serving": r,
            "terminating": term,
            "hostname": p.name if p.kind == "StatefulSet" else "",
            "targetref_kind": "Pod",
            "targetref_name": p.name,
            "targetref_namespace": p.namespace,
            "endpoint_nodename": p.node,
            "endpoint_zone": "",
        }
        yield _series("kube_endpointslice_endpoints", labels, ts, [1.0] * len(ts))


def deployment_series(
    w: Window, dep: Deployment, pods: Sequence[Pod], replicasets: Sequence[ReplicaSet] = ()
) -> Iterator[Series]:
    """kube-state-metrics' Deployment families and those of its ReplicaSets.

    ``kube_deployment_status_replicas_unavailable``: desired replicas minus ready pods, never below 0. Generation:
    a stable base plus one per ReplicaSet created so far (a template change creates one; an evicted pod's
    replacement does not); the controller observes it at once, so ``observed_generation`` equals it at every
    scrape. maxUnavailable/maxSurge only for RollingUpdate, resolved against spec.replicas.
    """
    times = w.scrapes()
    members = [p for p in pods if p.workload_key == dep.workload_key]
    vals = [float(max(0, dep.replicas - sum(1 for p in members if p.ready(t)))) for t in times]
    ident = {**KSM, "namespace": dep.namespace, "deployment": dep.name}
    yield _series("kube_deployment_status_replicas_unavailable", ident, times, vals)
    if not replicasets:
        return
    yield _series("kube_deployment_spec_replicas", ident, times, [float(dep.replicas)] * len(times))
    # Available = ready here (minReadySeconds 0); surge pods count once ready, so it may exceed spec.replicas.
    available = [float(sum(1 for p in members if p.ready(t))) for t in times]
    yield _series("kube_deployment_status_replicas_available", ident, times, available)
    created = sorted(r.created_s for r in replicasets)
    generation = [float(dep.generation_base + bisect_right(created, t)) for t in times]
    yield _series("kube_deployment_metadata_generation", ident, times, generation)
    yield _series("kube_deployment_status_observed_generation", ident, times, generation)
    for family, value in (
        ("kube_deployment_spec_strategy_rollingupdate_max_unavailable", dep.max_unavailable_replicas),
        ("kube_deployment_spec_strategy_rollingupdate_max_surge", dep.max_surge_replicas),
    ):
        if value is not None:
            yield _series(family, ident, times, [float(value)] * len(times))
    for rs in replicasets:
        yield from replicaset_series(w, rs)


def replicaset_series(w: Window, rs: ReplicaSet) -> Iterator[Series]:
    """kube-state-metrics' ReplicaSet families, from its creation (or the span's start) to the span's end."""
    times = [t for t in w.scrapes() if t >= rs.created_s]
    if not times:
        return
    ident = {**KSM, "namespace": rs.namespace, "replicaset": rs.name}
    ones = [1.0] * len(times)
    yield _series("kube_replicaset_created", ident, times, [float(rs.created_s)] * len(times))
    owner = {**ident, "owner_kind": "Deployment", "owner_name": rs.deployment, "owner_is_controller": "true"}
    yield _series("kube_replicaset_owner", owner, times, ones)
    yield _series("kube_replicaset_spec_replicas", ident, times, [float(rs.spec(t)) for t in times])
    yield _series("kube_replicaset_status_ready_replicas", ident, times, [float(rs.ready(t)) for t in times])


def alert_series(
    w: Window,
    alertname: str,
    group: str,
    severity: str,
    labels: Mapping[str, str],
    condition: Callable[[int], bool],
    for_s: int,
) -> tuple[list[Series], list[tuple[int, int]]]:
    """Build vmalert's ``ALERTS`` and ``ALERTS_FOR_STATE`` for a rule evaluated every 30 s on the scrape grid.

    Returns the series and the firing episodes ``(first firing evaluation, last firing evaluation)``.
    """
    times = w.scrapes()
    pending: list[int] = []
    firing: list[int] = []
    for_state: list[tuple[int, float]] = []
    episodes: list[tuple[int, int]] = []
    active_at: int | None = None
    for t in times:
        if not condition(t):
            active_at = None
            continue
        if active_at is None:
            active_at = t
        for_state.append((t, float(active_at)))
        if t - active_at >= for_s:
            if not firing or firing[-1] != t - SCRAPE_S:
                episodes.append((t, t))
            firing.append(t)
            episodes[-1] = (episodes[-1][0], t)
        else:
            pending.append(t)
    base = {"alertname": alertname, "alertgroup": group, "severity": severity, **labels}
    out: list[Series] = []
    if pending:
        out.append(_series("ALERTS", {**base, "alertstate": "pending"}, pending, [1.0] * len(pending)))
    if firing:
        out.append(_series("ALERTS", {**base, "alertstate": "firing"}, firing, [1.0] * len(firing)))
    if for_state:
        out.append(_series("ALERTS_FOR_STATE", base, [t for t, _ in for_state], [v for _, v in for_state]))
    return out, episodes


# --------------------------------------------------------------------------------------------------- plans


def allocate(total: int, weights: Sequence[int]) -> list[int]:
    """Split ``total`` over ``weights`` exactly (cumulative rounding: the parts always sum to ``total``)."""
    wsum = sum(weights)
    if wsum <= 0:
        if total:
            raise ValueError(f"cannot place {total} items on zero weights")
        return [0] * len(weights)
    out: list[int] = []
    acc = 0
    prev = 0
    for wgt in weights:
        acc += wgt
        cur = total * acc // wsum
        out.append(cur - prev)
        prev = cur
    return out


def minute_rates(w: Window, profile: Callable[[float], float]) -> tuple[float, ...]:
    """Return a rate profile's value at the middle of each minute of the window."""
    return tuple(profile(w.start_s + m * 60 + 30) for m in range(MINUTES))


def minute_weights(
    w: Window, profile: Callable[[float], float], lo: int = 0, hi: int = DAY_S, rates: Sequence[float] | None = None
) -> list[int]:
    """Return the integer weight of each minute of the window for a rate profile, within window seconds ``[lo, hi)``.

    ``rates`` (from ``minute_rates``) saves re-evaluating the profile when a day plans many sources.
    """
    if rates is None:
        rates = minute_rates(w, profile)
    if lo <= 0 and hi >= DAY_S:
        return [round(60_000 * r) for r in rates]
    out = [0] * MINUTES
    for m in range(max(0, lo // 60), min(MINUTES, -(-hi // 60))):
        a = max(lo, m * 60)
        b = min(hi, m * 60 + 60)
        if b > a:
            out[m] = round(1_000 * rates[m] * (b - a))
    return out


def share(c: int, s: int, lo: int, hi: int) -> int:
    """How many of a minute's ``c`` items fall in second ``s`` when spread evenly over ``[lo, hi)`` ∩ minute."""
    m0 = s - s % 60
    a = max(lo, m0)
    b = min(hi, m0 + 60)
    span = b - a
    i = s - a
    return (c * (i + 1)) // span - (c * i) // span


# --------------------------------------------------------------------------------------------------- log records

TAIL = 'Z"}\n'


def json_escape(text: str) -> str:
    """Escape ``text`` for the inside of a JSON string."""
    return json.dumps(text)[1:-1]


def record_head(pod: Pod, container: str, restart: int, level: str | None) -> str:
    """Everything of a Vector ``kubernetes_logs`` record that precedes the message (keys in Vector's order)."""
    level_part = f'"level":"{level}",' if level is not None else ""
    return (
        f'{{"file":"/var/log/pods/{pod.namespace}_{pod.name}_{pod.uid}/{container}/{restart}.log",'
        f'"kubernetes":{{"container_name":"{container}","pod_name":"{pod.name}",'
        f'"pod_namespace":"{pod.namespace}","pod_node_name":"{pod.node}","pod_uid":"{pod.uid}"}},'
        f'{level_part}"message":"'
    )


def record_mid(stream: str) -> str:
    """Everything between the message and the timestamp's digits."""
    return f'","source_type":"kubernetes_logs","stream":"{stream}","timestamp":"'


class RenderContext:
    """Per-stream caches: the timestamp prefix of every second of the day and spread-out microseconds."""

    def __init__(self, w: Window) -> None:
        """Prepare the caches for one day's stream."""
        day = w.date.isoformat()
        seconds = [f":{s:02d}." for s in range(60)]
        self.ts = [hm + s for hm in (f"{day}T{h:02d}:{m:02d}" for h in range(24) for m in range(60)) for s in seconds]
        self._us: dict[int, list[str]] = {}
        self._spread: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}

    def spread(self, c: int, span: int) -> tuple[tuple[int, int], ...]:
        """``(offset, count)`` of the seconds that get items when ``c`` items spread evenly over ``span`` seconds."""
        key = (c, span)
        got = self._spread.get(key)
        if got is None:
            got = tuple((i, n) for i in range(span) if (n := (c * (i + 1)) // span - (c * i) // span))
            self._spread[key] = got
        return got

    def us(self, n: int) -> list[str]:
        """Return ``n`` increasing microsecond fields spread over one second (cached per ``n``)."""
        cached = self._us.get(n)
        if cached is None:
            # Offsets in [0.05, 0.95) of each 1/n slot keep the values strictly increasing and irregular.
            cached = [f"{int((i + 0.05 + ((i * 7_919) % 1_000) * 0.0009) * 1_000_000 / n):06d}" for i in range(n)]
            self._us[n] = cached
        return cached


class LogSource(abc.ABC):
    """A producer of log records for the window; counts are known before rendering."""

    workload_key: str

    @abc.abstractmethod
    def total(self) -> int:
        """Exact number of records this source renders."""

    @abc.abstractmethod
    def errors(self) -> int:
        """Exact number of those records that are error lines by the digest's rule."""

    @abc.abstractmethod
    def hourly(self) -> list[int]:
        """Count records per UTC hour of the window (24 values)."""

    @abc.abstractmethod
    def render(self, ctx: RenderContext, first: int, last: int, out: list[str]) -> int:
        """Append the records of window seconds ``[first, last)`` to ``out``; return how many."""

    @abc.abstractmethod
    def span_counts(self, first: int, last: int) -> tuple[int, int]:
        """Return ``(records, error records)`` planned in window seconds ``[first, last)`` (whole minutes)."""


@dataclass(frozen=True)
class Template:
    """A normal log line: ``str.format`` text with ``{0}``, ``{1}``… (ints from ``ranges``) and ``{ts}``."""

    text: str
    stream: str = "stderr"
    level: str | None = None
    weight: int = 1
    ranges: tuple[tuple[int, int], ...] = ()

    def sample(self) -> str:
        """Render with the lowest values (used to check the template is not an error line)."""
        return self.text.format(*(lo for lo, _ in self.ranges), ts="2026-01-01T00:00:00.000Z")


@dataclass(frozen=True)
class LogEvent:
    """One explicit record at a given window second."""

    second: int
    us: int
    message: str
    stream: str = "stderr"
    level: str | None = None

    @property
    def is_error(self) -> bool:
        """Whether the digest's rule counts it."""
        return is_error_record(self.level, self.message)


@dataclass(frozen=True)
class TemplateGroup:
    """Templates sharing one volume plan (records per minute of the window)."""

    templates: tuple[Template, ...]
    plan: Sequence[int]


VARIANTS = 61


class ContainerLog(LogSource):
    """The log file of one run of one container: planned template lines plus explicit events.

    Each template is pre-rendered (and JSON-escaped) in ``VARIANTS`` versions with different numbers, so a line
    costs a table look-up and one concatenation; only templates quoting their own timestamp format per line.
    """

    def __init__(
        self,
        pod: Pod,
        container: str,
        restart: int,
        lo: int,
        hi: int,
        groups: Sequence[TemplateGroup],
        events: Sequence[LogEvent] = (),
    ) -> None:
        """Pre-render the templates of one container run and sort its events."""
        self.workload_key = pod.workload_key
        self.pod = pod
        self.container = container
        self.lo = lo
        self.hi = hi
        self._salt = salt_of(pod.uid, container, str(restart))
        # Per group: its plan and a deck with one entry per unit of template weight; an entry holds the template's
        # pre-rendered records up to the timestamp (None when the message quotes its own time) and its framing.
        self._groups: list[tuple[Sequence[int], list[tuple[list[str] | None, str, str, Template]]]] = []
        for g in groups:
            if len(g.plan) != MINUTES:
                raise ValueError("a template plan has one count per minute of the day")
            deck: list[tuple[list[str] | None, str, str, Template]] = []
            for tpl in g.templates:
                sample = tpl.sample()
                if is_error_record(tpl.level, sample):
                    raise ValueError(f"background template would count as an error line: {sample!r}")
                head, mid = record_head(pod, container, restart, tpl.level), record_mid(tpl.stream)
                seed = salt_of(tpl.text)
                framed = (
                    None
                    if "{ts}" in tpl.text
                    else [
                        head + json_escape(tpl.text.format(*_template_args(tpl, seed + v * 2_654_435_761))) + mid
                        for v in range(VARIANTS)
                    ]
                )
                deck.extend([(framed, head, mid, tpl)] * tpl.weight)
            self._groups.append((g.plan, deck))
        self._events = sorted(events, key=lambda e: (e.second, e.us))
        for e in self._events:
            if not lo <= e.second < hi:
                raise ValueError(f"event outside the container run [{lo}, {hi}): {e}")
        self._event_seconds = [e.second for e in self._events]
        self._event_lines = [
            record_head(pod, container, restart, e.level) + json_escape(e.message) + record_mid(e.stream)
            for e in self._events
        ]

    def total(self) -> int:
        """Count planned template lines plus explicit events."""
        return sum(sum(plan) for plan, _ in self._groups) + len(self._events)

    def errors(self) -> int:
        """Count error lines: only explicit events can be (templates are checked at construction)."""
        return sum(1 for e in self._events if e.is_error)

    def hourly(self) -> list[int]:
        """Count records per hour."""
        out = [0] * 24
        for plan, _ in self._groups:
            for m, c in enumerate(plan):
                out[m // 60] += c
        for e in self._events:
            out[e.second // 3_600] += 1
        return out

    def span_counts(self, first: int, last: int) -> tuple[int, int]:
        """Count planned records and error records in whole minutes ``[first, last)``."""
        lines = sum(sum(plan[first // 60 : last // 60]) for plan, _ in self._groups)
        events = [e for e in self._events if first <= e.second < last]
        return lines + len(events), sum(1 for e in events if e.is_error)

    def render(self, ctx: RenderContext, first: int, last: int, out: list[str]) -> int:
        """Render the planned lines of the block (blocks never straddle a minute), then its explicit events."""
        if last <= self.lo or first >= self.hi:
            return 0
        lo = max(first, self.lo)
        hi = min(last, self.hi)
        n_out = 0
        if lo < hi:
            m = first // 60
            a = max(self.lo, m * 60)
            span = min(self.hi, m * 60 + 60) - a
            for plan, deck in self._groups:
                c = plan[m]
                if not c:
                    continue
                nd = len(deck)
                for off, n in ctx.spread(c, span):
                    s = a + off
                    if not lo <= s < hi:
                        continue
                    us = ctx.us(n)
                    prefix = ctx.ts[s]
                    for k in range(n):
                        h = (s * 2_654_435_761 + k * 40_503 + self._salt) & 0x7FFFFFFF
                        framed, head, mid, tpl = deck[h % nd]
                        u = us[k]
                        if framed is not None:
                            out.append(f"{framed[(h >> 8) % VARIANTS]}{prefix}{u}{TAIL}")
                        else:
                            msg = json_escape(tpl.text.format(*_template_args(tpl, h), ts=f"{prefix}{u[:3]}Z"))
                            out.append(f"{head}{msg}{mid}{prefix}{u}{TAIL}")
                    n_out += n
        if not self._events:
            return n_out
        i = bisect_left(self._event_seconds, first)
        j = bisect_left(self._event_seconds, last)
        for k in range(i, j):
            e = self._events[k]
            out.append(f"{self._event_lines[k]}{ctx.ts[e.second]}{e.us:06d}{TAIL}")
        return n_out + (j - i)


def _template_args(tpl: Template, seed: int) -> list[int]:
    args: list[int] = []
    x = seed & 0x7FFFFFFF
    for lo, hi in tpl.ranges:
        x = (x * 1_103_515_245 + 12_345) & 0x7FFFFFFF
        args.append(lo + x % (hi - lo + 1))
    return args


def spread_events(n: int, lo: int, hi: int, salt: int) -> list[tuple[int, int]]:
    """``n`` (second, microsecond) pairs spread over window seconds ``[lo, hi)`` with deterministic jitter."""
    out: list[tuple[int, int]] = []
    span = hi - lo
    for i in range(n):
        x = (salt + i * 2_654_435_761) & 0xFFFFFFFF
        pos = lo + (span * i) // n + (x % max(1, span // n))
        out.append((min(hi - 1, pos), x % 1_000_000))
    return out


# --------------------------------------------------------------------------------------------------- gateway

UH_BODY = "no healthy upstream"
UC_BODY = "upstream connect error or disconnect/reset before headers. reset reason: connection termination"
UC_DETAILS = "upstream_reset_before_response_started{connection_termination}"

# Envoy Gateway's default JSON access-log record (keys as its formatter sorts them, see the fixture), already
# escaped for embedding as the ``message`` string of a Vector record: rendering is then one %-substitution.
_ENVOY_INNER = (
    '{":authority":"%s","bytes_received":%d,"bytes_sent":%d,"connection_termination_details":null,'
    '"downstream_local_address":"%s","downstream_remote_address":"%s","duration":%d,"method":"%s",'
    '"protocol":"%s","requested_server_name":"%s","response_code":%d,"response_code_details":"%s",'
    '"response_flags":"%s","route_name":"%s","start_time":"%s","upstream_cluster":"%s","upstream_host":%s,'
    '"upstream_local_address":%s,"upstream_transport_failure_reason":null,"user-agent":"%s",'
    '"x-envoy-origin-path":"%s","x-envoy-upstream-service-time":%s,"x-forwarded-for":"%s","x-request-id":"%s"}'
).replace('"', '\\"')
_NULL = "null"


@dataclass(frozen=True)
class PathSpec:
    """One kind of request on a route: method, path template, weight and the upstream's answers."""

    method: str
    path: str
    weight: int
    codes: tuple[tuple[int, int], ...] = ((200, 1),)
    bytes_sent: tuple[int, int] = (400, 6_000)
    bytes_received: int = 0


@dataclass(frozen=True)
class Client:
    """Who sends a flow of requests: user agents, source addresses, protocol."""

    user_agents: tuple[str, ...]
    addresses: tuple[str, ...]
    protocol: str = "HTTP/2"
    local: bool = False


BROWSERS = Client(
    user_agents=(
        "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/17.5 Mobile/15E148 Safari/604.1",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 "
        "Safari/537.36",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 "
        "Safari/605.1.15",
    ),
    addresses=tuple(f"198.51.100.{i}" for i in (14, 23, 57, 88, 102, 131, 166, 203, 244))
    + tuple(f"192.168.1.{i}" for i in (20, 34, 41)),
)
MONITOR = Client(user_agents=("Uptime-Kuma/1.23.13",), addresses=("192.168.1.10",), protocol="HTTP/1.1")
FORTIO = Client(user_agents=("fortio.org/fortio-1.66.1",), addresses=("192.168.1.34",), protocol="HTTP/1.1")


@dataclass(frozen=True)
class Flow:
    """A stream of requests on a route: a per-minute plan and/or explicit counts at unix seconds."""

    client: Client
    paths: tuple[PathSpec, ...]
    minute_plan: Sequence[int] | None = None
    seconds: Mapping[int, int] | None = None
    latency_ms: tuple[int, int] = (4, 60)

    def total(self) -> int:
        """Count requests in the window."""
        return (sum(self.minute_plan) if self.minute_plan is not None else 0) + sum((self.seconds or {}).values())


class Membership:
    """Which pod addresses an Envoy cluster can send to, second by second (ready endpoints of the slice)."""

    def __init__(self, pods: Sequence[Pod], port: int) -> None:
        """Index the instants where the set of ready pods can change."""
        edges: set[int] = set()
        for p in pods:
            edges.add(p.start_s)
            edges.add(p.ready_from_s if p.ready_from_s is not None else p.start_s)
            if p.end_s is not None:
                edges.add(p.end_s)
            if p.deleted_s is not None:
                edges.add(p.deleted_s)
            for a, b in p.not_ready:
                edges.update((a, b))
        self._edges = sorted(edges)
        self._hosts = [tuple(f"{p.ip}:{port}" for p in pods if p.ready(t)) for t in self._edges]

    def hosts(self, t: int) -> tuple[str, ...]:
        """Ready ``ip:port`` at unix second ``t``."""
        i = bisect_right(self._edges, t) - 1
        return self._hosts[i] if i >= 0 else ()

    def empty(self, a: int, b: int) -> list[tuple[int, int]]:
        """Sub-intervals of ``[a, b)`` (unix seconds) with no ready address."""
        out: list[tuple[int, int]] = []
        cuts = [a, *[e for e in self._edges if a < e < b], b]
        for x, y in itertools.pairwise(cuts):
            if not self.hosts(x):
                if out and out[-1][1] == x:
                    out[-1] = (out[-1][0], y)
                else:
                    out.append((x, y))
        return out


@dataclass(frozen=True)
class Route:
    """An HTTPRoute behind the gateway (rule 0) and the pods its backend Service selects."""

    namespace: str
    name: str
    hostname: str
    port: int

    @property
    def cluster(self) -> str:
        """Envoy Gateway's xDS cluster name, also ``upstream_cluster`` in the access log."""
        return f"httproute/{self.namespace}/{self.name}/rule/0"

    @property
    def route_name(self) -> str:
        """Envoy Gateway's route name for the first match of rule 0."""
        return f"{self.cluster}/match/0/{self.hostname.replace('.', '_')}"


class RouteTraffic:
    """One route's requests for the day: flows, blackouts, UC resets, and where UH comes from.

    Window seconds (0-86,399) index plans; ``blackouts``, ``uc`` and ``Flow.seconds`` use unix seconds.
    A blackout is a span with no request at all (the minute's requests move to its other seconds): it is how a
    day says "the container was down for 25 s and, at 0.06 req/s, nobody happened to call it".
    """

    def __init__(
        self,
        w: Window,
        route: Route,
        flows: Sequence[Flow],
        membership: Membership,
        blackouts: Sequence[tuple[int, int]] = (),
        uc: Mapping[int, int] | None = None,
    ) -> None:
        """Check the UC resets against the plan and index blackouts and empty-endpoint seconds."""
        self.w = w
        self.route = route
        self.salt = salt_of(route.cluster)
        self.flows = tuple(flows)
        self.membership = membership
        self.blackouts = tuple(blackouts)
        self.uc = dict(uc or {})
        self._down = membership.empty(w.start_s, w.end_s)
        self._down_seconds = frozenset(t - w.start_s for a, b in self._down for t in range(a, b))
        self._black_minutes: set[int] = set()
        for a, b in self.blackouts:
            for t in range(a, b):
                if w.in_window(t):
                    self._black_minutes.add((t - w.start_s) // 60)
        self._minute_cache: dict[tuple[int, int], list[int]] = {}
        for t, k in self.uc.items():
            s = t - w.start_s
            if not 0 <= s < DAY_S or k > self.count(s) or self.down(s):
                raise ValueError(f"{route.cluster}: {k} UC at {iso(t)} but {self.count(s)} requests there")

    def _blacked(self, s: int) -> bool:
        t = self.w.start_s + s
        return any(a <= t < b for a, b in self.blackouts)

    def _minute_counts(self, fi: int, m: int, c: int) -> list[int]:
        key = (fi, m)
        got = self._minute_cache.get(key)
        if got is None:
            allowed = [s for s in range(m * 60, m * 60 + 60) if not self._blacked(s)]
            parts = allocate(c, [1] * len(allowed))
            got = [0] * 60
            for s, n in zip(allowed, parts, strict=True):
                got[s - m * 60] = n
            self._minute_cache[key] = got
        return got

    def flow_count(self, fi: int, s: int) -> int:
        """Count requests of flow ``fi`` in window second ``s``."""
        f = self.flows[fi]
        n = 0
        if f.minute_plan is not None:
            m = s // 60
            c = f.minute_plan[m]
            if c:
                n += self._minute_counts(fi, m, c)[s % 60] if m in self._black_minutes else share(c, s, 0, DAY_S)
        if f.seconds is not None:
            n += f.seconds.get(self.w.start_s + s, 0)
        return n

    def minute_seconds(self, ctx: RenderContext, m: int) -> list[tuple[int, tuple[int, ...]]]:
        """Return ``(window second, requests per flow)`` for the busy seconds of minute ``m``, in order."""
        per_second: dict[int, list[int]] = {}
        nflows = len(self.flows)
        for fi, f in enumerate(self.flows):
            if f.minute_plan is not None and (c := f.minute_plan[m]):
                if m in self._black_minutes:
                    pairs = [(i, n) for i, n in enumerate(self._minute_counts(fi, m, c)) if n]
                else:
                    pairs = list(ctx.spread(c, 60))
                for off, n in pairs:
                    per_second.setdefault(m * 60 + off, [0] * nflows)[fi] += n
            if f.seconds is not None:
                base = self.w.start_s + m * 60
                for off in range(60):
                    extra = f.seconds.get(base + off, 0)
                    if extra:
                        per_second.setdefault(m * 60 + off, [0] * nflows)[fi] += extra
        return [(s, tuple(per_second[s])) for s in sorted(per_second)]

    def count(self, s: int) -> int:
        """All requests in window second ``s``."""
        return sum(self.flow_count(i, s) for i in range(len(self.flows)))

    def down(self, s: int) -> bool:
        """Whether no endpoint was ready in window second ``s`` (every request is a 503 UH)."""
        return s in self._down_seconds

    def down_intervals(self) -> list[tuple[int, int]]:
        """Unix-second spans of the window with no ready endpoint."""
        return list(self._down)

    def total(self) -> int:
        """Count requests in the window."""
        return sum(f.total() for f in self.flows)

    def hourly(self) -> list[int]:
        """Count requests per hour (blackouts only move requests inside their minute)."""
        out = [0] * 24
        for f in self.flows:
            if f.minute_plan is not None:
                for m, c in enumerate(f.minute_plan):
                    out[m // 60] += c
            for t, c in (f.seconds or {}).items():
                out[(t - self.w.start_s) // 3_600] += c
        return out

    def uh(self) -> int:
        """Count requests answered 503 UH (no healthy upstream)."""
        n = 0
        for a, b in self._down:
            for t in range(a, b):
                n += self.count(t - self.w.start_s)
        return n

    def uc_total(self) -> int:
        """Count requests answered 503 UC (upstream reset before the response started)."""
        return sum(self.uc.values())


POOL = 2_048


@dataclass(frozen=True)
class _PathPrep:
    """A PathSpec with its paths and answers expanded into pools, so a request only indexes them."""

    spec: PathSpec
    paths: tuple[str, ...]
    codes: tuple[int, ...]


@dataclass(frozen=True)
class _FlowPrep:
    """Per-flow constants and pools of the access-log line, prepared once."""

    deck: tuple[_PathPrep, ...]
    user_agents: tuple[str, ...]
    clients: tuple[tuple[str, str], ...]
    protocol: str
    latency: tuple[int, int]


def _prepare_flow(f: Flow, salt: int) -> _FlowPrep:
    preps: dict[int, _PathPrep] = {}
    for i, p in enumerate(f.paths):
        x = salt_of(p.path, str(salt))
        paths = (
            tuple(p.path.format((x >> 3) % 97 + j % 13, (x + j * 7_919) % 9_000 + 1_000) for j in range(256))
            if "{" in p.path
            else (p.path,)
        )
        preps[i] = _PathPrep(p, paths, tuple(c for c, n in p.codes for _ in range(n)))
    deck = tuple(preps[i] for i, p in enumerate(f.paths) for _ in range(p.weight))
    clients: list[tuple[str, str]] = []
    for j in range(POOL):
        x = (salt + j * 2_654_435_761) & 0xFFFFFFFF
        if f.client.local:
            clients.append(("127.0.0.1", f"127.0.0.1:{40_000 + x % 20_000}"))
        else:
            addr = f.client.addresses[(x >> 7) % len(f.client.addresses)]
            clients.append((addr, f"{addr}:{32_768 + x % 28_000}"))
    return _FlowPrep(deck, f.client.user_agents, tuple(clients), f.client.protocol, f.latency_ms)


class GatewaySource(LogSource):
    """The Envoy Gateway proxy's default JSON access log (container ``envoy``, stdout)."""

    def __init__(self, pod: Pod, routes: Sequence[RouteTraffic]) -> None:
        """Prepare the per-flow pools and the record framing of the proxy pod."""
        self.workload_key = pod.workload_key
        self.pod = pod
        self.routes = tuple(routes)
        self._head = record_head(pod, "envoy", 0, None)
        self._mid = record_mid("stdout")
        self._listener = f"{pod.ip}:10443"
        self._prep = [[_prepare_flow(f, r.salt + i) for i, f in enumerate(r.flows)] for r in self.routes]
        self._locals = tuple(f'\\"{pod.ip}:{33_000 + (j * 7_919) % 27_000}\\"' for j in range(POOL))
        self._svc_times = tuple(f'\\"{ms}\\"' for ms in range(10_000))
        # Render-time caches (deterministic, so sharing them between two streams of the same day is harmless).
        self._memo_minute = -1
        self._memo: list[list[tuple[int, tuple[int, ...]]]] = []
        self._quoted: list[dict[tuple[str, ...], tuple[str, ...]]] = [{} for _ in self.routes]
        self._fixed = [
            (r.route.hostname, self._listener, r.route.hostname, r.route.route_name, r.route.cluster)
            for r in self.routes
        ]
        # x-request-id: a random-looking UUIDv4 head from a pool, made unique by the request's place in the day.
        self._rid_heads = []
        for i in range(4_096):
            x = _digest("rid", pod.uid, str(i)).hex()
            self._rid_heads.append(f"{x[:8]}-{x[8:12]}-4{x[13:16]}-{'89ab'[int(x[16], 16) % 4]}{x[17:20]}-")

    def total(self) -> int:
        """Count all requests of all routes."""
        return sum(r.total() for r in self.routes)

    def errors(self) -> int:
        """Count error lines: access-log lines never contain the word error (the tests check every line)."""
        return 0

    def hourly(self) -> list[int]:
        """Count requests per hour."""
        out = [0] * 24
        for r in self.routes:
            for h, c in enumerate(r.hourly()):
                out[h] += c
        return out

    def span_counts(self, first: int, last: int) -> tuple[int, int]:
        """Count requests in whole minutes ``[first, last)`` (access-log lines are never error lines)."""
        n = 0
        for r in self.routes:
            for f in r.flows:
                if f.minute_plan is not None:
                    n += sum(f.minute_plan[first // 60 : last // 60])
                n += sum(c for t, c in (f.seconds or {}).items() if first <= t - r.w.start_s < last)
        return n, 0

    def render(self, ctx: RenderContext, first: int, last: int, out: list[str]) -> int:
        """Render one access-log line per request, flows in order inside each second."""
        n_out = 0
        m = first // 60
        if m != self._memo_minute:
            # Blocks never straddle a minute: plan the whole minute once, serve its six blocks from it.
            self._memo = [r.minute_seconds(ctx, m) for r in self.routes]
            self._memo_minute = m
        for r, preps, seconds, quoted, fixed in zip(
            self.routes, self._prep, self._memo, self._quoted, self._fixed, strict=True
        ):
            if not seconds:
                continue
            for s, counts in seconds:
                if not first <= s < last:
                    continue
                n = sum(counts)
                us = ctx.us(n)
                t = r.w.start_s + s
                down = r.down(s)
                raw_hosts = r.membership.hosts(t)
                hosts = quoted.get(raw_hosts)
                if hosts is None:
                    hosts = quoted[raw_hosts] = tuple(f'\\"{x}\\"' for x in raw_hosts)
                uc = r.uc.get(t, 0)
                prefix = ctx.ts[s]
                k = 0
                for prep, fn in zip(preps, counts, strict=True):
                    for _ in range(fn):
                        u = us[k]
                        inner = self._inner(prep, fixed, s, k, r.salt, f"{prefix}{u[:3]}Z", down, hosts, k < uc)
                        out.append(f"{self._head}{inner}{self._mid}{prefix}{u}{TAIL}")
                        k += 1
                n_out += n
        return n_out

    def _inner(
        self,
        prep: _FlowPrep,
        fixed: tuple[str, str, str, str, str],
        s: int,
        k: int,
        salt: int,
        start: str,
        down: bool,
        hosts: tuple[str, ...],
        is_uc: bool,
    ) -> str:
        h = ((s * 2_654_435_761 + k * 97_531 + salt) * 0x9E3779B1) & 0xFFFFFFFFFFFF
        h ^= h >> 21
        pp = prep.deck[h % len(prep.deck)]
        spec = pp.spec
        path = pp.paths[(h >> 8) % len(pp.paths)]
        ua = prep.user_agents[(h >> 20) % len(prep.user_agents)]
        addr, remote = prep.clients[(h >> 4) % POOL]
        rid = f"{self._rid_heads[h & 4_095]}{(s << 20 | k << 4 | salt & 15) ^ 0x5DEECE66D:012x}"
        if down:
            code, flags, details = 503, "UH", "no_healthy_upstream"
            upstream, local, sent, dur, svc_time = _NULL, _NULL, len(UH_BODY), 0, _NULL
        else:
            upstream = hosts[(h >> 28) % len(hosts)]
            local = self._locals[(h >> 12) % POOL]
            if is_uc:
                code, flags, details = 503, "UC", UC_DETAILS
                sent, dur, svc_time = len(UC_BODY), (h >> 30) % 3, _NULL
            else:
                code = pp.codes[(h >> 32) % len(pp.codes)]
                flags, details = "-", "via_upstream"
                lo, hi = spec.bytes_sent
                sent = 0 if code == 304 else lo + (h >> 10) % (hi - lo + 1)
                a, b = prep.latency
                upstream_ms = a + (h >> 14) % (b - a + 1)
                dur = upstream_ms + 1 + (h >> 18) % 3
                svc_time = self._svc_times[upstream_ms]
        authority, listener, sni, route_name, cluster = fixed
        return _ENVOY_INNER % (
            authority,
            spec.bytes_received,
            sent,
            listener,
            remote,
            dur,
            spec.method,
            prep.protocol,
            sni,
            code,
            details,
            flags,
            route_name,
            start,
            cluster,
            upstream,
            local,
            ua,
            path,
            svc_time,
            addr,
            rid,
        )


def stream_chunks(
    w: Window, sources: Sequence[LogSource], chunk_records: int = CHUNK_RECORDS, first_s: int = 0, last_s: int = DAY_S
) -> Iterator[bytes]:
    """Render every source block by block (10 s) and yield chunks of about ``chunk_records`` records.

    ``first_s``/``last_s`` (window seconds, multiples of 10) restrict the rendering to part of the day.
    """
    if first_s % BLOCK_S or last_s % BLOCK_S or not 0 <= first_s <= last_s <= DAY_S:
        raise ValueError(f"a span is whole {BLOCK_S} s blocks of the window, got [{first_s}, {last_s})")
    ctx = RenderContext(w)
    out: list[str] = []
    pending = 0
    for first in range(first_s, last_s, BLOCK_S):
        for src in sources:
            pending += src.render(ctx, first, first + BLOCK_S, out)
        if pending >= chunk_records:
            yield "".join(out).encode("utf-8")
            out = []
            pending = 0
    if pending:
        yield "".join(out).encode("utf-8")


# --------------------------------------------------------------------------------------------------- normal logs

FEED_COLLECTORS = (
    Template(
        "INFO feeds.collector gtfs-rt: fetched {0} vehicle positions in {1}ms (0 errors)",
        weight=5,
        ranges=((180, 420), (120, 900)),
    ),
    Template("INFO feeds.collector opensky: {0} aircraft states, {1} new", weight=5, ranges=((40, 160), (0, 25))),
    Template(
        "INFO feeds.collector ais: ingest summary items={0} error_count=0 retries={1}",
        weight=3,
        ranges=((300, 2_400), (0, 2)),
    ),
    Template("INFO feeds.collector noaa-alerts: {0} active alerts, unchanged", weight=2, ranges=((0, 14),)),
    Template(
        "INFO feeds.scheduler: cycle {0} done in {1}ms, next run in 60s", weight=3, ranges=((1, 99_999), (300, 4_000))
    ),
    Template("INFO feeds.ws relay: {0} messages relayed in the last 60s", weight=2, ranges=((200, 1_900),)),
    Template(
        "WARNING feeds.collector rss: HTTP 404 for https://feeds.example.org/legacy.atom, kept on the dead-URL list",
        weight=1,
    ),
)
FEED_ACCESS = (
    Template(
        'INFO:     10.42.1.1:{0} - "GET /api/health HTTP/1.1" 200 OK',
        stream="stdout",
        weight=2,
        ranges=((40_000, 60_999),),
    ),
    Template(
        'INFO:     10.42.0.60:{0} - "GET /api/feeds?since={1} HTTP/1.1" 200 OK',
        stream="stdout",
        weight=5,
        ranges=((33_000, 59_999), (1_000, 9_999)),
    ),
    Template(
        'INFO:     10.42.0.60:{0} - "GET /api/feeds/aircraft HTTP/1.1" 200 OK',
        stream="stdout",
        weight=2,
        ranges=((33_000, 59_999),),
    ),
)
FEED_ERRORS = (
    "ERROR feeds.collector gtfs-rt: database is locked (busy_timeout=5000ms)",
    "ERROR feeds.collector opensky: Error: read ECONNRESET",
    "ERROR feeds.scheduler: job noaa-alerts exceeded its 120s hard timeout",
)
API_LINES = (
    Template("db pool size=10 in_use={0} idle={1}", stream="stdout", level="info", weight=2, ranges=((0, 4), (6, 10))),
    Template(
        "handled {0} requests in the last 60s, p95={1}ms",
        stream="stdout",
        level="info",
        weight=1,
        ranges=((2, 40), (8, 95)),
    ),
)
WEB_LINES = (
    Template(
        "GET /products/{0} status=200 dur={1}ms",
        stream="stdout",
        level="INFO",
        weight=6,
        ranges=((1_000, 9_999), (1, 40)),
    ),
    Template("GET / status=200 dur={0}ms", stream="stdout", level="INFO", weight=3, ranges=((1, 25),)),
    Template(
        "static assets cache: {0} entries, {1} KiB",
        stream="stdout",
        level="INFO",
        weight=1,
        ranges=((40, 60), (900, 1_400)),
    ),
)
VM_LINES = (
    Template(
        "{ts}\tinfo\tVictoriaMetrics/lib/storage/partition.go:{0}\tmerged {1} rows across {2} blocks in "
        '0.{3} seconds; path="/storage/data/small/2026_07"',
        weight=4,
        ranges=((1_400, 1_460), (10_000, 900_000), (4, 60), (10, 99)),
    ),
    Template(
        "{ts}\tinfo\tVictoriaMetrics/app/vmstorage/main.go:{0}\tcreated {1} new series in the last 60s",
        weight=1,
        ranges=((100, 130), (0, 40)),
    ),
)
VECTOR_LINES = (
    Template(
        '{ts}  INFO source{{component_kind="source" component_id=k8s component_type=kubernetes_logs}}: '
        "vector::internal_events::file::source: Found new file to watch. file_position={0}",
        weight=1,
        ranges=((0, 90_000),),
    ),
    Template(
        '{ts}  INFO sink{{component_kind="sink" component_id=vlogs component_type=elasticsearch}}: '
        "vector::sinks::util::adaptive_concurrency::controller: concurrency limit {0}",
        weight=1,
        ranges=((1, 8),),
    ),
)


def date_factor(d: dt.date, what: str) -> float:
    """Return a day's volume relative to the average day (0.93-1.07, stable per date)."""
    return 0.93 + (salt_of("volume", what, d.isoformat()) % 1_400) / 10_000


# --------------------------------------------------------------------------------------------------- the cluster


@dataclass
class Homelab:
    """The cluster on one day: pods, Services, Deployments and node models, before any log is planned."""

    window: Window
    pods: list[Pod]
    services: list[Service]
    deployments: list[Deployment]
    nodes: dict[str, NodeModel]

    @staticmethod
    def standard(d: dt.date) -> Homelab:
        """Build the normal cluster of day ``d``."""
        w = Window(d)
        pods: list[Pod] = []
        rev = revision("feeds/feed-aggregator", d)
        pods.append(
            deployment_pod("feeds", "feed-aggregator", rev, 0, "pi5-2", (feed_container(),), revision_start(rev))
        )
        rev = revision("shop/api", d)
        for i in range(4):
            # The four API pods land on one node (anti-affinity is only "preferred", write-up 000).
            pods.append(deployment_pod("shop", "api", rev, i, "pi5-1", (api_container(d),), revision_start(rev)))
        rev = revision("shop/web", d)
        web = Container("web", "ghcr.io/homelab/shop-web:3.4.1", 24 * MIB, memory_limit=128 * MIB)
        for i, node in enumerate(("pi5-1", "pi5-3")):
            pods.append(deployment_pod("shop", "web", rev, i, node, (web,), revision_start(rev)))
        rev = revision("monitoring/victoria-metrics", d)
        vm = Container("victoria-metrics", "victoriametrics/victoria-metrics:v1.150.0", 1.5 * GIB, memory_limit=2 * GIB)
        pods.append(statefulset_pod("monitoring", "victoria-metrics", rev, 0, "pi5-3", (vm,), revision_start(rev)))
        rev = revision("logging/vector", d)
        vec = Container("vector", "timberio/vector:0.49.0-distroless-libc", 90 * MIB, memory_limit=256 * MIB, probes=())
        for node in NODES:
            pods.append(daemonset_pod("logging", "vector", rev, node, (vec,), revision_start(rev)))
        key = f"{ENVOY_NAMESPACE}/{ENVOY_DEPLOYMENT}"
        rev = revision(key, d)
        envoy = (
            Container(
                "envoy",
                "docker.io/envoyproxy/envoy:distroless-v1.35.0",
                120 * MIB,
                memory_limit=GIB,
                probes=("Readiness",),
            ),
            Container("shutdown-manager", "docker.io/envoyproxy/gateway:v1.5.0", 12 * MIB, probes=()),
        )
        pods.append(deployment_pod(ENVOY_NAMESPACE, ENVOY_DEPLOYMENT, rev, 0, "pi5-1", envoy, revision_start(rev)))
        services = [
            Service("feeds", "feed-aggregator", "feed-aggregator", 8000),
            Service("shop", "api", "api", 8000),
            Service("shop", "web", "web", 8080),
        ]
        deployments = [
            Deployment("feeds", "feed-aggregator", 1),
            Deployment("shop", "api", 4),
            Deployment("shop", "web", 2),
            Deployment(ENVOY_NAMESPACE, ENVOY_DEPLOYMENT, 1),
        ]
        nodes = {n: NodeModel(n, conntrack=_node_conntrack(n)) for n in NODES}
        return Homelab(w, pods, services, deployments, nodes)

    def workload(self, key: str) -> list[Pod]:
        """Pods of one workload, oldest first."""
        return sorted((p for p in self.pods if p.workload_key == key), key=lambda p: (p.start_s, p.name))

    def replace_pod(self, old: Pod, new: Pod) -> None:
        """Swap one pod for a modified copy."""
        self.pods[self.pods.index(old)] = new

    def envoy_pod(self) -> Pod:
        """Return the gateway's proxy pod."""
        return self.workload(f"{ENVOY_NAMESPACE}/{ENVOY_DEPLOYMENT}")[0]

    def membership(self, key: str, port: int) -> Membership:
        """Ready endpoints of a workload, as the gateway's EDS sees them."""
        return Membership(self.workload(key), port)


def _node_conntrack(node: str) -> Callable[[int], int]:
    def fn(t: int) -> int:
        return conntrack_baseline(node, t)

    return fn


ROUTE_API = Route("shop", "api", "shop.example.org", 8000)
ROUTE_WEB = Route("shop", "web", "www.shop.example.org", 8080)
ROUTE_FEEDS = Route("feeds", "feed-aggregator", "feeds.example.org", 8000)

API_PATHS = (
    PathSpec("GET", "/api/v1/products?page={0}", 40, bytes_sent=(2_000, 24_000)),
    PathSpec("GET", "/api/v1/products/{1}", 30, codes=((200, 99), (404, 1)), bytes_sent=(600, 4_000)),
    PathSpec("GET", "/api/v1/cart", 15, bytes_sent=(200, 3_000)),
    PathSpec("POST", "/api/v1/cart/items", 10, codes=((201, 1),), bytes_sent=(150, 900), bytes_received=96),
    PathSpec("POST", "/api/v1/checkout", 5, codes=((200, 97), (409, 3)), bytes_sent=(300, 1_200), bytes_received=512),
)
WEB_PATHS = (
    PathSpec("GET", "/", 20, bytes_sent=(9_000, 14_000)),
    PathSpec("GET", "/products/{1}", 35, bytes_sent=(12_000, 40_000)),
    PathSpec("GET", "/static/app.7f3c9e1b.js", 20, codes=((200, 3), (304, 7)), bytes_sent=(180_000, 180_000)),
    PathSpec("GET", "/static/app.2b8d41aa.css", 15, codes=((200, 3), (304, 7)), bytes_sent=(24_000, 24_000)),
    PathSpec("GET", "/favicon.ico", 9, bytes_sent=(4_286, 4_286)),
    PathSpec("GET", "/wp-login.php", 1, codes=((404, 1),), bytes_sent=(153, 153)),
)
FEED_PATHS = (
    PathSpec("GET", "/api/feeds?since={1}", 70, bytes_sent=(3_000, 90_000)),
    PathSpec("GET", "/api/feeds/aircraft", 30, bytes_sent=(20_000, 160_000)),
)
MONITOR_PATHS = (PathSpec("GET", "/api/health", 1, bytes_sent=(15, 15)),)

# Requests per average day on each route (users plus the uptime monitor on the feeds route).
ROUTE_DAILY = {ROUTE_API.cluster: 20_000, ROUTE_WEB.cluster: 12_000, ROUTE_FEEDS.cluster: 3_560}
MONITOR_DAILY = 1_440


class HomelabDay(abc.ABC):
    """Base of every corpus day: builds the cluster once, then streams series and logs from it."""

    date: dt.date
    name: str
    title: str
    expected: Expected
    status: str = "OK"
    score: int = 10
    # Whether the kubelets' /metrics/probes is scraped (most clusters do not): without it, no prober_probe_total.
    prober_scraped: bool = True

    def __init__(self) -> None:
        """Build the cluster, plan every log source and compute the expected digest."""
        self.window = Window(self.date)
        self._rates: dict[Callable[[float], float], Sequence[float]] = {}
        self.extra_facts: dict[str, object] = {}
        # Per node: spans when its kubelet answered nothing (set by ``customise``), and when the node controller
        # reported its Ready condition Unknown.
        self.kubelet_down: dict[str, tuple[tuple[int, int], ...]] = {}
        self.node_ready_unknown: dict[str, tuple[tuple[int, int], ...]] = {}
        self.lab = Homelab.standard(self.date)
        self.customise(self.lab)
        self.routes = self.route_traffic(self.lab)
        self.sources: list[LogSource] = [
            *self.normal_logs(self.lab),
            GatewaySource(self.lab.envoy_pod(), self.routes),
            *self.extra_logs(self.lab),
        ]
        self._extra_series = self.build_extra_series(self.lab)
        self.expected = Expected(status=self.status, score=self.score, facts=self.facts())

    # --- hooks for the day modules

    def customise(self, lab: Homelab) -> None:
        """Change the cluster for the day's incident (default: nothing)."""
        del lab

    def feed_error_count(self) -> int:
        """Genuine error lines of the feed aggregator on a normal day (28/24 h after the July fix, write-up 001)."""
        return 28 if self.date > dt.date(2026, 7, 20) else 12

    def web_error_count(self) -> int:
        """Genuine ERROR lines of shop/web (template render failures)."""
        return 2

    def route_traffic(self, lab: Homelab) -> list[RouteTraffic]:
        """Return the day's gateway traffic; days with load tests or probers override it."""
        return self.normal_routes(lab)

    def extra_logs(self, lab: Homelab) -> list[LogSource]:
        """Log sources beyond the normal ones."""
        del lab
        return []

    def build_extra_series(self, lab: Homelab) -> list[Series]:
        """Series beyond the standard families (alerts, Istio)."""
        del lab
        return []

    def day_facts(self) -> dict[str, object]:
        """Facts specific to the day."""
        return {}

    def writes_normal_logs(self, p: Pod) -> bool:
        """Whether a pod writes its workload's normal lines (a crash-looping pod that never serves does not)."""
        del p
        return True

    def replicasets(self, dep: Deployment) -> list[ReplicaSet]:
        """The Deployment's ReplicaSets on the day, oldest first."""
        return deployment_replicasets(dep, self.lab.pods, self.date)

    def replicasets_created(self, key: str, a: int | None = None, b: int | None = None) -> list[ReplicaSet]:
        """ReplicaSets of Deployment ``key`` created in unix seconds ``[a, b)`` (default: the window)."""
        w = self.window
        lo = w.start_s if a is None else a
        hi = w.end_s if b is None else b
        return [r for r in self.replicasets(self.deployment(key)) if lo <= r.created_s < hi]

    def deployment(self, key: str) -> Deployment:
        """The Deployment ``<namespace>/<name>`` of the day's cluster."""
        return next(d for d in self.lab.deployments if d.workload_key == key)

    def rollout_facts(self, key: str) -> dict[str, object]:
        """Rollout facts of one Deployment: strategy, ReplicaSets created in the window, generation at both ends."""
        w = self.window
        dep = self.deployment(key)
        rss = self.replicasets(dep)
        created = [r for r in rss if w.in_window(r.created_s)]

        def generation(t: int) -> int:
            return dep.generation_base + sum(1 for r in rss if r.created_s <= t)

        out: dict[str, object] = {
            f"rollouts.{key}": len(created),
            f"deployment_strategy.{key}": dep.strategy,
            f"replicasets_created.{key}": [{"replicaset": r.name, "created": iso(r.created_s)} for r in created],
            f"replicaset_current.{key}": rss[-1].name,
            f"generation.{key}": [generation(w.start_s), generation(w.end_s)],
        }
        if dep.strategy == "RollingUpdate":
            out[f"max_unavailable.{key}"] = dep.max_unavailable_replicas
            out[f"max_surge.{key}"] = dep.max_surge_replicas
        return out

    # --- normal traffic

    def rates(self, profile: Callable[[float], float]) -> Sequence[float]:
        """Return ``minute_rates`` of a profile for this day, computed once per day and profile."""
        got = self._rates.get(profile)
        if got is None:
            got = self._rates[profile] = minute_rates(self.window, profile)
        return got

    def user_plan(self, daily: int) -> list[int]:
        """Return the minute plan of ``daily`` user requests following the users' day."""
        return allocate(daily, minute_weights(self.window, user_profile, rates=self.rates(user_profile)))

    def normal_routes(
        self,
        lab: Homelab,
        api_flows: Sequence[Flow] = (),
        blackouts: Mapping[str, Sequence[tuple[int, int]]] | None = None,
        uc: Mapping[str, Mapping[int, int]] | None = None,
        api_users: int | None = None,
    ) -> list[RouteTraffic]:
        """Return the three routes of a normal day, with optional extra flows on the API route."""
        d = self.date
        w = self.window
        bl = blackouts or {}
        ucs = uc or {}
        users = api_users if api_users is not None else round(ROUTE_DAILY[ROUTE_API.cluster] * date_factor(d, "api"))
        api = RouteTraffic(
            w,
            ROUTE_API,
            [*api_flows, Flow(BROWSERS, API_PATHS, self.user_plan(users), latency_ms=(3, 70))],
            lab.membership("shop/api", 8000),
            bl.get(ROUTE_API.cluster, ()),
            ucs.get(ROUTE_API.cluster),
        )
        web = RouteTraffic(
            w,
            ROUTE_WEB,
            [
                Flow(
                    BROWSERS,
                    WEB_PATHS,
                    self.user_plan(round(ROUTE_DAILY[ROUTE_WEB.cluster] * date_factor(d, "web"))),
                    latency_ms=(1, 12),
                )
            ],
            lab.membership("shop/web", 8080),
            bl.get(ROUTE_WEB.cluster, ()),
        )
        feeds = RouteTraffic(
            w,
            ROUTE_FEEDS,
            [
                Flow(MONITOR, MONITOR_PATHS, allocate(MONITOR_DAILY, [1] * MINUTES), latency_ms=(2, 9)),
                Flow(
                    BROWSERS,
                    FEED_PATHS,
                    self.user_plan(round(ROUTE_DAILY[ROUTE_FEEDS.cluster] * date_factor(d, "feeds"))),
                    latency_ms=(8, 240),
                ),
            ],
            lab.membership("feeds/feed-aggregator", 8000),
            bl.get(ROUTE_FEEDS.cluster, ()),
        )
        return [api, web, feeds]

    def normal_logs(self, lab: Homelab) -> list[LogSource]:
        """Background logs of every pod (the storm day replaces the feed aggregator's with its own)."""
        out: list[LogSource] = list(self.feed_logs(lab))
        api_pods = [p for p in lab.workload("shop/api") if self.writes_normal_logs(p)]
        api_events = self.api_events()
        for p in api_pods:
            groups = [TemplateGroup(API_LINES, self._plan(p, "api", 4_320, flat_profile))]
            out.extend(self._runs(p, "api", groups, place_events(self.window, api_pods, "api", api_events, p)))
        web_pods = lab.workload("shop/web")
        web_events = [
            LogEvent(s, u, "template render failed: context canceled", "stdout", "ERROR")
            for s, u in spread_events(self.web_error_count(), 0, DAY_S, salt_of(self.name, "web-errors"))
        ]
        web_events += [
            LogEvent(s, u, "upstream api slow: 1840ms for /api/v1/cart", "stdout", "WARN")
            for s, u in spread_events(3, 0, DAY_S, salt_of(self.name, "web-warn"))
        ]
        for p in web_pods:
            groups = [TemplateGroup(WEB_LINES, self._plan(p, "web", 3_000, user_profile))]
            out.extend(self._runs(p, "web", groups, place_events(self.window, web_pods, "web", web_events, p)))
        for p in lab.workload("monitoring/victoria-metrics"):
            out.extend(
                self._runs(
                    p, "victoria-metrics", [TemplateGroup(VM_LINES, self._plan(p, "vm", 1_440, flat_profile))], []
                )
            )
        for p in lab.workload("logging/vector"):
            groups = [TemplateGroup(VECTOR_LINES, self._plan(p, "vector", 240, flat_profile))]
            out.extend(self._runs(p, "vector", groups, self.vector_events(p)))
        return out

    def feed_logs(self, lab: Homelab) -> list[LogSource]:
        """Plan the feed aggregator's normal lines and its handful of genuine errors."""
        out: list[LogSource] = []
        pods = lab.workload("feeds/feed-aggregator")
        errors = [
            LogEvent(s, u, FEED_ERRORS[i % len(FEED_ERRORS)])
            for i, (s, u) in enumerate(
                spread_events(self.feed_error_count(), 0, DAY_S, salt_of(self.name, "feed-errors"))
            )
        ]
        for p in pods:
            groups = [
                TemplateGroup(FEED_COLLECTORS, self._plan(p, "feed-collectors", 56_400, flat_profile)),
                TemplateGroup(FEED_ACCESS, self._plan(p, "feed-access", 14_400, user_profile)),
            ]
            out.extend(self._runs(p, "backend", groups, place_events(self.window, pods, "backend", errors, p)))
        return out

    def api_events(self) -> list[LogEvent]:
        """shop/api's explicit records: rule traps (a structured record's level decides, not its message)."""
        events = [
            LogEvent(s, u, "payment provider returned an error, retrying (attempt 1/3)", "stdout", "warning")
            for s, u in spread_events(5, 0, DAY_S, salt_of(self.name, "api-warn"))
        ]
        events += [
            LogEvent(s, u, "SLO report: error budget 93% remaining", "stdout", "info")
            for s, u in spread_events(1, 0, DAY_S, salt_of(self.name, "api-slo"))
        ]
        return events

    def vector_events(self, p: Pod) -> list[LogEvent]:
        """Explicit Vector lines (the storm day adds retries against a saturated VictoriaLogs)."""
        del p
        return []

    def pod_events(self, p: Pod, container: str) -> list[LogEvent]:
        """Explicit records written by one particular pod (the spiral day's probe timeouts)."""
        del p, container
        return []

    def _plan(self, p: Pod, what: str, per_day: int, profile: Callable[[float], float]) -> list[int]:
        """Minute plan of a pod's lines, limited to the seconds the pod exists in the window."""
        w = self.window
        lo = max(0, p.start_s - w.start_s)
        hi = min(DAY_S, (p.end_s if p.end_s is not None else w.end_s) - w.start_s)
        if hi <= lo:
            return [0] * MINUTES
        full = minute_weights(w, profile, rates=self.rates(profile))
        part = minute_weights(w, profile, lo, hi, rates=self.rates(profile))
        total = round(per_day * date_factor(self.date, what) * sum(part) / sum(full))
        return allocate(total, part)

    def _runs(
        self, p: Pod, container: str, groups: Sequence[TemplateGroup], events: Sequence[LogEvent]
    ) -> list[LogSource]:
        """Split a pod's planned lines and events over its container runs (one log file per run)."""
        w = self.window
        events = [*events, *self.pod_events(p, container)]
        out: list[LogSource] = []
        for restart, a, b in p.instances(container):
            lo = max(0, a - w.start_s, p.start_s - w.start_s)
            hi = min(DAY_S, b - w.start_s, (p.end_s if p.end_s is not None else w.end_s) - w.start_s)
            if hi <= lo:
                continue
            run_groups = [TemplateGroup(g.templates, _clip_plan(g.plan, lo, hi)) for g in groups]
            run_events = [e for e in events if lo <= e.second < hi]
            out.append(ContainerLog(p, container, restart, lo, hi, run_groups, run_events))
        placed = sum(
            1
            for e in events
            for _, a, b in p.instances(container)
            if max(0, a - w.start_s) <= e.second < min(DAY_S, b - w.start_s)
        )
        if placed != len(events):
            raise ValueError(f"{p.name}/{container}: {len(events) - placed} events fall between container runs")
        return out

    # --- CorpusDay

    def series(self) -> Iterator[Series]:
        """Every series of the day."""
        w = self.window
        yield from up_series(w, self.prober_scraped, self.kubelet_down)
        yield from node_object_series(w, self.node_ready_unknown)
        yield from node_series(w, [self.lab.nodes[n] for n in NODES])
        for p in sorted(self.lab.pods, key=lambda p: (p.namespace, p.name)):
            yield from pod_series(w, p, self.prober_scraped, self.kubelet_down.get(p.node, ()))
        for svc in self.lab.services:
            yield from endpointslice_series(w, svc, self.lab.pods)
        for dep in self.lab.deployments:
            yield from deployment_series(w, dep, self.lab.pods, self.replicasets(dep))
        yield from self._extra_series

    def log_chunks(self) -> Iterator[bytes]:
        """Stream the day's log records."""
        return stream_chunks(self.window, self.sources)

    def log_line_count(self) -> int:
        """Return the exact number of records ``log_chunks()`` yields."""
        return sum(s.total() for s in self.sources)

    def log_span(self, first: int, last: int) -> Iterator[bytes]:
        """Stream only the records of unix seconds ``[first, last)`` (whole minutes of the window)."""
        self._check_span(first, last)
        return stream_chunks(
            self.window, self.sources, first_s=first - self.window.start_s, last_s=last - self.window.start_s
        )

    def planned_span(self, first: int, last: int) -> dict[str, tuple[int, int]]:
        """Return ``{workload: (records, error records)}`` planned in unix seconds ``[first, last)``."""
        self._check_span(first, last)
        out: dict[str, tuple[int, int]] = {}
        for src in self.sources:
            n, e = src.span_counts(first - self.window.start_s, last - self.window.start_s)
            n0, e0 = out.get(src.workload_key, (0, 0))
            out[src.workload_key] = (n0 + n, e0 + e)
        return out

    def _check_span(self, first: int, last: int) -> None:
        w = self.window
        if (first - w.start_s) % 60 or (last - w.start_s) % 60 or not w.start_s <= first <= last <= w.end_s:
            raise ValueError(f"a span is whole minutes of the window, got [{iso(first)}, {iso(last)})")

    # --- facts

    def facts(self) -> dict[str, object]:
        """Every number the digest must show for the day (keys documented in README.md)."""
        w = self.window
        facts: dict[str, object] = {}
        lines: dict[str, int] = {}
        errors: dict[str, int] = {}
        for s in self.sources:
            lines[s.workload_key] = lines.get(s.workload_key, 0) + s.total()
            errors[s.workload_key] = errors.get(s.workload_key, 0) + s.errors()
        facts["log_lines"] = sum(lines.values())
        for k in sorted(lines):
            facts[f"log_lines.{k}"] = lines[k]
        facts["error_lines"] = sum(errors.values())
        for k in sorted(errors):
            if errors[k]:
                facts[f"error_lines.{k}"] = errors[k]
        terms = [(p, x) for p in self.lab.pods for x in p.terminations if w.in_window(x.finished_s)]
        terms.sort(key=lambda px: px[1].finished_s)
        facts["restarts"] = len(terms)
        per_wl: dict[str, int] = {}
        for p, _ in terms:
            per_wl[p.workload_key] = per_wl.get(p.workload_key, 0) + 1
        for k in sorted(per_wl):
            facts[f"restarts.{k}"] = per_wl[k]
        facts["terminations"] = [
            {
                "workload": p.workload_key,
                "pod": p.name,
                "container": x.container,
                "reason": x.reason,
                "exit_code": x.exit_code,
                "at": iso(x.finished_s),
            }
            for p, x in terms
        ]
        facts["oom_kills"] = sum(1 for _, x in terms if x.reason == "OOMKilled")
        facts.update(self._conntrack_facts())
        facts.update(self._workload_facts())
        facts.update(self._gateway_facts())
        facts["alerts_fired"] = 0
        facts.update(self.day_facts())
        facts.update(self.extra_facts)
        return facts

    def _workload_facts(self) -> dict[str, object]:
        """Endpoint gaps, unavailable replicas, failed probes and CPU throttling, wherever there are any."""
        w = self.window
        out: dict[str, object] = {}
        grid = list(range(w.start_s, w.end_s + 1, SCRAPE_S))
        for svc in self.lab.services:
            gaps = Membership(self.lab.workload(svc.workload_key), svc.port).empty(w.start_s, w.end_s)
            if not gaps:
                continue
            key = f"{svc.namespace}/{svc.name}"
            windows = [
                {"start": iso(a), "seconds": b - a, "scrapes": sum(1 for t in grid if a <= t < b)} for a, b in gaps
            ]
            out[f"endpoints_empty_windows.{key}"] = windows
            out[f"endpoints_empty_seconds.{key}"] = sum(int(str(x["seconds"])) for x in windows)
            out[f"endpoints_empty_scrapes.{key}"] = sum(int(str(x["scrapes"])) for x in windows)
        for dep in self.lab.deployments:
            ready = Membership(self.lab.workload(dep.workload_key), 0)
            unavailable = [max(0, dep.replicas - len(ready.hosts(t))) for t in grid]
            if any(unavailable):
                out[f"replicas_unavailable_scrapes.{dep.workload_key}"] = sum(1 for u in unavailable if u)
                out[f"replicas_unavailable_max.{dep.workload_key}"] = max(unavailable)
        probes: dict[str, int] = {}
        throttle: dict[str, list[float]] = {}
        for p in self.lab.pods:
            # Failed probes are a fact only where the digest can read them (prober_probe_total scraped).
            for (_, probe_type), times in p.probe_failures.items() if self.prober_scraped else ():
                n = sum(1 for t in times if w.in_window(t))
                if n:
                    k = f"probe_failures.{probe_type}.{p.workload_key}"
                    probes[k] = probes.get(k, 0) + n
            for c in p.containers:
                if c.cpu_limit is None:
                    continue
                fn = p.cfs.get(c.name)
                for restart, a, b in p.instances(c.name):
                    ts = [t for t in grid if a <= t < b and p.alive(t)]
                    if len(ts) < 2:
                        continue
                    cfs = fn or cfs_baseline(a, salt_of(p.uid, c.name), c.cpu_busy, c.throttled_ratio)
                    del restart
                    periods, throttled = cfs(ts)
                    acc = throttle.setdefault(p.workload_key, [0.0, 0.0])
                    acc[0] += periods[-1] - periods[0]
                    acc[1] += throttled[-1] - throttled[0]
        out.update(sorted(probes.items()))
        for k, (periods_inc, throttled_inc) in sorted(throttle.items()):
            out[f"cpu_throttled_ratio.{k}"] = round(throttled_inc / periods_inc, 3) if periods_inc else 0.0
        return out

    def _conntrack_facts(self) -> dict[str, object]:
        w = self.window
        best = (-1, "", 0)
        drops = 0
        for n in NODES:
            node = self.lab.nodes[n]
            for t in range(w.start_s, w.end_s + 1, SCRAPE_S):
                v = node.conntrack(t)
                if v > best[0]:
                    best = (v, n, t)
            drops += node.drop(w.end_s) - node.drop(w.start_s) + node.early_drop(w.end_s) - node.early_drop(w.start_s)
        return {
            "conntrack_peak_entries": best[0],
            "conntrack_limit": CONNTRACK_LIMIT,
            "conntrack_peak_percent": round(100 * best[0] / CONNTRACK_LIMIT, 1),
            "conntrack_peak_node": best[1],
            "conntrack_peak_at": iso(best[2]),
            "conntrack_drops": drops,
        }

    def _gateway_facts(self) -> dict[str, object]:
        out: dict[str, object] = {}
        total = 0
        fivexx = 0
        flags: dict[str, int] = {}
        for r in self.routes:
            c = r.route.cluster
            n = r.total()
            uh = r.uh()
            uc = r.uc_total()
            total += n
            fivexx += uh + uc
            out[f"gateway_requests.{c}"] = n
            out[f"gateway_5xx.{c}"] = uh + uc
            for flag, k in (("UH", uh), ("UC", uc)):
                if k:
                    out[f"gateway_flags.{flag}.{c}"] = k
                    flags[flag] = flags.get(flag, 0) + k
        out["gateway_requests"] = total
        out["gateway_5xx"] = fivexx
        for flag in sorted(flags):
            out[f"gateway_flags.{flag}"] = flags[flag]
        return dict(sorted(out.items()))


def place_events(
    w: Window, pods: Sequence[Pod], container: str, events: Sequence[LogEvent], target: Pod
) -> list[LogEvent]:
    """Return the events of a workload that ``target`` writes (the newest pod whose container runs writes each).

    An event that falls while no container of the workload runs moves to the next second one does.
    """
    out: list[LogEvent] = []
    for e in events:
        s = e.second
        while s < DAY_S:
            t = w.start_s + s
            owners = [p for p in pods if p.alive(t) and any(a <= t < b for _, a, b in p.instances(container))]
            if owners:
                if max(owners, key=lambda p: p.start_s) is target:
                    out.append(replace(e, second=s))
                break
            s += 1
    return out


def _clip_plan(plan: Sequence[int], lo: int, hi: int) -> list[int]:
    """Keep a pod-wide plan's minutes that fall inside one container run ``[lo, hi)`` (whole minutes only)."""
    out = list(plan)
    for m in range(MINUTES):
        if m * 60 + 60 <= lo or m * 60 >= hi:
            out[m] = 0
        elif m * 60 < lo or m * 60 + 60 > hi:
            # A minute cut by a restart: keep the share of its seconds inside the run (rounded down).
            out[m] = out[m] * (min(hi, m * 60 + 60) - max(lo, m * 60)) // 60
    return out

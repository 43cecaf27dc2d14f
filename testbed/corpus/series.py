"""Exporter series: what kube-state-metrics, node_exporter, the kubelet (cAdvisor, prober) and vmalert expose.

Each ``*_series`` function turns the object model into VictoriaMetrics import series on the 30 s scrape grid of a
window (D-1 22:00Z to D+1 00:30Z). The kubelet's probe schedule is here too: the prober counters count those
probes, and day modules derive from the same schedule when a pod is not ready.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence

from digest.testbed.corpus.baselines import cfs_baseline, memory_baseline
from digest.testbed.corpus.identity import NODE_IPS, NODES, SCRAPE_S, Window, container_id, salt_of
from digest.testbed.corpus.model import Series
from digest.testbed.corpus.objects import (
    CONNTRACK_LIMIT,
    Container,
    Deployment,
    NodeModel,
    Pod,
    ReplicaSet,
    Service,
    Termination,
)

KSM = {"job": "kube-state-metrics", "instance": "kube-state-metrics.monitoring:8080"}
VMALERT = {"job": "vmalert", "instance": "vmalert.monitoring:8880"}
CADVISOR = {"job": "kubelet", "metrics_path": "/metrics/cadvisor"}
PROBES = {"job": "kubelet", "metrics_path": "/metrics/probes"}


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

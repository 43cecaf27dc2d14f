"""Cluster shapes: the calm day rebuilt as clusters other than the homelab, each with what it has and what it lacks.

The corpus is one cluster shape (Deployments, Envoy Gateway, a rule evaluator, the kernel's OOM counter on every
node). Real clusters are other shapes, and the digest must learn from the data which one it reads: never UNKNOWN
every day about what a cluster never had, never OK over what it has and lost. Each shape here is generated from the
calm day (2026-07-19, scaled), loaded into real VictoriaMetrics + VictoriaLogs at a date of its own, 40 days apart so
that no shape's 30-day look-back (``coverage.deployed_days``) sees another's data; a shape that *lost* something has
the full calm day loaded the day before it:

* **ingress-nginx**: no Envoy Gateway (its pods and access log replaced by an ingress-nginx controller's plain
  access lines), no Istio, no rule evaluator. Calm: ``OK 10/10``, with envoy_flags and alerts *not watched*, said
  once in a footer line.
* **Envoy gone / rule evaluator gone**: the same components present the day before and missing today: never OK.
* **A Job OOM-killed without a restart** (``restartPolicy: Never``; the pod Failed), on nodes without the kernel's
  ``node_vmstat_oom_kill`` and on nodes with it: WARNING 9, the pod named with its Job, and no "no container
  termination seen" when the kernel saw it too.
* **The kernel counter stops** on one node at 10:00 while node_exporter answers (a kill after it would go
  unseen): never OK, the node and span named; **missing 10:00–16:00 and back one higher**: the kill is counted.
* **Nodes without the kernel OOM counter**, calm: ``OK 10/10``, nothing said. **Nodes without a conntrack table** (no
  nf_conntrack module) while node_exporter answers: ``OK 10/10`` with conntrack *not watched*; one node alone
  without it: ``OK 10/10``, conntrack not watched *on that node*; **the table gone today**, there the day before (on
  every node, or on one): UNKNOWN.
* **A virtual node** (Fargate: pods, no DaemonSet, no exporter, no shipper) beside the three: ``OK 10/10``, the node
  named once as virtual; with **pi5-2's node_exporter gone from 10:00** beside it: UNKNOWN naming pi5-2, never the
  virtual node.
* **Jobs every minute** (a CronJob's runs, each a fresh pod that completes): calm, OK 10/10, nothing invented.
* **A StatefulSet pod stuck in Init:CrashLoopBackOff** all day: ``OK 10/10 · 1 to look at``, the workload named.
* **A bare pod** (no controller) named like a StatefulSet's pod (``toolbox-7``), crash-looping: ``OK 10/10 · 1 to
  look at``, named by itself and said to be a bare pod, never taken for a StatefulSet ``toolbox``.
* **A StatefulSet rollout stuck**, **a DaemonSet's pod unavailable**, **a CronJob's run failed** (yesterday's failed
  run still listed): each ``OK 10/10 · 1 to look at``, named with its kind; yesterday's failure not counted.

Each case says what the digest must say; the test prints every headline. The shapes judged in PromQL that could
differ between backends (counters across a gap, a state's first minute, the fleet's parts, the carrier's and the
controller's questions) are also read on a Prometheus holding the same series, beside the same logs: word for word
the same text. The shared-store shapes run on all four pairs in ``test_cluster_scope``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from digest.app.engine import Config, make_digest, open_sources, stored_history
from digest.app.settings import load_settings
from digest.checks import coverage
from digest.checks.contract import Backend
from digest.checks.envoy_flags import EnvoyFlagsCheck, EnvoyFlagsPolicy
from digest.output.render import Renderer, to_json
from digest.pipeline.policy import Policy, TrendsPolicy
from digest.pipeline.state import HistoryStore
from digest.pipeline.window import day_window
from digest.testbed.corpus.model import Series
from digest.testbed.corpus.series import KSM
from digest.testbed.embedded import LOG_STREAM_FIELDS, EmbeddedBackends, loaded_backends
from digest.testbed.loki_server import LokiServer
from digest.testbed.prometheus_server import PrometheusServer
from digest.testbed.snapshots import binary_identity, snapshot_key
from tests.command import backend_env, run_digest
from tests.test_coverage import wait_for_copies
from tests.test_coverage_ablations import (
    Ablation,
    Copy,
    PrometheusCopy,
    _cut,
    _day_start,
    _keep_line,
    _keep_series,
    _lines,
    _series,
)

CALM = date(2026, 7, 19)
FIRST = date(2019, 1, 1)
# Farther apart than the 30 days a source is looked for before it is called never deployed.
SPACING_DAYS = 40
HOUR_MS = 3_600_000

# Series and lines ----------------------------------------------------------------------------------------------

SeriesFn = Callable[[Series, int, str], Series | Sequence[Series] | None]
LineFn = Callable[[bytes, str, str], bool | bytes]


def _name(one: Series) -> str:
    return str(one.labels["__name__"])


def _is_ksm_up(one: Series) -> bool:
    return _name(one) == "up" and one.labels.get("job") == KSM["job"]


def _node_of(one: Series) -> str:
    return str(one.labels.get("instance", "")).split(":", 1)[0]


def _make(name: str, labels: dict[str, str], points: Sequence[tuple[int, float]]) -> Series:
    return Series({"__name__": name, **labels}, [t for t, _ in points], [v for _, v in points])


@dataclass(frozen=True)
class Pod:
    """A pod of a controller other than a Deployment, as kube-state-metrics exposes it (times: ms from the day)."""

    namespace: str
    name: str
    kind: str  # created_by_kind: Job, StatefulSet, DaemonSet
    owner: str
    node: str
    container: str
    created_h: float  # hours into the day
    ends_h: float | None = None  # the pod object gone (a completed Job's pod cleaned up)
    init: bool = False  # the container is an init container


def _ksm_pod(pod: Pod, grid: Sequence[int], day_ms: int) -> list[Series]:
    """kube_pod_info, kube_pod_created, kube_pod_owner and phase series of ``pod`` on the scrape ``grid``."""
    created = day_ms + int(pod.created_h * HOUR_MS)
    ends = day_ms + int(pod.ends_h * HOUR_MS) if pod.ends_h is not None else None
    times = [t for t in grid if t >= created and (ends is None or t < ends)]
    ident = {**KSM, "namespace": pod.namespace, "pod": pod.name, "uid": f"uid-{pod.name}"}
    return [
        _make(
            "kube_pod_info",
            {**ident, "node": pod.node, "created_by_kind": pod.kind, "created_by_name": pod.owner},
            [(t, 1.0) for t in times],
        ),
        _make("kube_pod_created", ident, [(t, created / 1000) for t in times]),
        _make(
            "kube_pod_owner",
            {**ident, "owner_kind": pod.kind, "owner_name": pod.owner, "owner_is_controller": "true"},
            [(t, 1.0) for t in times],
        ),
    ]


def _phase(pod: Pod, grid: Sequence[int], day_ms: int, phase_at: Callable[[int], str]) -> list[Series]:
    created = day_ms + int(pod.created_h * HOUR_MS)
    ends = day_ms + int(pod.ends_h * HOUR_MS) if pod.ends_h is not None else None
    times = [t for t in grid if t >= created and (ends is None or t < ends)]
    ident = {**KSM, "namespace": pod.namespace, "pod": pod.name, "uid": f"uid-{pod.name}"}
    return [
        _make("kube_pod_status_phase", {**ident, "phase": phase}, [(t, float(phase_at(t) == phase)) for t in times])
        for phase in ("Pending", "Running", "Succeeded", "Failed", "Unknown")
    ]


def _job(
    namespace: str, job: str, cronjob: str, created_s: int, failed_s: int | None, points: Sequence[int]
) -> list[Series]:
    """A Job's families as kube-state-metrics exports them: created, its CronJob, and its Failed condition."""
    ident = {**KSM, "namespace": namespace, "job_name": job}
    times = [t for t in points if t >= created_s * 1000]
    failed_ms = failed_s * 1000 if failed_s is not None else 2**62
    return [
        _make("kube_job_created", ident, [(t, float(created_s)) for t in times]),
        _make(
            "kube_job_owner",
            {**ident, "owner_kind": "CronJob", "owner_name": cronjob, "owner_is_controller": "true"},
            [(t, 1.0) for t in times],
        ),
        _make("kube_job_failed", {**ident, "condition": "true"}, [(t, float(t >= failed_ms)) for t in times]),
        _make("kube_job_failed", {**ident, "condition": "false"}, [(t, float(t < failed_ms)) for t in times]),
    ]


def _oom_killed_run(pod: Pod, grid: Sequence[int], day_ms: int, killed: int) -> list[Series]:
    """A Job's pod whose container was OOM-killed at ``killed`` (ms) without a restart, the pod Failed since."""
    made = [*_ksm_pod(pod, grid, day_ms), *_phase(pod, grid, day_ms, lambda t: "Failed" if t >= killed else "Running")]
    created = day_ms + int(pod.created_h * HOUR_MS)
    times = [t for t in grid if t >= created]
    container = {
        **KSM,
        "namespace": pod.namespace,
        "pod": pod.name,
        "uid": f"uid-{pod.name}",
        "container": pod.container,
    }
    made += [
        _make("kube_pod_container_status_restarts_total", container, [(t, 0.0) for t in times]),
        _make("kube_pod_container_status_running", container, [(t, float(t < killed)) for t in times]),
        _make("kube_pod_container_status_terminated", container, [(t, float(t >= killed)) for t in times]),
        _make(
            "kube_pod_container_status_terminated_reason",
            {**container, "reason": "OOMKilled"},
            [(t, 1.0) for t in times if t >= killed],
        ),
        _make(
            "kube_pod_container_resource_limits",
            {**container, "node": pod.node, "resource": "memory", "unit": "byte"},
            [(t, 256.0 * 2**20) for t in times],
        ),
    ]
    return made


def job_oom_killed(kernel: bool) -> SeriesFn:
    """A CronJob's run OOM-killed at 14:00 under restartPolicy Never; the node's kernel counter counts it or is absent.

    kube-state-metrics shows the container running, then terminated with reason OOMKilled and the pod Failed, its
    restart counter at 0 throughout: the last-terminated reason (which needs a restart) never appears. Yesterday's
    run was OOM-killed too, and its pod is still listed all day (a failed Job's pod stays): history, not today's kill.
    """
    today = Pod(
        "batch", "nightly-report-29180520-x7k2p", "Job", "nightly-report-29180520", "pi5-2", "report", 13 + 5 / 6
    )
    yesterday = Pod(
        "batch", "nightly-report-29179080-b4d7k", "Job", "nightly-report-29179080", "pi5-3", "report", 13 + 5 / 6 - 24
    )

    def series(one: Series, start: int, _node: str) -> Series | Sequence[Series] | None:
        day_ms = start * 1000
        killed = day_ms + 14 * HOUR_MS + 10_000  # seen a scrape after the kill
        if _name(one) == "node_vmstat_oom_kill":
            if not kernel:
                return None  # a node_exporter without the vmstat collector: no node has the counter
            if _node_of(one) != today.node:
                return one
            values = [v + (1.0 if t >= killed else 0.0) for t, v in zip(one.timestamps_ms, one.values, strict=True)]
            return Series(one.labels, one.timestamps_ms, values)
        if not _is_ksm_up(one):
            return one
        grid = one.timestamps_ms
        made = [
            one,
            *_oom_killed_run(today, grid, day_ms, killed),
            *_oom_killed_run(yesterday, grid, day_ms, killed - 86_400_000),
        ]
        made += _job("batch", today.owner, "nightly-report", start + 13 * 3600 + 3000, (killed + 60_000) // 1000, grid)
        made += _job(
            "batch", yesterday.owner, "nightly-report", start - 11 * 3600 - 600, (killed - 86_340_000) // 1000, grid
        )
        return made

    return series


def kernel_counter_cut(node: str, stop_h: int, back_h: int | None, rise: float) -> SeriesFn:
    """``node``'s node_vmstat_oom_kill missing from ``stop_h`` (to ``back_h``), ``rise`` higher when it comes back."""

    def series(one: Series, start: int, _node: str) -> Series | None:
        if _name(one) != "node_vmstat_oom_kill" or _node_of(one) != node:
            return one
        stop = (start + stop_h * 3600) * 1000
        if back_h is None:
            return _cut(one, stop)
        back = (start + back_h * 3600) * 1000
        kept = _cut(one, stop, back)
        assert kept is not None
        values = [v + (rise if t >= back else 0.0) for t, v in zip(kept.timestamps_ms, kept.values, strict=True)]
        return Series(kept.labels, kept.timestamps_ms, values)

    return series


_ENVOY_NAMESPACE = "envoy-gateway-system"
_EVALUATOR = re.compile(r"vmalert|prometheus")


def no_gateway_mesh_or_evaluator(one: Series, _start: int, _node: str) -> Series | None:
    """Series of a cluster without Envoy Gateway and without a rule evaluator (its ``up`` and ALERTS gone)."""
    if one.labels.get("namespace") == _ENVOY_NAMESPACE:
        return None
    if _name(one) == "up" and _EVALUATOR.search(str(one.labels.get("job", ""))):
        return None
    if _name(one).startswith("ALERTS"):
        return None
    return one


def no_evaluator(one: Series, _start: int, _node: str) -> Series | None:
    """The rule evaluator's ``up`` and ALERTS gone (it was uninstalled, or its scrape job dropped)."""
    if _name(one) == "up" and _EVALUATOR.search(str(one.labels.get("job", ""))):
        return None
    return None if _name(one).startswith("ALERTS") else one


def no_kernel_counter(one: Series, _start: int, _node: str) -> Series | None:
    """Nodes whose kernel (or node_exporter's vmstat collector) exports no OOM kill counter."""
    return None if _name(one) == "node_vmstat_oom_kill" else one


def no_conntrack_table(one: Series, _start: int, _node: str) -> Series | None:
    """Nodes without the nf_conntrack module (an eBPF dataplane): node_exporter exports no conntrack series."""
    return None if _name(one).startswith("node_nf_conntrack_") else one


def no_conntrack_table_on(node: str) -> SeriesFn:
    """``node`` alone without the nf_conntrack module (a node pool on an eBPF dataplane): no conntrack series there."""

    def series(one: Series, _start: int, _node: str) -> Series | None:
        return None if _name(one).startswith("node_nf_conntrack_") and _node_of(one) == node else one

    return series


_NGINX_POD = "ingress-nginx-controller-7d9f8c6b5d-q2w4x"


def ingress_nginx_lines(line: bytes, _clock: str, _node: str) -> bool | bytes:
    """The gateway's access log as an ingress-nginx controller writes it (plain text, no JSON, no flags)."""
    if f'"pod_namespace":"{_ENVOY_NAMESPACE}"'.encode() not in line:
        return True
    record = json.loads(line)
    if record["kubernetes"]["container_name"] != "envoy":
        return False
    try:
        access = json.loads(record["message"])
    except ValueError:
        return False  # Envoy's own log lines: the controller writes its own, not these
    path = access.get("x-envoy-origin-path") or "/"
    status = access.get("response_code") or 0
    upstream = str(access.get("upstream_cluster") or "-").replace("/", "-")
    record["message"] = (
        f"{access.get('downstream_remote_address', '-').split(':')[0]} - - [{record['timestamp']}] "
        f'"{access.get("method", "GET")} {path} HTTP/2.0" {status} {access.get("bytes_sent", 0)} "-" '
        f'"{access.get("user-agent", "-")}" {access.get("bytes_received", 0)} 0.0{access.get("duration", 0)} '
        f"[{upstream}] [] {access.get('upstream_host', '-')} {status}"
    )
    record["kubernetes"] = {
        **record["kubernetes"],
        "pod_namespace": "ingress-nginx",
        "pod_name": _NGINX_POD,
        "container_name": "controller",
    }
    record["file"] = f"/var/log/pods/ingress-nginx_{_NGINX_POD}_uid/controller/0.log"
    return json.dumps(record, separators=(",", ":")).encode()


def istio_only(one: Series, _start: int, _node: str) -> Series | Sequence[Series] | None:
    """No Envoy Gateway: Istio's sidecars report the requests (both reporters), every one answered 200."""
    if one.labels.get("namespace") == _ENVOY_NAMESPACE:
        return None
    if not _is_ksm_up(one):
        return one
    made: list[Series] = [one]
    for service, per_second in (("api", 2.0), ("web", 0.5)):
        for reporter in ("source", "destination"):
            labels = {
                "job": "istio-mesh",
                "reporter": reporter,
                "destination_service_namespace": "shop",
                "destination_service_name": service,
                "response_code": "200",
                "response_flags": "-",
            }
            values = [(t, round((t - one.timestamps_ms[0]) / 1000 * per_second)) for t in one.timestamps_ms]
            made.append(_make("istio_requests_total", labels, [(t, float(v)) for t, v in values]))
    return made


# Families a kube-state-metrics run with --metric-allowlist or fewer --resources may leave out, and the kubelet's
# probe metrics that few clusters scrape.
_OPTIONAL_FAMILIES = re.compile(
    r"kube_pod_container_status_last_terminated_timestamp|kube_endpointslice_.*|kube_replicaset_.*|"
    r"kube_deployment_spec_strategy_.*|prober_probe_total"
)


def without_optional_families(one: Series, _start: int, _node: str) -> Series | None:
    """kube-state-metrics without its optional families, and no prober metrics."""
    return None if _OPTIONAL_FAMILIES.fullmatch(_name(one)) else one


def web_logs_lost(line: bytes, _clock: str, _node: str) -> bool:
    """shop/web's lines lost (a shipper exclusion on its pods) while shop/api, in the same namespace, logs on."""
    return b'"pod_name":"web-' not in line


def no_access_log(line: bytes, _clock: str, _node: str) -> bool:
    """The gateway's access log not shipped (its pods still run and log nothing the shipper keeps)."""
    return f'"pod_namespace":"{_ENVOY_NAMESPACE}"'.encode() not in line


def cronjob_every_minute(one: Series, start: int, _node: str) -> Series | Sequence[Series] | None:
    """A CronJob that runs every minute: each run a Job and a pod that completes in 20 s and is cleaned up later."""
    if not _is_ksm_up(one):
        return one
    day_ms = start * 1000
    grid = one.timestamps_ms
    made: list[Series] = [one]
    for minute in range(0, 24 * 60, 1):
        stamp = 29_180_520 + minute
        suffix = "".join("bcdfghjklmnpqrstvwxz2456789"[(minute * 7 + k * 3) % 27] for k in range(5))
        pod = Pod(
            "ops",
            f"heartbeat-{stamp}-{suffix}",
            "Job",
            f"heartbeat-{stamp}",
            f"pi5-{minute % 3 + 1}",
            "ping",
            minute / 60,
            ends_h=minute / 60 + 0.1,
        )
        done = day_ms + int(pod.created_h * HOUR_MS) + 20_000
        made += _ksm_pod(pod, grid, day_ms)
        made += _phase(pod, grid, day_ms, lambda t, done=done: "Succeeded" if t >= done else "Running")
        container = {**KSM, "namespace": pod.namespace, "pod": pod.name, "uid": f"uid-{pod.name}", "container": "ping"}
        created = day_ms + int(pod.created_h * HOUR_MS)
        ends = day_ms + int((pod.ends_h or 0) * HOUR_MS)
        times = [t for t in grid if created <= t < ends]
        made += [
            _make("kube_pod_container_status_restarts_total", container, [(t, 0.0) for t in times]),
            _make(
                "kube_pod_container_status_terminated_reason",
                {**container, "reason": "Completed"},
                [(t, 1.0) for t in times if t >= done],
            ),
        ]
        made += _job("ops", f"heartbeat-{stamp}", "heartbeat", created // 1000, None, [t for t in grid if t < ends])
    return made


def init_crash_loop(one: Series, start: int, _node: str) -> Series | Sequence[Series] | None:
    """A StatefulSet's pod whose init container crashes all day (Init:CrashLoopBackOff, 182 restarts, Pending)."""
    if not _is_ksm_up(one):
        return one
    day_ms = start * 1000
    grid = one.timestamps_ms
    pod = Pod("data", "postgres-0", "StatefulSet", "postgres", "pi5-3", "init-perms", -2, init=True)
    made = [one, *_ksm_pod(pod, grid, day_ms), *_phase(pod, grid, day_ms, lambda _t: "Pending")]
    made += _statefulset("data", "postgres", grid, lambda _t: (1, 0, 1, "postgres-5b8f6c", "postgres-5b8f6c"))
    ident = {**KSM, "namespace": pod.namespace, "pod": pod.name, "uid": f"uid-{pod.name}"}
    init = {**ident, "container": "init-perms"}
    main = {**ident, "container": "postgres"}
    # A restart every ~7.9 minutes (the back-off's 5-minute ceiling plus the run): 182 in the day.
    restarts = [(t, float(max(0, (t - day_ms) // 474_000))) for t in grid]
    made += [
        _make("kube_pod_init_container_status_restarts_total", init, restarts),
        _make(
            "kube_pod_init_container_status_last_terminated_reason",
            {**init, "reason": "Error"},
            [(t, 1.0) for t in grid],
        ),
        _make(
            "kube_pod_init_container_status_waiting_reason",
            {**init, "reason": "CrashLoopBackOff"},
            [(t, 1.0) for t in grid],
        ),
        _make("kube_pod_container_status_restarts_total", main, [(t, 0.0) for t in grid]),
        _make(
            "kube_pod_container_status_waiting_reason",
            {**main, "reason": "PodInitializing"},
            [(t, 1.0) for t in grid],
        ),
        _make("kube_pod_status_ready", {**ident, "condition": "true"}, [(t, 0.0) for t in grid]),
        _make("kube_pod_status_ready", {**ident, "condition": "false"}, [(t, 1.0) for t in grid]),
    ]
    return made


def bare_pod_crash_loop(one: Series, start: int, _node: str) -> Series | Sequence[Series] | None:
    """A pod without a controller (``kubectl run``) named like a StatefulSet's, crash-looping all day (182 restarts)."""
    if not _is_ksm_up(one):
        return one
    day_ms = start * 1000
    grid = one.timestamps_ms
    pod = Pod("ops", "toolbox-7", "<none>", "<none>", "pi5-2", "shell", -2)
    made = [one, *_ksm_pod(pod, grid, day_ms), *_phase(pod, grid, day_ms, lambda _t: "Running")]
    ident = {**KSM, "namespace": pod.namespace, "pod": pod.name, "uid": f"uid-{pod.name}"}
    main = {**ident, "container": pod.container}
    restarts = [(t, float(max(0, (t - day_ms) // 474_000))) for t in grid]
    made += [
        _make("kube_pod_container_status_restarts_total", main, restarts),
        _make(
            "kube_pod_container_status_last_terminated_reason", {**main, "reason": "Error"}, [(t, 1.0) for t in grid]
        ),
        _make(
            "kube_pod_container_status_waiting_reason", {**main, "reason": "CrashLoopBackOff"}, [(t, 1.0) for t in grid]
        ),
        _make("kube_pod_status_ready", {**ident, "condition": "true"}, [(t, 0.0) for t in grid]),
        _make("kube_pod_status_ready", {**ident, "condition": "false"}, [(t, 1.0) for t in grid]),
    ]
    return made


def _statefulset(
    namespace: str, name: str, points: Sequence[int], at: Callable[[int], tuple[int, int, int, str, str]]
) -> list[Series]:
    """A StatefulSet's families: ``at(t)`` gives (replicas, ready, updated, current revision, update revision)."""
    ident = {**KSM, "namespace": namespace, "statefulset": name}
    states = [(t, *at(t)) for t in points]
    made = [
        _make("kube_statefulset_replicas", ident, [(t, float(r)) for t, r, _, _, _, _ in states]),
        _make("kube_statefulset_status_replicas", ident, [(t, float(r)) for t, r, _, _, _, _ in states]),
        _make("kube_statefulset_status_replicas_ready", ident, [(t, float(ready)) for t, _, ready, _, _, _ in states]),
        _make("kube_statefulset_status_replicas_updated", ident, [(t, float(u)) for t, _, _, u, _, _ in states]),
    ]
    for family, index in (("current", 4), ("update", 5)):
        for revision in sorted({state[index] for state in states}):
            made.append(
                _make(
                    f"kube_statefulset_status_{family}_revision",
                    {**ident, "revision": revision},
                    [(state[0], 1.0) for state in states if state[index] == revision],
                )
            )
    return made


def statefulset_rollout_stuck(one: Series, start: int, _node: str) -> Series | Sequence[Series] | None:
    """data/postgres (3 replicas) rolled to a new revision at 09:00 whose first pod never becomes ready."""
    if not _is_ksm_up(one):
        return one
    nine = (start + 9 * 3600) * 1000

    def at(t: int) -> tuple[int, int, int, str, str]:
        if t < nine:
            return 3, 3, 3, "postgres-5b8f6c", "postgres-5b8f6c"
        return 3, 2, 1, "postgres-5b8f6c", "postgres-7c9d4f"

    return [one, *_statefulset("data", "postgres", one.timestamps_ms, at)]


def daemonset_short(one: Series, start: int, _node: str) -> Series | Sequence[Series] | None:
    """kube-system/csi-node on three nodes, one of its pods unavailable from 12:00 (the others fine)."""
    if not _is_ksm_up(one):
        return one
    noon = (start + 12 * 3600) * 1000
    ident = {**KSM, "namespace": "kube-system", "daemonset": "csi-node"}
    points = one.timestamps_ms
    return [
        one,
        _make("kube_daemonset_status_desired_number_scheduled", ident, [(t, 3.0) for t in points]),
        _make("kube_daemonset_status_current_number_scheduled", ident, [(t, 3.0) for t in points]),
        _make("kube_daemonset_status_updated_number_scheduled", ident, [(t, 3.0) for t in points]),
        _make("kube_daemonset_status_number_available", ident, [(t, 2.0 if t >= noon else 3.0) for t in points]),
        _make("kube_daemonset_status_number_unavailable", ident, [(t, 1.0 if t >= noon else 0.0) for t in points]),
    ]


_VIRTUAL_NODE = "fargate-ip-10-0-9-9.eu-west-1.compute.internal"


def _daemonset_labelled(one: Series) -> Series:
    """kube_pod_info as kube-state-metrics writes it: with its controller's kind (the log shipper's pods: DaemonSet)."""
    if _name(one) != "kube_pod_info" or "created_by_kind" in one.labels:
        return one
    pod = str(one.labels.get("pod", ""))
    kind, owner = ("DaemonSet", "vector") if pod.startswith("vector-") else ("ReplicaSet", pod.rsplit("-", 1)[0])
    return Series({**one.labels, "created_by_kind": kind, "created_by_name": owner}, one.timestamps_ms, one.values)


def virtual_node(one: Series, start: int, _node: str) -> Series | Sequence[Series] | None:
    """A Fargate node beside the three: a pod runs there all day, and nothing else (no DaemonSet, no exporter)."""
    one = _daemonset_labelled(one)
    if not _is_ksm_up(one):
        return one
    day_ms = start * 1000
    grid = list(one.timestamps_ms)
    pod = Pod("shop", "checkout-7d4b9c8f6d-q8w2e", "ReplicaSet", "checkout-7d4b9c8f6d", _VIRTUAL_NODE, "checkout", -2)
    node = _make(
        "kube_node_info",
        {**KSM, "node": _VIRTUAL_NODE, "internal_ip": "10.0.9.9", "kubelet_version": "v1.30.0-eks-fargate"},
        [(t, 1.0) for t in grid],
    )
    ready = _make(
        "kube_node_status_condition",
        {**KSM, "node": _VIRTUAL_NODE, "condition": "Ready", "status": "true"},
        [(t, 1.0) for t in grid],
    )
    # The shipper's DaemonSet as kube-state-metrics exports it beside its pods: on the three nodes, all available.
    shipper = {**KSM, "namespace": "logging", "daemonset": "vector"}
    status = [
        _make(f"kube_daemonset_status_{name}", shipper, [(t, value) for t in grid])
        for name, value in (
            ("desired_number_scheduled", 3.0),
            ("current_number_scheduled", 3.0),
            ("updated_number_scheduled", 3.0),
            ("number_available", 3.0),
            ("number_unavailable", 0.0),
        )
    ]
    return [one, node, ready, *status, *_ksm_pod(pod, grid, day_ms), *_phase(pod, grid, day_ms, lambda _t: "Running")]


def virtual_node_and_a_lost_exporter(one: Series, start: int, node: str) -> Series | Sequence[Series] | None:
    """The Fargate node, and pi5-2's node_exporter gone from 10:00 (its DaemonSet pods still there)."""
    if _node_of(one) == "pi5-2" and str(one.labels.get("job", "")).startswith("node"):
        cut = _cut(one, (start + 10 * 3600) * 1000)
        if cut is None:
            return None
        one = cut
    return virtual_node(one, start, node)


def job_failed(one: Series, start: int, _node: str) -> Series | Sequence[Series] | None:
    """A CronJob's run failed at 03:20 (BackoffLimitExceeded); yesterday's failed run is still listed all day."""
    if not _is_ksm_up(one):
        return one
    points = one.timestamps_ms
    return [
        one,
        *_job("batch", "db-backup-29180520", "db-backup", start + 3 * 3600, start + 3 * 3600 + 20 * 60, points),
        *_job("batch", "db-backup-29179080", "db-backup", start - 21 * 3600, start - 20 * 3600, points),
    ]


def in_cluster(name: str) -> SeriesFn:
    """Every series labelled ``cluster=<name>``, as a central store's remote write labels them."""

    def series(one: Series, _start: int, _node: str) -> Series:
        return Series({**one.labels, "cluster": name}, one.timestamps_ms, one.values)

    return series


def staging_series(one: Series, _start: int, _node: str) -> Series:
    """The staging cluster's series: its own nodes (staging-1..3), labelled ``cluster=staging``."""
    labels = {key: value.replace("pi5-", "staging-") for key, value in one.labels.items()}
    return Series({**labels, "cluster": "staging"}, one.timestamps_ms, one.values)


_LEDGER_POD = "ledger-7d9f8c6b5d-q2w4x"


def staging_lines(line: bytes, _clock: str, _node: str) -> bytes:
    """The staging cluster's records, no cluster field: its own nodes, and a flood of payments/ledger errors.

    Every line of its shop and feeds workloads becomes an error line of payments/ledger: a flood of tens of thousands
    in staging that prod's digest must not grade as prod's.
    """
    renamed = line.replace(b"pi5-", b"staging-")
    if b'"pod_namespace":"shop"' not in renamed and b'"pod_namespace":"feeds"' not in renamed:
        return renamed
    record = json.loads(renamed)
    record["kubernetes"] = {
        **record["kubernetes"],
        "pod_namespace": "payments",
        "pod_name": _LEDGER_POD,
        "container_name": "ledger",
    }
    record["level"] = "error"
    record["message"] = "ERROR ledger: settlement batch rejected: upstream returned 502"
    record["file"] = f"/var/log/pods/payments_{_LEDGER_POD}_uid/ledger/0.log"
    return json.dumps(record, separators=(",", ":")).encode()


def with_cluster_field(name: str, lines: LineFn = _keep_line) -> LineFn:
    """Each record (rewritten by ``lines`` first) with a top-level ``cluster`` field, a stream field of the store."""

    def line(record: bytes, clock: str, node: str) -> bool | bytes:
        kept = lines(record, clock, node)
        if kept is False:
            return False
        body = record if kept is True else kept
        assert isinstance(body, bytes)
        return b'{"cluster":"' + name.encode() + b'",' + body[1:]

    return line


def _no(_node: str) -> tuple[str, ...]:
    return ()


# The shapes ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """One cluster shape: how the calm day is changed, whether the full day precedes it, and what must be said."""

    name: str
    ablation: Ablation
    had_it: bool = False  # the full calm day is loaded the day before (a component there yesterday)
    status: str = "OK"
    score: int | None = 10
    says: tuple[str, ...] = ()  # phrases of the headline
    text_says: tuple[str, ...] = ()  # phrases of the whole text digest
    text_never: tuple[str, ...] = ()
    unwatched: tuple[str, ...] = ()
    not_ok: tuple[str, ...] = ()  # checks that must not be OK
    # Another cluster's copy loaded at the same date in the same store (a shared store), and the settings to read it.
    companion: Ablation | None = None
    settings: tuple[tuple[str, str], ...] = ()
    cluster: str = "homelab"
    trend_days: int = 0  # earlier days the digest compares with (the day before, for a shape that had_it)


def _shape(name: str, series: SeriesFn = _keep_series, lines: LineFn = _keep_line, **expected: Any) -> Shape:
    return Shape(name, Ablation(name, series, lines, _no), **expected)


SHAPES = (
    _shape("homelab as it is", score=10),
    _shape(
        "ingress-nginx, no Istio, no rule evaluator",
        no_gateway_mesh_or_evaluator,
        ingress_nginx_lines,
        unwatched=("envoy_flags", "alerts"),
        text_says=("Not watched here: envoy_flags (no access logs or Istio metrics in 30 days)", "alerts.enabled"),
        text_never=("UNKNOWN", "not checked", "could not be checked"),
    ),
    _shape(
        "Istio only, no gateway access log",
        istio_only,
        no_access_log,
        text_says=("✓ envoy_flags · no flagged 5xx in",),
        text_never=("UNKNOWN", "Not watched"),
    ),
    _shape(
        "kube-state-metrics without optional families, no prober metrics",
        without_optional_families,
        text_never=("UNKNOWN", "not checked"),
    ),
    _shape(
        "nodes without the kernel OOM counter",
        no_kernel_counter,
        text_says=("✓ oom_kills",),
        text_never=("UNKNOWN", "not seen", "never seen", "Not watched"),
    ),
    _shape(
        "nodes without a conntrack table (no nf_conntrack module)",
        no_conntrack_table,
        unwatched=("conntrack",),
        text_says=("Not watched here: conntrack (no conntrack table in 30 days)",),
        text_never=("UNKNOWN", "not seen", "never seen"),
    ),
    _shape(
        "the conntrack table gone today",
        no_conntrack_table,
        had_it=True,
        status="UNKNOWN",
        score=None,
        not_ok=("conntrack",),
        text_never=("Not watched",),
    ),
    _shape(
        "one node without a conntrack table among nodes with one",
        no_conntrack_table_on("pi5-3"),
        text_says=("Not watched here: conntrack on node pi5-3 (no conntrack table in 30 days)",),
        text_never=("UNKNOWN", "not seen", "never seen", "enabled: false"),
    ),
    _shape(
        "one node's conntrack table gone today",
        no_conntrack_table_on("pi5-3"),
        had_it=True,
        status="UNKNOWN",
        score=None,
        says=("not seen: node pi5-3 (conntrack table, 24 h)",),
        text_says=("Does pi5-3 still export its conntrack table",),
        not_ok=("conntrack",),
        text_never=("Not watched", "(node_exporter"),
    ),
    _shape(
        "a virtual node (Fargate) beside the three",
        virtual_node,
        text_says=(f"○ node {_VIRTUAL_NODE} · runs no DaemonSet (a virtual node): its silence is not counted",),
        text_never=("UNKNOWN", "not seen", "could not be checked"),
    ),
    _shape(
        "a virtual node, and pi5-2's node_exporter gone from 10:00",
        virtual_node_and_a_lost_exporter,
        status="UNKNOWN",
        score=None,
        says=("pi5-2",),
        not_ok=("conntrack",),
        text_never=(f"{_VIRTUAL_NODE} after", f"on {_VIRTUAL_NODE}"),
    ),
    _shape(
        "Envoy's access log gone today",
        lines=no_access_log,
        had_it=True,
        status="UNKNOWN",
        score=None,
        says=("not checked: envoy_flags",),
        text_says=("envoy_flags not checked · no access-log lines or Istio series in the window",),
        not_ok=("envoy_flags",),
    ),
    _shape(
        "one workload's logs lost, its namespace's others logging",
        lines=web_logs_lost,
        had_it=True,
        trend_days=1,
        status="UNKNOWN",
        score=None,
        says=("not seen: logs of workload shop/web (24 h)",),
        text_never=("logs of namespace",),
        not_ok=("error_lines", "log_storms"),
    ),
    _shape(
        "rule evaluator gone today",
        no_evaluator,
        had_it=True,
        status="UNKNOWN",
        score=None,
        says=("rule evaluator",),
        not_ok=("alerts",),
    ),
    _shape(
        "a Job OOM-killed without a restart, no kernel counter",
        job_oom_killed(kernel=False),
        status="WARNING",
        score=9,
        # kube-state-metrics keeps no time of a kill without a restart: the first minute that showed it.
        text_says=(
            "batch/nightly-report-29180520-x7k2p/report OOM-killed by 14:01 (Job nightly-report-29180520",
            "Job batch/nightly-report-29180520 failed by 14:02",
        ),
        text_never=("no OOM kill", "29179080", "could not be checked"),
    ),
    _shape(
        "a Job OOM-killed without a restart, kernel counter",
        job_oom_killed(kernel=True),
        status="WARNING",
        score=9,
        text_says=("OOM-killed by 14:01", "the kernel's count by node (node_vmstat_oom_kill): pi5-2 +1"),
        text_never=("no container termination seen", "not seen as a container termination", "29179080"),
    ),
    _shape(
        "the kernel counter stops on pi5-1 at 10:00",
        kernel_counter_cut("pi5-1", 10, None, 0.0),
        status="UNKNOWN",
        score=None,
        says=("pi5-1", "kernel OOM counter", "after 10:00"),
        not_ok=("oom_kills",),
    ),
    _shape(
        "the kernel counter missing 10:00-16:00 on pi5-1, back one higher",
        kernel_counter_cut("pi5-1", 10, 16, 1.0),
        status="WARNING",
        score=9,
        says=("pi5-1",),
        text_says=("the kernel's count by node (node_vmstat_oom_kill): pi5-1 +1",),
    ),
    _shape(
        "a CronJob every minute",
        cronjob_every_minute,
        text_never=("UNKNOWN", "OOM-killed", "to look at", "could not be checked"),
    ),
    _shape(
        "a StatefulSet pod in Init:CrashLoopBackOff",
        init_crash_loop,
        says=("1 to look at: data/postgres (crash loop: 182 restarts, StatefulSet not ready)",),
        text_says=("init container",),
    ),
    _shape(
        "a bare pod named like a StatefulSet's, crash-looping",
        bare_pod_crash_loop,
        says=("1 to look at: ops/toolbox-7 (crash loop: 182 restarts",),
        text_says=("ops/toolbox-7/shell (a bare pod): 182 restarts",),
        text_never=("ops/toolbox ", "ops/toolbox (", "StatefulSet"),
    ),
    _shape(
        "a StatefulSet rollout stuck from 09:00",
        statefulset_rollout_stuck,
        says=("1 to look at: data/postgres (StatefulSet not ready, StatefulSet rollout not complete)",),
        text_says=("StatefulSet data/postgres: rollout not complete for 15 h from 09:00",),
    ),
    _shape(
        "a DaemonSet's pod unavailable from 12:00",
        daemonset_short,
        says=("1 to look at: kube-system/csi-node (DaemonSet not available)",),
        text_says=("DaemonSet kube-system/csi-node: 1 pod(s) not available for 12 h from 12:00",),
    ),
    _shape(
        "a store shared with staging, metrics scoped to prod, logs without a cluster field",
        in_cluster("prod"),
        companion=Ablation("staging", staging_series, staging_lines, _no),
        settings=(("metrics_selector", 'cluster="prod"'),),
        cluster="prod",
        status="UNKNOWN",
        score=None,
        says=("not checked: error_lines", "logs not scoped to prod: they hold another cluster's"),
        text_says=("the logs hold lines of nodes this cluster does not have (staging-1, staging-2, staging-3)",),
        text_never=("payments/ledger", "not seen"),
        not_ok=("error_lines", "log_storms"),
    ),
    _shape(
        "a store shared with staging, logs scoped to prod, metrics without a selector",
        in_cluster("prod"),
        with_cluster_field("prod"),
        companion=Ablation("staging", staging_series, with_cluster_field("staging", staging_lines), _no),
        settings=(("logs_selector", 'cluster="prod"'),),
        cluster="prod",
        status="UNKNOWN",
        score=None,
        says=("metrics not scoped to prod: they hold prod, staging",),
        text_says=("the metrics hold several clusters (prod, staging)",),
        text_never=("staging-", "not seen", "payments/ledger"),
        not_ok=("oom_kills", "conntrack"),
    ),
    _shape(
        "a CronJob's run failed, yesterday's still listed",
        job_failed,
        says=("1 to look at: batch/db-backup (Job failed)",),
        text_says=("Job batch/db-backup-29180520 failed by 03:20 (a run of CronJob db-backup)",),
        text_never=("29179080",),
    ),
)


@dataclass
class Loaded:
    """The backend pair and the copies it holds, by shape (and ``<shape> · the day before``)."""

    backends: EmbeddedBackends
    copies: dict[str, Copy] = field(default_factory=dict)


def _until_22(one: Series, start: int, _node: str) -> Series | None:
    """The day's series up to 22:00: the next copy's series begin there (the corpus' days start at D-1 22:00)."""
    return _cut(one, (start + 22 * 3600) * 1000)


# The full calm day, as the day before a shape that lost something: its series end where the shape's begin.
DAY_BEFORE = Ablation("the day before", _until_22, _keep_line, _no)


def _copies() -> dict[str, Copy]:
    copies: dict[str, Copy] = {}
    at = FIRST
    for shape in SHAPES:
        if shape.had_it:
            copies[f"{shape.name} · the day before"] = Copy(CALM, DAY_BEFORE, at - timedelta(days=1))
        copies[shape.name] = Copy(CALM, shape.ablation, at)
        if shape.companion is not None:
            copies[f"{shape.name} · {shape.companion.name}"] = Copy(CALM, shape.companion, at)
        at += timedelta(days=SPACING_DAYS)
    return copies


def _listed(copies: dict[str, Copy]) -> list[list[str]]:
    return [[key, copy.day.isoformat(), copy.at.isoformat()] for key, copy in copies.items()]


def _verifier(copies: dict[str, Copy]) -> Callable[[EmbeddedBackends, dict[str, Any]], None]:
    def verify(backends: EmbeddedBackends, manifest: dict[str, Any]) -> None:
        assert manifest["copies"] == _listed(copies), "the kept shapes are not today's: remove the snapshot"
        wait_for_copies(backends, copies.values(), manifest["lines"])

    return verify


# Series whose values are times (unix seconds): moved with their copy, or a Job created "in 2026" would be created
# in every window of the copies' years.
_TIME_VALUED_NAMES = ("kube_pod_created", "kube_job_created")
_TIME_VALUED = tuple(f'"__name__":"{name}"'.encode() for name in _TIME_VALUED_NAMES)


def _moved(copy: Copy) -> Iterator[bytes]:
    """The copy's import lines, the values of its time-valued series moved by as much as its timestamps."""
    shift = _day_start(copy.at) - _day_start(copy.day)
    for line in _series(copy):
        if any(name in line for name in _TIME_VALUED):
            record = json.loads(line)
            record["values"] = [value + shift for value in record["values"]]
            line = json.dumps(record, separators=(",", ":")).encode() + b"\n"
        yield line


def _load(backends: EmbeddedBackends, copies: dict[str, Copy]) -> int:
    counter = [0]
    for copy in copies.values():
        backends.import_series(_moved(copy))
        # ``cluster`` a stream field, as a shared store's shipper makes it (records without it have none).
        backends.ingest_logs(_lines(copy, counter), stream_fields=f"{LOG_STREAM_FIELDS},cluster")
    return counter[0]


def _loader(copies: dict[str, Copy]) -> Callable[[EmbeddedBackends], dict[str, Any]]:
    def load(backends: EmbeddedBackends) -> dict[str, Any]:
        manifest: dict[str, Any] = {"lines": _load(backends, copies), "copies": _listed(copies)}
        _verifier(copies)(backends, manifest)
        return manifest

    return load


@pytest.fixture(scope="module")
def loaded() -> Iterator[Loaded]:
    """Every shape (and the day before those that lost something) in one pair, kept as a snapshot between runs."""
    copies = _copies()
    here = Path(__file__).resolve()
    snapshot = snapshot_key(
        "cluster-shapes",
        [here, here.with_name("test_coverage.py"), here.with_name("test_coverage_ablations.py")],
        binary_identity("victoria-metrics"),
        binary_identity("victoria-logs"),
    )
    what = f"{len(copies)} cluster shapes: VictoriaMetrics + VictoriaLogs"
    with loaded_backends(what, snapshot, _loader(copies), _verifier(copies)) as backends:
        yield Loaded(backends, copies)


async def _digest(backends: EmbeddedBackends, at: date, shape: Shape) -> tuple[dict[str, Any], str, str]:
    return await _digest_on(backends.metrics.url, backends.logs.url, at, shape)


async def _digest_on(metrics_url: str, logs_url: str, at: date, shape: Shape) -> tuple[dict[str, Any], str, str]:
    settings = load_settings(
        vm_url=metrics_url,
        vl_url=logs_url,
        cluster=shape.cluster,
        timezone="UTC",
        policy_file=None,
        **dict(shape.settings),
    )
    trends = TrendsPolicy(days=shape.trend_days) if shape.trend_days else TrendsPolicy(enabled=False)
    config = Config(settings=settings, policy=Policy(trends=trends))
    digest = await make_digest(config, day_window(at, ZoneInfo("UTC")))
    renderer = Renderer()
    return to_json(digest), renderer.render(digest, "text"), renderer.render(digest, "html")


async def test_each_cluster_shape_reads_as_its_cluster(loaded: Loaded) -> None:
    """Every shape: its grade, what is not watched, what is named unseen; never OK over a lost input."""
    bound = asyncio.Semaphore(3)

    async def one(shape: Shape) -> tuple[dict[str, Any], str, str]:
        async with bound:
            return await _digest(loaded.backends, loaded.copies[shape.name].at, shape)

    results = await asyncio.gather(*(one(shape) for shape in SHAPES))
    failures: list[str] = []
    for shape, (payload, text, html) in zip(SHAPES, results, strict=True):
        headline = str(payload["headline"])
        print(f"{shape.name:<66} {headline}")
        print("   " + text.rstrip().replace("\n", "\n   "))  # shown with -s, or under a failure: read it
        checks = {str(item["name"]): item for item in payload["checks"]}
        got = (payload["status"], payload["score"] if shape.score is not None else None)
        if got != (shape.status, shape.score):
            failures.append(f"{shape.name}: {headline} (expected {shape.status} {shape.score})")
        failures += [f"{shape.name}: headline lacks {p!r}: {headline}" for p in shape.says if p not in headline]
        failures += [f"{shape.name}: text lacks {p!r}:\n{text}" for p in shape.text_says if p not in text]
        failures += [f"{shape.name}: text says {p!r}:\n{text}" for p in shape.text_never if p in text]
        unwatched = tuple(str(item["name"]) for item in payload["unwatched"])
        if unwatched != shape.unwatched:
            failures.append(f"{shape.name}: not watched {unwatched}, expected {shape.unwatched}")
        if shape.unwatched and "<i>Not watched here: " not in html:
            failures.append(f"{shape.name}: the HTML digest lacks its not-watched line:\n{html}")
        for name in shape.not_ok:
            if name not in checks or checks[name]["status"] == "OK":
                failures.append(f"{shape.name}: {name} is {checks.get(name, {}).get('status')}, expected not OK")
    assert not failures, "\n".join(failures)


def _shape_named(prefix: str) -> Shape:
    return next(shape for shape in SHAPES if shape.name.startswith(prefix))


def test_a_cluster_without_envoy_reads_ok_in_digest_run_and_doctor(loaded: Loaded) -> None:
    """ingress-nginx, no Istio, no rule evaluator: `digest run` OK 10/10 with its footer, `digest doctor` ready."""
    at = loaded.copies[_shape_named("ingress-nginx").name].at
    env = backend_env(loaded.backends)
    run = run_digest("run", "--date", at.isoformat(), env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"OK 10/10 · homelab · {at.isoformat()}\n"), run.stdout
    assert "Not watched here: envoy_flags (no access logs or Istio metrics in 30 days)" in run.stdout
    assert "UNKNOWN" not in run.stdout
    doctor = run_digest("doctor", "--at", f"{(at + timedelta(days=1)).isoformat()}T00:00:00Z", env=env, timeout=300)
    print(doctor.stdout)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "○ envoy_flags (graded): not watched: no access logs or Istio metrics in the last 30 days" in doctor.stdout
    assert "○ alerts (diagnostic): not watched: no rule evaluator in the last 30 days" in doctor.stdout
    assert "Ready: every graded check can run." in doctor.stdout


def test_a_node_without_a_conntrack_table_is_named_once_by_doctor(loaded: Loaded) -> None:
    """One node without the nf_conntrack module: `digest doctor` says conntrack runs and is not watched on that node."""
    at = loaded.copies[_shape_named("one node without a conntrack table").name].at
    env = backend_env(loaded.backends)
    doctor = run_digest("doctor", "--at", f"{(at + timedelta(days=1)).isoformat()}T00:00:00Z", env=env, timeout=300)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    line = next(line for line in doctor.stdout.splitlines() if "conntrack (graded)" in line)
    assert "runs, reads" in line, line
    assert "not watched on pi5-3 (no conntrack table in the last 30 days)" in line, line


async def test_the_look_back_for_a_component_asks_older_slices(loaded: Loaded) -> None:
    """A log component silent for the 30 days before the window but there 40 days before: found in the second slice."""
    at = loaded.copies[_shape_named("ingress-nginx").name].at
    settings = load_settings(
        vm_url=loaded.backends.metrics.url, vl_url=loaded.backends.logs.url, timezone="UTC", policy_file=None
    )
    grid = coverage.Grid.of(day_window(at, ZoneInfo("UTC")))
    access_logs = next(need for need in EnvoyFlagsCheck(EnvoyFlagsPolicy()).needs() if need.backend is Backend.LOGS)
    async with open_sources(settings) as sources:
        assert not await coverage.held_data_in(sources, grid, access_logs, 30)
        # "homelab as it is", 40 days before, had its access log: the second 30-day slice holds it.
        assert await coverage.held_data_in(sources, grid, access_logs, 60)


@pytest.mark.parametrize("logs", ["loki", "victorialogs"])
async def test_never_seen_and_seen_before_on_every_backend(
    logs: str,
    prometheus_corpus: PrometheusServer,
    loki_corpus: LokiServer,
    corpus_backends: EmbeddedBackends,
) -> None:
    """The look-back reads the same on Prometheus, Loki and VictoriaLogs: the corpus' components seen, Istio never."""
    urls = {"loki_url": loki_corpus.url} if logs == "loki" else {"vl_url": corpus_backends.logs.url}
    settings = load_settings(vm_url=prometheus_corpus.url, timezone="UTC", policy_file=None, **urls)
    envoy = EnvoyFlagsCheck(EnvoyFlagsPolicy())
    access_logs, istio = envoy.needs()
    evaluator = coverage.rule_evaluator(".*(vmalert|prometheus).*")
    after = coverage.Grid.of(day_window(date(2026, 11, 30), ZoneInfo("UTC")))  # 18 days after the last corpus day
    before = coverage.Grid.of(day_window(date(2026, 7, 1), ZoneInfo("UTC")))  # before the first
    async with open_sources(settings) as sources:
        assert await coverage.held_data_in(sources, after, access_logs, 30)
        assert await coverage.held_data_in(sources, after, evaluator, 30)
        assert not await coverage.held_data_in(sources, after, istio, 30)
        assert not await coverage.held_data_in(sources, before, access_logs, 30)
        assert not await coverage.held_data_in(sources, before, evaluator, 30)


class _CountingLogs:
    """The real log source, with every line count it is asked kept (the look-back's questions are counts)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.counted: list[tuple[float, float]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def count(self, question: Any) -> Any:
        self.counted.append((question.window.start.timestamp(), question.window.end.timestamp()))
        return await self.inner.count(question)

    def longer_than(self, days: float) -> list[tuple[float, float]]:
        return [(start, end) for start, end in self.counted if end - start > days * 86_400]


async def test_a_replay_asks_a_month_of_a_missing_component_once(loaded: Loaded) -> None:
    """Five days graded at once, each looking back 30 days for an access log never there: one month asked, once."""
    at = loaded.copies[_shape_named("ingress-nginx").name].at
    settings = load_settings(
        vm_url=loaded.backends.metrics.url, vl_url=loaded.backends.logs.url, timezone="UTC", policy_file=None
    )
    access_logs = next(need for need in EnvoyFlagsCheck(EnvoyFlagsPolicy()).needs() if need.backend is Backend.LOGS)
    grids = [coverage.Grid.of(day_window(at - timedelta(days=back), ZoneInfo("UTC"))) for back in range(5)]
    async with open_sources(settings) as sources:
        counting = _CountingLogs(sources.logs)
        watched = replace(sources, logs=counting)
        held = await asyncio.gather(*(coverage.held_data_in(watched, grid, access_logs, 30) for grid in grids))
    assert held == [False] * 5
    assert len(counting.longer_than(2)) == 1, counting.counted
    # The other days asked only the day or days no look-back before them had.
    assert len(counting.counted) <= 2 + 4 * 2, counting.counted


async def test_the_state_file_keeps_what_the_look_back_learnt(loaded: Loaded, tmp_path: Path) -> None:
    """A digest with a state file stores its sightings; the next day's digest asks no look-back for what they settle."""
    at = loaded.copies[_shape_named("ingress-nginx").name].at
    settings = load_settings(
        vm_url=loaded.backends.metrics.url,
        vl_url=loaded.backends.logs.url,
        timezone="UTC",
        policy_file=None,
        state_path=str(tmp_path / "state.sqlite"),
    )
    config = Config(settings=settings, policy=Policy(trends=TrendsPolicy(enabled=False)))

    async def digest_of(day: date) -> tuple[dict[str, Any], _CountingLogs]:
        store = HistoryStore(settings.state_path)
        try:
            async with open_sources(settings, config.policy) as sources:
                counting = _CountingLogs(sources.logs)
                digest = await make_digest(
                    config,
                    day_window(day, ZoneInfo("UTC")),
                    sources=replace(sources, logs=counting),
                    history=stored_history(config, store),
                )
        finally:
            store.close()
        return to_json(digest), counting

    first, asked_first = await digest_of(at)
    assert [item["name"] for item in first["unwatched"]] == ["envoy_flags", "alerts"], first["unwatched"]
    assert asked_first.longer_than(2), "the first digest had to look back a month"
    second, asked_second = await digest_of(at + timedelta(days=1))
    # The next day: the month before it is known from the state file (the first digest's look-back and its window).
    assert [item["name"] for item in second["unwatched"]] == ["envoy_flags", "alerts"], second["unwatched"]
    assert asked_second.longer_than(1.01) == [], asked_second.counted
    store = HistoryStore(settings.state_path)
    try:
        sources_kept = {source for source, *_ in store.load_sightings(settings.cluster)}
    finally:
        store.close()
    access_logs = next(need for need in EnvoyFlagsCheck(EnvoyFlagsPolicy()).needs() if need.backend is Backend.LOGS)
    assert coverage.source_key(access_logs) in sources_kept, sources_kept


# The same shapes on Prometheus ------------------------------------------------------------------------------------

# The shapes whose reading lives in PromQL that differs between backends where it could (counters across a gap, a
# state's first minute, the fleet's parts, the carrier's and the controller's questions): asked of a Prometheus
# holding the same series, with the same VictoriaLogs, they must read word for word as on VictoriaMetrics.
_HERE = Path(__file__).resolve()
_ON_PROMETHEUS = (
    "nodes without a conntrack table",
    "one node without a conntrack table",
    "one node's conntrack table gone today",
    "a virtual node (Fargate) beside the three",
    "a Job OOM-killed without a restart, no kernel counter",
    "the kernel counter stops on pi5-1",
    "the kernel counter missing 10:00-16:00",
    "a StatefulSet pod in Init:CrashLoopBackOff",
    "a bare pod named like",
)


async def test_the_metric_shapes_read_the_same_on_prometheus(loaded: Loaded) -> None:
    """Shapes judged in PromQL, on Prometheus beside the same logs: the same grade, headline and text."""
    shapes = [_shape_named(prefix) for prefix in _ON_PROMETHEUS]
    copies = [
        loaded.copies[key]
        for shape in shapes
        for key in (f"{shape.name} · the day before", shape.name)
        if key in loaded.copies
    ]
    here = _HERE
    snapshot = snapshot_key(
        "cluster-shapes-prometheus",
        [here, here.with_name("test_coverage.py"), here.with_name("test_coverage_ablations.py")],
        binary_identity("prometheus"),
        binary_identity("promtool"),
    )
    with PrometheusServer(
        [PrometheusCopy(copy, _TIME_VALUED_NAMES) for copy in copies], snapshot=snapshot
    ) as prometheus:
        bound = asyncio.Semaphore(3)

        async def text(metrics_url: str, shape: Shape) -> str:
            async with bound:
                return (await _digest_on(metrics_url, loaded.backends.logs.url, loaded.copies[shape.name].at, shape))[1]

        on_each = await asyncio.gather(
            *(text(url, shape) for shape in shapes for url in (prometheus.url, loaded.backends.metrics.url))
        )
    differing: list[str] = []
    for shape, mine, theirs in zip(shapes, on_each[::2], on_each[1::2], strict=True):
        print(f"{shape.name}: {mine.splitlines()[0]}")
        if mine != theirs:
            differing.append(f"{shape.name}:\n--- Prometheus\n{mine}\n--- VictoriaMetrics\n{theirs}")
    assert not differing, "\n".join(differing)

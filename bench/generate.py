"""Big-day generator: one (or many) realistic cluster days streamed into VictoriaMetrics and VictoriaLogs.

What it measures: nothing by itself — it makes the data the benchmark needs, at a size the corpus does not reach.
The corpus (``digest/corpus``) replays a three-node homelab; a benchmark must show that the digest's cost does not
grow with pods or lines, so this module builds a cluster of ~2,000 pods in ~50 namespaces on 200 nodes and a day of
13,000,000 log lines in which one workload floods (``feeds/feed-aggregator``: 35 % error lines such as
``ERROR feeds.ws relay: connect ETIMEDOUT …`` on stderr and 35 % reconnect warnings), the rest being normal traffic,
plus 200,000 Envoy Gateway JSON access-log records. Records have exactly the corpus's Vector ``kubernetes_logs``
shape (``record_head``/``record_mid`` are reused) and are sent with the loader of ``testbed.embedded``.

Metrics, at 30 s resolution from one hour before the first day to 00:30 after the last: kube-state-metrics
(``kube_pod_container_status_restarts_total`` for every container, ``…_last_terminated_reason`` and
``…_last_terminated_timestamp`` for containers that terminated, ``up{job="kube-state-metrics"}``) and node_exporter
(``node_nf_conntrack_entries``, ``…_entries_limit``, ``…_stat_drop``, ``…_stat_early_drop``,
``node_scrape_collector_success{collector="conntrack"}``, ``node_vmstat_oom_kill``, ``up``); optionally cAdvisor's
``container_memory_working_set_bytes``. On each day the flooding container is OOM-killed at 06:15:00Z, a dozen
other containers restart with reason ``Error`` and every third day another container is OOM-killed, so the
freshness-checked join of the ``oom_kills`` check has real work to do.

Why it is shaped for speed: everything countable is planned first (per-second counts by cumulative rounding, so
the facts are exact and free), and lines are rendered from pre-built strings — the per-second timestamp prefixes
and microsecond fields of the corpus's ``RenderContext``, and per-pod record heads with the message split around a
running counter — so a line costs one tuple look-up and one f-string (~0.5-1 µs). Logs and series are generators
of byte chunks: a day is never held in memory. ``python -m bench.generate --dry-run`` prints the rate.
"""

from __future__ import annotations

import argparse
import calendar
import contextlib
import datetime as dt
import json
import math
import random
import signal
import sys
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, Self

from digest.testbed.corpus.baselines import user_profile
from digest.testbed.corpus.gateway_logs import UC_BODY, UC_DETAILS, Route
from digest.testbed.corpus.identity import Window as CorpusWindow
from digest.testbed.corpus.identity import safe_token, salt_of, stable_uid
from digest.testbed.corpus.objects import Pod
from digest.testbed.corpus.pod_logs import TAIL, RenderContext, json_escape, record_head, record_mid
from digest.testbed.embedded import EmbeddedBackends, Server

DAY = dt.date(2026, 7, 20)
DAY_S = 86_400
FULL_LINES = 13_000_000
ENVOY_RECORDS = 200_000
CHUNK_RECORDS = 20_000
LOOKBACK_S = 3_600
TAIL_S = 1_800
CONNTRACK_LIMIT = 262_144

FLOOD_NAMESPACE = "feeds"
FLOOD_DEPLOYMENT = "feed-aggregator"
FLOOD_CONTAINER = "backend"
ENVOY_NAMESPACE = "envoy-gateway-system"
ENVOY_DEPLOYMENT = "envoy-default-eg-e41e7b31"
KSM = {"job": "kube-state-metrics", "instance": "kube-state-metrics.monitoring:8080"}
NODE_JOB = "node-exporter"
OOM_AT_S = 6 * 3_600 + 15 * 60  # the flood's OOM kill, 06:15:00Z, as on 2026-07-20
RESTART_GAP_S = 30

NAMESPACES = (
    "shop", "payments", "search", "auth", "catalog", "checkout", "orders", "inventory", "shipping", "pricing",
    "reviews", "recommendations", "notifications", "mail", "media", "cdn-origin", "analytics", "reporting",
    "billing", "invoicing", "ledger", "fraud", "identity", "profiles", "sessions", "chat", "support", "crm",
    "marketing", "ads", "experiments", "flags", "config", "secrets-sync", "backup", "etl", "warehouse", "ml-serving",
    "ml-training", "geo", "maps", "weather", "translations", "docs", "wiki", "ci-runners", "registry", "monitoring",
    "logging", "ingress",
)  # fmt: skip
COMPONENTS = ("api", "web", "worker", "scheduler", "indexer", "notifier", "ingest", "cache-warmer", "exporter", "sync")
REPLICAS = 5

# Normal traffic: never an error line by the digest's default rule (the rule traps of the corpus included).
PLAIN_MESSAGES = (
    "GET /api/v1/items/{} 200 12ms",
    "processed batch {} in 84ms (0 errors)",
    "cache stats: hits={} misses=3 error_count=0",
    "reconciled {} objects, next sync in 30s",
)
LEVELED_MESSAGES = (
    ("info", "handled request id={} status=200 dur=8ms"),
    ("info", "SLO report: error budget 93% remaining (window {})"),
    ("warning", "payment provider returned an error, retrying (attempt 1/3, req {})"),
    ("info", "db pool size=10 in_use=4 idle=6 (tick {})"),
)
# Genuine errors of normal workloads: one word-rule line, one level-rule line.
PLAIN_ERROR = "upstream call failed: error: context deadline exceeded (req {})"
LEVELED_ERROR = ("error", "could not reach payments: dial tcp 10.43.0.12:443: i/o timeout (req {})")
GENUINE_ERRORS_AT_FULL = (2_400, 1_200, 640, 300, 150, 80, 40, 20, 10, 6, 3, 1)
FLOOD_ERRORS = (
    "ERROR feeds.ws relay: connect ETIMEDOUT 203.0.113.7:443 (attempt {})",
    "ERROR feeds.ws relay: connect ETIMEDOUT 198.51.100.23:443 (attempt {})",
    "ERROR feeds.ws relay: upstream closed: connect ECONNREFUSED 203.0.113.7:443 (attempt {})",
)
FLOOD_WARNINGS = (
    ("stdout", "WARNING feeds.ws relay: Reconnecting in 5s (attempt {})"),
    ("stderr", "WARNING feeds.ws relay: TLS session resumption failed, falling back to a full handshake (conn {})"),
)

# Envoy Gateway's default JSON access log: the keys and order of the corpus (see testbed/corpus/gateway_logs.py), as a
# %-template already escaped for the inside of the record's ``message`` string.
ENVOY_TEMPLATE = (
    '{":authority":"%(host)s","bytes_received":0,"bytes_sent":%(sent)s,"connection_termination_details":null,'
    '"downstream_local_address":"%(listener)s","downstream_remote_address":"%(remote)s","duration":%(dur)s,'
    '"method":"GET","protocol":"HTTP/2","requested_server_name":"%(host)s","response_code":%(code)s,'
    '"response_code_details":"%(details)s","response_flags":"%(flags)s","route_name":"%(route)s",'
    '"start_time":"%(start)s","upstream_cluster":"%(cluster)s","upstream_host":%(upstream)s,'
    '"upstream_local_address":%(local)s,"upstream_transport_failure_reason":null,"user-agent":"%(agent)s",'
    '"x-envoy-origin-path":"%(path)s","x-envoy-upstream-service-time":%(svc)s,"x-forwarded-for":"%(xff)s",'
    '"x-request-id":"%(rid)s"}'
).replace('"', '\\"')
ENVOY_ROUTES = 24
ENVOY_UC_AT_FULL = 20
UC_BURST_S = 14 * 3_600 + 20 * 60
USER_AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "okhttp/4.12.0",
    "Uptime-Kuma/1.23.13",
)


# --------------------------------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class Volume:
    """How many log records one day holds."""

    lines: int = FULL_LINES  # Vector records of the day, the gateway's access log excluded
    envoy_records: int = ENVOY_RECORDS
    error_share: float = 0.35  # the flooding workload's error lines, as a share of ``lines``
    warning_share: float = 0.35  # its non-error lines (reconnect warnings)


@dataclass(frozen=True)
class Shape:
    """The cluster: pods, namespaces, nodes and the metrics resolution."""

    pods: int = 2_000
    namespaces: int = 50
    nodes: int = 200
    step_s: int = 30
    cadvisor: bool = False


@dataclass(frozen=True)
class DayFacts:
    """What the digest must find in one generated day (exact: the plan is counted before rendering)."""

    day: dt.date
    log_lines: int  # every record of the window, the gateway's included
    error_lines: int  # records that are error lines by the default rule
    flood_workload: str
    flood_lines: int
    flood_error_lines: int
    envoy_records: int
    envoy_uc: int
    oom_kills: int  # container OOM kills in the window


# --------------------------------------------------------------------------------------------------- the cluster


@dataclass(frozen=True)
class Workload:
    """A Deployment of normal pods and how it logs."""

    namespace: str
    name: str
    style: str  # "plain", "lower" (JSON with lowercase level) or "upper"
    pods: tuple[int, ...]  # indexes into Cluster.pods


@dataclass(frozen=True)
class Termination:
    """A container terminated at ``finished_s`` (unix seconds) and restarted ``RESTART_GAP_S`` later."""

    pod: int
    finished_s: int
    reason: str
    exit_code: int

    @property
    def observed_s(self) -> int:
        """When kube-state-metrics shows it (the kubelet posts the status a few seconds after finishedAt)."""
        return self.finished_s + 5


@dataclass
class Cluster:
    """Pods (normal ones first, then the flooding one, then the gateway), workloads and nodes."""

    shape: Shape
    pods: list[Pod] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    flood: int = -1
    envoy: int = -1

    @property
    def normal_pods(self) -> int:
        """Pods of the normal workloads (the first ``normal_pods`` entries of ``pods``)."""
        return self.flood


def _pod(namespace: str, deployment: str, replica: int, node: str, index: int) -> Pod:
    rs_hash = safe_token(10, "rs", namespace, deployment)
    name = f"{deployment}-{rs_hash}-{safe_token(5, 'pod', namespace, deployment, str(replica))}"
    return Pod(
        namespace=namespace,
        workload=deployment,
        kind="Deployment",
        name=name,
        uid=stable_uid(namespace, name),
        node=node,
        ip=f"10.42.{index // 250}.{index % 250 + 2}",
        start_s=0,
        containers=(),
    )


def build_cluster(shape: Shape) -> Cluster:
    """The benchmark cluster: ``shape.pods`` normal pods in Deployments of 5, then the flood and the gateway."""
    cluster = Cluster(shape=shape, nodes=[f"node-{i:03d}" for i in range(shape.nodes)])
    names = [
        NAMESPACES[i % len(NAMESPACES)] + (f"-{i // len(NAMESPACES) + 1}" if i >= len(NAMESPACES) else "")
        for i in range(shape.namespaces)
    ]
    per_namespace = [
        shape.pods // shape.namespaces + (1 if i < shape.pods % shape.namespaces else 0)
        for i in range(shape.namespaces)
    ]
    styles = ("plain", "lower", "upper")
    for ns_index, (namespace, count) in enumerate(zip(names, per_namespace, strict=True)):
        for dep_index in range(math.ceil(count / REPLICAS)):
            deployment = COMPONENTS[dep_index % len(COMPONENTS)] + (
                f"-{dep_index // len(COMPONENTS) + 1}" if dep_index >= len(COMPONENTS) else ""
            )
            replicas = min(REPLICAS, count - dep_index * REPLICAS)
            indexes = []
            for replica in range(replicas):
                index = len(cluster.pods)
                node = cluster.nodes[(index * 7 + ns_index) % shape.nodes]
                cluster.pods.append(_pod(namespace, deployment, replica, node, index))
                indexes.append(index)
            style = styles[salt_of(namespace, deployment) % len(styles)]
            cluster.workloads.append(Workload(namespace, deployment, style, tuple(indexes)))
    cluster.flood = len(cluster.pods)
    cluster.pods.append(_pod(FLOOD_NAMESPACE, FLOOD_DEPLOYMENT, 0, cluster.nodes[17 % shape.nodes], cluster.flood))
    cluster.envoy = len(cluster.pods)
    cluster.pods.append(_pod(ENVOY_NAMESPACE, ENVOY_DEPLOYMENT, 0, cluster.nodes[1 % shape.nodes], cluster.envoy))
    return cluster


def container_name(cluster: Cluster, index: int) -> str:
    """The container of pod ``index`` (one per pod is modelled)."""
    if index == cluster.flood:
        return FLOOD_CONTAINER
    if index == cluster.envoy:
        return "envoy"
    return "app"


def day_start(day: dt.date) -> int:
    """Unix seconds of ``day`` 00:00Z."""
    return calendar.timegm(day.timetuple())


def terminations(cluster: Cluster, days: Sequence[dt.date]) -> list[Termination]:
    """Every container termination of ``days``, in time order.

    Each day: the flooding container is OOM-killed at 06:15:00Z; twelve normal containers (chosen by the date)
    exit with ``Error``; every third day one more normal container is OOM-killed in the afternoon.
    """
    events: list[Termination] = []
    normal = cluster.normal_pods
    for day in days:
        start = day_start(day)
        events.append(Termination(cluster.flood, start + OOM_AT_S, "OOMKilled", 137))
        rng = random.Random(salt_of("terminations", day.isoformat()))  # noqa: S311  # deterministic data, not crypto
        if normal:
            for _ in range(12):
                pod = rng.randrange(normal)
                events.append(Termination(pod, start + rng.randrange(600, DAY_S - 600), "Error", 1))
            if day.toordinal() % 3 == 0:
                pod = rng.randrange(normal)
                events.append(Termination(pod, start + 14 * 3_600 + rng.randrange(3_600), "OOMKilled", 137))
    events.sort(key=lambda event: event.finished_s)
    return events


# --------------------------------------------------------------------------------------------------- planning


def allocate(total: int, weights: Sequence[float]) -> list[int]:
    """Split ``total`` over ``weights`` by cumulative rounding: exact sum, each part within 1 of its share."""
    whole = math.fsum(weights)
    if total <= 0 or whole <= 0:
        return [0] * len(weights)
    out: list[int] = []
    cumulative = 0.0
    previous = 0
    for weight in weights:
        cumulative += weight
        current = min(total, round(total * cumulative / whole))
        out.append(current - previous)
        previous = current
    out[-1] += total - previous
    return out


def flood_profile(second: int) -> float:
    """The flood's rate: reconnect loops grow through the day and start over after the 06:15 OOM kill."""
    if OOM_AT_S <= second < OOM_AT_S + RESTART_GAP_S:
        return 0.0
    since = second if second < OOM_AT_S else second - OOM_AT_S - RESTART_GAP_S
    return 0.15 + float(min(1.0, since / 50_000) ** 1.5)


def genuine_error_plan(cluster: Cluster, volume: Volume) -> list[tuple[int, int]]:
    """``(workload index, error lines)`` of the normal workloads that log a few genuine errors."""
    scale = volume.lines / FULL_LINES
    plan: list[tuple[int, int]] = []
    stride = max(1, len(cluster.workloads) // len(GENUINE_ERRORS_AT_FULL))
    for rank, count in enumerate(GENUINE_ERRORS_AT_FULL):
        index = (rank * stride + 3) % max(1, len(cluster.workloads))
        if cluster.workloads and (scaled := max(1, round(count * scale))):
            plan.append((index, scaled))
    return plan


def day_facts(cluster: Cluster, day: dt.date, volume: Volume) -> DayFacts:
    """The exact counts of the day ``log_chunks`` renders."""
    flood_errors = round(volume.lines * volume.error_share)
    flood_warnings = round(volume.lines * volume.warning_share)
    genuine = sum(count for _, count in genuine_error_plan(cluster, volume))
    normal = volume.lines - flood_errors - flood_warnings - genuine
    if normal < 0:
        raise ValueError("error_share + warning_share leave no room for normal traffic")
    oom = sum(
        1
        for event in terminations(cluster, [day])
        if event.reason == "OOMKilled" and day_start(day) <= event.finished_s < day_start(day) + DAY_S
    )
    return DayFacts(
        day=day,
        log_lines=volume.lines + volume.envoy_records,
        error_lines=flood_errors + genuine,
        flood_workload=f"{FLOOD_NAMESPACE}/{FLOOD_DEPLOYMENT}",
        flood_lines=flood_errors + flood_warnings,
        flood_error_lines=flood_errors,
        envoy_records=volume.envoy_records,
        envoy_uc=envoy_uc_count(volume),
        oom_kills=oom,
    )


def envoy_uc_count(volume: Volume) -> int:
    """UC-flagged 503s in the gateway's log (20 in a full day: a keep-alive race on one route)."""
    return min(volume.envoy_records, round(ENVOY_UC_AT_FULL * volume.envoy_records / ENVOY_RECORDS))


# --------------------------------------------------------------------------------------------------- logs


def _split(template: str) -> tuple[str, str]:
    before, after = template.split("{}", 1)
    return json_escape(before), json_escape(after)


def _variant(pod: Pod, container: str, restart: int, level: str | None, message: str, stream: str) -> tuple[str, str]:
    before, after = _split(message)
    return record_head(pod, container, restart, level) + before, after + record_mid(stream)


def _normal_variants(cluster: Cluster, workload: Workload, index: int) -> list[tuple[str, str]]:
    pod = cluster.pods[index]
    if workload.style == "plain":
        return [_variant(pod, "app", 0, None, message, "stdout") for message in PLAIN_MESSAGES]
    return [_variant(pod, "app", 0, _level(workload, level), message, "stdout") for level, message in LEVELED_MESSAGES]


def _level(workload: Workload, level: str) -> str:
    """``info``/``warning``/``error`` as the workload writes it (``INFO``/``WARN``/``ERROR`` for upper case)."""
    return {"info": "INFO", "warning": "WARN", "error": "ERROR"}[level] if workload.style == "upper" else level


def _error_variant(cluster: Cluster, workload: Workload, index: int) -> tuple[str, str]:
    pod = cluster.pods[index]
    if workload.style == "plain":
        return _variant(pod, "app", 0, None, PLAIN_ERROR, "stderr")
    level, message = LEVELED_ERROR
    return _variant(pod, "app", 0, _level(workload, level), message, "stderr")


class EnvoyRenderer:
    """Envoy Gateway access-log records of the gateway pod, ``ENVOY_ROUTES`` routes across the namespaces."""

    def __init__(self, cluster: Cluster) -> None:
        """Prepare the record framing and one %-template per route."""
        pod = cluster.pods[cluster.envoy]
        self._head = record_head(pod, "envoy", 0, None)
        self._mid = record_mid("stdout")
        listener = f"{pod.ip}:10443"
        self.routes: list[tuple[Route, dict[str, str]]] = []
        for i in range(min(ENVOY_ROUTES, max(1, len(cluster.workloads)))):
            workload = cluster.workloads[(i * 7) % len(cluster.workloads)] if cluster.workloads else None
            namespace, name = (workload.namespace, workload.name) if workload else ("default", "web")
            route = Route(namespace, name, f"{name}.{namespace}.example.com", 8080)
            fixed = {"host": route.hostname, "listener": listener, "route": route.route_name, "cluster": route.cluster}
            self.routes.append((route, fixed))
        # The busiest routes first: a deck of route indexes weighted 1/(rank+1).
        self._deck = [i for i in range(len(self.routes)) for _ in range(max(1, 24 // (i + 1)))]
        rng = random.Random(7)  # noqa: S311  # deterministic data
        rng.shuffle(self._deck)
        self._agents = [json_escape(agent) for agent in USER_AGENTS]

    def record(self, g: int, prefix: str, micros: str, uc: bool) -> str:
        """One access-log record; ``g`` varies the fields, ``prefix``+``micros`` is the record's time."""
        route_index = 0 if uc else self._deck[g % len(self._deck)]
        _, fixed = self.routes[route_index]
        h = (g * 2_654_435_761) & 0xFFFFFFFF
        if uc:
            code, details, flags, sent, svc = 503, UC_DETAILS, "UC", len(UC_BODY), "null"
        else:
            code = (200, 200, 200, 200, 200, 200, 201, 304, 200, 404)[h % 10]
            details, flags, sent, svc = (
                "via_upstream",
                "-",
                0 if code == 304 else 400 + h % 6_000,
                f'\\"{h % 90 + 2}\\"',
            )
        values = {
            **fixed,
            "sent": str(sent),
            "remote": f"198.51.100.{h % 250 + 1}:{32_768 + h % 28_000}",
            "dur": str(h % 90 + 4),
            "code": str(code),
            "details": details,
            "flags": flags,
            "start": f"{prefix}{micros[:3]}Z",
            "upstream": f'\\"10.42.{h % 8}.{h % 250 + 2}:8080\\"',
            "local": f'\\"10.42.0.3:{33_000 + h % 27_000}\\"',
            "agent": self._agents[h % len(self._agents)],
            "path": f"/api/v1/items/{g % 100_000}",
            "svc": svc,
            "xff": f"198.51.100.{h % 250 + 1}",
            "rid": f"{h:08x}-{g & 0xFFFF:04x}-4{(g >> 16) & 0xFFF:03x}-8{h & 0xFFF:03x}-{g:012x}",
        }
        return f"{self._head}{ENVOY_TEMPLATE % values}{self._mid}{prefix}{micros}{TAIL}"


def log_chunks(cluster: Cluster, day: dt.date, volume: Volume, chunk_records: int = CHUNK_RECORDS) -> Iterator[bytes]:
    """Stream one day of Vector records as NDJSON chunks of about ``chunk_records`` records."""
    facts = day_facts(cluster, day, volume)
    ctx = RenderContext(CorpusWindow(day))
    start = day_start(day)
    seconds = range(DAY_S)
    diurnal = [user_profile(start + s) for s in seconds]
    flood_weights = [flood_profile(s) for s in seconds]
    plan = genuine_error_plan(cluster, volume)
    genuine = sum(count for _, count in plan)
    normal_total = volume.lines - facts.flood_lines - genuine
    normal_counts = allocate(normal_total, diurnal)
    error_counts = allocate(facts.flood_error_lines, flood_weights)
    warning_counts = allocate(facts.flood_lines - facts.flood_error_lines, flood_weights)
    envoy_counts = allocate(volume.envoy_records - facts.envoy_uc, diurnal)

    # Normal pods: a shuffled deck of (pod, variant) slots weighted 1-8 per pod, so a second's lines spread out.
    normal_variants: list[list[tuple[str, str]]] = []
    deck: list[int] = []
    for workload in cluster.workloads:
        for index in workload.pods:
            normal_variants.append(_normal_variants(cluster, workload, index))
            deck.extend([index] * (1 + salt_of("weight", str(index)) % 8))
    random.Random(42).shuffle(deck)  # noqa: S311  # deterministic data
    flat = [variant for variants in normal_variants for variant in variants]
    per_pod = len(PLAIN_MESSAGES)
    deck4 = [index * per_pod for index in deck]

    # Genuine errors: (second, pre, post), evenly spread per workload.
    genuine_lines: list[tuple[int, str, str]] = []
    for workload_index, count in plan:
        workload = cluster.workloads[workload_index]
        for k in range(count):
            second = (k * DAY_S + salt_of("gen", workload.name) % DAY_S) // count % DAY_S
            index = workload.pods[k % len(workload.pods)]
            genuine_lines.append((second, *_error_variant(cluster, workload, index)))
    genuine_lines.sort(key=lambda item: item[0])

    flood_pod = cluster.pods[cluster.flood]
    flood_errors = [
        [_variant(flood_pod, FLOOD_CONTAINER, restart, None, message, "stderr") for message in FLOOD_ERRORS]
        for restart in (0, 1)
    ]
    flood_warnings = [
        [_variant(flood_pod, FLOOD_CONTAINER, restart, None, message, stream) for stream, message in FLOOD_WARNINGS]
        for restart in (0, 1)
    ]
    envoy = EnvoyRenderer(cluster)
    # UC 503s: bursts inside a five-minute load test at 14:20Z (the keep-alive race of the corpus's 08-16).
    uc_seconds = [UC_BURST_S + k * 300 // facts.envoy_uc for k in range(facts.envoy_uc)]
    ui = 0

    out: list[str] = []
    append = out.append
    pending = 0
    g = 0
    gi = 0
    n_deck = len(deck4)
    n_genuine = len(genuine_lines)
    ts = ctx.ts
    us = ctx.us
    tail = TAIL
    for s in seconds:
        prefix = ts[s]
        n = normal_counts[s]
        if n and n_deck:
            for u in us(n):
                g += 1
                pre, post = flat[deck4[g % n_deck] + (g & 3)]
                append(f"{pre}{g}{post}{prefix}{u}{tail}")
            pending += n
        restart = 0 if s < OOM_AT_S else 1
        e = error_counts[s]
        if e:
            variants = flood_errors[restart]
            for u in us(e):
                g += 1
                pre, post = variants[g % 3]
                append(f"{pre}{g}{post}{prefix}{u}{tail}")
            pending += e
        w = warning_counts[s]
        if w:
            variants = flood_warnings[restart]
            for u in us(w):
                g += 1
                pre, post = variants[g & 1]
                append(f"{pre}{g}{post}{prefix}{u}{tail}")
            pending += w
        while gi < n_genuine and genuine_lines[gi][0] == s:
            _, pre, post = genuine_lines[gi]
            g += 1
            append(f"{pre}{g}{post}{prefix}500000{tail}")
            gi += 1
            pending += 1
        v = envoy_counts[s]
        if v:
            for u in us(v):
                g += 1
                append(envoy.record(g, prefix, u, False))
            pending += v
        while ui < facts.envoy_uc and uc_seconds[ui] == s:
            g += 1
            append(envoy.record(g, prefix, "777000", True))
            ui += 1
            pending += 1
        if pending >= chunk_records:
            yield "".join(out).encode()
            out.clear()
            pending = 0
    if out:
        yield "".join(out).encode()


# --------------------------------------------------------------------------------------------------- metrics


def _labels(name: str, labels: dict[str, str]) -> str:
    return json.dumps({"__name__": name, **labels}, separators=(",", ":"))


def _line(metric: str, values: str, stamps: str) -> bytes:
    return f'{{"metric":{metric},"values":[{values}],"timestamps":[{stamps}]}}\n'.encode()


def _steps(times: Sequence[int], changes: Sequence[tuple[int, int]], initial: int) -> str:
    """Values of a step function at ``times``: ``initial``, then each ``(from_t, value)`` of ``changes``."""
    pieces: list[str] = []
    value = initial
    begin = 0
    for at, new_value in changes:
        end = bisect_left(times, at)
        if end > begin:
            pieces.append(",".join([str(value)] * (end - begin)))
            begin = end
        value = new_value
    if len(times) > begin:
        pieces.append(",".join([str(value)] * (len(times) - begin)))
    return ",".join(pieces)


def segments(days: Sequence[dt.date]) -> list[tuple[int, int]]:
    """The day-long segments ``series_lines`` writes for ``days``, as [start, end) in epoch seconds, in time order."""
    first = day_start(min(days)) - LOOKBACK_S
    last = day_start(max(days)) + DAY_S + TAIL_S
    bounds = []
    segment = first
    while segment <= last:
        seg_end = min(last + 1, segment + DAY_S)
        bounds.append((segment, seg_end))
        segment = seg_end
    return bounds


def series_lines(cluster: Cluster, days: Sequence[dt.date]) -> Iterator[bytes]:
    """VictoriaMetrics ``/api/v1/import`` lines for ``days``, one line per series and per day-long segment."""
    step = cluster.shape.step_s
    events = terminations(cluster, sorted(days))
    by_pod: dict[int, list[Termination]] = {}
    for event in events:
        by_pod.setdefault(event.pod, []).append(event)
    node_index = {node: k for k, node in enumerate(cluster.nodes)}
    node_of = {index: node_index[pod.node] for index, pod in enumerate(cluster.pods)}
    oom_by_node: dict[int, list[int]] = {}
    for event in events:
        if event.reason == "OOMKilled":
            oom_by_node.setdefault(node_of[event.pod], []).append(event.finished_s)
    flood_node = node_of[cluster.flood]
    flood_days = [day_start(day) for day in days]

    ksm_up = _labels("up", KSM)
    restarts = [
        _labels(
            "kube_pod_container_status_restarts_total",
            {
                **KSM,
                "namespace": pod.namespace,
                "pod": pod.name,
                "uid": pod.uid,
                "container": container_name(cluster, i),
            },
        )
        for i, pod in enumerate(cluster.pods)
    ]
    node_labels = [{"job": NODE_JOB, "instance": f"{node}:9100"} for node in cluster.nodes]

    for segment, seg_end in segments(days):
        times = list(range(segment - segment % step + (step if segment % step else 0), seg_end, step))
        if not times:
            continue
        n = len(times)
        stamps = ",".join(str(t * 1_000) for t in times)
        zeros = ",".join(["0"] * n)
        ones = ",".join(["1"] * n)
        yield _line(ksm_up, ones, stamps)

        for i, pod in enumerate(cluster.pods):
            pod_events = by_pod.get(i)
            if not pod_events:
                yield _line(restarts[i], zeros, stamps)
                continue
            changes = [(event.observed_s, k + 1) for k, event in enumerate(pod_events)]
            yield _line(restarts[i], _steps(times, changes, 0), stamps)
            base = {
                **KSM,
                "namespace": pod.namespace,
                "pod": pod.name,
                "uid": pod.uid,
                "container": container_name(cluster, i),
            }
            yield from _termination_lines(times, pod_events, base)

        profile = [user_profile(t) for t in times]
        ramp = [_flood_conntrack(t, flood_days) for t in times]
        for k, labels in enumerate(node_labels):
            salt = salt_of("conntrack", cluster.nodes[k])
            base_entries = 2_000 + salt % 4_000
            amplitude = 1_000 + (salt >> 12) % 3_000
            noise = salt % 977
            entries = [
                base_entries + int(amplitude * p) + (t // step * 2_654_435_761 + noise) % 241
                for t, p in zip(times, profile, strict=True)
            ]
            if k == flood_node:
                entries = [value + extra for value, extra in zip(entries, ramp, strict=True)]
            yield _line(_labels("node_nf_conntrack_entries", labels), ",".join(map(str, entries)), stamps)
            yield _line(
                _labels("node_nf_conntrack_entries_limit", labels), ",".join([str(CONNTRACK_LIMIT)] * n), stamps
            )
            yield _line(_labels("node_nf_conntrack_stat_drop", labels), zeros, stamps)
            yield _line(_labels("node_nf_conntrack_stat_early_drop", labels), zeros, stamps)
            yield _line(_labels("node_scrape_collector_success", {**labels, "collector": "conntrack"}), ones, stamps)
            kills = oom_by_node.get(k, [])
            yield _line(
                _labels("node_vmstat_oom_kill", labels),
                _steps(times, [(at, c + 1) for c, at in enumerate(kills)], 0) if kills else zeros,
                stamps,
            )
            yield _line(_labels("up", labels), ones, stamps)

        if cluster.shape.cadvisor:
            yield from _cadvisor_lines(cluster, times, stamps, profile)


def _flood_conntrack(t: int, flood_days: Sequence[int]) -> int:
    """Extra conntrack entries of the flood's node: a ramp to ~72 % of the limit at 21:10Z, then back down."""
    for start in flood_days:
        peak = start + 21 * 3_600 + 600
        if start + 1_800 <= t <= peak:
            return int(0.70 * CONNTRACK_LIMIT * ((t - start - 1_800) / (peak - start - 1_800)) ** 2)
        if peak < t < start + DAY_S:
            return int(0.70 * CONNTRACK_LIMIT * max(0.0, 1 - (t - peak) / 1_800))
    return 0


def _termination_lines(times: Sequence[int], events: Sequence[Termination], base: dict[str, str]) -> Iterator[bytes]:
    """``last_terminated_reason`` (one series per reason, switching without a staleness marker) and ``…_timestamp``."""
    observed = [event.observed_s for event in events]
    first = bisect_left(times, observed[0])
    if first >= len(times):
        return
    # Span of each event: from its observation to the next one's.
    spans: list[tuple[int, int, Termination]] = []
    for k, event in enumerate(events):
        a = bisect_left(times, event.observed_s)
        b = bisect_left(times, observed[k + 1]) if k + 1 < len(events) else len(times)
        if b > a:
            spans.append((a, b, event))
    by_reason: dict[str, list[tuple[int, int]]] = {}
    for a, b, event in spans:
        by_reason.setdefault(event.reason, []).append((a, b))
    for reason, ranges in by_reason.items():
        idx = [i for a, b in ranges for i in range(a, b)]
        labels = _labels("kube_pod_container_status_last_terminated_reason", {**base, "reason": reason})
        yield _line(labels, ",".join(["1"] * len(idx)), ",".join(str(times[i] * 1_000) for i in idx))
    stamps = ",".join(str(t * 1_000) for t in times[first:])
    changes = [(event.observed_s, event.finished_s) for event in events]
    values = _steps(times[first:], changes, events[0].finished_s)
    yield _line(_labels("kube_pod_container_status_last_terminated_timestamp", base), values, stamps)


def _cadvisor_lines(cluster: Cluster, times: Sequence[int], stamps: str, profile: Sequence[float]) -> Iterator[bytes]:
    """The working set (cAdvisor) of every container and its memory limit (kube-state-metrics).

    Normal containers sit at 25-75 % of their limit with the users' day; the flooding container climbs from 60 %
    to 99.6 % of its 8 GiB before each 06:15 OOM kill and starts over after it.
    """
    for i, pod in enumerate(cluster.pods):
        container = container_name(cluster, i)
        salt = salt_of("mem", pod.uid)
        limit = 8 * 2**30 if i == cluster.flood else (256 << 20) * (1 + salt % 8)
        labels = {
            "job": "kubelet",
            "metrics_path": "/metrics/cadvisor",
            "instance": pod.node,
            "namespace": pod.namespace,
            "pod": pod.name,
            "container": container,
            "image": f"registry.example.com/{pod.namespace}/{pod.workload}:1.{salt % 40}.0",
        }
        if i == cluster.flood:
            values = ",".join(str(int(limit * _flood_memory(t))) for t in times)
        else:
            share = 0.25 + (salt >> 8) % 50 / 100
            values = ",".join(str(int(limit * share * (0.9 + 0.1 * p))) for p in profile)
        yield _line(_labels("container_memory_working_set_bytes", labels), values, stamps)
        limits = {
            **KSM,
            "namespace": pod.namespace,
            "pod": pod.name,
            "uid": pod.uid,
            "container": container,
            "node": pod.node,
            "resource": "memory",
            "unit": "byte",
        }
        yield _line(_labels("kube_pod_container_resource_limits", limits), ",".join([str(limit)] * len(times)), stamps)


def _flood_memory(t: int) -> float:
    """Share of its limit the flooding container uses: 60 % at midnight, 99.6 % at the 06:15 kill, then 60 % again."""
    second = t % DAY_S
    if second < OOM_AT_S:
        return 0.60 + 0.396 * (second / OOM_AT_S) ** 3
    return 0.60 + 0.2 * min(1.0, (second - OOM_AT_S) / DAY_S)


# --------------------------------------------------------------------------------------------------- loading


class Loader(Protocol):
    """What ``load`` needs from the backends: `testbed.embedded.EmbeddedBackends` or `RemoteBackends`."""

    def import_series(self, lines: Iterable[bytes]) -> int: ...

    def ingest_logs(self, chunks: Iterable[bytes]) -> None: ...

    def wait_for_logs(
        self, start: dt.datetime, end: dt.datetime, expected: int, timeout_seconds: float = 60.0
    ) -> None: ...

    def wait_for_series(self, selector: str, at: dt.datetime, expected: int, timeout_seconds: float = 60.0) -> None: ...


@dataclass
class _RemoteServer(Server):
    """A backend that already runs at ``base_url``: nothing to start or stop, only its URL is used."""

    base_url: str = ""

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/")


@dataclass
class RemoteBackends(EmbeddedBackends):
    """Running backends at ``vm_url``/``vl_url``, loaded with the code of `EmbeddedBackends` (no process of ours)."""

    vm_url: str = ""
    vl_url: str = ""

    def __post_init__(self) -> None:
        self.metrics = _RemoteServer("victoria-metrics", "victoria-metrics", 0, self.root / "vm", base_url=self.vm_url)
        self.logs = _RemoteServer("victoria-logs", "victoria-logs", 0, self.root / "vl", base_url=self.vl_url)

    def start(self) -> Self:
        return self


@dataclass(frozen=True)
class LoadReport:
    """How long loading took and how much went in."""

    series_lines: int
    samples: int
    metrics_seconds: float
    log_records: int
    log_bytes: int
    logs_seconds: float
    facts: tuple[DayFacts, ...]


class _Counter:
    """Counts bytes and records flowing through a chunk stream."""

    def __init__(self) -> None:
        self.bytes = 0
        self.records = 0

    def chunks(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self.bytes += len(chunk)
            self.records += chunk.count(b"\n")
            yield chunk

    def lines(self, lines: Iterable[bytes]) -> Iterator[bytes]:
        for line in lines:
            self.bytes += len(line)
            values = line.find(b'"values":[')
            self.records += line.count(b",", values, line.find(b"]", values)) + 1
            yield line


Volumes = Volume | Mapping[dt.date, Volume]


def volume_on(volume: Volumes, day: dt.date) -> Volume:
    """The volume of ``day``: one for every day, or each day's own (a flood after a quiet week)."""
    return volume if isinstance(volume, Volume) else volume[day]


def load(
    backends: Loader,
    cluster: Cluster,
    days: Sequence[dt.date],
    volume: Volumes,
    progress: bool = False,
) -> LoadReport:
    """Stream the metrics of ``days`` then their logs into ``backends`` and wait (bounded) until all is visible."""
    days = sorted(days)
    started = time.monotonic()
    samples = _Counter()
    count = backends.import_series(samples.lines(series_lines(cluster, days)))
    last_end = dt.datetime.combine(days[-1] + dt.timedelta(days=1), dt.time.min, tzinfo=dt.UTC)
    backends.wait_for_series('up{job="kube-state-metrics"}', last_end, 1, timeout_seconds=300)
    backends.wait_for_series("node_nf_conntrack_entries", last_end, len(cluster.nodes), timeout_seconds=300)
    metrics_seconds = time.monotonic() - started
    if progress:
        print(
            f"  metrics: {count:,} series lines, {samples.records:,} samples in {metrics_seconds:.1f} s",
            file=sys.stderr,
        )

    started = time.monotonic()
    logs = _Counter()
    facts = tuple(day_facts(cluster, day, volume_on(volume, day)) for day in days)

    def every_day() -> Iterator[bytes]:
        for day in days:
            yield from log_chunks(cluster, day, volume_on(volume, day))

    backends.ingest_logs(logs.chunks(every_day()))
    first_start = dt.datetime.combine(days[0], dt.time.min, tzinfo=dt.UTC)
    expected = sum(fact.log_lines for fact in facts)
    backends.wait_for_logs(first_start, last_end, expected, timeout_seconds=600)
    logs_seconds = time.monotonic() - started
    if progress:
        print(
            f"  logs: {logs.records:,} records, {logs.bytes / 1e9:.2f} GB in {logs_seconds:.1f} s "
            f"({logs.records / max(logs_seconds, 1e-9):,.0f} records/s)",
            file=sys.stderr,
        )
    return LoadReport(count, samples.records, metrics_seconds, logs.records, logs.bytes, logs_seconds, facts)


# --------------------------------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.generate",
        description="Generate the benchmark's big day (or days) and stream it into VictoriaMetrics/VictoriaLogs.",
    )
    parser.add_argument(
        "--lines", type=int, default=FULL_LINES, help="log lines per day, gateway excluded (default %(default)s)"
    )
    parser.add_argument(
        "--envoy", type=int, default=ENVOY_RECORDS, help="gateway access-log records per day (default %(default)s)"
    )
    parser.add_argument("--pods", type=int, default=Shape.pods, help="normal pods (default %(default)s)")
    parser.add_argument("--namespaces", type=int, default=Shape.namespaces, help="namespaces (default %(default)s)")
    parser.add_argument("--nodes", type=int, default=Shape.nodes, help="nodes (default %(default)s)")
    parser.add_argument("--cadvisor", action="store_true", help="also write cAdvisor working sets and memory limits")
    parser.add_argument("--first-day", default=DAY.isoformat(), help="first UTC day (default %(default)s)")
    parser.add_argument("--days", type=int, default=1, help="consecutive days (multi-day mode, e.g. 30)")
    parser.add_argument("--vm-url", help="a running VictoriaMetrics (default: start embedded backends)")
    parser.add_argument("--vl-url", help="a running VictoriaLogs (with --vm-url)")
    parser.add_argument("--dry-run", action="store_true", help="only generate (no backend) and print the rate")
    return parser


def _dry_run(cluster: Cluster, days: Sequence[dt.date], volume: Volume) -> None:
    started = time.perf_counter()
    records = size = 0
    for day in days:
        for chunk in log_chunks(cluster, day, volume):
            records += chunk.count(b"\n")
            size += len(chunk)
    elapsed = time.perf_counter() - started
    print(
        f"logs: {records:,} records, {size / 1e9:.2f} GB in {elapsed:.1f} s = "
        f"{elapsed / max(records, 1) * 1e6:.2f} µs/record"
    )
    started = time.perf_counter()
    lines = size = 0
    for line in series_lines(cluster, days):
        lines += 1
        size += len(line)
    print(f"series: {lines:,} import lines, {size / 1e6:.0f} MB in {time.perf_counter() - started:.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    """Generate and load; without --vm-url, serve the loaded embedded backends until Ctrl-C."""
    args = _parser().parse_args(argv)
    shape = Shape(pods=args.pods, namespaces=args.namespaces, nodes=args.nodes, cadvisor=args.cadvisor)
    volume = Volume(lines=args.lines, envoy_records=args.envoy)
    first = dt.date.fromisoformat(args.first_day)
    days = [first + dt.timedelta(days=k) for k in range(args.days)]
    cluster = build_cluster(shape)
    if args.dry_run:
        _dry_run(cluster, days, volume)
        return 0
    if bool(args.vm_url) != bool(args.vl_url):
        print("bench.generate: give both --vm-url and --vl-url, or neither", file=sys.stderr)
        return 2
    # SIGTERM (a `kill`, or a shell that started this in the background, where Ctrl-C's SIGINT is ignored) stops the
    # embedded backends too: SystemExit runs the `finally` below.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    backends = RemoteBackends(vm_url=args.vm_url, vl_url=args.vl_url) if args.vm_url else EmbeddedBackends().start()
    try:
        report = load(backends, cluster, days, volume, progress=True)
        for fact in report.facts:
            print(json.dumps({k: str(v) if isinstance(v, dt.date) else v for k, v in fact.__dict__.items()}))
        if not args.vm_url:
            print(f"DIGEST_VM_URL={backends.metrics.url} DIGEST_VL_URL={backends.logs.url} — Ctrl-C to stop")
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3_600)
    finally:
        backends.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The homelab cluster every corpus day runs on, its normal traffic, and ``HomelabDay``, the base of every day.

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
import datetime as dt
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from digest.testbed.corpus.baselines import (
    allocate,
    cfs_baseline,
    conntrack_baseline,
    flat_profile,
    minute_rates,
    minute_weights,
    user_profile,
)
from digest.testbed.corpus.gateway_logs import (
    BROWSERS,
    MONITOR,
    Flow,
    GatewaySource,
    Membership,
    PathSpec,
    Route,
    RouteTraffic,
)
from digest.testbed.corpus.identity import (
    DAY_S,
    ENVOY_DEPLOYMENT,
    ENVOY_NAMESPACE,
    GIB,
    MIB,
    MINUTES,
    NODES,
    SCRAPE_S,
    Window,
    iso,
    salt_of,
)
from digest.testbed.corpus.model import Expected, Series
from digest.testbed.corpus.objects import (
    CONNTRACK_LIMIT,
    Container,
    Deployment,
    NodeModel,
    Pod,
    ReplicaSet,
    Service,
    daemonset_pod,
    deployment_pod,
    deployment_replicasets,
    revision,
    revision_start,
    statefulset_pod,
)
from digest.testbed.corpus.pod_logs import (
    ContainerLog,
    LogEvent,
    LogSource,
    Template,
    TemplateGroup,
    spread_events,
    stream_chunks,
)
from digest.testbed.corpus.series import (
    deployment_series,
    endpointslice_series,
    node_object_series,
    node_series,
    pod_series,
    up_series,
)

# The 500m CPU limit on shop/api was removed on 2026-08-15 (write-up 000, !299). A chart upgrade brought the chart's
# default (500m) back on 2026-10-14; it was removed again on 2026-10-22, after the spiral of 2026-10-20.
API_CPU_LIMIT_REMOVED = dt.date(2026, 8, 15)
API_CPU_LIMIT_BACK = (dt.date(2026, 10, 14), dt.date(2026, 10, 22))


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

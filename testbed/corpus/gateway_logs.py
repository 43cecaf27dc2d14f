"""The Envoy Gateway proxy's JSON access log: routes, request flows, ready endpoints, and the 503 UH/UC answers.

A route's requests are planned per minute (and per second) from its flows; while no endpoint is ready every request
is a 503 UH, and explicit UC resets are checked against the plan. ``GatewaySource`` renders one Vector record per
request in Envoy Gateway's default access-log format.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from digest.testbed.corpus.baselines import allocate, share
from digest.testbed.corpus.identity import DAY_S, Window, iso, salt_of, stable_digest
from digest.testbed.corpus.objects import Pod
from digest.testbed.corpus.pod_logs import TAIL, LogSource, RenderContext, record_head, record_mid

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
            x = stable_digest("rid", pod.uid, str(i)).hex()
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

"""2026-07-20, reconnect storm (write-up 001): 4,539,734 error lines, an OOM kill, and zero alerts.

The feed aggregator's upstream certificate expired at 00:00Z. Every failed connect() scheduled two reconnects, so
the Node.js relay's loops doubled every 5 s, each failure logged twice and relayed line by line through Python's
logger. What the day contains, and why:

* Logs of ``feeds/feed-aggregator``: exactly 4,539,734 error lines in the window (``ERROR feeds.ws relay:
  certificate has expired`` until about 05:00, then ``connect ETIMEDOUT 203.0.113.7:443``, plus
  ``EADDRNOTAVAIL`` once ephemeral ports run out after 20:30), all on stderr, and 12,900,000 lines in all at
  ``volume_scale=1`` (the write-up's total) with 1,900,000 in the hour 20:00-21:00. The non-error lines
  (``WARNING feeds.ws relay: Reconnecting in 5s (attempt N)`` on stdout, and the TLS fallback warning on stderr)
  are the only ones ``volume_scale`` scales, so the error count is exact at any scale.
* The storm's volume grows through the day but drops at each restart (the loops restart from one): the OOM kill
  at 06:15:00Z and the liveness-probe restart at 17:03:00Z. The mitigation (an empty ``FEED_API_KEY``) rolled out
  at 21:33Z and ended it; the real fix followed at 23:00Z. Both are new ReplicaSets of the same Deployment, so the
  workload has three pods over the day.
* Metrics: ``restarts_total`` 0→1 at 06:15:30 and 1→2 at 17:03:30; ``last_terminated_reason`` OOMKilled (exit 137,
  finishedAt 06:15:00Z) then Error (exit 137, 17:03:00Z); ``node_vmstat_oom_kill`` on pi5-2 +1 after 06:15:00;
  the backend's working set climbs from 4.8 GiB to 99.6 % of its 8 GiB limit just before the OOM; conntrack on
  pi5-2 peaks at exactly 94,083/131,072 (71.8 %, the write-up's "72 %") at 21:10:00Z without a single drop, then
  falls to about 4,460 once the mitigation lands.
* No ``ALERTS`` series at all: nothing fired in 19 hours of incident. That blind spot is why the digest exists.
* Gateway traffic is normal; the feeds route simply had no request during the two 25 s restarts.

Expected: CRITICAL 8/10 (error lines ≥ 500,000: -2; OOM: -1; the two together are capped at -2).
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
from collections.abc import Sequence
from dataclasses import replace

from digest.testbed.corpus.baselines import allocate, conntrack_baseline, memory_baseline
from digest.testbed.corpus.gateway_logs import RouteTraffic
from digest.testbed.corpus.homelab import Homelab, HomelabDay
from digest.testbed.corpus.identity import DAY_S, GIB, MINUTES, SCRAPE_S, salt_of
from digest.testbed.corpus.objects import Container, MemoryFn, NodeModel, Pod, Termination, deployment_pod
from digest.testbed.corpus.pod_logs import (
    TAIL,
    LogEvent,
    LogSource,
    RenderContext,
    json_escape,
    record_head,
    record_mid,
    spread_events,
)
from digest.testbed.corpus.series import probe_times

ERROR_LINES = 4_539_734
TOTAL_LINES = 12_900_000
HOUR_20_LINES = 1_900_000
CONNTRACK_PEAK = 94_083

# Lines of the workload per hour at volume_scale=1. Hours 21-23 are derived: 21 takes what is left of the
# 12.9 M (the storm ran until 21:33), 22 and 23 hold only the new pods' normal lines.
HOUR_TARGETS = (
    45_000,
    130_000,
    220_000,
    300_000,
    380_000,
    400_000,
    330_000,
    300_000,
    360_000,
    420_000,
    470_000,
    520_000,
    570_000,
    620_000,
    680_000,
    740_000,
    800_000,
    600_000,
    1_000_000,
    1_400_000,
    HOUR_20_LINES,
)

MSG_CERT = "ERROR feeds.ws relay: certificate has expired"
MSG_ETIMEDOUT = "ERROR feeds.ws relay: connect ETIMEDOUT 203.0.113.7:443"
MSG_EADDR = "ERROR feeds.ws relay: connect EADDRNOTAVAIL 203.0.113.7:443 - Local (0.0.0.0:0)"
MSG_TLS = "WARNING feeds.ws relay: TLS verification failed (CERT_HAS_EXPIRED), retrying with pinned public key"
MSG_RECONNECT = "WARNING feeds.ws relay: Reconnecting in 5s (attempt "
VECTOR_RETRY = (
    '{ts}  WARN sink{{component_kind="sink" component_id=vlogs component_type=elasticsearch}}:'
    "request{{request_id={n}}}: vector::sinks::util::retries: Retrying after error. "
    "error=Request timed out."
)


class StormSource(LogSource):
    """The relay's storm lines, rendered by joining per-second runs of identical records (~0.1-0.3 µs a line)."""

    def __init__(self, pod: Pod, plans: dict[str, list[int]], runs: Sequence[tuple[int, int, int]]) -> None:
        """Prepare the record framing of each container run of the storming pod."""
        self.workload_key = pod.workload_key
        self.plans = plans
        self.runs = tuple(runs)
        self._heads = {restart: record_head(pod, "backend", restart, None) for restart, _, _ in runs}
        self._err = record_mid("stderr")
        self._out = record_mid("stdout")
        self._attempts = [str(i) for i in range(1, 30_001)]
        self._fixed = {
            "cert": (json_escape(MSG_CERT), self._err),
            "etimedout": (json_escape(MSG_ETIMEDOUT), self._err),
            "eaddr": (json_escape(MSG_EADDR), self._err),
            "tls": (json_escape(MSG_TLS), self._err),
        }

    def total(self) -> int:
        """Count all planned storm lines."""
        return sum(sum(p) for p in self.plans.values())

    def errors(self) -> int:
        """Count the three ERROR kinds."""
        return sum(sum(self.plans[k]) for k in ("cert", "etimedout", "eaddr"))

    def hourly(self) -> list[int]:
        """Count storm lines per hour."""
        out = [0] * 24
        for plan in self.plans.values():
            for m, c in enumerate(plan):
                out[m // 60] += c
        return out

    def span_counts(self, first: int, last: int) -> tuple[int, int]:
        """Count storm lines and error lines in whole minutes ``[first, last)``."""
        lines = sum(sum(p[first // 60 : last // 60]) for p in self.plans.values())
        errors = sum(sum(self.plans[k][first // 60 : last // 60]) for k in ("cert", "etimedout", "eaddr"))
        return lines, errors

    def _run_at(self, s: int) -> tuple[int, int, int] | None:
        for run in self.runs:
            if run[1] <= s < run[2]:
                return run
        return None

    def render(self, ctx: RenderContext, first: int, last: int, out: list[str]) -> int:
        """Render the block's storm lines, one joined string per (kind, second)."""
        run = self._run_at(first) or self._run_at(last - 1)
        if run is None:
            return 0
        restart, lo, hi = run
        m = first // 60
        a = max(lo, m * 60)
        span = min(hi, m * 60 + 60) - a
        if span <= 0:
            return 0
        head = self._heads[restart]
        n_out = 0
        for kind, plan in self.plans.items():
            c = plan[m]
            if not c:
                continue
            for off, n in ctx.spread(c, span):
                s = a + off
                if not first <= s < last:
                    continue
                us = ctx.us(n)
                if kind == "reconnect":
                    p = head + MSG_RECONNECT
                    tail_mid = ")" + self._out + ctx.ts[s]
                    most = max(1, (s - lo) // 5 + 1)
                    start = (s * 7_919) % most
                    atts = (
                        self._attempts[start : start + n]
                        if start + n <= most
                        else [self._attempts[(start + i) % most] for i in range(n)]
                    )
                    out.append(p + (TAIL + p).join([x + tail_mid + u for x, u in zip(atts, us, strict=True)]) + TAIL)
                else:
                    msg, mid = self._fixed[kind]
                    p = head + msg + mid + ctx.ts[s]
                    out.append(p + (TAIL + p).join(us) + TAIL)
                n_out += n
        return n_out


class ReconnectStorm(HomelabDay):
    """The storm day; ``volume_scale`` scales only the storm's non-error lines."""

    date = dt.date(2026, 7, 20)
    name = "reconnect-storm"
    title = "Reconnect storm: 4,539,734 error lines from feeds/feed-aggregator, OOM kill at 06:15, no alert fired"
    status = "CRITICAL"
    score = 8

    def __init__(self, volume_scale: float = 1.0) -> None:
        """Build the day; ``volume_scale`` multiplies the storm's non-error lines only."""
        if volume_scale < 0:
            raise ValueError(f"volume_scale must be >= 0, got {volume_scale}")
        self.volume_scale = volume_scale
        super().__init__()

    def with_volume_scale(self, volume_scale: float) -> ReconnectStorm:
        """Return the same day with another ``volume_scale`` (the error lines stay exactly 4,539,734)."""
        return ReconnectStorm(volume_scale=volume_scale)

    # --- cluster

    def customise(self, lab: Homelab) -> None:
        """Restarts, the two rollouts of the evening, memory, probes, conntrack and the OOM counter."""
        w = self.window
        p0 = lab.workload("feeds/feed-aggregator")[0]
        oom = Termination("backend", w.at("06:15:00"), "OOMKilled", 137, w.at("06:15:10"))
        killed = Termination("backend", w.at("17:03:00"), "Error", 137, w.at("17:03:10"))
        sigterm = w.at("21:33:30")
        liveness = probe_times(p0, "backend", "Liveness", w.at("17:02:30"), w.at("17:03:00"))
        # The event loop was starving for a while before the kubelet gave up: two isolated misses earlier.
        liveness = [
            *probe_times(p0, "backend", "Liveness", w.at("16:41:00"), w.at("16:41:10")),
            *probe_times(p0, "backend", "Liveness", w.at("16:52:00"), w.at("16:52:10")),
            *liveness,
        ]
        p0_new = replace(
            p0,
            terminations=(oom, killed),
            end_s=sigterm + 5,
            probe_failures={("backend", "Liveness"): tuple(liveness)},
            memory={"backend": self._p0_memory(p0)},
        )
        lab.replace_pod(p0, p0_new)
        mitigation = replace(
            deployment_pod(
                "feeds",
                "feed-aggregator",
                "2026-07-20T21:32-mitigation",
                0,
                "pi5-2",
                (p0.containers[0],),
                w.at("21:32:40"),
                slot=1,
            ),
            ready_from_s=w.at("21:33:20"),
            end_s=w.at("23:01:00"),
        )
        fixed_image = Container("backend", "ghcr.io/homelab/feed-aggregator:2026.07.2", 4.8 * GIB, memory_limit=8 * GIB)
        fix = replace(
            deployment_pod(
                "feeds", "feed-aggregator", "2026-07-20T23:00-fix", 0, "pi5-2", (fixed_image,), w.at("23:00:10"), slot=2
            ),
            ready_from_s=w.at("23:00:50"),
        )
        mitigation = replace(mitigation, memory={"backend": _fresh_memory(mitigation.start_s, 0.7, 1.2, 5_400)})
        fix = replace(fix, memory={"backend": _fresh_memory(fix.start_s, 0.7, 0.8, 3_600)})
        lab.pods.extend([mitigation, fix])
        oom_at = w.at("06:15:00")
        lab.nodes["pi5-2"] = NodeModel("pi5-2", conntrack=self._conntrack, oom_kill=lambda t: 1 if t > oom_at else 0)

    def _p0_memory(self, p0: Pod) -> MemoryFn:
        w = self.window
        salt = salt_of(p0.uid, "backend")
        base = p0.containers[0].memory_base
        ramp_from, oom = w.at("00:30"), w.at("06:14:30")
        b0 = memory_baseline(ramp_from, base, salt)
        runs = {
            1: (w.at("06:15:10"), w.at("17:02:30"), 6.9 * GIB, 1.3),
            2: (w.at("17:03:10"), w.at("21:33:30"), 7.5 * GIB, 1.2),
        }

        def fn(t: int, restart: int) -> float:
            noise = 1.0 + 0.004 * ((t // SCRAPE_S * 2_654_435_761 + salt) % 1_001 - 500) / 500
            if restart == 0:
                if t <= ramp_from:
                    # Identical to the calm day's series where the two days overlap (up to 00:30Z).
                    return memory_baseline(t, base, salt)
                if t >= oom:
                    return 7.97 * GIB
                x = (t - ramp_from) / (oom - ramp_from)
                return (b0 + (7.97 * GIB - b0) * math.pow(x, 2.2)) * min(noise, 1.0)
            a, b, top, k = runs[restart]
            x = min(1.0, max(0.0, (t - a) / (b - a)))
            return (0.9 * GIB + (top - 0.9 * GIB) * math.pow(x, k)) * min(noise, 1.0)

        return fn

    def _conntrack(self, t: int) -> int:
        w = self.window
        peak_t = w.at("21:10:00")
        base = conntrack_baseline("pi5-2", t)
        if t == peak_t:
            return CONNTRACK_PEAK
        extra = round(_interp(t - w.start_s, CONNTRACK_KNOTS))
        if extra == 0:
            return base
        # Keep 21:10:00 the one maximum whatever the baseline's noise does around it.
        return min(base + extra, CONNTRACK_PEAK - 37 - (abs(t - peak_t) // SCRAPE_S))

    # --- logs

    def feed_error_count(self) -> int:
        """Return the collectors' own genuine errors on the storm day (included in the 4,539,734)."""
        return 9

    def vector_events(self, p: Pod) -> list[LogEvent]:
        """VictoriaLogs fell behind the flood in the evening: Vector's sink retried (those lines say "error")."""
        if p.node != "pi5-2":
            return []
        w = self.window
        out = []
        for i, (s, u) in enumerate(
            spread_events(36, w.at("19:30") - w.start_s, w.at("21:36") - w.start_s, salt_of(self.name, "vector"))
        ):
            ts = f"{self.date.isoformat()}T{s // 3_600:02d}:{s % 3_600 // 60:02d}:{s % 60:02d}.{u // 1_000:03d}Z"
            out.append(LogEvent(s, u, VECTOR_RETRY.format(ts=ts, n=4_100 + i * 37)))
        return out

    def route_traffic(self, lab: Homelab) -> list[RouteTraffic]:
        """Return normal traffic; the feeds route had no request while its backend restarted."""
        w = self.window
        return self.normal_routes(
            lab,
            blackouts={
                "httproute/feeds/feed-aggregator/rule/0": [
                    (w.at("06:15:00"), w.at("06:15:25")),
                    (w.at("17:02:52"), w.at("17:03:25")),
                ]
            },
        )

    def extra_logs(self, lab: Homelab) -> list[LogSource]:
        """Plan the storm itself, on the first pod's three container runs."""
        w = self.window
        p0 = lab.workload("feeds/feed-aggregator")[0]
        runs = [
            (restart, max(0, a - w.start_s), min(DAY_S, b - w.start_s)) for restart, a, b in p0.instances("backend")
        ]
        runs[-1] = (runs[-1][0], runs[-1][1], w.at("21:33:30") - w.start_s)
        # The storm fills each hour up to its target around the workload's normal lines, so plan those first
        # (the same deterministic plan the normal sources of the day use).
        background = [0] * 24
        background_errors = 0
        for src in self.feed_logs(lab):
            for h, c in enumerate(src.hourly()):
                background[h] += c
            background_errors += src.errors()
        return [StormSource(p0, self._plans(runs, background, background_errors), runs)]

    def _plans(
        self, runs: Sequence[tuple[int, int, int]], background: Sequence[int], background_errors: int
    ) -> dict[str, list[int]]:
        storm_hours = [HOUR_TARGETS[h] - background[h] for h in range(len(HOUR_TARGETS))]
        storm_hours.append(TOTAL_LINES - sum(HOUR_TARGETS) - sum(background[21:]))
        storm_hours += [0, 0]
        errors_total = ERROR_LINES - background_errors
        # The cert phase logs one error per attempt; once connects time out, each failure is logged twice.
        err_weight = [int(storm_hours[h] * (30 if h < 5 else 36)) for h in range(24)]
        errors_by_hour = allocate(errors_total, err_weight)
        weights = self._minute_intensity(runs)
        plans: dict[str, list[int]] = {k: [0] * MINUTES for k in ("cert", "etimedout", "eaddr", "tls", "reconnect")}
        for h in range(24):
            mw = weights[h * 60 : (h + 1) * 60]
            if not storm_hours[h]:
                continue
            warn = round((storm_hours[h] - errors_by_hour[h]) * self.volume_scale)
            e_min = allocate(errors_by_hour[h], mw)
            w_min = allocate(warn, mw)
            for i in range(60):
                m = h * 60 + i
                t = m * 60 + 30
                e = e_min[i]
                cert_share = 1.0 if t < 4 * 3_600 + 50 * 60 else max(0.0, 1.0 - (t - (4 * 3_600 + 50 * 60)) / 1_200)
                cert = round(e * cert_share)
                eaddr = round((e - cert) * 0.08) if t >= 20 * 3_600 + 30 * 60 else 0
                plans["cert"][m] = cert
                plans["eaddr"][m] = eaddr
                plans["etimedout"][m] = e - cert - eaddr
                tls = w_min[i] // 3 if cert_share > 0 else 0
                plans["tls"][m] = tls
                plans["reconnect"][m] = w_min[i] - tls
        return plans

    def _minute_intensity(self, runs: Sequence[tuple[int, int, int]]) -> list[int]:
        """Relative storm rate per minute: smooth between hour averages, back near zero after each restart."""
        centres = [(h * 3_600 + 1_800, HOUR_TARGETS[h] if h < len(HOUR_TARGETS) else 1_200_000) for h in range(22)]
        out: list[int] = []
        for m in range(MINUTES):
            s = m * 60
            run = next((r for r in runs if r[1] <= s + 59 and s < r[2]), None)
            if run is None:
                out.append(0)
                continue
            active = min(run[2], s + 60) - max(run[1], s)
            since = s + 30 - run[1]
            regrow = min(1.0, max(0.05, since / 900)) if run[0] > 0 else 1.0
            out.append(int(_interp(s + 30, centres) * regrow * active))
        return out

    # --- facts

    def day_facts(self) -> dict[str, object]:
        """Return the storm's shape, the backend's memory and the scale."""
        key = "feeds/feed-aggregator"
        hourly = [0] * 24
        for src in self.sources:
            if src.workload_key == key:
                for h, c in enumerate(src.hourly()):
                    hourly[h] += c
        p0 = self.lab.workload(key)[0]
        mem = p0.memory["backend"]
        peak = 0.0
        for restart, a, b in p0.instances("backend"):
            for t in range(self.window.start_s, self.window.end_s + 1, SCRAPE_S):
                if a <= t < b and p0.alive(t):
                    peak = max(peak, float(round(mem(t, restart))))
        return {
            f"log_lines_by_hour.{key}": hourly,
            f"memory_limit_bytes.{key}": 8 * GIB,
            f"memory_peak_percent.{key}": round(100 * peak / (8 * GIB), 1),
            "volume_scale": self.volume_scale,
        }


CONNTRACK_KNOTS: tuple[tuple[int, int], ...] = tuple(
    (int(hh) * 3_600 + int(mm) * 60, v)
    for hh, mm, v in (
        ("00", "00", 0),
        ("00", "30", 0),
        ("01", "00", 900),
        ("02", "00", 2_600),
        ("03", "00", 4_800),
        ("04", "00", 7_600),
        ("05", "00", 11_000),
        ("06", "14", 21_500),
        ("06", "16", 5_200),
        ("06", "18", 1_800),
        ("07", "00", 5_000),
        ("09", "00", 12_000),
        ("12", "00", 24_000),
        ("15", "00", 37_000),
        ("17", "02", 47_000),
        ("17", "04", 6_000),
        ("17", "06", 2_500),
        ("18", "00", 21_000),
        ("19", "00", 46_000),
        ("20", "00", 71_000),
        ("21", "00", 86_000),
        ("21", "10", 89_500),
        ("21", "20", 88_500),
        ("21", "33", 87_000),
        ("21", "34", 30_000),
        ("21", "36", 1_500),
        ("21", "40", 0),
        ("24", "00", 0),
    )
)


def _interp(x: float, knots: Sequence[tuple[int, int]]) -> float:
    if x <= knots[0][0]:
        return float(knots[0][1])
    for (x0, y0), (x1, y1) in itertools.pairwise(knots):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else float(y1)
    return float(knots[-1][1])


def _fresh_memory(start: int, from_gib: float, to_gib: float, over_s: int) -> MemoryFn:
    def fn(t: int, restart: int) -> float:
        del restart
        x = min(1.0, max(0.0, (t - start) / over_s))
        return (from_gib + (to_gib - from_gib) * x) * GIB

    return fn

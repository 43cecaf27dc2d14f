"""2026-08-12, readiness spiral (write-up 000, INC-066): CPU throttling empties the EndpointSlice, Envoy says UH.

shop/api ran four pods, all on pi5-1, each capped at ``limits.cpu: 500m``. Under the load test of 09:00-18:00Z the
pods were throttled most of the time (CFS throttled-period ratio 55-70 %, against 3 % at night), their readiness
probe (``SELECT 1``, 3 s timeout, period 10 s, failure threshold 3) timed out, and they left the EndpointSlice one
after the other, which pushed the load onto the survivors: the spiral. Seven times in the day all four were out at
once; during those windows Envoy Gateway had no healthy upstream and answered every request on
``httproute/shop/api/rule/0`` with ``503``, ``response_flags: "UH"``, ``response_code_details:
"no_healthy_upstream"``, continuously, until a pod passed a probe again.

Why the numbers: the load test sends about 4 heavy requests per second (catalogue searches, ~400 ms of Python
CPU each), i.e. 1.6 CPU of demand against 2 CPU of limits, enough for throttling to stretch a 50 ms ``SELECT 1``
past 3 s. 130,000 load requests plus ~20,000 user requests make ~150,000 on the route; the UH count (several
thousand) is whatever falls in the all-down windows, and the facts carry it exactly. Every failed readiness probe
is also one ``level: error`` record from the API ("readiness check timed out"), a few thousand lines: under the
50,000 that would cost a point, so the score comes from UH alone. No restart (readiness never kills), no OOM, no
alert fired (the spiral was found by accident).

Expected: CRITICAL 8/10 (UH: -2). The explanation should point at readiness, the empty EndpointSlice, and the
throttling.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Sequence
from dataclasses import replace

from digest.testbed.corpus.baselines import allocate, cfs_baseline, wobble
from digest.testbed.corpus.gateway_logs import FORTIO, Flow, PathSpec, RouteTraffic
from digest.testbed.corpus.homelab import Homelab, HomelabDay
from digest.testbed.corpus.identity import MINUTES, SCRAPE_S, salt_of
from digest.testbed.corpus.objects import CfsFn, Pod
from digest.testbed.corpus.pod_logs import LogEvent
from digest.testbed.corpus.series import probe_times, readiness_intervals

LOAD_REQUESTS = 130_000
LOAD_START = "09:00"
LOAD_END = "18:00"

# (start of the cascade, how long the last pod stays out beyond the others) for each spiral episode.
EPISODES = (
    ("09:38:00", 240),
    ("10:52:00", 360),
    ("12:17:00", 180),
    ("13:41:00", 480),
    ("15:06:00", 300),
    ("16:29:00", 420),
    ("17:33:00", 240),
)

SEARCH_PATHS = (PathSpec("GET", "/api/v1/products/search?q=sku-{1}&sort=relevance", 1, bytes_sent=(8_000, 60_000)),)
TIMEOUT_MESSAGE = "readiness check timed out after 3.0s (SELECT 1)"


class ReadinessSpiral(HomelabDay):
    """The UH day."""

    date = dt.date(2026, 8, 12)
    name = "readiness-spiral"
    title = "Readiness spiral: CPU-throttled shop/api pods leave the EndpointSlice, Envoy answers 503 UH"
    status = "CRITICAL"
    score = 8
    # The incident's shape; a later spiral (2026-10-20) reuses the mechanism with its own.
    episodes: Sequence[tuple[str, int]] = EPISODES
    load_start = LOAD_START
    load_end = LOAD_END
    load_requests = LOAD_REQUESTS

    def customise(self, lab: Homelab) -> None:
        """Probe failures, the not-ready spans they imply, and the throttled CFS counters."""
        w = self.window
        load = (w.at(self.load_start), w.at(self.load_end))
        for i, pod in enumerate(lab.workload("shop/api")):
            probes = probe_times(pod, "api", "Readiness", w.series_start_s, w.series_end_s)
            failures: set[int] = set()
            for start, extra in self.episodes:
                t0 = w.at(start) + 45 * i
                t1 = w.at(start) + 180 + extra - 30 * i
                failures.update(p for p in probes if t0 <= p < t1)
            # Isolated misses under load that never reach the threshold of 3.
            for p in probes:
                if load[0] <= p < load[1] and (p // 10 + i * 7) % 53 == 0 and all(abs(p - q) > 40 for q in failures):
                    failures.add(p)
            not_ready = readiness_intervals(probes, failures)
            new = replace(
                pod,
                not_ready=tuple(not_ready),
                probe_failures={("api", "Readiness"): tuple(sorted(failures))},
                cfs={"api": self._throttled_cfs(pod, not_ready)},
            )
            lab.replace_pod(pod, new)

    def _throttled_cfs(self, pod: Pod, not_ready: Sequence[tuple[int, int]]) -> CfsFn:
        w = self.window
        load = (w.at(self.load_start), w.at(self.load_end))
        c = pod.containers[0]
        salt = salt_of(pod.uid, c.name)
        baseline = cfs_baseline(pod.start_s, salt, c.cpu_busy, c.throttled_ratio)

        def counters(times: Sequence[int]) -> tuple[list[float], list[float]]:
            if not times:
                return [], []
            p0, t0 = baseline([times[0]])
            periods, throttled = [p0[0]], [t0[0]]
            for prev, t in itertools.pairwise(times):
                mid = (prev + t) // 2
                under_load = load[0] <= mid < load[1]
                out_of_slice = any(a <= mid < b for a, b in not_ready)
                if under_load and not out_of_slice:
                    busy, ratio = 0.97, 0.62 + 0.08 * wobble(mid, salt)
                elif under_load:
                    # Out of the slice the pod only answers probes and drains: the throttling eases.
                    busy, ratio = 0.55, 0.25 + 0.05 * wobble(mid, salt)
                else:
                    busy, ratio = 0.25, 0.03
                step = float(int(10 * (t - prev) * busy))
                periods.append(periods[-1] + step)
                throttled.append(throttled[-1] + float(int(step * ratio)))
            return periods, throttled

        return counters

    def route_traffic(self, lab: Homelab) -> list[RouteTraffic]:
        """Users plus the load test's catalogue searches on the API route."""
        w = self.window
        lo, hi = w.at(self.load_start) - w.start_s, w.at(self.load_end) - w.start_s
        weights = [1 if lo <= m * 60 < hi else 0 for m in range(MINUTES)]
        load = Flow(FORTIO, SEARCH_PATHS, minute_plan=allocate(self.load_requests, weights), latency_ms=(180, 2_900))
        return self.normal_routes(lab, api_flows=[load])

    def pod_events(self, p: Pod, container: str) -> list[LogEvent]:
        """One ``level: error`` record per failed readiness probe, when the handler gives up 3 s later."""
        if container != "api":
            return []
        w = self.window
        out = []
        for t in p.probe_failures.get(("api", "Readiness"), ()):
            if w.in_window(t + 3):
                out.append(
                    LogEvent(t + 3 - w.start_s, salt_of(p.uid, str(t)) % 1_000_000, TIMEOUT_MESSAGE, "stdout", "error")
                )
        return out

    def day_facts(self) -> dict[str, object]:
        """Load-test size, the CPU limit, and the throttling while the test ran."""
        w = self.window
        times = [w.at(self.load_start), w.at(self.load_end)]
        periods = throttled = 0.0
        for pod in self.lab.workload("shop/api"):
            p, t = pod.cfs["api"](list(range(w.series_start_s, times[1] + 1, SCRAPE_S)))
            i = (times[0] - w.series_start_s) // SCRAPE_S
            periods += p[-1] - p[i]
            throttled += t[-1] - t[i]
        return {
            "load_test_requests.httproute/shop/api/rule/0": self.load_requests,
            "cpu_limit_cores.shop/api": 0.5,
            "cpu_throttled_ratio_under_load.shop/api": round(throttled / periods, 3),
        }

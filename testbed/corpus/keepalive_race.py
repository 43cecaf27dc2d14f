"""2026-08-16, keep-alive race (write-up 000, INC-067): 35 of 200,580 requests answered 503 UC.

The CPU limit was gone (2026-08-15) and the readiness spiral with it: no probe failed, the EndpointSlice stayed
full. The replayed load test still saw 35 requests answered ``503`` with ``response_flags: "UC"`` and
``response_code_details: "upstream_reset_before_response_started{connection_termination}"``: uvicorn closes idle
keep-alive connections after 5 s, Envoy kept them in its pool for about an hour, and now and then a request was
written into a connection uvicorn was closing. Fortio's report said "Sockets used: 185 (for perfect keepalive,
would be 150)": 35 extra sockets, exactly the 35 errors.

Why the numbers: the route ``httproute/shop/api/rule/0`` carries 200,580 requests in the day, 20,580 from users
and 180,000 from the 5-minute load test at 600 req/s (14:20-14:25Z). The 35 UC are grouped in a few bursts inside
the test (when the connection pool was rebalanced), each on a real upstream address, with 95 bytes sent and no
upstream service time, exactly as Envoy logs a reset before the response. Nothing else is wrong: no restart, no
UH, no alert. The BackendTrafficPolicy (idle timeout 3 s) went in later that day, so no UC after the test.

UC ratio on the route: 35 / 200,580 = 0.0174 %, above the digest's 0.01 % threshold.
Expected: WARNING 9/10 (UC: -1); the hint is the idle-timeout ordering (proxy shorter than upstream keep-alive).
"""

from __future__ import annotations

import datetime as dt

from digest.testbed.corpus.baselines import allocate
from digest.testbed.corpus.gateway_logs import FORTIO, Flow, PathSpec, RouteTraffic
from digest.testbed.corpus.homelab import ROUTE_API, Homelab, HomelabDay
from digest.testbed.corpus.identity import MINUTES

ROUTE_REQUESTS = 200_580
LOAD_REQUESTS = 180_000
USER_REQUESTS = ROUTE_REQUESTS - LOAD_REQUESTS
UC_RESETS = 35

# (time, how many of that second's requests were reset): bursts while the pool was being rebalanced.
UC_BURSTS = (
    ("14:21:12", 3),
    ("14:21:13", 6),
    ("14:21:14", 2),
    ("14:22:47", 5),
    ("14:22:48", 4),
    ("14:23:31", 7),
    ("14:23:32", 3),
    ("14:24:05", 5),
)

LOAD_PATHS = (PathSpec("GET", "/api/v1/products?page={0}", 1, bytes_sent=(2_000, 24_000)),)


class KeepaliveRace(HomelabDay):
    """The UC day."""

    date = dt.date(2026, 8, 16)
    name = "keepalive-race"
    title = "Keep-alive race: 35 of 200,580 requests on shop/api answered 503 UC, everything else healthy"
    status = "WARNING"
    score = 9

    def route_traffic(self, lab: Homelab) -> list[RouteTraffic]:
        """Users plus a 5-minute fortio run at 600 req/s, with the UC bursts inside it."""
        w = self.window
        lo, hi = w.at("14:20") - w.start_s, w.at("14:25") - w.start_s
        weights = [1 if lo <= m * 60 < hi else 0 for m in range(MINUTES)]
        load = Flow(FORTIO, LOAD_PATHS, minute_plan=allocate(LOAD_REQUESTS, weights), latency_ms=(6, 140))
        uc = {w.at(t): k for t, k in UC_BURSTS}
        return self.normal_routes(lab, api_flows=[load], uc={ROUTE_API.cluster: uc}, api_users=USER_REQUESTS)

    def day_facts(self) -> dict[str, object]:
        """Return the load test and the UC ratio on the API route."""
        return {
            f"load_test_requests.{ROUTE_API.cluster}": LOAD_REQUESTS,
            f"gateway_uc_ratio_percent.{ROUTE_API.cluster}": round(100 * UC_RESETS / ROUTE_REQUESTS, 4),
        }

"""2026-08-17, keep-alive fixed (write-up 000): the replay after the BackendTrafficPolicy, zero 5xx.

With Envoy's upstream idle timeout at 3 s, below uvicorn's 5 s keep-alive, the proxy always closes first and the
race of 2026-08-16 cannot happen. The replayed test (fortio, 120 s at about 583 req/s, 14:05-14:07Z) plus the day's
users make 87,578 requests on ``httproute/shop/api/rule/0``, and not one 5xx: no UC, no UH, no flag at all.
The pods, their identities and the node baselines are the same as on 2026-08-16 (same ReplicaSet), so the two
days agree where their series overlap.

Expected: OK 10/10.
"""

from __future__ import annotations

import datetime as dt

from digest.testbed.corpus.baselines import allocate
from digest.testbed.corpus.gateway_logs import FORTIO, Flow, PathSpec, RouteTraffic
from digest.testbed.corpus.homelab import ROUTE_API, Homelab, HomelabDay
from digest.testbed.corpus.identity import MINUTES

ROUTE_REQUESTS = 87_578
LOAD_REQUESTS = 70_000
USER_REQUESTS = ROUTE_REQUESTS - LOAD_REQUESTS

LOAD_PATHS = (PathSpec("GET", "/api/v1/products?page={0}", 1, bytes_sent=(2_000, 24_000)),)


class KeepaliveFixed(HomelabDay):
    """The day after the fix."""

    date = dt.date(2026, 8, 17)
    name = "keepalive-fixed"
    title = "Keep-alive fixed: 87,578 requests on shop/api, zero 5xx, no UC"
    status = "OK"
    score = 10

    def route_traffic(self, lab: Homelab) -> list[RouteTraffic]:
        """Users plus the 120 s replay."""
        w = self.window
        lo, hi = w.at("14:05") - w.start_s, w.at("14:07") - w.start_s
        weights = [1 if lo <= m * 60 < hi else 0 for m in range(MINUTES)]
        load = Flow(FORTIO, LOAD_PATHS, minute_plan=allocate(LOAD_REQUESTS, weights), latency_ms=(5, 120))
        return self.normal_routes(lab, api_flows=[load], api_users=USER_REQUESTS)

    def day_facts(self) -> dict[str, object]:
        """Return the replay's size."""
        return {f"load_test_requests.{ROUTE_API.cluster}": LOAD_REQUESTS}

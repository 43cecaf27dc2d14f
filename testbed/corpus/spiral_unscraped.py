"""2026-10-20, readiness spiral without prober metrics: the 2026-08-12 mechanism, seen without ``/metrics/probes``.

A chart upgrade on 2026-10-14 brought the chart's default ``limits.cpu: 500m`` back on ``shop/api`` (a new
ReplicaSet that day, not this one: the four pods of 10-14 run all day, ``metadata.generation`` does not move). The
load test of 10:00-16:30Z (95,000 catalogue searches) throttled them again (CFS throttled-period ratio ~0.6 under
load against 0.03 at night), their readiness probe (``SELECT 1``, 3 s timeout) timed out, and the pods left the
EndpointSlice one after the other: five cascades this time (10:24, 11:47, 13:09, 14:36, 15:58), each ending with the
``api-…`` slice holding no ready endpoint for a minute or more, and Envoy Gateway answering every request on
``httproute/shop/api/rule/0`` with ``503``/``UH``/``no_healthy_upstream`` meanwhile. No container restarted
(readiness never kills): ``kube_pod_status_ready`` goes false without any restart.

The difference with 08-12: this cluster does not scrape the kubelets' ``/metrics/probes`` (``prober_scraped =
False``; most clusters do not), so there is no ``prober_probe_total`` series at all and no ``up`` target for it.
The failed probes are not a fact the digest can show (``probe_failures.*`` is absent; their true count is in
``probe_failures_not_scraped.Readiness.shop/api``); what it can read is the pods' Ready condition, the empty
slice, the UH, the CFS counters and the API's own ``level: error`` record for each timed-out check
("readiness check timed out after 3.0s (SELECT 1)", a few hundred, far under the 50,000 that would cost a point).

Expected: CRITICAL 8/10 (UH: -2; nothing else costs points). The explanation should point at readiness (pods not
ready without restarts), the empty EndpointSlice and the throttling, and say that failed probes are not observed.
"""

from __future__ import annotations

import datetime as dt

from digest.testbed.corpus.readiness_spiral import ReadinessSpiral

# (start of the cascade, how long the last pod stays out beyond the others): five episodes, other sizes than 08-12.
EPISODES_1020 = (
    ("10:24:00", 150),
    ("11:47:00", 420),
    ("13:09:00", 210),
    ("14:36:00", 330),
    ("15:58:00", 270),
)


class SpiralUnscraped(ReadinessSpiral):
    """The UH day whose probes nobody scrapes."""

    date = dt.date(2026, 10, 20)
    name = "spiral-unscraped"
    title = "Readiness spiral without prober metrics: throttled shop/api pods leave the EndpointSlice, Envoy answers UH"
    status = "CRITICAL"
    score = 8
    prober_scraped = False
    episodes = EPISODES_1020
    load_start = "10:00"
    load_end = "16:30"
    load_requests = 95_000

    def day_facts(self) -> dict[str, object]:
        """The spiral's facts, what was not scraped, and the (absent) rollout."""
        w = self.window
        failures = sum(
            1
            for p in self.lab.workload("shop/api")
            for t in p.probe_failures.get(("api", "Readiness"), ())
            if w.in_window(t)
        )
        return {
            **super().day_facts(),
            "prober_scraped": False,
            "probe_failures_not_scraped.Readiness.shop/api": failures,
            **self.rollout_facts("shop/api"),
        }

"""2026-09-08, Recreate rollout (write-up 003): the EndpointSlice empties at each rollout, the prober gets UH.

``shop/status-page`` is a single-replica Deployment with strategy ``Recreate``: the old pod is removed from the
EndpointSlice and killed before the new one exists, so every rollout leaves the Service with no endpoint until the
new pod is ready. Three rollouts in the day, with the slice empty for 15 s (image cached on the node), 101 s
(image pulled) and 58 s. A prober hammering the route from inside the gateway pod (``curl``, the write-up's second
round of measurements) at about 4.8 req/s from a minute before each rollout to a minute after it sent 2,595
requests in the day: the 840 that fell inside the empty windows got ``503`` with ``response_flags: "UH"`` and
``no_healthy_upstream``; the others got 200 from the old or the new pod.

At 30 s scrape resolution the empty windows show as 1, 4 and 2 scrapes with no ``kube_endpointslice_endpoints``
series for ``status-page-…`` (windows start 5, 10 and 20 s before a scrape), and
``kube_deployment_status_replicas_unavailable`` is 1 at exactly those 7 scrapes. The precise durations live in
the facts (``endpoints_empty_windows.shop/status-page``); a digest reading 30 s samples can only bound them.

Expected: CRITICAL 8/10 (UH: -2). The digest must show the UH, that the endpoints were empty, and for how long.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from digest.testbed.corpus.baselines import allocate, flat_profile
from digest.testbed.corpus.gateway_logs import Client, Flow, PathSpec, Route, RouteTraffic
from digest.testbed.corpus.homelab import Homelab, HomelabDay
from digest.testbed.corpus.identity import MIB
from digest.testbed.corpus.objects import Container, Deployment, Pod, Service, deployment_pod, revision_start
from digest.testbed.corpus.pod_logs import LogEvent, LogSource, Template, TemplateGroup

PROBER_REQUESTS = 2_595
PROBER_UH = 840
ROUTE_STATUS = Route("shop", "status-page", "status.example.org", 8080)

# (first second with no endpoint, seconds empty, prober requests inside, before, after, node of the new pod)
ROLLOUTS = (
    ("10:12:25", 15, 72, 292, 293, "pi5-3", "1.4.1"),
    ("14:47:20", 101, 488, 290, 295, "pi5-1", "1.4.2"),
    ("19:23:10", 58, 280, 300, 285, "pi5-2", "1.4.3"),
)
PROBER_RATE = PROBER_UH / sum(r[1] for r in ROLLOUTS)

PROBER = Client(user_agents=("curl/8.9.1",), addresses=("127.0.0.1",), protocol="HTTP/1.1", local=True)
PROBE_PATHS = (PathSpec("GET", "/", 1, bytes_sent=(5_400, 5_600)),)
STATUS_LINES = (Template("checked {0} components, all operational", stream="stdout", level="INFO", ranges=((11, 12),)),)


def status_page_container(version: str) -> Container:
    """Return the status page's container at ``version`` (also used by 2026-10-28)."""
    return Container("status-page", f"ghcr.io/homelab/status-page:{version}", 38 * MIB, memory_limit=128 * MIB)


class RecreateRollout(HomelabDay):
    """The Recreate day."""

    date = dt.date(2026, 9, 8)
    name = "recreate-rollout"
    title = "Recreate rollouts: shop/status-page endpoints empty for 15 s, 101 s and 58 s, 840 of 2,595 probes 503 UH"
    status = "CRITICAL"
    score = 8

    def customise(self, lab: Homelab) -> None:
        """Add the status page: a pod from last week, then one new pod per rollout, each after an empty window."""
        w = self.window
        rev = "2026-09-01"
        previous = deployment_pod(
            "shop", "status-page", rev, 0, "pi5-3", (status_page_container("1.4.0"),), revision_start(rev)
        )
        pods: list[Pod] = []
        for i, (start, empty, _, _, _, node, version) in enumerate(ROLLOUTS, start=1):
            gone = w.at(start)
            pods.append(replace(previous, end_s=gone))
            new = deployment_pod(
                "shop",
                "status-page",
                f"2026-09-08-{version}",
                0,
                node,
                (status_page_container(version),),
                gone + 2,
                slot=i,
            )
            previous = replace(new, ready_from_s=gone + empty)
        pods.append(previous)
        lab.pods.extend(pods)
        lab.services.append(Service("shop", "status-page", "status-page", 8080))
        lab.deployments.append(Deployment("shop", "status-page", 1, strategy="Recreate"))

    def route_traffic(self, lab: Homelab) -> list[RouteTraffic]:
        """Return normal routes plus the prober's requests on the status-page route."""
        w = self.window
        seconds: dict[int, int] = {}
        for start, empty, inside, before, after, _, _ in ROLLOUTS:
            gone = w.at(start)
            pre = round(before / PROBER_RATE)
            post = round(after / PROBER_RATE)
            for a, b, n in (
                (gone - pre, gone, before),
                (gone, gone + empty, inside),
                (gone + empty, gone + empty + post, after),
            ):
                for t, c in zip(range(a, b), allocate(n, [1] * (b - a)), strict=True):
                    if c:
                        seconds[t] = c
        prober = Flow(PROBER, PROBE_PATHS, seconds=seconds, latency_ms=(2, 9))
        status = RouteTraffic(w, ROUTE_STATUS, [prober], lab.membership("shop/status-page", 8080))
        return [*self.normal_routes(lab), status]

    def extra_logs(self, lab: Homelab) -> list[LogSource]:
        """Plan the status page's own lines: a start-up record per pod, then a component check every 5 minutes."""
        return status_page_logs(self, lab)

    def day_facts(self) -> dict[str, object]:
        """Return the rollouts and the strategy behind them."""
        return {"rollouts.shop/status-page": len(ROLLOUTS), "deployment_strategy.shop/status-page": "Recreate"}


def status_page_logs(day: HomelabDay, lab: Homelab) -> list[LogSource]:
    """The status page's lines on ``day``: a start-up record per pod, then a component check every 5 minutes."""
    w = day.window
    out: list[LogSource] = []
    for p in lab.workload("shop/status-page"):
        events = []
        if w.in_window(p.start_s + 1):
            events.append(LogEvent(p.start_s + 1 - w.start_s, 120_000, "listening on :8080", "stdout", "INFO"))
        # The day's own planner: the two status-page days share this function, not a base class.
        groups = [TemplateGroup(STATUS_LINES, day._plan(p, "status-page", 288, flat_profile))]
        out.extend(day._runs(p, "status-page", groups, events))
    return out

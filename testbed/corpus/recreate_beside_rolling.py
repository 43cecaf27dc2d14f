"""2026-10-28, Recreate beside RollingUpdate: two rollouts, one outage, and it is the small one's.

Two Deployments of namespace ``shop`` rolled out a new ReplicaSet the same day:

* ``shop/api`` (4 replicas, strategy RollingUpdate with ``maxUnavailable: 0``, ``maxSurge: 1``) moved to 1.12.1 at
  09:14:00Z. With no unavailability allowed, the controller surges one new pod, waits for it to be ready, removes one
  old pod, and so on: four steps, about 15 s each, five pods at most, never fewer than four ready. The ``api-…``
  EndpointSlice always has ready endpoints, ``kube_deployment_status_replicas_unavailable`` stays 0, and no request
  gets a 5xx. ``kube_deployment_spec_strategy_rollingupdate_max_unavailable`` is 0 and ``…_max_surge`` 1.
* ``shop/status-page`` (1 replica, strategy Recreate) moved to 1.5.0 at 13:27:50Z. Recreate removes the old pod
  before the new ReplicaSet even exists, and the new image had to be pulled: the ``status-page-…`` slice has **no
  endpoint for 88 s** (13:27:50-13:29:18Z, 3 scrapes), ``replicas_unavailable`` is 1 at those 3 scrapes, and
  kube-state-metrics exports no rolling-update parameters for it (it has none). The prober inside the gateway pod
  (``curl`` from 127.0.0.1, ~4.8 req/s from a minute before to a minute after, as in write-up 003) sent 1,000
  requests: the 422 inside the empty window got ``503``/``UH``/``no_healthy_upstream``, the others 200.

Both rollouts bump their Deployment's ``metadata.generation`` by one and create one ReplicaSet
(``kube_replicaset_created`` in the window, ``kube_replicaset_owner`` naming the Deployment); the old ReplicaSets
stay at ``spec.replicas`` 0. The UH is on ``httproute/shop/status-page/rule/0`` only, four hours after the API's
rollout: the digest must attribute it to status-page's Recreate rollout, not to the API's.

Expected: CRITICAL 8/10 (UH: -2). Nothing else costs points (a handful of genuine error lines, no restart).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from digest.testbed.corpus.baselines import allocate
from digest.testbed.corpus.gateway_logs import Flow, RouteTraffic
from digest.testbed.corpus.homelab import Homelab, HomelabDay, api_container
from digest.testbed.corpus.identity import iso
from digest.testbed.corpus.objects import Deployment, Pod, Service, deployment_pod, revision_start
from digest.testbed.corpus.pod_logs import LogEvent, LogSource
from digest.testbed.corpus.recreate_rollout import (
    PROBE_PATHS,
    PROBER,
    ROUTE_STATUS,
    status_page_container,
    status_page_logs,
)
from digest.testbed.corpus.series import first_probe

API_ROLLOUT = "09:14:00"
API_VERSION = "1.12.1"
STATUS_ROLLOUT = "13:27:50"
STATUS_EMPTY_S = 88
STATUS_PREVIOUS = ("2026-10-19", "1.4.4")
STATUS_VERSION = "1.5.0"
# Prober requests: in the minute before the rollout, inside the empty window, in the minute after it.
PROBER_BEFORE, PROBER_INSIDE, PROBER_AFTER = 290, 422, 288
PROBER_AROUND_S = 60


class RecreateBesideRolling(HomelabDay):
    """The day with two strategies side by side."""

    date = dt.date(2026, 10, 28)
    name = "recreate-beside-rolling"
    title = (
        "Recreate beside RollingUpdate: shop/status-page empty for 88 s (422 of 1,000 probes 503 UH), "
        "shop/api rolls out with no unavailability"
    )
    status = "CRITICAL"
    score = 8

    def customise(self, lab: Homelab) -> None:
        """The API's surge-one-at-a-time rollout, and the status page's Recreate rollout."""
        self._rollout_api(lab)
        self._rollout_status_page(lab)

    def _rollout_api(self, lab: Homelab) -> None:
        w = self.window
        lab.deployments[:] = [
            replace(d, max_unavailable=0, max_surge=1) if d.workload_key == "shop/api" else d for d in lab.deployments
        ]
        old = lab.workload("shop/api")
        container = replace(api_container(self.date), image=f"ghcr.io/homelab/shop-api:{API_VERSION}")
        rev = f"2026-10-28-{API_VERSION}"
        start = w.at(API_ROLLOUT) + 1
        self.api_steps: list[dict[str, object]] = []
        for k, gone in enumerate(reversed(old)):
            new = deployment_pod("shop", "api", rev, k, "pi5-1", (container,), start, slot=4 + k)
            ready = first_probe(new, "api")
            lab.pods.append(replace(new, ready_from_s=ready))
            # As the surge pod turns ready, one old pod is deleted (maxUnavailable 0) and the next surge pod created
            # (the ReplicaSet scales up a moment before its pod exists).
            lab.replace_pod(gone, replace(gone, deleted_s=ready, end_s=ready + 2))
            self.api_steps.append(
                {"new_pod": new.name, "created": iso(start), "ready": iso(ready), "old_pod": gone.name}
            )
            start = ready + 1

    def _rollout_status_page(self, lab: Homelab) -> None:
        w = self.window
        rev, version = STATUS_PREVIOUS
        previous = deployment_pod(
            "shop", "status-page", rev, 0, "pi5-3", (status_page_container(version),), revision_start(rev)
        )
        gone = w.at(STATUS_ROLLOUT)
        # Recreate: the old ReplicaSet is scaled to 0, its pod goes; only then is the new ReplicaSet created.
        old = replace(previous, deleted_s=gone, end_s=gone + 2)
        new = deployment_pod(
            "shop",
            "status-page",
            f"2026-10-28-{STATUS_VERSION}",
            0,
            "pi5-1",
            (status_page_container(STATUS_VERSION),),
            gone + 3,
            slot=1,
        )
        lab.pods.extend([old, replace(new, ready_from_s=gone + STATUS_EMPTY_S)])
        lab.services.append(Service("shop", "status-page", "status-page", 8080))
        lab.deployments.append(Deployment("shop", "status-page", 1, strategy="Recreate"))

    def route_traffic(self, lab: Homelab) -> list[RouteTraffic]:
        """Normal routes plus the prober's requests around the status page's rollout."""
        w = self.window
        gone = w.at(STATUS_ROLLOUT)
        back = gone + STATUS_EMPTY_S
        seconds: dict[int, int] = {}
        for a, b, n in (
            (gone - PROBER_AROUND_S, gone, PROBER_BEFORE),
            (gone, back, PROBER_INSIDE),
            (back, back + PROBER_AROUND_S, PROBER_AFTER),
        ):
            for t, c in zip(range(a, b), allocate(n, [1] * (b - a)), strict=True):
                if c:
                    seconds[t] = c
        prober = Flow(PROBER, PROBE_PATHS, seconds=seconds, latency_ms=(2, 9))
        status = RouteTraffic(w, ROUTE_STATUS, [prober], lab.membership("shop/status-page", 8080))
        return [*self.normal_routes(lab), status]

    def extra_logs(self, lab: Homelab) -> list[LogSource]:
        """The status page's start-up record and its component checks every 5 minutes."""
        return status_page_logs(self, lab)

    def pod_events(self, p: Pod, container: str) -> list[LogEvent]:
        """The new API pods log their start-up (info) once they are ready."""
        w = self.window
        if container != "api" or not w.in_window(p.start_s) or p.ready_from_s is None:
            return []
        return [LogEvent(p.ready_from_s - 1 - w.start_s, 310_000, f"shop-api {API_VERSION} ready", "stdout", "info")]

    def day_facts(self) -> dict[str, object]:
        """Both rollouts: strategies, ReplicaSets, the API's steps, and where the UH came from."""
        w = self.window
        gone = w.at(STATUS_ROLLOUT)
        return {
            **self.rollout_facts("shop/api"),
            **self.rollout_facts("shop/status-page"),
            "rollout_steps.shop/api": self.api_steps,
            "rollout_at.shop/api": iso(w.at(API_ROLLOUT)),
            "rollout_at.shop/status-page": iso(gone),
            "uh_caused_by": {
                "cluster": ROUTE_STATUS.cluster,
                "workload": "shop/status-page",
                "strategy": "Recreate",
                "from": iso(gone),
                "seconds": STATUS_EMPTY_S,
            },
        }

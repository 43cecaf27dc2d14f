"""2026-11-12, node NotReady: pi5-2's kubelet hangs for 42 minutes, its Deployment pods are evicted and replaced.

At 03:10:00Z the kubelet (k3s agent) on pi5-2 hung (a stuck containerd CRI call); it came back at 03:52:00Z. The
node itself, its containers and node_exporter kept running. What each source shows, and why:

* kube-state-metrics: pi5-2's ``kube_node_status_condition{condition="Ready"}`` is ``status="unknown"`` (1, and
  ``true`` 0) from 03:10:40Z (node-monitor-grace-period 40 s without a lease renewal) to 03:52:05Z (the kubelet's
  first status update after it came back). At 03:10:40Z the node controller also marked every pod on pi5-2 not
  ready: ``kube_pod_status_ready{condition="false"}`` with no restart.
* cAdvisor and ``/metrics/probes`` are served by the kubelet: no sample from pi5-2 in [03:10:00, 03:52:00)
  (``up{job="kubelet", instance="pi5-2"}`` is 0 for those 84 scrapes); node_exporter on ``pi5-2:9100`` answers
  throughout (conntrack normal).
* Eviction: the unreachable taint's default ``tolerationSeconds: 300`` expired at 03:15:40Z; the two Deployment
  pods on pi5-2 got a deletion timestamp (``kube_pod_deletion_timestamp``; terminating in the EndpointSlice) and
  their ReplicaSets created replacements at once, on pi5-3. A replacement is not a rollout: same ReplicaSet
  (``spec.replicas`` unchanged, no ``kube_replicaset_created`` in the window), ``metadata.generation`` unchanged.
  The evicted pods stay Terminating (their containers still run and log) until the kubelet returns and stops them.
  The DaemonSet pod (``vector``) tolerates the taint and stays, not ready until 03:52:05Z.
* ``feeds/feed-aggregator`` (1 replica, only pod on pi5-2): its Service had no ready endpoint from 03:10:40Z until
  the replacement's first successful readiness probe, 03:15:57Z (317 s, 10 scrapes); Envoy answered the feeds
  route's requests meanwhile (Uptime Kuma's checks and a few users, it is 03:00: 8 requests) with ``503``/``UH``.
  ``shop/web`` (2 replicas, one on pi5-2 since a pod deletion on 2026-11-03) lost capacity, not service: one
  ready endpoint left, ``replicas_unavailable`` 1 for 10 scrapes, no UH.
* No container restarted, no OOM, no CPU limit (no throttling).

Expected: CRITICAL 8/10 (UH: -2). The digest should place the UH on pi5-2's NotReady span, name the evictions
(not rollouts) and the kubelet's metrics gap (explained by the NotReady node, not an exporter failure).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from digest.testbed.corpus.homelab import Homelab, HomelabDay
from digest.testbed.corpus.identity import SCRAPE_S, day_start, iso
from digest.testbed.corpus.objects import Pod, deployment_pod, revision
from digest.testbed.corpus.series import first_probe

NODE = "pi5-2"
HANG = ("03:10:00", "03:52:00")
GRACE_S = 40  # node-monitor-grace-period
TOLERATION_S = 300  # default tolerationSeconds of node.kubernetes.io/unreachable
STATUS_BACK_S = 5  # the kubelet's first node and pod status updates after it returns
STOP_S = {"feeds/feed-aggregator": 8, "shop/web": 6}  # SIGTERM to exit once the kubelet acts on the deletion
REPLACEMENT_NODE = "pi5-3"
# The web pod that ran on pi5-2: recreated there when its predecessor on pi5-3 was deleted on 2026-11-03.
WEB_ON_NODE_SINCE = ("2026-11-03", 16 * 3_600 + 41 * 60 + 7)


class NodeNotReady(HomelabDay):
    """The node-failure day."""

    date = dt.date(2026, 11, 12)
    name = "node-not-ready"
    title = "Node NotReady: pi5-2's kubelet hangs 03:10-03:52, two pods evicted, feeds has no endpoint for 317 s (UH)"
    status = "CRITICAL"
    score = 8

    def customise(self, lab: Homelab) -> None:
        """The kubelet's silence, the node and pod conditions, the evictions and their replacements."""
        w = self.window
        hang = (w.at(HANG[0]), w.at(HANG[1]))
        lost = hang[0] + GRACE_S
        back = hang[1] + STATUS_BACK_S
        evicted_at = lost + TOLERATION_S
        self.kubelet_down[NODE] = (hang,)
        self.node_ready_unknown[NODE] = ((lost, back),)
        self.hang, self.lost, self.back, self.evicted_at = hang, lost, back, evicted_at
        # shop/web's second replica runs on pi5-2 (same ReplicaSet, created on 11-03).
        web_old = next(p for p in lab.workload("shop/web") if p.node == "pi5-3")
        rev_web = revision("shop/web", self.date)
        day, second = WEB_ON_NODE_SINCE
        web_moved = deployment_pod(
            "shop", "web", rev_web, 2, NODE, web_old.containers, day_start(dt.date.fromisoformat(day)) + second, slot=2
        )
        lab.replace_pod(web_old, web_moved)
        self.evictions: list[dict[str, object]] = []
        for p in list(lab.pods):
            if p.node != NODE:
                continue
            if p.kind != "Deployment":
                # The DaemonSet pod tolerates the taint: not ready while the node is lost, never evicted.
                lab.replace_pod(p, replace(p, not_ready=((lost, back),)))
                continue
            gone = hang[1] + STOP_S[p.workload_key]
            lab.replace_pod(p, replace(p, not_ready=((lost, gone),), deleted_s=evicted_at, end_s=gone))
            index = len([q for q in lab.pods if q.workload_key == p.workload_key]) + 1
            new = deployment_pod(
                p.namespace,
                p.workload,
                revision(p.workload_key, self.date),
                index,
                REPLACEMENT_NODE,
                p.containers,
                evicted_at + 1,
                slot=index,
            )
            new = replace(new, ready_from_s=first_probe(new, p.containers[0].name))
            lab.pods.append(new)
            self.evictions.append(
                {
                    "workload": p.workload_key,
                    "pod": p.name,
                    "replicaset": p.replicaset,
                    "node": NODE,
                    "evicted_at": iso(evicted_at),
                    "gone_at": iso(gone),
                    "replacement": new.name,
                    "replacement_node": REPLACEMENT_NODE,
                    "replacement_created": iso(new.start_s),
                    "replacement_ready": iso(int(new.ready_from_s or new.start_s)),
                }
            )

    def day_facts(self) -> dict[str, object]:
        """The node's lost span, the kubelet's silence, the evictions, and that nothing rolled out."""
        w = self.window
        grid = range(w.series_start_s, w.series_end_s + 1, SCRAPE_S)
        a, b = self.hang
        facts: dict[str, object] = {
            f"kubelet_unresponsive.{NODE}": {"from": iso(a), "until": iso(b), "seconds": b - a},
            f"kubelet_down_scrapes.{NODE}": sum(1 for t in grid if a <= t < b),
            f"node_ready_unknown.{NODE}": {
                "from": iso(self.lost),
                "until": iso(self.back),
                "seconds": self.back - self.lost,
                "scrapes": sum(1 for t in grid if self.lost <= t < self.back),
            },
            "evictions": self.evictions,
            "replicasets_created": 0,
        }
        for key in ("feeds/feed-aggregator", "shop/web"):
            facts.update(self.rollout_facts(key))
        return facts

    def pods_on_node(self) -> list[Pod]:
        """Every pod that ran on pi5-2 in the day (for tests)."""
        return [p for p in self.lab.pods if p.node == NODE]

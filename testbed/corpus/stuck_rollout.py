"""2026-11-05, stuck RollingUpdate: shop/api's new ReplicaSet crash-loops, the rollout never finishes.

At 14:02:00Z ``shop/api`` (4 replicas, strategy RollingUpdate with the defaults 25 % / 25 %, which
kube-state-metrics resolves to ``max_unavailable`` 1 (rounded down) and ``max_surge`` 1 (rounded up); the chart
refactor of 2026-11-02 dropped 10-28's explicit ``maxUnavailable: 0``) got a new ReplicaSet for 1.13.0, whose
config no longer read ``DATABASE_URL``. The controller did what the strategy allows in one go: the new ReplicaSet
went to 2 (4 + 1 surge - 3 old), one old pod was deleted at once (4 - 1 unavailable) and nothing more happened for
the rest of the day, since no new pod ever became available:

* both new pods crash on start-up (``Error``, exit code 1, after ~2 s), and the kubelet restarts them with
  CrashLoopBackOff delays of 10, 20, 40, 80, 160 s, then every 300 s: each pod restarts about 120 times before
  midnight. Each crash writes three records: ``{"level":"info","message":"starting shop-api 1.13.0"}``,
  ``{"level":"error","message":"config: missing required config key DATABASE_URL"}`` and uvicorn's plain
  ``ERROR:    Application startup failed. Exiting.`` on stderr (two error lines per crash, a few hundred in all);
* the new pods are never ready (the container never lives to its first probe, so the kubelet ran none: no
  ``prober_probe_total`` for them), listed not ready in the ``api-…`` EndpointSlice;
* ``kube_deployment_status_replicas_unavailable`` is 1 from 14:02:00 to midnight (the deleted old pod's slot);
  the old ReplicaSet is at ``spec.replicas`` 3 with 3 ready, the new one at 2 with 0 ready;
  ``metadata.generation`` +1 at 14:02:00 (observed at once: the controller saw it, the rollout is what is stuck);
* the three remaining old pods keep serving: the Service always has ready endpoints, no UH, no 5xx.

Not a readiness spiral (no CPU limit, no throttling) and not an outage. By the project's rules (seed rule: error
lines, OOM kills, conntrack, Envoy flags cost points; the restarts and rollouts checks are diagnostic and cost 0 by
default) nothing costs a point: the error lines are far under 50,000, no OOM, no flag.

Expected: OK 10/10, with the diagnostics saying why it is not a quiet day: restarts of ``shop/api`` (reason Error,
exit 1, the crash loop) and a rollout stuck with one replica unavailable for ~10 hours.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from digest.testbed.corpus.homelab import Homelab, HomelabDay, api_container
from digest.testbed.corpus.identity import iso
from digest.testbed.corpus.objects import Pod, Termination, deployment_pod
from digest.testbed.corpus.pod_logs import LogEvent, LogSource

ROLLOUT = "14:02:00"
VERSION = "1.13.0"
RUN_S = 2  # import, config check, exit
BACKOFF_CAP_S = 300
NEVER_S = 86_400  # not ready until well after the series end
# (node, IP slot, image pull seconds) of the two new pods.
NEW_PODS = (("pi5-1", 4, 6), ("pi5-3", 5, 9))
CRASH_RECORDS = (
    (0, 120_000, f"starting shop-api {VERSION}", "stdout", "info"),
    (1, 410_000, "config: missing required config key DATABASE_URL", "stdout", "error"),
    (1, 460_000, "ERROR:    Application startup failed. Exiting.", "stderr", None),
)


def backoff(n: int) -> int:
    """The kubelet's CrashLoopBackOff delay after the ``n``-th crash (1-based): 10 s doubling, capped at 300 s."""
    return min(10 * (1 << (n - 1)), BACKOFF_CAP_S)


class StuckRollout(HomelabDay):
    """The crash-looping rollout day."""

    date = dt.date(2026, 11, 5)
    name = "stuck-rollout"
    title = "Stuck rollout: shop/api's new ReplicaSet crash-loops from 14:02, one replica unavailable until midnight"
    status = "OK"
    score = 10

    def customise(self, lab: Homelab) -> None:
        """One old pod deleted, two new pods that crash on every start until after the series end."""
        w = self.window
        t0 = w.at(ROLLOUT)
        old = lab.workload("shop/api")
        gone = old[-1]
        lab.replace_pod(gone, replace(gone, deleted_s=t0, end_s=t0 + 2))
        self.deleted_pod = gone.name
        # The container never outlives initialDelaySeconds: the kubelet never probes it.
        container = replace(api_container(self.date), image=f"ghcr.io/homelab/shop-api:{VERSION}", probes=())
        self.crash_pods: list[Pod] = []
        self.runs: dict[str, list[tuple[int, int]]] = {}
        for k, (node, slot, pull) in enumerate(NEW_PODS):
            pod = deployment_pod("shop", "api", f"2026-11-05-{VERSION}", k, node, (container,), t0 + 1, slot=slot)
            begin = pod.start_s + pull
            terms: list[Termination] = []
            runs: list[tuple[int, int]] = []
            while begin < w.series_end_s + BACKOFF_CAP_S:
                finished = begin + RUN_S
                runs.append((begin, finished))
                restart = finished + backoff(len(terms) + 1)
                terms.append(Termination("api", finished, "Error", 1, restart))
                begin = restart
            listed = pod.start_s + 2  # the sandbox has its IP: the slice lists the pod, not ready
            pod = replace(
                pod, terminations=tuple(terms), ready_from_s=listed, not_ready=((listed, w.series_end_s + NEVER_S),)
            )
            lab.pods.append(pod)
            self.crash_pods.append(pod)
            self.runs[pod.name] = runs

    def writes_normal_logs(self, p: Pod) -> bool:
        """The crash-looping pods never serve: they write only their crash records."""
        return p.name not in self.runs

    def extra_logs(self, lab: Homelab) -> list[LogSource]:
        """Three records per crash, in the log file of that run (``<restart>.log``)."""
        del lab
        w = self.window
        out: list[LogSource] = []
        for p in self.crash_pods:
            events = [
                LogEvent(begin + offset - w.start_s, us, message, stream, level)
                for begin, _ in self.runs[p.name]
                if w.in_window(begin) and w.in_window(begin + RUN_S - 1)
                for offset, us, message, stream, level in CRASH_RECORDS
            ]
            out.extend(self._runs(p, "api", [], events))
        return out

    def day_facts(self) -> dict[str, object]:
        """The stuck rollout: ReplicaSets, the deleted old pod, the crash loop and its back-off."""
        w = self.window
        crashes = {p.name: sum(1 for x in p.terminations if w.in_window(x.finished_s)) for p in self.crash_pods}
        first = min(x.finished_s for p in self.crash_pods for x in p.terminations)
        dep = self.deployment("shop/api")
        old_rs, new_rs = (r for r in self.replicasets(dep) if r.pods)
        return {
            **self.rollout_facts("shop/api"),
            "rollout_at.shop/api": iso(w.at(ROLLOUT)),
            "rollout_stuck.shop/api": True,
            "replicaset_previous.shop/api": old_rs.name,
            "replicaset_spec.shop/api": {old_rs.name: old_rs.spec(w.end_s), new_rs.name: new_rs.spec(w.end_s)},
            "replicaset_ready.shop/api": {old_rs.name: old_rs.ready(w.end_s), new_rs.name: new_rs.ready(w.end_s)},
            "old_pod_deleted.shop/api": {"pod": self.deleted_pod, "at": iso(w.at(ROLLOUT))},
            "crashloop_pods.shop/api": sorted(crashes),
            "crashloop_restarts.shop/api": crashes,
            "crashloop_reason": "Error",
            "crashloop_exit_code": 1,
            "crashloop_first_crash": iso(first),
            "crashloop_backoff_seconds": [backoff(n) for n in range(1, 8)],
            "crashloop_error_message": CRASH_RECORDS[1][2],
        }

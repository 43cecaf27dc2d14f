"""oom_kills: containers killed by the kernel's OOM killer in the window.

Signal: kube-state-metrics restarts whose *fresh* last-terminated reason is ``OOMKilled`` (queries.md §1.2 B), so a
later restart for another reason (07-20: the 17:03 liveness kill after the 06:15 OOM) is not counted as an OOM even
though the old ``reason="OOMKilled"`` series lingers without a staleness marker. Portable PromQL (no MetricsQL-only
function), evaluated at the window end with the window's length as range::

    sum by (namespace, pod, container) (sum_over_time((
        max by (namespace, pod, container) (
          clamp_min(restarts_total - (restarts_total offset 1m or min_over_time(restarts_total[1m])), 0))
        * on (namespace, pod, container) group_left()
        (max by (namespace, pod, container) (timestamp(last_terminated_reason{reason="OOMKilled"}))
           >= bool on (namespace, pod, container) max by (namespace, pod, container) (timestamp(restarts_total)))
    )[<window, open on the left>:1m]))

Every side of a join is reduced to one series per container (``max by``): an HA pair of scrapers writing every
series twice (told apart by ``replica``, ``prometheus_replica`` or any other label), or two kube-state-metrics
instances overlapping after a move, would otherwise make the join many-to-many (which the backend refuses) or
double the count. Reducing by the container's identity, rather than dropping a configured list of replica labels,
works whatever the pair's label is called.

The kill time comes from ``kube_pod_container_status_last_terminated_timestamp`` (kube-state-metrics ≥ 2.12) under
the same freshness check. ``node_vmstat_oom_kill`` (node_exporter) is the cross-check: the kernel counts every OOM
kill on the node, including child processes that did not terminate the container — those are reported too. It is
read with `checks.promql.counted_rise`: a series' first value (every kill since boot, when a node-exporter rollout
relabels the series or monitoring starts mid-day) is history, not a kill of the window, on every backend.

A container killed **without a restart** (a Job's under ``restartPolicy: Never``: killed once, its pod Failed) never
moves the restart counter nor the last-terminated reason. Its *current* state says it:
``kube_pod_container_status_terminated_reason{reason="OOMKilled"}``, asked first as one cheap rollup over the window;
for the few containers it names, the kill is the window's when the pod was seen (``kube_pod_info``) before that state
appeared or was created in the window (``kube_pod_created``) — a failed Job's pod stays listed for days, and a fresh
install of kube-state-metrics sees old kills as new series. kube-state-metrics keeps no time for such a kill: the
first scrape that showed it stands in, said "by 14:01". A container that restarted after the kill may show both: it
counts once. The pod's controller (``created_by_kind``, ``created_by_name``) names it: "(Job nightly-report-…, not
restarted)".

The kernel counter is also a *source* of this check's coverage (`checks.coverage.kernel_oom_counter`), per node, on
the nodes that export it: a node whose counter stopped at 10:00 while node_exporter answered is named unseen from
10:00 (a child process killed there would go uncounted), and a counter missing 10:00–16:00 that comes back one
higher counts that kill (`counted_rise` looks back as far as the window is long).

Threshold (the seed's rule): any OOM kill in the window costs one point; together with error lines at most two
(the cap lives in the policy, not here). Without kube-state-metrics (no ``up`` series for its job, or ``up`` never 1)
the check is UNKNOWN: no OOMKilled series means "healthy" only when the exporter was there to emit it.

Cost: the ``kills`` subquery steps through the window minute by minute, so it is asked only about the containers whose
restart counter changed (`checks.restarted`); no restart in the window, no subquery.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from . import coverage
from .contract import (
    Finding,
    Input,
    Look,
    Need,
    Offender,
    Sample,
    SourceError,
    Sources,
    Status,
    Window,
    fmt_int,
    local_time,
    unknown,
)
from .nodes import NODE_NAMES_INPUT, NodeNames, node_names
from .presence import family_missing, kube_state_metrics_missing, kube_state_metrics_up_query
from .promql import (
    CONTAINER_LABELS,
    ContainerKey,
    any_of,
    container_key,
    container_matchers,
    counted_rise,
    entity_matchers,
    open_range,
    restart_steps,
    step_read,
    with_matchers,
)
from .restarted import RESTARTS_TOTAL, narrowing, restarted_containers, restarted_query

NAME = "oom_kills"

# What this check reads, for `digest doctor` (the queries above are what it sends).
INPUTS: tuple[Input, ...] = (
    Input("series", "up", "kube-state-metrics scraped", policy_key="oom_kills.ksm_job", by_job=True),
    Input("series", "kube_pod_container_status_restarts_total", "restarts", fix="kube-state-metrics' pod metrics"),
    Input(
        "series",
        "kube_pod_container_status_last_terminated_reason",
        "the OOMKilled reason, once one restarted",
        required=False,
        fix="kube-state-metrics' pod metrics",
    ),
    Input(
        "series",
        "kube_pod_container_status_last_terminated_timestamp",
        "when it was killed",
        required=False,
        fix="kube-state-metrics 2.12 or later",
    ),
    Input(
        "series",
        "kube_pod_container_status_terminated_reason",
        "an OOM kill without a restart (a Job's, restartPolicy Never)",
        required=False,
        fix="kube-state-metrics' pod metrics",
    ),
    Input(
        "series",
        "kube_pod_info",
        "when a killed pod was first seen, and its controller (Job, StatefulSet…)",
        required=False,
        fix="kube-state-metrics' pod metrics",
    ),
    Input(
        "series",
        "kube_pod_created",
        "whether a killed pod was created in the window",
        required=False,
        fix="kube-state-metrics' pod metrics",
    ),
    Input(
        "series",
        "node_vmstat_oom_kill",
        "the kernel's cross-check",
        required=False,
        policy_key="oom_kills.node_exporter_job",
        by_job=True,
        fix="node_exporter's vmstat collector",
    ),
    NODE_NAMES_INPUT,
)
# What a reader graphs: on a day with kills, when each container's last termination became an OOM kill; on a day
# without, each node's kernel counter, flat where nothing was killed (the containers' reasons would show old kills).
_OOM_REASON = 'kube_pod_container_status_last_terminated_reason{reason="OOMKilled"}'
_TERMINATED_OOM = 'kube_pod_container_status_terminated_reason{reason="OOMKilled"}'
_LOOK = Look(metrics=f"max by (namespace, pod, container) ({_OOM_REASON})")
_QUIET_LOOK = Look(metrics="max by (instance) (node_vmstat_oom_kill)")


def _oom_reason(labels: Mapping[str, str]) -> str:
    matchers = entity_matchers(labels, CONTAINER_LABELS)
    return f"max by (namespace, pod, container) ({with_matchers(_OOM_REASON, matchers)})"


@dataclass(frozen=True)
class OomKillsPolicy:
    """Which job is kube-state-metrics and what an OOM kill costs."""

    enabled: bool = True
    penalty: int = 1
    ksm_job: str = ".*kube-state-metrics.*"
    node_exporter_job: str = ".*node.*exporter.*"
    top: int = 5


@dataclass(frozen=True)
class OomKillsCheck:
    """Counts OOM kills per container with the freshness-checked join, cross-checked with the node's kernel."""

    policy: OomKillsPolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        # The kernel's counter on the nodes that export it: a node whose counter stopped is a hole in the count of
        # kills kube-state-metrics cannot see (a child process killed), named rather than read as "no kill".
        return (
            coverage.kube_state_metrics(self.policy.ksm_job),
            coverage.kernel_oom_counter(self.policy.node_exporter_job),
        )

    def queries(self, window: Window, matchers: str | None = None) -> dict[str, str]:
        """The PromQL this check sends, by purpose; ``matchers`` narrow the per-minute subqueries (`restarted`)."""
        steps = open_range(window.seconds)  # (start, end]: not the previous day's last minute
        restarts = with_matchers(RESTARTS_TOTAL, matchers or "")
        oom_reason = with_matchers(
            'kube_pod_container_status_last_terminated_reason{reason="OOMKilled"}', matchers or ""
        )
        terminated_at = with_matchers("kube_pod_container_status_last_terminated_timestamp", matchers or "")
        # `max by` the container on every side of a join: an HA pair of scrapers (every series twice, told apart by
        # `replica`, `prometheus_replica` or any other label) or two kube-state-metrics instances side by side must
        # neither make a join many-to-many (the backend refuses it) nor double a count.
        by = "max by (namespace, pod, container)"
        fresh_oom = (
            f"{by} (timestamp({oom_reason})) >= bool on (namespace, pod, container) {by} (timestamp({restarts}))"
        )
        fresh_oom_filter = (
            f"{by} (timestamp({oom_reason})) >= on (namespace, pod, container) {by} (timestamp({terminated_at}))"
        )
        node_job = self.policy.node_exporter_job.replace('"', "")
        node_oom_kills = f'node_vmstat_oom_kill{{job=~"{node_job}"}}'
        return {
            "ksm_up": kube_state_metrics_up_query(self.policy.ksm_job, window),
            "restarted": restarted_query(window),
            "kills": (
                "sum by (namespace, pod, container) (sum_over_time(("
                f"{restart_steps(restarts)} * on (namespace, pod, container) group_left() "
                f"({fresh_oom}))[{steps}:1m]))"
            ),
            "kill_times": (
                "max by (namespace, pod, container) (max_over_time(("
                f"{by} ({terminated_at}) and on (namespace, pod, container) ({fresh_oom_filter}))[{steps}:1m]))"
            ),
            # Containers whose *current* state was terminated by an OOM kill at some point of the window: a Job's
            # container under restartPolicy Never is killed once and never restarts, so the restart counter and
            # the last-terminated reason never move.
            "terminated": f"{by} (max_over_time({_TERMINATED_OOM}[{window.promql_range()}]))",
            "node_kills": f"sum by (instance) ({counted_rise(node_oom_kills, window.seconds)})",
            # The nodes whose node_exporter answered but carried no kernel OOM counter: the cross-check is blind there.
            "kernel_blind": (
                f'group by (instance) (max_over_time(up{{job=~"{node_job}"}}[{window.promql_range()}]) >= 1) '
                f"unless on (instance) group by (instance) (count_over_time({node_oom_kills}[{window.promql_range()}]))"
            ),
        }

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        queries = self.queries(window)
        missing = await kube_state_metrics_missing(sources, window, NAME, "OOM kills", self.policy.ksm_job)
        if missing is not None:
            return missing
        at = window.end
        try:
            containers = await restarted_containers(sources, window)
            kills, kill_times = await self._kills(sources, window, containers)
            terminated = await self._terminated(sources, window, queries["terminated"])
        except SourceError as exc:
            return unknown(NAME, "OOM kills not checked: the metrics backend did not answer", str(exc))
        kills, kill_times = _merged(kills, kill_times, terminated)
        if not containers and not terminated:
            absent = await family_missing(sources, window, NAME, "OOM kills", RESTARTS_TOTAL)
            if absent is not None:
                return absent
        node_error: str | None = None
        named = NodeNames()
        blind: Sequence[Sample] = ()
        try:
            node_kills: Sequence[Sample]
            node_kills, blind = await asyncio.gather(
                sources.metrics.instant(queries["node_kills"], at),
                sources.metrics.instant(queries["kernel_blind"], at),
            )
        except SourceError as exc:
            node_kills, node_error = (), str(exc)
        if blind or any(round(sample.value) > 0 for sample in node_kills):
            named = await node_names(sources, window)  # only a node that is named: only then asked
        finding = self._finding(window, kills, kill_times, node_kills, node_error, named)
        if blind and node_kills:
            # Per node: a node without the counter is a hole in the cross-check, said rather than read as no kill.
            nodes = ", ".join(sorted(named(sample.labels.get("instance", "?")) for sample in blind))
            return replace(
                finding, evidence=(*finding.evidence, f"kernel cross-check blind on {nodes}: no node_vmstat_oom_kill")
            )
        return finding

    async def _kills(
        self, sources: Sources, window: Window, containers: Sequence[ContainerKey]
    ) -> tuple[list[Sample], list[Sample]]:
        """OOM kills and kill times per container, asked only about the containers whose restart counter changed.

        A kill in the window is a restart in the window, so a container outside the gate has neither.
        """
        if not containers:
            return [], []
        narrowed = self.queries(window, narrowing(containers))
        kills, kill_times = await asyncio.gather(
            sources.metrics.instant(narrowed["kills"], window.end),
            sources.metrics.instant(narrowed["kill_times"], window.end),
        )
        return kills, kill_times

    async def _terminated(self, sources: Sources, window: Window, query: str) -> list[Terminated]:
        """Containers OOM-killed in the window that did not restart (a Job's under restartPolicy Never).

        kube-state-metrics shows such a container's current state as terminated, reason OOMKilled, for as long as
        its pod object stays (a failed Job's pod stays until its TTL): the kill is the window's only if the pod was
        seen before that state appeared, or was created in the window. A pod already terminated when the window (or
        a fresh install of kube-state-metrics) began is history, not a kill of the day.
        """
        found = await sources.metrics.instant(query, window.end)
        keys = sorted({container_key(sample.labels) for sample in found if sample.value >= 1})
        if not keys:
            return []
        matchers = container_matchers(keys)
        pods = f'namespace=~"{any_of(key[0] for key in keys)}", pod=~"{any_of(key[1] for key in keys)}"'
        steps = open_range(window.seconds)
        by_pod = "max by (namespace, pod)"
        oom_now = with_matchers(_TERMINATED_OOM, matchers)
        info = with_matchers("kube_pod_info", pods)
        first_oom, first_seen, created, kinds = await asyncio.gather(
            # The first scrape that showed it killed: the sample's own timestamp, within a scrape of the kill.
            sources.metrics.instant(
                f"min by (namespace, pod, container) (min_over_time(timestamp({oom_now})[{steps}:1m]))", window.end
            ),
            sources.metrics.instant(
                f"min_over_time(({by_pod} ({step_read(info, 60)}) * 0 + time())[{steps}:1m])", window.end
            ),
            sources.metrics.instant(
                f"{by_pod} (last_over_time({with_matchers('kube_pod_created', pods)}[{window.promql_range()}]))",
                window.end,
            ),
            sources.metrics.instant(
                f"max by (namespace, pod, created_by_kind, created_by_name) "
                f"(last_over_time({info}[{window.promql_range()}]))",
                window.end,
            ),
        )
        seen_from = {(one.labels.get("namespace", ""), one.labels.get("pod", "")): one.value for one in first_seen}
        born = {(one.labels.get("namespace", ""), one.labels.get("pod", "")): one.value for one in created}
        owner = {
            (one.labels.get("namespace", ""), one.labels.get("pod", "")): (
                one.labels.get("created_by_kind", ""),
                one.labels.get("created_by_name", ""),
            )
            for one in kinds
        }
        start = window.start.timestamp()
        out: list[Terminated] = []
        for one in first_oom:
            key = container_key(one.labels)
            pod = key[:2]
            # Seen running (or pending) for at least a step before it was seen killed, or created in the window.
            before = seen_from.get(pod)
            if (before is not None and one.value > before) or born.get(pod, 0.0) >= start:
                kind, name = owner.get(pod, ("", ""))
                out.append(Terminated(key=key, at=one.value, kind=kind, owner=name))
        return out

    def _finding(
        self,
        window: Window,
        kills: Sequence[Sample],
        kill_times: Sequence[Sample],
        node_kills: Sequence[Sample],
        node_error: str | None,
        named: NodeNames,
    ) -> Finding:
        start = window.start.timestamp()
        times = {container_key(sample.labels): sample.value for sample in kill_times if sample.value >= start}
        # A kill without a restart has no termination time in kube-state-metrics: the first scrape that showed it,
        # said as "by" that time rather than "at".
        first_seen = {container_key(sample.labels) for sample in kill_times if sample.labels.get("first_seen")}
        counted = sorted(
            ((round(sample.value), container_key(sample.labels)) for sample in kills),
            reverse=True,
        )
        counted = [(count, key) for count, key in counted if count > 0]
        # The owner of a container killed without a restart (a Job's): named, since its pod's name says little.
        owned = {container_key(sample.labels): _owned(sample.labels) for sample in kills if sample.labels.get("kind")}
        container_kills = sum(count for count, _ in counted)
        kernel_kills = sum(round(sample.value) for sample in node_kills)
        offenders: list[Offender] = []
        evidence: list[str] = []
        for count, key in counted[: self.policy.top]:
            labels = dict(zip(CONTAINER_LABELS, key, strict=True))
            when = times.get(key)
            if when is not None:
                labels["time"] = local_time(when, window)
                if key in first_seen:
                    labels["time_is"] = "first seen"
            if key in owned:
                labels["owned_by"] = owned[key]
            offenders.append(Offender(labels=labels, value=count, look=Look(metrics=_oom_reason(labels))))
        # The summary names the first container; the evidence lines name the others.
        for offender in offenders[1:]:
            word = "by" if offender.labels.get("time_is") else "at"
            at = f" {word} {offender.labels['time']}" if "time" in offender.labels else ""
            kills_word = "OOM kill" if offender.value == 1 else f"{fmt_int(offender.value)} OOM kills"
            whose = f" ({offender.labels['owned_by']}, not restarted)" if "owned_by" in offender.labels else ""
            evidence.append(
                f"then {offender.labels['namespace']}/{offender.labels['pod']}/{offender.labels['container']}: "
                f"{kills_word}{at}{whose}"
            )

        nodes = ", ".join(
            f"{named(sample.labels.get('instance', '?'))} +{fmt_int(sample.value)}"
            for sample in sorted(node_kills, key=lambda sample: -sample.value)
            if round(sample.value) > 0
        )
        unattributed = max(0, kernel_kills - container_kills)
        if node_kills and nodes:
            evidence.append(f"the kernel's count by node (node_vmstat_oom_kill): {nodes}")
        if unattributed:
            evidence.append(
                f"{fmt_int(unattributed)} kernel OOM kill(s) not seen as a container termination "
                "(a child process was killed, or the pod was deleted before the next scrape)"
            )
        if node_error:
            evidence.append(f"node cross-check unavailable: {node_error}")

        total = max(container_kills, kernel_kills)
        if total == 0:
            summary = "no OOM kill"
            if not node_kills and not node_error:
                summary += " (node_vmstat_oom_kill absent: kernel cross-check not possible)"
            return Finding(
                name=NAME, status=Status.OK, penalty=0, value=0, summary=summary, evidence=evidence, look=_QUIET_LOOK
            )

        if counted:
            count, key = counted[0]
            word = "by" if key in first_seen else "at"
            at = f" {word} {local_time(times[key], window)}" if key in times else ""
            times_word = "" if count == 1 else f" {fmt_int(count)} times"
            more = f" ({fmt_int(container_kills)} container kills in all)" if container_kills > count else ""
            whose = f" ({owned[key]}, not restarted)" if key in owned else ""
            summary = f"{key[0]}/{key[1]}/{key[2]} OOM-killed{times_word}{at}{whose}{more}"
        else:
            # "seen": a container terminated by it may be one kube-state-metrics did not see (a pod deleted between
            # two scrapes, a shard down), so the sentence claims only what was seen.
            summary = f"{fmt_int(kernel_kills)} kernel OOM kill(s) on {nodes}, no container termination seen for it"
        return Finding(
            name=NAME,
            status=Status.WARN,
            penalty=self.policy.penalty,
            value=total,
            summary=summary,
            offenders=offenders,
            hint="Compare the container's working set with its memory limit before the kill; a limit raise buys "
            "time, a bound on the growth (queue, retries, cache) fixes it.",
            evidence=evidence,
            look=_LOOK,
        )


@dataclass(frozen=True)
class Terminated:
    """A container OOM-killed in the window that did not restart: when it was first seen so, and its pod's owner."""

    key: ContainerKey
    at: float  # the first minute kube-state-metrics showed it terminated by the OOM killer (unix seconds)
    kind: str  # the pod's controller kind (Job, StatefulSet…), "" for a bare pod
    owner: str


def _merged(
    kills: Sequence[Sample], kill_times: Sequence[Sample], terminated: Sequence[Terminated]
) -> tuple[list[Sample], list[Sample]]:
    """The restart-counted kills and times with the terminated ones added, one count per container (the larger).

    A container that restarts after an OOM kill may show the terminated state for a scrape before its restart: it is
    the same kill, so a container's count is the larger of the two, never their sum.
    """
    counts = {container_key(sample.labels): sample for sample in kills}
    times = {container_key(sample.labels): sample for sample in kill_times}
    for one in terminated:
        labels = dict(zip(CONTAINER_LABELS, one.key, strict=True))
        if one.kind:
            labels["kind"], labels["owner"] = one.kind, one.owner
        if one.key not in counts or counts[one.key].value < 1:
            counts[one.key] = Sample(labels=labels, value=1.0)
        else:
            counts[one.key] = Sample(labels={**counts[one.key].labels, **labels}, value=counts[one.key].value)
        times.setdefault(one.key, Sample(labels={**labels, "first_seen": "true"}, value=one.at))
    return list(counts.values()), list(times.values())


def _owned(labels: Mapping[str, str]) -> str:
    """``Job nightly-report`` (a CronJob's run: its Job), from the pod's controller kind and name."""
    return f"{labels['kind']} {labels.get('owner', '')}".strip()

"""Coverage: how much of the window, and of the fleet, each check actually saw — one model for every check.

Monitoring rarely fails all at once. An exporter crashes at 01:00, one node's node_exporter is gone, the log
shipper on one node is stuck: the checks' own queries then answer with whatever the rest of the cluster said, and a
quiet answer reads as a healthy one. So every check declares the sources it depends on (`Need`), and this module
measures, server-side and with a constant number of queries per digest (not per node or pod), when and where each
of them held data:

* **time** — the window is cut into buckets (`Grid`: 10 minutes for a day, at least 5 minutes, at most ~160
  buckets). Metrics: one range query per source, ``count by (<node label>) (count_over_time(<key series>[<bucket>]))``
  (``max by (instance) (max_over_time(up{job=~…}[<bucket>]))`` for a scraped target such as kube-state-metrics:
  seen only when every one of its targets was up). Logs: one stats query per source,
  ``<filter> | stats by (_time:<bucket>, <node field>) count()``.
  The fleet: one range query (nodes, their pods, node_exporter's targets, drained and not ready, each marked by a
  ``why`` label) and one instant query (the nodes known before the window).
* **fleet** — the nodes that existed in the window: ``kube_node_info`` (and its ``internal_ip``, to map
  node_exporter targets named by IP), the nodes that ran pods (``kube_pod_info{node}``), node_exporter's targets
  (``up``, even at 0), every node a per-node source named, and the nodes kube-state-metrics or node_exporter knew
  in the previous days (a node silent everywhere today is a blind spot, unless kube-state-metrics answered today
  without it: then it was deleted). ``kube_node_spec_unschedulable`` and
  ``kube_node_status_condition{condition="Ready"}`` excuse a drained or NotReady node; the policy may declare nodes
  expected to be absent. A node that ran pods and not one DaemonSet's pod while other nodes ran some
  (``kube_pod_info{created_by_kind="DaemonSet"}``) is virtual (Fargate, virtual-kubelet): no exporter or log shipper
  runs there, so a per-node source never heard from it is not a gap there ("runs no DaemonSet").

Optional sources (Envoy's access log, Istio's metrics: a cluster may have either) count only when they held data in
the window — their silence then is a gap like any other. A source with no data in the window nor in the
``deployed_days`` (30) before it was never deployed. If it is a component a cluster may simply lack (`Need.may_lack`:
the access log, Istio's metrics, a rule evaluator) and every source of a check is such, the check is *not watched*
(`unwatched`): no grade, no UNKNOWN, one quiet line — a cluster with ingress-nginx and no Envoy is not blind every
day. What every cluster has (kube-state-metrics, node_exporter, pod logs) is `Coverage.never_seen` instead: its check
says "never seen" and cannot be OK. A source seen before and missing today is a gap (or, for an optional one, its
check is UNKNOWN). The look-back is one instant query for a metric; for a log source a count of its lines, the day
before first, then slices of 30 days back (Loki refuses longer queries by default), stopping at the first that holds
one.

A per-node input that some nodes never export (the kernel's OOM counter: an old kernel, a collector turned off) is
expected only on the nodes that had it in the window or the ``history_days`` before (`Need.own_nodes`): a node whose
series stopped at 10:00 while the fleet's went on is a gap named by node and span, a node that never had it is not.

A log store read whole beside metrics scoped to one cluster (``Sources.logs_unscoped``: a shared store, no logs
selector) may hold other clusters' lines: the fleet is then the metrics' alone, a node heard only in the logs is
another cluster's (`Report.foreign_nodes`), never judged or named as this one's blind spot.

An ``up`` source is measured per target (``max by (instance)``): a
kube-state-metrics shard down or gone is a gap named by its instance, a target replaced by another is not.

From those buckets each check gets a `Coverage`: the fraction of the window in which all its sources held data, the
unseen parts (`Gap`: hours nothing answered, a target, a node's exporter, a node's logs) and whether it is
*partial*. The rule (`apply`): a check is partial when it saw less than ``window_fraction`` (95 %) of the window, when
one of its sources fell silent for the window's last ``node_gap_minutes`` (30) or more, or when more than
``node_tolerance`` (0) nodes went unseen for ``node_gap_minutes`` (30; ``shipper_silence_minutes`` for logs, since a
quiet node may legitimately log nothing for a few minutes). What a partial check found still counts —
a flood seen for five hours still costs its points — but a clean result on partial data is UNKNOWN, never OK.

The thresholds: 95 % leaves a day ~70 minutes of scattered scrape gaps before a check stops vouching for it; 30
minutes is longer than an exporter's rolling restart or a node reboot (which leave one or two 10-minute buckets
thin, not empty) and shorter than any outage worth naming. A silence that runs to the window's end is judged apart
from the 95 %: scattered gaps ended (the data came back), a tail did not — an exporter dead since 23:00, or today
asked at 23:00 before it is over, is partial even though it saw 96 % of the day; an ingestion lag under 30 minutes
is not. It is said as "data until HH:MM".
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from .contract import (
    Backend,
    Coverage,
    Finding,
    Gap,
    GapKind,
    Need,
    NodeLacks,
    RangeSeries,
    Sightings,
    SourceError,
    Sources,
    Status,
    Unwatched,
    Window,
    local_time,
    node_name,
)
from .log_questions import EVERY_LINE, Filter, LineCount

# node_exporter's job as the coverage policy names it by default (``node_exporter_job``).
NODE_EXPORTER_JOB = ".*node.*exporter.*"
# At most this many buckets per window: a day is cut in 10-minute buckets (144).
_MAX_BUCKETS = 160
_STEPS = (300, 600, 900, 1200, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
# The least value a count can have and still be above zero: "at least this" is "above 0".
_ABOVE_ZERO = math.nextafter(0.0, 1.0)


@dataclass(frozen=True)
class CoveragePolicy:
    """The coverage rule's thresholds and where a node's name is found in each source."""

    enabled: bool = True
    window_fraction: float = 0.95
    node_tolerance: int = 0
    node_gap_minutes: int = 30
    shipper_silence_minutes: int = 30
    # A log silence is a stuck shipper only if the source, at its quiet rate, would have written this many lines.
    silence_lines: int = 50
    # Nodes that may be silent without being a blind spot (a node powered off on purpose); named "expected absent".
    absent_nodes: tuple[str, ...] = ()
    history_days: int = 7
    # A source with no data in the window nor in this many days before it was never deployed: its check says so,
    # and the day is not counted as unseen for it (a cluster without a rule evaluator is not blind every day).
    deployed_days: int = 30
    node_exporter_job: str = NODE_EXPORTER_JOB
    node_exporter_node_label: str = "instance"
    cadvisor_node_label: str = "instance"

    def validate(self) -> str | None:
        """The first key whose value makes no sense, with why; None when all do."""
        if not (math.isfinite(self.window_fraction) and 0 < self.window_fraction <= 1):
            return "window_fraction: must be a number in (0, 1]"
        if self.node_tolerance < 0:
            return "node_tolerance: must be 0 or more"
        if not 1 <= self.node_gap_minutes <= 1440:
            return "node_gap_minutes: must be between 1 and 1440"
        if not 1 <= self.shipper_silence_minutes <= 1440:
            return "shipper_silence_minutes: must be between 1 and 1440"
        if self.silence_lines < 1:
            return "silence_lines: must be 1 or more"
        if not 0 <= self.history_days <= 31:
            return "history_days: must be between 0 and 31"
        if not 1 <= self.deployed_days <= 400:
            return "deployed_days: must be between 1 and 400"
        return None


# kube-state-metrics' job as the checks name it by default (the checks without a ksm_job of their own use it).
KSM_JOB = ".*kube-state-metrics.*"

# The sources the checks depend on ------------------------------------------------------------------------------


def _up(job: str) -> str:
    """The ``up`` series of the targets whose job matches ``job`` (a regex; a double quote could end the matcher)."""
    return f'up{{job=~"{job.replace(chr(34), "")}"}}'


# What a node's exporter may carry or not (`Need.lacks`), as a reader calls it: a gap in one of these is the series
# stopping, and its hint asks about the kernel and the collector before the exporter.
_CONNTRACK_TABLE = "conntrack table"
_KERNEL_OOM_COUNTER = "kernel OOM counter"
_CARRIED = (_CONNTRACK_TABLE, _KERNEL_OOM_COUNTER)


def node_exporter_conntrack() -> Need:
    """node_exporter on every node, proved by its conntrack series (what the conntrack check reads).

    A node without the nf_conntrack module (an eBPF dataplane, nothing loaded it) has no table and node_exporter
    exports none: with node_exporter answering and no node's table in ``deployed_days``, the cluster lacks it
    (`Need.carrier`), and the conntrack check is not watched instead of UNKNOWN every day.
    """
    return Need(
        "node_exporter",
        Backend.METRICS,
        "node_nf_conntrack_entries",
        per_node=True,
        carrier=_up(NODE_EXPORTER_JOB),
        lacks=_CONNTRACK_TABLE,
    )


def node_exporter_conntrack_limit() -> Need:
    """The conntrack table's size on every node: a node's fill is entries over limit, so each node needs both."""
    return Need(
        "conntrack limit",
        Backend.METRICS,
        "node_nf_conntrack_entries_limit",
        per_node=True,
        part_of="node_exporter",
        carrier=_up(NODE_EXPORTER_JOB),
        lacks=_CONNTRACK_TABLE,
    )


def kernel_oom_counter(job: str) -> Need:
    """The kernel's OOM kill counter on the nodes that export it (node_exporter's vmstat collector).

    Expected only on the nodes that had it in the window or the ``history_days`` before (`Need.own_nodes`): an old
    kernel or a disabled collector never exports it, and a node that never had it is not a blind spot. A node whose
    counter stopped while the fleet's went on is: a kill there would go uncounted.
    """
    return Need(
        _KERNEL_OOM_COUNTER,
        Backend.METRICS,
        f'node_vmstat_oom_kill{{job=~"{job.replace(chr(34), "")}"}}',
        per_node=True,
        own_nodes=True,
        carrier=_up(job),
        lacks=_KERNEL_OOM_COUNTER,
    )


def kube_state_metrics(job: str) -> Need:
    """kube-state-metrics, proved by its ``up`` being 1."""
    return Need("kube-state-metrics", Backend.METRICS, _up(job), up_target=True)


def cadvisor() -> Need:
    """The kubelets' cAdvisor on every node, proved by container working sets."""
    return Need("cAdvisor", Backend.METRICS, 'container_memory_working_set_bytes{container!=""}', per_node=True)


def pod_logs(scope: Filter) -> Need:
    """Pod logs from every node (the log shipper runs as a DaemonSet)."""
    return Need("logs", Backend.LOGS, per_node=True, lines=scope)


def access_logs(scope: Filter) -> Need:
    """The gateway's access log: optional, since a cluster may answer for its proxies through Istio's metrics."""
    return Need("access logs", Backend.LOGS, optional=True, lines=scope, may_lack=True)


def istio_requests() -> Need:
    """Istio's request metrics: optional, like the access log (a gateway without a mesh has none)."""
    return Need("Istio metrics", Backend.METRICS, "istio_requests_total", optional=True, may_lack=True)


def rule_evaluator(job: str) -> Need:
    """The alerting rule evaluator (vmalert, Prometheus), proved by its ``up`` being 1."""
    return Need("rule evaluator", Backend.METRICS, _up(job), up_target=True, may_lack=True)


# The grid of buckets ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grid:
    """Buckets ``(point - step, point]`` at multiples of ``step`` (VictoriaMetrics aligns range queries so).

    From the first bucket ending after the window's start to the first one ending at or after its end.
    """

    window: Window
    step: int
    points: tuple[float, ...]

    @classmethod
    def of(cls, window: Window) -> Grid:
        """The grid of ``window``: the smallest step that keeps it within ~160 buckets."""
        seconds = window.seconds
        step = next((s for s in _STEPS if seconds / s <= _MAX_BUCKETS), _STEPS[-1])
        start, end = window.start.timestamp(), window.end.timestamp()
        first = math.floor(start / step) * step + step
        last = math.ceil(end / step) * step
        return cls(window=window, step=step, points=tuple(float(p) for p in range(int(first), int(last) + 1, step)))

    def weight(self, index: int) -> float:
        """The share of the window bucket ``index`` covers (the first and last ones may be partial)."""
        point = self.points[index]
        start, end = self.window.start.timestamp(), self.window.end.timestamp()
        return max(0.0, min(point, end) - max(point - self.step, start)) / (end - start)

    def index_of_point(self, moment: float) -> int | None:
        """The bucket ending at ``moment`` (a range query's point)."""
        index = round((moment - self.points[0]) / self.step)
        return index if 0 <= index < len(self.points) else None

    def index_of_start(self, moment: float) -> int | None:
        """The bucket starting at ``moment`` (a LogsQL ``_time:<step>`` row)."""
        return self.index_of_point(moment + self.step)

    def buckets(self, points: Iterable[tuple[float, float]], least: float) -> set[int]:
        """The buckets a range series' points fall in, counting the points whose value is at least ``least``.

        A day's coverage answer is ~200 nodes × 144 buckets, asked per day of a replay: `index_of_point`, inlined.
        """
        first, step, count = self.points[0], self.step, len(self.points)
        return {
            index
            for moment, value in points
            if value >= least and 0 <= (index := round((moment - first) / step)) < count
        }

    def bounds(self, first: int, last: int) -> tuple[float, float]:
        """Buckets ``first..last`` as unix seconds clipped to the window (`span` without its datetimes)."""
        start = max(self.points[first] - self.step, self.window.start.timestamp())
        end = min(self.points[last], self.window.end.timestamp())
        return start, end

    def span(self, first: int, last: int) -> tuple[datetime, datetime]:
        """Buckets ``first..last`` as a time span clipped to the window."""
        start, end = self.bounds(first, last)
        return datetime.fromtimestamp(start, tz=UTC), datetime.fromtimestamp(end, tz=UTC)

    @property
    def range_start(self) -> datetime:
        return datetime.fromtimestamp(self.points[0], tz=UTC)

    @property
    def range_end(self) -> datetime:
        return datetime.fromtimestamp(self.points[-1], tz=UTC)


# Measuring --------------------------------------------------------------------------------------------------------


@dataclass
class Seen:
    """One source's buckets with data: cluster-wide, and per node for a per-node source."""

    buckets: set[int] = field(default_factory=set)
    nodes: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    # Logs only: lines per bucket, for the source and per node (how loud it was around a silence: `_loud_enough`).
    lines: dict[int, float] = field(default_factory=dict)
    node_lines: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(dict))
    # An ``up`` source, per target (instance): the buckets its series existed in, and those it was up in.
    present: dict[str, set[int]] = field(default_factory=dict)
    live: dict[str, set[int]] = field(default_factory=dict)
    never: bool = False  # no data in the window nor in the ``deployed_days`` before it: never deployed
    # Never, while its `Need.carrier` answered in the window: the cluster lacks it (no conntrack table), not blind.
    lacking: bool = False
    # An ``own_nodes`` source: the nodes (raw label values) that had it in the ``history_days`` before the window.
    before_nodes: set[str] = field(default_factory=set)
    # A carried series the fleet has: the nodes (names) whose exporter answered in the window and which never had it
    # in the ``deployed_days`` (one node without the nf_conntrack module among nodes with it).
    lacking_nodes: set[str] = field(default_factory=set)
    # The nodes whose exporter answered and whose series of it all stopped (had before, none today): a gap named by
    # what stopped ("conntrack table"), not by the exporter, which answered.
    stopped_nodes: set[str] = field(default_factory=set)


def _loud_enough(lines: Mapping[int, float], run: tuple[int, int], policy: CoveragePolicy) -> bool:
    """Whether a log source at its quiet rate would have written ``silence_lines`` lines during the silence ``run``.

    Logs follow traffic: a quiet node, or the access log at night, may write nothing for an hour as its traffic
    ebbs. The quiet rate is the lower quartile of the source's lines per bucket, over the buckets it wrote in: a
    chatty node cut off mid-flow is a stuck shipper within half an hour, a node that writes a line or two a bucket
    only after hours of silence (measured on the bench's 200-node days: their night lulls last up to two hours). A
    source with no line at all in the window is silent beyond doubt.
    """
    return _loud_at(_quiet_rate(lines), run, policy)


def _quiet_rate(lines: Mapping[int, float]) -> float | None:
    """The lower quartile of lines per bucket over the buckets written in; None when none was."""
    if not lines:
        return None
    ordered = sorted(lines.values())
    return ordered[len(ordered) // 4]


def _loud_at(quiet_rate: float | None, run: tuple[int, int], policy: CoveragePolicy) -> bool:
    return quiet_rate is None or quiet_rate * (run[1] - run[0] + 1) >= policy.silence_lines


@dataclass(frozen=True)
class Fleet:
    """The nodes of the window: when each first appeared, when one was deleted, and when one was excused."""

    first_seen: Mapping[str, int]  # node → first bucket it existed in (0 when it existed before the window)
    deleted_after: Mapping[str, int]  # node → last bucket kube-state-metrics listed it in, when it was deleted
    excused: Mapping[str, Mapping[int, str]]  # node → bucket → "drained" | "not ready" | "expected absent"
    by_ip: Mapping[str, str] = field(default_factory=dict)  # internal IP → node name (kube_node_info)
    error: str | None = None
    # Internal IP → bucket → the node that held it then: a node replaced by one reusing its IP is two nodes.
    owners: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    # Nodes that ran pods and no DaemonSet's pod while other nodes ran some (Fargate, virtual-kubelet): no per-node
    # exporter or shipper is expected there; a source heard from one anyway is judged there as anywhere.
    virtual: frozenset[str] = frozenset()

    def canonical(self, raw: str) -> str:
        """A node's name from a label value: ``pi5-2:9100`` → ``pi5-2``, ``10.0.0.5:9100`` → its node's name."""
        return _canonical(raw, self.by_ip)

    def split(self, raw: str, buckets: Iterable[int]) -> dict[str, set[int]]:
        """``raw``'s buckets by the node they belong to: by who held the IP then, for a target named by IP."""
        return _split(raw, buckets, self.by_ip, self.owners)


def _canonical(raw: str, by_ip: Mapping[str, str]) -> str:
    bare = node_name(raw)
    return by_ip.get(bare, bare)


def _split(
    raw: str, buckets: Iterable[int], by_ip: Mapping[str, str], owners: Mapping[str, Mapping[int, str]]
) -> dict[str, set[int]]:
    bare = node_name(raw)
    held = owners.get(bare)
    if not held or len(set(held.values())) < 2:
        return {by_ip.get(bare, bare): set(buckets)}
    # A bucket no listing covers (kube-state-metrics silent then) goes to the holder listed nearest in time.
    listed = sorted(held)
    out: dict[str, set[int]] = defaultdict(set)
    for index in buckets:
        node = held.get(index)
        if node is None:
            node = held[min(listed, key=lambda known: abs(known - index))]
        out[node].add(index)
    return dict(out)


@dataclass(frozen=True)
class Report:
    """What `measure` saw, for `coverage_of` to turn into each check's `Coverage`."""

    grid: Grid
    seen: Mapping[Need, Seen]
    errors: Mapping[Need, str]
    fleet: Fleet
    # Logs not scoped to the cluster while the metrics are (a shared log store): the nodes heard in the logs that
    # the cluster's metrics do not know — another cluster's. Neither in the fleet nor judged; the log checks say so.
    foreign_nodes: tuple[str, ...] = ()
    logs_unscoped: bool = False
    # Each source's gaps, judged once: the checks that share a source (every log check needs the logs) would
    # otherwise judge it again, once each — a day of a 200-node fleet is ~30,000 node buckets per source.
    judged: dict[tuple[Need, CoveragePolicy], _Judged] = field(default_factory=dict, compare=False, repr=False)


def queries(need: Need, grid: Grid, policy: CoveragePolicy) -> str:
    """The range query that measures a metrics ``need`` over ``grid`` (log needs share `logs_query`)."""
    bucket = f"[{grid.step}s]"
    if need.up_target:
        # Per target, never max(up): with kube-state-metrics sharded in two, one shard up is half the pods seen.
        return f"max by (instance) (max_over_time({need.query}{bucket}))"
    if need.per_node:
        return f"count by ({_node_label(need, policy)}) (count_over_time({need.query}{bucket}))"
    return f"count(count_over_time({need.query}{bucket}))"


def logs_question(need: Need, grid: Grid) -> LineCount:
    """The question that measures a log ``need``: lines per bucket (and node, for a per-node source).

    One question per source, not one scan with a column per source: a source's filter in front lets VictoriaLogs
    skip the blocks that cannot match, and a source that is not per node answers one row a bucket, not one per node
    and bucket (both measured on the 200-node bench day: the single scan was slower and bigger).
    """
    return LineCount(
        window=grid.window,
        scope=need.lines or EVERY_LINE,
        by=("node",) if need.per_node else (),
        bucket_seconds=grid.step,
    )


def fleet_queries(grid: Grid, policy: CoveragePolicy) -> dict[str, str]:
    """The fleet's queries: range queries over ``grid`` except ``before_*`` (instant, at the window's start)."""
    bucket = f"[{grid.step}s]"
    days = f"[{policy.history_days}d]"
    job = policy.node_exporter_job.replace('"', "")
    return {
        # One range query for the whole fleet, each part marked by its ``why``: the nodes (kube_node_info), those that
        # ran pods, node_exporter's targets (even down), and the buckets a node was cordoned or not Ready in.
        "nodes": (
            "max by (node, internal_ip, why) ("
            f'label_replace(max_over_time(kube_node_info{bucket}), "why", "info", "", "")'
            " or label_replace(count by (node) ("
            f'count_over_time(kube_pod_info{{node!=""}}{bucket})), "why", "pods", "", "")'
            f" or label_replace(label_replace(count by ({policy.node_exporter_node_label}) (count_over_time("
            f'up{{job=~"{job}"}}{bucket})), "node", "$1", "{policy.node_exporter_node_label}", "(.+)"),'
            ' "why", "target", "", "")'
            # Drained: cordoned *and* left by its pods (but its DaemonSets' and static pods, which a drain leaves).
            # Cordoned with its pods still on it is not drained: they run, log and can be killed there.
            f" or label_replace((max_over_time(kube_node_spec_unschedulable{bucket}) > 0) unless on (node) "
            f'count by (node) (count_over_time(kube_pod_info{{node!="", created_by_kind!~"DaemonSet|Node"}}{bucket})),'
            ' "why", "drained", "", "")'
            # The nodes that ran a DaemonSet's pod: a node among nodes that do, running none itself, is a virtual
            # node (Fargate, virtual-kubelet), where no exporter or log shipper runs.
            " or label_replace(count by (node) ("
            f'count_over_time(kube_pod_info{{node!="", created_by_kind="DaemonSet"}}{bucket})),'
            ' "why", "daemonset", "", "")'
            ' or label_replace(1 - min_over_time(kube_node_status_condition{condition="Ready", status="true"}'
            f'{bucket}) > 0, "why", "not ready", "", ""))'
        ),
        # The nodes known before the window: kube-state-metrics' and node_exporter's (its node label copied to node).
        "before": (
            f"group by (node) (last_over_time(kube_node_info{days})) or group by (node) (label_replace("
            f'last_over_time(up{{job=~"{job}"}}{days}), "node", "$1", "{policy.node_exporter_node_label}", "(.+)"))'
        ),
    }


def _node_label(need: Need, policy: CoveragePolicy) -> str:
    return policy.cadvisor_node_label if need.label == "cAdvisor" else policy.node_exporter_node_label


async def measure(
    sources: Sources, window: Window, needs: Iterable[Need], policy: CoveragePolicy, look_back: bool = True
) -> Report:
    """Ask the backends, once per metrics source, once for all log sources, plus the fleet; never raises.

    ``look_back`` False (a trend day, graded only to compare with): a source absent from the window is not looked
    for in the month before it. A component a cluster may lack is then taken as never there, a series whose
    exporter answered as lacking, anything else as unseen. The digest's own window decides what the cluster has;
    its trend days, asked beside it, would each ask a month of their own, in an order no two runs share.

    ``sources.logs_unscoped``: the metrics are scoped to one cluster and the logs are not (a shared log store read
    whole): the fleet is the metrics' alone, and a node heard only in the logs is another cluster's
    (`Report.foreign_nodes`).
    """
    logs_unscoped = sources.logs_unscoped
    grid = Grid.of(window)
    unique = list(dict.fromkeys(needs))
    per_node = any(need.per_node for need in unique)
    measured, fleet_rows = await asyncio.gather(
        asyncio.gather(
            *(
                (_measure_logs if need.backend is Backend.LOGS else _measure_metrics)(sources, grid, need, policy)
                for need in unique
            )
        ),
        _fleet_rows(sources, grid, policy) if per_node else _no_rows(),
    )
    results = dict(zip(unique, measured, strict=True))
    seen: dict[Need, Seen] = {}
    errors: dict[Need, str] = {}
    for need in unique:
        one, error = results[need]
        if error is None and need.optional and need.may_lack and not one.buckets:
            try:
                # Silent today: never here at all (not watched), or here before and gone (its check is UNKNOWN)?
                one.never = not look_back or not await held_data_in(sources, grid, need, policy.deployed_days)
            except SourceError as exc:
                error = str(exc)
        elif error is None and _absent_all_window(need, one) and (look_back or need.carrier):
            try:
                never = not look_back or not await held_data_in(sources, grid, need, policy.deployed_days)
                one.lacking = never and bool(need.carrier) and await _carried(sources, grid, need)
                # A trend day without its look-back: lacking (its exporter answered) or unseen, never "never seen".
                one.never = never if look_back else one.lacking
            except SourceError as exc:
                error = str(exc)
        if error is not None:
            errors[need] = error
        else:
            seen[need] = one
            if sources.sightings is not None and need.backend is Backend.LOGS:
                # What this window held is known now (up to when it was asked, for a window not over): a later
                # window's look-back (tomorrow's, a replay's next day) need not ask it again.
                until = min(window.end, window.asked_at or window.end)
                sources.sightings.record(
                    source_key(need), window.start.timestamp(), until.timestamp(), held_anything(need, one)
                )
    trusted = {need: one for need, one in seen.items() if not (logs_unscoped and need.backend is Backend.LOGS)}
    fleet = _fleet(grid, policy, trusted, fleet_rows) if per_node else _NO_FLEET
    if fleet.error is None and fleet.first_seen:
        asked = list(seen.items())
        lacking = await asyncio.gather(
            *(_lacking_nodes(sources, grid, need, one, policy, fleet) for need, one in asked), return_exceptions=True
        )
        # A node lacks a thing (its conntrack table) only when every series of it is missing there: a node with the
        # table's entries and not its limit lacks nothing, its limit is unseen.
        silent: dict[str, set[str]] = {}
        had: dict[str, set[str]] = defaultdict(set)
        for (need, _one), nodes in zip(asked, lacking, strict=True):
            if isinstance(nodes, SourceError):
                del seen[need]
                errors[need] = str(nodes)
            elif isinstance(nodes, BaseException):
                raise nodes
            elif need.lacks:
                silent[need.lacks] = silent.get(need.lacks, nodes[0]) & nodes[0]
                had[need.lacks] |= nodes[1]
        for need, one in seen.items():
            if need.lacks:
                one.lacking_nodes = silent.get(need.lacks, set()) - had[need.lacks]
                one.stopped_nodes = silent.get(need.lacks, set()) & had[need.lacks]
    foreign: set[str] = set()
    if logs_unscoped and per_node and fleet.error is None and fleet.first_seen:
        for need, one in seen.items():
            if need.backend is Backend.LOGS and need.per_node:
                foreign.update(fleet.canonical(raw) for raw in one.nodes if raw)
        foreign -= set(fleet.first_seen) | set(fleet.deleted_after)
    return Report(
        grid=grid,
        seen=seen,
        errors=errors,
        fleet=fleet,
        foreign_nodes=tuple(sorted(foreign)),
        logs_unscoped=logs_unscoped,
    )


_NO_FLEET = Fleet(first_seen={}, deleted_after={}, excused={})


async def _no_rows() -> dict[str, Sequence[RangeSeries]] | str:
    return {}


async def _measure_metrics(sources: Sources, grid: Grid, need: Need, policy: CoveragePolicy) -> tuple[Seen, str | None]:
    seen = Seen()
    try:
        series = await sources.metrics.range(queries(need, grid, policy), grid.range_start, grid.range_end, grid.step)
    except SourceError as exc:
        return seen, str(exc)
    if need.up_target:
        for one in series:
            target = one.labels.get("instance", "")
            seen.present.setdefault(target, set()).update(grid.buckets(one.points, 0.0))
            seen.live.setdefault(target, set()).update(grid.buckets(one.points, 1.0))
        seen.buckets = _all_targets_up(seen, len(grid.points))
        return seen, None
    label = _node_label(need, policy)
    for one in series:
        found = grid.buckets(one.points, _ABOVE_ZERO)
        seen.buckets.update(found)
        if need.per_node and found:
            seen.nodes[one.labels.get(label, "")].update(found)
    if need.per_node and need.own_nodes and policy.history_days:
        try:
            before = await sources.metrics.instant(
                f"count by ({label}) (last_over_time({need.query}[{policy.history_days}d]))", grid.window.start
            )
        except SourceError as exc:
            return seen, str(exc)
        seen.before_nodes = {sample.labels.get(label, "") for sample in before if sample.value > 0}
    return seen, None


def _expected_targets(seen: Seen, count: int) -> int:
    """How many targets the source has: the most that existed together in a bucket whose targets did not change.

    A target replaced by another (kube-state-metrics' pod moved to a new IP) overlaps its successor in one bucket
    or two; counting only the steady buckets keeps that overlap from reading as one target more, and a shard that
    vanished (its endpoint removed while it crash-loops) as one target fewer than before.
    """
    present = [frozenset(t for t, found in seen.present.items() if i in found) for i in range(count)]
    steady = [
        len(targets)
        for i, targets in enumerate(present)
        if targets and (i == 0 or present[i - 1] == targets) and (i == count - 1 or present[i + 1] == targets)
    ]
    return max(steady, default=max((len(targets) for targets in present), default=0))


def _all_targets_up(seen: Seen, count: int) -> set[int]:
    """The buckets in which as many targets were up as the source has (every shard, not any one of them)."""
    expected = max(1, _expected_targets(seen, count))
    up: dict[int, int] = defaultdict(int)
    for found in seen.live.values():
        for index in found:
            up[index] += 1
    return {index for index, targets in up.items() if targets >= expected}


def _missing_targets(seen: Seen, run: tuple[int, int]) -> list[str]:
    """The targets missing in ``run``: down then (up 0), or up just before or after it and absent all through it."""
    span = range(run[0], run[1] + 1)
    down = {t for t, found in seen.present.items() if any(i in found and i not in seen.live[t] for i in span)}
    beside = (run[0] - 1, run[1] + 1)
    gone = {
        t
        for t, found in seen.live.items()
        if any(i in found for i in beside) and not any(i in seen.present[t] for i in span)
    }
    return sorted(down | gone)


async def _measure_logs(sources: Sources, grid: Grid, need: Need, policy: CoveragePolicy) -> tuple[Seen, str | None]:
    seen = Seen()
    try:
        series = await sources.logs.series(logs_question(need, grid))
    except SourceError as exc:
        return seen, str(exc)
    # Each bucket start the answer names, placed on the grid once (a day: 144 starts for ~23,000 node buckets).
    starts: set[float] = set().union(*(one.lines for one in series))
    index_of = {start: index for start in starts if (index := grid.index_of_start(start)) is not None}
    cluster_lines: dict[int, float] = defaultdict(float)
    for one in series:
        found: dict[int, float] = {}
        for start, lines in one.lines.items():
            index = index_of.get(start)
            if index is not None and lines > 0:
                found[index] = found.get(index, 0.0) + lines
                cluster_lines[index] += lines
        if not found:
            continue
        seen.buckets.update(found)
        if need.per_node:  # one series per group: each node's buckets come whole, once
            node = one.group.get("node", "")
            seen.nodes[node] = set(found)
            seen.node_lines[node] = found
    seen.lines = dict(cluster_lines)
    if need.per_node and seen.buckets and not any(seen.nodes):
        # Lines that name no node cannot tell a quiet node from a stuck shipper: say so rather than blame every node.
        return seen, (
            "no log line names its node: which nodes shipped logs cannot be told (set logs.fields.node in the policy)"
        )
    return seen, None


async def _lacking_nodes(
    sources: Sources, grid: Grid, need: Need, seen: Seen, policy: CoveragePolicy, fleet: Fleet
) -> tuple[set[str], set[str]]:
    """The nodes silent all window in a carried series the others have whose exporter answered; those that had it.

    The first set among the fleet's nodes, the second over the ``deployed_days``. Asked only when a node of the
    fleet had none of it all window while other nodes had some (one instant query). Answered and never had: the
    node lacks it (no nf_conntrack module there). Answered and had: it stopped there. A node whose exporter is
    silent too is in neither: nothing shows it lacks the series rather than went unseen.
    """
    if not (need.per_node and need.carrier and need.backend is Backend.METRICS and seen.nodes) or need.own_nodes:
        return set(), set()
    heard = {fleet.canonical(raw) for raw, buckets in seen.nodes.items() if buckets}
    silent = set(fleet.first_seen) - heard - fleet.virtual
    if not silent:
        return set(), set()
    label = _node_label(need, policy)
    seconds = max(1, round(grid.window.seconds))
    days = f"{policy.deployed_days}d"
    samples = await sources.metrics.instant(
        f'label_replace(count by ({label}) (last_over_time({need.query}[{days}])), "why", "had", "", "")'
        f" or label_replace(max by ({label}) (max_over_time({need.carrier}[{seconds}s])) >= 1,"
        ' "why", "carried", "", "")',
        grid.window.end,
    )
    had = {fleet.canonical(s.labels.get(label, "")) for s in samples if s.labels.get("why") == "had" and s.value > 0}
    carried = {fleet.canonical(s.labels.get(label, "")) for s in samples if s.labels.get("why") == "carried"}
    return silent & carried, had


async def _carried(sources: Sources, grid: Grid, need: Need) -> bool:
    """Whether the exporter that would carry ``need`` answered (its ``up`` at 1) at some time in the window."""
    seconds = max(1, round(grid.window.seconds))
    samples = await sources.metrics.instant(f"max(max_over_time({need.carrier}[{seconds}s]))", grid.window.end)
    return any(sample.value >= 1 for sample in samples)


def _absent_all_window(need: Need, seen: Seen) -> bool:
    """A metrics source without a single series in the window (an ``up`` target at 0 is there, and down)."""
    if need.backend is not Backend.METRICS or need.optional:
        return False
    return not held_anything(need, seen)


# A log source's look-back is asked in slices of at most this many days: Loki refuses a query longer than its
# ``max_query_length`` (721 h by default), and the newest slice answers first for a source that was there.
_LOOK_BACK_SLICE_DAYS = 30


def source_key(need: Need) -> str:
    """The name a source's sightings are kept under (`Sightings`): what it is and how it is proved, never a secret."""
    proof = need.query if need.backend is Backend.METRICS else repr(need.lines or EVERY_LINE)
    return f"{need.backend.value} {need.label}: {proof}"


def held_anything(need: Need, seen: Seen) -> bool:
    """Whether a measured source held any data in the window (an ``up`` target at 0 is there, and down)."""
    return bool(seen.present if need.up_target else seen.buckets)


async def held_data_in(sources: Sources, grid: Grid, need: Need, days: int) -> bool:
    """Whether a source held any data in the ``days`` before the window.

    Metrics: one instant query. Logs: a count of its lines per slice, newest first, stopping at the first that holds
    one; the first slice is the day before alone, so a source that was there yesterday (lost today) costs a day's
    count, not a month's. What ``sources.sightings`` already knows of a log source is not asked again: a span that
    held data settles it, spans that held none are skipped, and what each answer says is kept there.
    """
    if need.backend is Backend.METRICS:
        # One instant query over an index, whatever its span: nothing to save by remembering it.
        samples = await sources.metrics.instant(f"count(count_over_time({need.query}[{days}d]))", grid.window.start)
        return any(sample.value > 0 for sample in samples)
    key, memory = source_key(need), sources.sightings
    end = grid.window.start.timestamp()
    start = end - days * 86_400
    if memory is None:
        return await _held_in_parts(sources, need, grid.window, [(start, end)], None, key)
    async with memory.asking(key):
        if memory.held_within(key, start, end):
            return True
        return await _held_in_parts(sources, need, grid.window, memory.unknown(key, start, end), memory, key)


async def _held_in_parts(
    sources: Sources,
    need: Need,
    window: Window,
    parts: Sequence[tuple[float, float]],
    memory: Sightings | None,
    key: str,
) -> bool:
    end = window.start.timestamp()
    for first, last in parts:
        for slice_start, slice_end in _slices(first, last, end):
            held = await _held_between(sources, need, window, slice_start, slice_end)
            if memory is not None:
                memory.record(key, slice_start, slice_end, held)
            if held:
                return True
    return False


def _slices(first: float, last: float, window_start: float) -> list[tuple[float, float]]:
    """``[first, last)`` cut as a log look-back asks it, newest first.

    The day before the window alone, then slices of at most `_LOOK_BACK_SLICE_DAYS`.
    """
    out: list[tuple[float, float]] = []
    end = last
    while end > first:
        days = 1 if end == window_start else _LOOK_BACK_SLICE_DAYS
        begin = max(first, end - days * 86_400)
        out.append((begin, end))
        end = begin
    return out


async def _held_between(sources: Sources, need: Need, window: Window, start: float, end: float) -> bool:
    """One question: did the log source hold any line in ``[start, end)``."""
    begin, until = datetime.fromtimestamp(start, tz=UTC), datetime.fromtimestamp(end, tz=UTC)
    earlier = Window(begin, until, window.zone, "before the window")
    rows = await sources.logs.count(LineCount(window=earlier, scope=need.lines or EVERY_LINE))
    return any(row.counts.get("lines", 0.0) > 0 for row in rows)


_RANGED = ("nodes",)
_BEFORE = ("before",)


async def _fleet_rows(sources: Sources, grid: Grid, policy: CoveragePolicy) -> dict[str, Sequence[RangeSeries]] | str:
    """The fleet's answers by purpose (the ``before_*`` instants as one-point series), or why they failed."""
    texts = fleet_queries(grid, policy)
    try:
        ranges = asyncio.gather(
            *(sources.metrics.range(texts[key], grid.range_start, grid.range_end, grid.step) for key in _RANGED)
        )
        instants = asyncio.gather(*(sources.metrics.instant(texts[key], grid.window.start) for key in _BEFORE))
        ranged, before = await asyncio.gather(ranges, instants)
    except SourceError as exc:
        return str(exc)
    rows: dict[str, Sequence[RangeSeries]] = dict(zip(_RANGED, ranged, strict=True))
    for key, samples in zip(_BEFORE, before, strict=True):
        rows[key] = [RangeSeries(sample.labels, ((grid.window.start.timestamp(), sample.value),)) for sample in samples]
    return rows


def _fleet(
    grid: Grid, policy: CoveragePolicy, seen: Mapping[Need, Seen], rows: Mapping[str, Sequence[RangeSeries]] | str
) -> Fleet:
    if isinstance(rows, str):
        return Fleet(first_seen={}, deleted_after={}, excused={}, error=rows)

    def buckets(one: RangeSeries) -> set[int]:
        return grid.buckets(one.points, _ABOVE_ZERO)

    parts: dict[str, list[RangeSeries]] = defaultdict(list)
    for one in rows["nodes"]:
        if one.labels.get("node"):
            parts[one.labels.get("why", "")].append(one)
    by_ip = {one.labels["internal_ip"]: one.labels["node"] for one in parts["info"] if one.labels.get("internal_ip")}
    owners: dict[str, dict[int, str]] = defaultdict(dict)
    for one in parts["info"]:
        if one.labels.get("internal_ip"):
            for index in buckets(one):
                owners[one.labels["internal_ip"]][index] = one.labels["node"]

    def canonical(raw: str) -> str:
        return _canonical(raw, by_ip)

    def split(raw: str, found: Iterable[int]) -> dict[str, set[int]]:
        return _split(raw, found, by_ip, owners)

    listed: dict[str, set[int]] = defaultdict(set)
    for one in parts["info"]:
        listed[one.labels["node"]].update(buckets(one))

    # Where each node first showed up today: kube_node_info, its pods, its node_exporter target (even down), or any
    # per-node source.
    appeared: dict[str, set[int]] = defaultdict(set)
    for one in (*parts["info"], *parts["pods"], *parts["target"]):
        for name, found in split(one.labels["node"], buckets(one)).items():
            appeared[name].update(found)
    for one_seen in seen.values():
        for raw, found in one_seen.nodes.items():
            if raw:
                for name, part in split(raw, found).items():
                    appeared[name].update(part)
    first_seen = {name: min(found) for name, found in appeared.items() if found}
    for one in rows["before"]:
        # An IP's holder before the window is the one that held it first today (a replacement came later).
        name = next(iter(split(one.labels["node"], {0}))) if one.labels.get("node") else ""
        # A node known before the window is expected from the start, unless kube-state-metrics listed nodes today
        # without it: then it was deleted.
        if name and (name in first_seen or not listed):
            first_seen[name] = 0

    last_listed = max((max(found) for found in listed.values() if found), default=-1)
    deleted_after = {name: max(found) for name, found in listed.items() if found and max(found) < last_listed}

    excused: dict[str, dict[int, str]] = defaultdict(dict)
    for why in ("not ready", "drained"):  # drained says more (a drain is on purpose): it wins a bucket that is both
        for one in parts[why]:
            for index in buckets(one):
                excused[canonical(one.labels["node"])][index] = why
    for name in policy.absent_nodes:
        excused[name] = dict.fromkeys(range(len(grid.points)), "expected absent")
    # Virtual nodes: kube-state-metrics saw pods on them all window long, and not one DaemonSet pod, where the other
    # nodes ran some. Exporters and log shippers run as DaemonSets (or on hosts a virtual node does not have).
    daemon = {canonical(one.labels["node"]) for one in parts["daemonset"] if buckets(one)}
    with_pods = {canonical(one.labels["node"]) for one in parts["pods"] if buckets(one)}
    virtual = frozenset(with_pods - daemon) if daemon else frozenset()
    return Fleet(
        first_seen=first_seen,
        deleted_after=deleted_after,
        excused=excused,
        by_ip=by_ip,
        owners={address: dict(held) for address, held in owners.items()},
        virtual=virtual,
    )


# Judging ----------------------------------------------------------------------------------------------------------


def _runs(indexes: Iterable[int]) -> list[tuple[int, int]]:
    """Consecutive indexes as (first, last) runs."""
    runs: list[tuple[int, int]] = []
    for index in sorted(indexes):
        if runs and runs[-1][1] == index - 1:
            runs[-1] = (runs[-1][0], index)
        else:
            runs.append((index, index))
    return runs


def _minutes(grid: Grid, run: tuple[int, int]) -> float:
    """The length of ``run`` in minutes, clipped to the window.

    Asked for every silent run of every node (a replay day of a 200-node fleet: thousands of night lulls), so it
    stays in floats.
    """
    start, end = grid.bounds(*run)
    return (end - start) / 60


@dataclass(frozen=True)
class _Judged:
    """One source's part of a check's coverage: its gaps, its unseen buckets, its silent and excused nodes."""

    gaps: tuple[Gap, ...]
    unseen: frozenset[int]
    node_gaps: Mapping[str, Sequence[Gap]]
    excused: Mapping[str, str]
    lacking: frozenset[str] = frozenset()


def _judge(report: Report, need: Need, policy: CoveragePolicy) -> _Judged:
    """The gaps of one measured source, whichever check asks."""
    grid = report.grid
    seen = report.seen[need]
    anything: set[int] = set().union(*(one.buckets for one in report.seen.values()))
    gaps: list[Gap] = []
    unseen: set[int] = set()
    is_logs = need.backend is Backend.LOGS
    silence = policy.shipper_silence_minutes if is_logs else 0
    for run in _runs(i for i in range(len(grid.points)) if i not in seen.buckets):
        if _minutes(grid, run) < silence or (is_logs and not _loud_enough(seen.lines, run, policy)):
            continue  # a quiet spell of the logs, not a gap
        unseen.update(range(run[0], run[1] + 1))
        # Within the run, the buckets nothing at all answered in are the window's blind hours; the rest is this
        # source alone.
        for part in _runs(i for i in range(run[0], run[1] + 1) if i not in anything):
            gaps.append(Gap(GapKind.HOURS, "", need.label, *grid.span(*part)))
        for part in _runs(i for i in range(run[0], run[1] + 1) if i in anything):
            # One target of several (a shard): named by its instance, so the reader knows which half was unseen.
            targets = _missing_targets(seen, part) if len(seen.present) > 1 else []
            for target in targets or [need.label]:
                gaps.append(Gap(GapKind.TARGET, target, need.label, *grid.span(*part)))
    node_gaps: dict[str, list[Gap]] = defaultdict(list)
    excused: dict[str, str] = {}
    if need.per_node:
        _node_gaps(report, need, seen, policy, node_gaps, excused)
    return _Judged(tuple(gaps), frozenset(unseen), dict(node_gaps), excused, frozenset(seen.lacking_nodes))


def coverage_of(report: Report, needs: Sequence[Need], policy: CoveragePolicy) -> Coverage:
    """The coverage of a check that depends on ``needs``, judged by the policy."""
    grid, fleet = report.grid, report.fleet
    errors = [f"{need.label}: {report.errors[need]}" for need in needs if need in report.errors]
    if fleet.error and any(need.per_node for need in needs):
        errors.append(f"nodes: {fleet.error}")
    # Never-deployed components a cluster may lack (Istio beside the access log, a rule evaluator) are not said here:
    # with all of a check's sources such, the check is not watched (`unwatched`); with one of them, it says nothing.
    # A series the cluster lacks (no conntrack table, no kernel OOM counter: `Need.carrier`) is not blindness either.
    never = tuple(
        need.label
        for need in needs
        if need in report.seen and report.seen[need].never and not (need.may_lack or report.seen[need].lacking)
    )
    measured = [
        need
        for need in needs
        if need in report.seen and not report.seen[need].never and not (need.optional and not report.seen[need].buckets)
    ]
    gaps: list[Gap] = []
    unseen: set[int] = set()
    node_gaps: dict[str, list[Gap]] = defaultdict(list)
    excused: dict[str, str] = {}
    lacking: set[tuple[str, str]] = set()
    for need in measured:
        key = (need, policy)
        judged = report.judged.get(key)
        if judged is None:
            judged = report.judged[key] = _judge(report, need, policy)
        gaps.extend(judged.gaps)
        unseen.update(judged.unseen)
        for node, found in judged.node_gaps.items():
            node_gaps[node].extend(found)
        for node, reason in judged.excused.items():
            excused.setdefault(node, reason)
        lacking.update((node, need.lacks or need.label) for node in judged.lacking)
    parents = {need.label: need.part_of for need in measured if need.part_of}
    for node_list in node_gaps.values():
        said = {(gap.kind, gap.name, gap.source, gap.start, gap.end) for gap in node_list}
        gaps.extend(
            gap
            for gap in node_list
            if (gap.kind, gap.name, parents.get(gap.source, ""), gap.start, gap.end) not in said
        )
    fraction = 1.0 - sum(grid.weight(index) for index in unseen)
    fraction = max(0.0, min(1.0, round(fraction, 4)))
    # A source that went silent and never answered again before the window ended (an exporter dead since 23:00;
    # today, asked before it is over) is not a scrape hiccup the 95 % allows for: nothing shows it came back.
    stopped = any(
        gap.kind in (GapKind.HOURS, GapKind.TARGET)
        and gap.end >= grid.window.end
        and (gap.end - gap.start).total_seconds() >= policy.node_gap_minutes * 60
        for gap in gaps
    )
    not_over = grid.window.asked_at is not None
    partial = (
        bool(errors)
        or fraction < policy.window_fraction
        or stopped
        or not_over
        or len(node_gaps) > policy.node_tolerance
    )
    return Coverage(
        fraction=fraction,
        missing=tuple(sorted(dict.fromkeys(gaps), key=lambda gap: (gap.start, gap.kind.value, gap.name))),
        excused=tuple(sorted(excused.items())),
        partial=partial,
        error="; ".join(errors) or None,
        never_seen=never,
        lacking=tuple(NodeLacks(node, lacks, policy.deployed_days) for node, lacks in sorted(lacking)),
    )


def unwatched(report: Report, name: str, needs: Sequence[Need], policy: CoveragePolicy) -> Unwatched | None:
    """Check ``name`` as not watched when every source it reads is a component this cluster never had; else None.

    Only components a cluster may lack (`Need.may_lack`: a gateway's access log, a mesh's metrics, a rule
    evaluator) qualify, and only when none held data in the window nor in the ``deployed_days`` before it. What
    every cluster has (kube-state-metrics, node_exporter, pod logs) is never "not watched": its absence is blindness.
    """
    if not needs or not all(_never_had(report, need) for need in needs):
        return None
    sources = tuple(dict.fromkeys(need.lacks or need.label for need in needs))
    return Unwatched(name=name, sources=sources, days=policy.deployed_days)


def _never_had(report: Report, need: Need) -> bool:
    """A component this cluster may lack and never had, or a series its answering exporter never carried."""
    seen = report.seen.get(need)
    return seen is not None and seen.never and (need.may_lack or seen.lacking)


# How an excused virtual node is said: "○ node fargate-ip-10-0-1-5 · runs no DaemonSet: its silence is not counted…"
_VIRTUAL = "runs no DaemonSet (a virtual node)"


def _node_gaps(
    report: Report,
    need: Need,
    seen: Seen,
    policy: CoveragePolicy,
    node_gaps: dict[str, list[Gap]],
    excused: dict[str, str],
) -> None:
    """The nodes of the fleet that ``need`` did not hear from, for longer than the policy tolerates."""
    grid, fleet = report.grid, report.fleet
    by_node: dict[str, set[int]] = {}
    lines: dict[str, dict[int, float]] = {}
    for raw, all_buckets in seen.nodes.items():
        raw_lines = seen.node_lines.get(raw, {})
        for name, buckets in fleet.split(raw, all_buckets).items():
            mine = (
                raw_lines if len(buckets) == len(all_buckets) else {i: raw_lines[i] for i in buckets if i in raw_lines}
            )
            if name not in by_node:  # the usual case: one spelling per node, copied whole
                by_node[name], lines[name] = set(buckets), dict(mine)
                continue
            by_node[name].update(buckets)  # ``pi5-2:9100`` and ``pi5-2``: one node
            node_lines = lines[name]
            for index, count in mine.items():
                node_lines[index] = node_lines.get(index, 0.0) + count
    last = len(grid.points) - 1
    is_logs = need.backend is Backend.LOGS
    tolerance = policy.shipper_silence_minutes if is_logs else policy.node_gap_minutes
    if need.own_nodes:
        # Only the nodes that had it (today or in the days before): a node that never exported it is not blind here.
        # A node known only from before (not in today's fleet) was deleted: not expected either.
        nodes = set(by_node) | ({fleet.canonical(raw) for raw in seen.before_nodes} & set(fleet.first_seen))
    elif is_logs and report.logs_unscoped:
        # Logs read whole from a store shared with other clusters: only this cluster's nodes are judged.
        nodes = set(fleet.first_seen) | set(policy.absent_nodes)
    else:
        nodes = set(fleet.first_seen) | set(by_node) | set(policy.absent_nodes)
    for node in sorted(nodes):
        if node in fleet.virtual and node not in by_node:
            excused.setdefault(node, _VIRTUAL)
            continue
        if node in seen.lacking_nodes:
            continue  # its exporter answered and never had it: not watched there (`Coverage.lacking`), not a gap
        first, until = fleet.first_seen.get(node, 0), fleet.deleted_after.get(node, last)
        # Buckets the whole source missed are said once, as the source's gap, not once per node. A node that was
        # heard whenever the source was (most of them) costs one set difference.
        heard = by_node.get(node, set())
        silent = sorted(i for i in seen.buckets.difference(heard) if first <= i <= until)
        reasons = fleet.excused.get(node, {})
        for index in silent:
            if index in reasons:
                excused.setdefault(node, reasons[index])
        # Most silent runs are a quiet node's short lulls: the quiet rate is only worked out for a node with a long one.
        long_runs = [run for run in _runs(i for i in silent if i not in reasons) if _minutes(grid, run) >= tolerance]
        rate = _quiet_rate(lines.get(node, {})) if is_logs and long_runs else None
        for run in long_runs:
            if not is_logs or _loud_at(rate, run, policy):
                kind = GapKind.SHIPPER if is_logs else GapKind.NODE
                # Its exporter answered all along: what stopped is the series (the conntrack table), say that.
                source = need.lacks if node in seen.stopped_nodes else need.label
                node_gaps[node].append(Gap(kind, node, source, *grid.span(*run)))


def fell_silent(
    today: Mapping[str, float], earlier: Sequence[Mapping[str, float]], policy: CoveragePolicy
) -> list[str]:
    """Namespaces (or routes) that logged on every earlier day (``silence_lines`` an hour on average) and not today.

    The candidates only: whether their pods ran today is asked of the metrics (a namespace scaled to zero is quiet,
    not unseen). No earlier day, no candidate: a namespace that never logs is never expected to.
    """
    if not earlier:
        return []
    least = policy.silence_lines * 24
    steady = set.intersection(*({name for name, lines in day.items() if lines >= least} for day in earlier))
    return sorted(name for name in steady if today.get(name, 0.0) <= 0)


# What each kind of silent entity missed, as a gap's source.
_SILENT_SOURCE = {GapKind.NAMESPACE: "logs", GapKind.WORKLOAD: "logs", GapKind.ROUTE: "access log"}


def with_silent(finding: Finding, kind: GapKind, names: Sequence[str], window: Window) -> Finding:
    """``finding`` with ``names`` (namespaces or routes) unseen for the whole window, the grade rule applied."""
    if not names or finding.coverage is None:
        return finding
    gaps = tuple(Gap(kind, name, _SILENT_SOURCE[kind], window.start, window.end) for name in names)
    before = finding.coverage
    widened = replace(before, missing=(*before.missing, *gaps), partial=True)
    if before.partial:  # already judged partial: its note stands, the coverage now names the entities too
        return replace(finding, coverage=widened)
    return apply(replace(finding, coverage=None), widened, window)


# How a partial finding's error starts; the renderers say "partly seen" for it.
PARTIAL = "partial: "


def apply(finding: Finding, coverage: Coverage, window: Window) -> Finding:
    """The grade rule: a partial check keeps what it found, but a clean result on partial data is UNKNOWN."""
    if finding.status is Status.UNKNOWN or not coverage.partial:
        return replace(finding, coverage=coverage)
    note = f"{PARTIAL}{describe(coverage, window)}"
    if finding.status is Status.OK:
        return replace(
            finding,
            status=Status.UNKNOWN,
            summary=f"{finding.summary}, in the part seen",
            error=note,
            hint=_hint(coverage, window),
            coverage=coverage,
        )
    return replace(finding, evidence=(*finding.evidence, note), coverage=coverage)


def _hint(coverage: Coverage, window: Window) -> str:
    if coverage.error:
        return "The coverage queries failed: see the error, then ask again."
    kinds = {gap.kind for gap in coverage.missing}
    if GapKind.NAMESPACE in kinds:
        names = sorted({gap.name for gap in coverage.missing if gap.kind is GapKind.NAMESPACE})
        return (
            f"Are the logs of namespace {', '.join(names)} still shipped (the shipper's namespace filters and "
            "exclusions, the pods' log output)? Its pods ran, and it logged on every earlier day."
        )
    if GapKind.WORKLOAD in kinds:
        names = sorted({gap.name for gap in coverage.missing if gap.kind is GapKind.WORKLOAD})
        return (
            f"Are the logs of {', '.join(names)} still shipped (the shipper's exclusions and annotations for its "
            "pods, the pods' log output)? Its pods were ready, it logged on every earlier day, and its namespace's "
            "other workloads logged today."
        )
    if GapKind.ROUTE in kinds:
        names = sorted({gap.name for gap in coverage.missing if gap.kind is GapKind.ROUTE})
        return (
            f"Does the gateway still log {', '.join(names)} (its access-log settings, the route's listener, a "
            "renamed route)? The Service named like it had a ready endpoint, and it had requests on every earlier day."
        )
    if GapKind.SHIPPER in kinds:
        nodes = sorted({gap.name for gap in coverage.missing if gap.kind is GapKind.SHIPPER})
        return (
            f"Is the log shipper on {', '.join(nodes)} running and shipping (its pod's logs and restarts, "
            "its buffer on the node)?"
        )
    if GapKind.NODE in kinds:
        nodes = sorted({gap.name for gap in coverage.missing if gap.kind is GapKind.NODE})
        stopped = sorted({gap.source for gap in coverage.missing if gap.kind is GapKind.NODE})
        if all(source in _CARRIED for source in stopped):
            return (
                f"Does {', '.join(nodes)} still export its {' and '.join(stopped)} (a kernel module unloaded, a "
                f'node_exporter collector turned off), and is its exporter scraped (up{{instance=~"{nodes[0]}.*"}})?'
            )
        return f'Is every exporter on {", ".join(nodes)} running and scraped (up{{instance=~"{nodes[0]}.*"}})?'
    named = sorted(
        {(gap.source, gap.name) for gap in coverage.missing if gap.kind is GapKind.TARGET and gap.name != gap.source}
    )
    if named:
        source, target = named[0]
        return f'Is {source} {target} running and scraped (up{{instance="{target}"}}, its pod\'s restarts)?'
    if GapKind.TARGET in kinds:
        return "Is that exporter running and scraped over the whole window (its up series)?"
    if window.asked_at is not None:
        return f"The window is not over: ask again after {local_time(window.end.timestamp(), window)} for all of it."
    return "The backends hold no data for part of the window: is the day over, and is ingestion keeping up?"


# Words ------------------------------------------------------------------------------------------------------------


def _hours(seconds: float) -> str:
    hours = seconds / 3600
    if hours >= 1:
        text = f"{hours:.1f}".removesuffix(".0")
        return f"{text} h"
    return f"{max(1, round(seconds / 60))} min"


def when(gap: Gap, window: Window) -> str:
    """A gap's span as read at noon: "24 h", "after 05:10", "00:00–03:00", "05:00–09:00"."""
    at_start, at_end = gap.start <= window.start, gap.end >= window.end
    if at_start and at_end:
        return _hours(window.seconds)
    if at_end:
        return f"after {local_time(gap.start.timestamp(), window)}"
    # "until 03:00" would read as "seen until": a span that starts the window is said with both ends.
    return f"{local_time(gap.start.timestamp(), window)}–{local_time(gap.end.timestamp(), window)}"


def phrases(gaps: Iterable[Gap], window: Window) -> list[str]:
    """The unseen parts in words, one per node or source and span, most telling first."""
    unique = list(dict.fromkeys(gaps))
    out: list[str] = []
    hours = [gap for gap in unique if gap.kind is GapKind.HOURS]
    for start, end in sorted({(gap.start, gap.end) for gap in hours}):
        seconds = (end - start).total_seconds()
        blind = Gap(GapKind.HOURS, "", "", start, end)
        if end >= window.end and start > window.start:
            out.append(f"data until {local_time(start.timestamp(), window)} ({_hours(seconds)} unseen)")
        else:
            out.append(f"no data {when(blind, window)}" if start > window.start or end < window.end else "no data")
    if window.asked_at is not None and not any(gap.end >= window.end for gap in hours):
        # Asked before the window's end with data up to the minute: what is unseen is what has not happened yet.
        out.append(f"after {local_time(window.asked_at.timestamp(), window)} (not over yet)")
    grouped: dict[tuple[GapKind, str, datetime, datetime], list[str]] = defaultdict(list)
    for gap in unique:
        if gap.kind is not GapKind.HOURS and gap.source not in grouped[(gap.kind, gap.name, gap.start, gap.end)]:
            grouped[(gap.kind, gap.name, gap.start, gap.end)].append(gap.source)
    order = {
        GapKind.TARGET: 0,
        GapKind.NODE: 1,
        GapKind.SHIPPER: 2,
        GapKind.NAMESPACE: 3,
        GapKind.WORKLOAD: 4,
        GapKind.ROUTE: 5,
    }
    for (kind, name, start, end), sources in sorted(grouped.items(), key=lambda item: (order[item[0][0]], item[0])):
        span = when(Gap(kind, name, "", start, end), window)
        full = start <= window.start and end >= window.end
        if kind is GapKind.TARGET and name not in sources:
            out.append(
                f"{', '.join(sources)} {name} (down, {span})" if full else f"{', '.join(sources)} {name} down {span}"
            )
        elif kind is GapKind.TARGET:
            out.append(f"{', '.join(sources)} ({span})" if full else f"{', '.join(sources)} {span}")
        elif kind is GapKind.NODE:
            joined = ", ".join(sources)
            out.append(f"node {name} ({joined}, {span})" if full else f"node {name} ({joined} {span})")
        elif kind is GapKind.NAMESPACE:
            out.append(f"logs of namespace {name} ({span})" if full else f"logs of namespace {name} {span}")
        elif kind is GapKind.WORKLOAD:
            out.append(f"logs of workload {name} ({span})" if full else f"logs of workload {name} {span}")
        elif kind is GapKind.ROUTE:
            out.append(f"access log of route {name} ({span})" if full else f"access log of route {name} {span}")
        else:
            out.append(f"logs from {name} ({span})" if full else f"logs from {name} {span}")
    return out


def describe(coverage: Coverage, window: Window) -> str:
    """One check's coverage in words: "saw 1 h of 24; data until 01:00 (23 h unseen)"."""
    parts: list[str] = []
    if coverage.error:
        parts.append(f"coverage not measured ({coverage.error})")
    if coverage.fraction < 1:
        parts.append(f"saw {_hours(window.seconds * coverage.fraction)} of {_hours(window.seconds)}")
    parts.extend(phrases(coverage.missing, window))
    return "; ".join(parts)

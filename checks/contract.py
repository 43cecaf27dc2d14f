"""The contract between the digest engine and its checks.

A check is an async callable that takes the sources and the window and returns one `Finding`. It never raises for
a backend problem: the sources raise `SourceError` (the one error type of the source boundary) and the check turns
it into an UNKNOWN finding that carries the error. UNKNOWN is not OK (as in nagiosplugin): a check that could not
see is never reported healthy.

This module is the whole vocabulary the checks share; it imports nothing from `digest/` so that the engine depends
on the checks and never the other way round.
"""

from __future__ import annotations

import asyncio
import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Literal, Protocol

from .log_questions import Filter, LogsSource
from .promql import entity_matchers


class Status(enum.StrEnum):
    """How a check judged its signal. UNKNOWN means it could not judge: never treat it as OK."""

    OK = "OK"
    WARN = "WARN"
    CRIT = "CRIT"
    UNKNOWN = "UNKNOWN"


class SourceErrorKind(enum.StrEnum):
    """Why a backend could not answer; transient kinds may succeed on a later run."""

    UNREACHABLE = "unreachable"  # connection refused, DNS failure, TLS failure
    TIMEOUT = "timeout"
    HTTP = "http"  # the backend answered with an error status
    BAD_RESPONSE = "bad_response"  # the backend answered 200 with something that is not the expected JSON
    QUERY = "query"  # the backend rejected the query itself (400/422): a bug or an incompatible backend
    UNSUPPORTED = "unsupported"  # the backend has no way to answer this kind of question (not a failure to retry)


class SourceError(Exception):
    """The single error type raised by every source; its message is safe to show (no secrets, no bodies)."""

    def __init__(self, source: str, kind: SourceErrorKind, message: str) -> None:
        super().__init__(f"{source}: {message}")
        self.source = source
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return f"{self.source} {self.kind.value}: {self.message}"


@dataclass(frozen=True)
class Window:
    """A half-open time window [start, end) in UTC, with the zone the reader lives in (for display only)."""

    start: datetime
    end: datetime
    zone: tzinfo
    label: str  # how the window is named in the headline: "2026-07-20" or "24h to 2026-07-21 12:00"
    # When the digest was asked, if that is before the window's end: the window is not over, and its tail has not
    # happened yet, so no check can vouch for the whole of it. None for a window in the past (a replay, yesterday).
    asked_at: datetime | None = None

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("window bounds must be timezone-aware")
        if self.end <= self.start:
            raise ValueError("window end must be after its start")

    @property
    def duration(self) -> timedelta:
        return self.end - self.start

    @property
    def seconds(self) -> int:
        return int(self.duration.total_seconds())

    def promql_range(self) -> str:
        """The window's length as a PromQL range literal, e.g. ``86400s`` (exact, whatever the DST)."""
        return f"{self.seconds}s"


def rfc3339(moment: datetime) -> str:
    """``moment`` in UTC as RFC 3339 with ``Z`` and whole seconds: how every query pins its time."""
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)  # made per row of big answers: slots halve the cost
class Sample:
    """One series of an instant vector: its labels and value."""

    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)  # made per row of big answers: slots halve the cost
class RangeSeries:
    """One series of a range result: its labels and (unix seconds, value) points."""

    labels: Mapping[str, str]
    points: Sequence[tuple[float, float]]


class MetricsSource(Protocol):
    """A Prometheus-compatible query API (VictoriaMetrics, vmselect, Prometheus)."""

    async def instant(self, query: str, at: datetime) -> list[Sample]:
        """Evaluate ``query`` at ``at``; raise `SourceError` on any failure."""
        ...

    async def range(self, query: str, start: datetime, end: datetime, step_seconds: int) -> list[RangeSeries]:
        """Evaluate ``query`` over [start, end] every ``step_seconds``; raise `SourceError` on any failure."""
        ...


class Sightings:
    """Where a source was seen to hold data, or to hold none, by span of time: a look-back's memory.

    Whether a cluster ever had a component (an access log, a rule evaluator) is asked over the 30 days before each
    window (`checks.coverage.held_data_in`). On Loki a month of an absent stream is 720 hourly sub-queries, asked
    again every day, and by a replay for every day. What a window or an earlier look-back already answered of a log
    source is kept here, per source (`checks.coverage.source_key`), as spans ``[start, end)`` in unix seconds:
    a span that held data settles a look-back that contains it, and spans that held none are not asked again.
    ``unsaved`` is what was learnt since the engine last stored it (the state file's history keeps it between
    digests). Plain data, touched only on the event loop's thread (no thread lock, no I/O); `asking` orders the
    look-backs of one source.
    """

    def __init__(self, spans: Sequence[tuple[str, float, float, bool]] = ()) -> None:
        self._held: dict[str, list[tuple[float, float]]] = {}
        self._empty: dict[str, list[tuple[float, float]]] = {}
        self.unsaved: list[tuple[str, float, float, bool]] = []
        self._asking: dict[str, asyncio.Lock] = {}
        self.learn(spans)

    def asking(self, source: str) -> asyncio.Lock:
        """Held while one look-back of ``source`` asks.

        The windows a replay grades at once then ask in turn, and each asks only what the ones before it did not
        learn (a month once, then a day each).
        """
        return self._asking.setdefault(source, asyncio.Lock())

    def learn(self, spans: Sequence[tuple[str, float, float, bool]]) -> None:
        """Add spans (source, start, end, held) known from elsewhere (the state file): not ``unsaved``."""
        for source, start, end, held in spans:
            self._add(source, start, end, held)

    def take_unsaved(self) -> list[tuple[str, float, float, bool]]:
        """What was recorded since the last call (to store it), and forget that it was unsaved."""
        taken, self.unsaved = self.unsaved, []
        return taken

    def _add(self, source: str, start: float, end: float, held: bool) -> None:
        if end > start:
            (self._held if held else self._empty).setdefault(source, []).append((start, end))

    def record(self, source: str, start: float, end: float, held: bool) -> None:
        """``source`` held data somewhere in ``[start, end)`` (``held``), or none at all in it."""
        if end > start:
            self._add(source, start, end, held)
            self.unsaved.append((source, start, end, held))

    def held_within(self, source: str, start: float, end: float) -> bool:
        """Whether ``source`` is known to have held data inside ``[start, end)``."""
        return any(start <= first and last <= end for first, last in self._held.get(source, ()))

    def unknown(self, source: str, start: float, end: float) -> list[tuple[float, float]]:
        """The parts of ``[start, end)`` not known to have held nothing, newest first."""
        parts: list[tuple[float, float]] = []
        cursor = start
        for first, last in sorted(self._empty.get(source, ())):
            if last <= cursor or first >= end:
                continue
            if first > cursor:
                parts.append((cursor, first))
            cursor = last
        if cursor < end:
            parts.append((cursor, end))
        return parts[::-1]


@dataclass(frozen=True)
class Sources:
    """The backends a check may query, and when its answer is due.

    ``deadline`` is the event loop's time (``loop.time()``) at which the check's run is cut off, None when nothing
    cuts it off. A check gives up its optional questions (a note, never the grade) before it rather than be cut off
    with them: see `time_left`.
    """

    metrics: MetricsSource
    logs: LogsSource
    deadline: float | None = None
    # The metrics are scoped to one cluster and the logs are not (a log store shared by several clusters, read
    # whole): a node heard only in the logs is another cluster's, and their lines cannot be graded as this one's.
    logs_unscoped: bool = False
    # With ``logs_unscoped``, the label and value the metrics are scoped by (``cluster``, ``prod``): logs whose lines
    # carry that label with another value hold another cluster's, even where the node names are the same.
    logs_unscoped_by: tuple[str, str] = ("", "")
    # The reverse: the logs are scoped by this label (``cluster``) and the metrics are not. A metrics store holding
    # several values of it holds several clusters, whose OOM kills and nodes would be graded and named as this one's.
    metrics_unscoped_by: str = ""
    # The selectors scoping each store to this cluster, as written (``cluster="prod"``), "" when it is read whole; and
    # a label the logs' scope matches on, to ask the log store cheaply whether the scope finds anything. A scope that
    # matches nothing in the window makes every check on that store blind, and the digest names the setting.
    metrics_scope: str = ""
    logs_scope: str = ""
    logs_scope_label: str = ""
    # What each log source was seen to hold before, kept across the windows of one run (a replay's days, their trend
    # days) and, by the engine, in the state file: a look-back asks only what it does not already know.
    sightings: Sightings | None = None


# Kept between an optional question given up and the deadline: the check's own work after it (building the
# finding) needs a moment, and a cut-off at the same instant as the give-up would race it.
DEADLINE_MARGIN_SECONDS = 1.0


def time_left(sources: Sources) -> float | None:
    """Seconds an optional question may still wait before the check must answer (None: no deadline)."""
    if sources.deadline is None:
        return None
    return max(0.0, sources.deadline - asyncio.get_running_loop().time() - DEADLINE_MARGIN_SECONDS)


class Unit(enum.StrEnum):
    """What a measured number counts, so that a reader (or a rule) never guesses its scale."""

    COUNT = "count"
    SECONDS = "seconds"
    MINUTES = "minutes"
    RATIO = "ratio"  # 0..1
    BYTES = "bytes"
    CORES = "cores"
    PER_MINUTE = "per_minute"
    TIMESTAMP = "unix_seconds"  # a moment, not a duration


@dataclass(frozen=True)
class Quantity:
    """A measured number with its unit. Its absence from an offender means "not measured", never zero."""

    value: float
    unit: Unit

    def __post_init__(self) -> None:
        if not math.isfinite(self.value):
            raise ValueError(f"a quantity must be finite, got {self.value!r}")


@dataclass(frozen=True)
class Span:
    """A stretch of time [start, end) in unix seconds, as measured: an episode, an outage, a rollout."""

    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def shared_seconds(self, other: Span) -> float:
        """How long the two spans overlap (0 when they do not)."""
        return max(0.0, min(self.end, other.end) - max(self.start, other.start))

    def overlaps(self, other: Span, slack: float = 0.0) -> bool:
        """Whether the two spans share a moment, each widened by ``slack`` seconds (one scrape's uncertainty)."""
        return self.start - slack < other.end and other.start - slack < self.end


@dataclass(frozen=True)
class Event:
    """Something observed in the window that is not blamed but may explain what is: a rollout, a node NotReady.

    ``kind`` says what ("rollout", "node_not_ready"); ``labels`` identify it; ``span`` is when (a rollout's span starts
    when its ReplicaSet was created and ends when it was complete, or at the window's end if it never was).
    """

    kind: str
    labels: Mapping[str, str]
    span: Span
    facts: Mapping[str, Quantity] = field(default_factory=dict)


@dataclass(frozen=True)
class Look:
    """Where a reader looks to see for themselves: one check's signal, or one offender in it, over the window.

    ``metrics``: a PromQL expression worth graphing over the window (it is scoped to the cluster and put in a
    Grafana Explore or VMUI link by the renderer, which knows the UIs; the check only knows what to show).
    ``logs``: the log backend's own query for the lines (`LogsSource.reading_query`, pinned to the window).
    """

    metrics: str | None = None
    logs: str | None = None


def metrics_look(expression: str, labels: Mapping[str, str], keys: Sequence[str]) -> Look:
    """A `Look` graphing ``expression`` (a template whose ``{}`` takes the matchers) for the entity ``labels`` name.

    ``keys`` are the labels that identify the entity (``namespace``, ``pod``, ``container``); those empty in
    ``labels`` are left out, so a matcher is never ``=""`` (which would select series without the label).
    """
    return Look(metrics=expression.replace("{}", "{" + entity_matchers(labels, keys) + "}"))


@dataclass(frozen=True)
class Offender:
    """One thing the finding blames (a workload, a node, an upstream) with the number that blames it.

    ``labels`` identify it (namespace, pod, node, flag: strings); ``facts`` are what was measured about it, as
    numbers with units. A rule reads a fact with `fact`, which answers None when it was not measured.
    """

    labels: Mapping[str, str]
    value: float
    facts: Mapping[str, Quantity] = field(default_factory=dict)
    spans: Sequence[Span] = ()  # when it happened (episodes), where the check measured it
    look: Look | None = None  # where to see it (links in the HTML digest); never part of the verdict

    def fact(self, key: str) -> float | None:
        """The measured number called ``key``, or None when it was not measured (which is not zero)."""
        quantity = self.facts.get(key)
        return quantity.value if quantity is not None else None


@dataclass(frozen=True)
class Signature:
    """One shape of a workload's error lines: what they said, how often, when, and one of them as written.

    ``text`` is the message with numbers, hex, UUIDs and IPs collapsed; ``example`` one line of it, cut short. Both
    are redacted (`checks.redaction`) before they are stored here, and ``example`` is None when the policy shows no
    log line. ``share`` is of the workload's error lines; ``first`` and ``last`` are unix seconds. ``key`` is stable
    across days (a hash of the workload and the redacted shape as the backend grouped it): what "new today" compares.
    """

    text: str
    lines: float
    share: float
    first: float
    last: float
    example: str | None = None
    key: str = ""


@dataclass(frozen=True)
class WorkloadSignatures:
    """The top signatures of one workload's error lines, and how many distinct ones it wrote (``capped``: at least).

    ``keys`` are the keys of every signature answered, the top ones included (at most the backend's group limit).
    """

    labels: Mapping[str, str]
    signatures: Sequence[Signature]
    distinct: int
    capped: bool = False
    keys: frozenset[str] = frozenset()
    # The shapes were read from one minute in this many (a flood's are, at a bounded cost): each signature's lines are
    # the sample's times this (an estimate), its first and last times the sample's, ``distinct`` at least that many.
    sampled_every: int = 1


class Backend(enum.StrEnum):
    """Which backend answers for a source."""

    METRICS = "metrics"
    LOGS = "logs"


@dataclass(frozen=True)
class Need:
    """A source a check depends on, and the key series (metrics) or log filter (logs) that proves it was there.

    ``label`` is what a reader calls the source ("node_exporter", "logs"). ``per_node`` sources are expected on
    every node of the fleet. ``up_target`` means the query is an ``up`` series: seen only when it is 1.
    ``optional`` sources are measured only when they held any data in the window (Envoy's access log beside Istio).
    ``may_lack``: a component a cluster may simply not have (a gateway, a mesh, a rule evaluator), as opposed to
    what every cluster has (kube-state-metrics, node_exporter, pod logs). When every source of a check is such a
    component and none held data in the window nor in the ``deployed_days`` before it, the check is *not watched*
    (`Unwatched`): no grade effect, named once, never UNKNOWN every day about what was never there.
    """

    label: str
    backend: Backend
    query: str = ""  # metrics: the key series
    per_node: bool = False
    up_target: bool = False
    optional: bool = False
    lines: Filter | None = None  # logs: the lines that prove the source (None: every line)
    # The source this input is one series of (the conntrack limit is node_exporter's): where that source is unseen
    # on the same node and span, this input's gap says nothing more and is not named twice.
    part_of: str = ""
    may_lack: bool = False
    # Per node, but expected only on the nodes that had it in the window (the kernel OOM counter, which an old kernel
    # or a disabled collector never exports): a node whose series stopped while the fleet's went on is a gap; a node
    # that never had it is not.
    own_nodes: bool = False
    # A series a node's exporter may simply not have (the conntrack table without the nf_conntrack module, the
    # kernel's OOM counter on an old kernel): ``carrier`` is a series that proves the exporter that would carry it
    # answered (its ``up``). Never seen in ``deployed_days`` while the carrier answered in the window: the cluster
    # lacks it — not a blind spot, and a check all of whose sources are lacking is not watched. The carrier silent
    # too: never seen, blind. ``lacks`` is how a reader calls what is missing ("conntrack table").
    carrier: str = ""
    lacks: str = ""


InputKind = Literal["series", "lines", "log_field", "json_key"]


@dataclass(frozen=True)
class Input:
    """One thing a check reads, declared beside its queries so that `digest doctor` can say whether the data has it.

    ``kind`` and ``name``: a metric family as the check's PromQL writes it (``series``); the log lines the check
    reads, named as a reader calls them (``lines``: "pod logs", "access log"); a role of a log line (``log_field``:
    ``namespace``, ``pod``…, found where the policy's ``logs.fields`` says); a key of a JSON message (``json_key``:
    ``name`` is the default key, and ``policy_key`` the policy field that renames it).

    ``what`` says in a few words what the check reads it for. ``required``: the check cannot judge without it; an
    optional input only sharpens or decorates the verdict (the check degrades without it). ``policy_key`` is the
    policy key to change when the data has it elsewhere (a job, a field name, a scope); with ``by_job`` the check
    reads only the series whose ``job`` matches the regex that key holds. ``fix`` is what to change outside the
    policy when it is not there at all (an exporter's collector, a kube-state-metrics flag). ``instead_of`` names
    the family this one replaces where that one is absent (legacy Endpoints beside EndpointSlices).

    A declaration, not a query: the checks' own questions are unchanged, and a test keeps the two in step.
    """

    kind: InputKind
    name: str
    what: str
    required: bool = True
    policy_key: str | None = None
    by_job: bool = False
    fix: str = ""
    instead_of: str | None = None


class GapKind(enum.StrEnum):
    """What part of the window or of the fleet a check did not see."""

    HOURS = "hours"  # no source the digest asks held any data then (a cut, or the window's end not collected yet)
    TARGET = "target"  # one scrape target or log stream (kube-state-metrics, access logs) had no data then
    NODE = "node"  # one node's exporter (node_exporter, cAdvisor) had no data then
    SHIPPER = "shipper"  # no log line came from one node then: its log shipper is stuck or gone
    NAMESPACE = "namespace"  # no log line came from a namespace that logged every earlier day, while its pods ran
    WORKLOAD = "workload"  # no log line came from a workload that logged every earlier day, while its pods were ready
    ROUTE = "route"  # no access-log line came for a route that had requests every earlier day, while its pods ran


@dataclass(frozen=True)
class Gap:
    """One unseen part: ``source`` (what was missing) on ``name`` (a node, or the target) over [start, end)."""

    kind: GapKind
    name: str
    source: str
    start: datetime
    end: datetime


@dataclass(frozen=True)
class Coverage:
    """How much of the window and of the fleet a check saw (see `checks.coverage`).

    ``fraction`` is the share of the window in which every source the check depends on answered with data;
    ``missing`` the unseen parts that count; ``excused`` nodes whose silence is expected, with why ("drained",
    "not ready", "expected absent"). ``partial`` is the verdict of the policy's thresholds: a partial check can
    never be a clean OK. ``error`` says why coverage could not be measured (then it is partial too).
    """

    fraction: float
    missing: tuple[Gap, ...] = ()
    excused: tuple[tuple[str, str], ...] = ()
    partial: bool = False
    error: str | None = None
    # Sources with no data in the window nor in the days before it (``deployed_days``): never deployed, not gone.
    # Not a gap: the check that needs one says it could not look, and the day is not graded on it.
    never_seen: tuple[str, ...] = ()
    # Nodes whose exporter answered and never carried a series the rest of the fleet has (one node without the
    # nf_conntrack module): not watched there, said once and quietly, never a gap (`checks.coverage`).
    lacking: tuple[NodeLacks, ...] = ()


@dataclass(frozen=True)
class NodeLacks:
    """One node that lacks what the rest of the fleet has: its exporter answered, the series never came in ``days``.

    ``lacks`` as a reader calls it ("conntrack table"). A node's input that is there elsewhere and simply not on this
    node (an eBPF node pool, a kernel built without the module) is not watched on that node, not unseen.
    """

    node: str
    lacks: str
    days: int


@dataclass(frozen=True)
class Unwatched:
    """A check this cluster gives nothing to watch: every source it reads is a component never seen here.

    ``sources`` are those components as a reader calls them ("access logs", "Istio metrics"); ``days`` the look-back
    in which none held data (the coverage policy's ``deployed_days``). Not a blind spot and not a grade: the digest
    names it once, quietly, with the policy key that leaves it out (``<check>.enabled: false``).
    """

    name: str
    sources: tuple[str, ...]
    days: int


@dataclass(frozen=True)
class CountedFrom:
    """Where a log check's counts came from: seconds of its window read from recorded counts, and scanned.

    Recorded counts are per-minute series a rule evaluator wrote (vmalert, Loki's ruler); the rest was counted in the
    log backend itself. ``note`` says why records were not used where they exist (they contradicted themselves).
    """

    recorded_seconds: float
    scanned_seconds: float
    note: str = ""

    @property
    def source(self) -> str:
        """``recorded``, ``scanned`` or ``both``."""
        if self.recorded_seconds and self.scanned_seconds:
            return "both"
        return "recorded" if self.recorded_seconds else "scanned"


@dataclass(frozen=True)
class Finding:
    """What one check says about the window.

    ``penalty`` is the points this finding costs before any cap across checks; ``value`` is the headline number
    (None when unknown); ``evidence`` are the short lines shown under a deduction, most important first.
    """

    name: str
    status: Status
    penalty: int
    value: float | None
    summary: str
    offenders: Sequence[Offender] = ()
    hint: str = ""
    error: str | None = None
    evidence: Sequence[str] = field(default_factory=tuple)
    coverage: Coverage | None = None  # None: not measured (coverage disabled in the policy)
    # The metric families (or log streams) the verdict was read from, and those it would have used but did not
    # find, with why ("prober_probe_total: not scraped"): a rule that needs them says it cannot tell.
    observed: Sequence[str] = field(default_factory=tuple)
    unobserved: Sequence[str] = field(default_factory=tuple)
    events: Sequence[Event] = field(default_factory=tuple)
    # What the error lines said (error_lines), per workload that cost points or stood out; ``signatures_note`` says
    # why there are none when some were expected ("not available on Loki…", the backend's error).
    signatures: Sequence[WorkloadSignatures] = field(default_factory=tuple)
    signatures_note: str = ""
    # Log lines per namespace in the window, from a check that counted every line (error_lines): the digest compares
    # them with earlier days, so that a namespace that always logged and fell silent today is named as unseen.
    namespace_lines: Mapping[str, float] = field(default_factory=dict)
    # The same per workload (``namespace/workload``): one workload's logs lost while its namespace's others arrive.
    workload_lines: Mapping[str, float] = field(default_factory=dict)
    # Access-log lines per route (upstream) in the window (envoy_flags): a route that had requests every earlier day
    # and none today, its namespace's pods running, is unseen rather than a route without 5xx.
    route_lines: Mapping[str, float] = field(default_factory=dict)
    # Where to see the check's signal as a whole (links in the HTML digest), beside each offender's own look.
    look: Look | None = None
    # A log check's counts: recorded, scanned or both (None: the check counted no log lines).
    counted_from: CountedFrom | None = None

    def __post_init__(self) -> None:
        if self.penalty < 0:
            raise ValueError("penalty cannot be negative")
        if self.status is Status.OK and self.penalty:
            raise ValueError("an OK finding cannot cost points")
        if self.status is Status.OK and self.error:
            raise ValueError("a finding with an error cannot be OK")
        if self.status is Status.OK and self.coverage is not None and self.coverage.partial:
            raise ValueError("a finding on partly seen data cannot be OK")


class Check(Protocol):
    """A check: sources and window in, one finding out. It must not raise for backend failures."""

    @property
    def name(self) -> str:
        """The check's name as it appears in the digest and its JSON."""
        ...

    def needs(self) -> Sequence[Need]:
        """The sources this check depends on, whose coverage of the window and the fleet `checks.coverage` measures."""
        ...

    async def __call__(self, sources: Sources, window: Window) -> Finding: ...


def unknown(name: str, summary: str, error: str | None, hint: str = "") -> Finding:
    """The finding of a check that could not see its signal."""
    return Finding(name=name, status=Status.UNKNOWN, penalty=0, value=None, summary=summary, hint=hint, error=error)


def grade(level: int, warn_penalty: int, crit_penalty: int) -> tuple[Status, int]:
    """Status and penalty for a threshold level (0 none crossed, 1 the warning one, 2 the critical one)."""
    if level >= 2:
        return Status.CRIT, crit_penalty
    if level == 1:
        return Status.WARN, warn_penalty
    return Status.OK, 0


def fmt_int(value: float) -> str:
    """A count with thousands separators, as read on a phone: 4,539,734."""
    return f"{round(value):,}"


def fmt_percent(ratio: float) -> str:
    """A ratio as a percentage with the precision its size deserves: 72 %, 0.017 %."""
    percent = ratio * 100
    if percent >= 10:
        # Half up, as people round: 96.5 % reads "97 %", not the banker's "96 %".
        return f"{math.floor(percent + 0.5)} %"
    if percent >= 1:
        return f"{percent:.1f} %"
    if percent >= 0.01:
        return f"{percent:.3g} %"
    return f"{percent:.2g} %"


def fmt_duration(seconds: float) -> str:
    """A duration as read on a phone: 45 s, 4 min 30 s, 2 h 5 min."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, rest = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min" + (f" {rest} s" if rest else "")
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


def local_time(unix_seconds: float, window: Window) -> str:
    """A moment in the reader's zone: HH:MM when the window is one local day, else MM-DD HH:MM."""
    moment = datetime.fromtimestamp(unix_seconds, tz=window.zone)
    last_instant = window.end - timedelta(microseconds=1)
    if window.start.astimezone(window.zone).date() == last_instant.astimezone(window.zone).date():
        return moment.strftime("%H:%M")
    return moment.strftime("%m-%d %H:%M")


def node_name(instance: str) -> str:
    """A node_exporter instance without its port: ``pi5-2:9100`` → ``pi5-2``."""
    return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance

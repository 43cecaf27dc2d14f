"""The questions the log checks ask, in no backend's language: a check says *what* to count, a backend says *how*.

A log check never writes LogsQL or LogQL. It asks a `LineCount` ("how many lines of the window match this, grouped
by these fields, per bucket") or a `PeakCount` ("per group, the busiest bucket and the total"), with filters built
from a tiny algebra (`Is`, `OneOf`, `Matches`, `Empty`, `HasWord`, `AllOf`, `AnyOf`, `Not`) over *logical* fields:

* roles — ``namespace``, ``pod``, ``container``, ``node``, ``level``, ``stream`` — that each backend maps to its
  shipper's field or label names (Vector's ``kubernetes.pod_namespace`` for VictoriaLogs, Promtail/Alloy's
  ``namespace`` label for Loki; the policy's ``logs.fields`` overrides them);
* `Json` keys of a JSON message (Envoy's access log), parsed by the backend (``unpack_json``, ``| json``).

Counting always happens in the backend (LogsQL ``stats``, metric LogQL ``count_over_time``); the answer is a list of
`CountRow`, keyed by the same logical names, so a check reads ``row.group["namespace"]`` on every backend (coverage's
bucketed counts come as one `LineSeries` per group instead: the same numbers, without an object per bucket).

`Native` carries a filter the policy wrote in the backend's own language (``scope_filter``, ``error_filter``): it is
passed through untouched, and a backend refuses a `Native` it cannot place rather than guess.

Every question is pinned to its `Window` ([start, end), absolute). A backend that can only answer part of a question
(a series limit, a point limit) raises `SourceError`: a truncated count is never passed off as the whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:  # the contract imports this module: its types are only annotations here
    from .contract import Window

Role = Literal["namespace", "pod", "container", "node", "level", "stream"]
ROLES: tuple[Role, ...] = ("namespace", "pod", "container", "node", "level", "stream")
_ROLE_NAMED: Mapping[str, Role] = {role: role for role in ROLES}


@dataclass(frozen=True)
class Json:
    """A top-level key of a JSON log message (``response_code`` of an Envoy access-log line)."""

    key: str


LogField = Role | Json


def field_label(one: LogField) -> str:
    """The name a field's value has in a `CountRow`: the role, or the JSON key."""
    return one.key if isinstance(one, Json) else one


@dataclass(frozen=True)
class Is:
    """Lines whose ``field`` is exactly ``value``."""

    field: LogField
    value: str


@dataclass(frozen=True)
class OneOf:
    """Lines whose ``field`` is exactly one of ``values`` (any case unless ``ignore_case`` is False)."""

    field: LogField
    values: tuple[str, ...]
    ignore_case: bool = True


@dataclass(frozen=True)
class Matches:
    """Lines whose whole ``field`` matches the RE2 ``regex`` (anchored at both ends, as Prometheus matchers are)."""

    field: LogField
    regex: str


@dataclass(frozen=True)
class Empty:
    """Lines without ``field``, or with it empty."""

    field: LogField


@dataclass(frozen=True)
class HasWord:
    """Lines whose message contains ``word`` as a whole word, in any case."""

    word: str


@dataclass(frozen=True)
class AllOf:
    """Lines matching every part; no part at all matches every line."""

    parts: tuple[Filter, ...] = ()


@dataclass(frozen=True)
class AnyOf:
    """Lines matching at least one part."""

    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class Not:
    """Lines not matching ``part``."""

    part: Filter


@dataclass(frozen=True)
class Native:
    """A filter written by the policy in the backend's own language, passed through as is."""

    text: str


Filter = Is | OneOf | Matches | Empty | HasWord | AllOf | AnyOf | Not | Native
EVERY_LINE: Filter = AllOf()


def json_keys(one: Filter) -> list[str]:
    """The JSON keys ``one`` reads, in order of appearance (a backend parses them out of the message first)."""
    match one:
        case (
            Is(field=Json(key=key))
            | OneOf(field=Json(key=key))
            | Matches(field=Json(key=key))
            | Empty(field=Json(key=key))
        ):
            return [key]
        case AllOf(parts=parts) | AnyOf(parts=parts):
            return [key for part in parts for key in json_keys(part)]
        case Not(part=part):
            return json_keys(part)
    return []


def roles_equal(pairs: Mapping[str, str]) -> Filter:
    """Lines whose every named role holds its value: ``{"namespace": "envoy-gateway-system", "container": "envoy"}``.

    The policy loader refuses a key that is not a role; one given here anyway is an error, never skipped.
    """
    parts: list[Filter] = []
    for name, value in pairs.items():
        role = _ROLE_NAMED.get(name)
        if role is None:
            raise ValueError(f"{name!r} is not a log role (known: {', '.join(ROLES)})")
        parts.append(Is(role, value))
    return every(*parts)


def native(text: str) -> Filter:
    """A filter the policy wrote in the backend's language; every line when it wrote none."""
    return Native(text) if text else EVERY_LINE


def every(*parts: Filter | None) -> Filter:
    """The conjunction of the given filters, leaving out None and empty conjunctions."""
    kept = tuple(part for part in parts if part is not None and part != EVERY_LINE)
    if not kept:
        return EVERY_LINE
    return kept[0] if len(kept) == 1 else AllOf(kept)


@dataclass(frozen=True)
class LineCount:
    """How many lines of ``window`` match ``scope`` and each column's filter, per group and bucket.

    ``columns`` name the counts: ``("lines", EVERY_LINE)`` counts every line in scope, ``("errors", error_rule)`` the
    error lines among them. ``by`` groups rows (empty: one row per bucket). ``bucket_seconds`` cuts the window into
    buckets that start at multiples of that many seconds since the epoch plus ``bucket_offset_seconds`` (a reader's
    whole hours in a zone at UTC+05:30); None: the whole window is one bucket. A group appears in a bucket only if
    it has a line there (in any column); a column may be missing from a row where its count is 0.
    """

    window: Window
    scope: Filter = EVERY_LINE
    columns: tuple[tuple[str, Filter], ...] = (("lines", EVERY_LINE),)
    by: tuple[LogField, ...] = ()
    bucket_seconds: int | None = None
    bucket_offset_seconds: int = 0


@dataclass(frozen=True)
class PeakCount:
    """Per group, the most lines in any one bucket of ``bucket_seconds`` (column ``peak``) and the total (``lines``)."""

    window: Window
    by: tuple[LogField, ...]
    bucket_seconds: int
    scope: Filter = EVERY_LINE


@dataclass(frozen=True, slots=True)  # made per row of big answers: slots halve the cost
class CountRow:
    """One group's counts: ``group`` maps each `by` field's label to its value; ``bucket`` is the bucket's start."""

    group: Mapping[str, str]
    counts: Mapping[str, float]
    bucket: float | None = None  # unix seconds; None when the question had no buckets
    notes: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class LineSeries:
    """One group's lines per bucket: the answer to a bucketed `LineCount` of one column, one object per group.

    ``lines`` maps each bucket's start (unix seconds) to the group's lines in it; a bucket without a line is absent.
    The same numbers as the question's `CountRow` list (`series_of`), folded per group: coverage asks 200 nodes ×
    144 buckets a day, and an object per row was the largest part of a replay's client time.
    """

    group: Mapping[str, str]
    lines: Mapping[float, float]


def series_column(question: LineCount) -> str:
    """The column of a question a `LineSeries` answers (bucketed, one column); `ValueError` for any other."""
    if question.bucket_seconds is None or len(question.columns) != 1:
        raise ValueError("a LineSeries answers a bucketed LineCount of one column")
    return question.columns[0][0]


def series_of(rows: Iterable[CountRow], column: str) -> list[LineSeries]:
    """A bucketed `LineCount`'s rows as one `LineSeries` per group (what a backend without a faster path answers).

    Rows of one group and bucket are added up first, signs included (recorded counts hand a subtracted family's rows
    negative, and their records and scanned gaps as separate rows), then the buckets and the groups without a line
    are left out.
    """
    return summed_series((row.group, row.bucket, row.counts.get(column)) for row in rows)


def summed_series(points: Iterable[tuple[Mapping[str, str], float | None, float | None]]) -> list[LineSeries]:
    """(group, bucket, count) points added up per group and bucket as one `LineSeries` per group (`series_of`).

    A point without a bucket or a count is left out; so are the buckets and the groups without a line once added up.
    """
    # A series' points share one group mapping (a day's per-node coverage is ~17,000 rows of 200 groups): they are
    # added up per mapping first, keyed by its identity (each entry holds its mapping, so the identity stays its
    # own), and `added_series` then adds up the mappings that are equal and leaves out what holds no line.
    per_mapping: dict[int, tuple[Mapping[str, str], dict[float, float]]] = {}
    for group, bucket, count in points:
        if count is None or bucket is None:
            continue
        entry = per_mapping.get(id(group))
        if entry is None:
            entry = per_mapping[id(group)] = (group, {})
        lines = entry[1]
        lines[bucket] = lines.get(bucket, 0.0) + count
    return added_series([per_mapping.values()])


def added_series(parts: Iterable[Iterable[tuple[Mapping[str, str], Mapping[float, float]]]]) -> list[LineSeries]:
    """Parts of one bucketed answer (group, lines per bucket) added up per group and bucket, as `series_of` adds rows.

    A part's lines may be negative (recorded counts of a subtracted family); the buckets and the groups without a
    line once added up are left out.
    """
    per_group: dict[tuple[tuple[str, str], ...], tuple[Mapping[str, str], dict[float, float]]] = {}
    for part in parts:
        for group, lines in part:
            key = tuple(sorted(group.items()))
            known = per_group.get(key)
            if known is None:
                per_group[key] = (group, dict(lines))
                continue
            added = known[1]
            for bucket, value in lines.items():
                added[bucket] = added.get(bucket, 0.0) + value
    folded = (
        LineSeries(group=group, lines={bucket: value for bucket, value in lines.items() if value > 0})
        for group, lines in per_group.values()
    )
    return [one for one in folded if one.lines]


class AnswerClock:
    """Seconds a question's requests may take, counted from when the source sends the first of them.

    A timeout around the question would also count the time its requests wait for a query slot behind other checks'
    queries (a source bounds its queries in flight), and would say "no answer" of a backend never asked. The source
    starts the clock when it sends the question's first request and bounds each request by what is left; one clock
    may be shared by several questions, which then share the seconds.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._started: float | None = None

    def start(self, now: float) -> None:
        """Start counting at ``now`` (the event loop's time), unless a request already started it."""
        if self._started is None:
            self._started = now

    def remaining(self, now: float) -> float:
        """Seconds left at ``now``: all of them until a request is sent."""
        if self._started is None:
            return self.seconds
        return self.seconds - (now - self._started)

    @property
    def started(self) -> bool:
        """Whether a request of the question was sent."""
        return self._started is not None


def sampled_minutes(window: Window, every: int) -> list[tuple[int, int]]:
    """The [start, end) unix seconds of the minutes a sample of one in ``every`` reads: the middle of each run.

    Minutes start on the minute (a window that does not is clipped to it); the last run may be short of ``every``.
    """
    first = -(-int(window.start.timestamp()) // 60) * 60
    end = int(window.end.timestamp()) // 60 * 60
    middle = every // 2
    return [(minute, minute + 60) for minute in range(first + middle * 60, end, every * 60)]


@dataclass(frozen=True)
class ShapeCount:
    """Which message shapes the lines matching ``lines`` in ``window`` have, the most frequent first.

    A shape is the message with numbers, hex, UUIDs, IPs and times collapsed (VictoriaLogs' ``collapse_nums
    prettify``), cut to its first ``length`` characters so that one pathological message cannot make a group key of
    unbounded size. The backend groups the lines by shape and answers at most ``group_limit`` shapes, the largest
    first: the ``top`` are shown, and the number answered is how many distinct shapes there were (at least, when it
    reaches the limit).

    ``clock``, when given, bounds the time the backend takes to answer (not the time the question waits for a query
    slot): a request sent after it ran out fails with a TIMEOUT `SourceError`.

    ``sample_every`` > 1 asks for the shapes of one minute in that many (a systematic sample of the window's minutes,
    the middle one of each run of that many): what a flood said, read at a bounded cost. A backend that samples says
    so in its answer (`Shapes.sampled_every`); one that cannot answers for every minute and says that.
    """

    window: Window
    lines: Filter
    top: int = 3
    length: int = 160
    group_limit: int = 200
    clock: AnswerClock | None = field(default=None, compare=False)
    sample_every: int = 1


@dataclass(frozen=True)
class Shape:
    """One message shape: its lines, the first and last of them (unix seconds), and one line of it as written.

    ``text`` is made for reading; ``key`` is the shape as the backend grouped it, the same on every day the same
    message was written (the readable text may restore words from the example, which varies).
    """

    text: str
    lines: float
    first: float
    last: float
    example: str
    key: str = ""


@dataclass(frozen=True)
class Shapes:
    """The answer to a `ShapeCount`: the top shapes, and how many there were (``capped``: at least that many).

    ``keys`` are every answered shape's key, the top ones included: what a history of the workload's shapes keeps.
    ``unshaped`` counts the lines of the question that no answered shape covers, and ``unshaped_why`` says why, in
    words for the reader: a backend that can only name some of the shapes (Loki's pattern ingester keeps the last
    hours) says how many lines it could not name instead of passing the rest off as the whole.
    """

    top: tuple[Shape, ...]
    distinct: int
    capped: bool = False
    keys: tuple[str, ...] = ()
    unshaped: float = 0.0
    unshaped_why: str = ""
    # One minute in this many was read (the question's ``sample_every`` if the backend could sample, or more where it
    # bounds the minutes it reads: Loki, 64): each shape's ``lines`` are those of the sampled minutes, its first and
    # last times the sample's.
    sampled_every: int = 1


class LogsSource(Protocol):
    """A log backend that counts lines server-side (VictoriaLogs, Loki); it never hands lines to the digest."""

    @property
    def name(self) -> str:
        """The backend's name for messages ("VictoriaLogs", "Loki")."""
        ...

    @property
    def language(self) -> str:
        """The backend's query language, as hints name it ("LogsQL", "LogQL")."""
        ...

    async def count(self, question: LineCount) -> list[CountRow]:
        """Answer ``question``; raise `SourceError` on any failure, including an answer the backend cut short."""
        ...

    async def peak(self, question: PeakCount) -> list[CountRow]:
        """Answer ``question``; raise `SourceError` on any failure, including an answer the backend cut short."""
        ...

    async def series(self, question: LineCount) -> list[LineSeries]:
        """Answer a bucketed ``question`` of one column per group (`LineSeries`); `SourceError` as for `count`."""
        ...

    async def shapes(self, question: ShapeCount) -> Shapes:
        """Answer ``question`` in the backend; `SourceError` of kind UNSUPPORTED where it cannot group by shape."""
        ...

    async def values(self, name: str, window: Window) -> list[str]:
        """The values the field or stream label ``name`` took in ``window`` (the scope's label: which clusters).

        Read from the backend's index or a count grouped by it, never from lines; `SourceError` on any failure.
        """
        ...

    def reading_query(self, window: Window, lines: Filter, most_repeated: bool = False) -> str:
        """The query a reader pastes into the backend's UI to read these lines (never sent).

        The first lines of the window, or with ``most_repeated`` the messages repeated most (numbers folded where the
        language can), which is what a storm of lines usually is.
        """
        ...

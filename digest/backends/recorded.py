"""Recorded log counts: the log checks' per-minute counts read from the metrics store, the rest scanned.

A rule evaluator (vmalert with ``type: vlogs`` groups, Loki's ruler) counts the log lines every minute and writes
the counts into VictoriaMetrics or Prometheus (`digest rules` writes those rules from the policy). A digest that
reads them costs the same on a quiet day and on a flood: a day is 1,440 points per group instead of every line.

**Families.** A `Family` is one recording rule: the lines of a scope, counted per minute by some fields
(``namespace``, ``pod``, ``node``), in columns (``total``, ``errors``, …); its first column counts every line. The
policy's checks decide the families (`digest.pipeline.recording`), so the rules and the checks' questions come
from one source of truth. A check's question is answered from a family when its filters are the family's (the
question's scope and column, together, equal the family's scope and one of its columns), its fields are among the
family's and its buckets are whole minutes; otherwise it is scanned as before.

**Names carry a version.** A family's record name is ``digest:<family>:v<8 hex>``, the hex a hash of everything
that decides what it counts (its filters, fields, the policy's field names and the cluster's stream scope): a policy
that changes the error rule reads and writes new names, and old and new counts never mix.

**Heartbeat and coverage.** Besides the families, one rule counts every family's lines in one row a minute
(``digest:recorder:v…``, a column per family), so that "no sample" can be told apart from "no line": a minute is
*recorded* for a family when the heartbeat has it and the family's per-group totals add up to the heartbeat's count
(a rule that failed, timed out or was written in part for that minute does not). Minutes not recorded — the
recorder down, late, or started after the window began — are *scanned* directly in the log backend and added, so a
count is never silently short; the `CountedFrom` of each question says how many seconds came from where. Counts that
contradict their heartbeat, or minutes recorded twice (live and replayed), are not trusted at all: the whole window
is scanned and the note says why.

**Two stamps.** Evaluated live, a rule's sample at ``t`` counts the minute before ``t`` (vmalert evaluates LogsQL
with ``_time:1m`` at ``t``); replayed (``vmalert -replay``), VictoriaLogs' range query stamps each minute's count at
the minute's start. The two are told apart by the ``digest_stamp`` label the rules carry (``end``, ``start``), and a
window [a, b) reads the samples at (a, b] of the first and [a, b) of the second.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from checks.contract import CountedFrom, RangeSeries, Sample, Window
from checks.log_questions import (
    EVERY_LINE,
    CountRow,
    Filter,
    Json,
    LineCount,
    LineSeries,
    LogField,
    LogsSource,
    PeakCount,
    ShapeCount,
    Shapes,
    every,
    field_label,
    series_column,
    series_of,
)

MINUTE = 60
STAMP_LABEL = "digest_stamp"
COLUMN_LABEL = "stats_result"  # where vmalert keeps a LogsQL stats result's name; Loki's rules set it themselves
SIGN_LABEL = "digest_sign"  # Loki's rules: a column counted as a sum of terms, some subtracted
Stamp = Literal["end", "start"]
STAMPS: tuple[Stamp, ...] = ("end", "start")
# More runs of unrecorded minutes than this in one window: one scan of the whole window is cheaper than many.
MAX_GAP_RUNS = 8

_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def label_of(one: LogField) -> str:
    """The label a family's field has on its recorded series: the role's name, ``json_<key>`` for a JSON key."""
    if isinstance(one, Json):
        return "json_" + _LABEL_UNSAFE.sub("_", one.key)
    return one


@dataclass(frozen=True)
class Family:
    """One recording rule: per minute, the lines of ``scope`` per ``by`` group, in ``columns`` (the first: all)."""

    name: str
    scope: Filter
    by: tuple[LogField, ...]
    columns: tuple[tuple[str, Filter], ...]

    def __post_init__(self) -> None:
        if not self.columns or self.columns[0][1] != EVERY_LINE:
            raise ValueError("a family's first column counts every line of its scope (the heartbeat's check)")

    @property
    def total_column(self) -> str:
        return self.columns[0][0]

    def lines(self, column: str) -> Filter:
        """The lines a column counts: the scope and the column's filter."""
        return every(self.scope, dict(self.columns)[column])


@dataclass(frozen=True)
class RecordingPlan:
    """The families the policy's checks read, and the versioned names their rules write.

    ``identity`` is whatever else decides what a family counts (the policy's field names, the cluster's scope on a
    shared store), so that it changes the names too.
    """

    families: tuple[Family, ...]
    identity: str = ""

    def version(self, family: Family) -> str:
        """Eight hex digits of a hash of everything that decides what ``family`` counts."""
        return hashlib.sha256(repr((family, self.identity)).encode()).hexdigest()[:8]

    def record(self, family: Family) -> str:
        """The family's metric name: ``digest:pod_lines:v1a2b3c4d``."""
        return f"digest:{family.name}:v{self.version(family)}"

    @property
    def heartbeat(self) -> str:
        """The heartbeat's metric name, versioned by every family's version."""
        versions = "".join(self.version(family) for family in self.families)
        return f"digest:recorder:v{hashlib.sha256(versions.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class _Match:
    """How a question is read from a family: its columns' names in the family, and the fields it groups by."""

    family: Family
    columns: Mapping[str, str]  # question column -> family column
    by: tuple[LogField, ...]


@dataclass(frozen=True)
class Minutes:
    """Per family, the recorded minutes of a window (their starts, unix seconds) and how they were stamped."""

    recorded: Mapping[str, Mapping[int, Stamp]]
    notes: Mapping[str, str] = field(default_factory=dict)


def match(plan: RecordingPlan, question: LineCount | PeakCount) -> _Match | None:
    """The family that answers ``question`` from its records, or None (then it is scanned)."""
    if isinstance(question, PeakCount):
        if question.bucket_seconds != MINUTE:
            return None
        wanted = {"peak": question.scope}
    else:
        bucket = question.bucket_seconds
        if bucket is not None and (bucket % MINUTE or question.bucket_offset_seconds % MINUTE):
            return None
        wanted = {name: every(question.scope, column) for name, column in question.columns}
    for family in plan.families:
        if not set(question.by) <= set(family.by):
            continue
        by_lines = {family.lines(name): name for name, _ in family.columns}
        columns = {name: by_lines[lines] for name, lines in wanted.items() if lines in by_lines}
        if len(columns) == len(wanted):
            return _Match(family, columns, question.by)
    return None


class RecordsReader(Protocol):
    """The metrics store the records are in, read without its cache (`PrometheusSource`)."""

    async def instant(self, query: str, at: datetime, cache: bool = True) -> list[Sample]: ...

    async def range(
        self, query: str, start: datetime, end: datetime, step_seconds: int, cache: bool = True
    ) -> list[RangeSeries]: ...


def _utc(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, UTC)


def _runs(minutes: Iterable[int]) -> list[tuple[int, int]]:
    """Consecutive minutes as [start, end) runs in unix seconds."""
    runs: list[tuple[int, int]] = []
    for minute in sorted(minutes):
        if runs and runs[-1][1] == minute:
            runs[-1] = (runs[-1][0], minute + MINUTE)
        else:
            runs.append((minute, minute + MINUTE))
    return runs


def _selector(name: str, **labels: str) -> str:
    matchers = ", ".join(f'{key}="{value}"' for key, value in labels.items())
    return f"{name}{{{matchers}}}" if matchers else name


class RecordedLogs:
    """A `LogsSource` that answers the log checks' counts from recorded series where they cover the window.

    Everything else (shapes, reading queries, questions no family answers) goes to ``inner``. ``origins`` keeps,
    per question answered, where its counts came from.
    """

    def __init__(self, inner: LogsSource, metrics: RecordsReader, plan: RecordingPlan) -> None:
        self.inner = inner
        self.metrics = metrics
        self.plan = plan
        self.origins: dict[object, CountedFrom] = {}
        self._minutes: dict[tuple[datetime, datetime], asyncio.Future[Minutes]] = {}

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def language(self) -> str:
        return self.inner.language

    def reading_query(self, window: Window, lines: Filter, most_repeated: bool = False) -> str:
        return self.inner.reading_query(window, lines, most_repeated)

    async def shapes(self, question: ShapeCount) -> Shapes:
        return await self.inner.shapes(question)

    async def count(self, question: LineCount) -> list[CountRow]:
        found = match(self.plan, question)
        if found is None or not self._whole_minutes(question.window, question.bucket_seconds):
            rows = await self.inner.count(question)
            self.origins[question] = CountedFrom(0.0, float(question.window.seconds))
            return rows
        return await self._answer(question, found)

    async def peak(self, question: PeakCount) -> list[CountRow]:
        found = match(self.plan, question)
        if found is None or not self._whole_minutes(question.window, None):
            rows = await self.inner.peak(question)
            self.origins[question] = CountedFrom(0.0, float(question.window.seconds))
            return rows
        return await self._answer(question, found)

    async def series(self, question: LineCount) -> list[LineSeries]:
        found = match(self.plan, question)
        if found is None or not self._whole_minutes(question.window, question.bucket_seconds):
            series = await self.inner.series(question)
            self.origins[question] = CountedFrom(0.0, float(question.window.seconds))
            return series
        return series_of(await self._answer(question, found), series_column(question))

    @staticmethod
    def _whole_minutes(window: Window, bucket_seconds: int | None) -> bool:
        """Records are per minute (and buckets read whole from them): windows off the grid are scanned."""
        start, end = window.start.timestamp(), window.end.timestamp()
        step = bucket_seconds or MINUTE
        return start % MINUTE == 0 and end % MINUTE == 0 and start % step == 0 and end % step == 0

    # Coverage of the records ------------------------------------------------------------------------------------

    async def minutes(self, window: Window) -> Minutes:
        """The recorded minutes of ``window`` per family, measured once per window and shared by its questions."""
        key = (window.start, window.end)
        known = self._minutes.get(key)
        if known is None:
            known = self._minutes[key] = asyncio.ensure_future(self._measure(window))
        return await asyncio.shield(known)

    async def _measure(self, window: Window) -> Minutes:
        start, end = int(window.start.timestamp()), int(window.end.timestamp())
        families = self.plan.families
        asked = [
            self._per_minute(
                f"last_over_time({_selector(self.plan.heartbeat, **{STAMP_LABEL: stamp})}[{MINUTE}s])",
                COLUMN_LABEL,
                stamp,
                start,
                end,
            )
            for stamp in STAMPS
        ] + [
            self._per_minute(
                "sum(last_over_time("
                + _selector(self.plan.record(family), **{COLUMN_LABEL: family.total_column, STAMP_LABEL: stamp})
                + f"[{MINUTE}s]))",
                None,
                stamp,
                start,
                end,
            )
            for stamp in STAMPS
            for family in families
        ]
        answers = await asyncio.gather(*asked)
        heartbeats = dict(zip(STAMPS, answers[: len(STAMPS)], strict=True))
        rest = iter(answers[len(STAMPS) :])
        totals = {stamp: {family.name: next(rest).get("", {}) for family in families} for stamp in STAMPS}
        recorded: dict[str, dict[int, Stamp]] = {}
        notes: dict[str, str] = {}
        for family in self.plan.families:
            minutes: dict[int, Stamp] = {}
            twice = wrong = 0
            for stamp in STAMPS:
                beats = heartbeats[stamp].get(family.name, {})
                sums = totals[stamp][family.name]
                for minute in set(beats) | set(sums):
                    if minute not in beats or sums.get(minute, 0.0) != beats[minute]:
                        wrong += 1
                    elif minute in minutes:
                        twice += 1
                    else:
                        minutes[minute] = stamp
            if wrong or twice:
                why = []
                if wrong:
                    why.append(f"{wrong} minutes' counts disagree with the recorder's heartbeat")
                if twice:
                    why.append(f"{twice} minutes were recorded twice (live and replayed)")
                notes[family.name] = "recorded counts not used (" + "; ".join(why) + "): scanned"
                minutes = {}
            recorded[family.name] = minutes
        return Minutes(recorded, notes)

    async def _per_minute(
        self, query: str, by_label: str | None, stamp: Stamp, start: int, end: int
    ) -> dict[str, dict[int, float]]:
        """Per value of ``by_label``, the value recorded for each minute [m, m + 60) of [start, end), keyed by m."""
        # A live sample at t counts [t - 60, t): the minute's point is its end. A replayed one at t counts [t, t + 60).
        first, last, shift = (start + MINUTE, end, -MINUTE) if stamp == "end" else (start, end - MINUTE, 0)
        answer = await self.metrics.range(query, _utc(first), _utc(last), MINUTE, cache=False)
        out: dict[str, dict[int, float]] = {}
        for series in answer:
            key = series.labels.get(by_label, "") if by_label else ""
            values = out.setdefault(key, {})
            for moment, value in series.points:
                minute = int(moment) + shift
                if start <= minute < end:
                    values[minute] = values.get(minute, 0.0) + value
        return out

    # Answers ----------------------------------------------------------------------------------------------------

    async def _answer(self, question: LineCount | PeakCount, found: _Match) -> list[CountRow]:
        window = question.window
        covered = await self.minutes(window)
        recorded = covered.recorded.get(found.family.name, {})
        start, end = int(window.start.timestamp()), int(window.end.timestamp())
        wanted = [minute for minute in range(start, end, MINUTE)]
        gaps = _runs(minute for minute in wanted if minute not in recorded)
        note = covered.notes.get(found.family.name, "")
        if not recorded or len(gaps) > MAX_GAP_RUNS:
            if recorded:
                note = f"records cover the window in more than {MAX_GAP_RUNS} pieces: scanned whole"
            rows = await self._scan(question, window)
            self.origins[question] = CountedFrom(0.0, float(window.seconds), note)
            return rows
        stamps = sorted(set(recorded.values()))
        reads = [self._read(question, found, stamp) for stamp in stamps]
        scans = [self._scan(question, Window(_utc(a), _utc(b), window.zone, window.label)) for a, b in gaps]
        parts = await asyncio.gather(*reads, *scans)
        scanned = sum(b - a for a, b in gaps)
        self.origins[question] = CountedFrom(float(window.seconds - scanned), float(scanned), note)
        return _merged(parts, peak=isinstance(question, PeakCount))

    async def _scan(self, question: LineCount | PeakCount, window: Window) -> list[CountRow]:
        if isinstance(question, PeakCount):
            return await self.inner.peak(replace(question, window=window))
        return await self.inner.count(replace(question, window=window))

    async def _read(self, question: LineCount | PeakCount, found: _Match, stamp: Stamp) -> list[CountRow]:
        """The recorded counts of one stamp's samples in the window (minutes without samples add nothing)."""
        window = question.window
        labels = [label_of(one) for one in found.by]
        named = {label_of(one): field_label(one) for one in found.by}
        # A replayed sample at t counts [t, t + 60): the window [a, b) holds those at [a, b), read 1 ms earlier.
        moved = " offset 1ms" if stamp == "start" else ""
        by = ", ".join([*labels, COLUMN_LABEL, SIGN_LABEL])
        columns = "|".join(sorted(set(found.columns.values())))
        selector = _selector(self.plan.record(found.family), **{STAMP_LABEL: stamp})
        selector = selector[:-1] + f', {COLUMN_LABEL}=~"{columns}"}}'
        by_family = {family_column: name for name, family_column in found.columns.items()}
        if isinstance(question, PeakCount):
            span = f"[{window.seconds}s]{moved}"
            peaks, sums = await asyncio.gather(
                self.metrics.instant(f"max by ({by}) (max_over_time({selector}{span}))", window.end, cache=False),
                self.metrics.instant(f"sum by ({by}) (sum_over_time({selector}{span}))", window.end, cache=False),
            )
            rows: list[CountRow] = []
            for column, answer in (("peak", peaks), ("lines", sums)):
                for sample in answer:
                    group = {named[label]: sample.labels.get(label, "") for label in labels}
                    rows.append(CountRow(group, {column: _signed(sample.labels, sample.value)}))
            return rows
        bucket = question.bucket_seconds
        if bucket is None:
            answer = await self.metrics.instant(
                f"sum by ({by}) (sum_over_time({selector}[{window.seconds}s]{moved}))", window.end, cache=False
            )
            return [
                CountRow(
                    {named[label]: sample.labels.get(label, "") for label in labels},
                    {by_family[sample.labels.get(COLUMN_LABEL, "")]: _signed(sample.labels, sample.value)},
                )
                for sample in answer
                if sample.labels.get(COLUMN_LABEL, "") in by_family
            ]
        start = window.start + timedelta(seconds=bucket)
        series = await self.metrics.range(
            f"sum by ({by}) (sum_over_time({selector}[{bucket}s]{moved}))", start, window.end, bucket, cache=False
        )
        rows = []
        for one in series:
            name = by_family.get(one.labels.get(COLUMN_LABEL, ""))
            if name is None:
                continue
            group = {named[label]: one.labels.get(label, "") for label in labels}
            for moment, value in one.points:
                rows.append(CountRow(group, {name: _signed(one.labels, value)}, float(moment) - bucket))
        return rows


def _signed(labels: Mapping[str, str], value: float) -> float:
    return -value if labels.get(SIGN_LABEL) == "-" else value


def _merged(parts: Sequence[list[CountRow]], peak: bool) -> list[CountRow]:
    """Rows of the same group (and bucket) added up; a peak is the largest of its parts'."""
    merged: dict[tuple[tuple[tuple[str, str], ...], float | None], dict[str, float]] = {}
    groups: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
    for rows in parts:
        for row in rows:
            group = tuple(sorted(row.group.items()))
            groups.setdefault(group, row.group)
            counts = merged.setdefault((group, row.bucket), {})
            for column, value in row.counts.items():
                if peak and column == "peak":
                    counts[column] = max(counts.get(column, 0.0), value)
                else:
                    counts[column] = counts.get(column, 0.0) + value
    return [
        CountRow(groups[group], {column: value for column, value in counts.items()}, bucket)
        for (group, bucket), counts in merged.items()
        if any(value for value in counts.values())
    ]

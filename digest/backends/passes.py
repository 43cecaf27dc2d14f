"""One pass of the log store for the counts of several checks, where every count reads every line (Loki).

Three checks ask about the same lines of a window: ``error_lines`` counts each pod's lines and error lines,
``log_storms`` each pod's busiest minute, coverage each node's lines per ten minutes. VictoriaLogs answers each from
its blocks cheaply, skipping what a filter rules out. Loki reads every chunk of the window's streams for each of
them: on the benchmark's 0.1 M-line day (2,002 streams, VictoriaMetrics + Loki, 2 cores, each sent alone) the three
took 1.53 s, 1.58 s and 1.30 s of the scanned digest's 9.3 s, and their one pass below 1.8-2.3 s (the marks cost a
little: the groups Loki adds up are more).

The three questions are the recording plan's ``pod_lines`` family (`digest.pipeline.recording`): every line in scope
per minute by namespace, pod and node, in the columns the checks count (all lines, error lines, the lines
``log_storms`` counts). `SharedPasses` asks Loki for that family once per window — one range query at one-minute
steps whose series are marked by the columns' label conditions (`digest.backends.loki.fold_plan`), plus the unlabelled
lines saying "error", which need the line — and answers each question the family answers (`match`, as the records
are matched) from it, adding up minutes into the question's buckets and groups, or taking each group's busiest
minute. The numbers are the same as each question's own queries (the parity tests ask both), down to a window's
clipped first and last minute, which both count the same way.

What the pass keeps is one `LineSeries` per group and column (a minute without a line is not kept): on the 0.1 M-line
day some 34,000 points. At most `KEEP` windows are kept (a digest's own and its trends' seven earlier days, asked
concurrently), the oldest dropped first; a question arriving for a dropped window asks the pass again. A question
without groups (one number, or one per bucket: the late lines' recount, the doctor's probe) is asked directly, as is
every question no shared family answers.

A pass Loki refuses as a query (``max_query_series``: the marks multiply the groups it adds up) is not tried again:
each question is then asked directly, as without this layer, and the log says so once. A pass whose answer passes
the answer cap (`Endpoint.max_response_bytes`: a day of thousands of pods logging every minute) leaves its window's
questions to be asked by themselves, so that a day's count per pod is still answered where the minutes are too many
(as they are for ``log_storms``' own question then). Any other failure is the questions' own (a pass that timed out
would have timed out as three queries).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from digest.backends.forwarding import ForwardingLogs
from digest.backends.http import TOO_LARGE
from digest.backends.recorded import Family, FamilyMatch, RecordingPlan, match
from digest.checks.contract import SourceError, SourceErrorKind, Window
from digest.checks.log_questions import (
    CountRow,
    LineCount,
    LineSeries,
    LogsSource,
    PeakCount,
    field_label,
    series_column,
)

log = logging.getLogger(__name__)

MINUTE = 60
# Windows whose pass is kept: a digest's own and the seven earlier days its trends compare with, with room.
KEEP = 16

_Passed = Mapping[str, Sequence[LineSeries]]  # family column → one series per group of the family's fields


class PassSource(LogsSource, Protocol):
    """A log source that answers a bucketed question per column and group (`LokiSource.column_series`)."""

    async def column_series(self, question: LineCount) -> dict[str, list[LineSeries]]: ...


class SharedPasses(ForwardingLogs):
    """A `LogsSource` answering the questions of the ``shared`` families of ``plan`` from one pass per window."""

    inner: PassSource

    def __init__(self, inner: PassSource, plan: RecordingPlan, shared: Collection[str], keep: int = KEEP) -> None:
        super().__init__(inner)
        self.plan = plan
        self.shared = frozenset(shared)
        self.keep = keep
        self._passes: OrderedDict[tuple[str, datetime, datetime], asyncio.Future[_Passed]] = OrderedDict()
        self._off = False  # set when Loki refused a pass as a query: every question is asked directly from then on
        self._too_large: set[tuple[str, datetime, datetime]] = set()  # passes whose answer passed the cap
        self.passes = 0  # passes asked, for the tests and the benchmark

    async def count(self, question: LineCount) -> list[CountRow]:
        shared = await self._passed(question)
        return await self.inner.count(question) if shared is None else counted(question, *shared)

    async def peak(self, question: PeakCount) -> list[CountRow]:
        shared = await self._passed(question)
        return await self.inner.peak(question) if shared is None else peaked(question, *shared)

    async def series(self, question: LineCount) -> list[LineSeries]:
        shared = await self._passed(question)
        if shared is None:
            return await self.inner.series(question)
        found, passed = shared
        column = series_column(question)
        return [
            LineSeries(group=row_group, lines=lines)
            for row_group, lines in _bucketed(question, found.columns[column], passed).items_grouped()
        ]

    async def _passed(self, question: LineCount | PeakCount) -> tuple[FamilyMatch, _Passed] | None:
        """The shared family that answers ``question`` and its pass of the window; None: ask the inner source."""
        found = self._shared(question)
        passed = None if found is None else await self._pass(found.family, question.window)
        return None if found is None or passed is None else (found, passed)

    def _shared(self, question: LineCount | PeakCount) -> FamilyMatch | None:
        """How a shared family answers ``question``; None when it is asked directly."""
        return None if self._off else shared_match(self.plan, self.shared, question)

    async def _pass(self, family: Family, window: Window) -> _Passed | None:
        """The family's counts per minute in ``window``, asked once and shared; None once Loki refused a pass."""
        key = (family.name, window.start, window.end)
        known = self._passes.get(key)
        if known is None:
            known = self._passes[key] = asyncio.ensure_future(self._asked(family, window))
            # Retrieved here too: a pass whose askers all gave up must not be "never retrieved".
            known.add_done_callback(lambda done: done.cancelled() or done.exception())
            while len(self._passes) > self.keep:
                self._passes.popitem(last=False)
        else:
            self._passes.move_to_end(key)
        try:
            return await asyncio.shield(known)
        except SourceError as problem:
            if problem.kind is SourceErrorKind.BAD_RESPONSE and problem.message.startswith(TOO_LARGE):
                # Per minute and pod, a day of every pod logging every minute passes the answer cap where a check's
                # own question (a day's count per pod) does not: this window's questions are asked by themselves.
                if key not in self._too_large:
                    self._too_large.add(key)
                    log.info(
                        "Loki: a shared pass of %s answered too much (%s); its questions asked apart", key[1:], problem
                    )
                return None
            if problem.kind is not SourceErrorKind.QUERY:
                raise
            if not self._off:
                log.info("Loki: a shared pass was refused (%s); each question is asked by itself from now on", problem)
                self._off = True
            return None

    async def _asked(self, family: Family, window: Window) -> _Passed:
        self.passes += 1
        return await self.inner.column_series(pass_question(family, window))


def shared_match(plan: RecordingPlan, shared: Collection[str], question: LineCount | PeakCount) -> FamilyMatch | None:
    """How one of the ``shared`` families of ``plan`` answers ``question``; None when it is asked by itself."""
    if not question.by:
        return None  # one number (per bucket): its own query answers as little as it asks
    found = match(plan, question)
    return found if found is not None and found.family.name in shared else None


def pass_question(family: Family, window: Window) -> LineCount:
    """The one question a pass asks: the family's lines per minute of ``window``, per group, in its columns."""
    return LineCount(window=window, scope=family.scope, columns=family.columns, by=family.by, bucket_seconds=MINUTE)


class _Grouped:
    """Lines per group of a question's fields and per bucket, added up from a pass's series."""

    def __init__(self, labels: Sequence[str]) -> None:
        self.labels = labels
        self.lines: dict[tuple[str, ...], dict[float | None, float]] = {}

    def add_series(self, group: Mapping[str, str], lines: Mapping[float, float], bucket_of: _BucketOf) -> None:
        key = tuple(group.get(label, "") for label in self.labels)
        per_bucket = self.lines.get(key)
        if per_bucket is None:
            per_bucket = self.lines[key] = {}
        for minute, value in lines.items():
            bucket = bucket_of(minute)
            per_bucket[bucket] = per_bucket.get(bucket, 0.0) + value

    def items_grouped(self) -> list[tuple[dict[str, str], dict[float, float]]]:
        """Each group's mapping and its buckets holding a line (bucketed answers only)."""
        out: list[tuple[dict[str, str], dict[float, float]]] = []
        for key, per_bucket in self.lines.items():
            kept = {bucket: value for bucket, value in per_bucket.items() if bucket is not None and value > 0}
            if kept:
                out.append((dict(zip(self.labels, key, strict=True)), kept))
        return out


class _BucketOf(Protocol):
    def __call__(self, minute: float) -> float | None: ...


def _bucket_function(question: LineCount) -> _BucketOf:
    """The question's bucket (its start, unix seconds) of the minute starting at ``minute``; None: no buckets."""
    size = question.bucket_seconds
    if size is None:
        return lambda _minute: None
    offset = question.bucket_offset_seconds
    return lambda minute: minute - (minute - offset) % size


def _itself(minute: float) -> float:
    return minute


def _bucketed(question: LineCount, family_column: str, passed: _Passed) -> _Grouped:
    grouped = _Grouped([field_label(field) for field in question.by])
    bucket_of = _bucket_function(question)
    for series in passed.get(family_column, ()):
        grouped.add_series(series.group, series.lines, bucket_of)
    return grouped


def counted(question: LineCount, found: FamilyMatch, passed: _Passed) -> list[CountRow]:
    """A `LineCount` the family answers, from its pass: each column's minutes added up per group and bucket.

    As Loki answers it: a group and bucket with a line in some column, every column of the row present.
    """
    labels = [field_label(field) for field in question.by]
    names = [name for name, _ in question.columns]
    rows: dict[tuple[tuple[str, ...], float | None], dict[str, float]] = {}
    for name in names:
        for key, per_bucket in _bucketed(question, found.columns[name], passed).lines.items():
            for bucket, value in per_bucket.items():
                counts = rows.get((key, bucket))
                if counts is None:
                    counts = rows[(key, bucket)] = dict.fromkeys(names, 0.0)
                counts[name] += value
    groups: dict[tuple[str, ...], dict[str, str]] = {}
    answer: list[CountRow] = []
    for (key, bucket), counts in rows.items():
        if not any(value > 0 for value in counts.values()):
            continue
        group = groups.get(key)
        if group is None:
            group = groups[key] = dict(zip(labels, key, strict=True))
        answer.append(CountRow(group=group, counts=counts, bucket=bucket))
    return answer


def peaked(question: PeakCount, found: FamilyMatch, passed: _Passed) -> list[CountRow]:
    """A `PeakCount` the family answers: per group, its busiest minute's lines and its lines in all."""
    grouped = _Grouped([field_label(field) for field in question.by])
    for series in passed.get(found.columns["peak"], ()):
        grouped.add_series(series.group, series.lines, _itself)
    return [
        CountRow(group=group, counts={"peak": max(minutes.values()), "lines": sum(minutes.values())})
        for group, minutes in grouped.items_grouped()
    ]

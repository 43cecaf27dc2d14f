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
(a rule that failed, timed out or was written in part for that minute does not). Records that cannot be read (the
store down) cost nothing but the saving: the logs are scanned and the note says why. Minutes not recorded — the
recorder down, late, or started after the window began — are *scanned* directly in the log backend and added, so a
count is never silently short; the `CountedFrom` of each question says how many seconds came from where. A minute
written again with the same counts (a replay run twice, two recorders into a store that does not deduplicate) is read
once. Counts that contradict their heartbeat, minutes recorded twice (live and replayed, or by two recorders at
different moments of the minute) and minutes written twice with different counts (a replay's shared boundary minute,
which an unfixed VictoriaLogs answers twice) are not trusted at all: the whole window is scanned and the note says
why.

**Late lines.** A rule counts what its minute holds when it is evaluated; lines that reach the store later are not in
the record. Each run of recorded minutes is counted once more in the log backend (`RecordedLogs._late`: one count per
run and scope, no filter on the lines' text), and where the logs now hold more lines than the heartbeat recorded, the
minutes that do are found per minute, scanned instead of read, and named in the note. So a line is counted if it
reached the store before the digest asked, whenever its minute was recorded; a recorder that counts short for any
other reason (replayed Loki rules, which Loki's range API answers with nothing) is caught the same way.

**Two stamps, any phase.** Evaluated live, a rule's sample at ``t`` counts the minute before ``t`` (vmalert
evaluates LogsQL with ``_time:1m`` at ``t``; Loki's ruler ``[1m] offset 1ns``); replayed (``vmalert -replay``),
VictoriaLogs' range query stamps each minute's count at the minute's start. The two are told apart by the
``digest_stamp`` label the rules carry (``end``, ``start``). vmalert evaluates on the minute; Loki's ruler at an
offset of its own within the minute (milliseconds, the same for every evaluation of a group). A sample's *slot* is
the 60 s it counts, kept only when it lies wholly inside the window; the rest of the window is scanned, to the
millisecond. Sums over the window are exact at any offset; the busiest minute and hourly buckets need slots on the
clock's minutes, so with a ruler off the minute they are scanned (and said to be).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Literal, Protocol, TypeVar

from digest.backends.forwarding import ForwardingLogs
from digest.backends.http import asked_ahead
from digest.checks.contract import CountedFrom, RangeSeries, Sample, SourceError, Window, fmt_int
from digest.checks.log_questions import (
    EVERY_LINE,
    CountRow,
    Filter,
    Json,
    LineCount,
    LineSeries,
    LogField,
    LogsSource,
    PeakCount,
    added_series,
    every,
    field_label,
    series_column,
)

MINUTE = 60
SLOT_MS = MINUTE * 1000
STAMP_LABEL = "digest_stamp"
COLUMN_LABEL = "stats_result"  # where vmalert keeps a LogsQL stats result's name; Loki's rules set it themselves
SIGN_LABEL = "digest_sign"  # Loki's rules: a column counted as a sum of terms, some subtracted
TERM_LABEL = "digest_term"  # …each term a series of its own
Stamp = Literal["end", "start"]
STAMPS: tuple[Stamp, ...] = ("end", "start")
# One part of an answer: a row, or for `RecordedLogs.series` a group's lines per bucket, signed (a subtracted
# family's records count negative), meaningful only added up with the other parts (`added_series`).
_Part = TypeVar("_Part")
_Signed = tuple[Mapping[str, str], Mapping[float, float]]
# A sample of a minute that is not read from the records: its group, the question's column, the slot, its lines.
_SlotCount = tuple[dict[str, str], str, int, float]
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


@dataclass
class _Recount:
    """What counting the recorded minutes again in the logs found (`RecordedLogs._late`), per family."""

    late: dict[str, set[int]] = field(default_factory=dict)  # slots holding more lines than recorded
    coarse: set[str] = field(default_factory=set)  # families whose late slots are whole runs (off the minute grid)
    unchecked: dict[str, float] = field(default_factory=dict)  # recorded lines not counted again (too costly)


@dataclass(frozen=True)
class FamilyMatch:
    """How a question is read from a family: its columns' names in the family, and the fields it groups by."""

    family: Family
    columns: Mapping[str, str]  # question column -> family column
    by: tuple[LogField, ...]


@dataclass(frozen=True)
class Slots:
    """Per family, the recorded minutes inside a window: each slot's start (unix ms) and how it was stamped.

    A slot is the 60 s one sample counts. ``phase`` is where the recorder's slots start within a minute (ms; 0 for
    vmalert, which aligns its evaluations; Loki's ruler evaluates each group at an offset of its own).
    """

    recorded: Mapping[str, Mapping[int, Stamp]]
    phase: Mapping[str, int] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)


def match(plan: RecordingPlan, question: LineCount | PeakCount) -> FamilyMatch | None:
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
            return FamilyMatch(family, columns, question.by)
    return None


class RecordsReader(Protocol):
    """The metrics store the records are in, read without its cache (`PrometheusSource`)."""

    async def instant(self, query: str, at: datetime, cache: bool = True) -> list[Sample]: ...

    async def range(
        self, query: str, start: datetime, end: datetime, step_seconds: int, cache: bool = True
    ) -> list[RangeSeries]: ...

    async def samples(self, selector: str, at: datetime, milliseconds: int) -> list[RangeSeries]: ...


# One slot's count of a record series, read at its sample's time. A minute written more than once with one stamp and
# the same counts (a replay run twice, two recorders into a store that does not deduplicate) is read once. Written
# with different counts, which one is the minute cannot be told: vmalert's replay requests share their boundary
# minute, which VictoriaLogs before the fix of its issue 587 answers at both ends (the end bucket holding the lines on
# the edge), and in a two-bucket answer it sometimes stamps both buckets alike; such minutes are found (`_measure`)
# and the window scanned. A 1 ms range holds that one timestamp (a range closed on the left, as in Prometheus 2, too).
_ONE = "max_over_time({selector}[1ms]{moved})"


def _selector(name: str, **labels: str) -> str:
    matchers = ", ".join(f'{key}="{value}"' for key, value in labels.items())
    return f"{name}{{{matchers}}}" if matchers else name


class RecordedLogs(ForwardingLogs):
    """A `LogsSource` that answers the log checks' counts from recorded series where they cover the window.

    Everything else (shapes, reading queries, questions no family answers) goes to ``inner``. ``origins`` keeps,
    per question answered, where its counts came from.
    """

    def __init__(
        self, inner: LogsSource, metrics: RecordsReader, plan: RecordingPlan, recount_up_to: int | None = None
    ) -> None:
        super().__init__(inner)
        self.metrics = metrics
        self.plan = plan
        # The most recorded lines a run of minutes may hold for the logs to be counted again (`_late`); None: any.
        self.recount_up_to = recount_up_to
        self.origins: dict[object, CountedFrom] = {}
        self._slots: dict[tuple[datetime, datetime, bool], asyncio.Future[Slots]] = {}
        self._graded: set[tuple[datetime, datetime]] = set()

    # The log checks' counts are asked ahead of the other queries waiting for the metrics store (`asked_ahead`): the
    # log checks ask the log backend again once they have them (the shapes of the worst workloads' errors), so read
    # first they keep both backends busy; in their turn, behind a digest's ~200 metrics queries, the shapes waited for
    # the end. On the benchmark's 13 M-line day, in-process digests took 0.70 s instead of 0.76 s (docs/benchmarks.md).

    async def count(self, question: LineCount) -> list[CountRow]:
        with asked_ahead():
            return await self._counted(question)

    async def peak(self, question: PeakCount) -> list[CountRow]:
        with asked_ahead():
            return await self._counted(question)

    async def _counted(self, question: LineCount | PeakCount) -> list[CountRow]:
        """From the records where a family answers the question, else scanned as without them."""
        found = match(self.plan, question)
        if found is None:
            rows = await self._scan(question, question.window)
            self.origins[question] = CountedFrom(0.0, float(question.window.seconds))
            return rows
        return await self._answer(question, found)

    async def series(self, question: LineCount) -> list[LineSeries]:
        with asked_ahead():
            return await self._series(question)

    async def _series(self, question: LineCount) -> list[LineSeries]:
        found = match(self.plan, question)
        if found is None:
            series = await self.inner.series(question)
            self.origins[question] = CountedFrom(0.0, float(question.window.seconds))
            return series
        column = series_column(question)

        async def read(stamp: Stamp, recorded: Mapping[int, Stamp]) -> list[_Signed]:
            # Straight into each group's buckets, signed: a day's per-node coverage is ~17,000 recorded points, and a
            # row object per point was a tenth of a quiet day's client time.
            return [
                (group, lines)
                for group, name, lines in await self._bucketed(question, found, stamp, recorded)
                if name == column
            ]

        async def scan(window: Window) -> list[_Signed]:
            return [(one.group, one.lines) for one in await self.inner.series(replace(question, window=window))]

        def taken_back(counts: list[_SlotCount]) -> list[_Signed]:
            return [
                (group, {_bucket_of(slot, question): -value}) for group, name, slot, value in counts if name == column
            ]

        parts, _ = await self._parts(question, found, read, scan, taken_back)
        return added_series(parts)

    # Coverage of the records ------------------------------------------------------------------------------------

    def graded(self, window: Window) -> None:
        """Say that ``window``'s counts are graded (a digest's own, not a trend's earlier day).

        Where counting the logs again is costly (``recount_up_to`` set: Loki), late lines are looked for in graded
        windows only: a trend's earlier days feed a median, and seven of them counted again on Loki would cost seven
        scans of every line.
        """
        self._graded.add((window.start, window.end))

    async def slots(self, window: Window) -> Slots:
        """The recorded slots of ``window`` per family, measured once per window and shared by its questions."""
        look_for_late = self.recount_up_to is None or (window.start, window.end) in self._graded
        key = (window.start, window.end, look_for_late)
        known = self._slots.get(key)
        if known is None:
            known = self._slots[key] = asyncio.ensure_future(self._measure(window, look_for_late))
        return await asyncio.shield(known)

    async def _measure(self, window: Window, look_for_late: bool = True) -> Slots:
        start, end = _ms(window.start), _ms(window.end)
        # Every heartbeat sample whose slot may touch the window; a slot is kept only if it lies wholly inside.
        # One request for both stamps (a window without any record, every earlier day's, costs just this one).
        beats = await self.metrics.samples(self.plan.heartbeat, window.end, end - start + SLOT_MS)
        heartbeat: dict[tuple[str, Stamp], dict[int, float]] = {}
        # Slots written more than once with different counts (`_ONE`): which is the minute cannot be told.
        differing: dict[str, set[int]] = {}
        # Whether any heartbeat minute was written more than once: every rule of a group is written at each of its
        # evaluations, so a family's minutes can hold several samples only where the heartbeat's do (two recorders, a
        # replay run twice, a replay's shared boundary minute), and only then is the family checked for samples
        # that differ (`_totals`: the most expensive request of a recorded digest, 0.45-0.75 s of VictoriaMetrics).
        twice_written = False
        for series in beats:
            stamp = _stamp_of(series.labels.get(STAMP_LABEL, ""))
            if stamp is None:
                continue
            column = series.labels.get(COLUMN_LABEL, "")
            kept = heartbeat.setdefault((column, stamp), {})
            for moment, value in series.points:
                slot = _slot(round(moment * 1000), stamp)
                if start <= slot and slot + SLOT_MS <= end:
                    if slot in kept:
                        twice_written = True
                        if kept[slot] != value:
                            differing.setdefault(column, set()).add(slot)
                    kept[slot] = max(value, kept.get(slot, value))
        pairs = [
            (family, stamp) for family in self.plan.families for stamp in STAMPS if heartbeat.get((family.name, stamp))
        ]
        # The lines the logs hold now in the heartbeat's minutes, asked beside the records' totals: more than were
        # recorded, lines arrived after their minute was counted (`_late`).
        beaten = {
            family.name: {
                slot: value for stamp in STAMPS for slot, value in heartbeat.get((family.name, stamp), {}).items()
            }
            for family in self.plan.families
        }
        recount, totals = await asyncio.gather(
            self._late(window, beaten if look_for_late else {}),
            asyncio.gather(
                *(
                    self._totals(family, stamp, heartbeat[(family.name, stamp)], twice_written)
                    for family, stamp in pairs
                )
            ),
        )
        found: dict[tuple[str, Stamp], dict[int, float]] = {
            (family.name, stamp): total for (family, stamp), (total, _) in zip(pairs, totals, strict=True)
        }
        for (family, _), (_, apart) in zip(pairs, totals, strict=True):
            differing.setdefault(family.name, set()).update(apart)
        recorded: dict[str, dict[int, Stamp]] = {}
        phases: dict[str, int] = {}
        notes: dict[str, str] = {}
        for family in self.plan.families:
            slots: dict[int, Stamp] = {}
            why: list[str] = []
            wrong = twice = 0
            for stamp in STAMPS:
                beat = heartbeat.get((family.name, stamp), {})
                total = found.get((family.name, stamp), {})
                for slot in set(beat) | set(total):
                    if slot not in beat or total.get(slot, 0.0) != beat[slot]:
                        wrong += 1
                    elif slot in slots:
                        twice += 1
                    else:
                        slots[slot] = stamp
            if wrong:
                why.append(f"{wrong} minutes' counts disagree with the recorder's heartbeat")
            apart = differing.get(family.name, set())
            if apart:
                why.append(
                    f"{len(apart)} minutes were written more than once with different counts (a replay's requests"
                    " share their boundary minute, which VictoriaLogs before the fix of its issue 587 answers twice)"
                )
            starts = sorted(slots)
            overlaps = twice + sum(1 for one, two in pairwise(starts) if two - one < SLOT_MS)
            if overlaps:
                why.append(f"{overlaps} minutes were recorded twice (live and replayed, or by two recorders)")
            if why:
                notes[family.name] = "recorded counts not used (" + "; ".join(why) + "): scanned"
                slots = {}
            late = recount.late.get(family.name, set()) & set(slots)
            unchecked = recount.unchecked.get(family.name, 0.0)
            if unchecked and slots:
                notes[family.name] = (
                    f"lines that reached the logs after their minute was recorded were not looked for: the records hold"
                    f" {_lines(unchecked)}, which this log backend would count again at the cost of scanning them"
                )
            if late:
                how = (
                    ", recorded off the clock's minutes and so not told apart," if family.name in recount.coarse else ""
                )
                verb = "holds" if len(late) == 1 else "hold"
                notes[family.name] = (
                    f"{_minutes(len(late))}{how} {verb} more lines than were recorded (late lines, or a recorder"
                    " that counted short): those minutes scanned"
                )
                slots = {slot: stamp for slot, stamp in slots.items() if slot not in late}
            recorded[family.name] = slots
            phases[family.name] = starts[0] % SLOT_MS if slots else 0
        return Slots(recorded, phases, notes)

    async def _late(self, window: Window, beaten: Mapping[str, Mapping[int, float]]) -> _Recount:
        """Per family, the heartbeat's minutes in which the logs now hold more lines than the heartbeat counted.

        A rule counts the lines its minute holds when it is evaluated (vmalert 30 s after the minute by default,
        ``-rule.evalDelay``); a line that reaches the store later — a shipper's backlog after an outage, a node
        whose agent was cut off — is in the logs and not in the record. So the digest counts, in the log backend,
        each family's scope over each run of recorded minutes (one question per run and scope: a count, with no
        filter on the lines' text), and only where a run holds more lines than its records, per minute, to find the
        minutes to scan instead. Fewer lines than recorded are no reason to doubt a record (retention deleted them
        since): the record stands. A recorder off the minute's grid (Loki's ruler) cannot be cut into the logs'
        minutes: a run that holds more lines is scanned whole. A run whose records hold more than
        ``recount_up_to`` lines is not counted again (on Loki that count costs what a scan of every line costs).
        """
        # Families of one scope recorded in the same minutes share their questions (a column each).
        groups: dict[tuple[Filter, tuple[tuple[int, int], ...]], list[Family]] = {}
        for family in self.plan.families:
            starts = sorted(beaten.get(family.name, {}))
            if starts:
                groups.setdefault((family.scope, tuple(_runs(starts))), []).append(family)
        recount = _Recount()
        # Per run, each family's recorded lines: what decides whether it is counted again, and what it is held to.
        asked: list[tuple[list[Family], tuple[int, int], dict[str, float]]] = []
        for (_, runs), families in groups.items():
            for run in runs:
                held = {family.name: _recorded_in(beaten[family.name], run) for family in families}
                if self.recount_up_to is not None and max(held.values()) > self.recount_up_to:
                    for name, lines in held.items():
                        recount.unchecked[name] = recount.unchecked.get(name, 0.0) + lines
                else:
                    asked.append((families, run, held))
        counted = await asyncio.gather(*(self._count_lines(window, families, run, None) for families, run, _ in asked))
        ahead: list[tuple[list[Family], tuple[int, int]]] = []
        for (families, run, held), rows in zip(asked, counted, strict=True):
            short = [family for family in families if _column(rows, family.name) > held[family.name]]
            if short:
                ahead.append((short, run))
        on_grid = [(families, run) for families, run in ahead if run[0] % SLOT_MS == 0]
        for families, run in ahead:
            if run[0] % SLOT_MS:
                for family in families:
                    recount.late.setdefault(family.name, set()).update(range(run[0], run[1], SLOT_MS))
                    recount.coarse.add(family.name)
        minutes = await asyncio.gather(*(self._count_lines(window, families, run, MINUTE) for families, run in on_grid))
        for (families, run), rows in zip(on_grid, minutes, strict=True):
            for family in families:
                record = beaten[family.name]
                now: dict[int, float] = {}
                for row in rows:
                    slot = round((row.bucket or 0) * 1000)
                    now[slot] = now.get(slot, 0.0) + row.counts.get(family.name, 0.0)
                recount.late.setdefault(family.name, set()).update(
                    slot for slot in range(run[0], run[1], SLOT_MS) if now.get(slot, 0.0) > record.get(slot, 0.0)
                )
        return recount

    async def _count_lines(
        self, window: Window, families: Sequence[Family], run: tuple[int, int], bucket: int | None
    ) -> list[CountRow]:
        """The lines of ``run`` (ms) in the families' one scope, counted in the log backend: a column per family."""
        question = LineCount(
            Window(_utc_ms(run[0]), _utc_ms(run[1]), window.zone, window.label),
            families[0].scope,
            tuple((family.name, EVERY_LINE) for family in families),
            bucket_seconds=bucket,
        )
        return await self.inner.count(question)

    async def _totals(
        self, family: Family, stamp: Stamp, beat: Mapping[int, float], twice_written: bool
    ) -> tuple[dict[int, float], set[int]]:
        """The family's per-group totals at each heartbeat sample, and the slots it wrote twice with different counts.

        Totals: slot start -> lines, added up over its groups. Differing: a slot where one of its series, any column,
        holds more than one sample and they are not equal (`_ONE`), looked for only when the heartbeat has a minute
        written more than once (``twice_written``).
        """
        selector = _selector(self.plan.record(family), **{COLUMN_LABEL: family.total_column, STAMP_LABEL: stamp})
        every = _selector(self.plan.record(family), **{STAMP_LABEL: stamp})
        first, last = min(beat), max(beat)
        shift = SLOT_MS if stamp == "end" else 0
        one = _ONE.format(selector=selector, moved="")
        spread = f"max_over_time({every}[1ms]) - min_over_time({every}[1ms])"
        # Points on the samples' own times: each reads its slot's samples alone, the largest per series; and how far
        # apart the samples of one slot are in any series (0 when written once, or again the same).
        asked = (f"sum({one})", f"sum({spread})") if twice_written else (f"sum({one})",)
        answer, *spreads = await asyncio.gather(
            *(
                self.metrics.range(query, _utc_ms(first + shift), _utc_ms(last + shift), MINUTE, cache=False)
                for query in asked
            )
        )
        apart = spreads[0] if spreads else []
        out: dict[int, float] = {}
        for series in answer:
            for moment, value in series.points:
                out[round(moment * 1000) - shift] = value
        differing = {round(moment * 1000) - shift for series in apart for moment, value in series.points if value > 0}
        return out, differing

    # Answers ----------------------------------------------------------------------------------------------------

    async def _answer(self, question: LineCount | PeakCount, found: FamilyMatch) -> list[CountRow]:
        async def read(stamp: Stamp, recorded: Mapping[int, Stamp]) -> list[CountRow]:
            return await self._read(question, found, stamp, recorded)

        async def scan(window: Window) -> list[CountRow]:
            return await self._scan(question, window)

        def taken_back(counts: list[_SlotCount]) -> list[CountRow]:
            if isinstance(question, PeakCount):
                # A minute's record holds no more lines than the minute (lines are only ever added): its peak stands
                # beside the scanned minute's, and only its lines are taken out of the sum.
                return [CountRow(group, {"lines": -value}) for group, _, _, value in counts]
            bucket = question.bucket_seconds
            return [
                CountRow(group, {name: -value}, None if bucket is None else _bucket_of(slot, question))
                for group, name, slot, value in counts
            ]

        parts, was_read = await self._parts(question, found, read, scan, taken_back)
        return _merged(parts, peak=isinstance(question, PeakCount)) if was_read else parts[0]

    async def _parts(
        self,
        question: LineCount | PeakCount,
        found: FamilyMatch,
        read: Callable[[Stamp, Mapping[int, Stamp]], Awaitable[list[_Part]]],
        scan: Callable[[Window], Awaitable[list[_Part]]],
        taken_back: Callable[[list[_SlotCount]], list[_Part]],
    ) -> tuple[list[list[_Part]], bool]:
        """The question's answer in parts (each stamp's records, each scanned gap), and False when scanned whole.

        ``read`` reads one stamp's records of the window, ``scan`` counts a span of it in the logs: rows for a count
        or a peak, signed series for `series`. A read adds up every sample of its span (a bucketed one, of the
        window), and a minute that is scanned may have samples too — lines arrived after it was recorded (`_late`), a
        heartbeat lost while the family's rule was written — so those minutes' samples are read apart and
        ``taken_back`` makes them parts that take them out again (negative counts), and no minute is counted twice.
        """
        window = question.window

        async def unread(error: SourceError) -> tuple[list[list[_Part]], bool]:
            # The records are a saving, not a source of their own: unreadable, the logs are counted without them.
            whole = await scan(window)
            self.origins[question] = CountedFrom(0.0, float(window.seconds), f"recorded counts not read ({error})")
            return [whole], False

        try:
            covered = await self.slots(window)
        except SourceError as exc:
            return await unread(exc)
        recorded = covered.recorded.get(found.family.name, {})
        note = covered.notes.get(found.family.name, "")
        start, end = _ms(window.start), _ms(window.end)
        gaps = _gaps(start, end, recorded)
        bucket = MINUTE if isinstance(question, PeakCount) else question.bucket_seconds
        off_grid = bucket is not None and (
            covered.phase.get(found.family.name, 0) != 0
            or (not isinstance(question, PeakCount) and (start % (bucket * 1000) or end % (bucket * 1000)))
        )
        if recorded and off_grid:
            # Minutes that do not start on the minute cannot be put into whole-minute peaks or buckets exactly.
            note = (
                note or "recorded minutes are not on the window's minute grid: per-minute and bucketed counts scanned"
            )
        if not recorded or off_grid or len(gaps) > MAX_GAP_RUNS:
            if recorded and len(gaps) > MAX_GAP_RUNS:
                note = f"records cover the window in more than {MAX_GAP_RUNS} pieces: scanned whole"
            rows = await scan(window)
            self.origins[question] = CountedFrom(0.0, float(window.seconds), note)
            return [rows], False
        stamps = sorted(set(recorded.values()))
        bucketed = isinstance(question, LineCount) and question.bucket_seconds is not None
        overlaps: list[tuple[Stamp, tuple[int, int]]] = []
        for stamp in stamps:
            mine = [slot for slot, kind in recorded.items() if kind == stamp]
            # The span a read adds up: the window for buckets, else from this stamp's first slot to its last.
            first, last = (start, end) if bucketed else (min(mine), max(mine) + SLOT_MS)
            overlaps += [(stamp, (max(a, first), min(b, last))) for a, b in gaps if a < last and first < b]
        try:
            reads = await asyncio.gather(*(read(stamp, recorded) for stamp in stamps))
            phase = covered.phase.get(found.family.name, 0)
            extra = await asyncio.gather(
                *(self._unrecorded(question, found, stamp, recorded, phase, run) for stamp, run in overlaps)
            )
        except SourceError as exc:
            return await unread(exc)
        scans = await asyncio.gather(
            *(scan(Window(_utc_ms(a), _utc_ms(b), window.zone, window.label)) for a, b in gaps)
        )
        parts = [*reads, *(taken_back(one) for one in extra if one), *scans]
        scanned = sum(b - a for a, b in gaps) / 1000
        self.origins[question] = CountedFrom(window.seconds - scanned, scanned, note)
        return parts, True

    async def _unrecorded(
        self,
        question: LineCount | PeakCount,
        found: FamilyMatch,
        stamp: Stamp,
        recorded: Mapping[int, Stamp],
        phase: int,
        run: tuple[int, int],
    ) -> list[_SlotCount]:
        """The samples one stamp wrote for the slots of ``run`` (ms), which are not recorded: each slot's largest.

        ``phase``: where the recorder's slots start within a minute (`Slots.phase`).
        """
        query = _RecordsQuery.of(self.plan, question, found, stamp, recorded)
        shift = SLOT_MS if stamp == "end" else 0
        first = run[0] + (phase - run[0]) % SLOT_MS  # the first slot start of this recorder in the run
        if first >= run[1]:
            return []
        last = first + (run[1] - first - 1) // SLOT_MS * SLOT_MS
        one = _ONE.format(selector=query.selector, moved="")
        series = await self.metrics.range(
            f"sum by ({query.by}) ({one})", _utc_ms(first + shift), _utc_ms(last + shift), MINUTE, cache=False
        )
        counts: list[_SlotCount] = []
        for each in series:
            name = query.by_family.get(each.labels.get(COLUMN_LABEL, ""))
            if name is None:
                continue
            group = query.group(each.labels)
            for moment, value in each.points:
                slot = round(moment * 1000) - shift
                if run[0] <= slot < run[1] and value:
                    counts.append((group, name, slot, _signed(each.labels, value)))
        return counts

    async def _scan(self, question: LineCount | PeakCount, window: Window) -> list[CountRow]:
        if isinstance(question, PeakCount):
            return await self.inner.peak(replace(question, window=window))
        return await self.inner.count(replace(question, window=window))

    async def _read(
        self, question: LineCount | PeakCount, found: FamilyMatch, stamp: Stamp, recorded: Mapping[int, Stamp]
    ) -> list[CountRow]:
        """The recorded counts of one stamp's slots in the window."""
        if isinstance(question, LineCount) and question.bucket_seconds is not None:
            return [
                CountRow(of, {name: value}, moment)
                for of, name, lines in await self._bucketed(question, found, stamp, recorded)
                for moment, value in lines.items()
            ]
        query = _RecordsQuery.of(self.plan, question, found, stamp, recorded)
        by, selector, span, at, group = query.by, query.selector, query.span, query.at, query.group
        summed, summed_at = query.summed()
        if isinstance(question, PeakCount):
            peaks, sums = await asyncio.gather(
                self.metrics.instant(f"max by ({by}) (max_over_time({selector}{span}))", at, cache=False),
                self.metrics.instant(summed, summed_at, cache=False),
            )
            rows: list[CountRow] = []
            for column, answer in (("peak", peaks), ("lines", sums)):
                for sample in answer:
                    rows.append(CountRow(group(sample.labels), {column: _signed(sample.labels, sample.value)}))
            return rows
        answer = await self.metrics.instant(summed, summed_at, cache=False)
        return [
            CountRow(
                group(sample.labels),
                {query.by_family[sample.labels.get(COLUMN_LABEL, "")]: _signed(sample.labels, sample.value)},
            )
            for sample in answer
            if sample.labels.get(COLUMN_LABEL, "") in query.by_family
        ]

    async def _bucketed(
        self, question: LineCount, found: FamilyMatch, stamp: Stamp, recorded: Mapping[int, Stamp]
    ) -> list[tuple[Mapping[str, str], str, dict[float, float]]]:
        """One stamp's recorded counts of a bucketed question: per series its group, column and lines per bucket.

        The lines are signed: a subtracted family's records count negative.

        Buckets on the minute grid (checked by the caller): a point at each bucket's end sums its slots' samples, each
        slot's largest (`_ONE`); a replayed sample at t counts [t, t + 60 s), so its bucket's samples are read 1 ms
        earlier, and a live one at t the minute before t, so a bucket's first step is left out (closed ranges).
        """
        bucket = question.bucket_seconds
        if bucket is None:
            raise ValueError("a bucketed question has buckets")
        query = _RecordsQuery.of(self.plan, question, found, stamp, recorded)
        per_slot = _ONE.format(selector=query.selector, moved="")
        steps = f"[{bucket}s:{MINUTE}s] offset 1ms" if stamp == "start" else f"[{bucket * 1000 - 1}ms:{MINUTE}s]"
        series = await self.metrics.range(
            f"sum by ({query.by}) (sum_over_time({per_slot}{steps}))",
            question.window.start + timedelta(seconds=bucket),
            question.window.end,
            bucket,
            cache=False,
        )
        out: list[tuple[Mapping[str, str], str, dict[float, float]]] = []
        for one in series:
            name = query.by_family.get(one.labels.get(COLUMN_LABEL, ""))
            if name is not None:
                sign = _signed(one.labels, 1.0)  # once per series: a day's coverage reads ~17,000 points
                lines = {float(moment) - bucket: sign * value for moment, value in one.points}
                out.append((query.group(one.labels), name, lines))
        return out


@dataclass(frozen=True)
class _RecordsQuery:
    """How one stamp's records of a question are asked: the selector, the labels grouped by, the span of samples."""

    labels: tuple[str, ...]  # the records' labels of the question's fields
    named: Mapping[str, str]  # record label → the question's field label
    by: str  # ``by (…)``: the fields, the column and the sign
    selector: str
    span: str  # ``[Nms]``: exactly this stamp's samples of the window, (first - 1 ms, last] in sample time
    at: datetime  # the last sample's time
    by_family: Mapping[str, str]  # the family's column → the question's

    @classmethod
    def of(
        cls,
        plan: RecordingPlan,
        question: LineCount | PeakCount,
        found: FamilyMatch,
        stamp: Stamp,
        recorded: Mapping[int, Stamp],
    ) -> _RecordsQuery:
        labels = tuple(label_of(one) for one in found.by)
        mine = [slot for slot, kind in recorded.items() if kind == stamp]
        shift = SLOT_MS if stamp == "end" else 0
        first, last = min(mine) + shift, max(mine) + shift
        columns = "|".join(sorted(set(found.columns.values())))
        selector = _selector(plan.record(found.family), **{STAMP_LABEL: stamp})
        return cls(
            labels=labels,
            named={label_of(one): field_label(one) for one in found.by},
            by=", ".join([*labels, COLUMN_LABEL, SIGN_LABEL]),
            selector=selector[:-1] + f', {COLUMN_LABEL}=~"{columns}"}}',
            span=f"[{last - first + 1}ms]",
            at=_utc_ms(last),
            by_family={family_column: name for name, family_column in found.columns.items()},
        )

    def summed(self) -> tuple[str, datetime]:
        """``sum by (…)`` of the span's slots, each its largest sample (`_ONE`), and when to ask it.

        A subquery steps on whole minutes of the clock: a slot's sample lies ``lag`` ms before the step that reads
        it (none on the minute; a Loki ruler's phase off it), so the steps are moved by as much.
        """
        last = _ms(self.at)
        lag = -last % SLOT_MS
        one = _ONE.format(selector=self.selector, moved=f" offset {lag}ms" if lag else "")
        return f"sum by ({self.by}) (sum_over_time({one}{self.span[:-1]}:{MINUTE}s]))", _utc_ms(last + lag)

    def group(self, series: Mapping[str, str]) -> dict[str, str]:
        """A recorded series' labels as a `CountRow` group, keyed as the question's fields are."""
        return {self.named[label]: series.get(label, "") for label in self.labels}


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def _utc_ms(milliseconds: int) -> datetime:
    # Exact: a float division would land a microsecond short of .490 and be written as .489.
    return datetime.fromtimestamp(milliseconds // 1000, UTC) + timedelta(milliseconds=milliseconds % 1000)


def _stamp_of(label: str) -> Stamp | None:
    """The stamp a sample's label names; None for a label the digest's rules never write."""
    return "end" if label == "end" else "start" if label == "start" else None


def _slot(sample_ms: int, stamp: Stamp) -> int:
    """The start of the slot a sample counts: the minute before it (live), the minute from it (replayed)."""
    return sample_ms - SLOT_MS if stamp == "end" else sample_ms


def _gaps(start: int, end: int, recorded: Mapping[int, Stamp]) -> list[tuple[int, int]]:
    """The parts of [start, end) (ms) no recorded slot covers, as runs."""
    gaps: list[tuple[int, int]] = []
    cursor = start
    for slot in sorted(recorded):
        if slot > cursor:
            gaps.append((cursor, slot))
        cursor = max(cursor, slot + SLOT_MS)
    if cursor < end:
        gaps.append((cursor, end))
    return gaps


def _runs(starts: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted slot starts (ms) as runs of consecutive minutes, [first start, last start + 60 s)."""
    runs: list[tuple[int, int]] = []
    for start in starts:
        if runs and runs[-1][1] >= start:
            runs[-1] = (runs[-1][0], max(runs[-1][1], start + SLOT_MS))
        else:
            runs.append((start, start + SLOT_MS))
    return runs


def _recorded_in(record: Mapping[int, float], run: tuple[int, int]) -> float:
    return sum(value for slot, value in record.items() if run[0] <= slot < run[1])


def _column(rows: Sequence[CountRow], name: str) -> float:
    return sum(row.counts.get(name, 0.0) for row in rows)


def _lines(count: float) -> str:
    return f"{count / 1_000_000:.1f} M lines" if count >= 1_000_000 else f"{fmt_int(count)} lines"


def _minutes(count: int) -> str:
    return "1 minute" if count == 1 else f"{count} minutes"


def _bucket_of(slot: int, question: LineCount) -> float:
    """The start (unix seconds) of the question's bucket that holds the slot starting at ``slot`` ms."""
    bucket = question.bucket_seconds or 1
    seconds = slot // 1000
    return float(seconds - (seconds - question.bucket_offset_seconds) % bucket)


def _signed(labels: Mapping[str, str], value: float) -> float:
    return -value if labels.get(SIGN_LABEL) == "-" else value


def _merged(parts: Sequence[list[CountRow]], peak: bool) -> list[CountRow]:
    """Rows of the same group (and bucket) added up; a peak is the largest of its parts'."""
    merged: dict[tuple[tuple[tuple[str, str], ...], float | None], dict[str, float]] = {}
    groups: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
    # A series' rows share one group mapping (a day's coverage is ~17,000 rows of 400 series): its sorted key is
    # made once per mapping, not per row. Keyed by identity while `parts` holds every mapping alive.
    keys: dict[int, tuple[tuple[str, str], ...]] = {}
    for rows in parts:
        for row in rows:
            group = keys.get(id(row.group))
            if group is None:
                group = keys[id(row.group)] = tuple(sorted(row.group.items()))
                groups.setdefault(group, row.group)
            key = (group, row.bucket)
            counts = merged.get(key)
            if counts is None:
                counts = merged[key] = dict(row.counts)  # a copy: the rows stay as they were read
                if peak and "peak" in counts:
                    counts["peak"] = max(counts["peak"], 0.0)
                continue
            for column, value in row.counts.items():
                if peak and column == "peak":
                    counts[column] = max(counts.get(column, 0.0), value)
                else:
                    counts[column] = counts.get(column, 0.0) + value
    return [
        CountRow(groups[group], counts, bucket) for (group, bucket), counts in merged.items() if any(counts.values())
    ]

"""The week at a glance: seven daily digests of one ISO week, summed up in a few lines.

Each day is the calendar day's own digest (`digest.app.engine.make_digest`, the code of `digest run --date` and of a
replayed day), kept as a `DayResult`: its grade, the one line that says why, the checks that were UNKNOWN or saw only
part of the day, the error_lines and conntrack values and the signatures shown. The week reads the day results the
state file holds and computes the days it does not hold — never guesses one: a day without data is an UNKNOWN day in
the week, as it was in its own digest.

What the week says: the seven scores as a sparkline (one block lower per point lost; an UNKNOWN day is "?", it has no
score to draw); the worst day and
why, in its digest's own words (its first explanation, else its largest deduction); every check that was UNKNOWN or
partial on some day, with the days; the signatures shown on two days or more (recurring); and the error_lines and
conntrack values of each day, first to last. Nothing here re-grades a day.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta, tzinfo

from digest.checks.contract import Status, fmt_int, fmt_percent
from digest.pipeline.score import Digest, DigestStatus
from digest.pipeline.window import WindowError

SPARK = "▁▂▃▄▅▆▇█"
UNKNOWN_MARK = "?"
_WEEK_DAYS = 7


def parse_iso_week(text: str) -> tuple[int, int]:
    """``2026-W33`` → (2026, 33); `WindowError` naming the expected form for anything else."""
    raw = text.strip().upper()
    year_text, _, week_text = raw.partition("-W")
    if not (year_text.isdigit() and week_text.isdigit() and len(year_text) == 4 and 1 <= len(week_text) <= 2):
        raise WindowError(f"week {text!r}: expected an ISO week such as 2026-W33")
    year, week = int(year_text), int(week_text)
    try:
        date.fromisocalendar(year, week, 1)
    except ValueError:
        raise WindowError(f"week {text!r}: {year} has no week {week}") from None
    return year, week


def iso_week(year: int, week: int) -> str:
    """(2026, 33) → ``2026-W33``."""
    return f"{year}-W{week:02d}"


def week_days(year: int, week: int) -> list[date]:
    """Monday to Sunday of the ISO week."""
    monday = date.fromisocalendar(year, week, 1)
    return [monday + timedelta(days=offset) for offset in range(_WEEK_DAYS)]


def last_complete_week(today: date) -> tuple[int, int]:
    """The ISO week before the one ``today`` is in: the last whose seven days are over."""
    year, week, _ = (today - timedelta(days=7)).isocalendar()
    return year, week


@dataclass(frozen=True)
class DaySignature:
    """One signature a day's digest showed: its stable key, its workload, its shape and its lines that day."""

    key: str
    workload: str
    text: str
    lines: float


@dataclass(frozen=True)
class DayResult:
    """What the week keeps of one day's digest."""

    day: date
    status: DigestStatus
    score: int
    max_score: int
    why: str
    unseen: tuple[tuple[str, str], ...] = ()  # (check, "UNKNOWN" | "partial")
    error_lines: float | None = None
    conntrack: float | None = None
    signatures: tuple[DaySignature, ...] = field(default=())
    blind: bool = False  # every graded check UNKNOWN: nothing of the day was seen

    @property
    def scored(self) -> bool:
        """Whether the day has a score to show (an UNKNOWN day has none)."""
        return self.status is not DigestStatus.UNKNOWN


def _blind(digest: Digest) -> bool:
    """Every graded check UNKNOWN: nothing of the day was seen."""
    return all(finding.status is Status.UNKNOWN for finding in digest.findings if digest.is_graded(finding))


def skipped_day(day: date, max_score: int, zone: tzinfo) -> DayResult:
    """A day the reader's zone skipped: no digest, no score."""
    return DayResult(
        day=day, status=DigestStatus.UNKNOWN, score=0, max_score=max_score, why=f"{day} did not happen in {zone}"
    )


def _value(digest: Digest, name: str) -> float | None:
    finding = next((item for item in digest.findings if item.name == name), None)
    if finding is None or finding.status is Status.UNKNOWN:
        return None
    return finding.value


def why(digest: Digest) -> str:
    """The day in one line, in its digest's words: the first explanation, else the largest deduction, else why not."""
    if digest.explanations:
        return digest.explanations[0].text
    if digest.deductions:
        finding = digest.deductions[0]
        return f"−{digest.applied.get(finding.name, finding.penalty)} {finding.name} · {finding.summary}"
    if digest.unknown:
        return "not checked: " + ", ".join(finding.name for finding in digest.unknown)
    if digest.partial:
        return "partly seen: " + ", ".join(finding.name for finding in digest.partial)
    return "every graded check OK"


def day_result(day: date, digest: Digest) -> DayResult:
    """The week's summary of one calendar day's digest."""
    unseen = [(finding.name, "UNKNOWN") for finding in (*digest.unknown, *digest.unexplained)]
    unseen += [(finding.name, "partial") for finding in digest.partial if finding.status is not Status.UNKNOWN]
    signatures = tuple(
        DaySignature(
            key=one.key,
            workload=f"{workload.labels.get('namespace', '')}/{workload.labels.get('workload', '')}",
            text=one.text,
            lines=one.lines,
        )
        for finding in digest.findings
        for workload in finding.signatures
        for one in workload.signatures
        if one.key
    )
    return DayResult(
        day=day,
        status=digest.status,
        score=digest.score,
        max_score=digest.max_score,
        why=why(digest),
        unseen=tuple(unseen),
        error_lines=_value(digest, "error_lines"),
        conntrack=_value(digest, "conntrack"),
        signatures=signatures,
        blind=_blind(digest),
    )


def complete(digest: Digest) -> bool:
    """Whether a day's digest may be stored for the week as the day's final word.

    Every query answered and every check saw the whole day and fleet (a check UNKNOWN for want of an exporter stays
    so, and is stored as such), and something was seen at all: a blind day is asked again, in case its data arrives.
    """
    return digest.complete and not digest.partial and not _blind(digest)


def encode_day(result: DayResult) -> str:
    """A day result as the state file keeps it (no log line: the signatures' redacted shapes only)."""
    return json.dumps(
        {
            "day": result.day.isoformat(),
            "status": result.status.value,
            "score": result.score,
            "max_score": result.max_score,
            "why": result.why,
            "unseen": [list(item) for item in result.unseen],
            "error_lines": result.error_lines,
            "conntrack": result.conntrack,
            "signatures": [
                {"key": one.key, "workload": one.workload, "text": one.text, "lines": one.lines}
                for one in result.signatures
            ],
            "blind": result.blind,
        }
    )


def decode_day(payload: str) -> DayResult:
    """The inverse of `encode_day`; ValueError, KeyError or TypeError for a payload that is not one."""
    raw = json.loads(payload)
    return DayResult(
        day=date.fromisoformat(str(raw["day"])),
        status=DigestStatus(raw["status"]),
        score=int(raw["score"]),
        max_score=int(raw["max_score"]),
        why=str(raw["why"]),
        unseen=tuple((str(name), str(kind)) for name, kind in raw["unseen"]),
        error_lines=None if raw["error_lines"] is None else float(raw["error_lines"]),
        conntrack=None if raw["conntrack"] is None else float(raw["conntrack"]),
        signatures=tuple(
            DaySignature(str(one["key"]), str(one["workload"]), str(one["text"]), float(one["lines"]))
            for one in raw["signatures"]
        ),
        blind=bool(raw.get("blind", False)),
    )


@dataclass(frozen=True)
class Recurring:
    """A signature shown on two days or more of the week."""

    workload: str
    text: str
    days: tuple[date, ...]
    lines: float


@dataclass(frozen=True)
class Week:
    """Seven day results of one ISO week, and what the week says about them."""

    cluster: str
    year: int
    week: int
    days: tuple[DayResult, ...]
    stored: int = 0  # how many days were read from the state file rather than computed

    @property
    def label(self) -> str:
        return iso_week(self.year, self.week)

    @property
    def status(self) -> DigestStatus:
        """The worst day's status; UNKNOWN only when no day could be graded at all."""
        order = (DigestStatus.CRITICAL, DigestStatus.WARNING, DigestStatus.OK)
        seen = {day.status for day in self.days if day.scored}
        for status in order:
            if status in seen:
                unseen = any(not day.scored for day in self.days)
                # A week with an unseen day cannot read a clean OK: that day may have been the bad one.
                return DigestStatus.UNKNOWN if status is DigestStatus.OK and unseen else status
        return DigestStatus.UNKNOWN

    @property
    def worst(self) -> DayResult | None:
        """The lowest-scored day (the earliest of equals); None when no day has a score."""
        scored = [day for day in self.days if day.scored]
        return min(scored, key=lambda day: (day.score, day.day)) if scored else None

    @property
    def sparkline(self) -> str:
        """The seven scores, one block each (height: score out of the maximum), "?" for a day without a score."""
        return "".join(_spark(day) for day in self.days)

    @property
    def blind_days(self) -> tuple[date, ...]:
        """The days on which no graded check could see anything (no data, or no backend answered)."""
        return tuple(day.day for day in self.days if day.blind)

    @property
    def unseen(self) -> list[tuple[str, str, tuple[date, ...]]]:
        """(check, how, days) for every check UNKNOWN or partial on a day that was otherwise seen, most affected first.

        The blind days (`blind_days`) are said once, not once per check.
        """
        found: dict[tuple[str, str], list[date]] = {}
        for day in self.days:
            if day.blind:
                continue
            for name, kind in day.unseen:
                found.setdefault((name, kind), []).append(day.day)
        ranked = sorted(found.items(), key=lambda item: (-len(item[1]), item[0]))
        return [(name, kind, tuple(days)) for (name, kind), days in ranked]

    @property
    def recurring(self) -> list[Recurring]:
        """Signatures shown on at least two days, the most days first, then the most lines."""
        by_key: dict[str, list[tuple[date, DaySignature]]] = {}
        for day in self.days:
            for one in day.signatures:
                by_key.setdefault(one.key, []).append((day.day, one))
        recurring = [
            Recurring(
                workload=shown[-1][1].workload,
                text=shown[-1][1].text,
                days=tuple(sorted({when for when, _ in shown})),
                lines=sum(one.lines for _, one in shown),
            )
            for shown in by_key.values()
            if len({when for when, _ in shown}) >= 2
        ]
        return sorted(recurring, key=lambda one: (-len(one.days), -one.lines, one.text))


def _spark(day: DayResult) -> str:
    """One block per point lost from the top (10 █, 9 ▇, 8 ▆ … 4 ▂), the lowest block from there down.

    Scores live near the top: a linear scale would draw 8 and 9 (a point lost, a day worth reading) the same.
    """
    if not day.scored:
        return UNKNOWN_MARK
    lost = max(0, day.max_score - day.score)
    return SPARK[max(0, len(SPARK) - 1 - lost)]


def series_line(values: Sequence[float | None]) -> str:
    """A day-by-day series as a sparkline scaled to its maximum, "?" for a day without a value."""
    known = [value for value in values if value is not None]
    top = max(known) if known else 0.0
    marks = []
    for value in values:
        if value is None:
            marks.append(UNKNOWN_MARK)
        elif top <= 0:
            marks.append(SPARK[0])
        else:
            marks.append(SPARK[min(len(SPARK) - 1, round(value / top * (len(SPARK) - 1)))])
    return "".join(marks)


def format_value(name: str, value: float | None) -> str:
    """A day's value of ``name`` as read on a phone: counts for error lines, percentages for conntrack."""
    if value is None:
        return "?"
    return fmt_percent(value) if name == "conntrack" else fmt_int(value)

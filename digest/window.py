"""Turning what the user asked for (a calendar day, or the last N hours up to a moment) into a `Window`.

Only this module and the CLI/scheduler know "now": the CLI reads the clock and passes it in, so replaying a past
day runs exactly the code of today's digest.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from checks.contract import Window

MAX_WINDOW = timedelta(days=7)
_DURATION = re.compile(r"^(?P<amount>\d+)(?P<unit>[mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


class WindowError(ValueError):
    """The window asked for does not make sense; the message says why, for a usage reply."""


def parse_duration(text: str) -> timedelta:
    """``24h``, ``90m``, ``2d`` → a timedelta between one minute and seven days."""
    match = _DURATION.match(text.strip())
    if not match:
        raise WindowError(f"{text!r} is not a duration like 24h, 90m or 2d")
    span = timedelta(**{_UNITS[match.group("unit")]: int(match.group("amount"))})
    if span < timedelta(minutes=1) or span > MAX_WINDOW:
        raise WindowError(f"{text!r} is outside 1m..7d")
    return span


def parse_date(text: str) -> date:
    """A calendar day ``YYYY-MM-DD``."""
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise WindowError(f"{text!r} is not a date like 2026-07-20") from None


def parse_moment(text: str) -> datetime:
    """An RFC 3339 moment with an explicit offset (``2026-07-21T12:00:00Z``)."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise WindowError(f"{text!r} is not an RFC 3339 time like 2026-07-21T12:00:00Z") from None
    if moment.tzinfo is None:
        raise WindowError(f"{text!r} has no time zone offset (add Z or +02:00)")
    return moment


def day_window(day: date, zone: ZoneInfo) -> Window:
    """The calendar day in the reader's zone: [00:00, next 00:00) local, 23 or 25 h on DST days."""
    start = datetime.combine(day, time.min, tzinfo=zone)
    end = datetime.combine(day + timedelta(days=1), time.min, tzinfo=zone)
    return Window(start=start.astimezone(UTC), end=end.astimezone(UTC), zone=zone, label=day.isoformat())


def last_window(span: timedelta, at: datetime, zone: ZoneInfo) -> Window:
    """The ``span`` ending at ``at`` (truncated to the second so that every query of the digest agrees)."""
    end = at.astimezone(UTC).replace(microsecond=0)
    local_end = end.astimezone(zone)
    hours = span.total_seconds() / 3600
    length = f"{hours:g}h" if hours == int(hours) else f"{int(span.total_seconds() // 60)}m"
    label = f"{length} to {local_end:%Y-%m-%d %H:%M}"
    return Window(start=end - span, end=end, zone=zone, label=label)

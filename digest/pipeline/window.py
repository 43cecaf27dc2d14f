"""Turning what the user asked for (a calendar day, or the last N hours up to a moment) into a `Window`.

Only this module and the CLI/scheduler know "now": the CLI reads the clock and passes it in, so replaying a past
day runs exactly the code of today's digest.

Everything typed by a user is checked here: ASCII digits only (Python's ``int()`` and a regular expression's
digit class also take Arabic-Indic and other digits, which no one means in a date), days within
`FIRST_DAY`..`LAST_DAY` (so that the day after, the trends' days before and every time zone conversion stay inside
what `datetime` can hold), and a calendar day that the zone's clocks skipped (Samoa's 30 December 2011) is named as
such instead of becoming an empty window.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo

from digest.checks.contract import Window

MAX_WINDOW = timedelta(days=7)
# The days a digest can be asked for: no backend holds data before the Unix epoch, and a day in year 9999 has no
# "day after" that `datetime` can hold.
FIRST_DAY = date(1970, 1, 1)
LAST_DAY = date(9998, 12, 31)
_DURATION = re.compile(r"(?P<amount>[0-9]+)(?P<unit>[mhd])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


class WindowError(ValueError):
    """The window asked for does not make sense; the message says why, for a usage reply."""


def parse_duration(text: str) -> timedelta:
    """``24h``, ``90m``, ``2d`` → a timedelta between one minute and seven days."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise WindowError(f"{text!r} is not a duration like 24h, 90m or 2d")
    try:
        span = timedelta(**{_UNITS[match.group("unit")]: int(match.group("amount"))})
    except OverflowError:
        span = MAX_WINDOW * 2  # a number of days beyond what timedelta holds is as much "outside" as 8d
    if span < timedelta(minutes=1) or span > MAX_WINDOW:
        raise WindowError(f"{text!r} is outside 1m..7d")
    return span


def parse_date(text: str) -> date:
    """A calendar day ``YYYY-MM-DD`` between `FIRST_DAY` and `LAST_DAY`."""
    try:
        if not text.isascii():
            raise ValueError(text)
        day = date.fromisoformat(text.strip())
    except ValueError:
        raise WindowError(f"{text!r} is not a date like 2026-07-20") from None
    _check_day(day)
    return day


def parse_moment(text: str) -> datetime:
    """An RFC 3339 moment with an explicit offset (``2026-07-21T12:00:00Z``), on a day a digest can cover."""
    try:
        if not text.isascii():
            raise ValueError(text)
        moment = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise WindowError(f"{text!r} is not an RFC 3339 time like 2026-07-21T12:00:00Z") from None
    if moment.tzinfo is None:
        raise WindowError(f"{text!r} has no time zone offset (add Z or +02:00)")
    _check_day(moment.date())  # within the range, converting to UTC or any zone cannot overflow
    return moment


def _check_day(day: date) -> None:
    if not FIRST_DAY <= day <= LAST_DAY:
        raise WindowError(f"{day} is out of range: a digest covers days from {FIRST_DAY} to {LAST_DAY}")


def day_window(day: date, zone: tzinfo) -> Window:
    """The calendar day in the reader's zone: [00:00, next 00:00) local, 23 or 25 h on DST days.

    A midnight that falls in a gap (clocks jumping forward at 00:00) is read with ``fold=0``, the offset before the
    jump, which places it at the jump itself: the day starts when its first minute existed. A day the clocks skipped
    altogether has no minute at all, and is refused.
    """
    _check_day(day)
    start = datetime.combine(day, time.min, tzinfo=zone).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time.min, tzinfo=zone).astimezone(UTC)
    if end <= start:
        raise WindowError(f"{day} did not exist in {zone} (the clocks skipped it)")
    return Window(start=start, end=end, zone=zone, label=day.isoformat())


def last_window(span: timedelta, at: datetime, zone: ZoneInfo) -> Window:
    """The ``span`` ending at ``at`` (truncated to the second so that every query of the digest agrees)."""
    end = at.astimezone(UTC).replace(microsecond=0)
    local_end = end.astimezone(zone)
    hours = span.total_seconds() / 3600
    length = f"{hours:g}h" if hours == int(hours) else f"{int(span.total_seconds() // 60)}m"
    label = f"{length} to {local_end:%Y-%m-%d %H:%M}"
    return Window(start=end - span, end=end, zone=zone, label=label)


def as_asked(window: Window, now: datetime) -> Window:
    """``window`` as asked at ``now``: marked not over (``asked_at``) when ``now`` is before its end."""
    return replace(window, asked_at=now.astimezone(UTC)) if now < window.end else window


# The daily post ------------------------------------------------------------------------------------------------------
# The scheduled post of a day happens when the zone's clocks show the post time; the day's digest covers everything
# since the previous day's post. Windows therefore tile time exactly: 23 h on the spring change, 25 h in autumn, and
# every hour in exactly one daily window, whatever the zone does (30-minute shifts, a skipped day).


def post_moment(day: date, at: time, zone: tzinfo) -> datetime:
    """The instant (UTC) the clocks of ``zone`` showed ``at`` on ``day``.

    Twice (a fold, clocks going back): the first time. Never (a gap, clocks jumping forward over it, or the whole
    day skipped): the first instant after the gap, so a 02:30 post on a spring change goes out at 03:00, once, and
    never at a computed moment still in the future.
    """
    wall = datetime.combine(day, at.replace(tzinfo=None))
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return first
    # In a gap: read with the offset after the jump the wall time lies before the transition, with the offset before
    # it after; the transition (the first instant whose wall time is past ``wall``) lies between, found by halving.
    low = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    high = first
    if high < low:
        low, high = high, low
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(zone).replace(tzinfo=None) >= wall:
            high = middle
        else:
            low = middle
    # The halving ends with the transition in (low, high] and high less than a second after it; transitions fall on
    # whole seconds, so it is high's whole second.
    return high.replace(microsecond=0)


def last_post(now: datetime, at: time, zone: tzinfo) -> tuple[date, datetime]:
    """The day and instant of the most recent scheduled post at or before ``now``.

    Two days whose posts fall on the same instant (a post at 00:00 after a skipped day) are one post: the later day.
    """
    local_day = now.astimezone(zone).date()
    for back in range(0, 4):
        day = local_day - timedelta(days=back)
        moment = post_moment(day, at, zone)
        if moment <= now:
            return day, moment
    raise WindowError(f"no post time {at:%H:%M} in {zone} in the four days before {now.isoformat()}")


def post_window(moment: datetime, at: time, zone: ZoneInfo) -> Window:
    """The daily window that ends at the scheduled post ``moment``: since the previous scheduled post.

    Consecutive posts' windows share their boundary, so no hour is in two daily digests and none in none.
    """
    _, previous = last_post(moment - timedelta(microseconds=1), at, zone)
    return last_window(moment - previous, moment, zone)

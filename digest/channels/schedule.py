"""The delivery schedule, whichever channel and process posts: which scheduled post is due, its key and its window.

The daily post covers the time since the previous scheduled moment — 24 h, or 23 or 25 across a DST change, so every
hour is in exactly one daily digest — and is keyed by its local day (``daily:2026-07-20``). The week at a glance is
posted on the weekly post's day at the same moment, for the last complete ISO week, keyed by it
(``weekly:2026-W29``). A post is due from its moment until the grace after it (a restart, a controller that was
down: ``DIGEST_LATE_GRACE_HOURS``) and is late once more than `LATE_AFTER` past its moment.

One definition for everyone who posts: the bot's scheduled rounds and `digest run --scheduled` (a CronJob) read their
keys and windows here, so a day is one delivery per recipient whoever posts it, however often.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from digest.checks.contract import Window
from digest.pipeline.week import iso_week, last_complete_week
from digest.pipeline.window import last_post, post_moment, post_window

# A post sent this long after its moment is marked late ("(late)" in /status and the logs).
LATE_AFTER = timedelta(minutes=2)


def daily_key(day: date) -> str:
    """The delivery key of the scheduled post of ``day`` (local): one per day, whoever posts it (bot or CronJob)."""
    return f"daily:{day.isoformat()}"


def weekly_key(year: int, week: int) -> str:
    """The delivery key of the week at a glance: one per ISO week."""
    return f"weekly:{iso_week(year, week)}"


@dataclass(frozen=True)
class ScheduledDay:
    """The most recent daily post: its key, local day, scheduled moment and window."""

    key: str
    day: date
    moment: datetime
    window: Window


@dataclass(frozen=True)
class ScheduledWeek:
    """The week at a glance posted at a daily moment: its key and ISO week."""

    key: str
    year: int
    week: int


def scheduled_day_of(key: str, post_time: time, zone: ZoneInfo) -> ScheduledDay | None:
    """The daily post a delivery key names (`daily_key`), with its moment and window; None for another key."""
    if not key.startswith("daily:"):
        return None
    day = date.fromisoformat(key.removeprefix("daily:"))
    moment = post_moment(day, post_time, zone)
    return ScheduledDay(key, day, moment, post_window(moment, post_time, zone))


def last_scheduled_day(now: datetime, post_time: time, zone: ZoneInfo) -> ScheduledDay:
    """The daily post whose moment is the last at or before ``now`` (``post_time``: a wall time in ``zone``)."""
    day, moment = last_post(now, post_time, zone)
    return ScheduledDay(daily_key(day), day, moment, post_window(moment, post_time, zone))


def daily_due(now: datetime, post_time: time, zone: ZoneInfo, grace: timedelta) -> tuple[ScheduledDay, bool] | None:
    """The daily post owed at ``now`` and whether it is late; None once its grace has passed."""
    scheduled = last_scheduled_day(now, post_time, zone)
    if now - scheduled.moment > grace:
        return None
    return scheduled, now - scheduled.moment > LATE_AFTER


def weekly_due(
    now: datetime, post_time: time, zone: ZoneInfo, grace: timedelta, weekday: int | None
) -> tuple[ScheduledWeek, bool] | None:
    """The week at a glance owed at ``now`` (on ``weekday``, Monday 0) and whether it is late; None when none is."""
    if weekday is None:
        return None
    day, moment = last_post(now, post_time, zone)
    if day.weekday() != weekday or now - moment > grace:
        return None
    year, week = last_complete_week(day)
    return ScheduledWeek(weekly_key(year, week), year, week), now - moment > LATE_AFTER


@dataclass(frozen=True)
class Schedule:
    """When the scheduled posts fall: the daily moment (a wall time in ``zone``), its grace, the weekly post's day."""

    zone: ZoneInfo
    post_time: time  # a wall time, no tzinfo: DST may skip or repeat it
    grace: timedelta
    weekly_on: int | None = None  # Monday 0; None: no weekly post

    def daily_due(self, now: datetime) -> tuple[ScheduledDay, bool] | None:
        """The daily post owed at ``now`` and whether it is late; None once its grace has passed."""
        return daily_due(now, self.post_time, self.zone, self.grace)

    def weekly_due(self, now: datetime) -> tuple[ScheduledWeek, bool] | None:
        """The week at a glance owed at ``now`` and whether it is late; None when none is."""
        return weekly_due(now, self.post_time, self.zone, self.grace, self.weekly_on)

    def next_post(self, now: datetime) -> datetime:
        """The next scheduled post moment after ``now`` (23 or 25 h after the last one on a DST change)."""
        day = now.astimezone(self.zone).date()
        while (moment := post_moment(day, self.post_time, self.zone)) <= now:
            day += timedelta(days=1)
        return moment

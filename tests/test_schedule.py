"""The delivery schedule: one key and window per scheduled post, the same for the bot's rounds and a CronJob."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

from digest.app.cli import scheduled_post
from digest.app.settings import load_settings
from digest.channels.schedule import daily_due, last_scheduled_day, scheduled_day_of, weekly_due, weekly_key

PARIS = ZoneInfo("Europe/Paris")
NOON = time(12, 0)
GRACE = timedelta(hours=6)


def test_the_daily_post_is_due_from_its_moment_until_its_grace_and_late_after_two_minutes() -> None:
    """12:00:05 Paris: today's post, on time; 12:03: late; 18:01: past the 6 h grace, nothing due."""
    at = datetime(2026, 7, 21, 10, 0, 5, tzinfo=UTC)  # 12:00:05 in Paris (CEST)
    due = daily_due(at, NOON, PARIS, GRACE)
    assert due is not None
    scheduled, late = due
    assert (scheduled.key, late) == ("daily:2026-07-21", False)
    assert scheduled.window.start == datetime(2026, 7, 20, 10, tzinfo=UTC)
    assert scheduled.window.end == datetime(2026, 7, 21, 10, tzinfo=UTC)
    late_due = daily_due(at + timedelta(minutes=3), NOON, PARIS, GRACE)
    assert late_due is not None
    assert late_due[1] is True
    assert daily_due(at + timedelta(hours=6, minutes=1), NOON, PARIS, GRACE) is None


def test_the_week_at_a_glance_is_due_on_its_day_only() -> None:
    """Monday 2026-07-20 at noon: the week 2026-W29 is due; on Tuesday, or with the weekly post off, nothing."""
    monday = datetime(2026, 7, 20, 10, 0, 30, tzinfo=UTC)
    due = weekly_due(monday, NOON, PARIS, GRACE, weekday=0)
    assert due is not None
    assert (due[0].key, due[0].year, due[0].week, due[1]) == ("weekly:2026-W29", 2026, 29, False)
    assert weekly_due(monday + timedelta(days=1), NOON, PARIS, GRACE, weekday=0) is None
    assert weekly_due(monday, NOON, PARIS, GRACE, weekday=None) is None


def test_the_cronjob_posts_the_bots_own_day_whenever_it_runs() -> None:
    """`digest run --scheduled` posts the bot's key and window at any hour (09:00: the day that ended at last noon)."""
    settings = load_settings(timezone="Europe/Paris", post_at="12:00", policy_file=None)
    for at in (datetime(2026, 7, 21, 10, 0, 1, tzinfo=UTC), datetime(2026, 7, 22, 7, 0, tzinfo=UTC)):
        key, window = scheduled_post(settings, at)
        bot = last_scheduled_day(at, NOON, PARIS)
        assert (key, window) == (bot.key, bot.window)
    assert scheduled_post(settings, datetime(2026, 7, 22, 7, 0, tzinfo=UTC))[0] == "daily:2026-07-21"


def test_a_daily_key_names_the_same_post_as_its_schedule() -> None:
    """The daily post a key names (for its buttons) has the moment and window the schedule gave it; a week's: none."""
    zone = ZoneInfo("Europe/Paris")
    at = time(12, 0)
    scheduled = last_scheduled_day(datetime(2026, 7, 21, 10, 30, tzinfo=UTC), at, zone)
    assert scheduled_day_of(scheduled.key, at, zone) == scheduled
    assert scheduled_day_of(weekly_key(2026, 29), at, zone) is None

"""Delivery under faults (issue 31): one post per chat and scheduled day, whatever runs it and however often.

Against the project's Bot-API-shaped server (`tests.fake_telegram`) and the `digest` command as the CronJob runs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from digest.pipeline.window import last_post, post_moment, post_window
from testbed.embedded import EmbeddedBackends
from tests.command import backend_env, run_digest
from tests.fake_telegram import FakeTelegram

TOKEN = "123456:AAE-secret-token-for-fault-tests"  # noqa: S105  # a test token
HEALTHY = -1001234567890
GONE = -1009999999999  # a chat the bot was removed from: "chat not found", for good


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    """A Telegram lookalike that knows the healthy chat only."""
    with FakeTelegram(TOKEN, known_chats={HEALTHY}) as server:
        yield server
        assert server.internal_errors == []


def _cronjob_env(backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path, chats: str) -> dict[str, str]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    return backend_env(
        backends,
        DIGEST_TELEGRAM_API_URL=tg.root,
        DIGEST_TELEGRAM_CHAT_IDS=chats,
        DIGEST_STATE_PATH=str(tmp_path / "state.sqlite"),
        DIGEST_TELEGRAM_TOKEN_FILE=str(token_file),
    )


def test_a_retried_cronjob_posts_the_scheduled_day_once_to_the_healthy_chat(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """The shipped CronJob's command run 4 times (backoffLimit 3) with one chat gone: one post, exit 2 each time."""
    env = _cronjob_env(corpus_backends, tg, tmp_path, f"{HEALTHY},{GONE}")
    runs = [run_digest("run", "--scheduled", "--post", env=env) for _ in range(4)]
    assert [run.returncode for run in runs] == [2, 2, 2, 2], runs[0].stderr
    assert f"chat {HEALTHY}: sent" in runs[0].stderr
    assert all(f"chat {HEALTHY}: already_sent" in run.stderr for run in runs[1:])
    assert all(f"chat {GONE}: failed_permanent" in run.stderr for run in runs)
    first = tg.sent_to(HEALTHY)
    assert first
    assert all(call.method == "sendMessage" for call in first)
    # Every retry found the same delivery: nothing more reached the healthy chat, nothing at all the gone one.
    assert len(tg.sent) == len(first)


ZONES = ("Europe/Berlin", "America/Santiago", "Australia/Lord_Howe", "Pacific/Apia", "America/New_York", "UTC")
POST_TIMES = (time(12, 0), time(2, 30), time(0, 0), time(0, 30), time(23, 59))


@pytest.mark.parametrize("zone_name", ZONES)
def test_daily_windows_tile_time_across_years_of_dst_changes(zone_name: str) -> None:
    """2010-2030 in each zone, at each post time: consecutive daily windows meet, none ends after its post moment."""
    zone = ZoneInfo(zone_name)
    for post in POST_TIMES:
        previous_end: datetime | None = None
        day = date(2010, 1, 1)
        while day < date(2030, 1, 1):
            moment = post_moment(day, post, zone)
            # What the scheduler finds at the moment itself is this post, and just before it an earlier one.
            found_day, found = last_post(moment, post, zone)
            assert found == moment
            assert last_post(moment - timedelta(microseconds=1), post, zone)[1] < moment
            window = post_window(moment, post, zone)
            assert window.end == moment
            if previous_end is not None and found_day == day:
                assert window.start == previous_end, (zone_name, post, day, window)
            if found_day == day:
                previous_end = window.end
            # The post moment shows the post time, or is the first instant after the clocks skipped it.
            local = moment.astimezone(zone)
            assert local.time().replace(tzinfo=None) >= post or local.date() > day, (zone_name, post, day, local)
            day += timedelta(days=1)


@pytest.mark.parametrize(
    ("zone_name", "day", "post", "expected"),
    [
        # Spring change in Berlin: 02:30 never happens; the post goes out at 03:00 CEST (01:00 UTC), once.
        ("Europe/Berlin", date(2026, 3, 29), time(2, 30), datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),
        # Autumn change: 02:30 happens twice; the first one posts.
        ("Europe/Berlin", date(2026, 10, 25), time(2, 30), datetime(2026, 10, 25, 0, 30, tzinfo=UTC)),
        # Lord Howe moves its clocks by 30 minutes: 02:15 is skipped, 02:30 is the first minute after the gap.
        ("Australia/Lord_Howe", date(2026, 10, 4), time(2, 15), datetime(2026, 10, 3, 15, 30, tzinfo=UTC)),
        # Samoa skipped 30 December 2011 altogether: that day's noon post is the first instant of the 31st.
        ("Pacific/Apia", date(2011, 12, 30), time(12, 0), datetime(2011, 12, 30, 10, 0, tzinfo=UTC)),
    ],
)
def test_a_post_time_the_clocks_skip_posts_at_the_first_moment_after_the_gap(
    zone_name: str, day: date, post: time, expected: datetime
) -> None:
    """A post time inside a skipped hour (or day) is the first instant after the gap; in a fold, the first one."""
    assert post_moment(day, post, ZoneInfo(zone_name)) == expected


def test_the_autumn_day_in_berlin_is_25_hours_and_no_hour_is_lost() -> None:
    """Noon posts around 2026-10-25 in Berlin: the 10-25 window holds 25 h, so 12:00-13:00 CEST on 10-24 is in one."""
    zone = ZoneInfo("Europe/Berlin")
    moments = [post_moment(date(2026, 10, day), time(12), zone) for day in (24, 25, 26)]
    windows = [post_window(moment, time(12), zone) for moment in moments]
    assert [w.end - w.start for w in windows] == [timedelta(hours=24), timedelta(hours=25), timedelta(hours=24)]
    assert windows[0].end == windows[1].start
    assert windows[1].end == windows[2].start
    assert windows[1].label == "25h to 2026-10-25 12:00"

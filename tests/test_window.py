"""Windows: calendar days in the reader's zone, last-N windows, and clear errors for bad input."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from digest.backends.victorialogs import time_filter
from digest.checks.contract import Window
from digest.pipeline.trends import earlier_windows
from digest.pipeline.window import WindowError, day_window, last_window, parse_date, parse_duration, parse_moment


def test_utc_day_is_exactly_one_day() -> None:
    """--date in UTC is [00:00Z, next 00:00Z)."""
    window = day_window(date(2026, 7, 20), ZoneInfo("UTC"))
    assert window.start == datetime(2026, 7, 20, tzinfo=UTC)
    assert window.end == datetime(2026, 7, 21, tzinfo=UTC)
    assert time_filter(window) == "_time:[2026-07-20T00:00:00Z, 2026-07-21T00:00:00Z)"
    assert window.promql_range() == "86400s"


def test_local_day_follows_the_zone_and_dst() -> None:
    """A Paris day starts at 22:00Z in summer, and the autumn DST day lasts 25 h."""
    paris = ZoneInfo("Europe/Paris")
    summer = day_window(date(2026, 7, 20), paris)
    assert summer.start == datetime(2026, 7, 19, 22, tzinfo=UTC)
    autumn = day_window(date(2026, 10, 25), paris)
    assert autumn.duration == timedelta(hours=25)


def test_last_window_ends_at_the_given_moment() -> None:
    """--last 6h --at T is [T-6h, T)."""
    window = last_window(parse_duration("6h"), parse_moment("2026-07-21T12:00:00Z"), ZoneInfo("UTC"))
    assert window.end == datetime(2026, 7, 21, 12, tzinfo=UTC)
    assert window.duration == timedelta(hours=6)
    assert window.label == "6h to 2026-07-21 12:00"


@pytest.mark.parametrize("text", ["", "24", "h", "0h", "8d", "-1h", "24 hours"])
def test_bad_durations_are_refused(text: str) -> None:
    """Durations outside 1m..7d or not of the form <n><m|h|d> are refused."""
    with pytest.raises(WindowError):
        parse_duration(text)


def test_bad_date_and_naive_moment_are_refused() -> None:
    """Malformed dates and moments without an offset get a clear error."""
    with pytest.raises(WindowError, match="not a date"):
        parse_date("2026-13-01")
    with pytest.raises(WindowError, match="no time zone"):
        parse_moment("2026-07-21T12:00:00")


def test_trends_leave_out_a_past_day_the_zone_skipped() -> None:
    """The week before Samoa's 31 December 2011 has six days: the skipped 30th is left out, not a reversed window."""
    zone = ZoneInfo("Pacific/Apia")
    windows = earlier_windows(day_window(date(2011, 12, 31), zone), 7)
    assert [window.label for window in windows] == [f"2011-12-{day:02d}" for day in (29, 28, 27, 26, 25, 24)]
    assert all(window.end > window.start for window in windows)


def test_a_ten_character_label_that_is_not_a_day_is_shifted_as_a_window() -> None:
    """A window labelled with ten characters that are no date (``loki-zeros``) gets its earlier windows by shifting."""
    start = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
    window = Window(start, start + timedelta(hours=2), UTC, "loki-zeros")
    earlier = earlier_windows(window, 1)
    assert [(one.start, one.end, one.label) for one in earlier] == [
        (start - timedelta(days=1), start + timedelta(hours=2) - timedelta(days=1), "loki-zeros −1d")
    ]

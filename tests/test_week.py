"""The week at a glance: seven daily digests summed up, read from the state file or computed, never guessed.

On the corpus, ISO week 2026-W33 (Mon 08-10 – Sun 08-16) holds two incident days (08-12 and 08-16) and five days
without any data: the week must say exactly what the seven daily digests of a replay say, name Wednesday as the worst
day with its own explanation, and list the five blind days as not seen — never as calm.
"""

from __future__ import annotations

import io
import json
import struct
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from digest.app.engine import Config, make_week
from digest.app.replay import replay
from digest.app.settings import load_settings
from digest.output.render import Renderer, week_headline
from digest.output.week_chart import render_week_chart, week_caption, week_drawing
from digest.pipeline.policy import Policy
from digest.pipeline.score import DigestStatus
from digest.pipeline.state import HistoryStore
from digest.pipeline.week import (
    DayResult,
    DaySignature,
    Week,
    day_result,
    decode_day,
    encode_day,
    last_complete_week,
    parse_iso_week,
    week_days,
)
from digest.pipeline.window import WindowError
from digest.testbed.embedded import EmbeddedBackends
from tests.command import backend_env, run_digest

W33 = (2026, 33)
W33_DAYS = week_days(*W33)


def _config(backends: EmbeddedBackends) -> Config:
    settings = load_settings(
        vm_url=backends.metrics.url,
        vl_url=backends.logs.url,
        cluster="homelab",
        timezone="UTC",
        policy_file=None,
    )
    return Config(settings=settings, policy=Policy())


def _day(day: date, score: int | None, *signatures: DaySignature, error_lines: float | None = None) -> DayResult:
    if score is None:
        return DayResult(day, DigestStatus.UNKNOWN, 10, 10, "not checked: error_lines", blind=True)
    status = DigestStatus.OK if score == 10 else DigestStatus.WARNING if score == 9 else DigestStatus.CRITICAL
    return DayResult(day, status, score, 10, f"day {day}", error_lines=error_lines, signatures=signatures)


async def test_a_replayed_week_matches_its_seven_daily_digests(corpus_backends: EmbeddedBackends) -> None:
    """Each day of the week equals the summary of that day's replayed digest; Wednesday is the worst, in its words."""
    config = _config(corpus_backends)
    digests = await replay(config, W33_DAYS, "summary", 2, io.StringIO(), io.StringIO())
    week = await make_week(config, *W33)
    assert list(week.days) == [day_result(day, digest) for day, digest in zip(W33_DAYS, digests, strict=True)]
    assert [day.status for day in week.days] == [digest.status for digest in digests]
    worst = week.worst
    assert worst is not None
    assert (worst.day, worst.status, worst.score) == (date(2026, 8, 12), DigestStatus.CRITICAL, 8)
    assert worst.why == digests[2].explanations[0].text
    assert week.blind_days == tuple(W33_DAYS[index] for index in (0, 1, 3, 4, 5))
    text = Renderer().render_week(week, "text")
    assert text.splitlines()[0] == week_headline(week)
    assert week_headline(week) == (
        "CRITICAL · homelab · week 2026-W33 (08-10 – 08-16) · worst 8/10 on Wed · 5 days not graded"
    )
    assert "Scores ??▆???▇ · Mon ? · Tue ? · Wed 8 · Thu ? · Fri ? · Sat ? · Sun 9" in text
    assert "? nothing seen on Mon, Tue, Thu, Fri, Sat: every graded check UNKNOWN" in text
    assert f"Worst day Wed 08-12 · CRITICAL 8/10 · {worst.why}" in text


async def test_the_week_reads_the_days_a_state_file_holds(corpus_backends: EmbeddedBackends, tmp_path: Path) -> None:
    """Days seen whole are stored and read back the next time; the blind days are computed again, never stored."""
    config = _config(corpus_backends)
    store = HistoryStore(tmp_path / "state.sqlite")
    try:
        first = await make_week(config, *W33, store=store)
        again = await make_week(config, *W33, store=store)
    finally:
        store.close()
    assert first.stored == 0
    # Wednesday and Sunday were seen whole (a diagnostic check UNKNOWN for want of its series does not stop that).
    assert again.stored == 2
    assert [day.blind for day in again.days] == [True, True, False, True, True, True, False]
    assert again.days == first.days


def test_the_cli_prints_the_week_and_refuses_bad_or_unfinished_weeks(corpus_backends: EmbeddedBackends) -> None:
    """`digest run --week 2026-W33 --format json` prints the seven days; a malformed or future week is a usage error."""
    env = backend_env(corpus_backends)
    result = run_digest("run", "--week", "2026-W33", "--format", "json", env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["week"] == "2026-W33"
    assert [day["date"] for day in payload["days"]] == [day.isoformat() for day in W33_DAYS]
    assert [day["score"] for day in payload["days"]] == [None, None, 8, None, None, None, 9]
    assert payload["worst_day"] == "2026-08-12"
    for bad, said in (("2026-33", "expected an ISO week"), ("2026-W54", "has no week 54"), ("2999-W01", "not over")):
        refused = run_digest("run", "--week", bad, env=env, timeout=60)
        assert refused.returncode == 2, (bad, refused.stderr)
        assert said in refused.stderr


def test_the_week_chart_marks_unscored_days(tmp_path: Path) -> None:
    """The weekly PNG is 1080 × 1080 and shows a "?" where a day has no score or no count, never an empty bar."""
    days = [
        _day(day, score, error_lines=lines)
        for day, score, lines in zip(
            W33_DAYS, (10, None, 8, 9, 10, None, 10), (3, None, 90_000, 12, 0, None, 5), strict=True
        )
    ]
    week = Week("homelab", *W33, days=tuple(days))
    path = tmp_path / "week.png"
    render_week_chart(week, path)
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (1080, 1080)
    drawing = week_drawing(week)
    marks = [text for text in drawing.texts if text.text == "?"]
    assert len(marks) == 4  # two days, two panels
    assert all(  # every text inside the figure
        text.box[0] >= 0 and text.box[2] <= 1080 and text.box[1] >= 0 and text.box[3] <= 1080 for text in drawing.texts
    )
    assert week_caption(week) == f"{week_headline(week)}\nScores █?▆▇█?█"


def test_recurring_signatures_and_unseen_checks_are_gathered_across_days() -> None:
    """A signature shown on two days recurs (days and lines summed); one shown once does not."""
    storm = DaySignature("k1", "feeds/relay", "ERROR relay: connect ETIMEDOUT <IP4>:<N>", 1_000)
    once = DaySignature("k2", "shop/api", "readiness check timed out", 10)
    days = [_day(day, 10) for day in W33_DAYS]
    days[1] = _day(W33_DAYS[1], 8, storm, once)
    days[2] = _day(W33_DAYS[2], 9, storm)
    days[3] = DayResult(W33_DAYS[3], DigestStatus.WARNING, 9, 10, "x", unseen=(("conntrack", "partial"),))
    week = Week("homelab", *W33, days=tuple(days))
    [recurring] = week.recurring
    assert (recurring.text, recurring.days, recurring.lines) == (storm.text, (W33_DAYS[1], W33_DAYS[2]), 2_000)
    assert week.unseen == [("conntrack", "partial", (W33_DAYS[3],))]
    text = Renderer().render_week(week, "text")
    assert "• feeds/relay · 2 days (Tue, Wed) · 2,000 lines · ERROR relay: connect ETIMEDOUT <IP4>:<N>" in text
    assert "? partial on Thu: conntrack" in text


def test_a_week_with_an_unseen_day_is_never_a_clean_ok() -> None:
    """Six OK days and one blind day read UNKNOWN: the unseen day may have been the bad one."""
    days = [_day(day, 10) for day in W33_DAYS]
    days[4] = _day(W33_DAYS[4], None)
    week = Week("homelab", *W33, days=tuple(days))
    assert week.status is DigestStatus.UNKNOWN
    assert week.sparkline == "████?██"
    assert Week("homelab", *W33, days=tuple(_day(day, 10) for day in W33_DAYS)).status is DigestStatus.OK


def test_a_day_result_survives_the_state_file() -> None:
    """What the week stores of a day reads back equal, signatures and unseen checks included."""
    day = DayResult(
        date(2026, 8, 12),
        DigestStatus.CRITICAL,
        8,
        10,
        "why",
        unseen=(("alerts", "UNKNOWN"),),
        error_lines=1_295,
        conntrack=0.037,
        signatures=(DaySignature("k", "shop/api", "readiness check timed out", 1_295),),
    )
    assert decode_day(encode_day(day)) == day


@pytest.mark.parametrize(
    ("text", "said"),
    [("2026-W5", None), ("2026-w33", None), ("26-W33", "expected"), ("2026-W00", "has no week 0"), ("now", "expected")],
)
def test_iso_weeks_are_parsed_strictly(text: str, said: str | None) -> None:
    """ISO weeks parse in either case with one or two digits; anything else names the expected form."""
    if said is None:
        assert parse_iso_week(text)[0] == 2026
        return
    with pytest.raises(WindowError, match=said):
        parse_iso_week(text)


def test_the_last_complete_week_is_the_one_before_today() -> None:
    """On Monday 2026-08-17 the last complete week is 2026-W33; on Sunday 08-16 it is still 2026-W32."""
    assert last_complete_week(date(2026, 8, 17)) == W33
    assert last_complete_week(date(2026, 8, 16)) == (2026, 32)
    assert last_complete_week(datetime(2026, 8, 23, tzinfo=UTC).date()) == W33

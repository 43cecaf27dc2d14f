"""Delivery under faults (issue 31): one post per chat and scheduled day, whatever runs it and however often.

Against the project's Bot-API-shaped server (`tests.fake_telegram`) and the `digest` command as the CronJob runs it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sqlite3
import subprocess
import time as clock_time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

import httpx
import pytest

from digest.app.engine import Config
from digest.app.health import DigestMetrics
from digest.app.settings import load_settings
from digest.backends.http import Endpoint
from digest.backends.prometheus import PrometheusSource
from digest.channels.channel import Outcome, Photo
from digest.channels.dispatch import Digests
from digest.channels.state import DeliveryState, Part, PartKind
from digest.channels.telegram.bot import DigestBot, build_application
from digest.channels.telegram.sender import Poster, Sender, open_bot
from digest.checks.contract import Window
from digest.pipeline.policy import Policy
from digest.pipeline.window import last_post, post_moment, post_window
from digest.testbed.embedded import EmbeddedBackends, free_port
from tests.command import DIGEST, backend_env, clean_env, run_digest
from tests.fake_telegram import FakeTelegram
from tests.forward_proxy import forward_proxy
from tests.test_bot import QUIET, TOKEN, Clock, running, visible, wait_until
from tests.test_channels import CannedDigests, noon_settings

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
    # The shipped command, then the one an older CronJob ran: "the last 24 h, posted" is the daily post too.
    runs = [run_digest("run", "--scheduled", "--post", env=env) for _ in range(2)]
    runs += [run_digest("run", "--last", "24h", "--post", env=env) for _ in range(2)]
    assert [run.returncode for run in runs] == [2, 2, 2, 2], runs[0].stderr
    assert f"chat {HEALTHY}: sent" in runs[0].stderr
    assert all(f"chat {HEALTHY}: already_sent" in run.stderr for run in runs[1:])
    assert all(f"chat {GONE}: failed_permanent" in run.stderr for run in runs)
    first = tg.sent_to(HEALTHY)
    assert [call.method for call in first] == ["sendMessage", "sendPhoto"]  # the digest, then its chart
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


# Chats and access ---------------------------------------------------------------------------------------------------

ADMIN = 4242
STRANGERS = -1005555555555  # a group the admin is in, not a digest chat
SUPERGROUP = -1007777777777


@pytest.fixture
def chat_tg() -> Iterator[FakeTelegram]:
    """A Telegram lookalike with the digest chat, a strangers' group and the admin's private chat."""
    with FakeTelegram(TOKEN, known_chats={HEALTHY, STRANGERS, ADMIN}) as server:
        yield server
        assert server.internal_errors == []


def _bot_config(backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path) -> Config:
    settings = load_settings(
        vm_url=backends.metrics.url,
        vl_url=backends.logs.url,
        cluster="homelab",
        timezone="UTC",
        policy_file=None,
        telegram_token=TOKEN,
        telegram_api_url=tg.root,
        telegram_chat_ids=str(HEALTHY),
        telegram_admin_ids=str(ADMIN),
        state_path=tmp_path / "state.sqlite",
        telegram_chart=False,
        weekly_post="off",
        telegram_computing_notice_seconds=600.0,  # only the test of the notice wants one
    )
    return Config(settings=settings, policy=Policy())


async def test_an_admin_in_a_strangers_group_gets_a_refusal_never_the_digest(
    corpus_backends: EmbeddedBackends, chat_tg: FakeTelegram, tmp_path: Path
) -> None:
    """/digest by an allowed admin in a group of strangers: a short refusal there; in private, the digest."""
    async with running(_bot_config(corpus_backends, chat_tg, tmp_path), QUIET):
        await chat_tg.wait_for_poller_async()
        chat_tg.push_message(STRANGERS, "/digest 2026-07-20", user_id=ADMIN, chat_type="supergroup")
        chat_tg.push_message(STRANGERS, "/status", user_id=ADMIN, chat_type="supergroup")
        chat_tg.push_message(ADMIN, "/digest 2026-07-20", user_id=ADMIN, chat_type="private")
        await wait_until(lambda: len(chat_tg.sent_to(ADMIN)) >= 1 and len(chat_tg.sent_to(STRANGERS)) >= 2)
    refusals = [visible(call) for call in chat_tg.sent_to(STRANGERS)]
    assert refusals == ["Digests are posted only in the configured chats: ask there, or in a private chat."] * 2
    assert visible(chat_tg.sent_to(ADMIN)[0]).startswith("CRITICAL 8/10 · homelab · 2026-07-20")


async def test_edits_other_bots_commands_and_long_arguments(
    corpus_backends: EmbeddedBackends, chat_tg: FakeTelegram, tmp_path: Path
) -> None:
    """An edited /help is no new request, /x@OtherBot is not ours, and a 4,000-character argument still gets a reply."""
    async with running(_bot_config(corpus_backends, chat_tg, tmp_path), QUIET):
        await chat_tg.wait_for_poller_async()
        update = chat_tg.push_message(HEALTHY, "/help")
        await wait_until(lambda: len(chat_tg.sent_to(HEALTHY)) == 1)
        edited = {**update["message"], "edit_date": update["message"]["date"] + 5}
        chat_tg.push_update({"edited_message": edited})
        chat_tg.push_message(HEALTHY, "/digest@OtherBot 2026-07-20")
        chat_tg.push_message(HEALTHY, "/frobnicate@OtherBot")
        chat_tg.push_message(HEALTHY, "/digest " + "x" * 4_000)
        await wait_until(lambda: len(chat_tg.sent_to(HEALTHY)) >= 2)
        chat_tg.push_message(HEALTHY, "/help")  # answered after everything before it was handled
        await wait_until(lambda: len(chat_tg.sent_to(HEALTHY)) >= 3)
    answers = [visible(call) for call in chat_tg.sent_to(HEALTHY)]
    assert len(answers) == 3, answers
    assert answers[0] == answers[2]
    assert answers[1].startswith("'xxxx")
    assert len(answers[1]) <= 4_096
    assert "Usage: /digest" in answers[1] or answers[1].endswith("…")


async def test_a_group_that_became_a_supergroup_keeps_its_permission(
    corpus_backends: EmbeddedBackends, chat_tg: FakeTelegram, tmp_path: Path
) -> None:
    """Telegram's migration message moves the digest chat: /status from the supergroup is answered, not refused."""
    async with running(_bot_config(corpus_backends, chat_tg, tmp_path), QUIET):
        await chat_tg.wait_for_poller_async()
        chat_tg.migrate(HEALTHY, SUPERGROUP)
        chat_tg.push_update(
            {
                "message": {
                    "message_id": 1,
                    "date": 1_780_000_000,
                    "chat": {"id": SUPERGROUP, "type": "supergroup", "title": "ops"},
                    "migrate_from_chat_id": HEALTHY,
                }
            }
        )
        chat_tg.push_message(SUPERGROUP, "/status", chat_type="supergroup")
        await wait_until(lambda: len(chat_tg.sent_to(SUPERGROUP)) >= 1)
    [answer] = [visible(call) for call in chat_tg.sent_to(SUPERGROUP)]
    assert answer.startswith("digest status · homelab")


def test_a_busy_health_port_is_one_line_and_exit_2(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """`digest serve` with its health port taken by another listener: one line naming the setting, exit 2."""
    with socket.create_server(("0.0.0.0", 0)) as taken:  # noqa: S104  # the bot binds every address: so does the squatter
        port = taken.getsockname()[1]
        env = _cronjob_env(corpus_backends, tg, tmp_path, str(HEALTHY))
        result = run_digest("serve", env={**env, "DIGEST_HEALTH_PORT": str(port)}, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == f"digest: DIGEST_HEALTH_PORT: port {port} cannot be opened: Address already in use", lines
    assert "Traceback" not in result.stderr


# Bounded, independent sends ------------------------------------------------------------------------------------------

SLOW = -1003333333333  # a chat whose answers crawl through a broken proxy


async def test_a_trickling_chat_never_holds_another_and_is_not_repeated(
    corpus_backends: EmbeddedBackends, tmp_path: Path
) -> None:
    """SLOW answers 1 byte/s: HEALTHY is posted at once, /status shows SLOW in flight, SLOW's message is not resent."""
    with FakeTelegram(TOKEN, known_chats={HEALTHY, SLOW}) as server:
        server.trickle_next("sendMessage", 1.0, chat_id=SLOW, times=10)
        config = _bot_config(corpus_backends, server, tmp_path)
        config = Config(
            settings=config.settings.model_copy(update={"telegram_chat_ids": (SLOW, HEALTHY)}), policy=config.policy
        )
        noon = Clock(datetime(2026, 7, 20, 12, 0, 5, tzinfo=UTC))
        async with running(config, noon) as bot:
            await wait_until(lambda: len(server.sent_to(HEALTHY)) == 1, within=60)
            assert SLOW in bot.in_flight  # still crawling: the healthy chat did not wait for it
            status = await bot.status_text(None)
            assert f"Chat {SLOW}: sending daily:2026-07-20 for" in status
            await wait_until(lambda: SLOW in bot.last_results, within=60)
            assert bot.last_results[SLOW].outcome is Outcome.SENT
            assert bot.last_results[HEALTHY].outcome is Outcome.SENT
            # The 5-minute recheck finds both delivered.
            again = await bot.post_due()
            assert [result.outcome for result in again] == [Outcome.ALREADY_SENT, Outcome.ALREADY_SENT]
        assert len(server.sent_to(SLOW)) == 1
        assert len(server.sent_to(HEALTHY)) == 1
        assert server.internal_errors == []


# Health that means "can deliver" -------------------------------------------------------------------------------------


async def _healthz(port: int) -> tuple[int, str]:
    async with httpx.AsyncClient(timeout=5) as client:
        answer = await client.get(f"http://127.0.0.1:{port}/healthz")
    return answer.status_code, answer.text


async def _metric(port: int, line_start: str) -> float:
    async with httpx.AsyncClient(timeout=5) as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start)]
    return sum(values)


def _health_config(backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path, port: int) -> Config:
    config = _bot_config(backends, tg, tmp_path)
    settings = config.settings.model_copy(update={"health_port": port, "telegram_poll_stale_seconds": 2.0})
    return Config(settings=settings, policy=config.policy)


@pytest.mark.parametrize(("status", "said"), [(401, "refuses the bot token"), (409, "another process polls")])
async def test_a_refused_token_or_a_second_poller_fails_healthz_at_once(
    corpus_backends: EmbeddedBackends, chat_tg: FakeTelegram, tmp_path: Path, status: int, said: str
) -> None:
    """401 (token revoked) or 409 (a second bot on the token) on getUpdates: /healthz 503 naming it, and a metric."""
    port = free_port()
    config = _health_config(corpus_backends, chat_tg, tmp_path, port)
    async with running(config, QUIET, metrics=DigestMetrics()):
        await chat_tg.wait_for_poller_async()
        assert (await _healthz(port))[0] == 200
        chat_tg.fail_next("getUpdates", status=status, times=1_000)

        async def failing() -> bool:
            code, body = await _healthz(port)
            return code == 503 and said in body

        await _eventually(failing)
        reason = "unauthorized" if status == 401 else "conflict"
        assert await _metric(port, f'digest_telegram_poll_failures_total{{reason="{reason}"}}') >= 1
        chat_tg.clear_faults()


async def test_polls_failing_longer_than_the_limit_fail_healthz_until_one_succeeds(
    corpus_backends: EmbeddedBackends, chat_tg: FakeTelegram, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """502 on every poll: 503 past the 2 s limit, 200 again once a poll answers; the failure logged once."""
    port = free_port()
    config = _health_config(corpus_backends, chat_tg, tmp_path, port)
    async with running(config, QUIET, metrics=DigestMetrics()):
        await chat_tg.wait_for_poller_async()
        chat_tg.fail_next("getUpdates", status=502, times=1_000)

        async def failing() -> bool:
            code, body = await _healthz(port)
            return code == 503 and "no poll of Telegram succeeded" in body

        await _eventually(failing)
        chat_tg.clear_faults()

        async def healthy() -> bool:
            return (await _healthz(port))[0] == 200

        await _eventually(healthy, within=40)
        assert await _metric(port, "digest_telegram_last_poll_success_timestamp_seconds") > 0
    said = [record for record in caplog.records if "polling Telegram failed (server_error" in record.getMessage()]
    assert len(said) == 1


async def _eventually(condition: Callable[[], Awaitable[bool]], within: float = 30.0) -> None:
    """Bounded poll of an async condition."""
    deadline = asyncio.get_running_loop().time() + within
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


# Stop and restart cleanly --------------------------------------------------------------------------------------------


def test_sigterm_while_a_post_waits_out_a_429_stops_at_once_and_releases_the_claim(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """`digest serve` waiting out Telegram's "retry after 60": SIGTERM exits 0 within 25 s, the claim released."""
    env = _cronjob_env(corpus_backends, tg, tmp_path, str(HEALTHY))
    now = datetime.now(UTC)
    post_at = (now - timedelta(minutes=1)).strftime("%H:%M")
    env.update(DIGEST_POST_AT=post_at, DIGEST_TIMEZONE="UTC", DIGEST_HEALTH_PORT="0", DIGEST_WEEKLY_POST="off")
    tg.fail_next("sendMessage", status=429, retry_after=60, times=100)
    process = subprocess.Popen([*DIGEST, "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        tg.wait_for_calls("sendMessage", timeout=90)
        started = clock_time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=25)
        took = clock_time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr[-2_000:]
    assert took < 25
    # The stop is said in a line, not in the scheduler's traceback of the cancelled post.
    assert "Traceback" not in stderr, stderr[-3_000:]
    assert "CancelledError" not in stderr, stderr[-3_000:]
    state = DeliveryState(tmp_path / "state.sqlite", "after")
    try:
        [delivery] = [d for d in state.latest(str(HEALTHY)) if d.key.startswith("daily:")]
        assert delivery.status == "failed"
        assert delivery.error == "interrupted: the process stopped"
        assert state.claim(str(HEALTHY), delivery.key, 60)  # free at once, not after a lease
    finally:
        state.close()
    assert tg.sent_to(HEALTHY) == []


async def test_a_killed_process_claim_is_taken_over_and_its_chart_never_sent_twice(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    """What SIGKILL mid chart upload leaves is taken over after the 60 s lease; the chart is noted, never resent."""
    path = tmp_path / "state.sqlite"
    chat = str(HEALTHY)
    killed = DeliveryState(path, "killed")
    long_ago = clock_time.time() - 120  # the killed process's lease ran out a minute ago
    assert killed.claim(chat, "daily:2026-07-20", 60, now=long_ago)
    killed.store_parts(
        chat,
        "daily:2026-07-20",
        [Part(1, PartKind.TEXT, "OK 10/10 · homelab"), Part(2, PartKind.PHOTO, "caption", b"\x89PNG", "digest.png")],
    )
    killed.mark_part_sent(chat, "daily:2026-07-20", 1, 41)
    assert killed.begin_part_send(chat, "daily:2026-07-20", 2, most=1)  # the upload went out; the process died
    killed.close()
    state = DeliveryState(path, "restarted")
    try:
        async with open_bot(TOKEN, tg.root) as bot:
            result = await Poster(Sender(bot, state=state), state).post_once(HEALTHY, "daily:2026-07-20", _never)
        assert result.outcome is Outcome.SENT
        assert result.error is not None
        assert result.error.startswith("the chart not confirmed: may have arrived")
        assert tg.sent == []
        assert state.get(chat, "daily:2026-07-20").status == "sent"  # type: ignore[union-attr]
    finally:
        state.close()


async def _never() -> str:
    raise AssertionError("the stored parts are sent, never a recomputed digest")


@pytest.mark.parametrize(("lost", "copies"), [(1, 2), (5, 2)])
async def test_a_lost_answer_repeats_a_message_once_at_most(
    tg: FakeTelegram, tmp_path: Path, lost: int, copies: int
) -> None:
    """Telegram takes the message but the answer is lost: one resend (the documented duplicate), never more."""
    tg.lose_next("sendMessage", chat_id=HEALTHY, times=lost)
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    try:
        async with open_bot(TOKEN, tg.root) as bot:
            result = await Poster(Sender(bot, state=state), state).post_once(HEALTHY, "daily:2026-07-20", _message)
    finally:
        state.close()
    assert result.outcome is Outcome.SENT
    assert len(tg.sent_to(HEALTHY)) == copies
    if lost > 1:
        assert result.error is not None
        assert "not confirmed" in result.error


async def _message() -> str:
    return "<b>OK 10/10</b> · homelab"


# SQLite off the event loop -------------------------------------------------------------------------------------------


async def test_a_locked_state_file_never_freezes_the_bot(
    corpus_backends: EmbeddedBackends, chat_tg: FakeTelegram, tmp_path: Path
) -> None:
    """Another process holds the state file's write lock while the noon post runs: /healthz answers throughout."""
    port = free_port()
    config = _health_config(corpus_backends, chat_tg, tmp_path, port)
    quiet = Clock(QUIET.now)
    async with running(config, quiet, metrics=DigestMetrics()) as bot:
        await chat_tg.wait_for_poller_async()
        holder = sqlite3.connect(tmp_path / "state.sqlite", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            quiet.now = datetime(2026, 7, 20, 12, 0, 5, tzinfo=UTC)
            post = asyncio.create_task(bot.post_due())
            for _ in range(6):  # three seconds of probes, each answered within a second
                started = asyncio.get_running_loop().time()
                code, _ = await _healthz(port)
                assert code == 200
                assert asyncio.get_running_loop().time() - started < 1.0
                await asyncio.sleep(0.5)
            assert not post.done()  # the post is the one waiting for the lock
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        results = await asyncio.wait_for(post, 60)
    assert [result.outcome for result in results] == [Outcome.SENT]
    assert len(chat_tg.sent_to(HEALTHY)) == 1


async def test_a_state_file_deleted_under_the_bot_is_written_back_and_the_day_posted_once(
    corpus_backends: EmbeddedBackends, chat_tg: FakeTelegram, tmp_path: Path
) -> None:
    """The state file deleted after the noon post: written back from the open copy, so a restart posts nothing."""
    config = _bot_config(corpus_backends, chat_tg, tmp_path)
    noon = Clock(datetime(2026, 7, 20, 12, 0, 5, tzinfo=UTC))
    async with running(config, noon) as bot:
        await wait_until(lambda: HEALTHY in bot.last_results)
        (tmp_path / "state.sqlite").unlink()
        again = await bot.post_due()  # the 5-minute recheck
        assert [result.outcome for result in again] == [Outcome.ALREADY_SENT]
        assert (tmp_path / "state.sqlite").exists()
    async with running(config, Clock(datetime(2026, 7, 20, 12, 10, tzinfo=UTC)), owner="restarted") as bot:
        await wait_until(lambda: HEALTHY in bot.last_results)
        assert bot.last_results[HEALTHY].outcome is Outcome.ALREADY_SENT
    assert len(chat_tg.sent_to(HEALTHY)) == 1


async def test_a_state_file_replaced_under_the_bot_refuses_to_post_and_fails_healthz(
    corpus_backends: EmbeddedBackends, chat_tg: FakeTelegram, tmp_path: Path
) -> None:
    """Another file put in its place: the noon post is refused (not posted blind), /healthz 503 and /status say why."""
    port = free_port()
    config = _health_config(corpus_backends, chat_tg, tmp_path, port)
    clock = Clock(QUIET.now)
    async with running(config, clock, metrics=DigestMetrics()) as bot:
        await chat_tg.wait_for_poller_async()
        other = tmp_path / "other.sqlite"
        DeliveryState(other, "someone else").close()
        other.replace(tmp_path / "state.sqlite")
        clock.now = datetime(2026, 7, 20, 12, 0, 5, tzinfo=UTC)
        results = await bot.post_due()
        assert [result.outcome for result in results] == [Outcome.FAILED]
        code, body = await _healthz(port)
        assert code == 503
        assert "replaced while in use" in body
        assert await _metric(port, 'digest_state_errors_total{kind="replaced"}') == 1
        assert "State file: the last post failed on it" in await bot.status_text(None)
    assert chat_tg.sent_to(HEALTHY) == []


# Network ------------------------------------------------------------------------------------------------------------


async def test_the_telegram_and_backend_clients_go_through_the_environment_s_proxy(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY set: getMe, sendMessage and the metrics query pass the proxy; NO_PROXY for the host: none does."""
    with forward_proxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        state = DeliveryState(tmp_path / "state.sqlite", "t")
        try:
            async with open_bot(TOKEN, tg.root) as bot:
                result = await Poster(Sender(bot, state=state), state).post_once(HEALTHY, "daily:x", _message)
        finally:
            state.close()
        source = PrometheusSource(Endpoint(name="VictoriaMetrics", url=corpus_backends.metrics.url))
        try:
            await source.instant("up", datetime(2026, 7, 20, 12, tzinfo=UTC))
        finally:
            await source.aclose()
        assert result.outcome is Outcome.SENT
        paths = [urlsplit(target).path for target in proxy.targets]
        assert any(path.endswith("/getMe") for path in paths)
        assert any(path.endswith("/sendMessage") for path in paths)
        assert "/api/v1/query" in paths
        seen = len(proxy.targets)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with open_bot(TOKEN, tg.root):
            pass
        assert len(proxy.targets) == seen


# The chat, as a person uses it ---------------------------------------------------------------------------------------


@dataclass
class _SlowDigests:
    """The bot's digests, each 4 s late (a big day on a slow backend)."""

    inner: Digests

    async def text(self, window: Window, fmt: str) -> str:
        await asyncio.sleep(4)
        return await self.inner.text(window, fmt)

    async def photo(self, window: Window) -> Photo | None:
        return await self.inner.photo(window)

    async def week_text(self, year: int, week: int, fmt: str) -> str:
        return await self.inner.week_text(year, week, fmt)

    async def week_photo(self, year: int, week: int) -> Photo | None:
        return await self.inner.week_photo(year, week)


async def test_a_slow_digest_shows_typing_and_a_notice_then_replies_to_its_request(
    corpus_backends: EmbeddedBackends, chat_tg: FakeTelegram, tmp_path: Path
) -> None:
    """/digest: typing at once, "Computing 2026-07-20…" after 3 s (then removed), the digest replying to the request."""
    config = _bot_config(corpus_backends, chat_tg, tmp_path)
    settings = config.settings.model_copy(update={"telegram_computing_notice_seconds": 3.0})
    async with running(Config(settings=settings, policy=config.policy), QUIET) as bot:
        bot.digests = _SlowDigests(bot.digests)
        await chat_tg.wait_for_poller_async()
        asked = chat_tg.push_message(HEALTHY, "/digest 2026-07-20")
        await wait_until(lambda: any(c.method == "deleteMessage" for c in chat_tg.calls), within=60)
    methods = [
        call.method for call in chat_tg.calls if call.method in ("sendChatAction", "sendMessage", "deleteMessage")
    ]
    assert methods[0] == "sendChatAction"
    assert methods[1:] == ["sendMessage", "sendMessage", "deleteMessage"]
    notice, digest = chat_tg.sent_to(HEALTHY)
    assert visible(notice) == "Computing 2026-07-20…"
    assert visible(digest).startswith("CRITICAL 8/10 · homelab · 2026-07-20")
    [answer] = [call for call in chat_tg.calls if call.method == "sendMessage" and "CRITICAL" in call.params["text"]]
    assert str(asked["message"]["message_id"]) in answer.params["reply_parameters"]


@dataclass
class _SlowCharts:
    """The bot's digests, their charts 3 s late (a chart drawn on a busy machine)."""

    inner: Digests

    async def text(self, window: Window, fmt: str) -> str:
        return await self.inner.text(window, fmt)

    async def photo(self, window: Window) -> Photo | None:
        await asyncio.sleep(3)
        return await self.inner.photo(window)

    async def week_text(self, year: int, week: int, fmt: str) -> str:
        return await self.inner.week_text(year, week, fmt)

    async def week_photo(self, year: int, week: int) -> Photo | None:
        return await self.inner.week_photo(year, week)


async def test_a_digests_chart_replies_to_its_text_and_no_answer_comes_between_them(
    corpus_backends: EmbeddedBackends, chat_tg: FakeTelegram, tmp_path: Path
) -> None:
    """/digest, then /status while the chart is drawn: the text, the chart (a reply to it), then the status."""
    config = _bot_config(corpus_backends, chat_tg, tmp_path)
    settings = config.settings.model_copy(update={"telegram_chart": True})
    async with running(Config(settings=settings, policy=config.policy), QUIET) as bot:
        bot.digests = _SlowCharts(bot.digests)
        await chat_tg.wait_for_poller_async()
        chat_tg.push_message(HEALTHY, "/digest 2026-07-20")
        await wait_until(lambda: any("CRITICAL" in visible(call) for call in chat_tg.sent_to(HEALTHY)), within=60)
        chat_tg.push_message(HEALTHY, "/status")
        await wait_until(lambda: len(chat_tg.sent_to(HEALTHY)) == 3, within=60)
    text, chart, status = chat_tg.sent_to(HEALTHY)
    assert visible(text).startswith("CRITICAL 8/10 · homelab · 2026-07-20")
    assert chart.method == "sendPhoto"
    assert json.loads(chart.params["reply_parameters"])["message_id"] == text.message_id
    assert visible(status).startswith("digest status · homelab")


async def test_help_explains_the_score_statuses_and_terms(
    corpus_backends: EmbeddedBackends, chat_tg: FakeTelegram, tmp_path: Path
) -> None:
    """/help says what the score and each status mean; /start says, in three lines, what the bot does in this chat."""
    async with running(_bot_config(corpus_backends, chat_tg, tmp_path), QUIET):
        await chat_tg.wait_for_poller_async()
        chat_tg.push_message(HEALTHY, "/help")
        await wait_until(lambda: len(chat_tg.sent_to(HEALTHY)) == 1)
        chat_tg.push_message(HEALTHY, "/start")
        await wait_until(lambda: len(chat_tg.sent_to(HEALTHY)) == 2)
    help_text, greeting = [visible(call) for call in chat_tg.sent_to(HEALTHY)]
    # /start is not the manual: what the bot does here, when it posts next, how to ask — three lines.
    assert greeting.startswith("I post the health digest of homelab here every day at ")
    assert "(next: " in greeting
    assert len(greeting.splitlines()) == 3
    for said in ("score starts at 10", "UNKNOWN", "not seen", "UH —", "UC —", "OOM —", "/digest 2026-07-20"):
        assert said in help_text
    assert len(help_text) < 1_500


@pytest.mark.parametrize("other", ["--date", "--scheduled"])
def test_at_goes_only_with_last(other: str) -> None:
    """`run --scheduled --at …` (or `--date … --at …`) is one usage line and exit 2: the schedule says when."""
    arguments = [other, "2026-07-20"] if other == "--date" else [other]
    result = run_digest("run", *arguments, "--at", "2026-07-21T12:00:00Z", env=clean_env())
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(f"--at goes with --last, not {other}")


# Once, whatever the clock does (issue 54) ---------------------------------------------------------------------------


async def test_the_daily_job_and_the_recheck_waking_together_post_once(tmp_path: Path) -> None:
    """A process frozen over the post time wakes with the daily job and the recheck due: one post per chat, not two."""
    second_chat = -1002222222222
    noon = datetime(2026, 7, 21, 12, 0, 5, tzinfo=UTC)
    state = DeliveryState(tmp_path / "state.sqlite", "frozen")
    with FakeTelegram(TOKEN, known_chats={HEALTHY, second_chat}) as server:
        settings = noon_settings(server.root, HEALTHY, second_chat)
        bot = DigestBot(settings=settings, state=state, digests=CannedDigests(delay=0.2), clock=lambda: noon)
        try:
            async with build_application(bot, TOKEN):
                woken = await asyncio.gather(bot.post_due(), bot.post_due(), bot.post_due())  # job, recheck, catch-up
        finally:
            state.close()
        assert [len(server.sent_to(chat)) for chat in (HEALTHY, second_chat)] == [1, 1]
    outcomes = sorted(result.outcome.value for results in woken for result in results)
    assert outcomes.count(Outcome.SENT.value) == 2
    assert set(outcomes) <= {Outcome.SENT.value, Outcome.BUSY.value, Outcome.ALREADY_SENT.value}


async def test_a_killed_runs_claim_is_taken_over_when_its_lease_runs_out_not_at_the_next_recheck(
    tmp_path: Path,
) -> None:
    """A post claimed by a process killed at the post time goes out when the claim's lease ends, not 5 min later."""
    noon = datetime(2026, 7, 21, 12, 0, 1, tzinfo=UTC)
    path = tmp_path / "state.sqlite"
    killed = DeliveryState(path, "killed")
    assert killed.claim(str(HEALTHY), "daily:2026-07-21", lease_seconds=3)  # then SIGKILL: nothing more
    killed.close()
    state = DeliveryState(path, "restarted")
    with FakeTelegram(TOKEN, known_chats={HEALTHY}) as server:
        bot = DigestBot(
            settings=noon_settings(server.root, HEALTHY), state=state, digests=CannedDigests(), clock=lambda: noon
        )
        application = build_application(bot, TOKEN)
        try:
            async with application:
                await application.start()  # the scheduler: the start-up check, then the rechecks
                try:
                    started = clock_time.monotonic()
                    await wait_until(lambda: len(server.sent_to(HEALTHY)) == 1, within=30)
                    took = clock_time.monotonic() - started
                finally:
                    await application.stop()
        finally:
            state.close()
        assert len(server.sent_to(HEALTHY)) == 1
    assert took < 60, f"taken over after {took:.0f} s: the recheck's five minutes, not the lease's end"

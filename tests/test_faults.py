"""Fault injection: Telegram misbehaving, the state file unusable, hostile data, and a hundred chats at once.

For each fault: no crash, nothing posted twice, and the failure visible (a log line, the outcome, the digest).
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from telegram import Bot
from telegram.request import HTTPXRequest

from digest.channels.channel import Outcome, Photo
from digest.channels.state import DeliveryState
from digest.channels.telegram.sender import Pacer, Poster, Sender
from digest.channels.telegram.text import utf16_length
from digest.output.render import Renderer
from digest.pipeline.state import StateError
from digest.testbed.embedded import EmbeddedBackends
from tests.command import clean_env, run_digest
from tests.fake_telegram import FakeTelegram, SentCall, Sleeps
from tests.telegram_html import parse_html
from tests.test_bot import ALLOWED, QUIET, TOKEN, Clock, make_config, running, visible, wait_until
from tests.test_incident_days import digest_of


@pytest.fixture
def tg() -> FakeTelegram:
    """A Telegram lookalike knowing the allowed chat."""
    with FakeTelegram(TOKEN, known_chats={ALLOWED}) as server:
        yield server
        assert server.internal_errors == []


async def _message() -> str:
    return "<b>WARNING 9/10</b> · homelab"


async def test_telegram_5xx_is_retried_with_backoff(tg: FakeTelegram, tmp_path: Path) -> None:
    """Two 502s then success: delivered once, with growing, jittered, capped delays between attempts."""
    tg.fail_next("sendMessage", status=502, times=2)
    sleeps = Sleeps()
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    async with Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url) as bot:
        sender = Sender(bot, state=state, sleep=sleeps, pacer=Pacer(per_chat_interval=0))
        result = await Poster(sender, state).post_once(ALLOWED, "k", _message)
    assert result.outcome is Outcome.SENT
    assert [call.status for call in tg.calls if call.method == "sendMessage"] == [502, 502, 200]
    backoffs = sleeps.delays
    assert len(backoffs) == 2
    assert 1.0 <= backoffs[0] <= 1.2
    assert 2.0 <= backoffs[1] <= 2.4
    assert len(tg.sent_to(ALLOWED)) == 1


async def test_telegram_timeout_is_retried(tg: FakeTelegram, tmp_path: Path) -> None:
    """A send slower than the client's timeout is retried and the delivery recorded as sent.

    Telegram may have accepted the slow request too: a timeout is the one case where a retry can duplicate a
    message (no Bot API call can tell), which the delivery documents rather than risking a lost digest.
    """
    tg.delay_next("sendMessage", 2.0)
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    request = HTTPXRequest(read_timeout=0.5, write_timeout=0.5, connect_timeout=0.5)
    async with Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url, request=request) as bot:
        result = await Poster(Sender(bot, state=state, sleep=Sleeps()), state).post_once(ALLOWED, "k", _message)
    assert result.outcome is Outcome.SENT
    # The slow first request is still answered by the server after the client gave up on it.
    calls = tg.wait_for_calls("sendMessage", 2, timeout=10)
    assert len(calls) == 2
    delivery = state.get(ALLOWED, "k")
    assert delivery is not None
    assert delivery.attempts == 1


async def test_retries_stop_within_the_total_budget(tg: FakeTelegram, tmp_path: Path) -> None:
    """Telegram down for good: the post fails as transient after the bounded budget and can be retried later."""
    from digest.channels.telegram.sender import RetryPolicy

    tg.fail_next("sendMessage", status=500, times=1000)
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    sleeps = Sleeps()
    async with Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url) as bot:
        sender = Sender(
            bot,
            state=state,
            sleep=sleeps,
            retry=RetryPolicy(total_seconds=60),
            pacer=Pacer(per_second=1000, per_chat_interval=0),
        )
        result = await Poster(sender, state).post_once(ALLOWED, "k", _message)
    assert result.outcome is Outcome.FAILED
    assert "gave up" in (result.error or "")
    assert sum(sleeps.delays) <= 60
    assert max(sleeps.delays) <= 30 * 1.2
    assert state.claim(ALLOWED, "k", lease_seconds=60)  # a later run may try again


async def test_locked_state_file_fails_visibly_and_posts_nothing(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process holding the SQLite write lock: the post fails with a logged error, nothing is sent."""
    path = tmp_path / "state.sqlite"
    DeliveryState(path, "init").close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        state = DeliveryState(path, "t", busy_timeout_seconds=0.2)
        async with Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url) as bot:
            with pytest.raises(StateError, match="locked"):
                await Poster(Sender(bot, state=state), state).post_once(ALLOWED, "k", _message)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert tg.sent_to(ALLOWED) == []
    # Through the bot: the scheduled post logs the failure and keeps it for /status.
    config = make_config(corpus_backends, tg, path)
    holder = sqlite3.connect(path, isolation_level=None)
    caplog.set_level(logging.ERROR, logger="digest")
    try:
        async with running(config, Clock(datetime(2026, 7, 20, 12, 0, 5, tzinfo=UTC))) as bot:
            holder.execute("BEGIN EXCLUSIVE")
            bot.state = DeliveryState(path, "busy", busy_timeout_seconds=0.2)
            assert bot.poster is not None
            bot.poster.state = bot.state  # the post's own state: its wait for the lock is 0.2 s, not 30
            results = await bot.post_due()
            holder.execute("ROLLBACK")
    finally:
        holder.close()
    assert results[0].outcome is Outcome.FAILED
    assert any("cannot post daily:2026-07-20" in record.getMessage() for record in caplog.records)


def test_corrupt_or_unwritable_state_is_a_clear_error(tmp_path: Path) -> None:
    """A corrupt state file, or one in a read-only place, stops serve/--post with one line naming the setting."""
    corrupt = tmp_path / "state.sqlite"
    corrupt.write_bytes(b"not a database " * 200)
    for path in (corrupt, Path("/proc/digest/state.sqlite")):
        env = clean_env(DIGEST_TELEGRAM_TOKEN=TOKEN, DIGEST_TELEGRAM_CHAT_IDS=str(ALLOWED), DIGEST_STATE_PATH=str(path))
        result = run_digest("serve", env=env)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1
        assert lines[0].startswith("digest: DIGEST_STATE_PATH: state file")
        assert TOKEN not in result.stderr


def test_missing_token_names_the_variable(tmp_path: Path) -> None:
    """`digest serve` without a token exits 2 naming DIGEST_TELEGRAM_TOKEN."""
    result = run_digest("serve")
    assert result.returncode == 2
    assert result.stderr.strip() == ("digest: DIGEST_TELEGRAM_TOKEN: not set (or set DIGEST_TELEGRAM_TOKEN_FILE)")


async def test_hostile_log_fields_through_real_backends(own_backends: EmbeddedBackends, tg: FakeTelegram) -> None:
    """Namespace and pod values with <script>, &, quotes, _ and * from real VictoriaLogs arrive escaped and valid."""
    hostile_namespace = '<script>alert("ns")</script>&amp'
    hostile_pod = "web_*bold*-7c9d8f6b5d-x2x4k"
    line = {
        "message": "ERROR <b>not a tag</b> & done",
        "stream": "stderr",
        "kubernetes": {"pod_namespace": hostile_namespace, "pod_name": hostile_pod, "container_name": "c"},
    }
    records = (
        json.dumps({**line, "timestamp": f"2026-03-03T10:{index // 60 % 60:02d}:{index % 60:02d}Z"})
        for index in range(60_000)
    )
    own_backends.ingest_logs([("\n".join(records) + "\n").encode()])
    start = datetime(2026, 3, 3, tzinfo=UTC)
    own_backends.wait_for_logs(start, start.replace(day=4), 60_000)
    digest = await digest_of(own_backends, date(2026, 3, 3))
    errors = next(finding for finding in digest.findings if finding.name == "error_lines")
    assert errors.offenders[0].labels["namespace"] == hostile_namespace
    assert errors.offenders[0].labels["workload"] == "web_*bold*"
    html = Renderer().render(digest, "html")
    visible_text, _ = parse_html(html, strict=True)
    assert hostile_namespace in visible_text
    async with Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url) as bot:
        await Sender(bot).send(ALLOWED, html)
    assert hostile_namespace in tg.sent_to(ALLOWED)[0].visible


def _whole(sent: list[SentCall], chats: list[int]) -> bool:
    """Whether every chat holds a whole digest: one message, or parts up to "(n/n)"."""
    for chat in chats:
        texts = [visible(call) for call in sent if call.chat_id == chat]
        marker = re.search(r"\((\d+)/(\d+)\)$", texts[-1]) if texts else None
        if not texts or (marker is not None and marker.group(1) != marker.group(2)):
            return False
    return True


async def test_hundred_chats_at_once(corpus_backends: EmbeddedBackends, tmp_path: Path) -> None:
    """100 allowed chats ask /digest for the same window at once: one computation, every chat answered, paced."""
    chats = [-1002000000000 - index for index in range(100)]
    with FakeTelegram(TOKEN, known_chats=set(chats)) as tg:
        config = make_config(
            corpus_backends, tg, tmp_path / "state.sqlite", telegram_chat_ids=",".join(map(str, chats))
        )
        async with running(config, QUIET) as bot:
            await tg.wait_for_poller_async(timeout=10)
            for chat in chats:
                tg.push_message(chat, "/digest", chat_type="supergroup")
            await tg.wait_for_sent_async(100, timeout=60)
            # Every chat's digest whole (a digest longer than a message comes in parts, "(1/2)" and "(2/2)").
            await wait_until(lambda: _whole(tg.sent, chats))
            assert bot.digests.computations == 1
        sent = list(tg.sent)
    answered = {call.chat_id for call in sent}
    times = sorted(call.at for call in sent)
    assert answered == set(chats)
    # One computation, so one digest: every chat read the same message.
    assert len({tuple(visible(call) for call in sent if call.chat_id == chat) for chat in chats}) == 1
    assert "· homelab · 24h to 2026-07-21 09:00" in visible(sent[0]).splitlines()[0]
    # Never more than 30 messages in any one second (Telegram's overall bot limit).
    for index in range(len(times)):
        in_window = [moment for moment in times[index:] if moment - times[index] < 1.0]
        assert len(in_window) <= 30


async def test_chart_failing_after_the_text_does_not_send_the_text_again(tg: FakeTelegram, tmp_path: Path) -> None:
    """SendPhoto refused after the digest went out: delivered once, recorded sent, the failure logged."""
    tg.fail_next("sendPhoto", status=403)
    state = DeliveryState(tmp_path / "state.sqlite", "t")

    async def chart() -> Photo:
        return Photo(png=b"\x89PNG fake", caption="CRITICAL 8/10")

    async with Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url) as bot:
        poster = Poster(Sender(bot, state=state, sleep=Sleeps(), pacer=Pacer(per_chat_interval=0)), state)
        first = await poster.post_once(ALLOWED, "k", _message, photo=chart)
        second = await poster.post_once(ALLOWED, "k", _message, photo=chart)
    assert first.outcome is Outcome.SENT
    assert second.outcome is Outcome.ALREADY_SENT
    assert [call.method for call in tg.calls if call.method.startswith("send")] == ["sendMessage", "sendPhoto"]
    assert len(tg.sent_to(ALLOWED)) == 1


async def test_emoji_caption_is_cut_to_telegrams_utf16_limit(tg: FakeTelegram, tmp_path: Path) -> None:
    """A caption of 600 emoji (1,200 UTF-16 units) is cut to fit 1,024 units, and Telegram takes it."""
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    async with Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url) as bot:
        sender = Sender(bot, state=state, sleep=Sleeps(), pacer=Pacer(per_chat_interval=0))
        await sender.send_photo(ALLOWED, Photo(png=b"\x89PNG fake", caption="📈" * 600))
    (photo,) = tg.sent_to(ALLOWED)
    assert photo.caption is not None
    assert photo.caption.endswith("…")
    assert utf16_length(photo.caption) <= 1024
    assert utf16_length(photo.caption) >= 1022

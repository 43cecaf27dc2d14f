"""The Telegram bot end to end, against a Bot-API-shaped server on loopback.

Digests are computed from the incident corpus in real VictoriaMetrics + VictoriaLogs; the delivery state is a
real SQLite file.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest
from telegram import Bot
from telegram.error import TelegramError

from digest.app.bot import make_bot
from digest.app.engine import Config
from digest.app.health import DigestMetrics, HealthServer
from digest.app.logs import RedactingFormatter
from digest.app.service import DigestService, source_status
from digest.app.settings import load_settings
from digest.channels.channel import Outcome
from digest.channels.state import DeliveryState
from digest.channels.telegram.bot import DigestBot, build_application
from digest.channels.telegram.sender import Poster, Sender
from digest.channels.telegram.text import MAX_TEXT
from digest.output.render import Renderer
from digest.pipeline.policy import Policy
from digest.pipeline.window import day_window
from digest.testbed.embedded import EmbeddedBackends, free_port
from tests.command import DIGEST, backend_env, run_digest, stop_process
from tests.fake_telegram import FakeTelegram
from tests.misbehaving_server import Behaviour, misbehaving_server, recording_server
from tests.telegram_html import parse_html
from tests.test_render import _hostile_digest

ALLOWED = -1001234567890
STRANGER = 777
TOKEN = "123456:AAE-secret-token-for-tests"  # noqa: S105  # a test token, the one the log check hunts for


@dataclass
class Clock:
    """A settable clock for the bot (the only thing that reads "now")."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    """A Telegram lookalike that knows the allowed chat and reports no bug of its own."""
    with FakeTelegram(TOKEN, known_chats={ALLOWED, STRANGER}) as server:
        yield server
        assert server.internal_errors == []


def make_config(backends: EmbeddedBackends, tg: FakeTelegram, state_path: Path, **overrides: object) -> Config:
    values: dict[str, object] = {
        "vm_url": backends.metrics.url,
        "vl_url": backends.logs.url,
        "cluster": "homelab",
        "timezone": "UTC",
        "policy_file": None,
        "telegram_token": TOKEN,
        "telegram_api_url": tg.root,
        "telegram_chat_ids": str(ALLOWED),
        "state_path": state_path,
        # Most tests count text messages; the chart and the weekly post (2026-07-20 is a Monday) have their own tests.
        "telegram_chart": False,
        "weekly_post": "off",
        # The "Computing …" notice has its own test; here a digest slowed by a busy machine must not add one.
        "telegram_computing_notice_seconds": 600.0,
    }
    settings = load_settings(**{**values, **overrides})
    return Config(settings=settings, policy=Policy())


@asynccontextmanager
async def running(
    config: Config, clock: Clock, owner: str = "test", metrics: DigestMetrics | None = None
) -> AsyncIterator[DigestBot]:
    """The bot's application polling the fake server, stopped (and its state closed) at the end."""
    state = DeliveryState(config.settings.state_path, owner)
    bot = make_bot(config, state, DigestService(config, metrics=metrics), clock=clock)
    application = build_application(bot, TOKEN)
    try:
        async with application:
            # run_polling() calls post_init after initialize(); this harness drives the same steps by hand.
            if application.post_init is not None:
                await application.post_init(application)
            await application.start()
            assert application.updater is not None
            await application.updater.start_polling(timeout=1, poll_interval=0)
            try:
                yield bot
            finally:
                # The polling task may have ended on its own error (a refused token): stopping surfaces it.
                with contextlib.suppress(TelegramError):
                    await application.updater.stop()
                await application.stop()
                if application.post_shutdown is not None:
                    await application.post_shutdown(application)
    finally:
        state.close()


def visible(call: object) -> str:
    return str(getattr(call, "visible", ""))


async def wait_until(predicate: Callable[[], bool], within: float = 20.0) -> None:
    """Bounded wait for a condition the bot makes true asynchronously."""
    deadline = asyncio.get_running_loop().time() + within
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


QUIET = Clock(datetime(2026, 7, 21, 9, 0, tzinfo=UTC))  # 21 h after the last noon: outside the grace period


async def test_digest_command_from_allowed_chat(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """/digest 2026-07-20 in an allowed chat answers CRITICAL 8/10, in HTML Telegram accepts; commands registered."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite")
    async with running(config, QUIET):
        tg.push_message(ALLOWED, "/digest 2026-07-20", chat_type="supergroup")
        [reply] = await tg.wait_for_sent_async(1, timeout=30)
    assert reply.chat_id == ALLOWED
    assert reply.parse_mode == "HTML"
    assert visible(reply).splitlines()[0] == "CRITICAL 8/10 · homelab · 2026-07-20"
    assert "4,539,734 error lines" in visible(reply)
    assert {command["command"] for command in tg.commands} == {"digest", "status", "ack", "acks", "help"}


async def test_a_digest_asked_in_a_forum_topic_is_answered_in_that_topic(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """/digest in topic 77 of a forum: the typing, the digest and its chart all go to topic 77, none to General."""
    tg.add_topic(ALLOWED, 77)
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite", telegram_chart=True)
    async with running(config, QUIET):
        tg.push_message(ALLOWED, "/digest 2026-07-20", chat_type="supergroup", thread_id=77)
        text, chart = await tg.wait_for_sent_async(2, timeout=60)
    assert visible(text).splitlines()[0] == "CRITICAL 8/10 · homelab · 2026-07-20"
    assert chart.method == "sendPhoto"
    for sent in (text, chart):
        assert sent.message is not None
        assert sent.message.get("message_thread_id") == 77, sent.method
    [typing, *_] = [call for call in tg.calls if call.method == "sendChatAction"]
    assert typing.params.get("message_thread_id") == "77"


async def test_stranger_is_refused_once_and_logged(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another chat gets one short refusal (rate-limited), nothing is computed, the attempt is logged with its id."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite")
    caplog.set_level(logging.WARNING, logger="digest")
    async with running(config, QUIET) as bot:
        tg.push_message(STRANGER, "/digest 2026-07-20")
        tg.push_message(STRANGER, "/status")
        await tg.wait_for_sent_async(1, timeout=10)
        await wait_until(lambda: sum("refused" in record.message for record in caplog.records) >= 2)
        assert bot.digests.computations == 0
    assert [visible(call) for call in tg.sent_to(STRANGER)] == ["This bot only answers the chats it is configured for."]
    assert any(str(STRANGER) in record.getMessage() for record in caplog.records)


async def test_bad_arguments_get_a_usage_reply(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """A bad date, a future date and a too-long window each get a one-line usage reply, never a traceback."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite")
    async with running(config, QUIET):
        for text in ("/digest 2026-13-45", "/digest 2027-01-01", "/digest 30d", "/digest a b"):
            tg.push_message(ALLOWED, text, chat_type="supergroup")
        replies = await tg.wait_for_sent_async(4, timeout=10)
    for reply in replies:
        assert "Usage: /digest" in visible(reply)
        assert "Traceback" not in visible(reply)


async def test_yesterday_and_hours(corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path) -> None:
    """/digest yesterday is the previous calendar day; /digest 6h a 6-hour window ending now."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite")
    async with running(config, QUIET):
        tg.push_message(ALLOWED, "/digest yesterday", chat_type="supergroup")
        [first] = await tg.wait_for_sent_async(1, timeout=30)
        tg.push_message(ALLOWED, "/digest 6h", chat_type="supergroup")
        second = (await tg.wait_for_sent_async(2, timeout=30))[1]
    assert visible(first).splitlines()[0] == "CRITICAL 8/10 · homelab · 2026-07-20"
    assert "6h to 2026-07-21 09:00" in visible(second).splitlines()[0]


async def test_noon_post_once_across_restart(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """At 12:00 the digest is posted; a restart at 12:01 and a second instance post nothing more."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite")
    noon = Clock(datetime(2026, 7, 20, 12, 0, 5, tzinfo=UTC))
    async with running(config, noon) as bot:
        await wait_until(lambda: ALLOWED in bot.last_results)
    assert len(tg.sent_to(ALLOWED)) == 1
    assert visible(tg.sent_to(ALLOWED)[0]).startswith("CRITICAL 8/10 · homelab · 24h to 2026-07-20 12:00")
    after = Clock(datetime(2026, 7, 20, 12, 1, tzinfo=UTC))
    async with running(config, after, owner="restarted") as bot, running(config, after, owner="second") as other:
        await wait_until(lambda: ALLOWED in bot.last_results and ALLOWED in other.last_results)
        assert bot.last_results[ALLOWED].outcome is Outcome.ALREADY_SENT
        assert other.last_results[ALLOWED].outcome is Outcome.ALREADY_SENT
    assert len(tg.sent_to(ALLOWED)) == 1


async def test_bot_down_at_noon_posts_once_late(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """Started at 14:30 (down at noon), the bot posts the noon digest once, marked late; outside grace it does not."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite")
    async with running(config, Clock(datetime(2026, 7, 20, 14, 30, tzinfo=UTC))) as bot:
        await wait_until(lambda: ALLOWED in bot.last_results)
        assert bot.last_results[ALLOWED].outcome is Outcome.SENT
        delivery = bot.state.get(ALLOWED, "daily:2026-07-20")
        assert delivery is not None
        assert delivery.late
    assert len(tg.sent_to(ALLOWED)) == 1
    # 19:00 is beyond the 6 h grace after 12:00: a bot started then posts nothing for that day (a new state file).
    late_config = make_config(corpus_backends, tg, tmp_path / "other.sqlite")
    async with running(late_config, Clock(datetime(2026, 7, 20, 19, 0, tzinfo=UTC))) as bot:
        assert await bot.post_due() == []  # what the start-up job runs: past the grace, it posts nothing
        assert bot.last_results == {}
    assert len(tg.sent_to(ALLOWED)) == 1


async def test_status_shows_posts_failures_and_sources(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """/status names the last post per chat, the failed one, each source's reachability and the next post."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite")
    async with running(config, Clock(datetime(2026, 7, 20, 12, 0, 5, tzinfo=UTC))) as bot:
        await wait_until(lambda: ALLOWED in bot.last_results)
        tg.push_message(ALLOWED, "/status", chat_type="supergroup")
        status = (await tg.wait_for_sent_async(2, timeout=10))[1]
    text = visible(status)
    assert "daily:2026-07-20 sent" in text
    assert "VictoriaMetrics: reachable" in text
    assert "VictoriaLogs: reachable" in text
    assert "Next post: 2026-07-21 12:00" in text
    assert TOKEN not in text


async def test_429_delays_but_delivers(tg: FakeTelegram, tmp_path: Path) -> None:
    """A 429 with retry_after is waited out and the message then delivered, once."""
    tg.fail_next("sendMessage", status=429, retry_after=1)
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    async with Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url) as bot:
        poster = Poster(Sender(bot, state=state), state)
        started = asyncio.get_running_loop().time()
        result = await poster.post_once(ALLOWED, "k", _text("<b>OK 10/10</b>"))
        waited = asyncio.get_running_loop().time() - started
    assert result.outcome is Outcome.SENT
    assert waited >= 1.0
    assert len(tg.sent_to(ALLOWED)) == 1
    assert [call.status for call in tg.calls if call.method == "sendMessage"] == [429, 200]


async def test_hostile_strings_arrive_escaped_and_accepted(tg: FakeTelegram) -> None:
    """Pod names and log text with <script>, &, _ and * are escaped; Telegram's HTML rules accept the message."""
    html = Renderer().render(_hostile_digest(), "html")
    async with Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url) as bot:
        await Sender(bot).send(ALLOWED, html)
    [sent] = tg.sent_to(ALLOWED)
    assert sent.parse_mode == "HTML"
    assert '<script>alert("x")</script> & a_b *c*' in sent.visible
    parse_html(sent.text or "", strict=True)


async def test_long_digest_is_split_and_every_part_valid(tg: FakeTelegram) -> None:
    """A digest longer than 4096 characters arrives in several valid parts marked (i/n)."""
    html = Renderer().render(_hostile_digest(), "html")
    long_html = html + "\n\n" + "\n".join(f"• <code>pod-{index}</code>: {'&lt;x&gt; ' * 30}" for index in range(60))
    async with Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url) as bot:
        await Sender(bot).send(ALLOWED, long_html)
    parts = tg.sent_to(ALLOWED)
    assert len(parts) >= 2
    for index, part in enumerate(parts, start=1):
        assert part.parse_mode == "HTML"
        assert len(part.visible) <= MAX_TEXT
        assert part.visible.endswith(f"({index}/{len(parts)})")


async def test_unparseable_html_is_resent_as_plain_text(tg: FakeTelegram) -> None:
    """If Telegram rejects a part's entities, the part is resent as plain text instead of being lost."""
    async with Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url) as bot:
        await Sender(bot).send(ALLOWED, "<b>CRITICAL</b> <blink>x</blink>")
    [sent] = tg.sent_to(ALLOWED)
    assert sent.parse_mode is None
    assert sent.text == "CRITICAL x"


async def test_blocked_chat_is_permanent_and_not_retried(tg: FakeTelegram, tmp_path: Path) -> None:
    """403 (bot blocked) is recorded as a permanent failure, tried once, and never claimed again."""
    tg.block(ALLOWED)
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    async with Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url) as bot:
        poster = Poster(Sender(bot, state=state), state)
        first = await poster.post_once(ALLOWED, "daily:2026-07-20", _text("x"))
        again = await poster.post_once(ALLOWED, "daily:2026-07-20", _text("x"))
    assert first.outcome is Outcome.FAILED_PERMANENT
    assert again.outcome is Outcome.FAILED_PERMANENT
    assert len([call for call in tg.calls if call.method == "sendMessage"]) == 1


async def test_supergroup_migration_is_followed(tg: FakeTelegram, tmp_path: Path) -> None:
    """A group that became a supergroup: the message goes to the new id, and later posts go there directly."""
    new_id = -1009999
    tg.add_chat(new_id, "supergroup")
    tg.migrate(ALLOWED, new_id)
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    async with Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url) as bot:
        poster = Poster(Sender(bot, state=state), state)
        result = await poster.post_once(ALLOWED, "k1", _text("one"))
        await poster.post_once(ALLOWED, "k2", _text("two"))
    assert result.outcome is Outcome.SENT
    assert [visible(call) for call in tg.sent_to(new_id)] == ["one", "two"]
    assert state.current(str(ALLOWED)) == str(new_id)


async def test_concurrent_requests_share_one_computation(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """Twenty simultaneous digests of one window run one computation."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite")
    service = DigestService(config)
    window = day_window(datetime(2026, 7, 20).date(), config.settings.zone)
    digests = await asyncio.gather(*(service.digest(window) for _ in range(20)))
    assert service.computations == 1
    assert {digest.score for digest in digests} == {8}


def test_token_is_redacted_from_log_lines() -> None:
    """The formatter masks the token wherever it appears: httpx's URL lines and exception text alike."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter("%(message)s", [TOKEN]))
    logger = logging.getLogger("redaction-test")
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("HTTP Request: POST https://api.telegram.org/bot%s/getUpdates", TOKEN)
    try:
        raise RuntimeError(f"failed https://api.telegram.org/bot{TOKEN}/sendMessage")
    except RuntimeError:
        logger.exception("boom")
    assert TOKEN not in stream.getvalue()
    assert "[redacted]" in stream.getvalue()


def cronjob_env(backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path) -> dict[str, str]:
    """The environment of `digest run --post` as the CronJob gives it: the token in a file, a state file."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    return backend_env(
        backends,
        DIGEST_TELEGRAM_API_URL=tg.root,
        DIGEST_TELEGRAM_CHAT_IDS=str(ALLOWED),
        DIGEST_STATE_PATH=str(tmp_path / "state.sqlite"),
        DIGEST_TELEGRAM_TOKEN_FILE=str(token_file),
    )


def test_run_post_cronjob_path_posts_once_and_keeps_the_token_out_of_logs(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """`digest run --post` posts the digest and its chart (a reply to it) once; a second run posts nothing; no token."""
    env = cronjob_env(corpus_backends, tg, tmp_path)
    command = ("-v", "run", "--date", "2026-07-20", "--post")
    first = run_digest(*command, env=env)
    second = run_digest(*command, env=env)
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert "chat -1001234567890: sent" in first.stderr
    assert "chat -1001234567890: already_sent" in second.stderr
    text, chart = tg.sent_to(ALLOWED)
    assert chart.method == "sendPhoto"
    assert json.loads(chart.params["reply_parameters"])["message_id"] == text.message_id
    assert TOKEN not in first.stderr + second.stderr + first.stdout
    assert "HTTP Request" in first.stderr  # verbose logging ran, with the token masked


def test_run_week_post_posts_the_week_once_with_its_chart(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """`digest run --week W --post --chart` posts the week and its PNG once per chat; a second run posts nothing."""
    env = cronjob_env(corpus_backends, tg, tmp_path)
    command = ("run", "--week", "2026-W33", "--post", "--chart", str(tmp_path / "week.png"))
    first = run_digest(*command, env=env, timeout=300)
    second = run_digest(*command, env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert "chat -1001234567890: sent" in first.stderr
    assert "chat -1001234567890: already_sent" in second.stderr
    text, photo = tg.sent_to(ALLOWED)
    assert visible(text).startswith("CRITICAL · homelab · week 2026-W33 (08-10 – 08-16)")
    assert photo.method == "sendPhoto"
    assert photo.caption is not None
    assert photo.caption.endswith("Scores ??▆???▇")
    assert first.stdout.startswith("CRITICAL · homelab · week 2026-W33")


def _text(value: str) -> Callable[[], object]:
    async def message() -> str:
        return value

    return message


async def test_slow_backends_yield_unknown_not_silence(tg: FakeTelegram, tmp_path: Path) -> None:
    """With both backends hanging, /digest answers within the deadline with UNKNOWN checks, never OK."""
    hang = Behaviour(delay_seconds=8.0, body=b"{}")  # four times the 2 s deadline: hanging, as far as it knows
    with misbehaving_server(hang) as vm_url, misbehaving_server(hang) as vl_url:
        settings = load_settings(
            vm_url=vm_url,
            vl_url=vl_url,
            cluster="homelab",
            timezone="UTC",
            policy_file=None,
            telegram_token=TOKEN,
            telegram_api_url=tg.root,
            telegram_chat_ids=str(ALLOWED),
            state_path=tmp_path / "state.sqlite",
            query_timeout=60,
            digest_deadline_seconds=2,
        )
        config = Config(settings=settings, policy=Policy())
        async with running(config, QUIET):
            tg.push_message(ALLOWED, "/digest", chat_type="supergroup")
            [reply] = await tg.wait_for_sent_async(1, timeout=20)
    headline = visible(reply).splitlines()[0]
    assert headline.startswith("UNKNOWN · homelab · 24h to 2026-07-21 09:00")
    assert "not checked" in visible(reply)


def _post_at_not_due() -> str:
    """A daily post time an hour from now: no post is due, nor late, while a test runs, whatever the time of day."""
    return (datetime.now(UTC) + timedelta(hours=1)).strftime("%H:%M")


def test_serve_command_answers_and_never_logs_the_token(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """`digest serve`, as shipped, answers /digest in an allowed chat, refuses a stranger, and logs no token."""
    env = backend_env(
        corpus_backends,
        DIGEST_TELEGRAM_API_URL=tg.root,
        DIGEST_TELEGRAM_TOKEN=TOKEN,
        DIGEST_TELEGRAM_CHAT_IDS=str(ALLOWED),
        DIGEST_STATE_PATH=str(tmp_path / "state.sqlite"),
        DIGEST_POST_AT=_post_at_not_due(),
        # As in make_config: a digest slowed by a busy machine must not add a "Computing …" reply to those counted.
        DIGEST_TELEGRAM_COMPUTING_NOTICE_SECONDS="600",
    )
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log_file:
        process = subprocess.Popen([*DIGEST, "-v", "serve"], env=env, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            tg.wait_for_poller(timeout=30)
            tg.push_message(ALLOWED, "/digest 2026-07-20", chat_type="supergroup")
            tg.push_message(STRANGER, "/digest 2026-07-20")
            tg.push_message(ALLOWED, "/digest 2026-02-30", chat_type="supergroup")
            tg.wait_for_sent(3, timeout=60)
        finally:
            stop_process(process, grace_seconds=30)
    answers = {call.chat_id: [] for call in tg.sent}
    for call in tg.sent:
        answers[call.chat_id].append(visible(call))
    assert any(text.startswith("CRITICAL 8/10 · homelab · 2026-07-20") for text in answers[ALLOWED])
    assert any("Usage: /digest" in text for text in answers[ALLOWED])
    assert answers[STRANGER] == ["This bot only answers the chats it is configured for."]
    log_text = log_path.read_text()
    assert "HTTP Request" in log_text
    assert TOKEN not in log_text
    assert f"chat {STRANGER}" in log_text


async def test_healthz_and_metrics(corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path) -> None:
    """/healthz is 200 while polling and scheduling; /metrics carries the last delivery per chat and outcomes."""
    port = free_port()
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite", health_port=port)
    metrics = DigestMetrics()
    async with running(config, Clock(datetime(2026, 7, 20, 12, 0, 5, tzinfo=UTC)), metrics=metrics) as bot:
        await wait_until(lambda: ALLOWED in bot.last_results)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            health = await client.get("/healthz")
            exposition = (await client.get("/metrics")).text
            missing = await client.get("/nothing")
    assert health.status_code == 200
    assert missing.status_code == 404
    assert f'digest_last_successful_delivery_timestamp_seconds{{chat="{ALLOWED}"}}' in exposition
    assert 'digest_deliveries_total{outcome="sent"} 1.0' in exposition
    assert "digest_computation_seconds_count 1.0" in exposition
    # After a restart the dead man's switch starts from the state file, not from "never".
    again = DigestMetrics()
    async with running(config, Clock(datetime(2026, 7, 20, 12, 1, tzinfo=UTC)), owner="restarted", metrics=again):
        pass
    seeded = again.registry.get_sample_value(
        "digest_last_successful_delivery_timestamp_seconds", {"chat": str(ALLOWED)}
    )
    assert seeded is not None
    assert seeded > 0
    # The install time is there from the first start and the same after a restart (the state file keeps it).
    first = metrics.registry.get_sample_value("digest_state_first_used_timestamp_seconds")
    assert first is not None
    assert first > 0
    assert again.registry.get_sample_value("digest_state_first_used_timestamp_seconds") == first


async def test_healthz_is_503_when_not_ready() -> None:
    """The health endpoint answers 503 while the bot is not polling or scheduling."""
    ready = False
    server = HealthServer(DigestMetrics(), lambda: ready, port=0, host="127.0.0.1")
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
            assert (await client.get("/healthz")).status_code == 503
            ready = True
            assert (await client.get("/healthz")).status_code == 200
    finally:
        await server.stop()


async def test_query_errors_are_counted_by_source_and_check(tg: FakeTelegram, tmp_path: Path) -> None:
    """A digest computed with VictoriaLogs unreachable counts query errors under that source and the check."""
    settings = load_settings(
        vm_url=f"http://127.0.0.1:{free_port()}", vl_url=f"http://127.0.0.1:{free_port()}", policy_file=None
    )
    metrics = DigestMetrics()
    service = DigestService(Config(settings=settings, policy=Policy()), metrics=metrics)
    await service.digest(day_window(datetime(2026, 7, 20).date(), settings.zone))
    exposition = metrics.exposition().decode()
    assert 'digest_query_errors_total{check="error_lines",source="VictoriaLogs"} 1.0' in exposition
    assert 'digest_query_errors_total{check="oom_kills",source="VictoriaMetrics"} 1.0' in exposition


async def test_noon_post_attaches_the_chart(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """The daily post is the digest text then its chart, a reply to the text, with a caption within 1,024 characters."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite", telegram_chart=True)
    async with running(config, Clock(datetime(2026, 7, 20, 12, 0, 5, tzinfo=UTC))) as bot:
        await wait_until(lambda: ALLOWED in bot.last_results, within=60)
    text, photo = tg.sent_to(ALLOWED)
    assert text.method == "sendMessage"
    assert photo.method == "sendPhoto"
    assert photo.files[0].data.startswith(b"\x89PNG")
    assert photo.files[0].size > 10_000
    assert photo.caption is not None
    assert len(photo.caption) <= 1024
    assert photo.caption.startswith("CRITICAL 8/10 · homelab · 24h to 2026-07-20 12:00")
    assert bot.last_results[ALLOWED].message_ids == (text.message_id, photo.message_id)
    assert json.loads(photo.params["reply_parameters"])["message_id"] == text.message_id


def test_serve_in_webhook_mode(corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path) -> None:
    """With DIGEST_TELEGRAM_WEBHOOK_URL the bot registers its webhook (secret token included) and answers through it."""
    port = free_port()
    secret = "webhook-secret-for-tests"  # noqa: S105  # a test secret, hunted for in the log below
    env = backend_env(
        corpus_backends,
        DIGEST_TELEGRAM_API_URL=tg.root,
        DIGEST_TELEGRAM_TOKEN=TOKEN,
        DIGEST_TELEGRAM_CHAT_IDS=str(ALLOWED),
        DIGEST_STATE_PATH=str(tmp_path / "state.sqlite"),
        DIGEST_TELEGRAM_WEBHOOK_URL=f"http://127.0.0.1:{port}/telegram",
        DIGEST_TELEGRAM_WEBHOOK_LISTEN="127.0.0.1",
        DIGEST_TELEGRAM_WEBHOOK_PORT=str(port),
        DIGEST_TELEGRAM_WEBHOOK_SECRET=secret,
        DIGEST_HEALTH_PORT="0",
        DIGEST_TELEGRAM_CHART="false",
        DIGEST_POST_AT=_post_at_not_due(),
        # The first reply must be the digest, not a "Computing …" notice for a digest slowed by a busy machine.
        DIGEST_TELEGRAM_COMPUTING_NOTICE_SECONDS="600",
    )
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log_file:
        process = subprocess.Popen([*DIGEST, "-v", "serve"], env=env, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            assert tg.wait_for_webhook(timeout=30) == f"http://127.0.0.1:{port}/telegram"
            setting = next(call for call in tg.calls if call.method == "setWebhook")
            assert setting.params["secret_token"] == secret
            tg.push_message(ALLOWED, "/digest 2026-08-17", chat_type="supergroup")
            [reply] = tg.wait_for_sent(1, timeout=60)
        finally:
            stop_process(process, grace_seconds=30)
    assert visible(reply).startswith("OK 10/10 · homelab · 2026-08-17")
    log_text = log_path.read_text()
    assert TOKEN not in log_text
    assert secret not in log_text


async def test_heartbeat_is_pinged_after_a_post(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """After the daily post, DIGEST_HEARTBEAT_URL is pinged once; a restart that posts nothing does not ping."""
    with recording_server(Behaviour(status=200, body=b"OK")) as watcher:
        config = make_config(
            corpus_backends, tg, tmp_path / "state.sqlite", heartbeat_url=f"{watcher.url}/ping/abc-uuid"
        )
        noon = Clock(datetime(2026, 7, 20, 12, 0, 5, tzinfo=UTC))
        async with running(config, noon):
            await wait_until(lambda: len(watcher.requests) == 1)
        async with running(config, noon, owner="restarted") as bot:
            await wait_until(lambda: ALLOWED in bot.last_results)
            await asyncio.sleep(0.5)  # a ping would follow the post at once; none is expected
    assert [request.path for request in watcher.requests] == ["/ping/abc-uuid"]


def test_next_post_keeps_the_local_hour_across_a_dst_change(tmp_path: Path) -> None:
    """Berlin, posts at 12:00: on the day before clocks go forward, /status names 12:00 local, not 13:00."""
    settings = load_settings(timezone="Europe/Berlin", post_at="12:00", policy_file=None)
    config = Config(settings=settings, policy=Policy())
    bot = make_bot(config, DeliveryState(tmp_path / "s.sqlite", "t"), DigestService(config))
    after_noon = datetime(2026, 3, 28, 13, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    assert bot.next_post(after_noon).astimezone(ZoneInfo("Europe/Berlin")) == datetime(
        2026, 3, 29, 12, 0, tzinfo=ZoneInfo("Europe/Berlin")
    )


async def test_source_status_uses_the_digests_credentials() -> None:
    """A backend behind basic auth reads reachable in /status when the digest's credentials open it."""
    body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    with recording_server(Behaviour(body=body)) as served:
        settings = load_settings(
            vm_url=served.url,
            vl_url=served.url,
            vm_username="reader",
            vm_password="s3cret",  # noqa: S106  # a test credential for the loopback server
            policy_file=None,
        )
        lines = await source_status(Config(settings=settings, policy=Policy()), datetime(2026, 7, 20, tzinfo=UTC))
    assert [line.split(",")[0] for line in lines] == ["VictoriaMetrics: reachable", "VictoriaLogs: reachable"]
    vm_request = next(request for request in served.requests if request.path == "/api/v1/query")
    assert vm_request.headers.get("Authorization", "").startswith("Basic ")


async def test_weekly_post_on_monday_once_and_digest_week_on_demand(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """Monday noon posts last week at a glance once (a second round: already sent); /digest week asks for any week."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite", weekly_post="monday")
    monday = Clock(datetime(2026, 8, 17, 12, 0, 5, tzinfo=UTC))
    weekly = "CRITICAL · homelab · week 2026-W33 (08-10 – 08-16) · worst 8/10 on Wed · 5 days not graded"
    async with running(config, monday) as bot:
        await wait_until(lambda: any(visible(call).startswith(weekly) for call in tg.sent_to(ALLOWED)), within=120)

        def week_sent() -> bool:
            # Telegram has the text before the bot has stored the post as sent (its other parts may follow).
            delivery = bot.state.get(ALLOWED, "weekly:2026-W33")
            return delivery is not None and delivery.status.value == "sent"

        await wait_until(week_sent, within=60)
        [again] = await bot.post_week_due()
        assert again.outcome is Outcome.ALREADY_SENT
        tg.push_message(ALLOWED, "/digest week 2026-W30", chat_type="supergroup")
        await wait_until(lambda: any("week 2026-W30" in visible(call) for call in tg.sent_to(ALLOWED)), within=120)
        tg.push_message(ALLOWED, "/digest week 2999-W01", chat_type="supergroup")
        await wait_until(lambda: any("not over yet" in visible(call) for call in tg.sent_to(ALLOWED)))
    texts = [visible(call) for call in tg.sent_to(ALLOWED)]
    assert sum(text.startswith(weekly) for text in texts) == 1
    [w30] = [text for text in texts if "week 2026-W30" in text]
    assert w30.startswith("CRITICAL · homelab · week 2026-W30 (07-20 – 07-26) · worst 8/10 on Mon · 6 days not graded")
    assert "Usage: /digest" in next(text for text in texts if "not over yet" in text)
    # The weekly post is no daily post: Monday's own daily digest went out once beside it.
    assert sum("24h to 2026-08-17 12:00" in text.splitlines()[0] for text in texts) == 1


def test_weekly_post_is_off_on_other_days_and_when_off(tmp_path: Path) -> None:
    """A Tuesday, or DIGEST_WEEKLY_POST=off, posts no week; a bad day name is a one-line config error."""
    from digest.app.settings import ConfigError

    tuesday = Clock(datetime(2026, 8, 18, 12, 0, 5, tzinfo=UTC))
    for day, clock in (("monday", tuesday), ("off", Clock(datetime(2026, 8, 17, 12, 0, 5, tzinfo=UTC)))):
        settings = load_settings(timezone="UTC", policy_file=None, weekly_post=day, telegram_chat_ids="1")
        config = Config(settings=settings, policy=Policy())
        bot = make_bot(config, DeliveryState(tmp_path / f"{day}.sqlite", "t"), DigestService(config), clock=clock)
        try:
            assert asyncio.run(bot.post_week_due()) == []
        finally:
            bot.state.close()
    with pytest.raises(ConfigError, match="DIGEST_WEEKLY_POST"):
        load_settings(weekly_post="mondays")

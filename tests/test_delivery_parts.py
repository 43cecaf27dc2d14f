"""Exactly once per part: a split digest and its chart, each part sent once across a failed run and its rerun.

And a Telegram API root that misbehaves (an HTML page, malformed JSON, a redirect, JSON without "ok") costs one line
on stderr and exit 1, never a traceback, and the digest is still printed.

Against the Bot-API-shaped fake on loopback, with a real SQLite state file and, for the CLI, real backends.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from telegram import Bot

from digest.channels.channel import DeliveryError, Outcome, Photo
from digest.channels.state import DeliveryState, DeliveryStatus
from digest.channels.telegram.sender import Pacer, Poster, RetryPolicy, Sender, open_bot
from digest.channels.telegram.text import split_html
from digest.testbed.embedded import EmbeddedBackends
from tests.command import backend_env, run_digest
from tests.fake_telegram import FakeTelegram, Sleeps
from tests.misbehaving_server import Behaviour, misbehaving_server

ALLOWED = -1001234567890
TOKEN = "123456:AAE-secret-token-for-parts"  # noqa: S105  # a test token, hunted for in the output below
KEY = "window:2026-07-20T00:00:00+00:00/2026-07-21T00:00:00+00:00"
# Long enough for two messages: split_html marks them "(1/2)" and "(2/2)".
LONG_HTML = "<b>CRITICAL 8/10</b> · homelab\n\n" + "\n".join(
    f"• <code>pod-{index}</code>: {'error line ' * 8}" for index in range(70)
)
# What the old code wrote (digest/state.py before parts existed), to prove an existing file still opens.
PREVIOUS_SCHEMA = """
CREATE TABLE deliveries (
    chat_id INTEGER NOT NULL, key TEXT NOT NULL, status TEXT NOT NULL, owner TEXT NOT NULL,
    lease_until REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, updated_at REAL NOT NULL, sent_at REAL,
    late INTEGER NOT NULL DEFAULT 0, error TEXT, permanent INTEGER NOT NULL DEFAULT 0, message_ids TEXT,
    PRIMARY KEY (chat_id, key)
);
CREATE TABLE chat_moves (old_chat_id INTEGER PRIMARY KEY, new_chat_id INTEGER NOT NULL, moved_at REAL NOT NULL);
"""


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    """A Telegram lookalike knowing the allowed chat."""
    with FakeTelegram(TOKEN, known_chats={ALLOWED}) as server:
        yield server
        assert server.internal_errors == []


class Calls:
    """A message or chart source that counts how often it was asked."""

    def __init__(self, html: str = LONG_HTML, photo: Photo | None = None) -> None:
        self.html = html
        self.photo = photo
        self.messages = 0
        self.photos = 0

    async def message(self) -> str:
        self.messages += 1
        return self.html

    async def chart(self) -> Photo | None:
        self.photos += 1
        return self.photo


def poster(bot: Bot, state: DeliveryState) -> Poster:
    """A Poster whose retry budget (10 s, no jitter) is spent at once by a sleep that only records."""
    sender = Sender(
        bot,
        state=state,
        retry=RetryPolicy(total_seconds=10),
        pacer=Pacer(per_second=1000, per_chat_interval=0),
        sleep=Sleeps(),
        random_unit=lambda: 0.0,
    )
    return Poster(sender, state)


def telegram_env(
    backends: EmbeddedBackends, tmp_path: Path, api_url: str, token: str = TOKEN, **extra: str
) -> dict[str, str]:
    """The environment of a CLI run on the corpus backends that posts to ``api_url`` for the allowed chat."""
    return backend_env(
        backends,
        DIGEST_TELEGRAM_TOKEN=token,
        DIGEST_TELEGRAM_API_URL=api_url,
        DIGEST_TELEGRAM_CHAT_IDS=str(ALLOWED),
        DIGEST_STATE_PATH=str(tmp_path / "state.sqlite"),
        **extra,
    )


def statuses(tg: FakeTelegram, method: str) -> list[int]:
    return [call.status for call in tg.calls if call.method == method]


async def test_rerun_sends_only_the_part_that_failed(tg: FakeTelegram, tmp_path: Path) -> None:
    """Part 1 accepted, part 2 5xx until the budget is spent: the rerun sends part 2 alone; the chat reads 1, 2."""
    assert len(split_html(LONG_HTML)) == 2
    tg.fail_next("sendMessage", status=502, times=1000, after=1)
    source = Calls()
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    async with open_bot(TOKEN, tg.root) as bot:
        first = await poster(bot, state).post_once(ALLOWED, KEY, source.message)
        assert first.outcome is Outcome.FAILED
        assert (first.error or "").startswith("part 2/2: gave up after 4 attempts")
        assert statuses(tg, "sendMessage") == [200, 502, 502, 502, 502]
        tg.clear_faults()
        # The rerun: a new process, as the CronJob would start.
        rerun_state = DeliveryState(tmp_path / "state.sqlite", "rerun")
        again = await poster(bot, rerun_state).post_once(ALLOWED, KEY, source.message)
        once_more = await poster(bot, rerun_state).post_once(ALLOWED, KEY, source.message)
    assert again.outcome is Outcome.SENT
    assert once_more.outcome is Outcome.ALREADY_SENT
    sent = tg.sent_to(ALLOWED)
    assert [call.visible.splitlines()[-1] for call in sent] == ["(1/2)", "(2/2)"]
    assert again.message_ids == tuple(call.message_id for call in sent)
    assert source.messages == 1  # the rerun sent the stored part, it computed nothing
    delivery = rerun_state.get(ALLOWED, KEY)
    assert delivery is not None
    assert delivery.status is DeliveryStatus.SENT
    assert rerun_state.parts(ALLOWED, KEY) == []  # content kept only while owed


async def test_rerun_after_the_group_became_a_supergroup_mid_send_sends_only_the_rest(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    """Part 1 went to the group, which then became a supergroup; part 2 failed there: the rerun sends part 2 alone."""
    supergroup = -100_777
    tg.fail_next("sendMessage", migrate_to_chat_id=supergroup, after=1)
    tg.fail_next("sendMessage", status=502, times=1000)
    source = Calls()
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    async with open_bot(TOKEN, tg.root) as bot:
        first = await poster(bot, state).post_once(ALLOWED, KEY, source.message)
        assert first.outcome is Outcome.FAILED
        tg.clear_faults()
        tg.migrate(ALLOWED, supergroup)
        again = await poster(bot, state).post_once(ALLOWED, KEY, source.message)
    assert again.outcome is Outcome.SENT
    assert again.recipient == str(supergroup)
    assert [call.visible.splitlines()[-1] for call in tg.sent_to(ALLOWED)] == ["(1/2)"]
    assert [call.visible.splitlines()[-1] for call in tg.sent_to(supergroup)] == ["(2/2)"]
    assert source.messages == 1


async def test_rerun_sends_the_stored_part_even_if_the_digest_now_reads_differently(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    """A recomputed digest that would split into four parts does not leak in: the rerun sends the stored (2/2)."""
    tg.fail_next("sendMessage", status=500, times=1000, after=1)
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    longer = Calls(LONG_HTML + "\n\n" + LONG_HTML)
    assert len(split_html(longer.html)) == 4
    async with open_bot(TOKEN, tg.root) as bot:
        first = await poster(bot, state).post_once(ALLOWED, KEY, Calls().message)
        tg.clear_faults()
        again = await poster(bot, state).post_once(ALLOWED, KEY, longer.message)
    assert first.outcome is Outcome.FAILED
    assert again.outcome is Outcome.SENT
    assert longer.messages == 0
    # Part 1 from the first run, part 2 as stored then: the chat reads one digest, "(1/2)" then "(2/2)".
    assert [call.text for call in tg.sent_to(ALLOWED)] == split_html(LONG_HTML)


async def test_rerun_sends_only_the_chart_that_failed(tg: FakeTelegram, tmp_path: Path) -> None:
    """Text accepted, chart 5xx until the budget is spent: the delivery stays owed, the rerun sends the chart alone."""
    tg.fail_next("sendPhoto", status=503, times=1000)
    source = Calls("<b>WARNING 9/10</b> · homelab", Photo(png=b"\x89PNG fake chart", caption="WARNING 9/10"))
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    async with open_bot(TOKEN, tg.root) as bot:
        first = await poster(bot, state).post_once(ALLOWED, KEY, source.message, photo=source.chart)
        assert first.outcome is Outcome.FAILED
        assert (first.error or "").startswith("the chart: gave up")
        tg.clear_faults()
        again = await poster(bot, state).post_once(ALLOWED, KEY, source.message, photo=source.chart)
        once_more = await poster(bot, state).post_once(ALLOWED, KEY, source.message, photo=source.chart)
    assert again.outcome is Outcome.SENT
    assert once_more.outcome is Outcome.ALREADY_SENT
    text, photo = tg.sent_to(ALLOWED)
    assert (text.method, photo.method) == ("sendMessage", "sendPhoto")
    assert text.visible == "WARNING 9/10 · homelab"
    assert photo.files[0].data == b"\x89PNG fake chart"
    assert statuses(tg, "sendMessage") == [200]
    assert again.message_ids == (text.message_id, photo.message_id)
    assert (source.messages, source.photos) == (1, 1)


async def test_chart_refused_for_good_is_noted_and_the_digest_counts_as_delivered(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    """A chart Telegram will never take (400) does not hold the delivery open: it is sent, with the refusal noted."""
    tg.fail_next("sendPhoto", status=400, description="Bad Request: PHOTO_INVALID_DIMENSIONS")
    source = Calls("<b>OK 10/10</b>", Photo(png=b"\x89PNG fake", caption="OK 10/10"))
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    async with open_bot(TOKEN, tg.root) as bot:
        result = await poster(bot, state).post_once(ALLOWED, KEY, source.message, photo=source.chart)
    assert result.outcome is Outcome.SENT
    assert (result.error or "").startswith("chart not delivered: rejected by Telegram: Photo_invalid_dimensions")
    delivery = state.get(ALLOWED, KEY)
    assert delivery is not None
    assert delivery.status is DeliveryStatus.SENT
    assert delivery.error == result.error


async def test_state_file_of_the_previous_schema_opens_and_delivers_by_parts(tg: FakeTelegram, tmp_path: Path) -> None:
    """A state file written before parts existed: its sent delivery stays sent, its failed one is owed part by part."""
    path = tmp_path / "state.sqlite"
    with sqlite3.connect(path) as old:
        old.executescript(PREVIOUS_SCHEMA)
        old.execute(
            "INSERT INTO deliveries VALUES (?, 'daily:old', 'sent', 'x', 0, 1, 1, 1, 0, NULL, 0, '7')", (ALLOWED,)
        )
        old.execute(
            "INSERT INTO deliveries VALUES (?, ?, 'failed', 'x', 0, 1, 1, NULL, 0, 'boom', 0, NULL)", (ALLOWED, KEY)
        )
    old.close()
    tg.fail_next("sendMessage", status=502, times=1000, after=1)
    state = DeliveryState(path, "t")
    async with open_bot(TOKEN, tg.root) as bot:
        old_one = await poster(bot, state).post_once(ALLOWED, "daily:old", Calls().message)
        first = await poster(bot, state).post_once(ALLOWED, KEY, Calls().message)
        tg.clear_faults()
        again = await poster(bot, DeliveryState(path, "rerun")).post_once(ALLOWED, KEY, Calls().message)
    assert old_one.outcome is Outcome.ALREADY_SENT
    assert (first.outcome, again.outcome) == (Outcome.FAILED, Outcome.SENT)
    assert [call.visible.splitlines()[-1] for call in tg.sent_to(ALLOWED)] == ["(1/2)", "(2/2)"]


async def test_answers_that_are_not_the_bot_api_are_retried_during_a_send(tg: FakeTelegram, tmp_path: Path) -> None:
    """Mid-send, an HTML page, then JSON without "ok", then a 302 are a proxy's hiccups: retried, delivered once."""
    tg.answer_next_raw("sendMessage", b"<html><body>502 Bad Gateway</body></html>", status=200)
    tg.answer_next_raw("sendMessage", b'{"status":"error"}', status=200, content_type="application/json")
    tg.answer_next_raw("sendMessage", b"", status=302)
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    async with open_bot(TOKEN, tg.root) as bot:
        result = await poster(bot, state).post_once(ALLOWED, KEY, Calls("<b>OK 10/10</b>").message)
    assert result.outcome is Outcome.SENT
    assert statuses(tg, "sendMessage") == [200, 200, 302, 200]
    assert [call.visible for call in tg.sent_to(ALLOWED)] == ["OK 10/10"]


async def test_opening_the_bot_retries_5xx_and_fails_at_once_on_a_root_that_is_not_the_bot_api(
    tg: FakeTelegram,
) -> None:
    """GetMe 502 twice then fine: open. An HTML page with 200 at getMe: one DeliveryError at once, no retry."""
    sleeps = Sleeps()
    tg.fail_next("getMe", status=502, times=2)
    async with open_bot(TOKEN, tg.root, retry=RetryPolicy(total_seconds=10), sleep=sleeps) as bot:
        assert bot.username == "digest_test_bot"
    assert len(sleeps.delays) == 2
    tg.answer_next_raw("getMe", b"<!doctype html><title>Sign in</title>", times=1000)
    with pytest.raises(DeliveryError, match="answered an HTML page \\(HTTP 200\\), not the Bot API") as raised:
        async with open_bot(TOKEN, tg.root, retry=RetryPolicy(total_seconds=10), sleep=sleeps):
            pass
    assert not raised.value.permanent
    assert len(sleeps.delays) == 2
    assert statuses(tg, "getMe") == [502, 502, 200, 200]


def test_cli_rerun_posts_only_the_chart_that_failed(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """`digest run --post --chart` twice: the chart refused (429 past the budget), then sent alone; exit 1, then 0."""
    env = telegram_env(corpus_backends, tmp_path, tg.root)
    command = ("run", "--date", "2026-07-20", "--post", "--chart", str(tmp_path / "chart.png"))
    tg.fail_next("sendPhoto", status=429, retry_after=100_000)  # longer than any retry budget: the run gives up
    first = run_digest(*command, env=env, timeout=300)
    second = run_digest(*command, env=env, timeout=300)
    assert first.returncode == 1, first.stderr
    assert f"chat {ALLOWED}: failed (the chart: gave up after 1 attempt in " in first.stderr
    assert "the next wait (100000 s) would pass the 300 s budget" in first.stderr
    assert second.returncode == 0, second.stderr
    assert f"chat {ALLOWED}: sent" in second.stderr
    assert [call.method for call in tg.sent_to(ALLOWED)] == ["sendMessage", "sendPhoto"]
    assert statuses(tg, "sendMessage") == [200]
    for result in (first, second):
        assert "Traceback" not in result.stderr
        assert TOKEN not in result.stderr
        assert "· homelab · 2026-07-20" in result.stdout.splitlines()[0]


@pytest.mark.parametrize(
    ("behaviour", "named"),
    [
        (Behaviour(200, "text/html", b"<html><body><h1>Welcome to nginx!</h1></body></html>"), "an HTML page"),
        (Behaviour(200, "application/json", b'{"ok": true, "result": {"id": 1,'), "malformed JSON"),
        (Behaviour(302, "text/html", b""), "a redirect (HTTP 302)"),
        (Behaviour(200, "application/json", b'{"status":"error"}'), 'JSON without "ok"'),
    ],
    ids=["html", "malformed-json", "redirect", "no-ok-field"],
)
def test_cli_misbehaving_api_root_is_one_line_and_the_digest_still_prints(
    corpus_backends: EmbeddedBackends, tmp_path: Path, behaviour: Behaviour, named: str
) -> None:
    """An API root that is not the Bot API: the digest on stdout, one stderr line naming the answer, exit 1."""
    with misbehaving_server(behaviour) as url:
        env = telegram_env(corpus_backends, tmp_path, url)
        result = run_digest("run", "--date", "2026-07-20", "--post", "--format", "text", env=env)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("digest: not posted: the Telegram API answered ")
    assert named in lines[0]
    assert "DIGEST_TELEGRAM_API_URL" in lines[0]
    assert TOKEN not in result.stderr
    assert "· homelab · 2026-07-20" in result.stdout.splitlines()[0]


@pytest.mark.parametrize(
    "behaviour",
    [
        Behaviour(200, "text/html", b"<html><body><h1>Welcome to nginx!</h1></body></html>"),
        Behaviour(200, "application/json", b'{"status":"error"}'),
    ],
    ids=["html", "no-ok-field"],
)
def test_serve_on_a_root_that_is_not_the_bot_api_is_one_line(
    corpus_backends: EmbeddedBackends, tmp_path: Path, behaviour: Behaviour
) -> None:
    """`digest serve` against an API root that is not the Bot API stops with one line and exit 1, no traceback."""
    with misbehaving_server(behaviour) as url:
        env = telegram_env(corpus_backends, tmp_path, url, DIGEST_HEALTH_PORT="0")
        result = run_digest("serve", env=env, timeout=120)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("digest: cannot start the bot: the Telegram API answered ")
    assert "DIGEST_TELEGRAM_API_URL" in result.stderr
    assert TOKEN not in result.stderr


def test_serve_with_a_refused_token_exits_2_without_the_token(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """A token the Bot API refuses is a configuration error for `serve`: one line, exit 2, the token unsaid."""
    refused = "999:refused-token"  # a fake token the fake server refuses
    env = telegram_env(corpus_backends, tmp_path, tg.root, token=refused, DIGEST_HEALTH_PORT="0")
    result = run_digest("serve", env=env, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == ["digest: cannot start the bot: the Telegram API refused the bot token"]
    assert "refused-token" not in result.stderr


@pytest.mark.parametrize("result", [b"true", b"{}", b'{"message_id": "x"}'], ids=["true", "empty", "bad-id"])
async def test_an_ok_answer_without_a_message_fails_the_part_once_without_a_traceback(
    tg: FakeTelegram, tmp_path: Path, result: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """An "ok" sendMessage answer holding no message fails the part, owed, unretried in the run, no traceback."""
    tg.answer_next_raw("sendMessage", b'{"ok": true, "result": ' + result + b"}", content_type="application/json")
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    async with open_bot(TOKEN, tg.root) as bot:
        first = await poster(bot, state).post_once(ALLOWED, KEY, Calls().message)
    assert first.outcome is Outcome.FAILED
    assert "said ok but answered no message" in (first.error or "")
    assert statuses(tg, "sendMessage") == [200]  # not resent in the run: it may have been delivered
    assert not [record for record in caplog.records if record.exc_info]


async def test_a_getme_answer_that_is_not_a_bot_is_a_delivery_error(tg: FakeTelegram) -> None:
    """`{"ok":true,"result":{}}` for getMe is one DeliveryError naming the API root setting, not a KeyError."""
    tg.answer_next_raw("getMe", b'{"ok": true, "result": {}}', content_type="application/json")
    with pytest.raises(DeliveryError, match=r"said ok but answered no bot .*DIGEST_TELEGRAM_API_URL"):
        async with open_bot(TOKEN, tg.root):
            pass


async def test_a_digest_delivered_across_a_supergroup_move_is_not_sent_again(tg: FakeTelegram, tmp_path: Path) -> None:
    """The group became a supergroup on part 1, all parts went there: the rerun finds it delivered and sends nothing."""
    supergroup = -100_888
    tg.migrate(ALLOWED, supergroup)
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    async with open_bot(TOKEN, tg.root) as bot:
        first = await poster(bot, state).post_once(ALLOWED, KEY, Calls().message)
        again = await poster(bot, state).post_once(ALLOWED, KEY, Calls().message)
    assert first.outcome is Outcome.SENT
    assert again.outcome is Outcome.ALREADY_SENT
    assert [call.visible.splitlines()[-1] for call in tg.sent_to(supergroup)] == ["(1/2)", "(2/2)"]


async def test_a_move_that_loops_back_fails_the_part_instead_of_spinning(tg: FakeTelegram, tmp_path: Path) -> None:
    """A migration answer naming the chat itself is a failed delivery at once, not an endless follow loop."""
    tg.fail_next("sendMessage", migrate_to_chat_id=ALLOWED, times=1000)
    state = DeliveryState(tmp_path / "state.sqlite", "t")
    async with open_bot(TOKEN, tg.root) as bot:
        result = await poster(bot, state).post_once(ALLOWED, KEY, Calls().message)
    assert result.outcome is Outcome.FAILED
    assert "where it had already been" in (result.error or "")
    assert len(statuses(tg, "sendMessage")) == 1


async def test_a_huge_answer_from_the_api_root_is_cut_off_at_the_cap() -> None:
    """A 200 MB answer to getMe is a network error once past the cap (1 MiB here), never read into memory whole."""
    from telegram.error import NetworkError

    from digest.channels.telegram.sender import BotApiRequest

    request = BotApiRequest(max_answer_bytes=1024 * 1024)
    await request.initialize()
    try:
        with (
            misbehaving_server(Behaviour(stream_bytes=200_000_000)) as url,
            pytest.raises(NetworkError, match="answer larger than 1 MiB"),
        ):
            await request.do_request(f"{url}/bot{TOKEN}/getMe", "POST")
    finally:
        await request.shutdown()


async def test_a_compressed_answer_nobody_asked_for_is_refused() -> None:
    """An answer in gzip (a bomb fits in kilobytes) is refused, not inflated: identity was asked for."""
    import gzip

    from telegram.error import NetworkError

    from digest.channels.telegram.sender import BotApiRequest

    bomb = gzip.compress(b'{"ok": true, "result": ' + b" " * 50_000_000 + b"true}")
    request = BotApiRequest()
    await request.initialize()
    try:
        with (
            misbehaving_server(Behaviour(body=bomb, content_encoding="gzip")) as url,
            pytest.raises(NetworkError, match="compressed answer"),
        ):
            await request.do_request(f"{url}/bot{TOKEN}/getMe", "POST")
    finally:
        await request.shutdown()

"""The signed webhook channel, against a loopback receiver that checks signatures and drops repeated deliveries.

What the channel promises (digest/channels/webhook/channel.py): the JSON digest as the body, an HMAC-SHA256
signature with a timestamp, the delivery key in a header; 5xx, 408 and timeouts retried with backoff, 429/503 after
their Retry-After, every other 4xx and a redirect never retried; a lost answer sent once more at most. And the seam:
one scheduled day to Telegram and a webhook at once, each once, across a restart in the middle of the post.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from digest.app.channels import REGISTRY, open_webhook
from digest.app.settings import CHANNEL_NAMES, ConfigError, load_settings
from digest.channels.channel import Outcome
from digest.channels.once import ExactlyOnce, PartsChannel
from digest.channels.retry import RetryPolicy, retry_after
from digest.channels.state import DeliveryState
from digest.channels.webhook.channel import WebhookSender, webhook_channel
from digest.channels.webhook.signature import sign, verify
from digest.testbed.embedded import EmbeddedBackends
from tests.command import backend_env, run_digest
from tests.fake_telegram import FakeTelegram
from tests.fake_webhook import Answer, FakeWebhook, fake_webhook
from tests.test_bot import ALLOWED, TOKEN, make_config, running, wait_until

SECRET = b"webhook-test-secret"
KEY = "daily:2026-07-20"
BODY = json.dumps({"schema_version": 3, "headline": "OK 10/10"})


class Sleeps:
    """The sender's sleep, recorded and instant: the backoff is asserted, not waited for."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)


@asynccontextmanager
async def webhook_posting(
    receiver: FakeWebhook, path: Path, sleeps: Sleeps | None = None, answer_within: float = 5.0, secret: bytes = SECRET
) -> AsyncIterator[PartsChannel]:
    """A webhook channel posting to the receiver as "ops" (path /ops), with instant recorded backoff."""
    state = DeliveryState(path, "test", channel="webhook")
    async with httpx.AsyncClient(timeout=answer_within) as client:
        sender = WebhookSender(client, secret, RetryPolicy(total_seconds=60), sleep=sleeps or Sleeps())
        try:
            yield webhook_channel(ExactlyOnce(state), sender, {"ops": f"{receiver.url}/ops"})
        finally:
            state.close()


async def _body() -> str:
    return BODY


async def test_a_post_is_signed_keyed_and_carries_the_json_digest_once(tmp_path: Path) -> None:
    """The body is the JSON digest as given, signed over its bytes, keyed by the delivery; a second post is none."""
    with fake_webhook(SECRET) as receiver:
        async with webhook_posting(receiver, tmp_path / "state.sqlite") as channel:
            first = await channel.post_once("ops", KEY, _body)
            second = await channel.post_once("ops", KEY, _body)
        [request] = receiver.to("/ops")
    assert first.outcome is Outcome.SENT
    assert second.outcome is Outcome.ALREADY_SENT
    assert request.signed
    assert request.body == BODY.encode()
    assert request.headers["x-digest-delivery"] == KEY
    assert request.headers["content-type"] == "application/json"


async def test_5xx_408_and_a_refused_connection_are_retried_with_backoff(tmp_path: Path) -> None:
    """500, 408 and 503 without Retry-After are transient: retried with growing waits, then taken once."""
    sleeps = Sleeps()
    script = [Answer(500), Answer(408), Answer(503)]
    with fake_webhook(SECRET, script) as receiver:
        async with webhook_posting(receiver, tmp_path / "state.sqlite", sleeps) as channel:
            result = await channel.post_once("ops", KEY, _body)
        requests = receiver.to("/ops")
        taken = receiver.taken["/ops"]
    assert result.outcome is Outcome.SENT
    assert len(requests) == 4
    assert len(taken) == 1
    assert len(sleeps.asked) == 3
    assert sleeps.asked[0] < sleeps.asked[1] < sleeps.asked[2]


async def test_429_waits_exactly_its_retry_after(tmp_path: Path) -> None:
    """A 429 with Retry-After: 7 is retried after 7 s, not after the backoff."""
    sleeps = Sleeps()
    with fake_webhook(SECRET, [Answer(429, (("Retry-After", "7"),))]) as receiver:
        async with webhook_posting(receiver, tmp_path / "state.sqlite", sleeps) as channel:
            result = await channel.post_once("ops", KEY, _body)
    assert result.outcome is Outcome.SENT
    assert sleeps.asked == [7.0]


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (Answer(400, body=b"bad payload"), "refused by the receiver: HTTP 400: bad payload"),
        (Answer(404), "refused by the receiver: HTTP 404"),
        (Answer(302, (("Location", "http://elsewhere.invalid/"),)), "redirected (HTTP 302)"),
    ],
    ids=["400", "404", "redirect"],
)
async def test_a_4xx_or_a_redirect_is_permanent_and_never_retried(tmp_path: Path, answer: Answer, said: str) -> None:
    """Any 4xx but 408/429, and a redirect, fail for good after one request, named; a later round does not retry."""
    sleeps = Sleeps()
    with fake_webhook(SECRET, [answer]) as receiver:
        async with webhook_posting(receiver, tmp_path / "state.sqlite", sleeps) as channel:
            result = await channel.post_once("ops", KEY, _body)
            again = await channel.post_once("ops", KEY, _body)
        requests = receiver.to("/ops")
    assert result.outcome is Outcome.FAILED_PERMANENT
    assert said in (result.error or "")
    assert again.outcome is Outcome.FAILED_PERMANENT
    assert len(requests) == 1
    assert sleeps.asked == []


async def test_a_wrong_secret_is_refused_by_the_receiver_for_good(tmp_path: Path) -> None:
    """Signed with another key, the post is refused (401) and recorded as a permanent failure."""
    with fake_webhook(SECRET) as receiver:
        async with webhook_posting(receiver, tmp_path / "state.sqlite", secret=b"another") as channel:
            result = await channel.post_once("ops", KEY, _body)
    assert result.outcome is Outcome.FAILED_PERMANENT
    assert "HTTP 401" in (result.error or "")


@pytest.mark.parametrize("lost", ["closed", "timed out"])
async def test_a_lost_answer_is_sent_once_more_at_most_and_taken_once(tmp_path: Path, lost: str) -> None:
    """Answers lost twice (cut off, or slower than the timeout): two sends, then "not confirmed"; one taken."""
    answer = Answer(lost=True) if lost == "closed" else Answer(delay=1.0)
    with fake_webhook(SECRET, [answer, answer, answer]) as receiver:
        async with webhook_posting(receiver, tmp_path / "state.sqlite", answer_within=0.3) as channel:
            result = await channel.post_once("ops", KEY, _body)
            again = await channel.post_once("ops", KEY, _body)
        requests = receiver.to("/ops")
        taken = receiver.taken["/ops"]
    assert result.outcome is Outcome.SENT
    assert "not confirmed" in (result.error or "")
    assert again.outcome is Outcome.ALREADY_SENT
    assert len(requests) == 2
    assert len(taken) == 1
    assert {request.headers["x-digest-delivery"] for request in requests} == {KEY}


def test_the_signature_binds_the_body_and_the_time() -> None:
    """A receiver's check refuses another body, another key and a timestamp older than five minutes."""
    header = sign(SECRET, 1_784_548_800, b"{}")
    assert verify(SECRET, header, b"{}", 1_784_548_800 + 10)
    assert not verify(SECRET, header, b"{ }", 1_784_548_800)
    assert not verify(b"other", header, b"{}", 1_784_548_800)
    assert not verify(SECRET, header, b"{}", 1_784_548_800 + 301)
    assert not verify(SECRET, "t=x,v1=00", b"{}", 0)


def test_retry_after_reads_seconds_and_http_dates() -> None:
    """Retry-After as delta seconds or an HTTP date; anything else is no advice."""
    assert retry_after("7", 0.0) == 7.0
    assert retry_after("Thu, 01 Jan 1970 00:00:30 GMT", 10.0) == 20.0
    assert retry_after("soon", 0.0) is None
    assert retry_after(None, 0.0) is None


def test_every_channel_the_settings_may_name_is_built_by_the_registry() -> None:
    """DIGEST_CHANNELS' names and the registry's entries are the same list: a channel is one entry away."""
    assert tuple(REGISTRY) == CHANNEL_NAMES


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        ({"channels": "telegram,slackk"}, "DIGEST_CHANNELS: unknown channel 'slackk'"),
        ({"channels": "webhook,webhook"}, "DIGEST_CHANNELS: a channel is named twice"),
        ({"webhook_urls": "ops=ftp://receiver.test/x"}, "DIGEST_WEBHOOK_URLS: the URL of 'ops' must be an http"),
        ({"webhook_urls": "ops=https://receiver.test,ops=https://b.test"}, "recipient 'ops' is named twice"),
        ({"webhook_urls": "https://receiver.test/x,https://b.test/y"}, "must be name=URL pairs"),
    ],
    ids=["unknown-channel", "twice", "scheme", "name-twice", "unnamed"],
)
def test_bad_channel_settings_are_one_line_naming_the_variable(overrides: dict[str, object], said: str) -> None:
    """A misspelt channel or a bad webhook URL list is refused at start, naming the variable, never echoing a URL."""
    with pytest.raises(ConfigError) as refused:
        load_settings(policy_file=None, **overrides)
    assert said in str(refused.value)
    assert "receiver.test" not in str(refused.value)


def test_one_bare_webhook_url_is_named_webhook_and_its_url_is_a_secret(tmp_path: Path) -> None:
    """DIGEST_WEBHOOK_URLS=<one URL>: recipient "webhook"; the URL and its path are masked in logs."""
    url = "https://hooks.example/services/T000/B000/XXXXsecret"
    settings = load_settings(policy_file=None, webhook_urls=url, webhook_secret="k")  # noqa: S106  # a test key
    assert settings.webhook_endpoints() == {"webhook": url}
    assert url in settings.secrets()
    assert "/services/T000/B000/XXXXsecret" in settings.secrets()


def test_run_post_to_a_webhook_without_its_url_or_secret_exits_2_naming_it(tmp_path: Path) -> None:
    """`digest run --post` with DIGEST_CHANNELS=webhook and no URL (or no secret) is one line and exit 2."""
    base = {"DIGEST_CHANNELS": "webhook", "DIGEST_STATE_PATH": str(tmp_path / "state.sqlite")}
    no_url = run_digest("run", "--post", env=base)
    no_secret = run_digest("run", "--post", env={**base, "DIGEST_WEBHOOK_URLS": "ops=https://hooks.example/x"})
    assert no_url.returncode == 2
    assert no_url.stderr.strip().startswith("digest: DIGEST_WEBHOOK_URLS: not set")
    assert no_secret.returncode == 2
    assert no_secret.stderr.strip().startswith("digest: DIGEST_WEBHOOK_SECRET: not set")


def test_run_post_posts_once_to_telegram_and_the_webhook_and_a_rerun_posts_nothing(
    corpus_backends: EmbeddedBackends, tmp_path: Path
) -> None:
    """The CronJob path with DIGEST_CHANNELS=telegram,webhook: each recipient gets the day once; JSON to the webhook."""
    with FakeTelegram(TOKEN, known_chats={ALLOWED}) as tg, fake_webhook(SECRET) as receiver:
        env = backend_env(
            corpus_backends,
            DIGEST_CHANNELS="telegram,webhook",
            DIGEST_TELEGRAM_API_URL=tg.root,
            DIGEST_TELEGRAM_CHAT_IDS=str(ALLOWED),
            DIGEST_TELEGRAM_TOKEN=TOKEN,
            DIGEST_WEBHOOK_URLS=f"ops={receiver.url}/ops",
            DIGEST_WEBHOOK_SECRET=SECRET.decode(),
            DIGEST_STATE_PATH=str(tmp_path / "state.sqlite"),
        )
        command = ("-v", "run", "--date", "2026-07-20", "--post")
        first = run_digest(*command, env=env)
        second = run_digest(*command, env=env)
        telegram_posts = tg.sent_to(ALLOWED)
        [request] = receiver.to("/ops")
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert f"chat {ALLOWED}: sent" in first.stderr
    assert "webhook ops: sent" in first.stderr
    assert "webhook ops: already_sent" in second.stderr
    assert [call.method for call in telegram_posts] == ["sendMessage", "sendPhoto"]  # the webhook takes no chart
    posted = json.loads(request.body)
    assert posted["schema_version"] >= 1
    assert posted["window"]["start"].startswith("2026-07-20")
    assert request.signed
    assert receiver.url not in first.stderr + second.stderr  # the URL is a secret: masked in the verbose log


async def test_the_bot_posts_the_day_to_telegram_and_the_webhook_once_across_a_restart(
    corpus_backends: EmbeddedBackends, tmp_path: Path
) -> None:
    """`digest serve` with a webhook: the noon round reaches both; a restart mid-post (webhook slow) doubles none."""
    noon = datetime(2026, 7, 20, 12, 0, 5, tzinfo=UTC)
    slow = Answer(delay=3.0)  # the first bot is stopped while its webhook post waits for this answer
    with FakeTelegram(TOKEN, known_chats={ALLOWED}) as tg, fake_webhook(SECRET, [slow]) as receiver:
        config = make_config(
            corpus_backends,
            tg,
            tmp_path / "state.sqlite",
            channels="telegram,webhook",
            webhook_urls=f"ops={receiver.url}/ops",
            webhook_secret=SECRET.decode(),
        )
        async with running(config, lambda: noon, owner="first") as bot:
            await wait_until(lambda: len(receiver.to("/ops")) == 1, within=120)
            bot.dispatch.stop()  # SIGTERM: the deliveries in flight are cancelled, their claims released
        async with running(config, lambda: noon, owner="restarted") as bot:
            await wait_until(lambda: ("webhook", "ops") in bot.dispatch.last_results, within=60)
            await wait_until(lambda: ALLOWED in bot.last_results, within=60)
            status = await bot.status_text(None)
        telegram_posts = tg.sent_to(ALLOWED)
        requests = receiver.to("/ops")
        taken = receiver.taken["/ops"]
    assert len(telegram_posts) == 1
    # The stopped post may have arrived (it had: its answer was late), so the restart sends it once more, and the
    # receiver drops the repeat by its delivery key.
    assert len(requests) == 2
    assert len({request.headers["x-digest-delivery"] for request in requests}) == 1
    assert len(taken) == 1
    assert json.loads(taken[0])["window"]["end"].startswith("2026-07-20T12:00")
    assert "Webhook ops: daily:2026-07-20 sent" in status
    assert f"Chat {ALLOWED}: daily:2026-07-20 sent" in status


async def test_open_webhook_builds_the_channel_from_the_settings(tmp_path: Path) -> None:
    """The registry's webhook entry: named recipients, JSON format, rows of its own in the shared state file."""
    settings = load_settings(
        policy_file=None,
        channels="webhook",
        webhook_urls="ops=https://hooks.example/a,audit=https://hooks.example/b",
        webhook_secret="k",  # noqa: S106  # a test key
        state_path=tmp_path / "state.sqlite",
    )
    async with open_webhook(settings, "test") as channel:
        assert channel.recipients == ("ops", "audit")
        assert channel.format == "json"
        assert channel.name == "webhook"
        assert await asyncio.to_thread(channel.state.claim, "ops", KEY, 60)
    telegram = DeliveryState(tmp_path / "state.sqlite", "other")
    try:
        assert telegram.get("ops", KEY) is None  # Telegram's rows are apart
    finally:
        telegram.close()

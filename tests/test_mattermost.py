"""The Mattermost channel against a Mattermost lookalike on loopback (tests/fake_mattermost.py).

What it promises (digest/channels/mattermost/): Telegram's sections as Mattermost Markdown, marks escaped and
@mentions neutralised; posts within the 16,383-character limit; the chart as a post with its file; 429 waited out by
Retry-After, 5xx retried; 401/403/404 permanent, named per channel, while the others get the post; a lost answer
repeated once at most; incoming webhooks as the text-only alternative; the doctor's users/me and channels/{id}.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from digest.app.serve import ChannelPoster
from digest.app.settings import ConfigError, load_settings
from digest.channels.channel import Outcome, Photo
from digest.channels.http import HttpSender
from digest.channels.mattermost.channel import (
    MattermostApi,
    mattermost_channel,
    mattermost_webhook_channel,
)
from digest.channels.mattermost.check import check_mattermost
from digest.channels.mattermost.markdown import MAX_POST, from_html, posts_of
from digest.channels.once import ExactlyOnce, PartsChannel
from digest.channels.retry import RetryPolicy
from digest.channels.state import DeliveryState
from digest.output.render import Renderer
from tests.command import run_digest
from tests.fake_mattermost import TOKEN, FakeMattermost, Fault, fake_mattermost
from tests.test_render import _hostile_digest

KEY = "daily:2026-07-20"
OPS, PLATFORM, QUIET = "a" * 26, "b" * 26, "c" * 26
HTML = "<b>OK 10/10</b> · homelab · 24h to 2026-07-20 12:00 UTC\n\n<i>Nothing to look at.</i>"


class Sleeps:
    """The sender's sleep, recorded and instant."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)


def server_with_channels(server: FakeMattermost) -> None:
    """Ops and platform with the bot in both, quiet without it."""
    server.add_channel(OPS, "ops")
    server.add_channel(PLATFORM, "platform")
    server.add_channel(QUIET, "quiet", member=False)


@asynccontextmanager
async def mattermost_posting(
    server: FakeMattermost, path: Path, *channels: str, sleeps: Sleeps | None = None, token: str = TOKEN
) -> AsyncIterator[PartsChannel]:
    """A bot-token Mattermost channel on the fake, with instant recorded backoff."""
    state = DeliveryState(path, "test", channel="mattermost")
    async with httpx.AsyncClient(timeout=5.0) as client:
        http = HttpSender(client, "Mattermost", RetryPolicy(total_seconds=120), sleep=sleeps or Sleeps())
        try:
            yield mattermost_channel(ExactlyOnce(state), MattermostApi(http, server.url, token), channels or (OPS,))
        finally:
            state.close()


async def _html() -> str:
    return HTML


def test_the_html_digest_becomes_markdown_with_mentions_broken_and_marks_escaped() -> None:
    """<b> → **, links → [label](url); "@channel", "*x*" and "#1" from a log line print as written, notifying no one."""
    html = '<b>OK</b> @channel wrote *x* #1 <code>a`b</code> <a href="https://g.example/x(1)">Gra_fana</a> a&amp;b'
    converted = from_html(html)
    assert converted == "**OK** @\u200bchannel wrote \\*x\\* \\#1 `a'b` [Gra\\_fana](https://g.example/x%281%29) a&b"


def test_a_hostile_digest_has_no_live_mention_and_every_post_fits() -> None:
    """The hostile render has no @all/@channel/@here left whole, and its posts are within the limit."""
    converted = from_html(Renderer().render(_hostile_digest(), "html").replace("prod", "@all prod"))
    assert "@all" not in converted
    assert all(len(post) <= MAX_POST for post in posts_of(converted * 20))


async def test_a_digest_is_posted_once_with_the_chart_as_a_post_of_its_file(tmp_path: Path) -> None:
    """POST /api/v4/posts with the Markdown; the chart uploaded to the channel and posted with its caption; once."""

    async def chart() -> Photo:
        return Photo(png=b"\x89PNG" + b"0" * 3000, caption="error lines per 10 minutes")

    with fake_mattermost() as server:
        server_with_channels(server)
        async with mattermost_posting(server, tmp_path / "state.sqlite") as channel:
            first = await channel.post_once(OPS, KEY, _html, photo=chart)
            second = await channel.post_once(OPS, KEY, _html, photo=chart)
        text, picture = server.posted_to(OPS)
    assert first.outcome is Outcome.SENT
    assert second.outcome is Outcome.ALREADY_SENT
    assert text.message.startswith("**OK 10/10** · homelab")
    assert picture.message == "error lines per 10 minutes"
    assert len(picture.file_ids) == 1
    assert server.files[picture.file_ids[0]][1].startswith(b"\x89PNG")


async def test_429_waits_its_retry_after_and_5xx_is_retried(tmp_path: Path) -> None:
    """A 429 with Retry-After: 4, then a 502: waited 4 s, then backed off, then posted once."""
    sleeps = Sleeps()
    with fake_mattermost() as server:
        server_with_channels(server)
        server.faults = [Fault(429, retry_after=4), Fault(502)]
        async with mattermost_posting(server, tmp_path / "state.sqlite", sleeps=sleeps) as channel:
            result = await channel.post_once(OPS, KEY, _html)
        posts = server.posted_to(OPS)
    assert result.outcome is Outcome.SENT
    assert sleeps.asked[0] == 4.0
    assert len(sleeps.asked) == 2
    assert len(posts) == 1


async def test_permanent_refusals_are_named_per_channel_while_the_others_get_the_post(tmp_path: Path) -> None:
    """A channel that does not exist (404) and one without the bot (403) fail for good; ops and platform get the day."""
    missing = "d" * 26
    with fake_mattermost() as server:
        server_with_channels(server)
        async with mattermost_posting(server, tmp_path / "state.sqlite", OPS, missing, QUIET, PLATFORM) as channel:
            poster = ChannelPoster((channel,), Renderer())
            account = await poster(_hostile_digest(), key=KEY)
        posts = [len(server.posted_to(one)) for one in (OPS, PLATFORM)]
    assert f"mattermost {missing}: failed_permanent (the message: refused by Mattermost: HTTP 404: Unable" in account
    assert f"mattermost {QUIET}: failed_permanent (the message: refused by Mattermost: HTTP 403: You do not" in account
    assert posts == [1, 1]
    assert poster.permanent_failures == 2


async def test_a_wrong_token_is_permanent(tmp_path: Path) -> None:
    """401 is not retried: the token is wrong until someone changes it."""
    sleeps = Sleeps()
    with fake_mattermost() as server:
        server_with_channels(server)
        async with mattermost_posting(server, tmp_path / "state.sqlite", sleeps=sleeps, token="wrong") as channel:  # noqa: S106  # a wrong token, on purpose
            result = await channel.post_once(OPS, KEY, _html)
    assert result.outcome is Outcome.FAILED_PERMANENT
    assert "HTTP 401" in (result.error or "")
    assert sleeps.asked == []


async def test_a_lost_answer_repeats_a_post_once_at_most(tmp_path: Path) -> None:
    """Answers lost three times: the post goes twice at most, then "not confirmed"."""
    with fake_mattermost() as server:
        server_with_channels(server)
        server.faults = [Fault(lost=True)] * 3
        async with mattermost_posting(server, tmp_path / "state.sqlite") as channel:
            result = await channel.post_once(OPS, KEY, _html)
        posts = server.posted_to(OPS)
    assert result.outcome is Outcome.SENT
    assert "not confirmed" in (result.error or "")
    assert len(posts) == 2


async def test_incoming_webhooks_post_the_markdown_never_a_chart(tmp_path: Path) -> None:
    """DIGEST_MATTERMOST_WEBHOOK_URLS: the Markdown to the hook's channel, no chart; an unknown hook fails for good."""

    async def chart() -> Photo:
        return Photo(png=b"png", caption="chart")

    with fake_mattermost() as server:
        server_with_channels(server)
        server.hooks["ops"] = OPS
        state = DeliveryState(tmp_path / "state.sqlite", "test", channel="mattermost")
        async with httpx.AsyncClient() as client:
            http = HttpSender(client, "Mattermost", sleep=Sleeps())
            endpoints = {"ops": server.hook_url("ops"), "gone": server.hook_url("gone")}
            channel = mattermost_webhook_channel(ExactlyOnce(state), http, endpoints)
            posted = await channel.post_once("ops", KEY, _html, photo=chart)
            gone = await channel.post_once("gone", KEY, _html, photo=chart)
        state.close()
        [post] = server.posted_to(OPS)
    assert posted.outcome is Outcome.SENT
    assert post.message.startswith("**OK 10/10**")
    assert server.files == {}
    assert gone.outcome is Outcome.FAILED_PERMANENT
    assert "HTTP 400" in (gone.error or "")


async def test_the_doctor_asks_the_token_and_each_channel_without_posting() -> None:
    """users/me names the bot; a missing channel and one without the bot are named; nothing is posted."""
    missing = "d" * 26
    with fake_mattermost() as server:
        server_with_channels(server)
        async with httpx.AsyncClient() as client:
            found = await check_mattermost(client, server.url, TOKEN, [OPS, missing, QUIET])
            wrong = await check_mattermost(client, server.url, "wrong", [OPS])
        assert server.posts == []
    assert found.who == "@digest-bot"
    said = {one.channel: (one.ok, one.said) for one in found.channels}
    assert said[OPS] == (True, "“ops”")
    assert said[missing][0] is False
    assert said[QUIET][0] is False
    assert "HTTP 401" in (wrong.problem or "")


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({}, "DIGEST_MATTERMOST_TOKEN: not set"),
        ({"DIGEST_MATTERMOST_TOKEN": TOKEN}, "DIGEST_MATTERMOST_URL: not set"),
        (
            {"DIGEST_MATTERMOST_TOKEN": TOKEN, "DIGEST_MATTERMOST_URL": "https://chat.test"},
            "DIGEST_MATTERMOST_CHANNEL_IDS: not set",
        ),
        ({"DIGEST_MATTERMOST_CHANNEL_IDS": "town-square"}, "DIGEST_MATTERMOST_CHANNEL_IDS: 'town-square' is not"),
    ],
    ids=["nothing", "no-server", "no-channels", "a-name"],
)
def test_run_post_to_mattermost_without_what_it_needs_exits_2_naming_it(
    tmp_path: Path, env: dict[str, str], said: str
) -> None:
    """`digest run --post` with DIGEST_CHANNELS=mattermost and a missing or wrong setting: one line, exit 2."""
    base = {"DIGEST_CHANNELS": "mattermost", "DIGEST_STATE_PATH": str(tmp_path / "state.sqlite")}
    result = run_digest("run", "--post", env={**base, **env})
    assert result.returncode == 2
    assert result.stderr.strip().startswith(f"digest: {said}")
    assert TOKEN not in result.stderr


def test_token_and_webhooks_together_are_refused() -> None:
    """A token and webhooks at once: one line naming both variables."""
    settings = load_settings(
        policy_file=None,
        mattermost_token=TOKEN,
        mattermost_webhook_urls="ops=https://chat.test/hooks/x",
    )
    with pytest.raises(ConfigError, match="DIGEST_MATTERMOST_TOKEN and DIGEST_MATTERMOST_WEBHOOK_URLS are both set"):
        settings.require_mattermost()

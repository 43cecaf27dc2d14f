"""The channels the digest posts to, built from the settings: one entry per channel in `REGISTRY`.

``DIGEST_CHANNELS`` names the channels (``telegram`` by default; ``telegram,slack``; ``webhook``); each is opened
by its entry here with its own settings group and its own rows in the one delivery state file, and every post —
`digest serve`'s schedule, `digest run --post`, the CronJob, `digest replay --post` — goes to each of its recipients
once per delivery key.

Adding a channel: a package under ``digest/channels/<name>/`` with its `digest.channels.channel.Channel` (posting
through `digest.channels.once.ExactlyOnce` with its own `PartWriter`), a settings group in
`digest.app.settings.Settings` (its recipients and credentials, secrets with a ``_FILE`` variant) with its name in
``CHANNEL_NAMES``, and one entry in `REGISTRY`: how it opens, how its settings are checked at start, who its
recipients are. `digest serve`, `run --post` and `replay --post` then post to it (through
`digest.channels.dispatch.Dispatch` on the schedule), the start-up check and the metrics know it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import httpx

from digest import __version__
from digest.app.settings import Settings
from digest.channels.channel import Channel
from digest.channels.http import HttpSender
from digest.channels.mattermost.channel import (
    MATTERMOST,
    MattermostApi,
    mattermost_channel,
    mattermost_webhook_channel,
)
from digest.channels.once import ExactlyOnce
from digest.channels.slack.api import SlackApi
from digest.channels.slack.channel import SLACK, slack_channel, slack_webhook_channel
from digest.channels.state import TELEGRAM, DeliveryState
from digest.channels.telegram.channel import TelegramChannel
from digest.channels.telegram.sender import ChatId, Poster, Sender, open_bot
from digest.channels.webhook.channel import WEBHOOK, WebhookSender, webhook_channel


def chat_topics(settings: Settings) -> dict[ChatId, int]:
    """The forum topic each chat's scheduled digests go to (``chat:topic`` in TELEGRAM_CHAT_IDS)."""
    return {chat: topic for chat, topic in settings.telegram_chat_topics.items()}


_AGENT = {"User-Agent": f"digest/{__version__}"}

# A channel opened from the settings for one owner of the delivery leases; closed (its client, its state) on exit.
ChannelOpener = Callable[[Settings, str], AbstractAsyncContextManager[Channel]]


@asynccontextmanager
async def open_telegram(settings: Settings, owner: str) -> AsyncIterator[Channel]:
    """The Telegram chats of DIGEST_TELEGRAM_CHAT_IDS, through a Bot checked with getMe (`DeliveryError` if not)."""
    token = settings.require_telegram()
    state = DeliveryState(settings.state_path, owner, channel=TELEGRAM)
    try:
        async with open_bot(token, settings.telegram_api_url) as bot:
            poster = Poster(sender=Sender(bot, state=state), state=state)
            yield TelegramChannel(poster, settings.telegram_chat_ids, chat_topics(settings))
    finally:
        state.close()


@asynccontextmanager
async def open_webhook(settings: Settings, owner: str) -> AsyncIterator[Channel]:
    """The named URLs of DIGEST_WEBHOOK_URLS, each post signed with DIGEST_WEBHOOK_SECRET."""
    endpoints, secret = settings.require_webhook()
    state = DeliveryState(settings.state_path, owner, channel=WEBHOOK)
    timeout = httpx.Timeout(settings.webhook_timeout_seconds, connect=min(5.0, settings.webhook_timeout_seconds))
    client = httpx.AsyncClient(timeout=timeout, follow_redirects=False, headers=_AGENT)
    try:
        yield webhook_channel(ExactlyOnce(state), WebhookSender(client, secret), endpoints)
    finally:
        await client.aclose()
        state.close()


@asynccontextmanager
async def open_slack(settings: Settings, owner: str) -> AsyncIterator[Channel]:
    """The Slack channels of DIGEST_SLACK_CHANNEL_IDS with a bot token, or the incoming webhooks (text only)."""
    token = settings.require_slack()
    state = DeliveryState(settings.state_path, owner, channel=SLACK)
    client = httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=5.0), follow_redirects=False, headers=_AGENT)
    try:
        if token is None:
            api = SlackApi(client, "", settings.slack_api_url)
            yield slack_webhook_channel(ExactlyOnce(state), api, settings.slack_webhook_endpoints())
        else:
            api = SlackApi(client, token, settings.slack_api_url)
            yield slack_channel(ExactlyOnce(state), api, settings.slack_channel_ids, chart=settings.slack_chart)
    finally:
        await client.aclose()
        state.close()


@asynccontextmanager
async def open_mattermost(settings: Settings, owner: str) -> AsyncIterator[Channel]:
    """The Mattermost channels of DIGEST_MATTERMOST_CHANNEL_IDS with a bot's token, or the incoming webhooks."""
    server = settings.require_mattermost()
    state = DeliveryState(settings.state_path, owner, channel=MATTERMOST)
    client = httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=5.0), follow_redirects=False, headers=_AGENT)
    try:
        http = HttpSender(client, "Mattermost")
        if server is None:
            yield mattermost_webhook_channel(ExactlyOnce(state), http, settings.mattermost_webhook_endpoints())
        else:
            api = MattermostApi(http, *server)
            channels = settings.mattermost_channel_ids
            yield mattermost_channel(ExactlyOnce(state), api, channels, chart=settings.mattermost_chart)
    finally:
        await client.aclose()
        state.close()


@dataclass(frozen=True)
class ChannelEntry:
    """How the app knows one channel: its settings checked at start, its recipients as the state keys them, opened."""

    open: ChannelOpener
    # Raises `ConfigError` naming the variable when the channel's settings cannot post (checked before anything runs).
    check: Callable[[Settings], object]
    recipients: Callable[[Settings], list[str]]


REGISTRY: dict[str, ChannelEntry] = {
    TELEGRAM: ChannelEntry(
        open_telegram,
        lambda settings: settings.require_telegram(),
        lambda settings: [str(chat) for chat in settings.telegram_chat_ids],
    ),
    SLACK: ChannelEntry(
        open_slack,
        lambda settings: settings.require_slack(),
        lambda settings: [*settings.slack_channel_ids, *settings.slack_webhook_endpoints()],
    ),
    MATTERMOST: ChannelEntry(
        open_mattermost,
        lambda settings: settings.require_mattermost(),
        lambda settings: [*settings.mattermost_channel_ids, *settings.mattermost_webhook_endpoints()],
    ),
    WEBHOOK: ChannelEntry(
        open_webhook,
        lambda settings: settings.require_webhook(),
        lambda settings: list(settings.webhook_endpoints()),
    ),
}


def check_channels(settings: Settings) -> None:
    """`ConfigError` for the first channel of DIGEST_CHANNELS whose settings cannot post (one line, naming them)."""
    for name in settings.channels:
        REGISTRY[name].check(settings)


@asynccontextmanager
async def open_channels(
    settings: Settings, owner: str, skip: frozenset[str] = frozenset()
) -> AsyncIterator[tuple[Channel, ...]]:
    """Every channel of DIGEST_CHANNELS but ``skip`` (the bot's own Telegram in `digest serve`), open, in order."""
    async with AsyncExitStack() as stack:
        channels = [
            await stack.enter_async_context(REGISTRY[name].open(settings, owner))
            for name in settings.channels
            if name not in skip
        ]
        yield tuple(channels)

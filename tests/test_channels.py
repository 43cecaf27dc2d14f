"""The channel seam: a second channel is one class meeting `Channel`; posting goes through it, once per recipient."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from digest.app.serve import ChannelPoster, window_key
from digest.channels.channel import Outcome, Photo, PostResult
from digest.channels.state import DeliveryState, DeliveryStatus
from digest.channels.telegram.bot import BotSettings, DigestBot, build_application
from digest.channels.telegram.sender import ChatId
from digest.checks.contract import Finding, Status, Window
from digest.output.render import Renderer
from digest.pipeline.policy import Policy
from digest.pipeline.score import grade
from digest.pipeline.window import day_window
from tests.fake_telegram import FakeTelegram

TOKEN = "123456:AAE-channel-bot-token"  # noqa: S105  # a fake token for the loopback Bot API
CHAT = -1009876543210


@dataclass
class NotebookChannel:
    """A channel that writes plain-text digests into a list, exactly once per (recipient, key), via the state."""

    state: DeliveryState
    recipients: tuple[str, ...]
    written: list[tuple[str, str]] = field(default_factory=list)
    name: str = "notebook"
    title: str = "Notebook"
    format: str = "text"

    async def post_once(
        self,
        recipient: str,
        key: str,
        message: Callable[[], Awaitable[str]],
        late: bool = False,
        photo: Callable[[], Awaitable[Photo | None]] | None = None,
    ) -> PostResult:
        if not self.state.claim(recipient, key, lease_seconds=60):
            return PostResult(Outcome.ALREADY_SENT, recipient)
        self.written.append((recipient, await message()))
        self.state.mark_sent(recipient, key, [len(self.written)], late=late)
        return PostResult(Outcome.SENT, recipient, (len(self.written),))


async def test_a_second_channel_is_one_class_and_shares_the_state_file_with_telegram(tmp_path: Path) -> None:
    """A non-Telegram channel with text recipients gets the digest in its own format, once, beside Telegram's rows."""
    window = day_window(date(2026, 7, 20), ZoneInfo("UTC"))
    findings = [Finding(name="oom_kills", status=Status.OK, penalty=0, value=0, summary="no OOM kill")]
    digest = grade("homelab", window, findings, (), Policy())
    path = tmp_path / "state.sqlite"
    telegram = DeliveryState(path, "bot")
    assert telegram.claim("ops-room", window_key(window), lease_seconds=60)  # the same name on Telegram: another row
    channel = NotebookChannel(DeliveryState(path, "cron", channel="notebook"), ("ops-room", "#platform"))
    poster = ChannelPoster((channel,), Renderer())
    assert await poster(digest) == "notebook ops-room: sent; notebook #platform: sent"
    assert await poster(digest) == "notebook ops-room: already_sent; notebook #platform: already_sent"
    assert [recipient for recipient, _ in channel.written] == ["ops-room", "#platform"]
    assert channel.written[0][1] == Renderer().render(digest, "text")  # the channel's format, not Telegram's HTML
    pending = telegram.get("ops-room", window_key(window))
    assert pending is not None
    assert pending.status is DeliveryStatus.SENDING  # Telegram's delivery of that name was not touched


@dataclass
class CannedDigests:
    """The bot's `Digests` without the app: one fixed HTML per window, the windows asked recorded.

    ``delay``: seconds each digest takes to compute, as a real one does, so that rounds running together overlap.
    """

    asked: list[Window] = field(default_factory=list)
    delay: float = 0.0

    async def text(self, window: Window, fmt: str) -> str:
        self.asked.append(window)
        await asyncio.sleep(self.delay)
        return "<b>OK 10/10</b> · 24h"

    async def photo(self, window: Window) -> Photo | None:
        return None

    async def week_text(self, year: int, week: int, fmt: str) -> str:
        return "<b>week</b>"

    async def week_photo(self, year: int, week: int) -> Photo | None:
        return None


def noon_settings(api_url: str, *chat_ids: int, topics: Mapping[ChatId, int] | None = None) -> BotSettings:
    """The bot's settings of these tests: cluster "lab", the daily post at 12:00 UTC, 6 h of grace."""
    return BotSettings(
        cluster="lab",
        zone=ZoneInfo("UTC"),
        post_at="12:00",
        late_grace_hours=6,
        chat_ids=chat_ids,
        topics=topics or {},
        api_url=api_url,
    )


async def test_the_telegram_bot_runs_without_the_app(tmp_path: Path) -> None:
    """The channel's bot, given a settings view and canned digests (no engine, no app hooks), posts once and reports."""
    noon = datetime(2026, 7, 21, 12, 0, 5, tzinfo=UTC)
    digests = CannedDigests()
    state = DeliveryState(tmp_path / "state.sqlite", "bot")
    with FakeTelegram(TOKEN, known_chats={CHAT}) as tg:
        bot = DigestBot(settings=noon_settings(tg.root, CHAT), state=state, digests=digests, clock=lambda: noon)
        async with build_application(bot, TOKEN):
            first = await bot.post_due()
            second = await bot.post_due()
            status = await bot.status_text(None)
        [post] = tg.sent_to(CHAT)
    state.close()
    assert [result.outcome for result in first] == [Outcome.SENT]
    assert [result.outcome for result in second] == [Outcome.ALREADY_SENT]
    assert post.visible == "OK 10/10 · 24h"
    [window] = digests.asked
    assert window.end == datetime(2026, 7, 21, 12, tzinfo=UTC)
    assert status.splitlines()[:2] == ["digest status · lab", "Next post: 2026-07-22 12:00 UTC"]
    assert status.splitlines()[2].startswith(f"Chat {CHAT}: daily:2026-07-21 sent")


async def test_the_daily_post_goes_to_the_configured_forum_topic(tmp_path: Path) -> None:
    """`chat:topic` posts the day in that topic; a topic that does not exist fails for good there, named."""
    noon = datetime(2026, 7, 21, 12, 0, 5, tzinfo=UTC)
    forum, missing_topic = CHAT, -1005555555555
    state = DeliveryState(tmp_path / "state.sqlite", "bot")
    with FakeTelegram(TOKEN, known_chats={forum, missing_topic}) as tg:
        tg.add_topic(forum, 77)
        tg.add_topic(missing_topic, 5)
        settings = noon_settings(tg.root, forum, missing_topic, topics={forum: 77, missing_topic: 6})
        bot = DigestBot(settings=settings, state=state, digests=CannedDigests(), clock=lambda: noon)
        async with build_application(bot, TOKEN):
            posted, refused = await bot.post_due()
        [post] = tg.sent_to(forum)
        assert tg.sent_to(missing_topic) == []
    state.close()
    assert posted.outcome is Outcome.SENT
    assert post.message is not None
    assert post.message["message_thread_id"] == 77
    assert refused.outcome is Outcome.FAILED_PERMANENT
    assert "message thread not found" in (refused.error or "").lower()

"""The channel seam: a second channel is one class meeting `Channel`; posting goes through it, once per recipient."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from zoneinfo import ZoneInfo

from checks.contract import Finding, Status
from digest.app.serve import ChannelPoster, window_key
from digest.channels.channel import Outcome, Photo, PostResult
from digest.output.render import Renderer
from digest.pipeline.policy import Policy
from digest.pipeline.score import grade
from digest.pipeline.state import DeliveryState, DeliveryStatus
from digest.pipeline.window import day_window


@dataclass
class NotebookChannel:
    """A channel that writes plain-text digests into a list, exactly once per (recipient, key), via the state."""

    state: DeliveryState
    recipients: tuple[str, ...]
    written: list[tuple[str, str]] = field(default_factory=list)
    name: str = "notebook"
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
    poster = ChannelPoster(channel, Renderer())
    assert await poster(digest) == "chat ops-room: sent; chat #platform: sent"
    assert await poster(digest) == "chat ops-room: already_sent; chat #platform: already_sent"
    assert [recipient for recipient, _ in channel.written] == ["ops-room", "#platform"]
    assert channel.written[0][1] == Renderer().render(digest, "text")  # the channel's format, not Telegram's HTML
    pending = telegram.get("ops-room", window_key(window))
    assert pending is not None
    assert pending.status is DeliveryStatus.SENDING  # Telegram's delivery of that name was not touched

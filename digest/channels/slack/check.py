"""What `digest doctor` says of Slack: the token (``auth.test``) and each channel (``conversations.info``).

Nothing is posted.

``auth.test`` proves the token and names the workspace and the bot; ``conversations.info`` (scope ``channels:read``,
``groups:read`` for a private channel) says whether each configured channel exists, is not archived and has the bot
as a member — the three reasons a post would be refused for good. A token without that scope is said as such, not as
a failure: the post needs only ``chat:write``. Incoming webhooks cannot be asked anything without posting; the doctor
says so rather than calling them fine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from digest.channels.channel import DeliveryError
from digest.channels.retry import RetryPolicy
from digest.channels.slack.api import SlackApi

DOCTOR_RETRY = RetryPolicy(total_seconds=10.0, base_delay_seconds=0.5, max_delay_seconds=4.0)


@dataclass(frozen=True)
class SlackChannelCheck:
    """One configured channel: whether a post can go there, and what was found."""

    channel: str
    ok: bool
    said: str


@dataclass(frozen=True)
class SlackCheck:
    """The token and every configured channel."""

    who: str | None  # "bot digest in lab" once the token is accepted
    problem: str | None
    channels: tuple[SlackChannelCheck, ...] = ()

    @property
    def ok(self) -> bool:
        return self.problem is None and all(channel.ok for channel in self.channels)


async def check_slack(api: SlackApi, channel_ids: Sequence[str]) -> SlackCheck:
    """Ask ``auth.test`` and, per channel, ``conversations.info``; nothing is posted."""
    try:
        answer = await api.call("auth.test", {})
    except DeliveryError as exc:
        return SlackCheck(who=None, problem=str(exc))
    who = f"bot {answer.get('user', '?')} in {answer.get('team', '?')}"
    return SlackCheck(who=who, problem=None, channels=tuple([await _channel(api, one) for one in channel_ids]))


async def _channel(api: SlackApi, channel: str) -> SlackChannelCheck:
    if channel.startswith("#"):
        return SlackChannelCheck(channel, True, "a name: posts go there; the chart needs the channel's id (C…)")
    try:
        answer = await api.call("conversations.info", {"channel": channel}, form=True)
    except DeliveryError as exc:
        if "missing_scope" in str(exc):
            return SlackChannelCheck(channel, True, "not checked: the token lacks channels:read (posting needs none)")
        if "channel_not_found" in str(exc):
            return SlackChannelCheck(channel, False, "channel not found: a wrong id, or a private one without the bot")
        return SlackChannelCheck(channel, False, f"not readable: {exc}")
    given = answer.get("channel")
    found: dict[str, object] = given if isinstance(given, dict) else {}
    name = f"#{found.get('name')}" if found.get("name") else channel
    if found.get("is_archived"):
        return SlackChannelCheck(channel, False, f"{name} is archived")
    if found.get("is_member") is False:
        return SlackChannelCheck(channel, False, f"{name}: the bot is not a member (/invite it)")
    return SlackChannelCheck(channel, True, name)

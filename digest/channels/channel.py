"""The delivery contract every channel meets: what a post is, how it ends, and the `Channel` protocol.

A channel delivers a digest already rendered in its own format (Telegram: HTML) to each of its recipients, once per
digest key, across restarts and a second instance. Its recipients are text — a Telegram chat id ("-1001234", "@ops")
or any other channel's address — and the delivery state is keyed by (channel name, recipient, key), so a second
channel is one class beside `digest.channels.telegram.channel.TelegramChannel`, not a change to the state: it
posts through `digest.channels.once.ExactlyOnce` with its own `PartWriter`, and `digest.channels.dispatch.Dispatch`
gives it the scheduled posts.

Failures are sorted the way healthchecks sorts them: ``DeliveryError.permanent`` (blocked, chat not found: not
retried) against transient (429, timeouts: a later run retries), each said as a `PostResult` outcome.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from digest.channels.state import DeliveryState


class Outcome(StrEnum):
    """How one post ended."""

    SENT = "sent"
    ALREADY_SENT = "already_sent"  # sent before, by this or another instance
    BUSY = "busy"  # another live instance holds the delivery right now
    FAILED = "failed"  # transient: a later run retries it
    FAILED_PERMANENT = "failed_permanent"  # blocked, chat not found…: not retried


class DeliveryError(Exception):
    """A part could not be delivered; ``permanent`` says whether retrying later can help.

    ``unconfirmed``: the part may have arrived (earlier sends of it went unanswered) and is not sent again, so that a
    lost answer costs at most one repeat of a message and none of a chart.
    """

    def __init__(self, message: str, permanent: bool, unconfirmed: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.unconfirmed = unconfirmed


@dataclass(frozen=True)
class Photo:
    """A chart to attach after the digest's text."""

    png: bytes
    caption: str
    filename: str = "digest.png"


@dataclass(frozen=True)
class PostResult:
    """What happened to one (recipient, key) post; ``recipient`` is where it went (after a move, the new id)."""

    outcome: Outcome
    recipient: str
    message_ids: tuple[int, ...] = ()
    error: str | None = None


class Channel(Protocol):
    """A place digests are posted to, each digest once per recipient."""

    @property
    def name(self) -> str:
        """The channel's name in the delivery state and the logs ("telegram")."""
        ...

    @property
    def title(self) -> str:
        """How /status and the logs name its recipients ("Chat" -1001234, "Slack" #ops, "Webhook" ops)."""
        ...

    @property
    def format(self) -> str:
        """The renderer format its messages are written in ("html")."""
        ...

    @property
    def state(self) -> DeliveryState:
        """The delivery state its posts are claimed and recorded in (one file, rows keyed by the channel's name)."""
        ...

    @property
    def recipients(self) -> tuple[str, ...]:
        """Who the scheduled and ``--post`` digests go to."""
        ...

    async def post_once(
        self,
        recipient: str,
        key: str,
        message: Callable[[], Awaitable[str]],
        late: bool = False,
        photo: Callable[[], Awaitable[Photo | None]] | None = None,
    ) -> PostResult:
        """Post ``message()`` (and ``photo()`` after it) to ``recipient`` unless ``key`` already went there.

        ``message`` and ``photo`` are called only when the delivery is claimed and nothing of it is stored yet.
        Raises nothing for a delivery that failed: the outcome says so.
        """
        ...

"""Posting a digest to a Telegram chat so that it arrives, once, intact — or the failure is recorded and visible.

Transient failures (429 with ``retry_after``, timeouts, network errors, 5xx) are retried — ``retry_after`` honoured
exactly, the others with capped exponential backoff and jitter — inside a bounded total time; permanent ones (bot
blocked, chat not found, any other 400) are not retried, as healthchecks distinguishes them. A part whose HTML
Telegram refuses ("can't parse entities") is resent as plain text rather than lost. A group that became a
supergroup (``migrate_to_chat_id``) is followed, remembered and logged.

`Poster.post_once` wraps a delivery in the exactly-once protocol of `digest.state`: claim, compute, send, record.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from telegram import Bot, LinkPreviewOptions, Message
from telegram.constants import ParseMode
from telegram.error import BadRequest, ChatMigrated, Forbidden, InvalidToken, NetworkError, RetryAfter, TelegramError

from digest.state import DeliveryState, StateError
from digest.telegram_text import MAX_CAPTION, fit_utf16, plain_from_html, split_html

log = logging.getLogger(__name__)


class Outcome(StrEnum):
    """How one post ended."""

    SENT = "sent"
    ALREADY_SENT = "already_sent"  # sent before, by this or another instance
    BUSY = "busy"  # another live instance holds the delivery right now
    FAILED = "failed"  # transient: a later run retries it
    FAILED_PERMANENT = "failed_permanent"  # blocked, chat not found…: not retried


class DeliveryError(Exception):
    """A part could not be delivered; ``permanent`` says whether retrying later can help."""

    def __init__(self, message: str, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds of the retry loop of one message part."""

    total_seconds: float = 300.0
    base_delay_seconds: float = 1.0
    max_delay_seconds: float = 30.0
    jitter_ratio: float = 0.2


@dataclass(frozen=True)
class Photo:
    """A chart to attach after the digest's text."""

    png: bytes
    caption: str
    filename: str = "digest.png"


@dataclass(frozen=True)
class PostResult:
    """What happened to one (chat, key) post."""

    outcome: Outcome
    chat_id: int
    message_ids: tuple[int, ...] = ()
    error: str | None = None


def _seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class Pacer:
    """Keeps sends under Telegram's flood limits before Telegram has to say 429.

    Telegram's bot FAQ: about 30 messages per second overall and about one per second in a chat (short bursts
    tolerated). A digest of three parts to twenty chats must not arrive as sixty messages in the same second.
    """

    def __init__(self, per_second: float = 25.0, per_chat_interval: float = 1.0) -> None:
        self._interval = 1.0 / per_second
        self._per_chat_interval = per_chat_interval
        self._next_global = 0.0
        self._next_by_chat: dict[int, float] = {}
        self._lock = asyncio.Lock()

    async def wait_turn(self, chat_id: int) -> None:
        """Wait until a message to ``chat_id`` may leave; reserves the slot before sleeping."""
        async with self._lock:
            now = time.monotonic()
            start = max(now, self._next_global, self._next_by_chat.get(chat_id, 0.0))
            self._next_global = start + self._interval
            self._next_by_chat[chat_id] = start + self._per_chat_interval
        if start > now:
            await asyncio.sleep(start - now)


@dataclass
class Sender:
    """Sends the parts of one message with retries, paced under Telegram's limits."""

    bot: Bot
    state: DeliveryState | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    pacer: Pacer = field(default_factory=Pacer)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    random_unit: Callable[[], float] = random.random

    async def send(self, chat_id: int, html_message: str) -> tuple[int, list[int]]:
        """Send ``html_message`` split into valid parts; returns the final chat id and the message ids."""
        message_ids: list[int] = []
        for part in split_html(html_message):

            async def text(chat: int, as_html: bool, part: str = part) -> Message:
                return await self.bot.send_message(
                    chat_id=chat,
                    text=part if as_html else plain_from_html(part),
                    parse_mode=ParseMode.HTML if as_html else None,
                    link_preview_options=LinkPreviewOptions(is_disabled=True),
                )

            chat_id, message_id = await self._with_retries(chat_id, text)
            message_ids.append(message_id)
        return chat_id, message_ids

    async def send_photo(self, chat_id: int, photo: Photo) -> tuple[int, int]:
        """Send a PNG with its caption (cut to Telegram's 1,024 UTF-16 units), with the same retries."""
        caption = fit_utf16(photo.caption, MAX_CAPTION)

        async def upload(chat: int, _as_html: bool) -> Message:
            return await self.bot.send_photo(chat_id=chat, photo=photo.png, caption=caption, filename=photo.filename)

        return await self._with_retries(chat_id, upload)

    async def _with_retries(self, chat_id: int, call: Callable[[int, bool], Awaitable[Message]]) -> tuple[int, int]:
        started = time.monotonic()
        waited = 0.0  # the delays asked of self.sleep, so the budget holds whatever clock the sleep follows
        attempt = 0
        as_html = True
        while True:
            await self.pacer.wait_turn(chat_id)
            try:
                message = await call(chat_id, as_html)
                return chat_id, message.message_id
            except RetryAfter as exc:
                delay = _seconds(exc.retry_after)
                reason = f"429 retry after {delay:g} s"
            except ChatMigrated as exc:
                log.warning("chat %s became supergroup %s: following it", chat_id, exc.new_chat_id)
                if self.state is not None:
                    self.state.record_move(chat_id, exc.new_chat_id)
                chat_id = exc.new_chat_id
                continue
            except BadRequest as exc:
                if "can't parse entities" in exc.message.lower() and as_html:
                    log.warning(
                        "chat %s: Telegram refused the HTML (%s); resending the part as plain text",
                        chat_id,
                        exc.message,
                    )
                    as_html = False
                    continue
                raise DeliveryError(f"rejected by Telegram: {exc.message}", permanent=True) from None
            except (Forbidden, InvalidToken) as exc:
                raise DeliveryError(f"refused by Telegram: {exc.message}", permanent=True) from None
            except NetworkError as exc:  # includes TimedOut and 5xx answers
                delay = min(self.retry.max_delay_seconds, self.retry.base_delay_seconds * 2**attempt)
                delay += delay * self.retry.jitter_ratio * self.random_unit()
                reason = f"{type(exc).__name__}: {exc.message}"
            except TelegramError as exc:
                raise DeliveryError(f"Telegram error: {exc.message}", permanent=True) from None
            attempt += 1
            if max(time.monotonic() - started, waited) + delay > self.retry.total_seconds:
                raise DeliveryError(
                    f"gave up after {attempt} attempts in {self.retry.total_seconds:g} s ({reason})", permanent=False
                )
            log.info("chat %s: %s; retrying in %.1f s", chat_id, reason, delay)
            waited += delay
            await self.sleep(delay)


@dataclass
class Poster:
    """Exactly-once posting: claim the (chat, key) delivery, compute the message, send it, record the outcome."""

    sender: Sender
    state: DeliveryState
    lease_seconds: float = 900.0

    async def post_once(
        self,
        chat_id: int,
        key: str,
        message: Callable[[], Awaitable[str]],
        late: bool = False,
        photo: Callable[[], Awaitable[Photo | None]] | None = None,
    ) -> PostResult:
        """Post what ``message()`` returns to ``chat_id`` unless the delivery of ``key`` there already happened."""
        chat_id = self.state.current_chat(chat_id)
        if not self.state.claim(chat_id, key, self.lease_seconds):
            existing = self.state.get(chat_id, key)
            if existing is not None and existing.status == "sent":
                return PostResult(Outcome.ALREADY_SENT, chat_id)
            if existing is not None and existing.permanent:
                return PostResult(Outcome.FAILED_PERMANENT, chat_id, error=existing.error)
            return PostResult(Outcome.BUSY, chat_id)
        try:
            text = await message()
            final_chat, message_ids = await self.sender.send(chat_id, text)
        except DeliveryError as exc:
            log.error(
                "delivery of %s to chat %s failed (%s): %s",
                key,
                chat_id,
                "permanent" if exc.permanent else "will retry",
                exc,
            )
            self.state.mark_failed(chat_id, key, str(exc), permanent=exc.permanent)
            return PostResult(Outcome.FAILED_PERMANENT if exc.permanent else Outcome.FAILED, chat_id, error=str(exc))
        except Exception as exc:  # computing the message failed: record it so that it is retried and visible
            log.exception("delivery of %s to chat %s failed while preparing the message", key, chat_id)
            self.state.mark_failed(chat_id, key, f"internal error: {type(exc).__name__}", permanent=False)
            return PostResult(Outcome.FAILED, chat_id, error=f"internal error: {type(exc).__name__}")
        if photo is not None:
            final_chat = await self._attach(final_chat, key, photo, message_ids)
        if final_chat != chat_id:
            # The delivery happened under the new id; keep the record on the id it was claimed under.
            log.info("delivery of %s moved from chat %s to %s", key, chat_id, final_chat)
        try:
            self.state.mark_sent(chat_id, key, message_ids, late=late)
        except StateError:
            log.exception("delivery of %s to chat %s was sent but could not be recorded", key, chat_id)
        return PostResult(Outcome.SENT, final_chat, tuple(message_ids))

    async def _attach(
        self, chat_id: int, key: str, photo: Callable[[], Awaitable[Photo | None]], message_ids: list[int]
    ) -> int:
        """Send the chart after the text; its failure is logged, never turned into a failed delivery.

        The text is out: recording the delivery as failed would make the next attempt send the text again.
        """
        try:
            attachment = await photo()
            if attachment is None:
                return chat_id
            final_chat, photo_id = await self.sender.send_photo(chat_id, attachment)
        except Exception:  # the chart is a bonus; the digest itself was delivered
            log.exception("the chart of %s could not be sent to chat %s; the digest text was", key, chat_id)
            return chat_id
        message_ids.append(photo_id)
        return final_chat

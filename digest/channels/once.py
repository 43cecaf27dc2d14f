"""Exactly once, whatever the channel: claim a (recipient, key) delivery, store its parts, send those still owed.

Every channel posts through `ExactlyOnce` over the delivery state (`digest.channels.state`, one file for all
channels, rows keyed by channel, recipient and key); what differs between channels is only how one part is written
to one recipient — a `PartWriter` (Telegram's Bot API client, Slack's chat.postMessage, a signed webhook). So the
protocol that makes a day one post per recipient through retries, restarts and a second instance is written once:

- **claim**: an atomic insert-or-take-over under a lease, refused to everyone else while it lives — and refused to
  this process too while one of its own tasks works on it (the daily job and the recheck waking together after a
  pause or a clock step must not both send); the lease is renewed while the delivery is worked on, so a process
  killed mid-send leaves a claim another takes over when it runs out, and a stopped one (SIGTERM) releases it at once;
- **parts**: right after the first claim the digest's parts (its texts as the channel splits them, then the chart)
  are stored, and every later attempt sends only the parts not yet accepted, from the stored content, never from a
  recomputation (a recomputed digest could split differently, and a reader must never see "(1/2)" of one text and
  "(2/3)" of another);
- **unanswered sends**: each part's sends that may have arrived (the answer was lost) are counted in the state file,
  so a lost answer costs at most one repeat of a text and none of a chart (`SendGuard`).

Failures are a `PostResult`, never an exception: transient ones (429, timeouts) leave the delivery owed, permanent
ones (a chat not found, a revoked token) are recorded as such and not retried; a chart refused for good is noted on
a delivery whose text did arrive, which is then done. Only `StateError` (the state file itself failing) is raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from digest.channels.channel import DeliveryError, Outcome, Photo, PostResult
from digest.channels.state import DeliveryState, DeliveryStatus, Part, PartKind
from digest.pipeline.state import StateError

log = logging.getLogger(__name__)


class SendGuard(Protocol):
    """Counts the sends of one part that may have arrived, and says whether another may go."""

    async def begin(self) -> bool:
        """Whether one more send may go (counted as begun when it may)."""

    async def refused(self) -> None:
        """The last send did not arrive (the service answered so, or it never left)."""


class PartWriter(Protocol):
    """How one channel writes a delivery's parts to one recipient."""

    def texts(self, message: str) -> list[str]:
        """``message`` cut into the parts the service takes (each within its limits), in reading order."""
        ...

    async def send(self, address: str, part: Part, guard: SendGuard, reply_to: int | None = None) -> tuple[str, int]:
        """Send one stored part to ``address``: where it went (a recipient that moved: its new address) and its id.

        ``reply_to``: for the chart, the id of the delivery's first message, so that a service with replies shows the
        chart attached to its text (Telegram) whatever lands in the chat between them; others may ignore it.
        Raises `DeliveryError` (``permanent``, ``unconfirmed``) for a part that was not delivered.
        """
        ...


@dataclass
class PartSends:
    """`SendGuard` of one stored part: its unanswered sends counted in the state file, so a restart knows them."""

    state: DeliveryState
    recipient: str
    key: str
    part: Part

    async def begin(self) -> bool:
        # A chart is a bonus: never risk showing it twice. A text part may be repeated once, not lost for a lost answer.
        most = 1 if self.part.kind is PartKind.PHOTO else 2
        return await asyncio.to_thread(self.state.begin_part_send, self.recipient, self.key, self.part.index, most)

    async def refused(self) -> None:
        await asyncio.to_thread(self.state.part_refused, self.recipient, self.key, self.part.index)


@dataclass
class ExactlyOnce:
    """Exactly-once posting over one channel's delivery state: claim, store the parts, send those owed, record.

    Every state file access runs in a worker thread (`asyncio.to_thread`): a locked or slow file delays this
    delivery, never the event loop that answers /healthz and the chats.
    """

    state: DeliveryState
    lease_seconds: float = 60.0
    # The deliveries this process is working on: its own claim would let it take one twice (same owner).
    _working: set[tuple[str, str]] = field(default_factory=set)

    async def post_once(
        self,
        address: str,
        key: str,
        message: Callable[[], Awaitable[str]],
        writer: PartWriter,
        late: bool = False,
        photo: Callable[[], Awaitable[Photo | None]] | None = None,
    ) -> PostResult:
        """Post what ``message()`` returns (and ``photo()`` after it) to ``address``, each part once, by ``writer``.

        ``message`` and ``photo`` are called only when no earlier attempt stored the delivery's parts. A recipient
        that moved (a Telegram group that became a supergroup) is posted at its new address, and a delivery sent
        under its old one counts as sent.
        """
        state = self.state
        current = await asyncio.to_thread(state.current, address)
        earlier_ids = await asyncio.to_thread(state.earlier_ids, current)
        for earlier in earlier_ids:
            # Delivered before the move: the record stays on the address it was claimed under.
            delivered = await asyncio.to_thread(state.get, earlier, key)
            if delivered is not None and delivered.status == DeliveryStatus.SENT:
                return PostResult(Outcome.ALREADY_SENT, current)
        if (current, key) in self._working:
            return PostResult(Outcome.BUSY, current)
        # Marked before the claim is awaited: a second task of this process checking meanwhile sees it busy.
        self._working.add((current, key))
        try:
            if not await asyncio.to_thread(state.claim, current, key, self.lease_seconds):
                existing = await asyncio.to_thread(state.get, current, key)
                if existing is not None and existing.status == "sent":
                    return PostResult(Outcome.ALREADY_SENT, current)
                if existing is not None and existing.permanent:
                    return PostResult(Outcome.FAILED_PERMANENT, current, error=existing.error)
                return PostResult(Outcome.BUSY, current)
            renewal = asyncio.create_task(self._renew(current, key))
            try:
                return await self._claimed(current, key, message, writer, late, photo, earlier_ids)
            except asyncio.CancelledError:
                # Stopped (SIGTERM): the claim is released at once, so the next run or instance need not wait for it.
                await asyncio.shield(self._release(current, key, "interrupted: the process stopped"))
                raise
            finally:
                renewal.cancel()
        finally:
            self._working.discard((current, key))

    async def _claimed(
        self,
        address: str,
        key: str,
        message: Callable[[], Awaitable[str]],
        writer: PartWriter,
        late: bool,
        photo: Callable[[], Awaitable[Photo | None]] | None,
        earlier_ids: list[str],
    ) -> PostResult:
        state = self.state
        try:
            parts = await asyncio.to_thread(state.parts, address, key) or await asyncio.to_thread(
                state.adopt_parts, address, key, earlier_ids
            )
            if not parts:
                composed = await self._compose(address, key, message, writer, photo)
                parts = await asyncio.to_thread(state.store_parts, address, key, composed)
        except StateError:
            raise
        except Exception as exc:  # computing the message failed: record it so that it is retried and visible
            log.exception("delivery of %s to %s failed while preparing the message", key, address)
            await asyncio.to_thread(state.mark_failed, address, key, f"internal error: {type(exc).__name__}", False)
            return PostResult(Outcome.FAILED, address, error=f"internal error: {type(exc).__name__}")
        return await self._send_owed(address, key, parts, writer, late)

    async def _renew(self, address: str, key: str) -> None:
        """Keep the claim alive while this process works on it (a third of the lease between renewals)."""
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await asyncio.to_thread(self.state.renew, address, key, self.lease_seconds)
            except StateError as exc:
                log.error("the claim of %s for %s could not be renewed: %s", key, address, exc)

    async def _release(self, address: str, key: str, reason: str) -> None:
        try:
            await asyncio.to_thread(self.state.mark_failed, address, key, reason, False)
        except StateError as exc:
            log.error("the claim of %s for %s could not be released: %s", key, address, exc)

    async def _compose(
        self,
        address: str,
        key: str,
        message: Callable[[], Awaitable[str]],
        writer: PartWriter,
        photo: Callable[[], Awaitable[Photo | None]] | None,
    ) -> list[Part]:
        """The delivery's parts: the digest's messages, marked "(k/n)" when several, then the chart if one was drawn."""
        texts = writer.texts(await message())
        parts = [Part(index, PartKind.TEXT, text) for index, text in enumerate(texts, start=1)]
        attachment: Photo | None = None
        if photo is not None:
            try:
                attachment = await photo()
            except Exception:  # the chart is a bonus: the digest goes out without it
                log.exception("the chart of %s could not be drawn for %s; posting the digest without it", key, address)
        if attachment is not None:
            parts.append(Part(len(parts) + 1, PartKind.PHOTO, attachment.caption, attachment.png, attachment.filename))
        return parts

    async def _send_owed(self, address: str, key: str, parts: list[Part], writer: PartWriter, late: bool) -> PostResult:
        """Send the parts the service has not accepted yet, in order, recording each; then record the delivery."""
        texts = sum(part.kind is PartKind.TEXT for part in parts)
        current = address
        message_ids: list[int] = []
        notes: list[str] = []
        state = self.state
        # The first message's id, once known (sent now or by an earlier attempt): the chart replies to it.
        first: int | None = None
        for part in parts:
            if part.message_id is not None:
                message_ids.append(part.message_id)
                if first is None and part.kind is PartKind.TEXT and part.message_id:
                    first = part.message_id
                continue
            label = part_label(part, texts)
            reply_to = first if part.kind is PartKind.PHOTO else None
            try:
                current, message_id = await writer.send(current, part, PartSends(state, address, key, part), reply_to)
            except DeliveryError as exc:
                if exc.unconfirmed:
                    log.warning("%s of %s for %s %s", label, key, address, exc)
                    notes.append(f"{label} not confirmed: {exc}")
                    continue
                if part.kind is PartKind.PHOTO and exc.permanent:
                    log.error(
                        "the chart of %s was refused by %s (%s); the digest itself was delivered", key, address, exc
                    )
                    notes.append(f"chart not delivered: {exc}")
                    continue
                error = f"{label}: {exc}"
                log.error(
                    "delivery of %s to %s failed (%s): %s",
                    key,
                    address,
                    "permanent" if exc.permanent else "will retry",
                    error,
                )
                await asyncio.to_thread(state.mark_failed, address, key, error, exc.permanent)
                outcome = Outcome.FAILED_PERMANENT if exc.permanent else Outcome.FAILED
                return PostResult(outcome, address, tuple(message_ids), error=error)
            except StateError:
                raise
            except Exception as exc:  # e.g. the state file failing while a chat migration is recorded
                log.exception("delivery of %s to %s failed while sending %s", key, address, label)
                error = f"{label}: internal error: {type(exc).__name__}"
                await asyncio.to_thread(state.mark_failed, address, key, error, False)
                return PostResult(Outcome.FAILED, address, tuple(message_ids), error=error)
            message_ids.append(message_id)
            if first is None and part.kind is PartKind.TEXT and message_id:
                first = message_id
            try:
                await asyncio.to_thread(state.mark_part_sent, address, key, part.index, message_id)
            except StateError as exc:
                # Sent, not recorded: its send stays counted as unanswered, so a later attempt repeats it once at
                # most (a text part) or never (the chart).
                log.error("%s of %s reached %s but could not be recorded: %s", label, key, current, exc)
        if current != address:
            # The delivery happened under the new address; keep the record on the one it was claimed under.
            log.info("delivery of %s moved from %s to %s", key, address, current)
        note = "; ".join(notes) or None
        try:
            await asyncio.to_thread(state.mark_sent, address, key, message_ids, late, None, note)
        except StateError:
            log.exception("delivery of %s to %s was sent but could not be recorded", key, address)
        return PostResult(Outcome.SENT, current, tuple(message_ids), error=note)


def part_label(part: Part, texts: int) -> str:
    """How a part is named in errors: "part 2/3", "the message" (a digest in one part) or "the chart"."""
    if part.kind is PartKind.PHOTO:
        return "the chart"
    return f"part {part.index}/{texts}" if texts > 1 else "the message"


@dataclass(frozen=True)
class PartsChannel:
    """A `digest.channels.channel.Channel` that is `ExactlyOnce` over one service's `PartWriter`.

    What Slack (bot token or webhooks), Mattermost (the same) and the signed webhook are: their name and title, the
    renderer format their writer converts from, their recipients, and how a writer is made for a delivery key. The
    chart goes along only where ``chart`` (a webhook cannot upload one; a bot token can, unless turned off).
    """

    name: str
    title: str
    once: ExactlyOnce
    recipients: tuple[str, ...]
    writer: Callable[[str], PartWriter]  # delivery key → the writer of its parts
    format: str = "html"
    chart: bool = False

    @property
    def state(self) -> DeliveryState:
        return self.once.state

    async def post_once(
        self,
        recipient: str,
        key: str,
        message: Callable[[], Awaitable[str]],
        late: bool = False,
        photo: Callable[[], Awaitable[Photo | None]] | None = None,
    ) -> PostResult:
        """Post ``message()`` (and the chart, where this channel takes one) to ``recipient`` unless ``key`` went."""
        chart = photo if self.chart else None
        return await self.once.post_once(recipient, key, message, self.writer(key), late=late, photo=chart)

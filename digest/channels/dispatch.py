"""The delivery seam: each scheduled digest to every recipient of every channel, once per recipient and day.

`Dispatch` owns what no one chat service should: the schedule (`digest.channels.schedule.Schedule`: the daily post,
the week at a glance, the catch-up after downtime, all one idempotent round), the delivery keys and windows, the
rounds' bookkeeping (what is in flight, each recipient's last outcome, the state file's trouble) and the look again
when another process holds a claim. Each channel — Telegram, Slack, Mattermost, a webhook — is a
`digest.channels.channel.Channel` behind it, posting each part exactly once through `digest.channels.once`.

A round is idempotent: it posts the digest of the most recent scheduled moment to every recipient that has not had
it, if that moment is within the grace — so the noon post, the late post after downtime, the retry of a failed
delivery and a restart at 12:01 are one code path, and the delivery state's claim makes a second instance (or the
CronJob) harmless. Whoever runs the clock calls `post_all_due`: the Telegram bot's job queue, or the scheduler
`digest serve` runs when no Telegram bot is configured. The digest is rendered once per format, whatever the number
of recipients (the `Digests` it is handed computes each window once).

Each recipient's delivery runs on its own task: one whose sends stall or keep failing never delays another's, on the
same channel or another.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from digest.channels.channel import Channel, Outcome, Photo, PostResult
from digest.channels.schedule import Schedule
from digest.channels.state import Delivery
from digest.checks.contract import Window
from digest.pipeline.state import StateError

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
# One recipient of one channel: (the channel's name, the recipient as the delivery state keys it).
Address = tuple[str, str]


def utc_now() -> datetime:
    """The rounds' clock: which post is due (tests hand the dispatch another)."""
    return datetime.now(UTC)


class Digests(Protocol):
    """A window's or a week's digest in a channel's format, and its chart (each computed once however many ask)."""

    async def text(self, window: Window, fmt: str) -> str: ...

    async def photo(self, window: Window) -> Photo | None: ...

    async def week_text(self, year: int, week: int, fmt: str) -> str: ...

    async def week_photo(self, year: int, week: int) -> Photo | None: ...


class DeliveryHooks(Protocol):
    """What runs around the rounds: metrics per post, the state file's trouble, the heartbeat after a delivery."""

    def posted(self, channel: str, recipient: str, result: PostResult) -> None:
        """One scheduled post ended (sent, already sent, failed…)."""

    def state_failed(self, error: StateError) -> None:
        """The state file failed a scheduled post (locked, full, replaced)."""

    async def delivered(self) -> None:
        """A scheduled round sent at least one digest."""


class NoDeliveryHooks:
    """Rounds with nothing around them."""

    def posted(self, channel: str, recipient: str, result: PostResult) -> None:
        return None

    def state_failed(self, error: StateError) -> None:
        return None

    async def delivered(self) -> None:
        return None


@dataclass
class Dispatch:
    """The scheduled rounds over every channel: which post is due, to whom, once each; what happened."""

    schedule: Schedule
    digests: Digests
    channels: tuple[Channel, ...] = ()
    hooks: DeliveryHooks = field(default_factory=NoDeliveryHooks)
    clock: Clock = utc_now
    # How the runner looks again in a few seconds (its scheduler's one-off job); None: at the next recheck only.
    look_again: Callable[[float], None] | None = None
    last_results: dict[Address, PostResult] = field(default_factory=dict)
    # The scheduled deliveries under way: address → (key, when it started, monotonic), for the status.
    in_flight: dict[Address, tuple[str, float]] = field(default_factory=dict)
    # The state file's last trouble in a scheduled post (cleared by the next post that reads it).
    state_problem: StateError | None = None
    stopping: bool = False
    _deliveries: set[asyncio.Task[PostResult]] = field(default_factory=set)

    async def post_all_due(self) -> list[PostResult]:
        """The scheduled round: the daily post, then (on its day) the weekly one; each exactly once per recipient."""
        return [*await self.post_due(), *await self.post_week_due()]

    async def post_due(self) -> list[PostResult]:
        """Post the most recent scheduled day to every recipient that has not had it, within the grace."""
        if self.stopping:
            return []
        due = self.schedule.daily_due(self.clock())
        if due is None:
            return []
        scheduled, late = due
        window = scheduled.window

        def text(fmt: str) -> Callable[[], Awaitable[str]]:
            return lambda: self.digests.text(window, fmt)

        return await self.post_everywhere(scheduled.key, text, lambda: self.digests.photo(window), late)

    async def post_week_due(self) -> list[PostResult]:
        """On the weekly post's day, post the last complete week at a glance to every recipient that has not had it.

        The same exactly-once path as the daily post, keyed by the ISO week, within the same grace after the
        scheduled moment; nothing on other days or when the weekly post is off.
        """
        if self.stopping:
            return []
        due = self.schedule.weekly_due(self.clock())
        if due is None:
            return []
        scheduled, late = due
        year, week = scheduled.year, scheduled.week

        def text(fmt: str) -> Callable[[], Awaitable[str]]:
            return lambda: self.digests.week_text(year, week, fmt)

        return await self.post_everywhere(scheduled.key, text, lambda: self.digests.week_photo(year, week), late)

    async def post_everywhere(
        self,
        key: str,
        text: Callable[[str], Callable[[], Awaitable[str]]],
        photo: Callable[[], Awaitable[Photo | None]],
        late: bool,
    ) -> list[PostResult]:
        """Post ``key`` once to every recipient of every channel, in its channel's format (``text(format)``).

        Each outcome is logged, kept for the status and handed to the hooks; a claim held by another process is
        looked at again when its lease runs out.
        """

        async def one(channel: Channel, recipient: str) -> PostResult:
            address = (channel.name, recipient)
            self.in_flight[address] = (key, time.monotonic())
            try:
                result = await channel.post_once(recipient, key, text(channel.format), late=late, photo=photo)
            except StateError as exc:
                log.error("cannot post %s to %s %s: %s", key, channel.name, recipient, exc)
                self.state_problem = exc
                self.hooks.state_failed(exc)
                result = PostResult(Outcome.FAILED, recipient, error=str(exc))
            else:
                self.state_problem = None
            finally:
                self.in_flight.pop(address, None)
            if result.outcome is not Outcome.ALREADY_SENT:
                log.info(
                    "post %s to %s %s: %s%s",
                    key,
                    channel.name,
                    recipient,
                    result.outcome.value,
                    " (late)" if late else "",
                )
            self.last_results[address] = result
            self.hooks.posted(channel.name, recipient, result)
            return result

        addresses = [(channel, recipient) for channel in self.channels for recipient in channel.recipients]
        tasks = [asyncio.create_task(one(channel, recipient)) for channel, recipient in addresses]
        self._deliveries.update(tasks)
        try:
            ended = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self._deliveries.difference_update(tasks)
        results: list[PostResult] = []
        for (_, recipient), outcome in zip(addresses, ended, strict=True):
            if isinstance(outcome, asyncio.CancelledError):
                # `stop` cancelled it (the claim is released): the round ends here, and the stop is said in a line
                # rather than as the scheduler's traceback of a cancelled job.
                results.append(PostResult(Outcome.FAILED, recipient, error="interrupted: the process stopped"))
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                results.append(outcome)
        busy = [
            (channel, result.recipient)
            for (channel, _), result in zip(addresses, results, strict=True)
            if result.outcome is Outcome.BUSY
        ]
        if busy:
            await self._look_again_when_free(key, busy)
        if any(result.outcome is Outcome.SENT for result in results):
            await self.hooks.delivered()
        return results

    async def _look_again_when_free(self, key: str, busy: list[tuple[Channel, str]]) -> None:
        """Run the round again just after the claims on ``key`` held elsewhere run out.

        A process killed mid-post leaves its claim for its lease (60 s): the next look comes then, so the post is
        taken over within about a minute of the kill rather than at the next five-minute recheck.
        """
        if self.look_again is None or self.stopping:
            return
        try:
            held = await asyncio.to_thread(lambda: [channel.state.get(one, key) for channel, one in busy])
        except StateError as exc:
            log.warning("the claims on %s could not be read: the next recheck looks again (%s)", key, exc)
            return
        ends = [delivery.lease_until for delivery in held if delivery is not None and delivery.status == "sending"]
        if not ends:
            return
        # The lease is written in wall-clock seconds (`DeliveryState.claim`), so it is compared with the wall clock.
        delay = max(0.0, max(ends) - time.time()) + 1.0
        log.info("%s is held by another run: looking again in %.0f s, when its claim runs out", key, delay)
        self.look_again(delay)

    def stop(self) -> int:
        """No new rounds; the deliveries in flight are cancelled (their claims released). How many there were."""
        self.stopping = True
        running = [task for task in self._deliveries if not task.done()]
        for task in running:
            task.cancel()
        return len(running)

    async def status_lines(self, now: datetime) -> list[str]:
        """One line per recipient: its last daily post (sent, late, failed and why), or what is sending now."""
        zone = self.schedule.zone
        lines: list[str] = []
        for channel in self.channels:
            for recipient in channel.recipients:
                who = f"{channel.title} {recipient}"
                if (channel.name, recipient) in self.in_flight:
                    key, since = self.in_flight[(channel.name, recipient)]
                    lines.append(f"{who}: sending {key} for {time.monotonic() - since:.0f} s")
                    continue
                try:
                    deliveries = await asyncio.to_thread(_latest, channel, recipient)
                except StateError as exc:
                    lines.append(f"{who}: state unreadable ({exc})")
                    continue
                daily = [delivery for delivery in deliveries if delivery.key.startswith("daily:")]
                if not daily:
                    lines.append(f"{who}: nothing posted yet")
                    continue
                last = daily[0]
                when = datetime.fromtimestamp(last.sent_at or last.updated_at, tz=zone)
                if last.status == "sent":
                    lines.append(f"{who}: {last.key} sent {when:%m-%d %H:%M}{' (late)' if last.late else ''}")
                elif last.status == "sending":
                    lines.append(f"{who}: {last.key} being sent by another run since {when:%H:%M}")
                else:
                    kind = "failed for good" if last.permanent else "failed, will retry"
                    why = last.error or "no reason recorded"
                    lines.append(f"{who}: {last.key} {kind} after {last.attempts} attempt(s): {why}")
        if self.state_problem is not None:
            lines.append(f"State file: the last post failed on it: {self.state_problem}")
        return lines


def _latest(channel: Channel, recipient: str) -> list[Delivery]:
    """The recipient's latest deliveries (blocking: SQLite; called off the event loop)."""
    state = channel.state
    return state.latest(state.current(recipient))

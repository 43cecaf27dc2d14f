"""The Telegram bot `digest serve` runs: the noon digest exactly once, `/digest` on demand, `/status`, `/help`.

One python-telegram-bot Application; its JobQueue (APScheduler 3 inside, no second scheduler) runs `post_due` (and
`post_week_due`, the week at a glance on ``DIGEST_WEEKLY_POST``'s day) at ``DIGEST_POST_AT`` in ``DIGEST_TIMEZONE``,
once at start-up and every few minutes. `post_due` is idempotent: it
posts the digest of the most recent scheduled moment to every chat that has not had it, if that moment is within
the grace period — so the noon post, the late post after downtime, the retry of a failed delivery and a restart at
12:01 are one code path, and the SQLite claim makes a second instance harmless.

The noon digest covers the 24 h ending at the scheduled moment (not at the moment it is sent), so a late post says
exactly what the on-time one would have said.

Only the allowlisted chats (and admin users) get answers; any other chat gets one short, rate-limited refusal,
nothing is computed, and the attempt is logged with its chat id.

`/digest` has a per-chat burst allowance (`CommandAllowance`): a few digests a minute are answered at once, the next
few are queued and answered when the allowance frees a slot (the asker is told when), and only a flood beyond that is
turned away. Usage errors and refused chats never use the allowance, so a typo does not make anyone wait.

The bot sits in the channels' room, below the app: what it needs from above is handed to it. `BotSettings` is the
view of the settings it reads; `Digests` computes a window's HTML and chart (the app's single-flight service);
`BotHooks` is what the app does around it — the health server and metrics, the heartbeat after a post, the sources'
lines of `/status`. `digest.app.bot` builds all three from the settings.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from datetime import time as time_of_day
from typing import Any, Protocol, TypeVar
from zoneinfo import ZoneInfo

from telegram import BotCommand, InlineKeyboardMarkup, Message, Update
from telegram.constants import ChatAction
from telegram.error import TelegramError
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    JobQueue,
    MessageHandler,
    filters,
)

from digest.channels.channel import Channel, Photo, PostResult
from digest.channels.dispatch import DeliveryHooks, Digests, Dispatch, NoDeliveryHooks
from digest.channels.schedule import Schedule, scheduled_day_of
from digest.channels.state import TELEGRAM, DeliveryState
from digest.channels.telegram.allowance import CommandAllowance
from digest.channels.telegram.buttons import MUTE_FOR, button_key, digest_buttons, parse_action, verified
from digest.channels.telegram.channel import TelegramChannel
from digest.channels.telegram.polling import PollHealth, PollingRequest
from digest.channels.telegram.sender import (
    BotApiRequest,
    ChatId,
    Poster,
    Sender,
    chat_of,
    recipient,
    reply_parameters,
)
from digest.channels.telegram.text import MAX_TEXT, fit_utf16
from digest.checks.contract import Window
from digest.pipeline.state import StateError
from digest.pipeline.week import iso_week, last_complete_week, parse_iso_week, week_days
from digest.pipeline.window import (
    WindowError,
    as_asked,
    day_window,
    last_window,
    parse_date,
    parse_duration,
)

log = logging.getLogger(__name__)

USAGE = (
    "Usage: /digest [YYYY-MM-DD | yesterday | 6h | week [YYYY-Www]] — a day, the last hours (up to 7d) or a week at a "
    "glance; no argument: last 24h."
)
HELP = (
    "I post the cluster's health digest every day and answer:\n"
    "/digest — the last 24 h\n"
    "/digest 2026-07-20 — that calendar day\n"
    "/digest yesterday — yesterday\n"
    "/digest 6h — the last 6 hours (up to 7d)\n"
    "/digest week — last week at a glance (or /digest week 2026-W33)\n"
    "/status — last posts, failures, sources, next post\n"
    "/ack error_lines:shop/api 7d why — a finding you own: one line, no point lost, until it expires or gets worse\n"
    "/acks — what is acked; /unack error_lines:shop/api ends one\n"
    "/help — this message\n"
    "\n"
    "The score starts at 10; each problem found takes points off (an error flood, an OOM kill, conntrack filling, "
    "proxy errors). OK: nothing cost points. WARNING / CRITICAL: what cost points is listed with its evidence. "
    "UNKNOWN: something could not be checked (a backend down, an exporter or logs missing): the digest never says "
    'OK about what it could not see, and "not seen: …" names what was missing.\n'
    "Terms: UH — the proxy found no healthy backend (the service had no ready pod); UC — the backend closed a kept-"
    "alive connection; UF — connecting to the backend failed; OOM — a container killed for using more memory "
    "than its limit; conntrack — the kernel's connection table, full means dropped connections."
)
COMMANDS = [
    BotCommand("digest", "Health digest: last 24h, a date, yesterday or e.g. 6h"),
    BotCommand("status", "Last posts, failures, sources and next post time"),
    BotCommand("ack", "Ack a finding you own: /ack check[:subject] [7d] [reason]"),
    BotCommand("acks", "What is acked, by whom, until when"),
    BotCommand("help", "How to use this bot"),
]
_REFUSAL = "This bot only answers the chats it is configured for."
_REFUSAL_EVERY_SECONDS = 3600.0
_RECHECK_EVERY_SECONDS = 300.0
# python-telegram-bot reads first=0 as "not given" (one interval from now); a small positive delay means "at start".
_FIRST_CHECK_SECONDS = 0.5
_RETRY_JOB = "claim-retry"
# APScheduler drops a run that starts more than 1 s late by default; a late post is still owed, so never drop.
_LATE_OK = {"misfire_grace_time": None, "coalesce": True}

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class BotSettings:
    """What the bot reads of the settings (built once by the app from DIGEST_* and handed down)."""

    cluster: str
    zone: ZoneInfo
    post_at: str  # "HH:MM", local to ``zone``
    late_grace_hours: float
    chat_ids: tuple[ChatId, ...]
    # The forum topic (message_thread_id) a chat's scheduled digests go to; a chat not named: the chat itself.
    topics: Mapping[ChatId, int] = field(default_factory=dict)
    weekly_on: int | None = None  # the weekday (Monday 0) of the weekly post at ``post_at``; None: no weekly post
    admin_ids: frozenset[int] = frozenset()
    command_burst: int = 3
    command_burst_window_seconds: float = 60.0
    api_url: str = "https://api.telegram.org"
    computing_notice_seconds: float = 3.0

    @property
    def post_time(self) -> time_of_day:
        """The daily post time, in ``zone``."""
        return self.wall_post_time.replace(tzinfo=self.zone)

    @property
    def schedule(self) -> Schedule:
        """When the scheduled posts fall."""
        return Schedule(self.zone, self.wall_post_time, timedelta(hours=self.late_grace_hours), self.weekly_on)

    @property
    def wall_post_time(self) -> time_of_day:
        """The daily post time as the zone's clocks show it (no offset: a wall time, which DST may skip or repeat)."""
        hours, minutes = (int(part) for part in self.post_at.split(":"))
        return time_of_day(hours, minutes)


class BotHooks(DeliveryHooks, Protocol):
    """What the app does around the bot: its health endpoint and metrics, the heartbeat, the sources' status."""

    async def started(self, ready: Callable[[], bool], why: Callable[[], str | None]) -> None:
        """The application is up; ``ready`` says whether updates arrive and the scheduler runs, ``why`` why not."""

    async def stopped(self) -> None:
        """The application is shutting down."""

    async def status_lines(self, now: datetime) -> list[str]:
        """The lines /status adds after the posts: the sources' health."""


class NoHooks(NoDeliveryHooks):
    """A bot with nothing around it: no health server, no metrics, no heartbeat, no sources' lines."""

    async def started(self, ready: Callable[[], bool], why: Callable[[], str | None]) -> None:
        return None

    async def stopped(self) -> None:
        return None

    async def status_lines(self, now: datetime) -> list[str]:
        return []


def utc_now() -> datetime:
    """The bot's clock: the scheduler's and the commands' "now" (tests hand the bot another)."""
    return datetime.now(UTC)


def parse_week_arguments(arguments: list[str], now: datetime, zone: ZoneInfo) -> tuple[int, int]:
    """The ISO week `/digest week [YYYY-Www]` asks for (by default the last complete one), if it is over."""
    if len(arguments) > 1:
        raise WindowError("one week at most")
    today = now.astimezone(zone).date()
    year, week = parse_iso_week(arguments[0]) if arguments else last_complete_week(today)
    last = week_days(year, week)[-1]
    if last >= today:
        raise WindowError(f"week {iso_week(year, week)} is not over yet: its last day is {last}")
    return year, week


def parse_digest_arguments(arguments: list[str], now: datetime, zone: ZoneInfo) -> Window:
    """The window a /digest command asks for; `WindowError` (→ usage reply) for anything else."""
    # "now" rounded down to the minute: requests in the same minute share one window, hence one computation.
    minute = now.astimezone(UTC).replace(second=0, microsecond=0)
    if len(arguments) > 1:
        raise WindowError("one argument at most")
    if not arguments:
        return last_window(timedelta(hours=24), minute, zone)
    argument = arguments[0].strip().lower()
    if argument == "yesterday":
        return day_window(minute.astimezone(zone).date() - timedelta(days=1), zone)
    if argument[:1].isdigit() and "-" in argument:
        day = parse_date(argument)
        if day > minute.astimezone(zone).date():
            raise WindowError(f"{day} has not happened yet")
        return as_asked(day_window(day, zone), minute)
    return last_window(parse_duration(argument), minute, zone)


class AckDesk(Protocol):
    """Acks made, ended and listed for the chat (`digest.app.acks.AckDesk`): each answer one plain text."""

    async def ack(self, arguments: Sequence[str], by: str, now: datetime) -> str: ...

    async def unack(self, arguments: Sequence[str], now: datetime) -> str: ...

    async def listing(self, now: datetime) -> str: ...


@dataclass
class DigestBot:
    """The bot's behaviour, independent of how updates arrive (polling or webhook)."""

    settings: BotSettings
    state: DeliveryState
    digests: Digests
    hooks: BotHooks = field(default_factory=NoHooks)
    clock: Clock = utc_now
    poster: Poster | None = None
    # /ack, /unack and /acks (None: the bot answers that acks are not kept here).
    acks: AckDesk | None = None
    # The checks a window's digest found something in and no ack holds: a mute button each (None: no mutes). Asked
    # once the window's text is made, of the digest it was made from.
    mutes: Callable[[Window], Awaitable[list[str]]] | None = None
    # The key the buttons' data is signed with (`build_application` derives it from the token; empty: no buttons).
    button_key: bytes = b""
    # The channels posted to beside this bot's chats (a webhook…), opened when the application starts and closed
    # when it stops: the same rounds, each recipient once.
    more_channels: Callable[[], AbstractAsyncContextManager[tuple[Channel, ...]]] | None = None
    _more_opened: AsyncExitStack | None = None
    allowance: CommandAllowance | None = None
    _refused_at: dict[int, float] = field(default_factory=dict)
    _queued: set[asyncio.Task[None]] = field(default_factory=set)
    _answer_locks: dict[int, asyncio.Lock] = field(default_factory=dict)
    _send_locks: dict[int, asyncio.Lock] = field(default_factory=dict)
    # The ids configured chats have now (a group that became a supergroup), read from the delivery state's moves.
    _followed: frozenset[int] = frozenset()
    # What the long poll says (getUpdates' own answers).
    polling: PollHealth = field(default_factory=PollHealth)
    # The application's scheduler (set by `build_application`): a claim held by another process is looked at again
    # when its lease runs out, not at the next recheck five minutes later.
    job_queue: JobQueue[Any] | None = None
    # The scheduled rounds over this bot's chats and ``channels`` (its channels are set by `build_application`).
    dispatch: Dispatch = field(init=False)

    def __post_init__(self) -> None:
        self.dispatch = Dispatch(
            schedule=self.settings.schedule,
            digests=self.digests,
            hooks=self.hooks,
            clock=self.clock,
            look_again=self._look_again,
        )

    @property
    def last_results(self) -> dict[ChatId, PostResult]:
        """Each chat's last scheduled post."""
        return {
            chat_of(recipient): result
            for (channel, recipient), result in self.dispatch.last_results.items()
            if channel == TELEGRAM
        }

    @property
    def in_flight(self) -> dict[ChatId, tuple[str, float]]:
        """The chats' scheduled deliveries under way: chat → (key, when it started, monotonic)."""
        return {
            chat_of(recipient): started
            for (channel, recipient), started in self.dispatch.in_flight.items()
            if channel == TELEGRAM
        }

    @property
    def state_problem(self) -> StateError | None:
        """The state file's last trouble in a scheduled post."""
        return self.dispatch.state_problem

    @property
    def stopping(self) -> bool:
        """Whether a stop was asked (no new rounds, no new answers)."""
        return self.dispatch.stopping

    @property
    def _poster(self) -> Poster:
        if self.poster is None:
            raise RuntimeError("the bot's poster is set when its application is built")
        return self.poster

    def health_problem(self, application: Application[Any, Any, Any, Any, Any, Any]) -> str | None:
        """Why the bot cannot make the noon post or hear a command now, or None while it can."""
        updater = application.updater
        job_queue = application.job_queue
        if not application.running:
            return "the application is not running"
        if updater is None or not updater.running:
            return "no updates arrive: polling (or the webhook) is not running"
        if job_queue is None or not job_queue.scheduler.running:
            return "the scheduler is not running"
        problem = self.polling.problem()
        if problem is not None:
            return problem
        if self.state_problem is not None and self.state_problem.replaced:
            return str(self.state_problem)
        return None

    def health_reason(self, application: Application[Any, Any, Any, Any, Any, Any]) -> str | None:
        """What /healthz says beside its status: the problem, else a degradation, else nothing."""
        problem = self.health_problem(application)
        if problem is not None:
            return problem
        degraded = self.degraded()
        return None if degraded is None else f"degraded: {degraded}"

    def degraded(self) -> str | None:
        """A trouble that does not stop the bot but is worth seeing: the state file failing a post (locked, full)."""
        return None if self.state_problem is None else str(self.state_problem)

    def digest_chat(self, chat_id: int) -> bool:
        """Whether ``chat_id`` is a configured chat, or the supergroup one of them became."""
        return chat_id in self.settings.chat_ids or chat_id in self._followed

    def allowed(self, update: Update) -> bool:
        """Whether the update comes from a digest chat or an admin user."""
        chat = update.effective_chat
        user = update.effective_user
        if chat is not None and self.digest_chat(chat.id):
            return True
        return user is not None and user.id in self.settings.admin_ids

    def answers_here(self, update: Update) -> bool:
        """Whether a digest or the status may be posted in the update's chat.

        A configured chat, or an admin's private chat with the bot: an admin asking in a group of strangers does
        not make the digest theirs to read.
        """
        chat = update.effective_chat
        user = update.effective_user
        if chat is None:
            return False
        if self.digest_chat(chat.id):
            return True
        return chat.type == "private" and user is not None and user.id in self.settings.admin_ids

    def follow_moves(self) -> None:
        """Read which ids the configured chats have now (blocking: SQLite; call it off the event loop)."""
        followed: set[int] = set()
        for chat_id in self.settings.chat_ids:
            try:
                now_id = self.state.current(recipient(chat_id))
            except StateError as exc:
                log.warning("the moves of chat %s could not be read: %s", chat_id, exc)
                continue
            if now_id != recipient(chat_id):
                try:
                    followed.add(int(now_id))
                except ValueError:
                    continue
        self._followed = frozenset(followed)

    async def on_migration(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A group became a supergroup: a configured one carries its permission (and its posts) to the new id."""
        message = update.effective_message
        if message is None:
            return
        old, new = message.migrate_from_chat_id, message.chat_id
        if message.migrate_to_chat_id is not None:
            old, new = message.chat_id, message.migrate_to_chat_id
        if old is None or old not in self.settings.chat_ids or new in self._followed:
            return
        log.warning("chat %s became supergroup %s: following it", old, new)
        self._followed = self._followed | {new}  # before the write: the supergroup's next command may come at once
        try:
            await asyncio.to_thread(self.state.record_move, recipient(old), recipient(new))
        except StateError as exc:
            log.error("the move of chat %s to %s could not be recorded: %s", old, new, exc)

    async def refuse_elsewhere(self, update: Update) -> None:
        """An admin asked in a chat that is not a digest chat: say where to ask, post nothing of the digest."""
        message = update.effective_message
        chat_id = update.effective_chat.id if update.effective_chat else 0
        log.warning("an admin asked in chat %s, which is not a digest chat: refused", chat_id)
        if message is not None:
            await _reply(message, "Digests are posted only in the configured chats: ask there, or in a private chat.")

    async def refuse(self, update: Update) -> None:
        """One short refusal per chat and hour; the attempt is logged with its chat id."""
        chat_id = update.effective_chat.id if update.effective_chat else 0
        user_id = update.effective_user.id if update.effective_user else 0
        log.warning("refused a command from chat %s (user %s): not in the allowlist", chat_id, user_id)
        now = time.monotonic()
        if now - self._refused_at.get(chat_id, -_REFUSAL_EVERY_SECONDS) < _REFUSAL_EVERY_SECONDS:
            return
        self._refused_at[chat_id] = now
        if update.effective_message is not None:
            await update.effective_message.reply_text(_REFUSAL)

    # Handlers -----------------------------------------------------------------------------------------------------

    async def on_digest(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        if not self.allowed(update):
            await self.refuse(update)
            return
        if not self.answers_here(update):
            await self.refuse_elsewhere(update)
            return
        message = update.effective_message
        chat = update.effective_chat
        if message is None or chat is None:
            return
        arguments = list(context.args or [])
        weekly = bool(arguments) and arguments[0].strip().lower() == "week"
        try:
            if weekly:
                asked: Window | tuple[int, int] = parse_week_arguments(arguments[1:], self.clock(), self.settings.zone)
            else:
                asked = parse_digest_arguments(arguments, self.clock(), self.settings.zone)
        except WindowError as exc:
            await self._reply_in_order(update, f"{exc}. {USAGE}")
            return
        await self._ask(chat.id, message, asked)

    async def _ask(self, chat_id: int, message: Message, asked: Window | tuple[int, int]) -> None:
        """Answer a digest asked by ``message`` (a command, or the digest whose button was pressed), as allowed."""
        allowance = self._allowance
        delay = allowance.reserve(chat_id)
        if delay is None:
            again = math.ceil(allowance.next_free(chat_id))
            await message.reply_text(
                f"{allowance.max_waiting} digests are already waiting in this chat; ask again in {again} s."
            )
            return
        # Asked in a forum's topic: every answer stays in it (typing, notices, the digest, its chart).
        topic = message.message_thread_id if message.is_topic_message else None
        if delay <= 0:
            await self._answer(chat_id, asked, message.message_id, topic)
            return
        await message.reply_text(
            f"{allowance.burst} digests per {allowance.window_seconds:g} s is this chat's limit: "
            f"computing yours in {math.ceil(delay)} s."
        )
        # Not the handler's own task: python-telegram-bot waits for handlers at stop, and a queued digest must not
        # hold up a shutdown; `cancel_queued` ends these instead.
        task = asyncio.create_task(self._answer_later(chat_id, asked, delay, message.message_id, topic))
        self._queued.add(task)
        task.add_done_callback(self._queued.discard)

    @property
    def _allowance(self) -> CommandAllowance:
        """The allowance given at creation (tests move its clock), else the one the settings describe."""
        if self.allowance is None:
            self.allowance = CommandAllowance(
                burst=self.settings.command_burst, window_seconds=self.settings.command_burst_window_seconds
            )
        return self.allowance

    async def _answer_later(
        self, chat_id: int, asked: Window | tuple[int, int], delay: float, reply_to: int | None, topic: int | None
    ) -> None:
        await self._allowance.sleep(delay)
        await self._answer(chat_id, asked, reply_to, topic)

    async def _answer(
        self, chat_id: int, asked: Window | tuple[int, int], reply_to: int | None = None, topic: int | None = None
    ) -> None:
        """Compute (or join) the digest of a window or a week and send it, then its chart, to ``chat_id``.

        The chat sees "typing…" at once and, when the digest takes longer than a few seconds, a short "computing"
        reply, removed once the digest is there. The digest replies to its request, and its chart follows it as a reply
        to it, drawn while the text goes out; no other answer in the chat (a /status, another digest) comes between
        the two.
        """
        sender = self._poster.sender
        lock = self._answer_locks.setdefault(chat_id, asyncio.Lock())
        async with lock:
            notice: int | None = None
            drawing: asyncio.Future[Photo | None] | None = None
            try:
                await _quietly(sender.bot.send_chat_action(chat_id, ChatAction.TYPING, message_thread_id=topic))
                if isinstance(asked, Window):
                    computing: asyncio.Future[str] = asyncio.ensure_future(self.digests.text(asked, "html"))
                    label = asked.label
                else:
                    computing = asyncio.ensure_future(self.digests.week_text(*asked, "html"))
                    label = f"week {asked[0]}-W{asked[1]:02d}"
                done, _ = await asyncio.wait({computing}, timeout=self.settings.computing_notice_seconds)
                if not done:
                    said = await _quietly(
                        sender.bot.send_message(
                            chat_id,
                            f"Computing {label}…",
                            reply_parameters=reply_parameters(reply_to),
                            message_thread_id=topic,
                        )
                    )
                    notice = said.message_id if said is not None else None
                html = await computing
                # The chart is drawn while the text goes out, so that it follows it closely.
                if isinstance(asked, Window):
                    drawing = asyncio.ensure_future(self.digests.photo(asked))
                else:
                    drawing = asyncio.ensure_future(self.digests.week_photo(*asked))
                # The text and its chart go out together: no other answer in this chat comes between them.
                markup = None
                if isinstance(asked, Window):  # its mutes are read from the digest the text was just made from
                    markup = self._keyboard(chat_id, _day_of(asked, self.settings.zone), await self._mutes(asked))
                async with self._sending(chat_id):
                    final_chat, message_ids = await sender.send(
                        chat_id, html, reply_to=reply_to, topic=topic, markup=markup
                    )
                    photo = await drawing
                    if photo is not None:
                        first = message_ids[0] if message_ids and message_ids[0] else None
                        await sender.send_photo(final_chat, photo, topic=topic, reply_to=first)
            except Exception as exc:  # a failed answer is logged; the user sees nothing to retry on
                log.error("answer to /digest in chat %s failed: %s", chat_id, exc)
            finally:
                if drawing is not None and not drawing.done():
                    drawing.cancel()
                if notice is not None:
                    await _quietly(sender.bot.delete_message(chat_id, notice))

    def _sending(self, chat_id: int) -> asyncio.Lock:
        """The lock every answer in ``chat_id`` is sent under: a digest's text and chart are never split by another."""
        return self._send_locks.setdefault(chat_id, asyncio.Lock())

    async def _reply_in_order(self, update: Update, text: str) -> None:
        """Reply with ``text`` once no digest's text and chart are being sent in the chat."""
        message = update.effective_message
        if message is None:
            return
        chat = update.effective_chat
        if chat is None:
            await _reply(message, text)
            return
        async with self._sending(chat.id):
            await _reply(message, text)

    async def cancel_queued(self) -> None:
        """Cancel the digests still waiting for the allowance (at shutdown), and wait until they are gone."""
        tasks = list(self._queued)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def on_status(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        if not self.allowed(update):
            await self.refuse(update)
            return
        if not self.answers_here(update):
            await self.refuse_elsewhere(update)
            return
        if update.effective_message is None:
            return
        text = await self.status_text(context.application if context else None)
        await self._reply_in_order(update, text)

    async def on_start(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """/start: what this bot does for this chat — when it posts, how to ask — in three lines, not the manual."""
        if not self.allowed(update):
            await self.refuse(update)
            return
        settings = self.settings
        nxt = self.next_post(self.clock()).astimezone(settings.zone)
        chat = update.effective_chat
        where = "here" if chat is not None and self.digest_chat(chat.id) else "in the configured chats"
        await self._reply_in_order(
            update,
            f"I post the health digest of {settings.cluster} {where} every day at {settings.post_at} {settings.zone} "
            f"(next: {nxt:%a %d %b %H:%M}).\n"
            "Ask /digest for the last 24 h, /digest yesterday, /digest 2026-07-20 or /digest week; /status for the "
            "last posts.\n"
            "/help says what the score and each status mean.",
        )

    async def on_ack(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """/ack check[:subject] [duration] [reason]: acked against the last 24 h's digest, by whoever asked."""
        desk = await self._ack_desk(update)
        if desk is None:
            return
        text = await desk.ack(list(context.args or []) if context else [], _who(update), self.clock())
        await self._reply_in_order(update, text)

    async def on_unack(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """/unack check[:subject]: the ack ends now (kept for replays of the days it held)."""
        desk = await self._ack_desk(update)
        if desk is not None:
            await self._reply_in_order(
                update, await desk.unack(list(context.args or []) if context else [], self.clock())
            )

    async def on_acks(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """/acks: what holds now, by whom, until when."""
        desk = await self._ack_desk(update)
        if desk is not None:
            await self._reply_in_order(update, await desk.listing(self.clock()))

    async def _ack_desk(self, update: Update) -> AckDesk | None:
        """The desk when this chat may ack here (the rules of /status); the refusal or the reason sent otherwise."""
        if not self.allowed(update):
            await self.refuse(update)
            return None
        if not self.answers_here(update):
            await self.refuse_elsewhere(update)
            return None
        if update.effective_message is None:
            return None
        if self.acks is None:
            await self._reply_in_order(update, "Acks are not kept by this bot (no state file).")
        return self.acks

    async def on_button(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A button under a digest: answered as its command would be, in the chat it was signed for only."""
        query = update.callback_query
        if query is None:
            return
        chat = update.effective_chat
        message = query.message
        if chat is None or not isinstance(message, Message):
            await _quietly(query.answer("This button has expired."))
            return
        if not self.allowed(update) or not self.answers_here(update):
            await _quietly(query.answer(_REFUSAL))
            return
        action = verified(self.button_key, chat.id, query.data or "") if self.button_key else None
        asked = parse_action(action) if action is not None else None
        if asked is None:
            # A button forwarded from another chat (or made up): it acts only where the bot put it.
            await _quietly(query.answer("This button does not belong to this chat."))
            return
        if asked.kind == "mute":
            if self.acks is None:
                await _quietly(query.answer("Acks are not kept by this bot (no state file)."))
                return
            await _quietly(query.answer(f"Muting {asked.value} for {MUTE_FOR}…"))
            text = await self.acks.ack([asked.value, MUTE_FOR, "muted from the digest"], _who(update), self.clock())
            await self._reply_in_order(update, text)
            return
        try:
            window: Window | tuple[int, int] = (
                parse_digest_arguments([asked.value], self.clock(), self.settings.zone)
                if asked.kind == "day"
                else parse_week_arguments([asked.value], self.clock(), self.settings.zone)
            )
        except WindowError as exc:
            await _quietly(query.answer(fit_utf16(str(exc), 200)))
            return
        await _quietly(query.answer())
        await self._ask(chat.id, message, window)

    def _keyboard(self, chat_id: int | str, day: date | None, mutes: list[str]) -> InlineKeyboardMarkup | None:
        """The buttons under a digest in ``chat_id`` (none for a chat named by @name: its presses carry an id)."""
        if not self.button_key or not isinstance(chat_id, int):
            return None
        today = self.clock().astimezone(self.settings.zone).date()
        return digest_buttons(self.button_key, chat_id, day, today, mutes)

    async def _mutes(self, window: Window) -> list[str]:
        if self.mutes is None:
            return []
        try:
            return await self.mutes(window)
        except Exception:  # a mute button is a convenience: the digest goes out without them
            log.exception("the findings to mute of %s could not be read", window.label)
            return []

    async def scheduled_buttons(self, key: str, chat_id: ChatId) -> InlineKeyboardMarkup | None:
        """The buttons under a scheduled daily post (its key names its day); none under the week at a glance."""
        scheduled = scheduled_day_of(key, self.settings.wall_post_time, self.settings.zone)
        if scheduled is None:
            return None
        return self._keyboard(chat_id, scheduled.day, await self._mutes(scheduled.window))

    async def on_help(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        if not self.allowed(update):
            await self.refuse(update)
            return
        await self._reply_in_order(update, HELP)

    async def on_other(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Any other command: refusal for strangers, usage for the allowed chats; another bot's command: nothing."""
        if _for_another_bot(update, context.bot.username if context else None):
            return
        if not self.allowed(update):
            await self.refuse(update)
            return
        await self._reply_in_order(update, f"Unknown command. {USAGE}")

    # Scheduled posts ----------------------------------------------------------------------------------------------

    async def post_due(self, _context: Any = None) -> list[PostResult]:
        """Post the most recent scheduled digest to every recipient that has not had it, within the grace period."""
        return await self._after_round(await self.dispatch.post_due())

    async def post_all_due(self, _context: Any = None) -> None:
        """The scheduled job: the daily post, then (on its day) the weekly one; each is exactly once."""
        await self._after_round(await self.dispatch.post_all_due())

    async def post_week_due(self, _context: Any = None) -> list[PostResult]:
        """On the weekly post's day, post the last complete week at a glance to every recipient that has not had it."""
        return await self._after_round(await self.dispatch.post_week_due())

    async def _after_round(self, results: list[PostResult]) -> list[PostResult]:
        """A chat that moved during the post (a group become a supergroup): its new id may ask from now on."""
        known = {recipient(chat_id) for chat_id in (*self.settings.chat_ids, *self._followed)}
        # The other channels' recipients are no chats of this bot (nor moved ones).
        known.update(
            one for channel in self.dispatch.channels if channel.name != TELEGRAM for one in channel.recipients
        )
        if any(result.recipient not in known for result in results):
            await asyncio.to_thread(self.follow_moves)
        return results

    async def open_more_channels(self) -> None:
        """Open the channels beside Telegram and add them to the rounds (at start, before the first round)."""
        if self.more_channels is None or self._more_opened is not None:
            return
        stack = AsyncExitStack()
        opened = await stack.enter_async_context(self.more_channels())
        self._more_opened = stack
        self.dispatch.channels = (*self.dispatch.channels, *opened)
        for channel in opened:
            log.info("posting also to %s: %d recipient(s)", channel.name, len(channel.recipients))

    async def close_more_channels(self) -> None:
        """Close the channels `open_more_channels` opened (at shutdown)."""
        stack, self._more_opened = self._more_opened, None
        if stack is not None:
            self.dispatch.channels = tuple(one for one in self.dispatch.channels if one.name == TELEGRAM)
            await stack.aclose()

    def _look_again(self, delay: float) -> None:
        """Run the scheduled round once more in ``delay`` seconds (one such look at a time)."""
        if self.job_queue is None or self.job_queue.get_jobs_by_name(_RETRY_JOB):
            return
        self.job_queue.run_once(_job(self.post_all_due), when=delay, name=_RETRY_JOB, job_kwargs=_LATE_OK)

    def stop_now(self, application: Application[Any, Any, Any, Any, Any, Any]) -> None:
        """SIGTERM or SIGINT: no new work, deliveries abandoned (their claims released), then a clean stop.

        Kubernetes gives the pod 30 s before SIGKILL; a post waiting out a 429 or retrying a slow chat would hold the
        process past it (python-telegram-bot waits for running jobs), leave its claim to expire and be killed
        mid-write. Cancelled here, each delivery records itself as interrupted, and the next run posts what is owed.
        """
        if self.stopping:
            return
        abandoned = self.dispatch.stop()
        log.info("stopping: %d delivery(ies) in flight are abandoned and will be retried", abandoned)
        for task in self._queued:
            task.cancel()
        application.stop_running()

    def next_post(self, now: datetime) -> datetime:
        """The next scheduled post moment after ``now`` (23 or 25 h after the last one on a DST change)."""
        return self.settings.schedule.next_post(now)

    async def status_text(self, application: Application[Any, Any, Any, Any, Any, Any] | None) -> str:
        """What /status answers: posts per recipient, failures, sources, next post."""
        now = self.clock()
        zone = self.settings.zone
        lines = [f"digest status · {self.settings.cluster}"]
        nxt = self.next_post(now).astimezone(zone)
        lines.append(f"Next post: {nxt:%Y-%m-%d %H:%M} {zone}")
        lines.extend(await self.dispatch.status_lines(now))
        problem = self.polling.problem()
        if problem is not None:
            lines.append(f"Telegram: {problem}")
        lines.extend(await self.hooks.status_lines(now))
        return "\n".join(lines)


def build_application(
    bot: DigestBot, token: str, handle_signals: bool = False
) -> Application[Any, Any, Any, Any, Any, Any]:
    """The python-telegram-bot Application wired to ``bot``: handlers, commands and the daily jobs.

    With ``handle_signals`` (`digest serve`), SIGTERM and SIGINT go to `DigestBot.stop_now`: run the application
    with ``stop_signals=None`` then.
    """
    settings = bot.settings
    root = settings.api_url.rstrip("/")
    application = (
        ApplicationBuilder()
        .token(token)
        .base_url(f"{root}/bot")
        .base_file_url(f"{root}/file/bot")
        # python-telegram-bot's pool sizes, with answers that are not the Bot API's refused as a network error.
        .request(BotApiRequest(connection_pool_size=256))
        .get_updates_request(PollingRequest(bot.polling, connection_pool_size=1))
        .concurrent_updates(True)
        .post_init(lambda app: _post_init(app, bot, handle_signals))
        .post_stop(lambda app: bot.cancel_queued())
        .post_shutdown(lambda app: _post_shutdown(app, bot))
        .build()
    )
    bot.poster = Poster(sender=Sender(application.bot, state=bot.state), state=bot.state)
    bot.button_key = button_key(token)
    bot.dispatch.channels = (
        TelegramChannel(bot.poster, settings.chat_ids, settings.topics, buttons=bot.scheduled_buttons),
    )
    # New messages and channel posts only: an edited old "/digest" is not a new request. CommandHandler already
    # ignores "/digest@OtherBot"; on_other ignores it too instead of calling it unknown.
    fresh = filters.UpdateType.MESSAGE | filters.UpdateType.CHANNEL_POST
    application.add_handler(MessageHandler(filters.StatusUpdate.MIGRATE, bot.on_migration))
    application.add_handler(CommandHandler("digest", bot.on_digest, filters=fresh))
    application.add_handler(CommandHandler("status", bot.on_status, filters=fresh))
    application.add_handler(CommandHandler("help", bot.on_help, filters=fresh))
    application.add_handler(CommandHandler("start", bot.on_start, filters=fresh))
    application.add_handler(CommandHandler("ack", bot.on_ack, filters=fresh))
    application.add_handler(CommandHandler("unack", bot.on_unack, filters=fresh))
    application.add_handler(CommandHandler("acks", bot.on_acks, filters=fresh))
    application.add_handler(MessageHandler(filters.COMMAND & fresh, bot.on_other))
    application.add_handler(CallbackQueryHandler(bot.on_button))
    application.add_error_handler(_on_error)
    job_queue = application.job_queue
    if job_queue is None:
        raise RuntimeError("python-telegram-bot was installed without its job-queue extra")
    job_queue.run_daily(_job(bot.post_all_due), time=settings.post_time, name="daily-digest", job_kwargs=_LATE_OK)
    job_queue.run_repeating(
        _job(bot.post_all_due),
        interval=_RECHECK_EVERY_SECONDS,
        first=_FIRST_CHECK_SECONDS,
        name="due-digest",
        job_kwargs=_LATE_OK,
    )
    bot.job_queue = job_queue
    return application


T = TypeVar("T")


async def _quietly(call: Awaitable[T]) -> T | None:
    """``call``'s result, or None when Telegram refused it: a courtesy (typing, a notice) never fails an answer."""
    try:
        return await call
    except TelegramError as exc:
        log.info("a courtesy call to Telegram failed: %s", exc)
        return None


async def _reply(message: Message, text: str) -> None:
    """Reply with ``text`` cut to what Telegram takes (a quoted 4,000-character argument never silences the bot)."""
    await message.reply_text(fit_utf16(text, MAX_TEXT))


def _who(update: Update) -> str:
    """Who an ack is by: ``@username``, else the person's name."""
    user = update.effective_user
    if user is None:
        return "someone"
    return f"@{user.username}" if user.username else user.full_name


def _day_of(window: Window, zone: ZoneInfo) -> date:
    """The calendar day a window is read as (its last instant's): the day its buttons go back and forth from."""
    return (window.end - timedelta(microseconds=1)).astimezone(zone).date()


def _for_another_bot(update: Update, own_username: str | None) -> bool:
    """Whether the update's command is addressed to another bot (``/digest@OtherBot``)."""
    message = update.effective_message
    text = message.text if message is not None and message.text else ""
    command = text.split(maxsplit=1)[0] if text.startswith("/") else ""
    _, at, addressee = command.partition("@")
    return bool(at) and (own_username is None or addressee.lower() != own_username.lower())


def _job(function: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Coroutine[Any, Any, None]]:
    async def run(context: Any) -> None:
        await function(context)

    return run


async def _post_init(
    application: Application[Any, Any, Any, Any, Any, Any], bot: DigestBot, handle_signals: bool
) -> None:
    if handle_signals:
        loop = asyncio.get_running_loop()
        for signal_number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signal_number, bot.stop_now, application)
    await asyncio.to_thread(bot.follow_moves)
    await bot.open_more_channels()
    await bot.hooks.started(lambda: bot.health_problem(application) is None, lambda: bot.health_reason(application))
    try:
        await application.bot.set_my_commands(COMMANDS)
    except TelegramError as exc:
        # The command menu is a convenience: the bot still answers typed commands without it.
        log.warning("could not register the command menu: %s", exc)
    log.info(
        "bot ready; posting at %s %s to %d chat(s)",
        bot.settings.post_at,
        bot.settings.zone,
        len(bot.settings.chat_ids),
    )


async def _post_shutdown(application: Application[Any, Any, Any, Any, Any, Any], bot: DigestBot) -> None:
    # post_stop already did this under run_polling/run_webhook; a harness that skips post_stop is covered here.
    await bot.cancel_queued()
    await bot.close_more_channels()
    await bot.hooks.stopped()


async def _on_error(update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
    if update is None:
        # A failed poll: `PollHealth` logs each change of reason once, rather than every retry here.
        log.debug("poll failed: %s", type(context.error).__name__ if context.error else "unknown")
        return
    log.error("error while handling an update: %s", type(context.error).__name__ if context.error else "unknown")

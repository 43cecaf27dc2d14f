"""Posting a digest to a Telegram chat so that it arrives, once, intact — or the failure is recorded and visible.

Transient failures (429 with ``retry_after``, timeouts, network errors, 5xx) are retried — ``retry_after`` honoured
exactly, the others with capped exponential backoff and jitter — inside a bounded total time; permanent ones (bot
blocked, chat not found, any other 400) are not retried, as healthchecks distinguishes them. A part whose HTML
Telegram refuses ("can't parse entities") is resent as plain text rather than lost. A group that became a
supergroup (``migrate_to_chat_id``) is followed, remembered and logged.

`Poster.post_once` wraps a delivery in the exactly-once protocol every channel shares (`digest.channels.once`): claim,
compute, store the parts, send each part not yet accepted, record. Exactly once holds *per part*: the digest's
messages ("(1/2)", "(2/2)") and the chart photo after them are each recorded with their Telegram message id when
accepted, so a retry (the bot's 5-minute recheck) or a rerun (the CronJob's ``digest run --post``) sends only what is
still owed, from the stored content. What is Telegram's is here: `TelegramParts` writes one part (HTML split to
4,096 characters, a photo, a forum topic) through `Sender`, which retries, paces and follows a chat's migration.

Everything the Telegram API root answers is translated once, here, into `DeliveryError`: `BotApiRequest` turns an
answer that is not the Bot API's — a redirect, an HTML page, malformed JSON, JSON without ``"ok"`` — into
`NotBotApiError` (a ``NetworkError``) instead of python-telegram-bot's bare ``KeyError`` or its logged traceback,
and the retry loop turns every ``TelegramError`` into a one-line `DeliveryError`. During a send such an answer is
transient (a proxy's error page or a cut-off body: retried within the budget, recorded as a failure a later run
retries). When the bot is opened (`open_bot`, the first request, before anything is claimed) a redirect, page or
malformed answer with a status below 500 means the root is not the Bot API at all — a wrong
``DIGEST_TELEGRAM_API_URL`` — so it fails at once instead of after five minutes; a 5xx there is retried as usual.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import httpx
from telegram import Bot, InlineKeyboardMarkup, LinkPreviewOptions, Message, ReplyParameters
from telegram.constants import ParseMode
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.request import HTTPXRequest

from digest.channels.channel import DeliveryError, Photo, PostResult
from digest.channels.once import ExactlyOnce, SendGuard
from digest.channels.retry import Attempts, RetryPolicy, seconds, short
from digest.channels.state import DeliveryState, Part, PartKind
from digest.channels.telegram.text import MAX_CAPTION, fit_utf16, plain_from_html, split_html

log = logging.getLogger(__name__)

# A chat as the Bot API takes it: its integer id, or a public channel's "@name".
ChatId = int | str

# The message id recorded for a message Telegram took whose answer was cut off (ids start at 1).
UNKNOWN_MESSAGE_ID = 0

# A reason quoted in a log line, the state file or stderr stays one readable line (a proxy's page can be long).


# What python-telegram-bot raises when an "ok" answer's ``result`` is not the object it expects (``true`` for a
# message, ``{}`` for a user): the JSON was the Bot API's envelope, its content was not.
_NOT_A_MESSAGE = (KeyError, TypeError, ValueError, AttributeError)


class NotBotApiError(NetworkError):
    """The Telegram API root answered something that is not the Bot API (a redirect, a page, malformed JSON)."""

    def __init__(self, what: str, status: int) -> None:
        super().__init__(f"the Telegram API answered {what} (HTTP {status}), not the Bot API")
        self.status = status


def _not_bot_api(status: int, payload: bytes) -> str | None:
    """What an answer is when it is not the Bot API's JSON object with ``ok`` (and a ``result`` on success)."""
    text = payload.strip()
    if not text:
        return "an empty body"
    try:
        data = json.loads(text.decode("utf-8", "replace"))
    except ValueError:
        if text[:1] == b"<":
            return "an HTML page"
        return "malformed JSON" if text[:1] in (b"{", b"[") else "a body that is not JSON"
    if not isinstance(data, dict) or "ok" not in data:
        return 'JSON without "ok"'
    if 200 <= status < 300 and (data["ok"] is not True or "result" not in data):
        return 'a success without "result"'
    return None


# The Bot API's largest answers (getUpdates with 100 updates) weigh a few hundred KiB; a proxy or a wrong root that
# streams gigabytes must not take the pod's memory with it.
MAX_ANSWER_BYTES = 32 * 1024 * 1024


# The statuses of the answers whose headers arrived during the current `BotApiRequest.do_request` (the transport runs
# in the requesting task): a 200 whose body then crawls past the deadline was taken by Telegram all the same.
_HEADERS_SEEN: ContextVar[list[int] | None] = ContextVar("bot_api_headers_seen", default=None)


class AnswerCutOff(TimedOut):
    """The Bot API answered ``status`` but the body did not arrive within the deadline (a trickling proxy)."""

    def __init__(self, status: int, deadline: float) -> None:
        super().__init__(f"answered HTTP {status}, but the body did not arrive within {deadline:.0f} s")
        self.status = status


class _CappedStream(httpx.AsyncByteStream):
    """A response body that fails as a network error once it passes ``cap`` bytes, instead of being read whole."""

    def __init__(self, stream: httpx.AsyncByteStream, cap: int) -> None:
        self._stream = stream
        self._cap = cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._stream:
            seen += len(chunk)
            if seen > self._cap:
                raise httpx.ReadError(f"answer larger than {self._cap // (1024 * 1024)} MiB")
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class _CappedTransport(httpx.AsyncBaseTransport):
    """httpx's transport with every answer's body capped, and no compressed answer (none is asked for).

    Proxies come from the environment (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``), as httpx and
    curl read them: a cluster whose egress goes through a proxy reaches Telegram through it. httpx only reads them
    when it builds its own transport, which the cap replaces, so they are applied here, with the cap on top.
    """

    def __init__(self, pool_size: int, cap: int) -> None:
        self._limits = httpx.Limits(max_connections=pool_size)
        self._direct = httpx.AsyncHTTPTransport(limits=self._limits)
        self._proxied: dict[str, httpx.AsyncHTTPTransport] = {}
        self._cap = cap

    def _transport_for(self, url: httpx.URL) -> httpx.AsyncHTTPTransport:
        proxy = proxy_for(url.scheme, url.host)
        if proxy is None:
            return self._direct
        if proxy not in self._proxied:
            self._proxied[proxy] = httpx.AsyncHTTPTransport(proxy=proxy, limits=self._limits)
        return self._proxied[proxy]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._transport_for(request.url).handle_async_request(request)
        seen = _HEADERS_SEEN.get()
        if seen is not None:
            seen.append(response.status_code)
        coding = response.headers.get("content-encoding", "identity").strip().lower()
        if coding not in ("", "identity"):
            # A compressed body would be inflated past any cap on the wire; "identity" was asked for.
            await response.aclose()
            raise httpx.ReadError(f"a compressed answer ({coding}) that was not asked for")
        stream = response.stream
        if not isinstance(stream, httpx.AsyncByteStream):
            raise TypeError("an async transport answered with a sync stream")
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_CappedStream(stream, self._cap),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        for transport in (self._direct, *self._proxied.values()):
            await transport.aclose()


def proxy_for(scheme: str, host: str) -> str | None:
    """The proxy URL the environment names for ``scheme://host``, or None (none set, or ``NO_PROXY`` covers host)."""
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy


# Beyond the sum of a request's phase timeouts: the time a slow but honest answer may still take.
_DEADLINE_SLACK_SECONDS = 5.0


class BotApiRequest(HTTPXRequest):
    """python-telegram-bot's HTTP client, refusing any answer that is not the Bot API's with `NotBotApiError`.

    Without it, JSON lacking ``result`` escapes as a bare ``KeyError``, a non-JSON body is logged with a traceback
    before becoming "Invalid server response", and a redirect's empty body ends up quoted in the error. Answers are
    read up to `MAX_ANSWER_BYTES` (a larger one is a network error, retried like a 5xx), uncompressed.
    """

    def __init__(self, connection_pool_size: int = 1, max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        super().__init__(
            connection_pool_size=connection_pool_size,
            httpx_kwargs={
                "transport": _CappedTransport(connection_pool_size, max_answer_bytes),
                "headers": {"Accept-Encoding": "identity"},
            },
        )

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        # The request goes out exactly as python-telegram-bot built it; only the answer is checked, and the whole
        # exchange is bounded: httpx's timeouts are per phase and per read, so an answer trickling one byte every
        # two seconds would otherwise hold a send (and every chat after it) for as long as the server likes.
        deadline = self.deadline(kwargs)
        seen: list[int] = []
        token = _HEADERS_SEEN.set(seen)
        try:
            async with asyncio.timeout(deadline):
                status, payload = await super().do_request(*args, **kwargs)
        except TimeoutError:
            if seen:
                raise AnswerCutOff(seen[-1], deadline) from None
            raise TimedOut(f"no complete answer within {deadline:.0f} s") from None
        finally:
            _HEADERS_SEEN.reset(token)
        if 300 <= status < 400:
            raise NotBotApiError("a redirect", status)
        what = _not_bot_api(status, payload)
        if what is not None:
            raise NotBotApiError(what, status)
        return status, payload

    def deadline(self, given: dict[str, Any]) -> float:
        """The whole exchange's time limit: the request's phase timeouts added up, plus a little slack."""
        defaults = self._client.timeout

        def phase(name: str, default: float | None, fallback: float) -> float:
            value = given.get(name)
            if isinstance(value, int | float):
                return float(value)
            return default if default is not None else fallback

        # A file upload's write phase is python-telegram-bot's media write timeout (20 s by default).
        data = given.get("request_data")
        write_default = self._media_write_timeout if getattr(data, "multipart_data", None) else defaults.write
        return (
            phase("connect_timeout", defaults.connect, 5.0)
            + phase("read_timeout", defaults.read, 5.0)
            + phase("write_timeout", write_default, 20.0)
            + phase("pool_timeout", defaults.pool, 1.0)
            + _DEADLINE_SLACK_SECONDS
        )


@asynccontextmanager
async def open_bot(
    token: str,
    api_root: str,
    retry: RetryPolicy | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    random_unit: Callable[[], float] = random.random,
) -> AsyncIterator[Bot]:
    """A `Bot` on ``api_root`` with `BotApiRequest`, initialised (``getMe``); `DeliveryError` if that fails.

    A 429, a timeout or a 5xx is retried within ``retry``; an answer that shows the root is not the Bot API, or a
    refused token, fails at once (see the module docstring). The token never appears in the error.
    """
    root = api_root.rstrip("/")
    bot = Bot(
        token,
        base_url=f"{root}/bot",
        base_file_url=f"{root}/file/bot",
        request=BotApiRequest(),
        get_updates_request=BotApiRequest(connection_pool_size=1),
    )
    attempts = Attempts(retry or RetryPolicy(), sleep, random_unit)
    try:
        while True:
            try:
                await bot.initialize()
                break
            except NotBotApiError as exc:
                if exc.status < 500:
                    raise DeliveryError(f"{exc.message}; check DIGEST_TELEGRAM_API_URL", permanent=False) from None
                delay, reason = attempts.backoff(), exc.message
            except InvalidToken:
                # python-telegram-bot's own message quotes the token.
                raise DeliveryError("the Telegram API refused the bot token", permanent=True) from None
            except RetryAfter as exc:
                delay, reason = seconds(exc.retry_after), f"429 retry after {seconds(exc.retry_after):g} s"
            except NetworkError as exc:  # includes TimedOut, refused connections and 5xx answers
                delay, reason = attempts.backoff(), f"{type(exc).__name__}: {short(exc.message)}"
            except TelegramError as exc:
                raise DeliveryError(f"Telegram error: {short(exc.message)}", permanent=True) from None
            except _NOT_A_MESSAGE as exc:
                raise DeliveryError(
                    f"the Telegram API said ok but answered no bot ({type(exc).__name__}); "
                    "check DIGEST_TELEGRAM_API_URL",
                    permanent=False,
                ) from None
            await attempts.wait(delay, reason, "opening the bot")
        yield bot
    finally:
        await bot.shutdown()


class Pacer:
    """Keeps sends under Telegram's flood limits before Telegram has to say 429.

    Telegram's bot FAQ: about 30 messages per second overall and about one per second in a chat (short bursts
    tolerated). A digest of three parts to twenty chats must not arrive as sixty messages in the same second.
    """

    def __init__(self, per_second: float = 25.0, per_chat_interval: float = 1.0) -> None:
        self._interval = 1.0 / per_second
        self._per_chat_interval = per_chat_interval
        self._next_global = 0.0
        self._next_by_chat: dict[ChatId, float] = {}
        self._last_departure = float("-inf")
        self._last_by_chat: dict[ChatId, float] = {}
        self._lock = asyncio.Lock()

    async def wait_turn(self, chat_id: ChatId) -> None:
        """Wait until a message to ``chat_id`` may leave; reserves the slot before sleeping.

        A reserved slot is when a message may leave at the earliest, not when it does: an event loop held up for a
        moment wakes every sleeper whose slot passed at once. So each also waits one interval after the message that
        really left before it (and a chat's one before it in that chat): a stall delays the queue, never bursts it
        (seen: 44 messages in one second after one, with a hundred chats answered at once on a busy machine).
        """
        async with self._lock:
            now = time.monotonic()
            start = max(now, self._next_global, self._next_by_chat.get(chat_id, 0.0))
            self._next_global = start + self._interval
            self._next_by_chat[chat_id] = start + self._per_chat_interval
        if start > now:
            await asyncio.sleep(start - now)
        while True:
            async with self._lock:
                now = time.monotonic()
                due = max(
                    self._last_departure + self._interval,
                    self._last_by_chat.get(chat_id, float("-inf")) + self._per_chat_interval,
                )
                if now >= due:
                    self._last_departure = now
                    self._last_by_chat[chat_id] = now
                    return
            await asyncio.sleep(due - now)


@dataclass
class Sender:
    """Sends the parts of one message with retries, paced under Telegram's limits."""

    bot: Bot
    state: DeliveryState | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    pacer: Pacer = field(default_factory=Pacer)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    random_unit: Callable[[], float] = random.random

    async def send(
        self,
        chat_id: ChatId,
        html_message: str,
        reply_to: int | None = None,
        topic: int | None = None,
        markup: InlineKeyboardMarkup | None = None,
    ) -> tuple[ChatId, list[int]]:
        """Send ``html_message`` split into valid parts (the first replying to ``reply_to``); the chat and ids.

        ``topic``: the forum topic (``message_thread_id``) every part goes to; None: the chat itself. ``markup``: the
        buttons, under the first part (the first screen).
        """
        message_ids: list[int] = []
        for index, part in enumerate(split_html(html_message)):
            chat_id, message_id = await self.send_text(
                chat_id,
                part,
                reply_to=reply_to if index == 0 else None,
                topic=topic,
                markup=markup if index == 0 else None,
            )
            message_ids.append(message_id)
        return chat_id, message_ids

    async def send_text(
        self,
        chat_id: ChatId,
        part: str,
        guard: SendGuard | None = None,
        reply_to: int | None = None,
        topic: int | None = None,
        markup: InlineKeyboardMarkup | None = None,
    ) -> tuple[ChatId, int]:
        """Send one message of at most 4,096 visible characters (a part of `split_html`), with retries."""
        replying = reply_parameters(reply_to)

        async def text(chat: ChatId, as_html: bool) -> Message:
            return await self.bot.send_message(
                chat_id=chat,
                text=part if as_html else plain_from_html(part),
                parse_mode=ParseMode.HTML if as_html else None,
                link_preview_options=LinkPreviewOptions(is_disabled=True),
                reply_parameters=replying,
                message_thread_id=topic,
                reply_markup=markup,
            )

        return await self._with_retries(chat_id, text, guard)

    async def send_photo(
        self,
        chat_id: ChatId,
        photo: Photo,
        guard: SendGuard | None = None,
        topic: int | None = None,
        reply_to: int | None = None,
    ) -> tuple[ChatId, int]:
        """Send a PNG with its caption (cut to Telegram's 1,024 UTF-16 units), with the same retries.

        ``reply_to``: the digest's message the chart belongs to (a reply stays attached to it in the chat).
        """
        caption = fit_utf16(photo.caption, MAX_CAPTION)
        replying = reply_parameters(reply_to)

        async def upload(chat: ChatId, _as_html: bool) -> Message:
            return await self.bot.send_photo(
                chat_id=chat,
                photo=photo.png,
                caption=caption,
                filename=photo.filename,
                message_thread_id=topic,
                reply_parameters=replying,
            )

        return await self._with_retries(chat_id, upload, guard)

    async def _with_retries(
        self,
        chat_id: ChatId,
        call: Callable[[ChatId, bool], Awaitable[Message]],
        guard: SendGuard | None = None,
    ) -> tuple[ChatId, int]:
        attempts = Attempts(self.retry, self.sleep, self.random_unit)
        as_html = True
        visited: set[ChatId] = {chat_id}
        while True:
            await self.pacer.wait_turn(chat_id)
            if guard is not None and not await guard.begin():
                raise DeliveryError(
                    "may have arrived: an earlier send went unanswered (answer lost, or the process stopped while "
                    "waiting); not sent again, so that it is not repeated",
                    permanent=False,
                    unconfirmed=True,
                )
            try:
                message = await self._attempt(call, chat_id, as_html, guard)
                return chat_id, UNKNOWN_MESSAGE_ID if message is None else message.message_id
            except RetryAfter as exc:
                delay = seconds(exc.retry_after)
                reason = f"429 retry after {delay:g} s"
            except ChatMigrated as exc:
                if exc.new_chat_id in visited:
                    # A move back to an id already tried would loop forever; Telegram moves a group once.
                    raise DeliveryError(
                        f"the Telegram API moved chat {chat_id} to {exc.new_chat_id}, where it had already been",
                        permanent=False,
                    ) from None
                visited.add(exc.new_chat_id)
                log.warning("chat %s became supergroup %s: following it", chat_id, exc.new_chat_id)
                if self.state is not None:
                    await asyncio.to_thread(self.state.record_move, recipient(chat_id), recipient(exc.new_chat_id))
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
                raise DeliveryError(f"rejected by Telegram: {short(exc.message)}", permanent=True) from None
            except (Forbidden, InvalidToken) as exc:
                raise DeliveryError(f"refused by Telegram: {short(exc.message)}", permanent=True) from None
            except NetworkError as exc:  # includes TimedOut, 5xx answers and NotBotApiError
                delay = attempts.backoff()
                reason = f"{type(exc).__name__}: {short(exc.message)}"
            except TelegramError as exc:
                raise DeliveryError(f"Telegram error: {short(exc.message)}", permanent=True) from None
            except _NOT_A_MESSAGE as exc:
                # "ok" but no message in it: it may have been delivered, so this run does not send it again.
                raise DeliveryError(
                    f"the Telegram API said ok but answered no message ({type(exc).__name__}); not the Bot API?",
                    permanent=False,
                ) from None
            await attempts.wait(delay, reason, f"chat {chat_id}")

    async def _attempt(
        self,
        call: Callable[[ChatId, bool], Awaitable[Message]],
        chat_id: ChatId,
        as_html: bool,
        guard: SendGuard | None,
    ) -> Message | None:
        """One send: its message, or None when Telegram took it but its answer's body was cut off (id unknown).

        A send that failed in a way that proves it did not arrive is uncounted from ``guard`` before the error goes on.
        """
        try:
            return await call(chat_id, as_html)
        except TelegramError as exc:
            if isinstance(exc, AnswerCutOff) and exc.status == 200:
                # Taken: only the answer's body (the message id) is missing. Sending again would repeat it.
                log.warning("chat %s: %s; the message was taken, its id is unknown", chat_id, exc.message)
                return None
            if guard is not None and not _may_have_arrived(exc):
                await guard.refused()
            raise


def _may_have_arrived(exc: TelegramError) -> bool:
    """Whether a failed send may still have been accepted: the request left but its answer did not come back whole.

    An answer from Telegram (429, 400, 403, a 5xx of its own), a connection never made, a request never written
    whole, a pool timeout and a page or redirect from something that is not the Bot API (a proxy's login page) are
    definite: nothing arrived. A read timeout, the whole-exchange deadline, a connection dropped mid-answer and a
    proxy's 5xx page (a gateway timeout after forwarding the request) are not.
    """
    if isinstance(exc, AnswerCutOff):
        return exc.status == 200  # an error status line is Telegram's answer: not taken
    if isinstance(exc, NotBotApiError):
        return exc.status >= 500
    if not isinstance(exc, NetworkError) or isinstance(exc, BadRequest):
        return False
    cause = exc.__cause__
    if isinstance(exc, TimedOut):
        return not isinstance(cause, httpx.ConnectTimeout | httpx.PoolTimeout | httpx.WriteTimeout)
    return isinstance(cause, httpx.ReadError | httpx.RemoteProtocolError)


def reply_parameters(message_id: int | None) -> ReplyParameters | None:
    """Reply to ``message_id`` (None: no reply); a request deleted meanwhile gets its answer all the same."""
    return None if message_id is None else ReplyParameters(message_id, allow_sending_without_reply=True)


def recipient(chat_id: ChatId) -> str:
    """A chat as the delivery state keys it: the id's text ("-1001234") or the channel's "@name"."""
    return str(chat_id)


def chat_of(recipient: str) -> ChatId:
    """A recipient's chat as the Bot API takes it: an integer id when it is one, else the "@name"."""
    try:
        return int(recipient)
    except ValueError:
        return recipient


@dataclass
class TelegramParts:
    """`digest.channels.once.PartWriter` of Telegram: HTML cut to its 4,096 characters, the chart as a photo.

    ``topic``: the forum topic (``message_thread_id``) every part goes to; None: the chat itself.
    """

    sender: Sender
    topic: int | None = None
    # The buttons under the first part, made when it is sent (a retry makes them again: they hold no state).
    markup: Callable[[], Awaitable[InlineKeyboardMarkup | None]] | None = None

    def texts(self, message: str) -> list[str]:
        return split_html(message)

    async def send(self, address: str, part: Part, guard: SendGuard, reply_to: int | None = None) -> tuple[str, int]:
        chat = chat_of(address)
        if part.kind is PartKind.TEXT:
            buttons = await self._buttons() if part.index == 1 else None
            moved, message_id = await self.sender.send_text(chat, part.text, guard, topic=self.topic, markup=buttons)
            return recipient(moved), message_id
        if part.data is None:  # the PNG is dropped only when the chart is accepted; a file edited by hand, then
            raise DeliveryError("the stored chart has no image", permanent=True)
        photo = Photo(png=part.data, caption=part.text, filename=part.filename or "digest.png")
        moved, message_id = await self.sender.send_photo(chat, photo, guard, topic=self.topic, reply_to=reply_to)
        return recipient(moved), message_id

    async def _buttons(self) -> InlineKeyboardMarkup | None:
        if self.markup is None:
            return None
        try:
            return await self.markup()
        except Exception:  # buttons are a convenience: the digest goes out without them rather than not at all
            log.exception("the digest's buttons could not be made; posting it without them")
            return None


class Poster:
    """Exactly-once posting to Telegram chats: `digest.channels.once.ExactlyOnce` writing parts with ``sender``.

    The claim is a lease renewed while the delivery is worked on, so a process killed mid-send leaves a claim that
    another takes over within ``lease_seconds``.
    """

    def __init__(self, sender: Sender, state: DeliveryState, lease_seconds: float = 60.0) -> None:
        self.sender = sender
        self.once = ExactlyOnce(state, lease_seconds)

    @property
    def state(self) -> DeliveryState:
        """The delivery state the posts are recorded in."""
        return self.once.state

    @state.setter
    def state(self, state: DeliveryState) -> None:
        self.once.state = state

    async def post_once(
        self,
        chat_id: ChatId,
        key: str,
        message: Callable[[], Awaitable[str]],
        late: bool = False,
        photo: Callable[[], Awaitable[Photo | None]] | None = None,
        topic: int | None = None,
        markup: Callable[[], Awaitable[InlineKeyboardMarkup | None]] | None = None,
    ) -> PostResult:
        """Post what ``message()`` returns (and ``photo()`` after it) to ``chat_id``, each part once.

        ``topic``: the forum topic the parts go to (the chat's delivery is one whichever topic it is posted in).
        ``message`` and ``photo`` are called only when no earlier attempt stored the delivery's parts. The delivery
        state knows the chat as text (`recipient`): "-1001234" or "@name".
        """
        writer = TelegramParts(self.sender, topic, markup)
        return await self.once.post_once(recipient(chat_id), key, message, writer, late=late, photo=photo)

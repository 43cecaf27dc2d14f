"""A Bot-API-shaped HTTP server on loopback that answers like Telegram where a bot's behaviour depends on it.

Telegram has no offline server, so tests point python-telegram-bot at this one::

    with FakeTelegram(known_chats={42}) as tg:
        bot = telegram.Bot(tg.token, base_url=tg.base_url, base_file_url=tg.base_file_url)

``base_url`` is ``f"{tg.root}/bot"``: python-telegram-bot appends the token to it directly, and the method after a
slash, giving Telegram's ``{root}/bot{token}/{method}``; files are served at ``{root}/file/bot{token}/{path}``.

What is reproduced, and where it was read from:

* HTML parse mode is a port of TDLib's ``parse_html`` (``tests/telegram_html.py``), with its error texts
  (``Unsupported start tag "script" at byte offset 0``, ``Can't find end tag corresponding to start tag "b"``, …),
  which the Bot API server prefixes with ``can't parse entities:`` (telegram-bot-api Client.cpp lower-cases the first
  letter after ``Bad Request:``). ``strict_html=True`` (the default) adds the rule of the Bot API documentation that
  TDLib itself does not enforce: a bare ``&`` or ``>`` outside a tag, or a named entity other than ``&lt; &gt; &amp;
  &quot;``, is refused too (those wordings are this fake's own). ``strict_html=False`` is TDLib exactly, which keeps
  such characters as text.
* Length limits are checked on the visible text, after tags are removed and entities decoded. TDLib counts them with
  ``utf8_length`` — Unicode code points — against ``message_text_length_max`` 4096 and ``message_caption_length_max``
  1024 (td/telegram/MessageContent.cpp), so an emoji counts one; ``length_unit="utf16"`` counts UTF-16 code units
  instead (an emoji counts two), the unit of entity offsets. Entity offsets and lengths are always UTF-16.
* Errors are ``{"ok": false, "error_code": N, "description": "...", "parameters": {...}}`` with the HTTP status N;
  429 carries ``parameters.retry_after`` and ``Too Many Requests: retry after N`` (telegram-bot-api Query.cpp), a
  migrated group ``parameters.migrate_to_chat_id``.
"""

from __future__ import annotations

import asyncio
import email.message
import itertools
import json
import re
import struct
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self
from urllib.parse import parse_qsl, unquote, urlsplit

from tests.misbehaving_server import QuietHandler
from tests.telegram_html import HtmlParseError, JsonDict, LengthUnit, bot_command_entities, parse_html, text_length

__all__ = [
    "DEFAULT_TOKEN",
    "MAX_CAPTION_LENGTH",
    "MAX_TEXT_LENGTH",
    "CallRecord",
    "FakeTelegram",
    "SentCall",
    "UploadedFile",
]

ChatType = Literal["private", "group", "supergroup", "channel"]

DEFAULT_TOKEN = "123456789:AAFakeTelegramTokenForTests-0123456"  # noqa: S105  # a fake token for a fake server
MAX_TEXT_LENGTH = 4096
MAX_CAPTION_LENGTH = 1024

# A token the Bot API would accept the shape of: a wrong one of this shape is 401, anything else 404.
_TOKEN_SHAPE = re.compile(r"\d+:[A-Za-z0-9_-]{30,}")
_CONFLICT = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"
_NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as "
    "a current content and reply markup of the message"
)
_DEFAULT_ALLOWED_UPDATES = frozenset(
    {
        "message",
        "edited_message",
        "channel_post",
        "edited_channel_post",
        "business_connection",
        "business_message",
        "edited_business_message",
        "deleted_business_messages",
        "inline_query",
        "chosen_inline_result",
        "callback_query",
        "shipping_query",
        "pre_checkout_query",
        "purchased_paid_media",
        "poll",
        "poll_answer",
        "my_chat_member",
        "chat_join_request",
        "chat_boost",
        "removed_chat_boost",
    }
)
_CHAT_ACTIONS = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    }
)


# ----------------------------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UploadedFile:
    """A file the bot uploaded in a multipart request (its bytes are kept out of ``repr``)."""

    param: str
    filename: str
    content_type: str
    size: int
    data: bytes = field(repr=False)
    file_id: str = ""
    file_path: str = ""


@dataclass(frozen=True, slots=True)
class SentCall:
    """A successful outgoing call that made or changed a message: sendMessage, sendPhoto, sendDocument, edits.

    ``text`` and ``caption`` are what the bot sent (HTML included); ``visible`` is what a reader sees after parsing,
    with ``entities`` over it.
    """

    method: str
    chat_id: int | str | None
    text: str | None
    caption: str | None
    parse_mode: str | None
    visible: str
    entities: tuple[JsonDict, ...]
    files: tuple[UploadedFile, ...]
    message_id: int | None
    message: JsonDict | None = field(repr=False)
    params: Mapping[str, str] = field(repr=False)
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One request, failed or not: when, which method, the HTTP status and Telegram's description. No token."""

    method: str
    http_method: str
    status: int
    description: str | None
    params: Mapping[str, str] = field(repr=False)
    files: tuple[UploadedFile, ...] = field(repr=False)
    started_at: float = 0.0
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass
class _Fault:
    status: int
    description: str
    parameters: JsonDict | None
    times: int
    after: int = 0  # calls let through before the fault starts


@dataclass
class _RawAnswer:
    status: int
    content_type: str
    body: bytes
    times: int


@dataclass
class _Chat:
    id: int
    type: ChatType
    title: str
    # A forum supergroup's topics (their message_thread_id); none: not a forum.
    topics: set[int] = field(default_factory=set)

    def as_json(self) -> JsonDict:
        if self.type == "private":
            return {"id": self.id, "type": "private", "first_name": self.title}
        forum = {"is_forum": True} if self.topics else {}
        return {"id": self.id, "type": self.type, "title": self.title, **forum}


class _ApiError(Exception):
    def __init__(self, status: int, description: str, parameters: JsonDict | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters


def _bad_request(reason: str) -> _ApiError:
    return _ApiError(400, f"Bad Request: {reason}")


def _default_description(status: int, retry_after: int, migrate_to_chat_id: int | None) -> tuple[str, JsonDict | None]:
    if migrate_to_chat_id is not None:
        return "Bad Request: group chat was upgraded to a supergroup chat", {"migrate_to_chat_id": migrate_to_chat_id}
    known = {
        400: "Bad Request: chat not found",
        401: "Unauthorized",
        403: "Forbidden: bot was blocked by the user",
        404: "Not Found",
        409: _CONFLICT,
        500: "Internal Server Error",
        502: "Bad Gateway",
    }
    if status == 429:
        return f"Too Many Requests: retry after {retry_after}", {"retry_after": retry_after}
    if status in known:
        return known[status], None
    try:
        return HTTPStatus(status).phrase, None
    except ValueError:
        return f"Error {status}", None


# ----------------------------------------------------------------------------------------------------------------
# The server
# ----------------------------------------------------------------------------------------------------------------

Params = dict[str, Any]
Files = dict[str, UploadedFile]
_Method = Callable[[Params, Files], Any]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeTelegram


class _Handler(QuietHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive, as python-telegram-bot's httpx client expects
    timeout = 60  # an idle keep-alive connection's thread ends after this
    disable_nagle_algorithm = True

    def reply(self) -> None:  # quiet, too: the request line holds the token
        self.server.fake._handle(self)


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                handler.rfile.readline()
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length > 0 else b""


def _parse_multipart(body: bytes, content_type: str) -> tuple[Params, Files]:
    header = email.message.Message()
    header["Content-Type"] = content_type
    boundary = header.get_param("boundary")
    if not isinstance(boundary, str) or not boundary:
        raise _bad_request("can't parse multipart/form-data: no boundary")
    fields: Params = {}
    files: Files = {}
    for raw_part in body.split(b"--" + boundary.encode("latin-1"))[1:]:
        if raw_part.startswith(b"--"):
            break
        head, _, data = raw_part.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        data = data.removesuffix(b"\r\n")
        part = email.message.Message()
        for line in head.decode("utf-8", "replace").split("\r\n"):
            name, _, value = line.partition(":")
            if name.strip():
                part[name.strip()] = value.strip()
        field_name = part.get_param("name", header="content-disposition")
        if not isinstance(field_name, str):
            continue
        filename = part.get_filename()
        if filename is None:
            fields[field_name] = data.decode("utf-8", "replace")
        else:
            files[field_name] = UploadedFile(field_name, filename, part.get_content_type(), len(data), data)
    return fields, files


def _parse_request(handler: BaseHTTPRequestHandler, query: str, body: bytes) -> tuple[Params, Files]:
    params: Params = dict(parse_qsl(query, keep_blank_values=True))
    files: Files = {}
    content_type = handler.headers.get("Content-Type", "")
    media_type = content_type.split(";")[0].strip().lower()
    if not body:
        return params, files
    if media_type == "application/json":
        try:
            decoded = json.loads(body)
        except ValueError:
            raise _bad_request("can't parse JSON object") from None
        if not isinstance(decoded, dict):
            raise _bad_request("can't parse JSON object")
        params.update(decoded)
    elif media_type == "multipart/form-data":
        fields, files = _parse_multipart(body, content_type)
        params.update(fields)
    else:
        params.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    return params, files


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _json_param(params: Params, name: str, error: str) -> Any:
    value = params.get(name)
    if value is None or not isinstance(value, str):
        return value
    if value == "":
        return None
    try:
        return json.loads(value)
    except ValueError:
        raise _bad_request(error) from None


def _int_param(params: Params, name: str, default: int) -> int:
    value = params.get(name)
    if value is None or value == "":
        return default
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return default


def _image_size(data: bytes) -> tuple[int, int]:
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    return 320, 240


class Sleeps:
    """A `Sender`'s sleep that records the retry delays instead of waiting them out."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


class FakeTelegram:
    """A loopback Bot API server: start it with ``with``/``async with``, hand python-telegram-bot its URLs.

    ``known_chats`` are the chat ids the bot may write to (a pushed message adds its chat); any other id answers
    ``400 Bad Request: chat not found`` unless ``accept_any_chat``. ``strict_html`` and ``length_unit`` are described
    in the module docstring. Everything it records is safe to print: the token appears in no record and no ``repr``.
    """

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        known_chats: Iterable[int] = (),
        accept_any_chat: bool = False,
        bot_username: str = "digest_test_bot",
        bot_first_name: str = "Digest",
        strict_html: bool = True,
        length_unit: LengthUnit = "codepoint",
    ) -> None:
        bot_id, _, _ = token.partition(":")
        if not bot_id.isdigit():
            raise ValueError("the token must start with the bot's numeric id and a colon")
        self._token = token
        self.accept_any_chat = accept_any_chat
        self.strict_html = strict_html
        self.length_unit: LengthUnit = length_unit
        self.bot_user: JsonDict = {
            "id": int(bot_id),
            "is_bot": True,
            "first_name": bot_first_name,
            "username": bot_username,
        }
        self._cond = threading.Condition(threading.RLock())
        self._closing = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._chats: dict[int, _Chat] = {}
        self._usernames: dict[str, int] = {}
        self._blocked: set[int] = set()
        self._migrated: dict[int, int] = {}
        self._next_message_id: dict[int, int] = {}
        self._messages: dict[tuple[int, int], JsonDict] = {}
        self._updates: list[JsonDict] = []
        self._update_ids = itertools.count(1)
        self._allowed_updates: frozenset[str] = _DEFAULT_ALLOWED_UPDATES
        self._poll_generation = 0
        self._waiting_pollers = 0
        self._callback_queries: set[str] = set()
        self._commands: dict[str, list[JsonDict]] = {}
        self._files: dict[str, UploadedFile] = {}
        self._file_ids = itertools.count(1)
        self._faults: dict[str, list[_Fault]] = {}
        self._raw_answers: dict[str, list[_RawAnswer]] = {}
        self._delays: dict[str, list[float]] = {}
        # Trickled answers: method → [(chat id or None for any, seconds per byte, times left)].
        self._trickles: dict[str, list[list[Any]]] = {}
        self._sent: list[SentCall] = []
        self._calls: list[CallRecord] = []
        self._internal_errors: list[BaseException] = []
        self._webhook: tuple[str, str] | None = None
        self._methods: dict[str, _Method] = {
            "getme": self._get_me,
            "getchat": self._get_chat,
            "getupdates": self._get_updates,
            "deletewebhook": self._delete_webhook,
            "setwebhook": self._set_webhook,
            "getwebhookinfo": self._get_webhook_info,
            "setmycommands": self._set_my_commands,
            "getmycommands": self._get_my_commands,
            "deletemycommands": self._delete_my_commands,
            "sendmessage": self._send_message,
            "sendphoto": lambda params, files: self._send_media("sendPhoto", "photo", params, files),
            "senddocument": lambda params, files: self._send_media("sendDocument", "document", params, files),
            "sendchataction": self._send_chat_action,
            "editmessagetext": self._edit_message_text,
            "deletemessage": self._delete_message,
            "answercallbackquery": self._answer_callback_query,
            "getfile": self._get_file,
            "close": lambda params, files: True,
            "logout": lambda params, files: True,
        }
        for chat_id in known_chats:
            self.add_chat(chat_id)

    # -- lifecycle ------------------------------------------------------------------------------------------------

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("FakeTelegram is already started")
        self._closing.clear()
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-telegram", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        self._closing.set()
        with self._cond:
            self._cond.notify_all()  # long polls and bounded waits return now
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    def __repr__(self) -> str:
        state = self.root if self._server is not None else "stopped"
        return f"<FakeTelegram @{self.bot_user['username']} {state}>"

    # -- addresses ------------------------------------------------------------------------------------------------

    @property
    def token(self) -> str:
        return self._token

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeTelegram is not started")
        return int(self._server.server_address[1])

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root}/bot"

    @property
    def base_file_url(self) -> str:
        return f"{self.root}/file/bot"

    # -- chats ----------------------------------------------------------------------------------------------------

    @staticmethod
    def _chat_type_for(chat_id: int) -> ChatType:
        if chat_id > 0:
            return "private"
        return "supergroup" if str(chat_id).startswith("-100") else "group"

    def add_chat(self, chat_id: int, chat_type: ChatType | None = None, title: str | None = None) -> None:
        with self._cond:
            kind = chat_type or self._chat_type_for(chat_id)
            self._chats[chat_id] = _Chat(chat_id, kind, title or ("Tester" if kind == "private" else f"Chat {chat_id}"))

    def add_topic(self, chat_id: int, thread_id: int) -> None:
        """Make ``chat_id`` a forum supergroup holding the topic ``thread_id``."""
        with self._cond:
            chat = self._chats.get(chat_id)
            if chat is None or chat.type != "supergroup":
                self.add_chat(chat_id, "supergroup", chat.title if chat else None)
                chat = self._chats[chat_id]
            chat.topics.add(thread_id)

    @property
    def known_chats(self) -> frozenset[int]:
        with self._cond:
            return frozenset(self._chats)

    def block(self, chat_id: int) -> None:
        with self._cond:
            self._blocked.add(chat_id)

    def unblock(self, chat_id: int) -> None:
        with self._cond:
            self._blocked.discard(chat_id)

    def migrate(self, chat_id: int, new_chat_id: int) -> None:
        with self._cond:
            self._migrated[chat_id] = new_chat_id
            old = self._chats.get(chat_id)
            self.add_chat(new_chat_id, "supergroup", old.title if old else None)

    # -- fault injection ------------------------------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        status: int = 429,
        *,
        retry_after: int = 1,
        description: str | None = None,
        migrate_to_chat_id: int | None = None,
        times: int = 1,
        after: int = 0,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` (``"*"``: any method) with this error, as Telegram words it.

        With ``after``, that many calls are answered normally first (part 1 of a message accepted, part 2 failing).

        429 → ``Too Many Requests: retry after N`` with ``parameters.retry_after``; ``migrate_to_chat_id`` → 400
        ``group chat was upgraded to a supergroup chat``; 400 → ``chat not found``; 403 → ``bot was blocked by the
        user``; 500/502 → ``Internal Server Error``/``Bad Gateway``. ``description`` replaces the wording.
        """
        if status < 400 or times < 1 or after < 0:
            raise ValueError("a fault needs an error status and at least one time")
        if migrate_to_chat_id is not None:
            status = 400
        default, parameters = _default_description(status, retry_after, migrate_to_chat_id)
        with self._cond:
            fault = _Fault(status, description or default, parameters, times, after)
            self._faults.setdefault(method.lower(), []).append(fault)

    def clear_faults(self) -> None:
        """Forget every pending fault and raw answer: Telegram is well again."""
        with self._cond:
            self._faults.clear()
            self._raw_answers.clear()

    def answer_next_raw(
        self, method: str, body: bytes, *, status: int = 200, content_type: str = "text/html", times: int = 1
    ) -> None:
        """Answer the next ``times`` calls of ``method`` (``"*"``: any) with these raw bytes, not the Bot API's JSON.

        What a misbehaving proxy or a wrong API root sends: an HTML page, malformed JSON, ``{"status":"error"}``, a
        302 with an empty body. The call is recorded with ``status`` and no description; nothing is sent.
        """
        if times < 1:
            raise ValueError("a raw answer needs at least one time")
        with self._cond:
            self._raw_answers.setdefault(method.lower(), []).append(_RawAnswer(status, content_type, body, times))

    def _take_raw_answer(self, method: str) -> _RawAnswer | None:
        for key in (method, "*"):
            answers = self._raw_answers.get(key)
            if answers:
                answer = answers[0]
                answer.times -= 1
                if answer.times <= 0:
                    answers.pop(0)
                return answer
        return None

    def delay_next(self, method: str, seconds: float, *, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``method`` (``"*"``: any) ``seconds`` late, for client timeouts."""
        with self._cond:
            self._delays.setdefault(method.lower(), []).extend([seconds] * times)

    def trickle_next(self, method: str, seconds_per_byte: float, *, chat_id: int | None = None, times: int = 1) -> None:
        """Carry out the next ``times`` calls of ``method`` (to ``chat_id`` if given), then answer them crawling.

        The headers go at once, then the body one byte every ``seconds_per_byte`` (a broken proxy): the call itself
        was carried out, as Telegram would have.
        """
        with self._cond:
            self._trickles.setdefault(method.lower(), []).append([chat_id, seconds_per_byte, times])

    def lose_next(self, method: str, *, chat_id: int | None = None, times: int = 1) -> None:
        """Carry out the next ``times`` calls of ``method`` (to ``chat_id`` if given), then hang up without answering.

        The message is in the chat; the bot cannot know it (a lost answer).
        """
        with self._cond:
            self._trickles.setdefault(method.lower(), []).append([chat_id, -1.0, times])

    def _take_trickle(self, method: str, params: Params) -> float:
        with self._cond:
            rules = self._trickles.get(method, [])
            for rule in rules:
                chat, seconds, times = rule
                if times > 0 and (chat is None or str(params.get("chat_id")) == str(chat)):
                    rule[2] = times - 1
                    return float(seconds)
        return 0.0

    def _take_fault(self, method: str) -> _Fault | None:
        for key in (method, "*"):
            faults = self._faults.get(key)
            if faults:
                fault = faults[0]
                if fault.after > 0:
                    fault.after -= 1
                    return None
                fault.times -= 1
                if fault.times <= 0:
                    faults.pop(0)
                return fault
        return None

    def _take_delay(self, method: str) -> float:
        for key in (method, "*"):
            delays = self._delays.get(key)
            if delays:
                return delays.pop(0)
        return 0.0

    # -- incoming updates -----------------------------------------------------------------------------------------

    def _user(self, user_id: int, first_name: str, username: str | None) -> JsonDict:
        user: JsonDict = {"id": user_id, "is_bot": False, "first_name": first_name, "language_code": "en"}
        if username:
            user["username"] = username
        return user

    def push_update(self, update: Mapping[str, Any]) -> JsonDict:
        """Queue a raw update for getUpdates (``update_id`` is assigned); dropped if not in ``allowed_updates``."""
        with self._cond:
            queued = {"update_id": next(self._update_ids), **{k: v for k, v in update.items() if k != "update_id"}}
            kinds = set(queued) - {"update_id"}
            webhook = self._webhook
            if webhook is None and kinds & self._allowed_updates:
                self._updates.append(queued)
                self._cond.notify_all()
        if webhook is not None:
            threading.Thread(target=self._post_to_webhook, args=(queued, *webhook), daemon=True).start()
        return queued

    def push_message(
        self,
        chat_id: int,
        text: str,
        *,
        user_id: int | None = None,
        chat_type: ChatType | None = None,
        first_name: str = "Tester",
        username: str | None = "tester",
        thread_id: int | None = None,
    ) -> JsonDict:
        """Queue an incoming text message as Telegram delivers it, ``bot_command`` entities included; its update.

        ``thread_id``: written in that topic of a forum (`add_topic`), as Telegram marks it.
        """
        with self._cond:
            chat = self._chats.get(chat_id)
            if chat is None or (chat_type is not None and chat.type != chat_type):
                kind = chat_type or self._chat_type_for(chat_id)
                self.add_chat(chat_id, kind, first_name if kind == "private" else None)
                chat = self._chats[chat_id]
            sender = user_id if user_id is not None else (chat_id if chat.type == "private" else 100_000_001)
            message: JsonDict = {
                "message_id": self._new_message_id(chat_id),
                "from": self._user(sender, first_name, username),
                "chat": chat.as_json(),
                "date": int(time.time()),
                "text": text,
            }
            if thread_id is not None:
                message.update(message_thread_id=thread_id, is_topic_message=True)
            entities = bot_command_entities(text)
            if entities:
                message["entities"] = entities
            self._messages[(chat_id, message["message_id"])] = {"message": message, "from_bot": False}
            return self.push_update({"message": message})

    def push_callback_query(
        self, chat_id: int, data: str, *, message_id: int | None = None, user_id: int | None = None
    ) -> JsonDict:
        """Queue a press on an inline button of the bot's message ``message_id`` (its last one by default)."""
        with self._cond:
            if message_id is None:
                mine = [mid for (cid, mid), stored in self._messages.items() if cid == chat_id and stored["from_bot"]]
                message_id = max(mine, default=0)
            stored = self._messages.get((chat_id, message_id))
            sender = user_id if user_id is not None else (chat_id if chat_id > 0 else 100_000_001)
            query_id = str(next(self._update_ids) * 1_000_003)
            self._callback_queries.add(query_id)
            query: JsonDict = {
                "id": query_id,
                "from": self._user(sender, "Tester", "tester"),
                "chat_instance": str(chat_id),
                "data": data,
            }
            if stored is not None:
                query["message"] = stored["message"]
            return self.push_update({"callback_query": query})

    @property
    def pending_updates(self) -> list[JsonDict]:
        with self._cond:
            return list(self._updates)

    # -- what the bot did -----------------------------------------------------------------------------------------

    @property
    def sent(self) -> list[SentCall]:
        with self._cond:
            return list(self._sent)

    def sent_to(self, chat_id: int | str) -> list[SentCall]:
        with self._cond:
            return [call for call in self._sent if call.chat_id == chat_id]

    @property
    def calls(self) -> list[CallRecord]:
        with self._cond:
            return list(self._calls)

    @property
    def commands(self) -> list[JsonDict]:
        with self._cond:
            return [dict(command) for command in self._commands.get(self._scope_key(None, ""), [])]

    @property
    def internal_errors(self) -> list[BaseException]:
        with self._cond:
            return list(self._internal_errors)

    def clear_records(self) -> None:
        with self._cond:
            self._sent.clear()
            self._calls.clear()

    def _wait(self, predicate: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: predicate() or self._closing.is_set(), timeout) or not predicate():
                raise TimeoutError(f"{what()} within {timeout}s")

    def wait_for_sent(self, count: int = 1, timeout: float = 5.0) -> list[SentCall]:
        """Block until at least ``count`` messages were sent (a bounded wait on a condition); all sent so far."""
        self._wait(
            lambda: len(self._sent) >= count,
            timeout,
            lambda: f"expected {count} sent message(s), got {len(self._sent)}: {self._sent!r}",
        )
        return self.sent

    def wait_for_calls(self, method: str, count: int = 1, timeout: float = 5.0) -> list[CallRecord]:
        """Block until ``method`` was called at least ``count`` times, failed calls included; those calls."""
        wanted = method.lower()

        def matching() -> list[CallRecord]:
            return [call for call in self._calls if call.method.lower() == wanted]

        self._wait(lambda: len(matching()) >= count, timeout, lambda: f"expected {count} {method} call(s)")
        with self._cond:
            return matching()

    def wait_for_poller(self, timeout: float = 5.0) -> None:
        """Block until a getUpdates long poll is waiting for an update."""
        self._wait(lambda: self._waiting_pollers > 0, timeout, lambda: "no getUpdates long poll was waiting")

    def wait_for_sent_async(self, count: int = 1, timeout: float = 5.0) -> Coroutine[Any, Any, list[SentCall]]:
        """:meth:`wait_for_sent` to await, waiting in a worker thread so the event loop (and the bot) run on."""
        return asyncio.to_thread(self.wait_for_sent, count, timeout)

    def wait_for_calls_async(
        self, method: str, count: int = 1, timeout: float = 5.0
    ) -> Coroutine[Any, Any, list[CallRecord]]:
        """:meth:`wait_for_calls` to await, waiting in a worker thread so the event loop runs on."""
        return asyncio.to_thread(self.wait_for_calls, method, count, timeout)

    def wait_for_poller_async(self, timeout: float = 5.0) -> Coroutine[Any, Any, None]:
        """:meth:`wait_for_poller` to await, waiting in a worker thread so the event loop runs on."""
        return asyncio.to_thread(self.wait_for_poller, timeout)

    # -- HTTP -----------------------------------------------------------------------------------------------------

    def _handle(self, handler: _Handler) -> None:
        started_at, started = time.time(), time.monotonic()
        split = urlsplit(handler.path)
        path = unquote(split.path)
        body = _read_body(handler)
        api = re.fullmatch(r"/bot([^/]*)/([^/]*)", path)
        download = re.fullmatch(r"/file/bot([^/]*)/(.+)", path)
        if download is not None and download.group(1) == self._token:
            self._serve_file(handler, download.group(2), started_at, started)
            return
        method = api.group(2) if api is not None else ""
        params: Params = {}
        files: Files = {}
        try:
            if api is None or download is not None:
                raise _ApiError(404, "Not Found")
            if api.group(1) != self._token:
                # Telegram: a token of the right shape that is not a bot's is 401, a malformed one 404.
                if _TOKEN_SHAPE.fullmatch(api.group(1)):
                    raise _ApiError(401, "Unauthorized")
                raise _ApiError(404, "Not Found")
            implementation = self._methods.get(method.lower())
            if implementation is None:
                raise _ApiError(404, "Not Found")
            params, files = _parse_request(handler, split.query, body)
            with self._cond:
                delay = self._take_delay(method.lower())
            if delay > 0:
                self._closing.wait(delay)
            with self._cond:
                raw = self._take_raw_answer(method.lower())
            if raw is not None:
                self._answer_raw(handler, method, raw, params, files, started_at, started)
                return
            with self._cond:
                fault = self._take_fault(method.lower())
            if fault is not None:
                raise _ApiError(fault.status, fault.description, fault.parameters)
            result = implementation(params, files)
            status, payload = 200, {"ok": True, "result": result}
        except _ApiError as error:
            status = error.status
            payload = {"ok": False, "error_code": error.status, "description": error.description}
            if error.parameters:
                payload["parameters"] = error.parameters
        except Exception as error:  # a bug here must show in the test, not hang the bot: record it, answer 500
            with self._cond:
                self._internal_errors.append(error)
            status = 500
            payload = {"ok": False, "error_code": 500, "description": "Internal Server Error"}
        record = CallRecord(
            method=method,
            http_method=handler.command,
            status=status,
            description=payload.get("description"),
            params={key: _as_text(value) for key, value in params.items()},
            files=tuple(files.values()),
            started_at=started_at,
            duration=time.monotonic() - started,
        )
        with self._cond:
            self._calls.append(record)
            self._cond.notify_all()
        trickle = self._take_trickle(method.lower(), params)
        body = json.dumps(payload, ensure_ascii=False).encode()
        if trickle < 0:
            handler.close_connection = True  # no status line at all: the answer is lost
            return
        if trickle > 0:
            self._write_trickling(handler, status, body, trickle)
            return
        self._write(handler, status, body, "application/json")

    def _write_trickling(self, handler: _Handler, status: int, body: bytes, seconds_per_byte: float) -> None:
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.flush()
            for index in range(len(body)):
                if self._closing.wait(seconds_per_byte):
                    break
                handler.wfile.write(body[index : index + 1])
                handler.wfile.flush()
        except OSError:
            pass
        handler.close_connection = True

    def _answer_raw(
        self,
        handler: _Handler,
        method: str,
        raw: _RawAnswer,
        params: Params,
        files: Files,
        started_at: float,
        started: float,
    ) -> None:
        record = CallRecord(
            method=method,
            http_method=handler.command,
            status=raw.status,
            description=None,
            params={key: _as_text(value) for key, value in params.items()},
            files=tuple(files.values()),
            started_at=started_at,
            duration=time.monotonic() - started,
        )
        with self._cond:
            self._calls.append(record)
            self._cond.notify_all()
        self._write(handler, raw.status, raw.body, raw.content_type)

    def _serve_file(self, handler: _Handler, file_path: str, started_at: float, started: float) -> None:
        with self._cond:
            stored = next((f for f in self._files.values() if f.file_path == file_path), None)
            status = 200 if stored is not None else 404
            self._calls.append(
                CallRecord(
                    method="file",
                    http_method=handler.command,
                    status=status,
                    description=None if stored is not None else "Not Found",
                    params={"file_path": file_path},
                    files=(),
                    started_at=started_at,
                    duration=time.monotonic() - started,
                )
            )
            self._cond.notify_all()
        if stored is None:
            body = json.dumps({"ok": False, "error_code": 404, "description": "Not Found"}).encode()
            self._write(handler, 404, body, "application/json")
        else:
            self._write(handler, 200, stored.data, stored.content_type or "application/octet-stream")

    def _write(self, handler: _Handler, status: int, body: bytes, content_type: str) -> None:
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", content_type)
            handler.send_header("Content-Length", str(len(body)))
            if self._closing.is_set():
                handler.send_header("Connection", "close")
                handler.close_connection = True
            handler.end_headers()
            handler.wfile.write(body)
        except OSError:
            handler.close_connection = True  # the client gave up first, as a timeout test wants

    # -- chat resolution and message building -------------------------------------------------------------------

    @staticmethod
    def _scope_key(scope: Any, language_code: str) -> str:
        return json.dumps(scope or {"type": "default"}, sort_keys=True) + "|" + language_code

    def _new_message_id(self, chat_id: int) -> int:
        message_id = self._next_message_id.get(chat_id, 1)
        self._next_message_id[chat_id] = message_id + 1
        return message_id

    def _resolve_chat(self, params: Params) -> _Chat:
        """The chat of ``chat_id``, or Telegram's refusal: empty, upgraded to a supergroup, not found."""
        raw = params.get("chat_id")
        if raw is None or str(raw).strip() == "":
            raise _bad_request("chat_id is empty")
        text = str(raw).strip()
        if text.startswith("@"):
            chat_id = self._usernames.get(text.lower())
            if chat_id is None:
                if not self.accept_any_chat:
                    raise _bad_request("chat not found")
                chat_id = -1_000_000_000_000 - len(self._usernames) - 1
                self._usernames[text.lower()] = chat_id
                self.add_chat(chat_id, "channel", text[1:])
        else:
            try:
                chat_id = int(text)
            except ValueError:
                raise _bad_request("chat not found") from None
        if chat_id in self._migrated:
            raise _ApiError(
                400,
                "Bad Request: group chat was upgraded to a supergroup chat",
                {"migrate_to_chat_id": self._migrated[chat_id]},
            )
        chat = self._chats.get(chat_id)
        if chat is None:
            if not self.accept_any_chat:
                raise _bad_request("chat not found")
            self.add_chat(chat_id)
            chat = self._chats[chat_id]
        return chat

    def _check_blocked(self, chat: _Chat) -> None:
        if chat.id not in self._blocked:
            return
        reason = {
            "private": "bot was blocked by the user",
            "group": "bot was kicked from the group chat",
            "supergroup": "bot was kicked from the supergroup chat",
            "channel": "bot is not a member of the channel chat",
        }[chat.type]
        raise _ApiError(403, f"Forbidden: {reason}")

    def _formatted(self, raw: str, parse_mode: str | None, explicit_entities: Any) -> tuple[str, list[JsonDict]]:
        """The visible text and entities of ``raw`` under ``parse_mode`` (no parse mode: literal)."""
        mode = (parse_mode or "").lower()
        if mode == "html":
            try:
                return parse_html(raw, strict=self.strict_html)
            except HtmlParseError as error:
                raise _bad_request(f"can't parse entities: {error}") from None
        if mode in ("", "markdown", "markdownv2"):
            # Markdown is not parsed by this fake: the text is kept as sent.
            entities = explicit_entities if isinstance(explicit_entities, list) and not mode else []
            return raw, [dict(entity) for entity in entities if isinstance(entity, dict)]
        raise _bad_request("unsupported parse_mode")

    def _markup(self, params: Params) -> JsonDict | None:
        markup = _json_param(params, "reply_markup", "can't parse reply keyboard markup JSON object")
        if markup is not None and not isinstance(markup, dict):
            raise _bad_request("can't parse reply keyboard markup JSON object")
        return markup

    def _record(
        self,
        method: str,
        params: Params,
        *,
        chat_id: int | str | None,
        text: str | None = None,
        caption: str | None = None,
        visible: str = "",
        entities: list[JsonDict] | None = None,
        files: tuple[UploadedFile, ...] = (),
        message: JsonDict | None = None,
    ) -> None:
        parse_mode = params.get("parse_mode")
        call = SentCall(
            method=method,
            chat_id=chat_id,
            text=text,
            caption=caption,
            parse_mode=str(parse_mode) if parse_mode else None,
            visible=visible,
            entities=tuple(entities or ()),
            files=files,
            message_id=message.get("message_id") if message else None,
            message=message,
            params={key: _as_text(value) for key, value in params.items()},
            at=time.time(),
        )
        self._sent.append(call)
        self._cond.notify_all()

    def _topic_of(self, chat: _Chat, params: Params) -> int | None:
        """The topic a message goes to: its ``message_thread_id``, else the topic of the message it replies to.

        As Telegram does in a forum: an unknown topic (or one given in a chat that is no forum) is refused, and a
        reply without a topic lands in the topic of the message it answers.
        """
        raw = params.get("message_thread_id")
        if raw not in (None, ""):
            thread = _int_param(params, "message_thread_id", 0)
            if thread not in chat.topics:
                raise _bad_request("message thread not found")
            return thread
        replying = _json_param(params, "reply_parameters", "can't parse reply parameters JSON object")
        if isinstance(replying, dict) and chat.topics:
            answered = self._messages.get((chat.id, _int_param(replying, "message_id", 0)))
            if answered is not None:
                topic = answered["message"].get("message_thread_id")
                return topic if isinstance(topic, int) else None
        return None

    def _base_message(self, chat: _Chat, markup: JsonDict | None, thread: int | None = None) -> JsonDict:
        message: JsonDict = {"message_id": self._new_message_id(chat.id), "date": int(time.time())}
        if thread is not None:
            message.update(message_thread_id=thread, is_topic_message=True)
        if chat.type == "channel":
            message["sender_chat"] = chat.as_json()
        else:
            message["from"] = dict(self.bot_user)
        message["chat"] = chat.as_json()
        if markup and "inline_keyboard" in markup:
            message["reply_markup"] = markup
        return message

    # -- methods --------------------------------------------------------------------------------------------------

    def _get_me(self, params: Params, files: Files) -> JsonDict:
        return {
            **self.bot_user,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }

    def _get_chat(self, params: Params, files: Files) -> JsonDict:
        """The chat as `getChat` answers it (a ChatFullInfo, the fields the digest reads); refusals as for a send."""
        with self._cond:
            chat = self._resolve_chat(params)
            self._check_blocked(chat)
            return {**chat.as_json(), "accent_color_id": 0, "max_reaction_count": 11}

    def _get_updates(self, params: Params, files: Files) -> list[JsonDict]:
        offset = _int_param(params, "offset", 0)
        limit = min(max(_int_param(params, "limit", 100), 1), 100)
        try:
            timeout = max(float(params.get("timeout") or 0), 0.0)
        except (TypeError, ValueError):
            timeout = 0.0
        allowed = _json_param(params, "allowed_updates", "can't parse allowed_updates JSON array")
        deadline = time.monotonic() + timeout
        with self._cond:
            if isinstance(allowed, list):
                self._allowed_updates = frozenset(map(str, allowed)) or _DEFAULT_ALLOWED_UPDATES
            if offset > 0:  # confirming: everything before offset is forgotten
                self._updates = [u for u in self._updates if u["update_id"] >= offset]
            elif offset < 0:
                self._updates = self._updates[offset:]
            self._poll_generation += 1
            generation = self._poll_generation
            self._cond.notify_all()  # an older long poll now ends with 409, as on Telegram
            while True:
                if generation != self._poll_generation:
                    raise _ApiError(409, _CONFLICT)
                ready = self._updates[:limit]
                remaining = deadline - time.monotonic()
                if ready or remaining <= 0 or self._closing.is_set():
                    return ready
                self._waiting_pollers += 1
                self._cond.notify_all()
                try:
                    self._cond.wait(remaining)
                finally:
                    self._waiting_pollers -= 1

    def _delete_webhook(self, params: Params, files: Files) -> bool:
        with self._cond:
            self._webhook = None
            if str(params.get("drop_pending_updates", "")).lower() in ("true", "1"):
                self._updates.clear()
        return True

    def _set_webhook(self, params: Params, files: Files) -> bool:
        url = _as_text(params.get("url", ""))
        if url and not url.startswith(("http://", "https://")):
            raise _bad_request("bad webhook: Failed to resolve host: Name or service not known")
        with self._cond:
            self._webhook = (url, _as_text(params.get("secret_token", ""))) if url else None
            self._cond.notify_all()
        return True

    def _get_webhook_info(self, params: Params, files: Files) -> JsonDict:
        with self._cond:
            url = self._webhook[0] if self._webhook else ""
            return {"url": url, "has_custom_certificate": False, "pending_update_count": len(self._updates)}

    @property
    def webhook_url(self) -> str | None:
        """The URL set by setWebhook, if any (updates are then POSTed there instead of queued)."""
        with self._cond:
            return self._webhook[0] if self._webhook else None

    def wait_for_webhook(self, timeout: float = 5.0) -> str:
        """Block until the bot has set a webhook; its URL."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._webhook is not None, timeout=timeout):
                raise TimeoutError(f"no setWebhook within {timeout:g} s")
            assert self._webhook is not None
            return self._webhook[0]

    def _post_to_webhook(self, update: JsonDict, url: str, secret: str) -> None:
        """Deliver one update the way Telegram does: a JSON POST carrying the secret token header.

        Telegram keeps retrying an update whose webhook did not answer 2xx; so does this, for up to 20 s (a bot
        registers its webhook a moment before its listener accepts connections).
        """
        body = json.dumps(update).encode()
        headers = {"Content-Type": "application/json"}
        if secret:
            headers["X-Telegram-Bot-Api-Secret-Token"] = secret
        deadline = time.monotonic() + 20.0
        while True:
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310  # test URL
            try:
                with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310  # the bot's own webhook
                    response.read()
                return
            except OSError as exc:
                if time.monotonic() > deadline or self._closing.is_set():
                    self._internal_errors.append(exc)
                    return
                self._closing.wait(0.2)

    def _set_my_commands(self, params: Params, files: Files) -> bool:
        commands = _json_param(params, "commands", "can't parse commands JSON object")
        commands = [] if commands is None else commands
        if not isinstance(commands, list):
            raise _bad_request("expected an Array of BotCommand")
        if len(commands) > 100:
            raise _bad_request("BOT_COMMANDS_TOO_MUCH")
        cleaned: list[JsonDict] = []
        for item in commands:
            if not isinstance(item, dict):
                raise _bad_request("can't parse BotCommand: expected an Object")
            # TDLib (BotCommand.cpp) trims both, drops a leading "/" and checks the lengths; the server then
            # refuses a command that is not 1-32 of a-z, 0-9 and _ with BOT_COMMAND_INVALID.
            command = str(item.get("command", "")).strip().removeprefix("/")
            description = str(item.get("description", "")).strip()
            if not command:
                raise _bad_request("command must be non-empty")
            if len(command) > 32:
                raise _bad_request("command length must not exceed 32")
            if not description:
                raise _bad_request("command description must be non-empty")
            if len(description) > 256:
                raise _bad_request("command description length must not exceed 256")
            if not re.fullmatch(r"[a-z0-9_]+", command):
                raise _bad_request("BOT_COMMAND_INVALID")
            cleaned.append({"command": command, "description": description})
        scope = _json_param(params, "scope", "can't parse BotCommandScope JSON object")
        with self._cond:
            self._commands[self._scope_key(scope, str(params.get("language_code") or ""))] = cleaned
        return True

    def _get_my_commands(self, params: Params, files: Files) -> list[JsonDict]:
        scope = _json_param(params, "scope", "can't parse BotCommandScope JSON object")
        with self._cond:
            return list(self._commands.get(self._scope_key(scope, str(params.get("language_code") or "")), []))

    def _delete_my_commands(self, params: Params, files: Files) -> bool:
        scope = _json_param(params, "scope", "can't parse BotCommandScope JSON object")
        with self._cond:
            self._commands.pop(self._scope_key(scope, str(params.get("language_code") or "")), None)
        return True

    def _send_message(self, params: Params, files: Files) -> JsonDict:
        raw = params.get("text")
        raw = "" if raw is None else str(raw)
        if raw == "":
            raise _bad_request("message text is empty")
        explicit = _json_param(params, "entities", "can't parse entities JSON object")
        visible, entities = self._formatted(raw, params.get("parse_mode"), explicit)
        markup = self._markup(params)
        with self._cond:
            chat = self._resolve_chat(params)
            if not visible.strip():
                raise _bad_request("message must be non-empty")
            if text_length(visible, self.length_unit) > MAX_TEXT_LENGTH:
                raise _bad_request("message is too long")
            self._check_blocked(chat)
            message = self._base_message(chat, markup, self._topic_of(chat, params))
            message["text"] = visible
            if entities:
                message["entities"] = entities
            self._messages[(chat.id, message["message_id"])] = {"message": message, "from_bot": True}
            self._record(
                "sendMessage", params, chat_id=chat.id, text=raw, visible=visible, entities=entities, message=message
            )
            return message

    def _input_file(self, kind: str, params: Params, files: Files) -> UploadedFile | str:
        upload = files.get(kind)
        value = params.get(kind)
        if upload is None and isinstance(value, str) and value.startswith("attach://"):
            upload = files.get(value.removeprefix("attach://"))
        if upload is not None:
            if upload.size == 0:
                raise _bad_request("file must be non-empty")
            return upload
        if not value:
            raise _bad_request(f"there is no {kind} in the request")
        text = str(value)
        if text in self._files or text.startswith(("http://", "https://")):
            return text
        raise _bad_request("wrong file identifier/HTTP URL specified")

    def _store_file(self, kind: str, upload: UploadedFile) -> UploadedFile:
        number = next(self._file_ids)
        extension = upload.filename.rsplit(".", 1)[-1] if "." in upload.filename else ""
        if kind == "photo":
            folder, suffix = "photos", "jpg"  # Telegram keeps photos as JPEG, whatever was uploaded
        else:
            folder, suffix = "documents", extension if extension.isalnum() and len(extension) <= 8 else "bin"
        stored = UploadedFile(
            param=upload.param,
            filename=upload.filename,
            content_type=upload.content_type,
            size=upload.size,
            data=upload.data,
            file_id=f"FAKE{kind.upper()}{number:06d}{uuid.uuid4().hex[:12]}",
            file_path=f"{folder}/file_{number}.{suffix}",
        )
        self._files[stored.file_id] = stored
        return stored

    def _send_media(self, method: str, kind: str, params: Params, files: Files) -> JsonDict:
        source = self._input_file(kind, params, files)
        raw_caption = params.get("caption")
        raw_caption = None if raw_caption is None else str(raw_caption)
        explicit = _json_param(params, "caption_entities", "can't parse caption entities JSON object")
        visible, entities = self._formatted(raw_caption or "", params.get("parse_mode"), explicit)
        markup = self._markup(params)
        with self._cond:
            chat = self._resolve_chat(params)
            if text_length(visible, self.length_unit) > MAX_CAPTION_LENGTH:
                raise _bad_request("message caption is too long")
            self._check_blocked(chat)
            if isinstance(source, UploadedFile):
                stored = self._store_file(kind, source)
            elif source in self._files:
                stored = self._files[source]
            else:  # an HTTP URL: Telegram would download it; there is nothing to keep here
                stored = self._store_file(kind, UploadedFile(kind, source.rsplit("/", 1)[-1], "", 0, b""))
            file_json: JsonDict = {
                "file_id": stored.file_id,
                "file_unique_id": stored.file_id[-12:],
                "file_size": stored.size,
            }
            message = self._base_message(chat, markup, self._topic_of(chat, params))
            if kind == "photo":
                width, height = _image_size(stored.data)
                message["photo"] = [{**file_json, "width": width, "height": height}]
            else:
                message["document"] = {
                    **file_json,
                    "file_name": stored.filename,
                    "mime_type": stored.content_type or "application/octet-stream",
                }
            if visible:
                message["caption"] = visible
                if entities:
                    message["caption_entities"] = entities
            self._messages[(chat.id, message["message_id"])] = {"message": message, "from_bot": True}
            self._record(
                method,
                params,
                chat_id=chat.id,
                caption=raw_caption,
                visible=visible,
                entities=entities,
                files=(stored,) if isinstance(source, UploadedFile) else (),
                message=message,
            )
            return message

    def _send_chat_action(self, params: Params, files: Files) -> bool:
        action = str(params.get("action") or "")
        with self._cond:
            chat = self._resolve_chat(params)
            if action not in _CHAT_ACTIONS:
                raise _bad_request("wrong parameter action in request")
            self._check_blocked(chat)
            self._topic_of(chat, params)
        return True

    def _edit_message_text(self, params: Params, files: Files) -> JsonDict | bool:
        raw = params.get("text")
        raw = "" if raw is None else str(raw)
        if raw == "":
            raise _bad_request("message text is empty")
        explicit = _json_param(params, "entities", "can't parse entities JSON object")
        visible, entities = self._formatted(raw, params.get("parse_mode"), explicit)
        markup = self._markup(params)
        with self._cond:
            if params.get("inline_message_id"):
                self._record("editMessageText", params, chat_id=None, text=raw, visible=visible, entities=entities)
                return True
            chat = self._resolve_chat(params)
            if not visible.strip():
                raise _bad_request("message must be non-empty")
            message_id = _int_param(params, "message_id", 0)
            if message_id <= 0:
                raise _bad_request("message identifier is not specified")
            stored = self._messages.get((chat.id, message_id))
            if stored is None:
                raise _bad_request("message to edit not found")
            if not stored["from_bot"]:
                raise _bad_request("message can't be edited")
            old = stored["message"]
            if "text" not in old:
                raise _bad_request("there is no text in the message to edit")
            if text_length(visible, self.length_unit) > MAX_TEXT_LENGTH:
                raise _bad_request("MESSAGE_TOO_LONG")
            new_markup = markup if markup and "inline_keyboard" in markup else None
            if old["text"] == visible and old.get("entities", []) == entities and old.get("reply_markup") == new_markup:
                raise _ApiError(400, _NOT_MODIFIED)
            self._check_blocked(chat)
            message = {k: v for k, v in old.items() if k not in ("entities", "reply_markup")}
            message.update(text=visible, edit_date=int(time.time()))
            if entities:
                message["entities"] = entities
            if new_markup:
                message["reply_markup"] = new_markup
            stored["message"] = message
            self._record(
                "editMessageText",
                params,
                chat_id=chat.id,
                text=raw,
                visible=visible,
                entities=entities,
                message=message,
            )
            return message

    def _delete_message(self, params: Params, files: Files) -> bool:
        with self._cond:
            chat = self._resolve_chat(params)
            if self._messages.pop((chat.id, _int_param(params, "message_id", 0)), None) is None:
                raise _bad_request("message to delete not found")
        return True

    def _answer_callback_query(self, params: Params, files: Files) -> bool:
        query_id = str(params.get("callback_query_id") or "")
        with self._cond:
            if query_id not in self._callback_queries:
                raise _bad_request("query is too old and response timeout expired or query ID is invalid")
            self._callback_queries.discard(query_id)
        return True

    def _get_file(self, params: Params, files: Files) -> JsonDict:
        with self._cond:
            stored = self._files.get(str(params.get("file_id") or ""))
        if stored is None:
            raise _bad_request("invalid file_id")
        return {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_id[-12:],
            "file_size": stored.size,
            "file_path": stored.file_path,
        }

"""A Mattermost server lookalike on loopback (REST API v4 and incoming webhooks), as the digest meets it.

- ``POST /api/v4/posts`` (JSON), ``POST /api/v4/files`` (multipart: ``channel_id`` and ``files``), ``GET
  /api/v4/users/me``, ``GET /api/v4/channels/{id}``, and incoming webhooks at ``/hooks/<name>``;
- the bearer token is checked (401), a channel must exist (404) and have the bot as a member (403), a post is at most
  16,383 characters (400), a post's ``file_ids`` must have been uploaded to its channel (400); errors carry Mattermost's
  ``{"id", "message", "status_code"}`` body;
- faults on demand, as for the Slack lookalike: a status (429 with ``Retry-After``, a 5xx), a slow answer, a lost one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.loopback import LoopbackHandler, serving

TOKEN = "mmbottoken0000000000000000"  # noqa: S105  # the fake's own token, nobody's credential
MAX_POST = 16_383


@dataclass(frozen=True)
class Fault:
    """One scripted misbehaviour: an HTTP ``status`` (``retry_after``), a delay, a lost answer."""

    status: int = 200
    retry_after: int | None = None
    delay: float = 0.0
    lost: bool = False


@dataclass
class Post:
    """A post as the server keeps it."""

    channel_id: str
    message: str
    file_ids: list[str]


@dataclass
class FakeMattermost:
    """The server: channels by id (with names), the bot's memberships, posts, files, and the faults to come."""

    channels: dict[str, str] = field(default_factory=dict)  # id → display name
    member_of: set[str] = field(default_factory=set)
    hooks: dict[str, str] = field(default_factory=dict)  # webhook name → channel id
    posts: list[Post] = field(default_factory=list)
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # id → (channel, bytes)
    requests: list[str] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    _serial: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def add_channel(self, channel_id: str, name: str, member: bool = True) -> None:
        self.channels[channel_id] = name
        if member:
            self.member_of.add(channel_id)

    def posted_to(self, channel_id: str) -> list[Post]:
        with self._lock:
            return [post for post in self.posts if post.channel_id == channel_id]

    def hook_url(self, name: str) -> str:
        return f"{self.url}/hooks/{name}"

    def next_fault(self, path: str) -> Fault | None:
        with self._lock:
            self.requests.append(path)
            return self.faults.pop(0) if self.faults else None

    def _new_id(self) -> str:
        self._serial += 1
        return f"{self._serial:026d}"

    def post(self, channel_id: str, message: str, file_ids: list[str]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if channel_id not in self.channels:
                return 404, NOT_FOUND
            if channel_id not in self.member_of:
                return 403, _error(
                    "api.context.permissions.app_error", "You do not have the appropriate permissions.", 403
                )
            if len(message) > MAX_POST:
                return 400, _error("model.post.is_valid.msg.app_error", "Invalid message.", 400)
            for file_id in file_ids:
                if self.files.get(file_id, ("", b""))[0] != channel_id:
                    return 400, _error("api.post.create_post.file_ids.app_error", "Invalid file ids.", 400)
            self.posts.append(Post(channel_id, message, list(file_ids)))
            return 201, {"id": self._new_id(), "channel_id": channel_id, "message": message}

    def upload(self, channel_id: str, data: bytes) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if channel_id not in self.channels:
                return 404, NOT_FOUND
            if channel_id not in self.member_of:
                return 403, _error(
                    "api.context.permissions.app_error", "You do not have the appropriate permissions.", 403
                )
            file_id = self._new_id()
            self.files[file_id] = (channel_id, data)
            return 201, {"file_infos": [{"id": file_id, "size": len(data)}]}


def _error(error_id: str, message: str, status: int) -> dict[str, Any]:
    return {"id": error_id, "message": message, "status_code": status}


NOT_FOUND = _error("app.channel.get.existing.app_error", "Unable to find the channel.", 404)
FORBIDDEN = _error("api.context.permissions.app_error", "You do not have the appropriate permissions.", 403)


def _handler(server: FakeMattermost) -> type[BaseHTTPRequestHandler]:
    class Handler(LoopbackHandler):
        def do_GET(self) -> None:  # noqa: N802  # http.server dispatches on this exact name
            if not self._authorised():
                return
            if self.path == "/api/v4/users/me":
                self._json(200, {"id": "b" * 26, "username": "digest-bot"})
                return
            channel_id = self.path.removeprefix("/api/v4/channels/")
            if channel_id not in server.channels:
                self._json(404, NOT_FOUND)
            elif channel_id not in server.member_of:
                self._json(
                    403,
                    FORBIDDEN,
                )
            else:
                self._json(
                    200,
                    {
                        "id": channel_id,
                        "name": server.channels[channel_id],
                        "display_name": server.channels[channel_id],
                    },
                )

        def do_POST(self) -> None:  # noqa: N802  # http.server dispatches on this exact name
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            fault = server.next_fault(self.path)
            if fault is not None and fault.delay:
                time.sleep(fault.delay)
            if fault is not None and fault.status != 200:
                headers = [("Retry-After", str(fault.retry_after))] if fault.retry_after is not None else []
                self.answer(fault.status, b'{"message": "try later"}', headers)
                return
            if self.path.startswith("/hooks/"):
                channel_id = server.hooks.get(self.path.removeprefix("/hooks/"))
                if channel_id is None:
                    self._json(400, _error("web.incoming_webhook.invalid.app_error", "Invalid webhook.", 400))
                    return
                status, answer = server.post(channel_id, str(json.loads(body or b"{}").get("text", "")), [])
                self._lost_or(
                    fault, lambda: self.answer(status, b"ok" if status < 300 else json.dumps(answer).encode())
                )
                return
            if not self._authorised():
                return
            if self.path == "/api/v4/posts":
                given = json.loads(body or b"{}")
                status, answer = server.post(
                    str(given.get("channel_id", "")), str(given.get("message", "")), list(given.get("file_ids") or [])
                )
            elif self.path == "/api/v4/files":
                fields = _multipart(self.headers.get("Content-Type", ""), body)
                status, answer = server.upload(fields.get("channel_id", b"").decode(), fields.get("files", b""))
            else:
                status, answer = 404, _error("api.context.404.app_error", "Sorry, we could not find the page.", 404)
            self._lost_or(fault, lambda: self._json(status, answer))

        def _authorised(self) -> bool:
            if self.headers.get("Authorization") == f"Bearer {TOKEN}":
                return True
            self._json(401, _error("api.context.session_expired.app_error", "Invalid or expired session.", 401))
            return False

        def _lost_or(self, fault: Fault | None, answer: Any) -> None:
            if fault is not None and fault.lost:
                self.lose_answer()
                return
            answer()

        def _json(self, status: int, answer: dict[str, Any]) -> None:
            self.answer_json(answer, status)

    return Handler


def _multipart(content_type: str, body: bytes) -> dict[str, bytes]:
    """A multipart/form-data body's fields by name (a file's content as its value)."""
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    fields: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = payload
    return fields


@contextmanager
def fake_mattermost() -> Iterator[FakeMattermost]:
    """A Mattermost lookalike on a free 127.0.0.1 port, stopped on exit."""
    server = FakeMattermost()
    with serving(_handler(server)) as url:
        server.url = url
        yield server

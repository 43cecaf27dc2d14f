"""A Slack Web API lookalike on loopback that behaves like Slack where the digest depends on it.

- ``auth.test`` and ``chat.postMessage`` (JSON), ``files.getUploadURLExternal`` and ``files.completeUploadExternal``
  (form-encoded, as Slack takes them), the upload URL they hand out, and incoming webhooks at ``/hooks/<name>``;
- a bearer token is checked (``invalid_auth``), a channel must exist (``channel_not_found``) and have the bot as a
  member (``not_in_channel``), an archived channel refuses (``is_archived``); Block Kit limits are enforced (at most 50
  blocks, a section's text at most 3,000 characters: ``invalid_blocks``; the text at most 40,000: ``msg_too_long``);
  a completed upload needs its bytes uploaded whole;
- faults on demand: the next requests answered 429 with a Retry-After, a 5xx, an ``{"ok": false}`` error, a slow
  answer, or a lost one (the request is taken, then the connection closed without an answer).

A webhook's errors come back as Slack's do: a status and a short text body (``invalid_blocks``, ``no_service``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

from tests.loopback import LoopbackHandler, serving

TOKEN = "xoxb-1111-2222-digestfake"  # noqa: S105  # the fake's own token, nobody's credential


@dataclass(frozen=True)
class Fault:
    """One scripted misbehaviour: an HTTP ``status`` (``retry_after``), a Slack ``error``, a delay, a lost answer."""

    status: int = 200
    error: str | None = None
    retry_after: int | None = None
    delay: float = 0.0
    lost: bool = False  # the request is taken (a message is posted), then the connection is closed unanswered


@dataclass
class Posted:
    """A message as Slack keeps it."""

    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]] | None


@dataclass
class FakeSlack:
    """The workspace: channels by id (and #name), the bot's memberships, messages and files, and the faults to come."""

    channels: dict[str, str] = field(default_factory=dict)  # "#name" → id
    member_of: set[str] = field(default_factory=set)
    archived: set[str] = field(default_factory=set)
    hooks: dict[str, str] = field(default_factory=dict)  # webhook name → channel id
    messages: list[Posted] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, float]] = field(default_factory=list)  # (method, monotonic time)
    faults: list[Fault] = field(default_factory=list)
    _uploads: dict[str, tuple[int, bytes | None]] = field(default_factory=dict)
    _serial: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    root: str = ""

    def add_channel(self, channel_id: str, name: str, member: bool = True) -> None:
        self.channels[f"#{name}"] = channel_id
        if member:
            self.member_of.add(channel_id)

    def posted_to(self, channel_id: str) -> list[Posted]:
        with self._lock:
            return [message for message in self.messages if message.channel == channel_id]

    def calls(self, method: str) -> list[float]:
        with self._lock:
            return [at for name, at in self.requests if name == method]

    @property
    def api_url(self) -> str:
        return f"{self.root}/api"

    def hook_url(self, name: str) -> str:
        return f"{self.root}/hooks/{name}"

    # The service -------------------------------------------------------------------------------------------------

    def next_fault(self, method: str) -> Fault | None:
        with self._lock:
            self.requests.append((method, time.monotonic()))
            return self.faults.pop(0) if self.faults else None

    def _ts(self) -> str:
        self._serial += 1
        return f"{1_784_548_800 + self._serial}.{self._serial:06d}"

    def _resolve(self, channel: str) -> str | None:
        if channel.startswith("#"):
            return self.channels.get(channel)
        return channel if channel in self.channels.values() else None

    def post_message(self, channel: str, text: str, blocks: list[dict[str, Any]] | None) -> dict[str, Any]:
        with self._lock:
            channel_id = self._resolve(channel)
            if channel_id is None:
                return {"ok": False, "error": "channel_not_found"}
            if channel_id in self.archived:
                return {"ok": False, "error": "is_archived"}
            if channel_id not in self.member_of:
                return {"ok": False, "error": "not_in_channel"}
            problem = _blocks_problem(blocks)
            if problem is not None:
                return {"ok": False, "error": problem}
            if len(text) > 40_000:
                return {"ok": False, "error": "msg_too_long"}
            ts = self._ts()
            self.messages.append(Posted(channel_id, ts, text, blocks))
            return {"ok": True, "channel": channel_id, "ts": ts, "message": {"text": text}}

    def info(self, channel_id: str) -> dict[str, Any]:
        with self._lock:
            names = {value: key for key, value in self.channels.items()}
            if channel_id not in names:
                return {"ok": False, "error": "channel_not_found"}
            found = {
                "id": channel_id,
                "name": names[channel_id].removeprefix("#"),
                "is_member": channel_id in self.member_of,
                "is_archived": channel_id in self.archived,
            }
            return {"ok": True, "channel": found}

    def upload_url(self, filename: str, length: str) -> dict[str, Any]:
        with self._lock:
            if not filename or not length.isdigit():
                return {"ok": False, "error": "invalid_arguments"}
            self._serial += 1
            file_id = f"F{self._serial:08d}"
            self._uploads[file_id] = (int(length), None)
            return {"ok": True, "upload_url": f"{self.root}/upload/{file_id}", "file_id": file_id}

    def upload(self, file_id: str, data: bytes) -> bool:
        with self._lock:
            if file_id not in self._uploads:
                return False
            length, _ = self._uploads[file_id]
            self._uploads[file_id] = (length, data)
            return True

    def complete(self, files: list[dict[str, Any]], channel_id: str, comment: str) -> dict[str, Any]:
        with self._lock:
            if channel_id not in self.channels.values():
                return {"ok": False, "error": "channel_not_found"}
            if channel_id not in self.member_of:
                return {"ok": False, "error": "not_in_channel"}
            for one in files:
                length, data = self._uploads.get(str(one.get("id")), (0, None))
                if data is None or len(data) != length:
                    return {"ok": False, "error": "file_upload_incomplete"}
            for one in files:
                self.files.append({"id": one["id"], "channel": channel_id, "comment": comment})
            return {"ok": True, "files": [{"id": one["id"]} for one in files]}


def _blocks_problem(blocks: list[dict[str, Any]] | None) -> str | None:
    if blocks is None:
        return None
    if len(blocks) > 50:
        return "invalid_blocks"
    for block in blocks:
        text = block.get("text", {})
        if block.get("type") != "section" or text.get("type") not in ("mrkdwn", "plain_text"):
            return "invalid_blocks"
        if not 0 < len(text.get("text", "")) <= 3000:
            return "invalid_blocks"
    return None


def _handler(slack: FakeSlack) -> type[BaseHTTPRequestHandler]:
    class Handler(LoopbackHandler):
        def do_POST(self) -> None:  # noqa: N802  # http.server dispatches on this exact name
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            path = self.path.split("?", 1)[0]
            method = path.rsplit("/", 1)[-1] if path.startswith("/api/") else path
            fault = slack.next_fault(method)
            if fault is not None and fault.delay:
                time.sleep(fault.delay)
            if fault is not None and fault.status != 200:
                headers = [("Retry-After", str(fault.retry_after))] if fault.retry_after is not None else []
                self.answer(fault.status, b"rate limited" if fault.status == 429 else b"upstream error", headers)
                return
            if fault is not None and fault.error is not None:
                self.answer_json({"ok": False, "error": fault.error})
                return
            if path.startswith("/hooks/"):
                status, text = self._hook(path.removeprefix("/hooks/"), body)
                self._lost_or(fault, lambda: self.answer(status, text.encode()))
                return
            if path.startswith("/upload/"):
                taken = slack.upload(path.removeprefix("/upload/"), body)
                self.answer(200 if taken else 404, f"OK - {len(body)}".encode() if taken else b"not found")
                return
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.answer_json(
                    {"ok": False, "error": "invalid_auth" if self.headers.get("Authorization") else "not_authed"}
                )
                return
            answer = self._method(method, body)
            self._lost_or(fault, lambda: self.answer_json(answer))

        def _method(self, method: str, body: bytes) -> dict[str, Any]:
            if method == "auth.test":
                return {"ok": True, "team": "lab", "user": "digest", "bot_id": "B0001", "url": "https://lab.slack/"}
            if method == "chat.postMessage":
                given = json.loads(body or b"{}")
                return slack.post_message(
                    str(given.get("channel", "")), str(given.get("text", "")), given.get("blocks")
                )
            form = {key: values[0] for key, values in parse_qs(body.decode()).items()}
            if method == "conversations.info":
                return slack.info(form.get("channel", ""))
            if method == "files.getUploadURLExternal":
                return slack.upload_url(form.get("filename", ""), form.get("length", ""))
            if method == "files.completeUploadExternal":
                files = json.loads(form.get("files", "[]"))
                return slack.complete(files, form.get("channel_id", ""), form.get("initial_comment", ""))
            return {"ok": False, "error": "unknown_method"}

        def _hook(self, name: str, body: bytes) -> tuple[int, str]:
            channel_id = slack.hooks.get(name)
            if channel_id is None:
                return 404, "no_service"
            if channel_id in slack.archived:
                return 410, "channel_is_archived"
            given = json.loads(body or b"{}")
            posted = slack.post_message(channel_id, str(given.get("text", "")), given.get("blocks"))
            if not posted["ok"]:
                return 400, str(posted["error"])
            return 200, "ok"

        def _lost_or(self, fault: Fault | None, answer: Any) -> None:
            if fault is not None and fault.lost:
                self.lose_answer()
                return
            answer()

    return Handler


@contextmanager
def fake_slack() -> Iterator[FakeSlack]:
    """A Slack lookalike on a free 127.0.0.1 port, stopped on exit."""
    slack = FakeSlack()
    with serving(_handler(slack)) as root:
        slack.root = root
        yield slack

"""A webhook receiver on loopback that behaves like one where it matters, and can be told to fail.

It checks the signature (an unsigned or wrongly signed post is answered 401) and keeps the delivery keys it has taken:
a repeat is answered 200 and dropped, as docs/channels.md asks receivers to do.

Each request takes the next scripted `Answer` (then 200): a status with headers (429 + Retry-After, 500, 400, a 302),
a slow answer, or a lost one (the body is read, then the connection is closed without a word: the post arrived, its
answer did not). Every request is recorded with its headers, body and whether its signature verified.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from digest.channels.webhook.signature import SIGNATURE_HEADER, verify
from tests.loopback import LoopbackHandler, serving


@dataclass(frozen=True)
class Answer:
    """One scripted answer: ``status`` with ``headers`` after ``delay`` seconds; ``lost``: close without answering."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0
    lost: bool = False
    body: bytes = b""


@dataclass(frozen=True)
class Received:
    """A request as it arrived."""

    path: str
    headers: dict[str, str]
    body: bytes
    signed: bool
    at: float


@dataclass
class FakeWebhook:
    """The receiver: scripted answers, the requests it saw and the deliveries it took (each key once)."""

    secret: bytes
    script: list[Answer] = field(default_factory=list)
    requests: list[Received] = field(default_factory=list)
    taken: dict[str, list[bytes]] = field(default_factory=dict)  # path → bodies taken, each delivery key once
    _keys: set[tuple[str, str]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def answer_for(self, received: Received) -> Answer:
        with self._lock:
            self.requests.append(received)
            answer = self.script.pop(0) if self.script else Answer()
            if answer.status < 300 and received.signed:
                key = (received.path, received.headers.get("x-digest-delivery", ""))
                if key not in self._keys:  # a repeat of a delivery already taken is answered 200 and dropped
                    self._keys.add(key)
                    self.taken.setdefault(received.path, []).append(received.body)
            return answer

    def to(self, path: str) -> list[Received]:
        """The requests that came to ``path``."""
        with self._lock:
            return [request for request in self.requests if request.path == path]


def _handler(receiver: FakeWebhook) -> type[BaseHTTPRequestHandler]:
    class Handler(LoopbackHandler):
        def do_POST(self) -> None:  # noqa: N802  # http.server dispatches on this exact name
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            headers = {name.lower(): value for name, value in self.headers.items()}
            signed = verify(receiver.secret, headers.get(SIGNATURE_HEADER.lower(), ""), body, int(time.time()))
            answer = receiver.answer_for(Received(self.path, headers, body, signed, time.monotonic()))
            if answer.delay:
                time.sleep(answer.delay)
            if answer.lost:
                self.lose_answer()
                return
            self.answer(answer.status if signed or answer.status >= 300 else 401, answer.body, answer.headers)

    return Handler


@contextmanager
def fake_webhook(secret: bytes, script: list[Answer] | None = None) -> Iterator[FakeWebhook]:
    """A receiver on a free 127.0.0.1 port, stopped on exit."""
    receiver = FakeWebhook(secret=secret, script=list(script or []))
    with serving(_handler(receiver)) as url:
        receiver.url = url
        yield receiver

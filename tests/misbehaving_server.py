"""A loopback HTTP server that answers every request the same (bad) way, and records what it was asked."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import BinaryIO

from tests.loopback import serving


@dataclass(frozen=True)
class Behaviour:
    """What the server answers: a status, a content type, a body, after a delay."""

    status: int = 200
    content_type: str = "application/json"
    body: bytes = b""
    delay_seconds: float = 0.0
    # When > 0: a body of this many bytes, made up piece by piece while it is sent (never held whole), with no
    # Content-Length, so the client learns its size only by reading it. Replaces ``body``.
    stream_bytes: int = 0
    # A Content-Length to declare instead of the body's true length (a body that claims to be huge).
    declared_length: int | None = None
    # A Content-Encoding to declare (the body is sent as given, already encoded).
    content_encoding: str | None = None
    # Hang up without any answer (a connection reset mid-exchange).
    hang_up: bool = False


class QuietHandler(BaseHTTPRequestHandler):
    """A loopback handler that answers GET and POST alike with `reply`, and writes no access log to the test output."""

    def reply(self) -> None:
        """Read the request and answer it."""
        raise NotImplementedError

    def do_GET(self) -> None:  # http.server dispatches on these exact names
        self.reply()

    def do_POST(self) -> None:
        self.reply()

    def log_message(self, format: str, *args: object) -> None:  # signature of the base class
        pass


_STREAM_PIECE = b'{"metric":{"pod":"filler"},"value":[1784592000,"1"]},' * 1000


def _send_body(writer: BinaryIO, behaviour: Behaviour) -> None:
    """Write the body of ``behaviour``: its bytes, or ``stream_bytes`` of series that never close their JSON."""
    if not behaviour.stream_bytes:
        writer.write(behaviour.body)
        return
    head = b'{"status":"success","data":{"resultType":"vector","result":['
    writer.write(head)
    left = behaviour.stream_bytes - len(head)
    while left > 0:
        piece = _STREAM_PIECE[:left]
        writer.write(piece)
        left -= len(piece)


@dataclass(frozen=True)
class Request:
    """One request as received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Served:
    """The server's URL and what it saw: the requests and the most that were in flight at once."""

    url: str
    requests: list[Request] = field(default_factory=list)
    max_in_flight: int = 0
    _in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def leave(self) -> None:
        with self._lock:
            self._in_flight -= 1


@contextmanager
def recording_server(behaviours: Behaviour | Sequence[Behaviour]) -> Iterator[Served]:
    """Serve ``behaviours`` on 127.0.0.1 until the block ends, recording every request.

    A sequence answers the n-th request with its n-th behaviour, and every later one with its last.
    """
    served = Served(url="")
    plan = [behaviours] if isinstance(behaviours, Behaviour) else list(behaviours)

    class Handler(QuietHandler):
        def reply(self) -> None:
            length = int(self.headers.get("Content-Length", "0") or 0)
            body = self.rfile.read(length) if length else b""
            served.enter(Request(self.command, self.path, dict(self.headers.items()), body))
            behaviour = plan[min(len(served.requests), len(plan)) - 1]
            if behaviour.hang_up:
                served.leave()
                self.close_connection = True
                return
            left = False
            try:
                if behaviour.delay_seconds:
                    time.sleep(behaviour.delay_seconds)
                self.send_response(behaviour.status)
                self.send_header("Content-Type", behaviour.content_type)
                if behaviour.content_encoding is not None:
                    self.send_header("Content-Encoding", behaviour.content_encoding)
                if behaviour.declared_length is not None:
                    self.send_header("Content-Length", str(behaviour.declared_length))
                elif not behaviour.stream_bytes:
                    self.send_header("Content-Length", str(len(behaviour.body)))
                # Out of flight before the body goes: once the client has it, it may send its next request at once,
                # and this thread's count must not still hold the answered one (max_in_flight read 2 with 1 slot).
                served.leave()
                left = True
                self.end_headers()
                _send_body(self.wfile, behaviour)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up first, as a timeout test (or a size cap) wants
            finally:
                if not left:
                    served.leave()

    with serving(Handler) as url:
        served.url = url
        yield served


@contextmanager
def misbehaving_server(behaviour: Behaviour | Sequence[Behaviour]) -> Iterator[str]:
    """Serve ``behaviour`` (or a sequence, see `recording_server`) on 127.0.0.1 until the block ends; its URL."""
    with recording_server(behaviour) as served:
        yield served.url

"""The plumbing every loopback server of the tests shares: a threaded server on a free port, answers, lost ones.

`serving` runs a handler class on 127.0.0.1 (port 0: a free one) in a thread, yields its root URL and stops and joins
it on exit. `LoopbackHandler` is the base of the lookalikes' handlers: HTTP/1.1 keep-alive, an answer that gives up
quietly when the client stopped waiting (as a real server moves on after a client's timeout), a lost answer (the
request taken, the connection closed without a word), and no access log on stderr.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LoopbackHandler(BaseHTTPRequestHandler):
    """A lookalike's request handler: answers, JSON answers and lost answers."""

    protocol_version = "HTTP/1.1"

    def answer(self, status: int, body: bytes, headers: Sequence[tuple[str, str]] = ()) -> None:
        """Answer ``status`` with ``body``; nothing more when the client has gone (its timeout)."""
        try:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def answer_json(self, payload: Any, status: int = 200) -> None:
        """Answer ``payload`` as JSON."""
        self.answer(status, json.dumps(payload).encode(), [("Content-Type", "application/json")])

    def lose_answer(self) -> None:
        """The request was taken (its effect happened); close the connection without answering."""
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, format: str, *args: object) -> None:  # http.server's signature
        return None


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on a free 127.0.0.1 port; its root URL; the server stopped and its thread joined on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)

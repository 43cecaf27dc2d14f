"""A loopback HTTP server that answers every request the same bad way, to inject backend faults."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Behaviour:
    """What the server answers: a status, a content type, a body, after a delay."""

    status: int = 200
    content_type: str = "application/json"
    body: bytes = b""
    delay_seconds: float = 0.0


@contextmanager
def misbehaving_server(behaviour: Behaviour) -> Iterator[str]:
    """Serve ``behaviour`` on 127.0.0.1 until the block ends; yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length", "0") or 0)
            if length:
                self.rfile.read(length)
            if behaviour.delay_seconds:
                time.sleep(behaviour.delay_seconds)
            try:
                self.send_response(behaviour.status)
                self.send_header("Content-Type", behaviour.content_type)
                self.send_header("Content-Length", str(len(behaviour.body)))
                self.end_headers()
                self.wfile.write(behaviour.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up first, as a timeout test wants

        do_GET = _answer  # noqa: N815  # http.server dispatches on these exact names
        do_POST = _answer  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:  # signature of the base class
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

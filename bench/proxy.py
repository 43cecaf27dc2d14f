"""A loopback reverse proxy that counts the requests a client sends to a backend, by path.

What it measures and why: the digest's promise is that its cost does not grow with the cluster — it sends a fixed
set of aggregating queries whatever the number of pods or log lines. Putting one of these proxies in front of each
backend (``DIGEST_VM_URL``/``DIGEST_VL_URL`` pointing at the proxies) counts what it really sent, and the bytes in
both directions, on a small and on a big dataset. The proxy forwards each request unchanged (method, path, query
string, body, headers) over a fresh connection and returns the backend's answer whole; it adds a little latency,
so timings are never taken through it.
"""

from __future__ import annotations

import http.client
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import urlsplit

_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host"}
)


@dataclass(frozen=True)
class Recorded:
    """One request as the client sent it: method, path with query string, body and content type."""

    method: str
    target: str
    body: bytes
    content_type: str | None
    seconds: float = 0.0  # how long the backend took to answer it (through this proxy)


@dataclass
class Counts:
    """Requests by path, bytes sent to / received from the backend, and the requests themselves."""

    by_path: Counter[str] = field(default_factory=Counter)
    bytes_up: int = 0
    bytes_down: int = 0
    recorded: list[Recorded] = field(default_factory=list)

    @property
    def requests(self) -> int:
        """All requests, every path."""
        return sum(self.by_path.values())


class _Server(ThreadingHTTPServer):
    """The proxy's server: a client that hung up is not an error of the proxy's (no traceback on stderr)."""

    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        # A digest gives up a query at its timeout (Loki scanning a flood) and closes the connection under the answer.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]  # typeshed: a socket and an address


class CountingProxy:
    """``http://127.0.0.1:<port>`` forwarding to ``upstream`` and counting what passes; a context manager."""

    def __init__(self, upstream: str, timeout_seconds: float = 600.0) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the proxy forwards to plain http://host:port URLs, not {upstream!r}")
        self._host = parts.hostname
        self._port = parts.port or 80
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout_seconds
        self._lock = threading.Lock()
        self.counts = Counts()
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, name="counting-proxy", daemon=True)

    @property
    def url(self) -> str:
        """Where clients should send their requests."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def reset(self) -> Counts:
        """The counts so far, and start counting from zero."""
        with self._lock:
            counts, self.counts = self.counts, Counts()
        return counts

    def _record(self, request: Recorded, down: int) -> None:
        with self._lock:
            self.counts.by_path[urlsplit(request.target).path] += 1
            self.counts.bytes_up += len(request.body)
            self.counts.bytes_down += down
            self.counts.recorded.append(request)

    def _forward(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        try:
            connection.request(method, self._prefix + target, body=body or None, headers=headers)
            response = connection.getresponse()
            payload = response.read()
            return response.status, response.getheaders(), payload
        finally:
            connection.close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {key: value for key, value in self.headers.items() if key.lower() not in _HOP_BY_HOP}
                started = time.perf_counter()
                try:
                    status, response_headers, payload = proxy._forward(self.command, self.path, headers, body)
                except OSError as exc:
                    message = f"proxy: upstream failed: {type(exc).__name__}".encode()
                    self.send_response(502)
                    self.send_header("Content-Length", str(len(message)))
                    self.end_headers()
                    self.wfile.write(message)
                    return
                elapsed = time.perf_counter() - started
                request = Recorded(self.command, self.path, body, self.headers.get("Content-Type"), elapsed)
                proxy._record(request, len(payload))
                self.send_response(status)
                for key, value in response_headers:
                    if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _relay  # noqa: N815  # http.server dispatches on these names
            do_POST = _relay  # noqa: N815

            def log_message(self, format: str, *args: object) -> None:
                return

        return Handler

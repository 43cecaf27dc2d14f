"""Watching the digest itself: `/healthz` and `/metrics` of `digest serve`.

`/healthz` answers 200 only while the bot polls (or serves its webhook) and its scheduler runs — the two things that
must be alive for the noon post to happen — and 503 otherwise, for the Deployment's probes. `/metrics` exposes, in
the Prometheus text format:

- ``digest_last_successful_delivery_timestamp_seconds{chat}`` — the dead man's switch of ``deploy/alerts.yaml``
  (no delivery for 26 h fires); seeded from the state file at start so a restart does not reset it;
- ``digest_deliveries_total{outcome}``;
- ``digest_query_errors_total{source, check}`` — checks that could not see, by backend;
- ``digest_computation_seconds`` — how long a digest takes.

The registry is created per process and passed down (no global singleton). The HTTP server is a minimal asyncio
one: two GET paths, no dependency beyond prometheus_client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from digest.score import Digest

log = logging.getLogger(__name__)

_SOURCES = ("VictoriaMetrics", "VictoriaLogs")


@dataclass
class DigestMetrics:
    """The bot's own metrics, in their own registry."""

    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        self.last_delivery = Gauge(
            "digest_last_successful_delivery_timestamp_seconds",
            "Unix time of the last digest Telegram accepted, per chat.",
            ["chat"],
            registry=self.registry,
        )
        self.deliveries = Counter("digest_deliveries", "Digest posts by outcome.", ["outcome"], registry=self.registry)
        self.query_errors = Counter(
            "digest_query_errors",
            "Checks that could not see, by backend and check.",
            ["source", "check"],
            registry=self.registry,
        )
        self.computation = Histogram(
            "digest_computation_seconds",
            "Time to compute one digest.",
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
            registry=self.registry,
        )

    def observe_digest(self, digest: Digest, seconds: float) -> None:
        """Record a computed digest: its duration and every check that failed to query its backend."""
        self.computation.observe(seconds)
        for finding in digest.findings:
            if finding.error:
                source = next((name for name in _SOURCES if finding.error.startswith(name)), "other")
                self.query_errors.labels(source=source, check=finding.name).inc()

    def exposition(self) -> bytes:
        """The metrics in the Prometheus text format."""
        return generate_latest(self.registry)


class HealthServer:
    """``GET /healthz`` and ``GET /metrics`` on a TCP port, served from the bot's own event loop."""

    def __init__(self, metrics: DigestMetrics, ready: Callable[[], bool], port: int, host: str = "0.0.0.0") -> None:  # noqa: S104  # probes come from the kubelet, outside the pod
        self._metrics = metrics
        self._ready = ready
        self._port = port
        self._host = host
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (useful when started on port 0)."""
        if self._server is None or not self._server.sockets:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        log.info("health and metrics on port %s", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), timeout=5)
            # Drain the headers; nothing in them matters here.
            while (await asyncio.wait_for(reader.readline(), timeout=5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request.decode("latin-1").split()
            method, path = (parts[0], parts[1].split("?")[0]) if len(parts) >= 2 else ("", "")
            if method not in ("GET", "HEAD"):
                status, content_type, body = "405 Method Not Allowed", "text/plain", b"method not allowed\n"
            elif path == "/healthz":
                ok = self._ready()
                status = "200 OK" if ok else "503 Service Unavailable"
                content_type, body = "text/plain", b"ok\n" if ok else b"not ready\n"
            elif path == "/metrics":
                status, content_type, body = "200 OK", CONTENT_TYPE_LATEST, self._metrics.exposition()
            else:
                status, content_type, body = "404 Not Found", "text/plain", b"not found\n"
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
            writer.write(head + (body if method == "GET" else b""))
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

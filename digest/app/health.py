"""Watching the digest itself: `/healthz` and `/metrics` of `digest serve`.

`/healthz` answers 200 only while the bot polls (or serves its webhook) and its scheduler runs — the two things that
must be alive for the noon post to happen — and 503 otherwise, for the Deployment's probes. `/metrics` exposes, in
the Prometheus text format:

- ``digest_last_successful_delivery_timestamp_seconds{chat}`` — the dead man's switch of ``deploy/alerts.yaml``
  (no delivery for 26 h fires); seeded from the state file at start so a restart does not reset it;
- ``digest_deliveries_total{outcome}``;
- ``digest_query_errors_total{source, check}`` — checks that could not see, by backend;
- ``digest_computation_seconds`` — how long a digest takes.

The registry is created per process and passed down (no global singleton). HTTP is tornado's (it comes with
python-telegram-bot's webhook extra and runs on the bot's own asyncio loop), not a parser of our own: malformed
requests get tornado's 400, a client that stalls mid-request is dropped after `IDLE_TIMEOUT_SECONDS` without holding
up the others, and anything but GET/HEAD on the two paths gets 404 or 405.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from tornado.web import Application, RequestHandler

from digest.pipeline.score import Digest, DigestStatus

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
        # Always there while the bot runs: the alert on a bot that is gone reads it, and the one on a bot that never
        # delivered since it was installed starts its 26 h from it (deploy/alerts.yaml).
        self.first_used = Gauge(
            "digest_state_first_used_timestamp_seconds",
            "Unix time the bot's state file was first used (its install).",
            registry=self.registry,
        )
        self.deliveries = Counter("digest_deliveries", "Digest posts by outcome.", ["outcome"], registry=self.registry)
        self.query_errors = Counter(
            "digest_query_errors",
            "Checks that could not see, by backend and check.",
            ["source", "check"],
            registry=self.registry,
        )
        self.poll_failures = Counter(
            "digest_telegram_poll_failures",
            "Polls of Telegram (getUpdates) that failed, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.last_poll = Gauge(
            "digest_telegram_last_poll_success_timestamp_seconds",
            "Unix time of the last poll of Telegram that answered.",
            registry=self.registry,
        )
        self.delivery_failures = Counter(
            "digest_delivery_failures",
            "Scheduled posts that failed, by reason (transient, permanent, busy).",
            ["reason"],
            registry=self.registry,
        )
        self.delivery_state = Gauge(
            "digest_delivery_state",
            "The outcome of the last scheduled post per chat: 1 for its state, 0 for the others.",
            ["chat", "state"],
            registry=self.registry,
        )
        self.state_errors = Counter(
            "digest_state_errors",
            "State file failures in scheduled posts, by kind (busy, replaced, other).",
            ["kind"],
            registry=self.registry,
        )
        self.last_digest_score = Gauge(
            "digest_last_digest_score", "The score (0-10) of the last digest computed.", registry=self.registry
        )
        self.last_digest_status = Gauge(
            "digest_last_digest_status",
            "The status of the last digest computed: 1 for its status, 0 for the others.",
            ["status"],
            registry=self.registry,
        )
        self.last_digest_end = Gauge(
            "digest_last_digest_window_end_timestamp_seconds",
            "Unix time of the end of the last digest's window (which day it was).",
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
        self.last_digest_score.set(digest.score)
        for status in DigestStatus:
            self.last_digest_status.labels(status=status.value).set(1 if digest.status is status else 0)
        self.last_digest_end.set(digest.window.end.timestamp())
        for finding in digest.findings:
            if finding.error:
                source = next((name for name in _SOURCES if finding.error.startswith(name)), "other")
                self.query_errors.labels(source=source, check=finding.name).inc()

    def poll_succeeded(self, at: float) -> None:
        """A poll of Telegram answered (`digest.channels.telegram.polling.PollObserver`)."""
        self.last_poll.set(at)

    def poll_failed(self, reason: str) -> None:
        """A poll of Telegram failed for ``reason``."""
        self.poll_failures.labels(reason=reason).inc()

    def exposition(self) -> bytes:
        """The metrics in the Prometheus text format."""
        return generate_latest(self.registry)


# A probe or a scrape sends its whole request at once; a connection still without a full request after this long is
# a stalled or hostile client, and tornado closes it.
IDLE_TIMEOUT_SECONDS = 10.0
# Probes and scrapes send no body; tornado's default (100 MB, chunked bodies included) would let anyone who reaches
# the port fill the pod's memory.
MAX_BODY_BYTES = 64 * 1024


class _Healthz(RequestHandler):
    """200 while the bot can make the noon post, 503 otherwise."""

    def initialize(self, ready: Callable[[], bool], why: Callable[[], str | None]) -> None:
        self._ready = ready
        self._why = why

    def get(self) -> None:
        ok = self._ready()
        self.set_status(200 if ok else 503)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        # The reason goes in the body: `kubectl describe pod` shows a failed probe's body, so the cause is visible.
        reason = self._why()
        if ok:
            self.finish(f"ok ({reason})\n".encode() if reason else b"ok\n")
        else:
            self.finish(f"not ready: {reason}\n".encode() if reason else b"not ready\n")

    head = get  # tornado sends the headers of a HEAD answer and drops its body


class _Metrics(RequestHandler):
    """The registry in the Prometheus text format."""

    def initialize(self, metrics: DigestMetrics) -> None:
        self._metrics = metrics

    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(self._metrics.exposition())

    head = get


def _log_request(handler: RequestHandler) -> None:
    # Probes arrive every few seconds, and a 503 during start-up is expected: none of it is worth a line by default.
    request = handler.request
    log.debug("%s %s %s", handler.get_status(), request.method, request.uri)


def listen(port: int, host: str = "0.0.0.0") -> list[socket.socket]:  # noqa: S104  # as HealthServer
    """The health port's listening sockets, bound now; `OSError` if the port is taken or not allowed."""
    return bind_sockets(port, address=host)


class HealthServer:
    """``GET /healthz`` and ``GET /metrics`` on a TCP port, served by tornado from the bot's own event loop."""

    def __init__(
        self,
        metrics: DigestMetrics,
        ready: Callable[[], bool],
        port: int,
        host: str = "0.0.0.0",  # noqa: S104  # probes come from the kubelet, outside the pod
        sockets: list[socket.socket] | None = None,
        why: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._metrics = metrics
        self._ready = ready
        self._why = why
        self._port = port
        self._host = host
        self._server: HTTPServer | None = None
        # Sockets bound before the bot started (`listen`), so that a busy port is one line at start-up.
        self._sockets: list[socket.socket] = list(sockets or [])

    @property
    def port(self) -> int:
        """The bound port (useful when started on port 0)."""
        if not self._sockets:
            return self._port
        return int(self._sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Listen on the configured host and port; must run on the loop that will serve the requests."""
        routes: list[Any] = [
            (r"/healthz", _Healthz, {"ready": self._ready, "why": self._why}),
            (r"/metrics", _Metrics, {"metrics": self._metrics}),
        ]
        application = Application(routes, log_function=_log_request)
        self._server = HTTPServer(
            application,
            idle_connection_timeout=IDLE_TIMEOUT_SECONDS,
            body_timeout=IDLE_TIMEOUT_SECONDS,
            max_body_size=MAX_BODY_BYTES,
            max_buffer_size=MAX_BODY_BYTES,
        )
        if not self._sockets:
            self._sockets = bind_sockets(self._port, address=self._host)
        self._server.add_sockets(self._sockets)
        log.info("health and metrics on port %s", self.port)

    async def stop(self) -> None:
        """Close the listening sockets, then every open connection."""
        if self._server is None:
            return
        # stop() closes the listening sockets themselves; open keep-alive connections are closed next.
        self._server.stop()
        await self._server.close_all_connections()
        self._server = None
        self._sockets = []

"""The app's side of the Telegram bot: its settings view, digests and hooks, built once from the settings.

The bot itself (handlers, schedule, exactly-once posts) is `digest.channels.telegram.bot`, in the channels' room; it
never imports the app. What it needs from above is handed to it here: `bot_settings` (the fields it reads),
`DigestService` (single-flight digests and charts) and `AppHooks` — the health server and Prometheus metrics, the
dead man's switch seeded from the state file at start, the heartbeat after a post, and the sources' lines of
`/status`, probed through the digest's own clients.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import httpx

from digest.app.acks import AckDesk
from digest.app.channels import REGISTRY, chat_topics, open_channels
from digest.app.engine import Config
from digest.app.health import HealthServer
from digest.app.service import DigestService, source_status
from digest.app.settings import Settings
from digest.channels.channel import Outcome, PostResult
from digest.channels.state import TELEGRAM, DeliveryState
from digest.channels.telegram.bot import BotSettings, Clock, DigestBot, utc_now
from digest.channels.telegram.polling import PollHealth
from digest.pipeline.state import StateError

log = logging.getLogger(__name__)


def bot_settings(settings: Settings) -> BotSettings:
    """The bot's view of the settings."""
    return BotSettings(
        cluster=settings.cluster,
        zone=settings.zone,
        post_at=settings.post_at,
        weekly_on=settings.weekly_post_day,
        late_grace_hours=settings.late_grace_hours,
        chat_ids=settings.telegram_chat_ids,
        topics=chat_topics(settings),
        admin_ids=frozenset(settings.telegram_admin_ids),
        command_burst=settings.command_burst,
        command_burst_window_seconds=settings.command_burst_window_seconds,
        api_url=settings.telegram_api_url,
        computing_notice_seconds=settings.telegram_computing_notice_seconds,
    )


def metric_chat(channel: str, recipient: str) -> str:
    """A recipient as the metrics' ``chat`` label says it: a Telegram chat's id, another channel's "slack:#ops"."""
    return recipient if channel == TELEGRAM else f"{channel}:{recipient}"


# The delivery failures' reasons, as the metrics label them.
_FAILURE_REASONS = {Outcome.FAILED: "transient", Outcome.FAILED_PERMANENT: "permanent", Outcome.BUSY: "busy"}


@dataclass
class AppHooks:
    """`digest.channels.telegram.bot.BotHooks` for `digest serve`: health, metrics, heartbeat, sources' status."""

    config: Config
    state: DeliveryState
    service: DigestService
    health: HealthServer | None = None
    health_sockets: list[socket.socket] | None = None

    async def started(self, ready: Callable[[], bool], why: Callable[[], str | None]) -> None:
        await asyncio.to_thread(self.seed_metrics)
        metrics = self.service.metrics
        if metrics is not None and self.config.settings.health_port:
            port = self.config.settings.health_port
            self.health = HealthServer(metrics, ready, port, sockets=self.health_sockets, why=why)
            await self.health.start()

    async def stopped(self) -> None:
        if self.health is not None:
            await self.health.stop()
            self.health = None

    def posted(self, channel: str, recipient: str, result: PostResult) -> None:
        metrics = self.service.metrics
        if metrics is None:
            return
        metrics.deliveries.labels(outcome=result.outcome.value).inc()
        chat = metric_chat(channel, recipient)
        if result.outcome is Outcome.SENT:
            metrics.last_delivery.labels(chat=chat).set(time.time())
        for outcome in Outcome:
            value = 1 if outcome is result.outcome else 0
            metrics.delivery_state.labels(chat=chat, state=outcome.value).set(value)
        reason = _FAILURE_REASONS.get(result.outcome)
        if reason is not None:
            metrics.delivery_failures.labels(reason=reason).inc()

    def state_failed(self, error: StateError) -> None:
        metrics = self.service.metrics
        if metrics is not None:
            kind = "replaced" if error.replaced else "busy" if error.busy else "other"
            metrics.state_errors.labels(kind=kind).inc()

    async def delivered(self) -> None:
        """Tell the outside watcher (DIGEST_HEARTBEAT_URL) that a digest went out; a failure is logged, not raised."""
        url = self.config.settings.heartbeat_url
        if url is None:
            return
        try:
            async with httpx.AsyncClient(timeout=10.0) as client:
                response = await client.get(url.get_secret_value())
            if response.status_code >= 300:
                log.warning("heartbeat ping answered HTTP %s", response.status_code)
        except httpx.HTTPError as exc:
            log.warning("heartbeat ping failed: %s", type(exc).__name__)

    async def status_lines(self, now: datetime) -> list[str]:
        return await source_status(self.config, now)

    def seed_metrics(self) -> None:
        """Start the dead man's switch from the state file, so a restart does not look like a silent bot."""
        metrics = self.service.metrics
        if metrics is None:
            return
        try:
            metrics.first_used.set(self.state.first_used(time.time()))
        except StateError as exc:
            log.error("cannot read the state file: %s", exc)
        settings = self.config.settings
        for channel in settings.channels:
            recipients = REGISTRY[channel].recipients(settings)
            if channel == TELEGRAM:
                self._seed(self.state, channel, recipients)
                continue
            try:
                state = DeliveryState(settings.state_path, "metrics", channel=channel)  # read only: no claim
            except StateError as exc:
                log.error("cannot read the state file: %s", exc)
                continue
            try:
                self._seed(state, channel, recipients)
            finally:
                state.close()

    def _seed(self, state: DeliveryState, channel: str, recipients: list[str]) -> None:
        metrics = self.service.metrics
        if metrics is None:
            return
        for one in recipients:
            try:
                sent = [d.sent_at for d in state.latest(state.current(one)) if d.sent_at]
            except StateError as exc:
                log.error("cannot read the state file for %s %s: %s", channel, one, exc)
                continue
            if sent:
                metrics.last_delivery.labels(chat=metric_chat(channel, one)).set(max(sent))


def make_bot(
    config: Config,
    state: DeliveryState,
    service: DigestService,
    clock: Clock = utc_now,
    health_sockets: list[socket.socket] | None = None,
    owner: str = "digest",
) -> DigestBot:
    """The Telegram bot of ``config``, asking ``service`` for digests, with the app's hooks around it."""
    hooks = AppHooks(config=config, state=state, service=service, health_sockets=health_sockets)
    polling = PollHealth(stale_after_seconds=config.settings.telegram_poll_stale_seconds, observer=service.metrics)
    return DigestBot(
        settings=bot_settings(config.settings),
        state=state,
        digests=service,
        hooks=hooks,
        clock=clock,
        polling=polling,
        more_channels=lambda: open_channels(config.settings, owner, skip=frozenset({TELEGRAM})),
        acks=AckDesk(config, service.digest),
        mutes=service.mute_targets,
    )

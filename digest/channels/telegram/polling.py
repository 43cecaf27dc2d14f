"""Whether updates can arrive: the long poll's own answers, so that `/healthz` means "this bot can hear and deliver".

python-telegram-bot keeps its Updater "running" through every failure of ``getUpdates``: after a 401 (token revoked)
it stops polling for good yet still reports running; on 409 (a second bot on the same token) or a 502 storm it retries
every few seconds, logging each. A health endpoint built on "the updater runs" says 200 while no command can arrive.

`PollingRequest` is the ``getUpdates`` request object: it sees every poll's outcome and reports it to `PollHealth`,
which decides:

- 401 or 404 (the token refused): unhealthy at once, until a poll succeeds (none will: a restart with a valid token
  is what helps, which is what a failing liveness probe does, with the cause in the log);
- 409 (another process polls with this token, or a webhook is set): unhealthy at once — this bot hears nothing;
- anything else (5xx, 429, timeouts, a proxy's page, connection errors): unhealthy once polls have failed without a
  success for ``stale_after_seconds`` (2 minutes by default: a Telegram hiccup is not a restart).

Each change of reason is logged once (not every retry), with what to do about it; recovery is logged too. An
observer (the app's metrics) is told of every success and every failure by reason.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from digest.channels.telegram.sender import BotApiRequest

log = logging.getLogger(__name__)

# Why polls fail, as the metrics label them.
UNAUTHORIZED = "unauthorized"
CONFLICT = "conflict"
FLOOD = "flood"
SERVER = "server_error"
NETWORK = "network"
OTHER = "other"

_FATAL = {
    UNAUTHORIZED: "the Telegram API refuses the bot token (revoked or replaced): set a valid one and restart",
    CONFLICT: "another process polls with this bot token (or a webhook is set): stop it, or give this bot its own",
}


class PollObserver(Protocol):
    """Who wants to know about every poll (the app's metrics)."""

    def poll_succeeded(self, at: float) -> None:
        """A poll answered (``at``: Unix time)."""

    def poll_failed(self, reason: str) -> None:
        """A poll failed for ``reason`` (one of this module's reasons)."""


@dataclass
class PollHealth:
    """The long poll's recent history and what it means for health."""

    stale_after_seconds: float = 120.0
    observer: PollObserver | None = None
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    last_success: float | None = None  # Unix time of the last poll that answered
    failing_reason: str | None = None  # the reason of the last failure since the last success
    _failing_since: float | None = None  # monotonic
    _failures: int = 0
    _said: str | None = field(default=None, repr=False)

    def succeeded(self) -> None:
        """A poll answered 200."""
        if self.failing_reason is not None:
            log.warning("polling Telegram works again after %d failed poll(s)", self._failures)
        self.last_success = self.wall()
        self.failing_reason = None
        self._failing_since = None
        self._failures = 0
        self._said = None
        if self.observer is not None:
            self.observer.poll_succeeded(self.last_success)

    def failed(self, reason: str, detail: str) -> None:
        """A poll failed for ``reason``; ``detail`` is the one-line cause, logged when the reason changes."""
        if self._failing_since is None:
            self._failing_since = self.clock()
        self._failures += 1
        self.failing_reason = reason
        if self._said != reason:
            self._said = reason
            advice = _FATAL.get(reason, "retrying; /healthz fails if no poll succeeds for a while")
            log.error("polling Telegram failed (%s: %s): %s", reason, detail, advice)
        if self.observer is not None:
            self.observer.poll_failed(reason)

    def problem(self) -> str | None:
        """Why updates cannot arrive now, or None while they can."""
        reason = self.failing_reason
        if reason is None or self._failing_since is None:
            return None
        if reason in _FATAL:
            return _FATAL[reason]
        failing_for = self.clock() - self._failing_since
        if failing_for >= self.stale_after_seconds:
            return f"no poll of Telegram succeeded for {failing_for:.0f} s ({reason})"
        return None


def reason_of(status: int) -> str:
    """The failure reason of a poll answered with HTTP ``status``."""
    if status in (401, 404):
        return UNAUTHORIZED
    if status == 409:
        return CONFLICT
    if status == 429:
        return FLOOD
    if status >= 500:
        return SERVER
    return OTHER


class PollingRequest(BotApiRequest):
    """The ``getUpdates`` request object: every poll's outcome goes to ``health``."""

    def __init__(self, health: PollHealth, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.health = health

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        try:
            status, payload = await super().do_request(*args, **kwargs)
        except Exception as exc:  # the poll never got a Bot API answer: network, timeout, a proxy's page
            self.health.failed(NETWORK, f"{type(exc).__name__}: {str(exc)[:200]}")
            raise
        if 200 <= status < 300:
            self.health.succeeded()
        else:
            self.health.failed(reason_of(status), f"HTTP {status}")
        return status, payload

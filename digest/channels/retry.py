"""The retry budget every channel's sends share: capped exponential backoff with jitter inside a total time.

A transient failure (429, a timeout, a 5xx) is retried — a service's ``retry_after`` honoured exactly, the others
after `Attempts.backoff` — until the next wait would pass `RetryPolicy.total_seconds`; then the send fails as
transient and a later round retries the delivery. Five minutes by default: inside the daily post's grace many times
over, and short enough that a stop (SIGTERM, 30 s before Kubernetes' SIGKILL) never waits for it — the stop cancels.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta

from digest.channels.channel import DeliveryError

log = logging.getLogger(__name__)

# A failure's reason is said in one line of at most this many characters (a 5xx's whole HTML page is not).
MAX_REASON = 200


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds of the retry loop of one message part."""

    total_seconds: float = 300.0
    base_delay_seconds: float = 1.0
    max_delay_seconds: float = 30.0
    jitter_ratio: float = 0.2


def seconds(value: float | timedelta) -> float:
    """A retry-after as a service library gives it (seconds, or a timedelta) in seconds."""
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def short(text: str) -> str:
    """``text`` on one line and at most ``MAX_REASON`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_REASON else line[: MAX_REASON - 1] + "…"


@dataclass
class Attempts:
    """The retry budget of one request: backoff delays, and giving up when the next wait would exceed the budget."""

    retry: RetryPolicy
    sleep: Callable[[float], Awaitable[None]]
    random_unit: Callable[[], float]
    started: float = field(default_factory=time.monotonic)
    waited: float = 0.0  # the delays asked of sleep, so the budget holds whatever clock the sleep follows
    count: int = 0

    def backoff(self) -> float:
        delay = min(self.retry.max_delay_seconds, self.retry.base_delay_seconds * 2.0**self.count)
        return delay + delay * self.retry.jitter_ratio * self.random_unit()

    async def wait(self, delay: float, reason: str, what: str) -> None:
        """Sleep ``delay`` before the next attempt, or raise a transient `DeliveryError` if the budget is spent."""
        self.count += 1
        spent = max(time.monotonic() - self.started, self.waited)
        if spent + delay > self.retry.total_seconds:
            attempts = "1 attempt" if self.count == 1 else f"{self.count} attempts"
            raise DeliveryError(
                f"gave up after {attempts} in {spent:.0f} s: the next wait ({delay:.0f} s) would pass the "
                f"{self.retry.total_seconds:g} s budget ({reason})",
                permanent=False,
            )
        log.info("%s: %s; retrying in %.1f s", what, reason, delay)
        self.waited += delay
        await self.sleep(delay)


def retry_after(value: str | None, now: float) -> float | None:
    """A ``Retry-After`` header in seconds (delta seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)

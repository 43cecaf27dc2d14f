"""`/digest`'s per-chat burst allowance: a few digests a minute at once, a few more queued, a flood turned away.

A digest costs seconds of backend queries; a chat that sends ten `/digest` in a row must not cost ten. The first
``burst`` requests in a sliding ``window_seconds`` start at once, the next ``max_waiting`` wait for a slot (the asker
is told when), and only requests beyond those are refused — so a flood piles up no work. Usage errors and refused
chats never reach the allowance.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

# Digests per chat that may wait for the allowance; beyond that a request is turned away: a flood piles up no work.
MAX_WAITING = 3


@dataclass
class CommandAllowance:
    """Per chat, at most ``burst`` digests start in any ``window_seconds`` (a sliding window); later ones wait.

    `reserve` hands out the moment each request may start, queueing behind the ones already waiting, and refuses
    when ``max_waiting`` requests of the chat are already waiting. ``clock`` and ``sleep`` are injectable so that
    tests can move time by hand.
    """

    burst: int
    window_seconds: float
    max_waiting: int = MAX_WAITING
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    # Per chat, the start moments granted (past ones within the window, and the future ones of waiting requests).
    _starts: dict[int, deque[float]] = field(default_factory=dict)

    def reserve(self, chat_id: int) -> float | None:
        """Seconds until this request may start (0: now), recorded as granted; None when too many already wait."""
        now = self.clock()
        starts = self._starts.setdefault(chat_id, deque())
        while starts and starts[0] <= now - self.window_seconds:
            starts.popleft()
        if sum(start > now for start in starts) >= self.max_waiting:
            return None
        # The new start must leave at most burst - 1 earlier starts in the window before it.
        start = now if len(starts) < self.burst else max(now, starts[-self.burst] + self.window_seconds)
        starts.append(start)
        return start - now

    def next_free(self, chat_id: int) -> float:
        """Seconds until a waiting place of the chat frees up (when its first waiting request starts)."""
        now = self.clock()
        waiting = [start for start in self._starts.get(chat_id, ()) if start > now]
        return min(waiting, default=now) - now

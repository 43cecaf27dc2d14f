"""The Telegram pacer: messages leave at most at its rate, even after the event loop was held up."""

from __future__ import annotations

import asyncio
import time
from itertools import pairwise

from digest.channels.telegram.sender import Pacer


async def test_a_held_up_event_loop_delays_the_queue_instead_of_bursting_it() -> None:
    """Sleepers whose slots pass while the loop is held up leave one interval apart, not all at once."""
    pacer = Pacer(per_second=20, per_chat_interval=0)
    departures: list[float] = []

    async def one(chat: int) -> None:
        await pacer.wait_turn(chat)
        departures.append(time.monotonic())

    tasks = [asyncio.create_task(one(chat)) for chat in range(30)]
    await asyncio.sleep(0.01)  # every task has reserved its slot and sleeps
    time.sleep(0.6)  # noqa: ASYNC251  # the point: the event loop is held up while a dozen slots pass
    await asyncio.gather(*tasks)
    gaps = [later - earlier for earlier, later in pairwise(departures)]
    # Measured by the task after its turn, so a few milliseconds of scheduling either way; a burst would be ~0.
    assert min(gaps) >= 0.9 / 20


async def test_one_chat_gets_one_message_per_interval() -> None:
    """Three messages to one chat leave a chat interval apart, held-up loop or not."""
    pacer = Pacer(per_second=1000, per_chat_interval=0.2)
    departures: list[float] = []

    async def one() -> None:
        await pacer.wait_turn(42)
        departures.append(time.monotonic())

    tasks = [asyncio.create_task(one()) for _ in range(3)]
    await asyncio.sleep(0.01)
    time.sleep(0.5)  # noqa: ASYNC251  # every reserved slot of the chat passes while the loop is held up
    await asyncio.gather(*tasks)
    assert len(departures) == 3
    assert min(later - earlier for earlier, later in pairwise(departures)) >= 0.9 * 0.2

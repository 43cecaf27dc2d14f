"""/digest's per-chat burst allowance, driven end to end through the fake Bot API with the real backends.

The allowance reads a monotonic clock and sleeps on it; both are injected here (`ManualClock`), so "15 s later" and
"after the window" are moves of the clock, not waits.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from digest.channels.telegram.allowance import CommandAllowance
from digest.channels.telegram.bot import DigestBot
from digest.testbed.embedded import EmbeddedBackends
from tests.command import clean_env, run_digest
from tests.fake_telegram import FakeTelegram, SentCall
from tests.test_bot import ALLOWED, QUIET, TOKEN, make_config, running, visible

DAY_HEADLINE = "CRITICAL 8/10 · homelab · 2026-07-20"
# The bursts ask for the calm day: what they prove is the allowance's, on the hand-moved clock, whatever the day
# (the storm day's 4.5 M error lines, counted for each of their nine digests, cost VictoriaLogs 28 CPU-seconds in a
# full run of 2026-12-05; the calm day costs it 4).
CALM_DAY, CALM_HEADLINE = "2026-07-19", "OK 10/10 · homelab · 2026-07-19"
WINDOW_SECONDS = 60.0


class ManualClock:
    """A monotonic clock moved by hand, and a sleep that returns once the clock has been moved far enough."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._moved = asyncio.Condition()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        until = self.now + seconds
        async with self._moved:
            await self._moved.wait_for(lambda: self.now >= until)

    async def advance(self, seconds: float) -> None:
        async with self._moved:
            self.now += seconds
            self._moved.notify_all()


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    """A Telegram lookalike that knows the allowed chat and reports no bug of its own."""
    with FakeTelegram(TOKEN, known_chats={ALLOWED}) as server:
        yield server
        assert server.internal_errors == []


def manual_allowance(bot: DigestBot, clock: ManualClock) -> None:
    """Give ``bot`` the configured allowance, on the hand-moved clock."""
    settings = bot.settings
    bot.allowance = CommandAllowance(
        burst=settings.command_burst,
        window_seconds=settings.command_burst_window_seconds,
        clock=clock,
        sleep=clock.sleep,
    )


def texts(calls: list[SentCall]) -> list[str]:
    return [visible(call) for call in calls]


_PART = re.compile(r"\n\((\d+)/(\d+)\)$")


def answers_of(calls: list[SentCall]) -> list[str]:
    """Each answer's text, a digest sent in several parts ("(1/2)", "(2/2)") joined into one once it is whole."""
    answers: list[str] = []
    for text in texts(calls):
        part = _PART.search(text)
        if part is not None and part.group(1) != "1" and answers:
            answers[-1] += "\n" + text
        else:
            answers.append(text)
    return answers


async def ask(tg: FakeTelegram, text: str, answers: int) -> list[str]:
    """Send ``text`` to the bot in the allowed chat and wait until the chat holds ``answers`` whole answers in all."""
    tg.push_message(ALLOWED, text, chat_type="supergroup")
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        said = answers_of(tg.sent_to(ALLOWED))
        last = _PART.search(said[-1]) if said else None
        if len(said) >= answers and (last is None or last.group(1) == last.group(2)):
            return said
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{len(said)} answers of {answers} in time")
        await asyncio.sleep(0.05)


async def test_commands_15_s_apart_are_all_answered(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """/digest, a bad date, yesterday and a date, 15 s apart: three digests and a usage reply, nobody told to wait."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite")
    clock = ManualClock()
    async with running(config, QUIET) as bot:
        manual_allowance(bot, clock)
        answers = await ask(tg, "/digest", 1)
        await clock.advance(15)
        answers = await ask(tg, "/digest 2026-13-45", 2)
        await clock.advance(15)
        answers = await ask(tg, "/digest yesterday", 3)
        await clock.advance(15)
        answers = await ask(tg, "/digest 2026-07-20", 4)
    assert answers[0].startswith("CRITICAL 8/10 · homelab · 24h to 2026-07-21 09:00")
    assert "Usage: /digest" in answers[1]
    assert answers[2].splitlines()[0] == DAY_HEADLINE
    assert answers[3].splitlines()[0] == DAY_HEADLINE


async def test_request_over_the_allowance_is_queued_then_answered(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """Four /digest at once: three digests, the fourth is told "computing yours in 60 s" and gets its digest then."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite", command_burst_window_seconds=WINDOW_SECONDS)
    clock = ManualClock()
    async with running(config, QUIET) as bot:
        manual_allowance(bot, clock)
        for _ in range(4):
            tg.push_message(ALLOWED, f"/digest {CALM_DAY}", chat_type="supergroup")
        first = texts(await tg.wait_for_sent_async(4, timeout=60))
        # The queued one sleeps on the hand-moved clock: nothing more can have been sent yet.
        assert len(tg.sent_to(ALLOWED)) == 4
        await clock.advance(WINDOW_SECONDS)
        everything = texts(await tg.wait_for_sent_async(5, timeout=60))
    [queued] = [text for text in first if "computing" in text]
    assert queued == "3 digests per 60 s is this chat's limit: computing yours in 60 s."
    assert [text.splitlines()[0] for text in first if text != queued] == [CALM_HEADLINE] * 3
    assert everything[4].splitlines()[0] == CALM_HEADLINE


async def test_queue_is_bounded_per_chat(corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path) -> None:
    """Seven /digest at once: three answered, three queued, the seventh told when to ask again; the queued follow."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite", command_burst_window_seconds=WINDOW_SECONDS)
    clock = ManualClock()
    async with running(config, QUIET) as bot:
        manual_allowance(bot, clock)
        for _ in range(7):
            tg.push_message(ALLOWED, f"/digest {CALM_DAY}", chat_type="supergroup")
        first = texts(await tg.wait_for_sent_async(7, timeout=60))
        await clock.advance(WINDOW_SECONDS)
        everything = texts(await tg.wait_for_sent_async(10, timeout=60))
    assert sum(text.startswith(CALM_HEADLINE) for text in first) == 3
    assert sum("computing yours in 60 s" in text for text in first) == 3
    assert [text for text in first if "waiting" in text] == [
        "3 digests are already waiting in this chat; ask again in 60 s."
    ]
    assert [text.splitlines()[0] for text in everything[7:]] == [CALM_HEADLINE] * 3


async def test_queued_digests_are_cancelled_at_shutdown(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """A digest still waiting for the allowance when the bot stops is cancelled: no task is left behind."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite", command_burst=1)
    clock = ManualClock()
    async with running(config, QUIET) as bot:
        manual_allowance(bot, clock)
        tg.push_message(ALLOWED, f"/digest {CALM_DAY}", chat_type="supergroup")
        tg.push_message(ALLOWED, f"/digest {CALM_DAY}", chat_type="supergroup")
        answers = texts(await tg.wait_for_sent_async(2, timeout=60))
        assert sum("computing yours in 60 s" in text for text in answers) == 1
    left = [task for task in asyncio.all_tasks() if "_answer_later" in repr(task.get_coro())]
    assert left == []
    assert len(tg.sent_to(ALLOWED)) == 2


def test_retired_cooldown_variable_is_refused_naming_its_replacement(tmp_path: Path) -> None:
    """DIGEST_COMMAND_COOLDOWN_SECONDS left in the environment stops start-up with one line naming what replaced it."""
    result = run_digest(
        "run", "--date", "2026-07-20", env=clean_env(DIGEST_COMMAND_COOLDOWN_SECONDS="20"), cwd=tmp_path
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "digest: DIGEST_COMMAND_COOLDOWN_SECONDS: no longer read; "
        "set DIGEST_COMMAND_BURST and DIGEST_COMMAND_BURST_WINDOW_SECONDS instead"
    ]

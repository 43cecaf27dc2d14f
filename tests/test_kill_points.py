"""A post interrupted at each of its points, and a clock that jumps: what the next run sends, and what the chat reads.

A SIGKILL leaves the state file as it was at that instant; the next process (after the dead claim's lease) goes on
from there. Each point of a post is set up here exactly as a killed process leaves it — the claim, the stored parts,
a send that reached Telegram but was not recorded — and the next run posts. The promise (docs/telegram.md): one
post per chat; the one window that cannot be closed without an idempotency key from Telegram, a message accepted
but not yet recorded, costs at most one repeat of that message, and never of the chart.

The clock: a bot whose wall clock steps forward over the post time (a VM resumed, NTP), backward after it, and over a
whole day posts each day once, late when late, and nothing for a day past its grace; and a real `digest serve`
frozen (SIGSTOP) over its post time posts once per chat when it wakes.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from telegram import Bot

from digest.channels.channel import Outcome, Photo
from digest.channels.state import DeliveryState, Part, PartKind
from digest.channels.telegram.bot import DigestBot, build_application
from digest.channels.telegram.sender import open_bot
from digest.channels.telegram.text import split_html
from digest.testbed.embedded import free_port
from tests.command import DIGEST, clean_env, stop_process
from tests.fake_telegram import FakeTelegram
from tests.test_channels import CannedDigests, noon_settings
from tests.test_delivery_parts import Calls, poster

CHAT = -1001234567890
TOKEN = "123456:AAE-kill-points-token"  # noqa: S105  # a test token for the loopback server
KEY = "daily:2026-07-20"
HTML = "<b>CRITICAL 8/10</b> · homelab · 2026-07-20\n\nfeeds/feed-aggregator wrote 4.5 M error lines"
PNG = b"\x89PNG\r\n" + b"0" * 2000
# A lease that is over by the time the next run looks: the killed process renews nothing.
DEAD_LEASE_SECONDS = 0.05


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    """A Telegram lookalike knowing the chat."""
    with FakeTelegram(TOKEN, known_chats={CHAT}) as server:
        yield server
        assert server.internal_errors == []


def _parts() -> list[Part]:
    [text] = split_html(HTML)
    return [Part(1, PartKind.TEXT, text), Part(2, PartKind.PHOTO, "error lines", PNG, "digest.png")]


async def _killed_at(point: str, state: DeliveryState, bot: Bot) -> None:
    """Leave the state file (and the chat) as a process SIGKILLed at ``point`` of the post leaves them."""
    recipient = str(CHAT)
    assert state.claim(recipient, KEY, DEAD_LEASE_SECONDS)
    if point == "claimed":
        return
    state.store_parts(recipient, KEY, _parts())
    if point == "parts stored":
        return
    # The text's send begun (counted), then Telegram took it.
    assert state.begin_part_send(recipient, KEY, 1, 2)
    text = await bot.send_message(CHAT, split_html(HTML)[0], parse_mode="HTML")
    if point == "text sent, not recorded":
        return
    state.mark_part_sent(recipient, KEY, 1, text.message_id)
    if point == "text recorded":
        return
    assert state.begin_part_send(recipient, KEY, 2, 1)
    chart = await bot.send_photo(CHAT, PNG, caption="error lines")
    if point == "chart sent, not recorded":
        return
    state.mark_part_sent(recipient, KEY, 2, chart.message_id)
    assert point == "every part recorded, the delivery not"


# point -> (texts, charts) the chat has after the next run, and what the next run says
POINTS = {
    "claimed": (1, 1, Outcome.SENT),
    "parts stored": (1, 1, Outcome.SENT),
    # Telegram took the text, the record of it was lost with the process: the one repeat the protocol allows.
    "text sent, not recorded": (2, 1, Outcome.SENT),
    "text recorded": (1, 1, Outcome.SENT),
    # The chart may have arrived: it is never sent twice (the delivery notes it as not confirmed).
    "chart sent, not recorded": (1, 1, Outcome.SENT),
    "every part recorded, the delivery not": (1, 1, Outcome.SENT),
}


@pytest.mark.parametrize("point", list(POINTS))
async def test_a_post_killed_at_each_point_is_finished_by_the_next_run_without_a_second_post(
    tg: FakeTelegram, tmp_path: Path, point: str
) -> None:
    """SIGKILL at each point of a post: the next run sends only what is owed; text at most twice, the chart once."""
    texts, charts, outcome = POINTS[point]
    path = tmp_path / "state.sqlite"
    source = Calls(html=HTML, photo=Photo(png=PNG, caption="error lines"))
    async with open_bot(TOKEN, tg.root) as bot:
        killed = DeliveryState(path, "killed")
        await _killed_at(point, killed, bot)
        killed.close()
        await asyncio.sleep(DEAD_LEASE_SECONDS * 2)
        state = DeliveryState(path, "next")
        try:
            result = await poster(bot, state).post_once(CHAT, KEY, source.message, photo=source.chart)
            again = await poster(bot, state).post_once(CHAT, KEY, source.message, photo=source.chart)
        finally:
            state.close()
    sent = tg.sent_to(CHAT)
    assert sum(call.method == "sendMessage" for call in sent) == texts
    assert sum(call.method == "sendPhoto" for call in sent) == charts
    assert result.outcome is outcome
    assert again.outcome is Outcome.ALREADY_SENT
    # What the killed process stored is what the chat reads: the next run computed nothing once parts were stored.
    assert source.messages == (1 if point == "claimed" else 0)


class SteppedClock:
    """A wall clock a test moves: forward over the post time, back after it, a day on."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


async def test_a_clock_that_steps_forward_back_and_a_day_on_posts_each_day_once(tmp_path: Path) -> None:
    """11:59 → 14:00 (a resume, late but in grace) → 12:30 (NTP back) → next day 11:00 → 19:00 (past grace)."""
    clock = SteppedClock(datetime(2026, 7, 20, 11, 59, tzinfo=UTC))
    state = DeliveryState(tmp_path / "state.sqlite", "stepped")
    digests = CannedDigests()
    with FakeTelegram(TOKEN, known_chats={CHAT}) as server:
        bot = DigestBot(settings=noon_settings(server.root, CHAT), state=state, digests=digests, clock=clock)
        rounds: list[list[Outcome]] = []
        async with build_application(bot, TOKEN):
            for moment in (
                datetime(2026, 7, 20, 11, 59, tzinfo=UTC),  # before the post: the day before is past its grace
                datetime(2026, 7, 20, 14, 0, tzinfo=UTC),  # stepped 2 h over the post time
                datetime(2026, 7, 20, 12, 30, tzinfo=UTC),  # stepped back after it
                datetime(2026, 7, 21, 11, 0, tzinfo=UTC),  # next morning: yesterday's grace is over
                datetime(2026, 7, 21, 19, 0, tzinfo=UTC),  # down over the next post and past its grace
            ):
                clock.now = moment
                rounds.append([result.outcome for result in await bot.post_due()])
        posts = server.sent_to(CHAT)
    state.close()
    assert rounds == [[], [Outcome.SENT], [Outcome.ALREADY_SENT], [], []]
    assert len(posts) == 1
    delivery = DeliveryState(tmp_path / "state.sqlite", "reader")
    try:
        sent = delivery.get(str(CHAT), KEY)
    finally:
        delivery.close()
    assert sent is not None
    assert sent.late  # posted two hours after its moment, and said so
    assert [window.end for window in digests.asked] == [datetime(2026, 7, 20, 12, tzinfo=UTC)]


def _until(moment: datetime) -> None:
    """Wait until the wall clock reaches ``moment`` (bounded: at most the 75 s a post time is ahead in these tests)."""
    deadline = time.monotonic() + 75
    while datetime.now(UTC) < moment:
        assert time.monotonic() < deadline, f"{moment} never came"
        time.sleep(min(0.2, max(0.0, (moment - datetime.now(UTC)).total_seconds())))


def test_a_bot_frozen_over_its_post_time_posts_once_per_chat_when_it_wakes(tmp_path: Path) -> None:
    """`digest serve` SIGSTOPped from 3 s before its post time to 5 s after (a VM pause): one post per chat."""
    second = -1002222222222
    now = datetime.now(UTC)
    moment = (now + timedelta(minutes=1)).replace(second=0, microsecond=0)
    if moment - now < timedelta(seconds=15):  # time to start and poll before the freeze
        moment += timedelta(minutes=1)
    with FakeTelegram(TOKEN, known_chats={CHAT, second}) as tg:
        env = clean_env(
            # Backends nobody answers on: the digest is UNKNOWN at once; the delivery is what is tested.
            DIGEST_VM_URL=f"http://127.0.0.1:{free_port()}",
            DIGEST_VL_URL=f"http://127.0.0.1:{free_port()}",
            DIGEST_CLUSTER="lab",
            DIGEST_TIMEZONE="UTC",
            DIGEST_POST_AT=f"{moment:%H:%M}",
            DIGEST_LATE_GRACE_HOURS="1",  # yesterday's post is past its grace: nothing is due at start
            DIGEST_WEEKLY_POST="off",
            DIGEST_TELEGRAM_CHART="false",
            DIGEST_TELEGRAM_TOKEN=TOKEN,
            DIGEST_TELEGRAM_API_URL=tg.root,
            DIGEST_TELEGRAM_CHAT_IDS=f"{CHAT},{second}",
            DIGEST_STATE_PATH=str(tmp_path / "state.sqlite"),
            DIGEST_HEALTH_PORT="0",
        )
        log_path = tmp_path / "serve.log"
        with log_path.open("w") as log_file:
            process = subprocess.Popen([*DIGEST, "serve"], env=env, stdout=log_file, stderr=subprocess.STDOUT)
            try:
                tg.wait_for_poller(timeout=30)
                _until(moment - timedelta(seconds=3))
                process.send_signal(signal.SIGSTOP)
                _until(moment + timedelta(seconds=5))
                process.send_signal(signal.SIGCONT)
                deadline = time.monotonic() + 60
                while not (tg.sent_to(CHAT) and tg.sent_to(second)):
                    assert process.poll() is None, log_path.read_text()
                    assert time.monotonic() < deadline, log_path.read_text()
                    time.sleep(0.2)
                # A second post, if any, would follow within a second of the first (the bug this guards against).
                watched_until = time.monotonic() + 3
                while time.monotonic() < watched_until:
                    assert len(tg.sent_to(CHAT)) == 1, log_path.read_text()
                    assert len(tg.sent_to(second)) == 1, log_path.read_text()
                    time.sleep(0.2)
            finally:
                if process.poll() is None:
                    process.send_signal(signal.SIGCONT)
                stop_process(process, grace_seconds=30)
    assert "Traceback" not in log_path.read_text()

"""The buttons under a digest: the day before and after, the week, a mute per finding — signed for their chat.

Unit tests of the signature and the layout, then the bot against the Bot-API-shaped server with the corpus on real
VictoriaMetrics + VictoriaLogs: the noon post carries them, a press answers as its command would, a button forwarded
to another allowed chat does nothing there, and a mute acks the finding.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from digest.channels.telegram.buttons import MAX_DATA, button_key, digest_buttons, signed, verified
from digest.testbed.embedded import EmbeddedBackends
from tests.fake_telegram import FakeTelegram
from tests.test_bot import ALLOWED, TOKEN, Clock, make_config, running, visible, wait_until

OTHER = -1009876543210
KEY = button_key(TOKEN)


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    """A Telegram lookalike with two allowed chats."""
    with FakeTelegram(TOKEN, known_chats={ALLOWED, OTHER}) as server:
        yield server
        assert server.internal_errors == []


def _labels(markup: Any) -> list[list[str]]:
    return [[button.text for button in row] for row in markup.inline_keyboard]


def test_a_button_acts_only_in_the_chat_it_was_signed_for() -> None:
    """Signed for one chat: verified there, refused in another, refused when its action or signature is altered."""
    data = signed(KEY, ALLOWED, "d:2026-07-19")
    assert data is not None
    assert len(data.encode()) <= MAX_DATA
    assert verified(KEY, ALLOWED, data) == "d:2026-07-19"
    assert verified(KEY, OTHER, data) is None
    assert verified(KEY, ALLOWED, data.replace("07-19", "07-18")) is None
    assert verified(button_key("another bot's token"), ALLOWED, data) is None
    assert verified(KEY, ALLOWED, "d:2026-07-19") is None  # unsigned
    assert signed(KEY, ALLOWED, "m:" + "x" * 60) is None  # too long to sign: no button rather than a cut one


def test_the_keyboard_offers_the_day_after_only_once_it_has_begun() -> None:
    """Yesterday's digest offers the day before, the last complete week and today; today's has no "next"."""
    yesterday = digest_buttons(KEY, ALLOWED, date(2026, 7, 20), date(2026, 7, 21), ["error_lines", "oom_kills"])
    assert yesterday is not None
    assert _labels(yesterday) == [["◀ 07-19", "Week 2026-W29", "07-21 ▶"], ["🔕 error_lines 7d", "🔕 oom_kills 7d"]]
    today = digest_buttons(KEY, ALLOWED, date(2026, 7, 21), date(2026, 7, 21), [])
    assert today is not None
    assert _labels(today) == [["◀ 07-20", "Week 2026-W29"]]
    over = digest_buttons(KEY, ALLOWED, date(2026, 7, 15), date(2026, 7, 21), [])
    assert over is not None
    assert _labels(over)[0][1] == "Week 2026-W29"  # 07-15's own week, over by 07-21
    many = digest_buttons(KEY, ALLOWED, None, date(2026, 7, 21), [f"check_{n}" for n in range(6)])
    assert many is not None
    assert [len(row) for row in _labels(many)] == [2, 2]  # four mutes at most, two a row


def _markup(call: Any) -> list[list[dict[str, str]]]:
    return json.loads(call.params.get("reply_markup") or "{}").get("inline_keyboard", [])


async def test_the_noon_post_has_buttons_and_a_press_answers_as_its_command(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """07-21's noon post carries ◀ 07-20, the week and the flood's mute; ◀ posts 07-20 as a reply; a mute acks."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite", telegram_chat_ids=f"{ALLOWED},{OTHER}")
    async with running(config, Clock(datetime(2026, 7, 21, 12, 0, 5, tzinfo=UTC))) as bot:
        await wait_until(lambda: ALLOWED in bot.last_results and OTHER in bot.last_results, within=60)
        post = tg.sent_to(ALLOWED)[0]  # the corpus ends 07-21 00:30: a partial day, its diagnosis in a 2nd part
        assert bot.digests.computations == 1  # the mutes are read from the digest the text was made from
        rows = _markup(post)
        labels = [[button["text"] for button in row] for row in rows]
        assert labels[0] == ["◀ 07-20", "Week 2026-W29"]
        assert "🔕 error_lines 7d" in labels[1]
        back = rows[0][0]["callback_data"]
        before = len(tg.sent)
        tg.push_callback_query(ALLOWED, back, message_id=post.message_id)
        answer = (await tg.wait_for_sent_async(before + 1, timeout=60))[before]
        assert answer.chat_id == ALLOWED
        assert visible(answer).startswith("CRITICAL 8/10 · homelab · 2026-07-20")
        assert json.loads(answer.params["reply_parameters"])["message_id"] == post.message_id
        assert _markup(answer)[0][0]["text"] == "◀ 07-19"  # the answer has its own buttons

        # The same button forwarded into the other allowed chat: refused there, nothing posted.
        sent = len(tg.sent)
        tg.push_callback_query(OTHER, back)
        answered = await tg.wait_for_calls_async("answerCallbackQuery", 2, timeout=10)
        assert "does not belong to this chat" in answered[-1].params.get("text", "")
        assert len(tg.sent) == sent

        # The mute: the finding acked by whoever pressed, said in the chat, and the day's digest counts it.
        mute = next(b for row in rows for b in row if b["text"] == "🔕 error_lines 7d")["callback_data"]
        tg.push_callback_query(ALLOWED, mute, message_id=post.message_id)
        acked = (await tg.wait_for_sent_async(sent + 1, timeout=60))[sent]
        assert visible(acked).startswith("Acked error_lines until")
        tg.push_message(ALLOWED, "/digest")  # the 24 h the mute was taken against
        day = (await tg.wait_for_sent_async(sent + 2, timeout=60))[sent + 1]
        assert "· 1 acked" in visible(day).splitlines()[0]

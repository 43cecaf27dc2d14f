"""The buttons under a digest: the day before, the day after, its week, and a mute per finding.

A button answers as the command it stands for (`/digest 2026-07-19`, `/digest week 2026-W29`, `/ack error_lines 7d`),
in the chat it was pressed in, under the same access rules and allowance. Its data is signed for that chat: Telegram
keeps a forwarded message's buttons, and a button forwarded elsewhere (another group, a private chat) must not act
there. The signature is an HMAC of the chat id and the action under a key derived from the bot's token (which only
this bot knows), cut to fit Telegram's 64 bytes of callback data.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from datetime import date, timedelta

from telegram import InlineKeyboardButton, InlineKeyboardMarkup

from digest.pipeline.week import iso_week, last_complete_week, week_days

# Telegram's limit for callback_data, in bytes.
MAX_DATA = 64
# 10 base64 characters: 60 bits, far beyond guessing in the time a button lives.
_SIGNATURE = 10
# Mute buttons under one digest: the first screen names a handful of findings, and a phone shows two per row.
MAX_MUTES = 4
MUTE_FOR = "7d"


def button_key(token: str) -> bytes:
    """The signing key: derived from the bot's token, so that no other setting is needed and no other bot can sign."""
    return hashlib.sha256(f"digest buttons:{token}".encode()).digest()


def _signature(key: bytes, chat_id: int, action: str) -> str:
    digest = hmac.new(key, f"{chat_id}|{action}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode()[:_SIGNATURE]


def signed(key: bytes, chat_id: int, action: str) -> str | None:
    """``action|signature`` for ``chat_id``; None when it would not fit Telegram's 64 bytes."""
    data = f"{action}|{_signature(key, chat_id, action)}"
    return data if len(data.encode()) <= MAX_DATA else None


def verified(key: bytes, chat_id: int, data: str) -> str | None:
    """The action of ``data`` when it was signed for ``chat_id``; None for another chat's button or a forgery."""
    action, _, signature = data.rpartition("|")
    if not action or not hmac.compare_digest(signature, _signature(key, chat_id, action)):
        return None
    return action


@dataclass(frozen=True)
class Action:
    """What a button asks: ``day`` (a calendar day), ``week`` (``2026-W29``) or ``mute`` (a check to ack)."""

    kind: str
    value: str


def parse_action(action: str) -> Action | None:
    """``d:2026-07-19`` / ``w:2026-W29`` / ``m:error_lines``, or None for anything else."""
    kind, _, value = action.partition(":")
    if kind in ("d", "w", "m") and value:
        return Action({"d": "day", "w": "week", "m": "mute"}[kind], value)
    return None


def digest_buttons(
    key: bytes, chat_id: int, day: date | None, today: date, mutes: list[str]
) -> InlineKeyboardMarkup | None:
    """The keyboard under the digest of ``day`` (None: a window that is not a calendar day, no day buttons).

    The day before, the day after when it has begun, the day's ISO week (the last complete one while the day's is
    not over), then one mute per finding (at most
    `MAX_MUTES`); None when there is no button to show.
    """
    rows: list[list[InlineKeyboardButton]] = []
    if day is not None:
        days: list[tuple[str, str]] = [(f"◀ {day - timedelta(days=1):%m-%d}", f"d:{day - timedelta(days=1)}")]
        year, week, _ = day.isocalendar()
        if week_days(year, week)[-1] >= today:  # its week is not over: the last one that is
            year, week = last_complete_week(today)
        days.append((f"Week {iso_week(year, week)}", f"w:{iso_week(year, week)}"))
        if day + timedelta(days=1) <= today:
            days.append((f"{day + timedelta(days=1):%m-%d} ▶", f"d:{day + timedelta(days=1)}"))
        rows.append(_buttons(key, chat_id, days))
    mute = _buttons(key, chat_id, [(f"🔕 {target} {MUTE_FOR}", f"m:{target}") for target in mutes[:MAX_MUTES]])
    rows.extend(mute[index : index + 2] for index in range(0, len(mute), 2))
    rows = [row for row in rows if row]
    return InlineKeyboardMarkup(rows) if rows else None


def _buttons(key: bytes, chat_id: int, labelled: list[tuple[str, str]]) -> list[InlineKeyboardButton]:
    out = []
    for label, action in labelled:
        data = signed(key, chat_id, action)
        if data is not None:  # an action too long to sign within 64 bytes has no button, never a truncated one
            out.append(InlineKeyboardButton(label, callback_data=data))
    return out

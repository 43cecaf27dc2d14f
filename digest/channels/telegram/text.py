"""Fitting a rendered digest into Telegram messages.

Telegram limits a message to 4,096 characters of *visible* text (after entity parsing: tags do not count, ``&amp;``
counts as one character) and counts in UTF-16 code units (an emoji outside the BMP counts two); it renders the first
100 entities of a message and silently drops the formatting of the rest (`MAX_ENTITIES`). The digest's HTML
template keeps every tag inside one line, except its folded sections (expandable blockquotes, each a unit here), so
a cut between lines always leaves balanced tags; this module packs lines into parts, preferring to cut at blank lines
(section boundaries), keeps a folded section whole in one part (unfolding it when it alone is longer than a part),
marks each part "(1/3)", and turns a single line that is longer than a whole message into escaped plain text cut at
the limit.
"""

from __future__ import annotations

import html
import re

MAX_TEXT = 4096
MAX_CAPTION = 1024
# Telegram keeps the first 100 entities of a message and drops the formatting of the rest without a word
# (tdlib/telegram-bot-api#820; TelegramBots#854): a part carries at most this many, so every tag is rendered.
MAX_ENTITIES = 100
_TAG = re.compile(r"<[^>]*>")
_OPENING_TAG = re.compile(r"<(?!/)[^>]*>")


def utf16_length(text: str) -> int:
    """Length as Telegram counts it: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def fit_utf16(text: str, limit: int, ellipsis: str = "…") -> str:
    """``text`` if it fits ``limit`` UTF-16 code units (what Telegram counts), else cut short with ``ellipsis``.

    A character outside the Basic Multilingual Plane (most emoji) counts twice: cutting at ``limit`` characters
    would leave such a caption over the limit, and Telegram refuses it.
    """
    if utf16_length(text) <= limit:
        return text
    budget = limit - utf16_length(ellipsis)
    used = 0
    for index, char in enumerate(text):
        used += 2 if ord(char) > 0xFFFF else 1
        if used > budget:
            return text[:index] + ellipsis
    return text


def visible(html_text: str) -> str:
    """The text a reader sees: tags removed, entities decoded."""
    return html.unescape(_TAG.sub("", html_text))


def visible_length(html_text: str) -> int:
    """Telegram's length of an HTML message."""
    return utf16_length(visible(html_text))


def plain_from_html(html_text: str) -> str:
    """The message as plain text, for resending a part whose entities Telegram rejected."""
    return visible(html_text)


def entity_count(html_text: str) -> int:
    """How many entities Telegram makes of ``html_text``: one per opening tag."""
    return len(_OPENING_TAG.findall(html_text))


def split_html(message: str, limit: int = MAX_TEXT, max_entities: int = MAX_ENTITIES) -> list[str]:
    """Parts of at most ``limit`` visible UTF-16 units and ``max_entities`` entities each, marked (i/n) if several.

    Cut between lines, at sections where they can be; a folded section is kept whole (`_units`).
    """
    if visible_length(message) <= limit and entity_count(message) <= max_entities:
        return [message]
    # Room for the "\n(12/12)" marker.
    budget = limit - 10
    lines: list[str] = []
    for unit in _units(message, budget, max_entities):
        lines.extend(_cut_long_line(unit, budget, max_entities))
    parts: list[list[str]] = [[]]
    size = 0
    entities = 0
    last_blank = -1  # index in the current part of its last blank line, to cut at a section boundary
    for line in lines:
        cost = visible_length(line) + 1
        tags = entity_count(line)
        if parts[-1] and (size + cost > budget or entities + tags > max_entities):
            current = parts[-1]
            carried = current[last_blank + 1 :]
            if (
                0 < last_blank < len(current) - 1
                and _sum_cost(carried) + cost <= budget
                and entity_count("".join(carried)) + tags <= max_entities
            ):
                # Move the unfinished section to the next part instead of splitting it.
                del current[last_blank:]
                parts.append(carried)
                size = _sum_cost(carried)
                entities = entity_count("".join(carried))
            else:
                parts.append([])
                size = 0
                entities = 0
            last_blank = -1
        if not parts[-1] and not line.strip():
            continue  # a part never starts with a blank line
        parts[-1].append(line)
        size += cost
        entities += tags
        if not line.strip():
            last_blank = len(parts[-1]) - 1
    texts = ["\n".join(part).strip("\n") for part in parts if any(line.strip() for line in part)]
    total = len(texts)
    return [f"{text}\n({index}/{total})" for index, text in enumerate(texts, start=1)]


_QUOTE_OPEN = "<blockquote expandable>"
_QUOTE_CLOSE = "</blockquote>"


def _units(message: str, budget: int, max_entities: int) -> list[str]:
    """The message's lines, with each folded section (an expandable blockquote) kept as one unit when it fits a part.

    A section is packed whole or moved to the next part, never cut: a cut would leave its tags unbalanced. One that
    cannot fit a part on its own is unfolded (its quote tags dropped) into lines, each with its tags on it.
    """
    units: list[str] = []
    quote: list[str] = []
    for line in message.split("\n"):
        if not quote and not line.startswith(_QUOTE_OPEN):
            units.append(line)
            continue
        quote.append(line)
        if line.endswith(_QUOTE_CLOSE):
            whole = "\n".join(quote)
            quote = []
            if visible_length(whole) <= budget and entity_count(whole) <= max_entities:
                units.append(whole)
            else:
                units.extend(whole.removeprefix(_QUOTE_OPEN).removesuffix(_QUOTE_CLOSE).split("\n"))
    if quote:  # never closed: not a section this module wrote; its lines as they are
        units.extend(quote)
    return units


def _sum_cost(lines: list[str]) -> int:
    return sum(visible_length(line) + 1 for line in lines)


def _cut_long_line(line: str, budget: int, max_entities: int = MAX_ENTITIES) -> list[str]:
    """A line longer than a message, or with more entities than one takes, becomes plain pieces of ``budget``.

    Escaped plain text: no tag can be cut.
    """
    if visible_length(line) <= budget and entity_count(line) <= max_entities:
        return [line]
    text = visible(line)
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for char in text:
        width = utf16_length(char)
        if size + width > budget:
            pieces.append(html.escape("".join(current), quote=False))
            current, size = [], 0
        current.append(char)
        size += width
    if current:
        pieces.append(html.escape("".join(current), quote=False))
    return pieces

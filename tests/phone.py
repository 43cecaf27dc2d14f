"""A Telegram message as a phone shows it: the visible text wrapped at a phone's width, folded sections closed.

Telegram shows an expandable blockquote closed at three lines with an arrow to open it. ``screen`` lays a message
out that way from what Telegram itself would parse (`tests.telegram_html.parse_html`): the lines a reader sees before
tapping anything, for the tests of the first screen and for reading a digest at phone width (``python -m
tests.phone tests/golden/2026-07-20.html``).

The width is 40 characters: a 360-point-wide phone at Telegram's default text size holds 38-44 characters in a
message bubble (measured on the corpus's lines; emoji count as one here, a little generous).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from tests.telegram_html import parse_html

PHONE_WIDTH = 40
# Lines a closed expandable blockquote shows before its arrow.
FOLDED_LINES = 3


def _utf16_slice(text: str, start: int, end: int) -> str:
    encoded = text.encode("utf-16-le", "surrogatepass")
    return encoded[start * 2 : end * 2].decode("utf-16-le", "surrogatepass")


def _wrapped(text: str, width: int) -> list[str]:
    lines: list[str] = []
    for line in text.split("\n"):
        lines.extend(textwrap.wrap(line, width, break_long_words=True, break_on_hyphens=False) or [""])
    return lines


def screen(html: str, width: int = PHONE_WIDTH) -> list[str]:
    """The message's lines at phone width, each folded section closed (its first lines, then "▸ …")."""
    text, entities = parse_html(html)
    folds = sorted(
        (entity["offset"], entity["offset"] + entity["length"])
        for entity in entities
        if entity["type"] == "expandable_blockquote"
    )
    total = len(text.encode("utf-16-le", "surrogatepass")) // 2
    lines: list[str] = []
    at = 0
    for start, end in folds:
        lines.extend(_wrapped(_utf16_slice(text, at, start).strip("\n"), width) if start > at else [])
        inside = _wrapped(_utf16_slice(text, start, end).strip("\n"), width - 2)
        shown = inside[:FOLDED_LINES]
        lines.extend(f"┃ {line}" for line in shown)
        if len(inside) > FOLDED_LINES:
            lines[-1] += " ▸"
        at = end
    if at < total:
        lines.extend(_wrapped(_utf16_slice(text, at, total).strip("\n"), width))
    return [line for line in lines]


def first_screen(html: str, width: int = PHONE_WIDTH) -> list[str]:
    """The lines before the first folded section: what a reader sees without scrolling or tapping."""
    lines = screen(html, width)
    for index, line in enumerate(lines):
        if line.startswith("┃ "):
            return [line for line in lines[:index] if line.strip()]
    return [line for line in lines if line.strip()]


def main(paths: list[str]) -> None:
    """Print each message at phone width, between rules as wide as the phone."""
    for path in paths:
        print(f"── {path} " + "─" * max(0, PHONE_WIDTH - len(path) - 4))
        for line in screen(Path(path).read_text()):
            print(line)
    print("─" * PHONE_WIDTH)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Cutting a digest into the pieces a chat service takes, at its sections where it can.

At blank lines (the digest's sections) first, then at lines, then at words — never inside an HTML-style escape
(``&amp;``), which Slack's mrkdwn and Telegram's HTML both use.

Deterministic: the same text is always cut the same way, so a delivery's stored parts re-pack into the same pieces
on every retry.
"""

from __future__ import annotations


def _cut(line: str, limit: int) -> list[str]:
    """A line longer than a section, cut into pieces that fit (never inside an escape like ``&amp;``)."""
    pieces: list[str] = []
    while len(line) > limit:
        cut = limit
        space = line.rfind(" ", limit - 200, limit)
        if space > 0:
            cut = space + 1  # at a word: a link or a bold span is rarely cut then
        amp = line.rfind("&", cut - 6, cut)
        if amp != -1 and ";" not in line[amp:cut]:
            cut = amp
        pieces.append(line[:cut])
        line = line[cut:]
    pieces.append(line)
    return pieces


def sections(text: str, limit: int) -> list[str]:
    """``text`` packed into pieces of at most ``limit`` characters, cut at blank lines (sections) where possible."""
    sections = [section for section in text.strip("\n").split("\n\n") if section.strip()]
    blocks: list[str] = []
    current = ""
    for section in sections:
        candidate = f"{current}\n\n{section}" if current else section
        if len(candidate) <= limit:
            current = candidate
            continue
        if current:
            blocks.append(current)
            current = ""
        if len(section) <= limit:
            current = section
            continue
        for line in section.split("\n"):
            for piece in _cut(line, limit):
                candidate = f"{current}\n{piece}" if current else piece
                if len(candidate) <= limit:
                    current = candidate
                else:
                    blocks.append(current)
                    current = piece
    if current:
        blocks.append(current)
    return blocks or [""]

"""Splitting digests into Telegram messages: visible length in UTF-16, balanced tags, (i/n) markers."""

from __future__ import annotations

from html.parser import HTMLParser

from digest.channels.telegram.text import (
    MAX_ENTITIES,
    MAX_TEXT,
    entity_count,
    split_html,
    utf16_length,
    visible_length,
)


class _Balance(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack.pop() == tag


def _balanced(part: str) -> bool:
    parser = _Balance()
    parser.feed(part)
    return not parser.stack


def test_short_message_is_one_part() -> None:
    """A digest under the limit is sent as is, without a marker."""
    assert split_html("<b>OK 10/10</b>\nall fine") == ["<b>OK 10/10</b>\nall fine"]


def test_visible_length_counts_utf16_and_entities() -> None:
    """Tags do not count, &amp; counts one, an emoji outside the BMP counts two."""
    assert visible_length("<b>a&amp;b</b>") == 3
    assert utf16_length("✅") == 1
    assert utf16_length("🔥") == 2


def test_long_digest_is_split_at_lines_with_markers() -> None:
    """A 3-section digest over 4096 visible characters splits into valid parts, each marked and under the limit."""
    section = "\n".join(f"<b>−2</b> <code>check_{index}</code> · {'x' * 80} &amp; 🔥" for index in range(20))
    message = "<b>CRITICAL 4/10 · prod · 2026-07-20</b>\n\n" + "\n\n".join([section] * 3)
    parts = split_html(message)
    assert len(parts) > 1
    for index, part in enumerate(parts, start=1):
        assert visible_length(part) <= MAX_TEXT
        assert part.endswith(f"({index}/{len(parts)})")
        assert _balanced(part)
    assert parts[0].startswith("<b>CRITICAL 4/10")


def test_a_single_huge_line_becomes_escaped_plain_pieces() -> None:
    """One line longer than a message is cut as escaped plain text, never inside a tag."""
    message = "<b>" + "&lt;&amp;&gt;" * 3000 + "</b>"
    parts = split_html(message)
    assert len(parts) >= 3
    for part in parts:
        assert visible_length(part) <= MAX_TEXT
        assert _balanced(part)
        assert "<b>" not in part


def test_no_part_carries_more_entities_than_telegram_renders() -> None:
    """A short digest with 300 tags is cut into parts of at most 100 entities, each valid, none of its lines lost."""
    lines = [f"<b>−1</b> <code>check_{index}</code> · <i>short</i>" for index in range(100)]
    message = "<b>CRITICAL</b>\n" + "\n".join(lines)
    assert visible_length(message) < MAX_TEXT
    parts = split_html(message)
    assert len(parts) == 4
    assert all(entity_count(part) <= MAX_ENTITIES for part in parts)
    assert all(_balanced(part) for part in parts)
    kept = [line for part in parts for line in part.split("\n") if line.startswith("<b>−1</b>")]
    assert kept == lines


def test_a_folded_section_with_too_many_entities_is_unfolded() -> None:
    """A section whose 150 tags one message cannot render is sent open, its lines spread over parts."""
    section = "<blockquote expandable><b>Diagnosis</b>\n" + "\n".join(f"<code>r{n}</code>" for n in range(150))
    parts = split_html(f"<b>CRITICAL</b>\n\n{section}</blockquote>")
    assert len(parts) >= 2
    assert not any("blockquote" in part for part in parts)
    assert all(entity_count(part) <= MAX_ENTITIES and _balanced(part) for part in parts)

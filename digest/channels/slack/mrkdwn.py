"""The digest in Slack's mrkdwn: converted from the HTML Telegram gets, so both channels say the same sections.

The digest's HTML uses four tags, each opened and closed on one line (``<b>``, ``<i>``, ``<code>``, ``<a href>``);
here they become ``*bold*``, ``_italic_``, `` `code` `` and ``<url|label>``. Everything else is text, and Slack reads
three characters in text as control: ``&``, ``<`` and ``>`` are escaped (``&amp;`` …) so that a workload or a log line
named ``<!channel>`` is printed, never a mention of everyone. A backtick inside code would end it early and becomes
``'``; a URL's ``|`` and ``>`` are percent-encoded, as a label's ``|`` would end the link.

Block Kit takes at most 3,000 characters in a section's text and 50 blocks in a message: `blocks_of` packs lines into
sections, cutting at blank lines (the digest's sections) where it can, and `parts_of` packs sections into messages of
at most `BLOCKS_PER_MESSAGE`, so the delivery's stored parts are whole messages, cut the same way on every retry.
"""

from __future__ import annotations

from digest.channels.markup import Marks, convert
from digest.channels.split import sections

MAX_SECTION = 3000
# Well under Slack's 50 blocks: a message of 10 full sections is already 30,000 characters, near its 40,000.
BLOCKS_PER_MESSAGE = 10


def escape(text: str) -> str:
    """``text`` with Slack's three control characters escaped."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _link(href: str, label: str) -> str:
    url = href.replace("|", "%7C").replace(">", "%3E").replace("<", "%3C")
    return f"<{url}|{label.replace('|', '¦')}>"


# Slack reads its three control characters inside code too: escaped there as well, a backtick made a quote.
MRKDWN = Marks(
    bold="*",
    italic="_",
    code="`",
    text=escape,
    code_text=lambda text: escape(text.replace("`", "'")),
    link=_link,
)


def from_html(html: str) -> str:
    """The Telegram HTML digest as Slack mrkdwn."""
    return convert(html, MRKDWN)


def parts_of(text: str) -> list[str]:
    """The messages of a digest: at most `BLOCKS_PER_MESSAGE` sections each, the sections joined by blank lines.

    `blocks_of` on one of these parts gives back its sections (each under the limit, joined at blank lines).
    """
    blocks = blocks_of(text)
    return [
        "\n\n".join(blocks[start : start + BLOCKS_PER_MESSAGE]) for start in range(0, len(blocks), BLOCKS_PER_MESSAGE)
    ]


def fallback(part: str, limit: int = 150) -> str:
    """The notification text of a message (its first line, without the marks): what a phone's banner shows."""
    first = part.strip().split("\n", 1)[0]
    plain = first.replace("*", "").replace("_", "").replace("`", "")
    return plain if len(plain) <= limit else plain[: limit - 1] + "…"


def blocks_of(text: str) -> list[str]:
    """``text`` packed into section texts of at most `MAX_SECTION` characters, cut at blank lines where possible."""
    return sections(text, MAX_SECTION)

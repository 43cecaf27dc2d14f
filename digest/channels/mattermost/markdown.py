r"""The digest in Mattermost's Markdown: converted from the HTML Telegram gets, so every channel says the same.

``<b>`` → ``**bold**``, ``<i>`` → ``_italic_``, ``<code>`` → a code span, ``<a href>`` → ``[label](url)``. Text from
the cluster and the logs is escaped with backslashes (Markdown's ``\ ` * _ [ ] < > # | ~``), so a workload named
``*x*`` or ``#1`` is printed as it is, and an ``@`` before a name gets a zero-width space after it: a log line saying
``@channel`` or ``@all`` is printed, never a notification to everyone. Inside a code span (where Mattermost reads no
mention and no escape) only a backtick, which would end it, becomes ``'``.

A post takes at most 16,383 characters (Mattermost's default maximum): `posts_of` cuts at the digest's sections
(`digest.channels.split`), the same way on every retry.
"""

from __future__ import annotations

import re

from digest.channels.markup import Marks, convert
from digest.channels.split import sections

MAX_POST = 16_000
_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~])")
_MENTION = re.compile(r"@(?=[A-Za-z0-9_.-])")


def escape(text: str) -> str:
    """``text`` with Markdown's marks escaped and every ``@name`` broken, so it is printed as written."""
    return _MENTION.sub("@\u200b", _SPECIAL.sub(r"\\\1", text))


def _link(href: str, label: str) -> str:
    url = href.replace(" ", "%20").replace("(", "%28").replace(")", "%29")
    return f"[{label}]({url})"


# Inside a code span Mattermost reads no mention and no escape: only a backtick, which would end it, is replaced.
MARKDOWN = Marks(
    bold="**",
    italic="_",
    code="`",
    text=escape,
    code_text=lambda text: text.replace("`", "'"),
    link=_link,
)


def from_html(html: str) -> str:
    """The Telegram HTML digest as Mattermost Markdown."""
    return convert(html, MARKDOWN)


def posts_of(markdown: str) -> list[str]:
    """The posts of a digest, each within Mattermost's limit, cut at its sections."""
    return sections(markdown, MAX_POST)

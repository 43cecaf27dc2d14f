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
from html.parser import HTMLParser

from digest.channels.split import sections

MAX_POST = 16_000
_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~])")
_MENTION = re.compile(r"@(?=[A-Za-z0-9_.-])")


def escape(text: str) -> str:
    """``text`` with Markdown's marks escaped and every ``@name`` broken, so it is printed as written."""
    return _MENTION.sub("@\u200b", _SPECIAL.sub(r"\\\1", text))


class _Converter(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self._href: list[str | None] = []
        self._label: list[str] = []
        self._in_code = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href.append(dict(attrs).get("href"))
            self._label = []
        elif tag == "b":
            self._write("**")
        elif tag == "i":
            self._write("_")
        elif tag == "code":
            self._in_code += 1
            self._write("`")

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href:
            href = self._href.pop()
            label = "".join(self._label)
            if href:
                url = href.replace(" ", "%20").replace("(", "%28").replace(")", "%29")
                self.out.append(f"[{label}]({url})")
            else:
                self.out.append(label)
        elif tag == "b":
            self._write("**")
        elif tag == "i":
            self._write("_")
        elif tag == "code":
            self._in_code = max(0, self._in_code - 1)
            self._write("`")

    def handle_data(self, data: str) -> None:
        self._write(data.replace("`", "'") if self._in_code else escape(data))

    def _write(self, text: str) -> None:
        (self._label if self._href else self.out).append(text)


def from_html(html: str) -> str:
    """The Telegram HTML digest as Mattermost Markdown."""
    converter = _Converter()
    converter.feed(html)
    converter.close()
    return "".join(converter.out)


def posts_of(markdown: str) -> list[str]:
    """The posts of a digest, each within Mattermost's limit, cut at its sections."""
    return sections(markdown, MAX_POST)

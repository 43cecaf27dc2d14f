"""The digest's HTML (Telegram's, the one every channel's sections come from) in another service's markup.

The template writes four tags, each opened and closed on one line: ``<b>``, ``<i>``, ``<code>`` and ``<a href>``
(and the folded sections' ``<blockquote>``, which other services show open: it is dropped, its text kept). A service
says how it marks each (`Marks`): Slack's mrkdwn (``*bold*``, ``<url|label>``) and Mattermost's Markdown
(``**bold**``, ``[label](url)``) differ only there and in how text from the cluster is escaped so that it is printed
as written, never read as markup or a mention.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser


@dataclass(frozen=True)
class Marks:
    """How one service marks bold, italic and code, writes a link, and escapes text and code."""

    bold: str
    italic: str
    code: str
    text: Callable[[str], str]  # text outside code, escaped
    code_text: Callable[[str], str]  # text inside code (a backtick would end it)
    link: Callable[[str, str], str]  # (url, label) → the link


class _Converter(HTMLParser):
    def __init__(self, marks: Marks) -> None:
        super().__init__(convert_charrefs=True)
        self.marks = marks
        self.out: list[str] = []
        self._href: list[str | None] = []
        self._label: list[str] = []
        self._in_code = 0

    def _mark(self, tag: str) -> str | None:
        return {"b": self.marks.bold, "i": self.marks.italic, "code": self.marks.code}.get(tag)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href.append(dict(attrs).get("href"))
            self._label = []
            return
        mark = self._mark(tag)
        if mark is not None:
            self._in_code += tag == "code"
            self._write(mark)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href:
            href = self._href.pop()
            label = "".join(self._label)
            self.out.append(self.marks.link(href, label) if href else label)
            return
        mark = self._mark(tag)
        if mark is not None:
            if tag == "code":
                self._in_code = max(0, self._in_code - 1)
            self._write(mark)

    def handle_data(self, data: str) -> None:
        self._write(self.marks.code_text(data) if self._in_code else self.marks.text(data))

    def _write(self, text: str) -> None:
        (self._label if self._href else self.out).append(text)


def convert(html: str, marks: Marks) -> str:
    """The Telegram HTML digest in the markup ``marks`` describe."""
    converter = _Converter(marks)
    converter.feed(html)
    converter.close()
    return "".join(converter.out)

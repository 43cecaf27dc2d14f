r"""Making label- and log-derived text safe to show: control, bidi and invisible characters become visible escapes.

Pod names, namespaces, instances and log fields come from the cluster and are hostile input. A NUL or a C1 control
breaks terminals and some Telegram clients; a bidi control (U+202E RIGHT-TO-LEFT OVERRIDE and its kin) reorders
what the reader sees, so ``evil\u202egnp.exe`` reads as ``evilexe.png`` and a line can claim the opposite of what it
says; a newline inside a pod name forges a line of its own (and, in the HTML, would leave a tag open across lines,
which `digest.channels.telegram.text.split_html` relies on never happening). An invisible character (U+200B ZERO
WIDTH SPACE, a tag character) makes two different labels look the same: ``sh\u200bop`` reads as ``shop``.

Choice: such characters are *escaped visibly*, never silently dropped — ``\u202e``, ``\u0000``, ``\n`` appear
literally, Go/JSON style — so the reader sees that a label was odd and can still tell two labels apart. What is
escaped (`UNSAFE`): C0 controls except tab, DEL, C1 controls, the bidi embedding/override/isolate/mark controls
(U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C), the line and paragraph separators U+2028/U+2029 (they
break a line like a newline does), lone surrogates (they cannot be encoded to UTF-8 at all) and the invisible
characters U+200B–U+200D (zero width space, non-joiner, joiner), U+2060–U+2064 (word joiner and the invisible
operators), U+FEFF (the byte order mark), U+180E (Mongolian vowel separator) and the tag characters
U+E0000–U+E007F. Kubernetes object names cannot hold any of these, so they come only from log fields or hostile
labels; the price is that an emoji sequence joined by U+200D (a family, a person at a laptop) or a subdivision
flag built of tag characters shows as its parts with the escapes between them. A character beyond U+FFFF is
written ``\U000e0041`` (Go and Python style, as `checks.logsql.quoted` does), so that no escape can be read as a
shorter one followed by a digit. Everything else, emoji and non-Latin scripts included, is shown as it is.

Where it is applied, so that no dynamic string can be forgotten:

* the Jinja environments of the text and HTML outputs run `visible` as ``finalize`` on every ``{{ … }}`` value
  (before HTML escaping), see `digest.output.render`;
* the JSON output keeps exact values but writes these characters as ``\uXXXX`` escapes (`escape_json`; beyond
  U+FFFF a surrogate pair ``\udb40\udc41``, the only JSON spelling): it is read by programs, which get the label
  back unchanged;
* the charts (`digest.output.chart`, `digest.output.week_chart`) pass their titles, legend labels, panel texts and
  captions through `visible` (and `for_drawing`, which wraps text to lines *after* making it visible, so that its
  own line breaks stay real ones). Pillow draws every character as it is: a ``$`` is just a dollar sign.

Queries shown to the reader ("Where to look") quote values with `checks.logsql.quoted`, whose Go-style escapes are
plain ASCII: `visible` leaves them alone, and the copied query still finds the odd label.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

# Tab is left alone: it is harmless in every output and legitimately appears in log text.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# Zero width space/non-joiner/joiner, word joiner and invisible operators, BOM, Mongolian vowel separator, tags.
_INVISIBLE = "\u200b-\u200d\u2060-\u2064\ufeff\u180e\U000e0000-\U000e007f"
UNSAFE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{_BIDI}{_INVISIBLE}\u2028\u2029\ud800-\udfff]")
# In a JSON text C0 controls never appear raw inside strings (``json.dumps`` escapes them), and outside strings
# newlines and spaces are the layout: only the rest needs escaping there.
_UNSAFE_IN_JSON = re.compile(f"[\x7f-\x9f{_BIDI}{_INVISIBLE}\u2028\u2029\ud800-\udfff]")
_SHORT = {"\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _SHORT.get(char) or (f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")


def visible(text: str) -> str:
    r"""``text`` with every `UNSAFE` character written as a visible escape (``\u202e``, ``\n``, ``\U000e0041``)."""
    return UNSAFE.sub(_escape, text)


def finalize(value: Any) -> Any:
    """Jinja ``finalize``: strings made `visible`, HTML-safe markup kept markup, other values unchanged."""
    if not isinstance(value, str):
        return value
    cleaned = visible(value)
    if cleaned == value:
        return value
    # Markup (already escaped, e.g. from ``join`` under autoescape) stays markup: the escapes added are plain ASCII.
    return value.__class__(cleaned)


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    # JSON's \\u holds four hex digits: a character beyond U+FFFF is written as its UTF-16 surrogate pair.
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def escape_json(document: str) -> str:
    r"""A JSON text with `UNSAFE` characters written as ``\uXXXX`` escapes; the parsed values are unchanged.

    Outside strings a JSON text holds only ASCII punctuation, digits and whitespace, so every such character sits
    inside a string, where ``\uXXXX`` is its exact escape (``json.dumps`` already escapes C0 controls).
    """
    return _UNSAFE_IN_JSON.sub(_json_escape, document)


def for_drawing(text: str, width: int | None = None, max_lines: int | None = None) -> str:
    r"""`visible` text, wrapped on lines of at most ``width`` characters when ``width`` is given.

    A longer word is cut; at most ``max_lines`` lines are kept, the last one ending in "…" when text was left out.
    Wrapping comes after `visible`, so the line breaks inserted are the only raw newlines: a newline of ``text``
    stays a visible ``\n``, and a chart draws each of the returned lines as a line.
    """
    shown = visible(text)
    if width is not None:
        shown = "\n".join(textwrap.wrap(shown, width, max_lines=max_lines, placeholder=" …"))
    return shown


def middle_ellipsis(text: str, limit: int = 40) -> str:
    """``text`` if it fits ``limit`` characters, else its start and end around "…": ``payments-api-…-7d9f8``.

    The end is kept because that is where pod names differ (the ReplicaSet hash and pod suffix).
    """
    if len(text) <= limit:
        return text
    tail = (limit - 1) // 2
    head = limit - 1 - tail
    return f"{text[:head]}…{text[-tail:]}"

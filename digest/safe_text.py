r"""Making label- and log-derived text safe to show: control and bidi characters become visible escapes.

Pod names, namespaces, instances and log fields come from the cluster and are hostile input. A NUL or a C1 control
breaks terminals and some Telegram clients; a bidi control (U+202E RIGHT-TO-LEFT OVERRIDE and its kin) reorders
what the reader sees, so ``evil\u202egnp.exe`` reads as ``evilexe.png`` and a line can claim the opposite of what it
says; a newline inside a pod name forges a line of its own (and, in the HTML, would leave a tag open across lines,
which `digest.telegram_text.split_html` relies on never happening).

Choice: such characters are *escaped visibly*, never silently dropped — ``\u202e``, ``\u0000``, ``\n`` appear
literally, Go/JSON style — so the reader sees that a label was odd and can still tell two labels apart. What is
escaped (`UNSAFE`): C0 controls except tab, DEL, C1 controls, the bidi embedding/override/isolate/mark controls
(U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C), the line and paragraph separators U+2028/U+2029 (they
break a line like a newline does) and lone surrogates (they cannot be encoded to UTF-8 at all). Everything else,
emoji and non-Latin scripts included, is shown as it is.

Where it is applied, so that no dynamic string can be forgotten:

* the Jinja environments of the text and HTML outputs run `visible` as ``finalize`` on every ``{{ … }}`` value
  (before HTML escaping), see `digest.render`;
* the JSON output keeps exact values but writes these characters as ``\uXXXX`` escapes (`escape_json`): it is
  read by programs, which get the label back unchanged;
* the chart (`digest.chart`) passes its title, legend labels, panel texts and caption through `visible` (and
  `for_matplotlib`, which also escapes ``$`` so that a label cannot switch on matplotlib's math mode).

Queries shown to the reader ("Where to look") quote values with `checks.logsql.quoted`, whose Go-style escapes are
plain ASCII: `visible` leaves them alone, and the copied query still finds the odd label.
"""

from __future__ import annotations

import re
from typing import Any

# Tab is left alone: it is harmless in every output and legitimately appears in log text.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
UNSAFE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{_BIDI}\u2028\u2029\ud800-\udfff]")
# In a JSON text C0 controls never appear raw inside strings (``json.dumps`` escapes them), and outside strings
# newlines and spaces are the layout: only the rest needs escaping there.
_UNSAFE_IN_JSON = re.compile(f"[\x7f-\x9f{_BIDI}\u2028\u2029\ud800-\udfff]")
_SHORT = {"\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT.get(char) or f"\\u{ord(char):04x}"


def visible(text: str) -> str:
    r"""``text`` with every `UNSAFE` character written as a visible escape (``\u202e``, ``\n``)."""
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
    return f"\\u{ord(match.group()):04x}"


def escape_json(document: str) -> str:
    r"""A JSON text with `UNSAFE` characters written as ``\uXXXX`` escapes; the parsed values are unchanged.

    Outside strings a JSON text holds only ASCII punctuation, digits and whitespace, so every such character sits
    inside a string, where ``\uXXXX`` is its exact escape (``json.dumps`` already escapes C0 controls).
    """
    return _UNSAFE_IN_JSON.sub(_json_escape, document)


def for_matplotlib(text: str) -> str:
    """`visible` text with ``$`` escaped: an even number of dollars would otherwise be parsed as math."""
    return visible(text).replace("$", r"\$")


def middle_ellipsis(text: str, limit: int = 40) -> str:
    """``text`` if it fits ``limit`` characters, else its start and end around "…": ``payments-api-…-7d9f8``.

    The end is kept because that is where pod names differ (the ReplicaSet hash and pod suffix).
    """
    if len(text) <= limit:
        return text
    tail = (limit - 1) // 2
    head = limit - 1 - tail
    return f"{text[:head]}…{text[-tail:]}"

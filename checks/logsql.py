r"""Small LogsQL helpers shared by the log-based checks: quoting field names and values safely.

Field names come from the policy file and values from the cluster (namespaces, pod names); quoting them keeps a name
such as ``x-envoy-origin-path`` or a value with a quote, a ``|`` or a ``)`` from changing the meaning of a query.

LogsQL reads a double-quoted string as Go does (``strconv.Unquote``): ``\"``, ``\\``, ``\n``, ``\t``, ``\r``,
``\uXXXX`` and ``\UXXXXXXXX`` escapes. `quoted` writes exactly that, escaping every character Python does not
consider printable (controls, bidi overrides, separators, non-breaking spaces) and leaving the rest as it is, so a
query shown to the reader in "Where to look" is both safe to display and, copied, runs as shown and finds the label.
``json.dumps`` is not the same language: VictoriaLogs reads its ``\ud83d\ude80`` surrogate pair for an emoji without
complaint and then matches nothing (checked against a real VictoriaLogs); ``\U0001f680`` or the emoji itself match.
"""

from __future__ import annotations

import re

_PLAIN_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_REPLACEMENT = 0xFFFD  # a lone surrogate is no Unicode character; Go refuses it in an escape


def _escaped(char: str) -> str:
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    if char.isprintable():
        return char
    code = ord(char)
    if 0xD800 <= code <= 0xDFFF:
        code = _REPLACEMENT
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def quoted(value: str) -> str:
    """A LogsQL (Go-syntax) double-quoted string literal whose value is exactly ``value``."""
    return '"' + "".join(_escaped(char) for char in value) + '"'


def field_name(name: str) -> str:
    """A field name usable in filters and ``by (...)``: bare when plain, quoted otherwise."""
    return name if _PLAIN_FIELD.match(name) else quoted(name)


def exact(field: str, value: str) -> str:
    """The LogsQL filter ``field:="value"``: lines whose ``field`` is exactly ``value``."""
    return f"{field_name(field)}:={quoted(value)}"


def any_of_regex(values: tuple[str, ...], case_insensitive: bool = True) -> str:
    """An anchored regex matching exactly one of ``values``, as a LogsQL string literal."""
    body = "|".join(re.escape(value) for value in values)
    prefix = "(?i)" if case_insensitive else ""
    return quoted(f"{prefix}^({body})$")

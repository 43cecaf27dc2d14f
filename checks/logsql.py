"""Small LogsQL helpers shared by the log-based checks: quoting field names and values safely.

Field names and values come from the policy file; quoting them keeps a name such as ``x-envoy-origin-path`` or a
value with a quote from changing the meaning of a query.
"""

from __future__ import annotations

import json
import re

_PLAIN_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def field_name(name: str) -> str:
    """A field name usable in filters and ``by (...)``: bare when plain, JSON-quoted otherwise."""
    return name if _PLAIN_FIELD.match(name) else json.dumps(name)


def quoted(value: str) -> str:
    """A LogsQL string literal."""
    return json.dumps(value)


def any_of_regex(values: tuple[str, ...], case_insensitive: bool = True) -> str:
    """An anchored regex matching exactly one of ``values``, as a LogsQL string literal."""
    body = "|".join(re.escape(value) for value in values)
    prefix = "(?i)" if case_insensitive else ""
    return quoted(f"{prefix}^({body})$")

"""Cluster scoping on a shared store: label matchers added to every query, so one digest reads one cluster.

A central VictoriaMetrics, vmselect, Thanos or Prometheus, or a shared VictoriaLogs or Loki, holds several clusters'
series and lines, told apart by a label that their shippers add (``cluster="prod"`` as an external label or a
remote-write label, a stream field or stream label on the logs). A digest that does not say which cluster it reads
counts every cluster's OOM kills and error lines as its own, and reduces two clusters' nodes called ``worker-1`` to
one. The settings name the scope once (``DIGEST_METRICS_SELECTOR``, ``DIGEST_LOGS_SELECTOR``, or VictoriaMetrics'
``extra_label``/``extra_filters`` in the URL) and the sources add it here, at the boundary, to every query the checks,
the coverage and the doctor send: no check knows about clusters.

**Metrics.** `scoped_promql` adds the matchers to every vector selector of a PromQL expression: ``up`` becomes
``up{cluster="prod"}``, ``x{job="a"}[5m]`` becomes ``x{job="a", cluster="prod"}[5m]``, inside functions, aggregations,
binary operations and subqueries alike. It is done in the client rather than with VictoriaMetrics' ``extra_filters``
so that Prometheus, which has no such parameter (and ignores unknown ones without a word), is scoped the same way,
and one implementation is tested on both. The rewrite is lexical, as prom-label-proxy's is syntactic: string
literals, ``[…]`` ranges and the label lists of ``by``/``without``/``on``/``ignoring``/``group_left``/``group_right``
are skipped; an identifier followed by ``(`` is a function or an aggregation; a keyword (``and``, ``offset``, ``bool``,
``Inf``…) is left alone; any other identifier is a metric name. The matchers are ANDed to those the selector has, so
a selector that names another cluster matches nothing rather than the wrong cluster.

**Logs.** The same matchers are a stream filter for VictoriaLogs (``{cluster="prod"}`` before the time filter: the
cheapest filter it has, it skips whole streams) and extra stream-selector matchers for Loki. The label must be a
stream field (VictoriaLogs' ``_stream_fields``) or a stream label (Loki) there; if it is not, the scoped queries find
no line at all, which the coverage reports as unseen, never as a quiet day.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from digest.checks.promql import quote

_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATORS = ("=~", "!~", "!=", "=")
_IDENTIFIER_START = re.compile(r"[A-Za-z_:]")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
# Identifiers that are never metric names: binary operators, modifiers, and the special float literals.
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"})
# Keywords followed by a parenthesised list of label names, not of expressions.
_LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})


class ScopeError(ValueError):
    """A selector or URL scope that cannot be read; the message says what is wrong, never echoing a secret."""


@dataclass(frozen=True)
class Matcher:
    """One label matcher: ``name op "value"`` with op one of ``=``, ``!=``, ``=~``, ``!~``."""

    name: str
    operator: str
    value: str

    def __str__(self) -> str:
        return f'{self.name}{self.operator}"{quote(self.value)}"'


Scope = tuple[Matcher, ...]


def render(scope: Sequence[Matcher]) -> str:
    """The matchers as written inside braces: ``cluster="prod", env!="test"``."""
    return ", ".join(str(matcher) for matcher in scope)


def parse_matchers(text: str) -> Scope:
    r"""``cluster="prod", env=~"a|b"`` (braces optional) as matchers; `ScopeError` saying what is wrong.

    Values are double-quoted with PromQL's escapes (``\"``, ``\\``, ``\n``). A positive matcher that matches
    the empty string (``cluster=""``, ``cluster=~"prod|"``) also selects series *without* the label, which would
    leak every unlabelled cluster into the scope, and is refused.
    """
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1].strip()
    matchers: list[Matcher] = []
    position = 0
    while position < len(body):
        name_match = _LABEL_NAME.match(body, position)
        if name_match is None:
            raise ScopeError(f"expected a label name at character {position + 1}")
        position = _skip_spaces(body, name_match.end())
        operator = next((op for op in _OPERATORS if body.startswith(op, position)), None)
        if operator is None:
            raise ScopeError(f"expected =, !=, =~ or !~ after {name_match.group()!r}")
        position = _skip_spaces(body, position + len(operator))
        if position >= len(body) or body[position] != '"':
            raise ScopeError(f'the value of {name_match.group()!r} must be double-quoted, e.g. cluster="prod"')
        value, position = _read_quoted(body, position)
        if operator in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise ScopeError(f"the regex of {name_match.group()!r} does not compile: {exc}") from None
        matcher = Matcher(name_match.group(), operator, value)
        if _matches_empty(matcher):
            raise ScopeError(f"{matcher} also matches series without the label {matcher.name!r}: not one cluster")
        matchers.append(matcher)
        position = _skip_spaces(body, position)
        if position < len(body):
            if body[position] != ",":
                raise ScopeError(f"expected a comma after {matcher}")
            position = _skip_spaces(body, position + 1)
    return tuple(matchers)


def _matches_empty(matcher: Matcher) -> bool:
    if matcher.operator == "=":
        return matcher.value == ""
    if matcher.operator == "=~":
        return re.fullmatch(matcher.value, "") is not None
    return False


def _skip_spaces(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


_UNESCAPED = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


def _read_quoted(text: str, position: int) -> tuple[str, int]:
    """The value of the double-quoted string at ``position`` and the position after it."""
    value: list[str] = []
    index = position + 1
    while index < len(text):
        char = text[index]
        if char == "\\":
            if index + 1 >= len(text):
                break
            escaped = text[index + 1]
            value.append(_UNESCAPED.get(escaped, "\\" + escaped))
            index += 2
            continue
        if char == '"':
            return "".join(value), index + 1
        value.append(char)
        index += 1
    raise ScopeError("a quoted value is not closed")


# PromQL ---------------------------------------------------------------------------------------------------------


def scoped_promql(query: str, scope: Sequence[Matcher]) -> str:
    """``query`` with ``scope`` added to every vector selector (unchanged when the scope is empty)."""
    if not scope:
        return query
    added = render(scope)
    out: list[str] = []
    index = 0
    length = len(query)
    while index < length:
        char = query[index]
        if char in "\"'`":
            end = _string_end(query, index)
            out.append(query[index:end])
            index = end
        elif char == "{":
            end = _closing(query, index, "{", "}")
            out.append(_with_matchers(query[index + 1 : end - 1], added))
            index = end
        elif char == "[":
            end = _closing(query, index, "[", "]")
            out.append(query[index:end])
            index = end
        elif char.isdigit() or (char == "." and index + 1 < length and query[index + 1].isdigit()):
            end = _number_end(query, index)
            out.append(query[index:end])
            index = end
        elif _IDENTIFIER_START.match(char):
            name = _identifier_at(query, index)
            index += len(name)
            following = _skip_spaces(query, index)
            next_char = query[following] if following < length else ""
            out.append(name)
            lowered = name.lower()
            if lowered in _LABEL_LIST_KEYWORDS:
                if next_char == "(":
                    end = _closing(query, following, "(", ")")
                    out.append(query[index:end])
                    index = end
            elif lowered in _KEYWORDS or next_char in ("(", "{") or _aggregation_modifier_follows(query, following):
                pass  # a keyword, a function or aggregation, or a metric whose braces come next
            else:
                out.append("{" + added + "}")
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _identifier_at(text: str, position: int) -> str:
    """The identifier starting at ``position`` (its first character is known to start one)."""
    word = _IDENTIFIER.match(text, position)
    return word.group() if word else text[position]


def _aggregation_modifier_follows(text: str, position: int) -> bool:
    """Whether ``by`` or ``without`` starts at ``position``: the word before it is an aggregation (``sum by (x)``)."""
    word = _IDENTIFIER.match(text, position)
    return word is not None and word.group().lower() in ("by", "without")


def _with_matchers(inside: str, added: str) -> str:
    existing = inside.strip().rstrip(",").strip()
    return "{" + (f"{existing}, {added}" if existing else added) + "}"


def _string_end(text: str, start: int) -> int:
    """The position after the string literal opening at ``start`` (backquoted strings have no escapes)."""
    quote = text[start]
    index = start + 1
    while index < len(text):
        char = text[index]
        if char == "\\" and quote != "`":
            index += 2
            continue
        if char == quote:
            return index + 1
        index += 1
    raise ScopeError("unterminated string literal in a PromQL query")


def _closing(text: str, start: int, opening: str, closing: str) -> int:
    """The position after the ``closing`` that matches the ``opening`` at ``start``, skipping string literals."""
    depth = 0
    index = start
    while index < len(text):
        char = text[index]
        if char in "\"'`":
            index = _string_end(text, index)
            continue
        if char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    raise ScopeError(f"unbalanced {opening!r} in a PromQL query")


def _number_end(text: str, start: int) -> int:
    """The end of a number or duration literal (``1.5``, ``1e-3``, ``0x1f``, ``5m``, ``1h30m``)."""
    index = start
    while index < len(text):
        char = text[index]
        exponent_sign = char in "+-" and text[index - 1] in "eE" and not text[start:index].lower().startswith("0x")
        if not (char.isalnum() or char in "._" or exponent_sign):
            break
        index += 1
    return index


# URLs -----------------------------------------------------------------------------------------------------------


def split_metrics_url(url: str) -> tuple[str, Scope]:
    """The base URL without its query string, and the scope VictoriaMetrics' query parameters in it ask for.

    ``?extra_label=cluster=prod`` (repeatable) is ``cluster="prod"``; ``?extra_filters[]={cluster="prod"}`` is
    its matchers. Both are honoured on every backend through `scoped_promql`, never dropped. Several
    ``extra_filters`` are alternatives (OR) in VictoriaMetrics, which one scope cannot say: refused. Any other
    parameter is refused too, naming it, since a base URL's query string reaches no request.
    """
    parts = urlsplit(url)
    if not parts.query:
        return url, ()
    scope: list[Matcher] = []
    filters = 0
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "extra_label":
            name, equals, label_value = value.partition("=")
            if not equals or not _LABEL_NAME.fullmatch(name) or not label_value:
                raise ScopeError("extra_label must be name=value, e.g. extra_label=cluster=prod")
            scope.append(Matcher(name, "=", label_value))
        elif key in ("extra_filters", "extra_filters[]"):
            filters += 1
            if filters > 1:
                raise ScopeError(
                    "several extra_filters are alternatives (OR) in VictoriaMetrics; give one, or set "
                    "DIGEST_METRICS_SELECTOR"
                )
            scope.extend(parse_matchers(value))
        else:
            raise ScopeError(
                f"query parameter {key!r} is not read (only extra_label and extra_filters are); "
                "scope the digest with DIGEST_METRICS_SELECTOR"
            )
    return urlunsplit(parts._replace(query="", fragment="")), tuple(scope)

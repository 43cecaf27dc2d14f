r"""Loki: the log questions of `checks.log_questions` as metric LogQL, counted server-side.

A `LineCount` column becomes one metric query (columns are sent concurrently, numbers per group cross the network,
never lines)::

    sum by (namespace, pod) (count_over_time({namespace=~".+"} <pipeline> [86400s]))

**Exact windows.** Loki's range ``[r]`` evaluated at ``t`` holds the lines of ``(t - r, t]``, in nanoseconds (measured
on Loki 3.5.12: a line exactly at ``t`` counts, one at ``t - r`` does not). The digest's windows are ``[start, end)``,
so an unbucketed count is an instant query at ``time = end − 1 ns`` over ``[end − start]``: a line exactly at
``start`` counts, one exactly at ``end`` does not.

**Exact buckets.** Bucketed counts (`LineCount.bucket_seconds`, `PeakCount`) are cut like VictoriaLogs'
``_time:<bucket>``: on multiples of the bucket since the epoch, each bucket ``[b, b + bucket)`` reported at its start,
the first and last clipped to the window. The whole buckets inside the window come from one ``query_range``
(``step = bucket``); the clipped ones at either end from one instant query each. Two Loki behaviours shape the
range query (both read in Loki's source and measured on 3.5.12):

* the query frontend moves ``start`` down and ``end`` up to multiples of ``step`` (``alignStartEnd``), so the
  evaluation points are always the bucket boundaries ``t = k·step``, and a plain ``[step]`` at ``t`` counts
  ``(t − step, t]`` — a line exactly on a boundary lands in the bucket before, unlike VictoriaLogs;
* an ``offset o`` moves the range to ``(t − o − step, t − o]``, and each point is reported at
  ``(t − o)/1e6 + o/1e6`` milliseconds, both divisions truncated toward zero (``range_vector.go``). A small positive
  offset (``1ns``) therefore reports ``t − 1 ms``, off the step grid, and the frontend drops every point: an empty
  answer. The negative offset ``−(step − 1 ns)`` is reported exactly at ``t`` and counts ``(t − 1 ns, t + step − 1 ns]``
  = ``[t, t + step)``: the bucket starting at ``t``, which is what is written here. A point off the grid is refused
  (`SourceError`) rather than placed in a guessed bucket. Loki refuses more than 11,000 points per series, so a long
  range is asked in pieces of at most `MAX_POINTS`.

**Filters.** Roles map to labels as Promtail and Alloy ship Kubernetes logs (`DEFAULT_LABELS`; the policy's
``logs.fields`` overrides them). The namespace label is the one assumed to be a stream label: the selector is
``{namespace=~".+"}`` (Loki needs a non-empty matcher), or ``{namespace="x"}`` when the filter requires one namespace.
Every other condition is a label filter stage (``| level=~"(?i)(error|err)"``), which reads stream labels, structured
metadata and parsed labels alike, so ``level`` may be either. Loki's regex matchers are anchored, as `Matches` and
`OneOf` mean. `Empty` is ``label=""`` (Loki reads a missing label as empty). `Not` and `AnyOf` are pushed down to
negated operators, ``and``, ``or`` and parentheses.

`HasWord` counts what VictoriaLogs' ``i(word)`` counts: the word in any case, not inside a longer word, where a word
character is a Unicode letter, a decimal digit or ``_`` (VictoriaLogs' ``isTokenRune``); ``error:`` and ``ERROR`` match,
``errors`` does not. As a top-level condition it is a line filter (``|~``/``!~``). A top-level `AnyOf` of up to three
parts that reads the line is counted by inclusion–exclusion (`counted_terms`: count(A ∨ B) = count(A) + count(B) −
count(A ∧ B), each term a plain pipeline), because the alternative is slow on a flood; elsewhere inside `AnyOf` or
`Not`, where a line filter cannot go, the line is copied into a label (``| label_format digest_line="{{ __line__
}}"``), tested by the label filter and dropped again before counting.

`Json` keys are read with ``| json digest_json_0="[\"key\"]"`` (an alias: a key need not be a valid label name; it is
mapped back to the key in `CountRow.group`). Loki's keyed JSON extraction reads a truncated line's leading keys,
where VictoriaLogs' ``unpack_json`` reads nothing from a line that is not valid JSON; a ``| regexp`` marks the lines
whose last character but white space is ``}`` (`JSON_END_LABEL`), and the keys of the others (cut short, or not an
object) read empty: a condition on a key is tested on the (empty) mark in their lines, and a count grouped by keys
empties them in its series without the mark, after the count (``label_replace``: a ``label_format`` per line did the
same at twice the cost of the whole query). ``__error__`` (a line that is not JSON at all) is dropped so the line still
counts (a metric query holding ``__error__`` fails as a whole). The mark is the cheap half of a parse: a line cut
exactly after a nested object's ``}`` would keep its leading keys (never seen in an access log, whose values are
flat); a second, full ``| json`` was exact and cost a third more per query.

**Folded columns.** A column that differs from a column of every line in scope by conditions on labels or JSON
keys alone (error_lines' error levels, envoy_flags' 5xx codes, log_storms' lines but the access log's) is counted in
that column's pass (`fold_plan`): each condition marks the series it holds for (`Fold`, one label each)::

    sum by (<by>, digest_fold) (label_replace(sum by (<by>, level) (count_over_time(<scope> [r])),
                                              "digest_fold", "1", "level", "(?i)(error|err|…)"))

and a column is read from the series whose marks satisfy it — ``level`` an error level; ``not (namespace the
gateway's and container envoy)`` from two marks, negated — one scan of the window instead of one per column
(``label_replace`` is anchored, as the label filter is). A term that reads the line (the word "error" in an
unlabelled line) is asked apart and added. The inner groups are the outer ones times the marked labels' values, and
Loki's ``max_query_series`` counts them: a refusal there asks the columns apart again, and this source does not fold
again (said in the log). Several checks' questions share such a pass where they count the same lines
(`digest.backends.passes`).

`Native` is a LogQL pipeline fragment written by the policy (``|= "panic"``, ``| logfmt | level="error"``), appended
as is after the digest's own stages. It can only be a conjunct: under `AnyOf` or `Not` it cannot be placed, and the
question is refused with a `SourceError`.

Multi-tenant Loki: the tenant goes in the ``X-Scope-OrgID`` header, which ``DIGEST_LOKI_TENANT`` puts into the
endpoint's headers.

Loki's failures are named, never passed off as a count: ``max_query_series`` (a ``by`` with too many groups), the
points and query-length limits, ``too many outstanding requests`` (HTTP 429), Loki's query timeout and the digest's
own, Loki not ready yet (HTTP 503), and an address that is not a Loki API at all (HTTP 404 at ``/loki/api/v1/query``).

**Shapes** (`LokiSource.shapes`) come from Loki's patterns API when its pattern ingester is on (`PATTERNS_PATH` says
what it answers and keeps): the patterns name the shapes, and each is counted in the window by a metric query with
Loki's ``|>`` pattern filter. Lines of no counted pattern are counted too and reported, never dropped. A flood's
shapes (`ShapeCount.sample_every` > 1) are counted in the sampled minutes only, one leg of the query per minute
(`LogqlWriter.sampled_query`), so that their cost is the sample's; so are the first and last line of each shape
shown, read in the first and last sampled minute that holds it. Loki reads at most `SAMPLE_MINUTES` minutes, one in
more than asked if need be (`loki_sample_every`), and says which.

Groups with no line in any column are absent from the answer (Loki has no series for them), where VictoriaLogs can
answer a row of zeros when no column counts every line; a row's missing column is a zero.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from digest.backends.http import HttpSource, WrongApiError, answering_within, parse_value
from digest.backends.scope import Matcher
from digest.checks.contract import SourceError, SourceErrorKind, Window
from digest.checks.log_questions import (
    AllOf,
    AnyOf,
    CountRow,
    Empty,
    Filter,
    HasWord,
    Is,
    Json,
    LineCount,
    LineSeries,
    LogField,
    Matches,
    Native,
    Not,
    OneOf,
    PeakCount,
    Role,
    Shape,
    ShapeCount,
    Shapes,
    every,
    field_label,
    json_keys,
    sampled_minutes,
    series_column,
    series_of,
    summed_series,
)
from digest.checks.logsql import quoted

log = logging.getLogger(__name__)

# Promtail's and Alloy's Kubernetes labels; level is structured metadata or a label (a label filter reads both).
DEFAULT_LABELS: Mapping[Role, str] = {
    "namespace": "namespace",
    "pod": "pod",
    "container": "container",
    "node": "node_name",
    "level": "level",
    "stream": "stream",
}

# Loki refuses a range query of more than 11,000 points per series; pieces stay well under it.
MAX_POINTS = 10_000
# Counting a day's every line again, to find lines that came after their minute was recorded (`RecordedLogs`), costs
# Loki what scanning them costs: each line is a sample the querier adds up, per stream and per split of the day
# (measured on 3.5.12, 2 cores: 1.6 s for the 0.1 M-line day of 2,000 streams, 27 s for the 13 M-line day, where
# VictoriaLogs answers in 10 ms from its blocks' headers). Records holding more lines than this are not counted again,
# and the digest says so: a few seconds at most, on the days when the records save the most.
RECOUNT_LINES = 1_000_000
LINE_LABEL = "digest_line"
JSON_LABEL_PREFIX = "digest_json_"
# Set on a line whose last character but white space is ``}``: a JSON object that was not cut short.
JSON_END_LABEL = "digest_json_end"
JSON_END_REGEX = rf"(?P<{JSON_END_LABEL}>\}}\s*$)"
# A folded column's mark (`Fold`): "1" on the series counting the lines its condition holds for.
FOLD_LABEL = "digest_fold"
_NANOS = 1_000_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# VictoriaLogs' token characters (isTokenRune): Unicode letters, decimal digits and the underscore.
_NOT_WORD = r"[^\p{L}\p{Nd}_]"


class UnplaceableFilterError(ValueError):
    """A filter LogQL cannot express where it stands (a `Native` fragment under `AnyOf` or `Not`)."""


def word_regex(word: str) -> str:
    """An RE2 regex finding ``word`` in any case, not inside a longer word (VictoriaLogs' ``i(word)``)."""
    if not word:
        raise UnplaceableFilterError("an empty word cannot be searched for")
    before = f"(?:^|{_NOT_WORD})" if _is_word_char(word[0]) else ""
    after = f"(?:{_NOT_WORD}|$)" if _is_word_char(word[-1]) else ""
    if word.isascii():
        # Each letter's case orbit as a class: what ``(?i)`` matches, and measured on 3.5.12 a third cheaper (the
        # 11-05 corpus day's unlabelled "error" lines: 0.43 s to 0.28 s), since Go's regexp folds case per rune.
        return before + "".join(_ascii_folded(char) for char in word) + after
    body = "".join(_escaped_regex_char(char) for char in word)
    return f"(?i){before}{body}{after}"


# Go's case folding (unicode.SimpleFold, which RE2's (?i) follows) takes two ASCII letters beyond their other case.
_FOLDED_BEYOND_ASCII = {"k": "\\x{212A}", "s": "\\x{17F}"}


def _ascii_folded(char: str) -> str:
    """An ASCII character as ``(?i)`` reads it: a letter's class of cases, anything else escaped."""
    if not char.isalpha():
        return _escaped_regex_char(char)
    lower = char.lower()
    return f"[{lower}{char.upper()}{_FOLDED_BEYOND_ASCII.get(lower, '')}]"


def _is_word_char(char: str) -> bool:
    # Python's \w also takes other digits (Nl, No) and marks; VictoriaLogs takes letters, decimal digits and "_".
    return char == "_" or char.isalpha() or (char.isdigit() and char.isdecimal())


def _escaped_regex_char(char: str) -> str:
    if char.isalnum() or char == "_" or ord(char) > 0x7F:
        return char
    # RE2 reads a backslash before any ASCII character that is not a letter or digit as that character.
    return "\\" + char


def regex_literal(values: Sequence[str], ignore_case: bool) -> str:
    """A regex matching exactly one of ``values`` once anchored (Loki anchors label matchers)."""
    body = "|".join("".join(_escaped_regex_char(char) for char in value) for value in values)
    return f"{'(?i)' if ignore_case else ''}({body})"


def duration(span: timedelta) -> str:
    """``span`` as a LogQL range: whole seconds, else milliseconds (LogQL ranges have no finer unit)."""
    micros = span // timedelta(microseconds=1)
    if micros <= 0:
        raise UnplaceableFilterError("an empty range cannot be counted")
    if micros % 1_000_000 == 0:
        return f"{micros // 1_000_000}s"
    if micros % 1_000 == 0:
        return f"{micros // 1_000}ms"
    raise UnplaceableFilterError("Loki ranges are whole milliseconds; the window's bounds are finer")


def unix_nanos(moment: datetime) -> int:
    """``moment`` in nanoseconds since the epoch (exact: a datetime holds microseconds)."""
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1_000


def rfc3339_nanos(nanos: int) -> str:
    """Nanoseconds since the epoch as RFC 3339 with nine decimals and ``Z`` (what Loki's ``time`` reads exactly)."""
    seconds, fraction = divmod(nanos, _NANOS)
    moment = _EPOCH + timedelta(seconds=seconds)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{fraction:09d}Z"


@dataclass(frozen=True)
class _Stages:
    """A filter split into the parts of a LogQL log query."""

    matchers: tuple[str, ...]  # extra stream-selector matchers
    early: tuple[str, ...]  # label filter expressions on stream labels and metadata: before the line filters
    line_filters: tuple[str, ...]  # |~ / !~ stages
    expressions: tuple[str, ...]  # label filter expressions on parsed JSON keys or the line, one stage each
    natives: tuple[str, ...]  # the policy's own fragments, appended as is
    needs_line: bool  # an expression reads the line through LINE_LABEL


class LogqlWriter:
    """Writes the questions in LogQL for a given mapping of roles to label names (pure: no I/O)."""

    def __init__(self, fields: Mapping[Role, str] | None = None, scope: Sequence[Matcher] = ()) -> None:
        # The cluster on a shared store (`digest.backends.scope`): matchers added to every stream selector.
        self._scope = tuple(str(matcher) for matcher in scope)
        labels = {**DEFAULT_LABELS, **(fields or {})}
        for role, label in labels.items():
            if not _LABEL_NAME.match(label):
                raise ValueError(f"logs.fields.{role}: {label!r} is not a Loki label name ([A-Za-z_][A-Za-z0-9_]*)")
        self._labels = labels

    @property
    def scope(self) -> tuple[str, ...]:
        """The scope's matchers as written (``cluster="prod"``), added to every stream selector."""
        return self._scope

    @property
    def stream_label(self) -> str:
        """The label every Kubernetes line carries as a stream label: the selector's non-empty matcher."""
        return self._labels["namespace"]

    def label_of(self, one: LogField, aliases: Mapping[str, str]) -> str:
        """The label holding ``one``: the role's label, or the alias a JSON key was extracted into."""
        return aliases[one.key] if isinstance(one, Json) else self._labels[one]

    def aliases(self, one: Filter, by: Sequence[LogField] = ()) -> dict[str, str]:
        """JSON key → alias label, for every key ``one`` and ``by`` read, in order of first use."""
        keys: dict[str, None] = {}
        for field in by:
            if isinstance(field, Json):
                keys[field.key] = None
        for key in json_keys(one):
            keys[key] = None
        return {key: f"{JSON_LABEL_PREFIX}{index}" for index, key in enumerate(keys)}

    # Filters ----------------------------------------------------------------------------------------------------

    def expression(self, one: Filter, aliases: Mapping[str, str], negate: bool = False) -> str:
        """``one`` (or its negation) as a label filter expression; raises `UnplaceableFilterError` for `Native`."""
        match one:
            case Is(field=target) | OneOf(field=target) | Matches(field=target) | Empty(field=target):
                if isinstance(target, Json):
                    # A key of a line cut short reads empty (`JSON_END_LABEL`): the condition is tested on the
                    # key where the line is whole, and on the end mark itself (empty) where it is not.
                    whole = self._condition(one, self.label_of(target, aliases), negate)
                    cut = self._condition(one, JSON_END_LABEL, negate)
                    return f'(({JSON_END_LABEL}!="" and {whole}) or ({JSON_END_LABEL}="" and {cut}))'
                return self._condition(one, self.label_of(target, aliases), negate)
            case HasWord(word=word):
                # The label filter is anchored: the word may stand anywhere in a line of several lines.
                regex = f"(?s).*{word_regex(word)}.*"
                return f"{LINE_LABEL}{'!~' if negate else '=~'}{quoted(regex)}"
            case AllOf(parts=parts):
                return self._joined(parts, aliases, negate, "or" if negate else "and", empty_is=True)
            case AnyOf(parts=parts):
                return self._joined(parts, aliases, negate, "and" if negate else "or", empty_is=False)
            case Not(part=part):
                return self.expression(part, aliases, not negate)
            case Native():
                raise UnplaceableFilterError("a native LogQL filter (logs policy) can only be a condition of its own")
        raise AssertionError(f"unknown filter {one!r}")  # pragma: no cover  # the union is closed

    def _condition(self, one: Is | OneOf | Matches | Empty, label: str, negate: bool) -> str:
        """One condition on one field, tested on ``label``."""
        match one:
            case Is(value=value):
                return f"{label}{'!=' if negate else '='}{quoted(value)}"
            case OneOf(values=values, ignore_case=ignore_case):
                if not values:
                    return self._constant(negate)
                return f"{label}{'!~' if negate else '=~'}{quoted(regex_literal(values, ignore_case))}"
            case Matches(regex=regex):
                return f"{label}{'!~' if negate else '=~'}{quoted(regex)}"
        return f'{label}{"!=" if negate else "="}""'

    def _joined(
        self, parts: tuple[Filter, ...], aliases: Mapping[str, str], negate: bool, operator: str, empty_is: bool
    ) -> str:
        if not parts:
            return self._constant(empty_is != negate)
        written = [self.expression(part, aliases, negate) for part in parts]
        return written[0] if len(written) == 1 else "(" + f" {operator} ".join(written) + ")"

    def _constant(self, value: bool) -> str:
        # Every counted line has the selector's label, so these are true and false for every line.
        return f'{self.stream_label}{"=~" if value else "!~"}"(?s).*"'

    def stages(self, one: Filter, aliases: Mapping[str, str]) -> _Stages:
        """``one`` split into selector matchers, line filters, label filter expressions and native fragments."""
        matchers: list[str] = []
        early: list[str] = []
        line_filters: list[str] = []
        expressions: list[str] = []
        natives: list[str] = []
        for part in _conjuncts(one):
            match part:
                case Is(field=target, value=value) if target == "namespace" and value:
                    matchers.append(f"{self.stream_label}={quoted(value)}")
                case HasWord(word=word):
                    # A plain case-insensitive substring first: Loki runs it as a fast "contains", and the word's
                    # Unicode-class regex then only reads the lines that hold the letters at all.
                    line_filters.extend((f"|~ {quoted('(?i)' + re.escape(word))}", f"|~ {quoted(word_regex(word))}"))
                case Not(part=HasWord(word=word)):
                    line_filters.append(f"!~ {quoted(word_regex(word))}")
                case Native(text=text):
                    if text.strip():
                        natives.append(text.strip())
                case _ if not _reads_line(part) and not json_keys(part):
                    # Stream labels and structured metadata are read without the line: filtering on them before the
                    # line filters spares the regexes every line they drop.
                    early.append(self.expression(part, aliases))
                case _:
                    expressions.append(self.expression(part, aliases))
        needs_line = any(_reads_line(part) for part in _conjuncts(one) if not _is_line_filter(part))
        return _Stages(
            tuple(matchers), tuple(early), tuple(line_filters), tuple(expressions), tuple(natives), needs_line
        )

    # Queries ----------------------------------------------------------------------------------------------------

    def log_query(self, one: Filter, by: Sequence[LogField] = ()) -> str:
        """The log query (selector and pipeline) of the lines ``one`` selects."""
        aliases = self.aliases(one, by)
        stages = self.stages(one, aliases)
        matchers = (*(stages.matchers or (f'{self.stream_label}=~".+"',)), *self._scope)
        parts = [f"{{{', '.join(matchers)}}}", *(f"| {text}" for text in stages.early), *stages.line_filters]
        if aliases:
            extracted = ", ".join(f"{alias}={quoted(_json_path(key))}" for key, alias in aliases.items())
            # A line cut short (or not an object) does not end in "}": its keys are emptied, as VictoriaLogs reads
            # nothing from a line that is not JSON. Measured on 3.5.12: a second, full `| json` marked such lines
            # too, at twice the cost of the keyed parse (1.5 s against 1.1 s on the 08-16 access log).
            parts.append(f"| regexp {quoted(JSON_END_REGEX)}")
            parts.append(f"| json {extracted}")
            parts.append("| drop __error__, __error_details__")
        if stages.needs_line:
            parts.append(f'| label_format {LINE_LABEL}="{{{{ __line__ }}}}"')
        parts.extend(f"| {text}" for text in stages.expressions)
        if stages.needs_line:
            parts.append(f"| drop {LINE_LABEL}")
        parts.extend(stages.natives)
        return " ".join(parts)

    def pattern_selectors(self, one: Filter) -> list[str]:
        """Stream selectors for Loki's patterns API (label matchers only), the narrowest first.

        The namespace label is a stream label (see the module docstring); the pod label usually is too (Promtail,
        Alloy), so the first selector also names the pods ``one`` requires. Where pod is structured metadata that
        selector matches no stream, and the second, the namespace alone, is asked instead.
        """
        parts = _conjuncts(one)
        namespace = self.stages(every(*(part for part in parts if _is_namespace(part))), {}).matchers
        wide = (*(namespace or (f'{self.stream_label}=~".+"',)), *self._scope)
        pods = [
            self.expression(part, {})
            for part in parts
            if isinstance(part, Is | OneOf | Matches) and part.field == "pod" and not _is_namespace(part)
        ]
        selectors = [f"{{{', '.join((*wide, *pods))}}}"] if pods else []
        return [*selectors, f"{{{', '.join(wide)}}}"]

    def count_query(
        self, one: Filter, by: Sequence[LogField], span: timedelta, offset: str = "", marks: Sequence[Fold] = ()
    ) -> str:
        """``sum by (<by>) (count_over_time(<log query> [span] [offset]))``; with ``marks``, the folded form."""
        moved = f" offset {offset}" if offset else ""
        if marks:
            return self._folded_query(one, by, f"[{duration(span)}]{moved}", marks)
        aliases = self.aliases(one, by)
        labels = [self.label_of(field, aliases) for field in by]
        inner = f"count_over_time({self.log_query(one, by)} [{duration(span)}]{moved})"
        if not labels:
            return f"sum({inner})"
        if not any(isinstance(field, Json) for field in by):
            return f"sum by ({', '.join(labels)}) ({inner})"
        return f"sum by ({', '.join(labels)}) ({self._emptied(inner, labels, by, aliases)})"

    def _emptied(
        self, counted: str, labels: Sequence[str], fields: Sequence[LogField], aliases: Mapping[str, str]
    ) -> str:
        """``counted`` summed by ``labels``, its JSON keys emptied in the series of lines cut short (`JSON_END_LABEL`).

        Per series, after the count: a ``label_format`` per line did the same at twice the cost (measured on 3.5.12:
        the 08-16 access log's count 1.29 s with it, 0.75 s without).
        """
        keys = [aliases[field.key] for field in fields if isinstance(field, Json)]
        if not keys:
            return f"sum by ({', '.join(labels)}) ({counted})"
        emptied = f"sum by ({', '.join(dict.fromkeys((*labels, JSON_END_LABEL)))}) ({counted})"
        for key in dict.fromkeys(keys):
            emptied = f'label_replace({emptied}, "{key}", "", "{JSON_END_LABEL}", "")'
        return emptied

    def fold_aliases(self, one: Filter, by: Sequence[LogField], marks: Sequence[Fold]) -> dict[str, str]:
        """The JSON aliases of a folded count: the base's, the groups' and the marked conditions' keys."""
        return self.aliases(one, (*by, *(mark.field for mark in marks)))

    def _folded_query(self, one: Filter, by: Sequence[LogField], span: str, marks: Sequence[Fold]) -> str:
        widened = (*by, *(mark.field for mark in marks))
        aliases = self.aliases(one, widened)
        outer = [self.label_of(field, aliases) for field in by]
        inner = list(dict.fromkeys((*outer, *(self.label_of(mark.field, aliases) for mark in marks))))
        counted = self._emptied(f"count_over_time({self.log_query(one, widened)} {span})", inner, widened, aliases)
        for index, mark in enumerate(marks):
            source = self.label_of(mark.field, aliases)
            counted = f'label_replace({counted}, "{mark_label(index)}", "1", "{source}", {quoted(mark.regex)})'
        labels = ", ".join((*outer, *(mark_label(index) for index in range(len(marks)))))
        return f"sum by ({labels}) ({counted})"

    def bucket_query(
        self,
        one: Filter,
        by: Sequence[LogField],
        bucket_seconds: int,
        shift_seconds: int = 0,
        marks: Sequence[Fold] = (),
    ) -> str:
        """The range query whose point at ``t`` (a multiple of the bucket) counts ``[t + shift, t + bucket + shift)``.

        ``shift`` is less than the bucket: buckets that start on a reader's half hour, say.
        """
        # See the module docstring: Loki reports this offset's points exactly on the grid.
        offset = f"-{bucket_seconds + shift_seconds - 1}.999999999s"
        return self.count_query(one, by, timedelta(seconds=bucket_seconds), offset, marks)

    def column_requests(
        self,
        window: Window,
        lines: Filter,
        by: Sequence[LogField],
        bucket_seconds: int | None,
        offset_seconds: int = 0,
        sample_every: int = 1,
        marks: Sequence[Fold] = (),
    ) -> list[LokiRequest]:
        """The requests that count one column: an instant query per clipped bucket, range queries for the rest.

        ``sample_every`` > 1 counts only the sampled minutes of the window (`sampled_query`), per minute, no group.
        ``marks``: the column with its marked conditions, each series marked (`Fold`).
        """
        if sample_every > 1:
            if bucket_seconds is not None or by or marks:
                raise UnplaceableFilterError("a sample of minutes is counted per minute, without groups or buckets")
            query = self.sampled_query(window, lines, sample_every)
            at = rfc3339_nanos(unix_nanos(window.end) - 1)
            return [LokiRequest(INSTANT_PATH, {"query": query, "time": at}, None)] if query else []
        if bucket_seconds is None:
            return [self._instant_request(lines, by, window.start, window.end, None, marks)]
        plan = bucket_plan(window, bucket_seconds, offset_seconds)
        shift = offset_seconds % bucket_seconds
        asked = [self._instant_request(lines, by, *clipped, marks) for clipped in plan.instants]
        if plan.first_whole is not None and plan.last_whole is not None:
            query = self.bucket_query(lines, by, bucket_seconds, shift, marks)
            per_piece = MAX_POINTS * bucket_seconds
            for first in range(plan.first_whole, plan.last_whole + 1, per_piece):
                last = min(first + per_piece - bucket_seconds, plan.last_whole)
                form = {
                    "query": query,
                    "start": rfc3339_nanos(first * _NANOS),
                    "end": rfc3339_nanos(last * _NANOS),
                    "step": str(bucket_seconds),
                }
                asked.append(LokiRequest(RANGE_PATH, form, None, first, last, shift))
        return asked

    def sampled_query(self, window: Window, lines: Filter, sample_every: int) -> str:
        """The lines of each sampled minute (`sampled_minutes`), asked at ``window.end − 1 ns``; "" when no minute.

        One leg per minute, each reading that minute alone and naming it in `MINUTE_LABEL` (its unix start)::

            label_replace(sum(count_over_time(<lines> [60s] offset D)), "digest_minute", "<m>", "digest_minute", "")
            or label_replace(…)

        with ``D = end − (m + 60 s)``, so the leg holds ``(m − 1 ns, m + 60 s − 1 ns]`` = ``[m, m + 60 s)``, the
        window's own edges (measured on Loki 3.5.12: a line on a minute's first nanosecond counts in that minute, not
        the one before). A minute without a line is no series, not a zero. Per minute rather than one ``+`` sum (which
        needs ``or vector(0)`` on every leg: an empty side empties the sum): the first and last sampled minute of a
        shape are then known, and its first and last line are read there. At most `SAMPLE_MINUTES` legs
        (`loki_sample_every`): each costs Loki a few milliseconds of its own, whatever it reads.
        """
        minutes = sampled_minutes(window, sample_every)
        if len(minutes) > SAMPLE_MINUTES:
            raise UnplaceableFilterError(
                f"a sample of {len(minutes)} minutes is more than the {SAMPLE_MINUTES} one query reads (one leg each)"
            )
        legs = []
        for minute, minute_end in minutes:
            moved = window.end - (_EPOCH + timedelta(seconds=minute_end))
            offset = duration(moved) if moved > timedelta(0) else ""
            counted = self.count_query(lines, (), timedelta(minutes=1), offset)
            legs.append(f'label_replace({counted}, "{MINUTE_LABEL}", "{minute}", "{MINUTE_LABEL}", "")')
        return " or ".join(legs)

    def _instant_request(
        self,
        lines: Filter,
        by: Sequence[LogField],
        start: datetime,
        end: datetime,
        bucket: float | None,
        marks: Sequence[Fold] = (),
    ) -> LokiRequest:
        # [end − start] at end − 1 ns holds (start − 1 ns, end − 1 ns]: exactly [start, end) in Loki's nanoseconds.
        query = self.count_query(lines, by, end - start, marks=marks)
        form = {"query": query, "time": rfc3339_nanos(unix_nanos(end) - 1)}
        return LokiRequest(INSTANT_PATH, form, bucket)

    def requests(self, question: LineCount | PeakCount) -> list[tuple[str, dict[str, str]]]:
        """Every HTTP request (path, form) that answers ``question``, for the benchmark's floor."""
        if isinstance(question, PeakCount):
            columns: list[Filter] = [question.scope]
        else:
            columns = [every(question.scope, column) for _, column in question.columns]
        bucket = question.bucket_seconds
        offset = question.bucket_offset_seconds if isinstance(question, LineCount) else 0
        planned = fold_plan(columns, every(question.scope)) if isinstance(question, LineCount) else None
        asked: list[tuple[Filter, Sequence[Fold]]] = []
        for index, column in enumerate(columns):
            if planned is not None and index == planned.base:
                asked.append((column, planned.marks))
            elif planned is not None and index in planned.folded:
                asked.extend((term, ()) for _, term in planned.rest.get(index, ()))
            else:
                asked.extend((term, ()) for _, term in counted_terms(column))
        return [
            (request.path, dict(request.form))
            for term, marks in asked
            for request in self.column_requests(question.window, term, question.by, bucket, offset, marks=marks)
        ]

    def group_of(self, labels: Mapping[str, str], by: Sequence[LogField], aliases: Mapping[str, str]) -> dict[str, str]:
        """A series' labels as a `CountRow` group keyed by the logical names."""
        return {field_label(field): labels.get(self.label_of(field, aliases), "") for field in by}

    def reading_query(self, window: Window, lines: Filter, most_repeated: bool = False) -> str:
        """The LogQL a reader pastes into Grafana Explore to read these lines, or to see the most repeated ones.

        The first: a log query (Explore's time picker sets the window). The most repeated: an instant metric query at
        the window's end, counting the lines with their numbers folded (``regexReplaceAll``) and keeping the top 5.
        """
        if not most_repeated:
            return self.log_query(lines)
        folded = '| label_format digest_message=`{{ regexReplaceAll "[0-9]+" __line__ "N" }}`'
        counted = f"count_over_time({self.log_query(lines)} {folded} [{duration(window.duration)}])"
        return f"topk(5, sum by (digest_message) ({counted}))"


# An `AnyOf` of this many parts at most is counted by inclusion–exclusion (2^n − 1 queries) rather than by copying
# every line into a label.
_MAX_EXPANDED_PARTS = 3


def counted_terms(one: Filter) -> list[tuple[int, Filter]]:
    """``one`` as signed conjunctions whose counts add up to its count (inclusion–exclusion over `AnyOf`).

    A disjunction that reads the line (``level is an error level, or no level and the word "error"``) cannot be a
    line filter, and copying four million lines into a label to test it made Loki close the connection after its
    30 s write timeout on the 07-20 day. count(A ∨ B) = count(A) + count(B) − count(A ∧ B) is exact per group and
    bucket, and each term is a plain pipeline of line and label filters.
    """
    conjuncts = _conjuncts(one)
    for index, part in enumerate(conjuncts):
        if isinstance(part, AnyOf) and 2 <= len(part.parts) <= _MAX_EXPANDED_PARTS and _reads_line(part):
            rest = conjuncts[:index] + conjuncts[index + 1 :]
            terms: list[tuple[int, Filter]] = []
            for size in range(1, len(part.parts) + 1):
                sign = 1 if size % 2 else -1
                for chosen in itertools.combinations(part.parts, size):
                    conjunction = every(*rest, *chosen)
                    if not _contradictory(conjunction):
                        terms.extend((sign * inner, term) for inner, term in counted_terms(conjunction))
            return terms
    return [(1, one)]


def _contradictory(one: Filter) -> bool:
    """Whether the conjunction plainly matches no line: a field both required empty and required to hold a value.

    The error rule's overlap term (an error level *and* no level) is such a conjunction; not asking it saves a
    scan of the day.
    """
    parts = _conjuncts(one)
    empty = {part.field for part in parts if isinstance(part, Empty)}
    for part in parts:
        if isinstance(part, Is) and part.value and part.field in empty:
            return True
        if isinstance(part, OneOf) and part.values and all(part.values) and part.field in empty:
            return True
    return False


def _is_namespace(one: Filter) -> bool:
    return isinstance(one, Is) and one.field == "namespace" and bool(one.value)


def pattern_filter(pattern: str, before: Sequence[str] = ()) -> Native:
    """The lines of ``pattern`` (Loki's ``|>`` line filter) that match none of the patterns ``before`` it."""
    stages = [f"|> {quoted(pattern)}", *(f"!> {quoted(earlier)}" for earlier in before)]
    return Native(" ".join(stages))


def none_of_patterns(patterns: Sequence[str]) -> Native:
    """The lines that match none of ``patterns``."""
    return Native(" ".join(f"!> {quoted(pattern)}" for pattern in patterns))


def filter_words(one: Filter) -> frozenset[str]:
    """The words a line may say to be selected by ``one``: its `HasWord` words and its level values.

    An error level is usually written in the line too (``level=error``, ``"level":"error"``); one that is not
    (klog's ``E1202``) only loses the pattern its place in the ranking, never its count.
    """
    match one:
        case HasWord(word=word):
            return frozenset({word.lower()})
        case OneOf(field="level", values=values):
            return frozenset(value.lower() for value in values if value)
        case Is(field="level", value=value) if value:
            return frozenset({value.lower()})
        case AllOf(parts=parts) | AnyOf(parts=parts):
            return frozenset().union(*(filter_words(part) for part in parts))
    return frozenset()


def says_any(text: str, words: frozenset[str]) -> bool:
    """Whether ``text`` holds one of ``words`` as a word, in any case.

    Python's word characters, not VictoriaLogs' exact token rule: this ranks patterns, it counts nothing.
    """
    return any(re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE) for word in words)


_CAPTURE = re.compile(r"<[A-Za-z_][A-Za-z0-9_]*>")


def usable_pattern(pattern: str) -> str | None:
    """``pattern`` as a ``|>`` filter accepts it, or None when it cannot be one.

    The pattern ingester writes every variable part as ``<_>``; a filter refuses two captures side by side (the same
    as one), a pattern of captures alone, and reads ``<word>`` in a line's own text as a named capture, which would
    match other lines than the ones mined.
    """
    joined = re.sub(r"(?:<_>){2,}", "<_>", pattern)
    literal = joined.replace("<_>", "")
    if not literal.strip() or _CAPTURE.search(literal):
        return None
    return joined


def _conjuncts(one: Filter) -> list[Filter]:
    if isinstance(one, AllOf):
        return [part for inner in one.parts for part in _conjuncts(inner)]
    return [one]


def _is_line_filter(one: Filter) -> bool:
    return isinstance(one, HasWord) or (isinstance(one, Not) and isinstance(one.part, HasWord))


def _reads_line(one: Filter) -> bool:
    match one:
        case HasWord():
            return True
        case AllOf(parts=parts) | AnyOf(parts=parts):
            return any(_reads_line(part) for part in parts)
        case Not(part=part):
            return _reads_line(part)
    return False


def _json_path(key: str) -> str:
    # Loki's JSON expressions read a bracketed, double-quoted key: any key, dots and spaces included.
    return "[" + quoted(key) + "]"


# The source -------------------------------------------------------------------------------------------------------


INSTANT_PATH = "/loki/api/v1/query"
RANGE_PATH = "/loki/api/v1/query_range"
# Loki's patterns API: the shapes its pattern ingester (``pattern_ingester: enabled: true``) mined with Drain from the
# lines it ingested, each with its lines per step. Measured on Loki 3.5.12: the query takes label matchers only ("only
# label matchers are supported" for a line or label filter), so the patterns are those of every line of the workload's
# streams, errors or not; the ingester keeps samples for 3 hours (``retainSampleFor`` in its source, not configurable)
# and forgets them when it restarts; it does not mine lines longer than its max_allowed_line_length (3,000), and does
# not answer its rarest patterns (tests/test_loki_patterns.py: five lines of a shape are not answered, 40 are); with
# the ingester off the path answers 404. A pattern writes each variable part as ``<_>``, which is also what Loki's
# ``|>`` line filter reads: the digest counts each pattern's error lines in the whole window (or in its sampled
# minutes, for a flood) with a metric query, exactly, so the patterns only have to *name* the shapes.
PATTERNS_PATH = "/loki/api/v1/patterns"
PATTERN_RETENTION = "about the last 3 hours"
# The patterns counted, the largest first: each is a count of the window or its sample (times the error rule's
# inclusion–exclusion terms), so the bound keeps a digest's requests constant; lines of the others are counted
# together as unshaped.
PATTERN_CANDIDATES = 8
# The most minutes a sample reads (`loki_sample_every`), one leg each of one query per count: a leg costs Loki a few
# milliseconds however few lines it reads (measured: 90 legs of a 200,000-line hour made the shapes 2.6 times slower
# than reading every line), so a sample asked of more minutes reads fewer, one in more. A day is then read from 1
# minute in 23 at least, the sample error_lines asks of the 07-20 flood anyway (4.5 M lines).
SAMPLE_MINUTES = 64
MINUTE_LABEL = "digest_minute"

# The patterns' volume only ranks them: a few dozen samples per pattern are enough.
PATTERN_SAMPLES = 24
PATTERN_MIN_STEP_SECONDS = 10


def loki_sample_every(window: Window, asked: int) -> int:
    """One minute in how many Loki reads for a sample of 1 in ``asked``: ``asked``, or more past `SAMPLE_MINUTES`."""
    if asked <= 1:
        return 1
    minutes = -((unix_nanos(window.start) - unix_nanos(window.end)) // (60 * _NANOS))  # started minutes, rounded up
    return max(asked, -(-minutes // SAMPLE_MINUTES))


@dataclass(frozen=True)
class LokiRequest:
    """One request of a column: its path and form; an instant one's bucket, a range one's first and last points."""

    path: str
    form: Mapping[str, str]
    bucket: float | None = None
    first: int = 0
    last: int = 0
    shift: int = 0  # a range point t stands for the bucket starting at t + shift


@dataclass(frozen=True)
class Fold:
    """A column counted in another's pass: the lines of that pass whose ``field`` matches ``regex`` (anchored)."""

    field: LogField
    regex: str


def fold_of(condition: Filter) -> Fold | None:
    """``condition`` as a `Fold` when it is one condition on one label or JSON key; None otherwise."""
    match condition:
        case Is(field=target, value=value):
            return Fold(target, regex_literal([value], ignore_case=False))
        case OneOf(field=target, values=values, ignore_case=ignore_case) if values:
            return Fold(target, regex_literal(values, ignore_case))
        case Matches(field=target, regex=regex):
            return Fold(target, regex)
        case Empty(field=target):
            return Fold(target, "")
    return None


# A pass marks at most this many conditions: each may double the groups Loki holds (and `max_query_series` counts).
MAX_MARKS = 6


def mark_label(index: int) -> str:
    """The label of a pass's ``index``-th marked condition: ``digest_fold``, then ``digest_fold_1`` and on."""
    return FOLD_LABEL if index == 0 else f"{FOLD_LABEL}_{index}"


@dataclass(frozen=True)
class FoldPlan:
    """Which columns are counted in the pass of the column of every line in scope, and what is left to ask apart.

    ``marks`` are the conditions the pass marks (`Fold`, one label each); a folded column's count in a series of
    the pass is the signed sum of its ``folded`` terms that hold for the series' marks. Its ``rest`` (terms that read
    the line: a word) are asked apart and added.
    """

    base: int  # the column of every line in scope
    marks: tuple[Fold, ...]
    folded: Mapping[int, tuple[tuple[int, Filter], ...]]  # column → its signed terms, conditions on the marks alone
    rest: Mapping[int, tuple[tuple[int, Filter], ...]]  # column → its signed terms asked apart

    def weights(self, marked: Sequence[bool]) -> dict[int, int]:
        """Each folded column's weight in a series whose marks are ``marked`` (absent: 0)."""
        holds = dict(zip(self.marks, marked, strict=True))
        weights: dict[int, int] = {}
        for column, terms in self.folded.items():
            weight = sum(sign for sign, condition in terms if _holds(condition, holds))
            if weight:
                weights[column] = weight
        return weights


def _atoms(condition: Filter) -> list[Fold] | None:
    """The marks ``condition`` is read from (each `Is`, `OneOf`, `Matches`, `Empty` one), None if it reads the line."""
    match condition:
        case Is() | OneOf() | Matches() | Empty():
            fold = fold_of(condition)
            return None if fold is None else [fold]
        case AllOf(parts=parts) | AnyOf(parts=parts):
            found: list[Fold] = []
            for part in parts:
                inner = _atoms(part)
                if inner is None:
                    return None
                found.extend(inner)
            return found
        case Not(part=part):
            return _atoms(part)
    return None  # a word (the line), or a native filter: not a mark


def _holds(condition: Filter, marked: Mapping[Fold, bool]) -> bool:
    """Whether ``condition`` holds for a series of a pass whose marks are ``marked`` (`_atoms` found them all)."""
    match condition:
        case AllOf(parts=parts):
            return all(_holds(part, marked) for part in parts)
        case AnyOf(parts=parts):
            return any(_holds(part, marked) for part in parts)
        case Not(part=part):
            return not _holds(part, marked)
    fold = fold_of(condition)
    return fold is not None and marked[fold]


def fold_plan(columns: Sequence[Filter], scope: Filter) -> FoldPlan | None:
    """The terms of columns that are ``scope`` and conditions on labels alone, counted in the pass of ``scope``.

    Only when a column is ``scope`` itself (the pass counts every line of it); None when no term folds.
    """
    base = next((index for index, column in enumerate(columns) if column == scope), None)
    if base is None:
        return None
    scope_parts = _conjuncts(scope)
    marks: dict[Fold, None] = {}
    folded: dict[int, tuple[tuple[int, Filter], ...]] = {}
    rest: dict[int, tuple[tuple[int, Filter], ...]] = {}
    for index, column in enumerate(columns):
        if index == base:
            continue
        mine: list[tuple[int, Filter]] = []
        apart: list[tuple[int, Filter]] = []
        for sign, term in counted_terms(column):
            parts = _conjuncts(term)
            extra = [part for part in parts if part not in scope_parts]
            condition = every(*extra)
            atoms = _atoms(condition) if extra and all(part in parts for part in scope_parts) else None
            if atoms is not None and len(dict.fromkeys((*marks, *atoms))) <= MAX_MARKS:
                marks.update(dict.fromkeys(atoms))
                mine.append((sign, condition))
            else:
                apart.append((sign, term))
        if mine:
            folded[index] = tuple(mine)
            rest[index] = tuple(apart)
    if not folded:
        return None
    return FoldPlan(base, tuple(marks), folded, rest)


@dataclass(frozen=True)
class _Plan:
    """How a window is cut into buckets: clipped ends by instant queries, whole buckets by one range query."""

    instants: tuple[tuple[datetime, datetime, float], ...]  # (start, end, bucket start) clipped to the window
    first_whole: int | None  # unix seconds of the first whole bucket, None when there is none
    last_whole: int | None


def bucket_plan(window: Window, bucket_seconds: int, offset_seconds: int = 0) -> _Plan:
    """The window cut on multiples of ``bucket_seconds`` since the epoch, plus ``offset_seconds``.

    As VictoriaLogs' ``_time:<bucket> offset <offset>`` cuts it. The whole buckets are named by their range query's
    evaluation points ``t`` (multiples of the bucket, where Loki's frontend puts them), each standing for the
    bucket ``[t + offset, t + offset + bucket)``.
    """
    if bucket_seconds <= 0:
        raise UnplaceableFilterError("a bucket is at least one second")
    shift_ns = offset_seconds % bucket_seconds * _NANOS
    start_ns, end_ns = unix_nanos(window.start) - shift_ns, unix_nanos(window.end) - shift_ns
    step_ns = bucket_seconds * _NANOS
    shift = shift_ns // _NANOS
    first_boundary = -(-start_ns // step_ns) * step_ns  # the first boundary at or after the start
    last_boundary = end_ns // step_ns * step_ns  # the last boundary at or before the end
    instants: list[tuple[datetime, datetime, float]] = []
    if first_boundary > last_boundary:  # the window lies inside one bucket
        bucket = start_ns // step_ns * bucket_seconds + shift
        return _Plan(((window.start, window.end, float(bucket)),), None, None)
    if start_ns < first_boundary:
        bucket = first_boundary // _NANOS - bucket_seconds + shift
        instants.append((window.start, _from_nanos(first_boundary + shift_ns), float(bucket)))
    if last_boundary < end_ns:
        instants.append((_from_nanos(last_boundary + shift_ns), window.end, float(last_boundary // _NANOS + shift)))
    if first_boundary < last_boundary:
        return _Plan(tuple(instants), first_boundary // _NANOS, last_boundary // _NANOS - bucket_seconds)
    return _Plan(tuple(instants), None, None)


def _from_nanos(nanos: int) -> datetime:
    return _EPOCH + timedelta(microseconds=nanos // 1_000)


_Counted = list[tuple[dict[str, str], float | None, float]]  # (group, bucket start, count)


class LokiSource(HttpSource):
    """Loki through its metric-query API (``/loki/api/v1/query`` and ``query_range``); lines are never read."""

    def __init__(
        self,
        *args: object,
        fields: Mapping[Role, str] | None = None,
        scope: Sequence[Matcher] = (),
        **kwargs: object,
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]  # the transport's own arguments, passed through
        self.writer = LogqlWriter(fields, scope)
        self._ready = False
        self._ready_lock = asyncio.Lock()
        # Set when Loki's max_query_series refused a folded count: its columns are asked apart from then on.
        self._unfolded = False

    async def count(self, question: LineCount) -> list[CountRow]:
        names = [name for name, _ in question.columns]
        answers = await self._answers(question)
        folded: dict[tuple[tuple[str, ...], float | None], tuple[dict[str, str], dict[str, float]]] = {}
        for name, counted in zip(names, answers, strict=True):
            for group, bucket, value in counted:
                key = (tuple(group.values()), bucket)
                _, counts = folded.setdefault(key, (group, dict.fromkeys(names, 0.0)))
                counts[name] += value
        return [CountRow(group=group, counts=counts, bucket=bucket) for (_, bucket), (group, counts) in folded.items()]

    async def column_series(self, question: LineCount) -> dict[str, list[LineSeries]]:
        """A bucketed question's counts per column, one `LineSeries` per group (what `SharedPasses` keeps).

        A folded count refused by ``max_query_series`` is that error, not its columns asked apart: a pass's columns
        per minute and pod are as many groups as its fold, nearly (measured: 600 pods, one column of 200 answered
        4.9 MB before the others were refused), and its questions can still be asked one by one.
        """
        if question.bucket_seconds is None:
            raise ValueError("column series answer a bucketed question")
        answers = await self._answers(question, apart_when_refused=False)
        return {name: summed_series(counted) for (name, _), counted in zip(question.columns, answers, strict=True)}

    async def _answers(self, question: LineCount, apart_when_refused: bool = True) -> list[_Counted]:
        """Each column's counts per group and bucket: folded into one marked pass where they can be, else apart.

        ``apart_when_refused`` False: a fold refused by ``max_query_series`` raises instead of asking the columns apart.
        """
        columns = [every(question.scope, column) for _, column in question.columns]
        planned = None if self._unfolded else fold_plan(columns, every(question.scope))
        if planned is not None:
            try:
                return await self._folded(question, columns, planned)
            except SourceError as problem:
                if not apart_when_refused:
                    raise  # the pass's own refusal: a question's fold (fewer groups) may still be answered
                if problem.kind is not SourceErrorKind.QUERY or "max_query_series" not in problem.message:
                    raise
                log.info(
                    "Loki: a folded count has more groups than max_query_series allows; columns asked apart from now"
                    " on (%s)",
                    problem.message,
                )
                self._unfolded = True
        return list(
            await asyncio.gather(
                *(
                    self._column(
                        question.window, column, question.by, question.bucket_seconds, question.bucket_offset_seconds
                    )
                    for column in columns
                )
            )
        )

    @contextmanager
    def _askable(self) -> Iterator[None]:
        """Writing a question's LogQL: one that Loki cannot be asked (`UnplaceableFilterError`) is a query error."""
        try:
            yield
        except UnplaceableFilterError as problem:
            raise self._error(SourceErrorKind.QUERY, f"cannot ask Loki this question: {problem}") from None

    async def _folded(self, question: LineCount, columns: Sequence[Filter], planned: FoldPlan) -> list[_Counted]:
        """Each column's counts: the base and the folded terms from one marked pass (`Fold`), the rest apart."""
        window, by = question.window, question.by
        bucket, offset = question.bucket_seconds, question.bucket_offset_seconds
        base = columns[planned.base]
        with self._askable():
            asked = self.writer.column_requests(window, base, by, bucket, offset, marks=planned.marks)
        aliases = self.writer.fold_aliases(base, by, planned.marks)
        labels = [mark_label(index) for index in range(len(planned.marks))]
        await self._ensure_ready()
        others = [
            self._column(window, column, by, bucket, offset)
            for index, column in enumerate(columns)
            if index != planned.base and index not in planned.folded
        ]
        folded_columns = sorted(planned.folded)
        passed, rests, apart = await asyncio.gather(
            asyncio.gather(
                *(
                    self._instant(request.form, by, aliases, request.bucket, labels)
                    if request.path == INSTANT_PATH
                    else self._range(request, by, aliases, bucket or 1, labels)
                    for request in asked
                )
            ),
            asyncio.gather(
                *(
                    self._terms(window, list(planned.rest[index]), by, bucket, offset, net=True)
                    for index in folded_columns
                )
            ),
            asyncio.gather(*others),
        )
        every_line: _Counted = []
        per_column: dict[int, _Counted] = {index: list(rest) for index, rest in zip(folded_columns, rests, strict=True)}
        # A range answer's points share their series' group: its unmarked group and weights are made once per series.
        seen: dict[int, tuple[dict[str, str], dict[int, int]]] = {}
        weights_of: dict[tuple[bool, ...], dict[int, int]] = {}
        for group, at, value in (row for answer in passed for row in answer):
            known = seen.get(id(group))
            if known is None:
                marked = tuple(group.get(label) == "1" for label in labels)
                weights = weights_of.get(marked)
                if weights is None:
                    weights = weights_of[marked] = planned.weights(marked)
                unmarked = {name: text for name, text in group.items() if name not in labels}
                known = seen[id(group)] = (unmarked, weights)
            unmarked, weights = known
            every_line.append((unmarked, at, value))
            for index, weight in weights.items():
                per_column[index].append((unmarked, at, weight * value))
        remaining = iter(apart)
        return [
            every_line if index == planned.base else per_column[index] if index in per_column else next(remaining)
            for index in range(len(columns))
        ]

    async def values(self, name: str, window: Window) -> list[str]:
        # Loki's index answers which values a stream label took in the window, without counting a line.
        await self._ensure_ready()
        form = {"start": str(unix_nanos(window.start)), "end": str(unix_nanos(window.end) - 1)}
        if self.writer.scope:
            # Within the cluster's scope: the streams it selects, still from the index alone.
            form["query"] = "{" + ", ".join(self.writer.scope) + "}"
        data = await self._post_json(f"/loki/api/v1/label/{name}/values", form)
        if data is None:
            return []  # no stream had the label
        if not isinstance(data, list) or not all(isinstance(value, str) for value in data):
            raise self._error(SourceErrorKind.BAD_RESPONSE, "label values that are not a list of strings")
        return sorted(set(data) - {""})

    async def series(self, question: LineCount) -> list[LineSeries]:
        # Folding `count`'s rows keeps one path to the numbers: next to what the answer costs Loki, the fold is
        # small (a replay on Loki runs at its floor, docs/benchmarks.md).
        column = series_column(question)
        return series_of(await self.count(question), column)

    async def peak(self, question: PeakCount) -> list[CountRow]:
        counted = await self._column(question.window, question.scope, question.by, question.bucket_seconds)
        per_group: dict[tuple[str, ...], tuple[dict[str, str], list[float]]] = {}
        for group, _, value in counted:
            per_group.setdefault(tuple(group.values()), (group, []))[1].append(value)
        return [
            CountRow(group=group, counts={"peak": max(values), "lines": sum(values)})
            for group, values in per_group.values()
        ]

    async def shapes(self, question: ShapeCount) -> Shapes:
        """The shapes Loki's pattern ingester mined from these lines' streams, each counted exactly in the window.

        See `PATTERNS_PATH`: the patterns name the shapes, metric queries count them (each line once, for the
        first pattern in rank order it matches), and the lines of no counted pattern are `Shapes.unshaped`. With
        ``sample_every`` > 1 the counts, unshaped included, are those of the sampled minutes alone
        (`sampled_minutes`), each shown shape's first and last line those of the sample, and the answer says
        ``sampled_every``: as asked, or one minute in more where the window holds more than `SAMPLE_MINUTES` sampled
        minutes (`loki_sample_every`). Every request of the question shares its clock.
        """
        with answering_within(question.clock):
            return await self._shapes(question)

    async def _shapes(self, question: ShapeCount) -> Shapes:
        await self._ensure_ready()
        mined = await self._patterns(question)
        candidates = mined[:PATTERN_CANDIDATES]
        window = question.window
        # A flood's counts read only the sampled minutes: each count otherwise reads every line of the window, and
        # nine of them took 20 s of a million lines (docs/benchmarks.md).
        sample = loki_sample_every(window, question.sample_every)
        # Each candidate's lines: those of its pattern and of none before it, so that every line counts once.
        partition = [
            every(question.lines, pattern_filter(pattern, candidates[:index]))
            for index, pattern in enumerate(candidates)
        ]
        counted = (
            await asyncio.gather(
                *(self._minutes(window, lines, sample) for lines in partition),
                self._minutes(window, every(question.lines, none_of_patterns(candidates)), sample),
            )
            if candidates
            else [{}]
        )
        *per_pattern, unshaped = (sum(minutes.values(), 0.0) for minutes in counted)
        if not any(per_pattern):
            # No pattern of the lines asked (none at all, or only of other levels or hours). Lines without a name
            # are not "no shapes"; no line at all is (a day the workload was quiet, for the history).
            lines = unshaped if candidates else await self.total(window, question.lines, sample)
            if not lines:
                return Shapes(top=(), distinct=0, sampled_every=sample)
            if len(mined) > len(candidates):
                raise self._error(
                    SourceErrorKind.UNSUPPORTED,
                    f"none of the {len(candidates)} patterns counted (of {len(mined)} Loki's pattern ingester holds "
                    "for these streams) is of these lines",
                )
            raise self._error(
                SourceErrorKind.UNSUPPORTED,
                f"Loki's pattern ingester holds no pattern of these lines in this window (it keeps what it mined in "
                f"{PATTERN_RETENTION})",
            )
        found = sorted(
            (
                (lines, pattern, index)
                for index, (pattern, lines) in enumerate(zip(candidates, per_pattern, strict=True))
                if lines
            ),
            key=lambda one: (-one[0], one[1]),
        )
        shown = found[: question.top]
        edges = await asyncio.gather(
            *(
                self._edge(self._edge_window(window, counted[index], direction), partition[index], direction)
                for _, _, index in shown
                for direction in ("forward", "backward")
            )
        )
        top = tuple(
            Shape(pattern, lines=lines, first=first[0], last=last[0], example=first[1], key=pattern)
            for (lines, pattern, _), first, last in zip(shown, edges[0::2], edges[1::2], strict=True)
        )
        why = ""
        if unshaped:
            why = f"Loki's pattern ingester names only the frequent shapes it mined in {PATTERN_RETENTION}"
            if len(mined) > len(candidates):
                why += (
                    f", and {len(candidates)} of its {len(mined)} patterns here were counted (those saying an error "
                    "word first, then the largest)"
                )
        return Shapes(
            top=top,
            distinct=len(found),
            capped=unshaped > 0,
            keys=tuple(pattern for _, pattern, _ in found),
            unshaped=unshaped,
            unshaped_why=why,
            sampled_every=sample,
        )

    async def _patterns(self, question: ShapeCount) -> list[str]:
        """The usable patterns of the question's streams in its window: those saying its words first, then by volume."""
        window = question.window
        step = max(PATTERN_MIN_STEP_SECONDS, int(window.seconds) // PATTERN_SAMPLES)
        for selector in self.writer.pattern_selectors(question.lines):
            form = {
                "query": selector,
                "start": rfc3339_nanos(unix_nanos(window.start)),
                "end": rfc3339_nanos(unix_nanos(window.end)),
                "step": f"{step}s",
            }
            mined = self._mined(await self._post_json(PATTERNS_PATH, form), filter_words(question.lines))
            if mined:
                return mined
        return []

    def _mined(self, data: Any, words: frozenset[str]) -> list[str]:
        """The usable patterns answered, those saying one of ``words`` first, then the largest.

        The API takes no line filter: the workload's info lines have patterns too, often the largest. Those that say
        a word the question asks for go first, so that the counted slots go to the likely error shapes; the counts,
        not this order, decide what is shown.
        """
        if data is None:
            return []
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise self._error(SourceErrorKind.BAD_RESPONSE, "patterns answer is not a list of patterns")
        volume: dict[str, float] = {}
        for item in data:
            pattern, samples = item.get("pattern"), item.get("samples")
            if not isinstance(pattern, str) or not isinstance(samples, list):
                raise self._error(SourceErrorKind.BAD_RESPONSE, "a pattern without its text or samples")
            usable = usable_pattern(pattern)
            if usable is not None:
                volume[usable] = volume.get(usable, 0.0) + sum(parse_value(pair, self) for pair in samples)
        return sorted(volume, key=lambda pattern: (not says_any(pattern, words), -volume[pattern], pattern))

    async def total(self, window: Window, lines: Filter, sample_every: int = 1) -> float:
        """The lines of ``window`` that ``lines`` selects, one number (the sampled minutes if ``sample_every`` > 1)."""
        return sum((await self._minutes(window, lines, sample_every)).values(), 0.0)

    async def _minutes(self, window: Window, lines: Filter, sample_every: int) -> dict[float | None, float]:
        """The lines ``lines`` selects per sampled minute (unix start), or under None for the whole window.

        A sample is read by one instant query per inclusion–exclusion term (`LogqlWriter.sampled_query`), each leg
        reading only its minute: the cost is the sample's, not the window's.
        """
        counted = await self._column(window, lines, (), None, sample_every=sample_every)
        per_minute: dict[float | None, float] = {}
        for _, minute, value in counted:
            per_minute[minute] = per_minute.get(minute, 0.0) + value
        return per_minute

    @staticmethod
    def _edge_window(window: Window, minutes: Mapping[float | None, float], direction: str) -> Window:
        """Where a shape's first (``forward``) or last line is read: a sample's first or last minute holding it.

        A log query of limit 1 reads until it finds a line: over the whole window, a shape that starts late read
        every line before it (5 to 7.5 s for 3 shapes of the 1 M-line benchmark, docs/benchmarks.md). In the sample it
        reads one minute at most, and the times are the sample's, as `Shapes.sampled_every` says.
        """
        held = [minute for minute, lines in minutes.items() if minute is not None and lines > 0]
        if not held:
            return window
        minute = min(held) if direction == "forward" else max(held)
        start = _EPOCH + timedelta(seconds=minute)
        return replace(window, start=max(window.start, start), end=min(window.end, start + timedelta(minutes=1)))

    async def _edge(self, window: Window, lines: Filter, direction: str) -> tuple[float, str]:
        """The first (``forward``) or last (``backward``) line ``lines`` selects in ``window``: its time and text.

        One line, read to show it and to date the shape: ``limit=1`` bounds what crosses the network.
        """
        form = {
            "query": self.writer.log_query(lines),
            "start": rfc3339_nanos(unix_nanos(window.start)),
            "end": rfc3339_nanos(unix_nanos(window.end)),
            "limit": "1",
            "direction": direction,
        }
        data = await self._post_json(RANGE_PATH, form)
        streams = data.get("result") if isinstance(data, dict) and data.get("resultType") == "streams" else None
        if not isinstance(streams, list):
            raise self._error(SourceErrorKind.BAD_RESPONSE, "expected log streams")
        entries: list[tuple[int, str]] = []
        for stream in streams:
            values = stream.get("values") if isinstance(stream, dict) else None
            if not isinstance(values, list):
                raise self._error(SourceErrorKind.BAD_RESPONSE, "a log stream without its values")
            for entry in values:
                if not isinstance(entry, list) or len(entry) < 2 or not str(entry[0]).isdigit():
                    raise self._error(SourceErrorKind.BAD_RESPONSE, "a log entry that is not [nanoseconds, line]")
                entries.append((int(entry[0]), str(entry[1])))
        if not entries:
            raise self._error(SourceErrorKind.BAD_RESPONSE, "a counted shape whose lines Loki did not return")
        nanos, line = min(entries) if direction == "forward" else max(entries)
        return nanos / _NANOS, line

    @property
    def language(self) -> str:
        return "LogQL"

    def reading_query(self, window: Window, lines: Filter, most_repeated: bool = False) -> str:
        return self.writer.reading_query(window, lines, most_repeated)

    async def _column(
        self,
        window: Window,
        lines: Filter,
        by: Sequence[LogField],
        bucket_seconds: int | None,
        offset_seconds: int = 0,
        sample_every: int = 1,
    ) -> _Counted:
        """One column's counts per group and bucket: the sum of its inclusion–exclusion terms (`counted_terms`)."""
        return await self._terms(window, counted_terms(lines), by, bucket_seconds, offset_seconds, sample_every)

    async def _terms(
        self,
        window: Window,
        signed: Sequence[tuple[int, Filter]],
        by: Sequence[LogField],
        bucket_seconds: int | None,
        offset_seconds: int = 0,
        sample_every: int = 1,
        net: bool = False,
    ) -> _Counted:
        """The signed sum of ``signed``'s counts per group and bucket; ``net``: part of a sum, negatives kept."""
        if not signed:
            return []
        # Every query is written before any is sent: a question Loki cannot be asked is refused whole.
        with self._askable():
            terms = [
                (
                    sign,
                    self.writer.aliases(term, by),
                    self.writer.column_requests(window, term, by, bucket_seconds, offset_seconds, sample_every),
                )
                for sign, term in signed
            ]
        await self._ensure_ready()
        signs = [sign for sign, _, asked in terms for _ in asked]
        answers = await asyncio.gather(
            *(
                self._instant(request.form, by, aliases, request.bucket)
                if request.path == INSTANT_PATH
                else self._range(request, by, aliases, bucket_seconds or 1)
                for _, aliases, asked in terms
                for request in asked
            )
        )
        if len(terms) == 1 and terms[0][0] == 1:
            return [row for answer in answers for row in answer]
        summed: dict[tuple[tuple[str, ...], float | None], tuple[dict[str, str], float]] = {}
        for sign, answer in zip(signs, answers, strict=True):
            for group, bucket, value in answer:
                key = (tuple(group.values()), bucket)
                held = summed.get(key, (group, 0.0))[1]
                summed[key] = (group, held + sign * value)
        return [(group, bucket, value) for (_, bucket), (group, value) in summed.items() if net or value > 0]

    async def _instant(
        self,
        form: Mapping[str, str],
        by: Sequence[LogField],
        aliases: Mapping[str, str],
        bucket: float | None,
        marks: Sequence[str] = (),
    ) -> _Counted:
        """The answer's counts; ``marks``: labels kept in each group as they are (`mark_label`)."""
        samples = self._vector(await self._post_json(INSTANT_PATH, form))
        counted: _Counted = []
        for sample in samples:
            self._check_count(sample.value)
            # A sampled count's series are its minutes (`LogqlWriter.sampled_query`).
            minute = sample.labels.get(MINUTE_LABEL)
            at = bucket if minute is None else self._minute(minute)
            group = self.writer.group_of(sample.labels, by, aliases)
            for mark in marks:
                group[mark] = sample.labels.get(mark, "")
            counted.append((group, at, sample.value))
        return counted

    def _minute(self, label: str) -> float:
        if not label.isdigit():
            raise self._error(SourceErrorKind.BAD_RESPONSE, f"a sampled minute that is not unix seconds: {label!r}")
        return float(label)

    async def _range(
        self,
        request: LokiRequest,
        by: Sequence[LogField],
        aliases: Mapping[str, str],
        step: int,
        marks: Sequence[str] = (),
    ) -> _Counted:
        first, last = request.first, request.last
        series = self._matrix(await self._post_json(RANGE_PATH, request.form))
        counted: _Counted = []
        for one in series:
            group = self.writer.group_of(one.labels, by, aliases)
            for mark in marks:
                group[mark] = one.labels.get(mark, "")
            for moment, value in one.points:
                bucket = round(moment)
                if abs(moment - bucket) > 1e-6 or bucket % step or not first <= bucket <= last:
                    raise self._error(
                        SourceErrorKind.BAD_RESPONSE,
                        f"a bucket count at {moment:.3f}, off the {step} s grid asked for (not placed in a guessed"
                        " bucket)",
                    )
                self._check_count(value)
                counted.append((group, float(bucket + request.shift), value))
        return counted

    async def _ensure_ready(self) -> None:
        """Refuse to count while Loki says it is not ready (once per source; a ready Loki is not asked again).

        Measured on Loki 3.5.12: a query sent while it starts is held until the querier is up and then answered
        200 with whatever the ingesters hold so far — an empty or short count that looks like a quiet day.
        ``/ready`` says 503 meanwhile. A gateway that does not expose ``/ready`` (404, 401…) cannot tell, and the
        queries go ahead: only an explicit 503 stops them.

        A refused connection is the error at once, as it is for a query (`HttpSource._exchange_once`): letting the
        queries go ahead would let one reach a Loki whose port opened in between, before it is ready (seen once in
        the suite's CI: a count answered while Loki started). Other failures to ask are left to the queries to say.
        """
        if self._ready:
            return
        async with self._ready_lock:
            if self._ready:
                return
            try:
                async with asyncio.timeout(self._endpoint.timeout_seconds):
                    response = await self._client.get(self._base + "/ready")
            except httpx.ConnectError as exc:
                raise self._unreachable(exc) from None
            except (TimeoutError, httpx.HTTPError):
                return  # the queries themselves will say what is wrong with the connection
            if response.status_code == 503:
                reason = " ".join(response.text.split())[:200] or "no reason given"
                raise self._error(SourceErrorKind.HTTP, f"Loki is not ready (HTTP 503 at /ready: {reason})")
            self._ready = True

    def _check_count(self, value: float) -> None:
        if not math.isfinite(value) or value < 0:
            raise self._error(SourceErrorKind.BAD_RESPONSE, "a count that is not a finite number")

    def _decode(self, response: httpx.Response, text: str) -> Any:
        problem = self._loki_problem(response, text)
        if problem is not None:
            raise problem
        return super()._decode(response, text)

    def _loki_problem(self, response: httpx.Response, text: str) -> SourceError | None:
        """Loki's own failures, named; None for an answer the shared decoding reads."""
        status = response.status_code
        if status < 300:
            return None
        reason = " ".join(text.split())[:300]
        lowered = reason.lower()
        path = response.request.url.path if response.request is not None else ""
        if "maximum of series" in lowered or "max_query_series" in lowered:
            limit = re.search(r"\((\d+)\)", reason)
            named = f" ({limit.group(1)})" if limit else ""
            return self._error(
                SourceErrorKind.QUERY,
                f"Loki's max_query_series{named} cut the answer: too many groups for one query ({reason})",
            )
        if "maximum resolution" in lowered or "max_query_length" in lowered or "time range exceeds" in lowered:
            return self._error(SourceErrorKind.QUERY, f"the question exceeds a Loki query limit: {reason}")
        if status == 401 and "no org id" in lowered:
            # A multi-tenant Loki (auth_enabled) asked without X-Scope-OrgID: the same for every query, said once.
            return self._error(
                SourceErrorKind.HTTP,
                "Loki is multi-tenant and no tenant was sent (HTTP 401 no org id): set DIGEST_LOKI_TENANT "
                "(sent as X-Scope-OrgID)",
            )
        if status == 429 or "too many outstanding requests" in lowered:
            return self._error(
                SourceErrorKind.HTTP,
                f"Loki is overloaded (HTTP {status}: {reason or 'too many requests'}); its query queue is full",
            )
        if status in (408, 504) or "timed out" in lowered or "deadline exceeded" in lowered:
            return self._error(SourceErrorKind.TIMEOUT, f"Loki's query timed out (HTTP {status}): {reason}")
        if status == 503:
            return self._error(SourceErrorKind.HTTP, f"Loki is not ready (HTTP 503): {reason or 'no reason given'}")
        if status == 404 and path == PATTERNS_PATH:
            # Asked only after the counts, which a wrong URL would already have failed.
            return self._error(
                SourceErrorKind.UNSUPPORTED,
                "message shapes are not available on this backend: Loki's patterns API answers 404 (its pattern "
                "ingester is off: pattern_ingester.enabled)",
            )
        if status == 404 or "unsupported path" in lowered:
            # Not a Loki API at all: the shared transport names what answers there instead (`_identify`).
            return WrongApiError(self._endpoint.name, SourceErrorKind.HTTP, f"no {path or 'query path'}")
        return None

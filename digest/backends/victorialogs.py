"""VictoriaLogs: the log questions of `checks.log_questions` as LogsQL ``stats`` queries, counted server-side.

A `LineCount` becomes one query::

    _time:[start, end) <scope> [| unpack_json from _msg fields (k, …) keep_original_fields]
      | stats by (_time:<bucket>s, <fields>) count() as lines, count() if (<filter>) as errors

sent to ``/select/logsql/stats_query`` at the window's end; a `PeakCount` nests two ``stats`` pipes (per bucket,
then max and sum per group), so per-minute rows never leave the server. The answer is a Prometheus-shaped vector
whose ``__name__`` is the column; rows are folded back into one `CountRow` per group and bucket, keyed by the
logical field names.

Every request says ``allow_partial_response=0``. A VictoriaLogs cluster whose vlselect runs with
``-search.allowPartialResponse`` (set for dashboards that would rather draw something than nothing) answers a query
that some vlstorage nodes could not serve with the counts of the nodes that could, as a plain 200 with no mark of
what is missing; the argument overrides the flag (VictoriaLogs' querying docs, "Partial responses"), so such a query
fails instead and its check is UNKNOWN rather than short. A single node and the versions before the cluster's partial
responses read it as an argument they do not know, and ignore it.

Logical roles map to the shipper's fields: Vector's ``kubernetes_logs`` names by default (`DEFAULT_FIELDS`), the
policy's ``logs.fields`` overrides them. JSON keys are read with ``unpack_json … keep_original_fields``, so a
pipeline that already parsed the access log into fields is read the same way as one that shipped the JSON text.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from operator import itemgetter
from typing import cast

from digest.backends.http import HttpSource, answering_within, result_labels_and_text
from digest.backends.scope import Matcher, render
from digest.checks.contract import SourceErrorKind, Window, rfc3339
from digest.checks.log_questions import (
    EVERY_LINE,
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
    field_label,
    json_keys,
    sampled_minutes,
    series_column,
    series_of,
)
from digest.checks.logsql import any_of_regex, field_name, quoted

# In every request's form: a count from only some of a cluster's storage nodes is refused, never taken (above).
WHOLE_ANSWERS_ONLY: Mapping[str, str] = {"allow_partial_response": "0"}

# Vector's kubernetes_logs source (the fields it writes for every container line).
DEFAULT_FIELDS: Mapping[Role, str] = {
    "namespace": "kubernetes.pod_namespace",
    "pod": "kubernetes.pod_name",
    "container": "kubernetes.container_name",
    "node": "kubernetes.pod_node_name",
    "level": "level",
    "stream": "stream",
}


def time_filter(window: Window) -> str:
    """The window as an absolute half-open LogsQL filter in UTC with ``Z``, never relative to now.

    Whole seconds, or milliseconds where the window has them (a gap between a rule evaluator's minutes).
    """
    return f"_time:[{_precise(window.start)}, {_precise(window.end)})"


def _precise(moment: datetime) -> str:
    if moment.microsecond:
        return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return rfc3339(moment)


class LogsqlWriter:
    """Writes the questions in LogsQL for a given mapping of roles to field names."""

    def __init__(self, fields: Mapping[Role, str] | None = None, scope: Sequence[Matcher] = ()) -> None:
        self._fields = {**DEFAULT_FIELDS, **(fields or {})}
        # The cluster on a shared store (`digest.backends.scope`): a stream filter, the first thing every query reads.
        self._stream = f"{{{render(scope)}}} " if scope else ""

    def name_of(self, one: LogField) -> str:
        """The field's name in VictoriaLogs."""
        return one.key if isinstance(one, Json) else self._fields[one]

    def filter(self, one: Filter) -> str:
        """``one`` as a LogsQL filter; an empty string for every line."""
        match one:
            case Is(field=target, value=value):
                return f"{field_name(self.name_of(target))}:={quoted(value)}"
            case OneOf(field=target, values=values, ignore_case=ignore_case):
                return f"{field_name(self.name_of(target))}:~{any_of_regex(values, ignore_case)}"
            case Matches(field=target, regex=regex):
                return f"{field_name(self.name_of(target))}:~{quoted(f'^(?:{regex})$')}"
            case Empty(field=target):
                return f'{field_name(self.name_of(target))}:""'
            case HasWord(word=word):
                return f"i({quoted(word)})"
            case AllOf(parts=parts):
                # Every other filter delimits itself (atoms, "(… or …)", "-(…)", "(native)"): juxtaposition is AND.
                return " ".join(text for text in (self.filter(part) for part in parts) if text)
            case AnyOf(parts=parts):
                return "(" + " or ".join(f"({self.filter(part) or '*'})" for part in parts) + ")"
            case Not(part=part):
                return f"-({self.filter(part) or '*'})"
            case Native(text=text):
                return f"({text})" if text.strip() else ""
        raise AssertionError(f"unknown filter {one!r}")  # pragma: no cover  # the union is closed

    def _json_keys(self, *filters: Filter, by: tuple[LogField, ...] = ()) -> list[str]:
        keys: dict[str, None] = {}
        for grouped in by:
            if isinstance(grouped, Json):
                keys[grouped.key] = None
        for one in filters:
            for key in json_keys(one):
                keys[key] = None
        return list(keys)

    def _head(self, window: Window, scope: Filter, more: tuple[Filter, ...], by: tuple[LogField, ...]) -> str:
        return self.head(time_filter(window), scope, more, by)

    def head(self, time: str, scope: Filter, more: tuple[Filter, ...] = (), by: tuple[LogField, ...] = ()) -> str:
        """The query's start: the cluster's streams, ``time``, the JSON keys the filters and fields read, the scope.

        ``time`` is a time filter, or ``*`` for a replayed recording rule, whose evaluator sets the time.
        """
        keys = self._json_keys(scope, *more, by=by)
        head = self._stream + time
        if not keys:
            scoped = self.filter(scope)
            return f"{head} {scoped}" if scoped else head
        fields = ", ".join(field_name(key) for key in keys)
        # JSON keys exist only after unpacking, so a scope on them is a `filter` pipe; keep_original_fields reads a
        # pipeline that parsed the message already the same way as one that shipped the JSON text.
        head += f" | unpack_json from _msg fields ({fields}) keep_original_fields"
        scoped = self.filter(scope)
        return f"{head} | filter {scoped}" if scoped else head

    def _by(self, by: tuple[LogField, ...], bucket_seconds: int | None, offset_seconds: int = 0) -> str:
        names = [field_name(self.name_of(one)) for one in by]
        if bucket_seconds is not None:
            names.insert(0, f"_time:{bucket_seconds}s" + (f" offset {offset_seconds}s" if offset_seconds else ""))
        return f"by ({', '.join(names)}) " if names else ""

    def count_query(self, question: LineCount) -> str:
        """One stats query answering ``question``."""
        filters = tuple(column for _, column in question.columns)
        head = self._head(question.window, question.scope, filters, question.by)
        columns = ", ".join(
            f"count() as {field_name(name)}"
            if column == EVERY_LINE
            else f"count() if ({self.filter(column)}) as {field_name(name)}"
            for name, column in question.columns
        )
        by = self._by(question.by, question.bucket_seconds, question.bucket_offset_seconds)
        return f"{head} | stats {by}{columns}"

    def peak_query(self, question: PeakCount) -> str:
        """Two nested stats pipes: lines per group and bucket, then the busiest bucket and the sum per group."""
        head = self._head(question.window, question.scope, (), question.by)
        outer = self._by(question.by, None)
        return (
            f"{head} | stats {self._by(question.by, question.bucket_seconds)}count() as per_bucket"
            f" | stats {outer}max(per_bucket) as peak, sum(per_bucket) as lines"
        )

    def requests(self, question: LineCount | PeakCount) -> list[tuple[str, dict[str, str]]]:
        """The HTTP requests (path, form) that answer ``question``: what the source sends, for the benchmark floor."""
        query = self.count_query(question) if isinstance(question, LineCount) else self.peak_query(question)
        return [("/select/logsql/stats_query", _form(query, question.window))]

    def reading_query(self, window: Window, lines: Filter, most_repeated: bool = False) -> str:
        """The LogsQL a reader pastes into VictoriaLogs' UI: the first of these lines, or the most repeated."""
        tail = "collapse_nums | top 5 by (_msg)" if most_repeated else "sort by (_time) | limit 20"
        return f"{self._head(window, lines, (), ())} | {tail}"

    def shape_request(self, question: ShapeCount) -> tuple[str, dict[str, str]]:
        """The one stats query of ``question``: per shape, its lines, its last time and its first line (time, text).

        ``row_min(_time, _time, _msg)`` keeps the first line of each shape in the same pass as the count (a second
        query counting distinct shapes would scan the lines again: 5 s of the server's CPU on a 4.5 M-line day);
        the answer's length, bounded by ``group_limit``, is the number of distinct shapes.
        """
        time = time_filter(question.window)
        if question.sample_every > 1:
            # VictoriaLogs skips every block outside the sampled minutes by its time range: the cost is the sample's.
            minutes = sampled_minutes(question.window, question.sample_every)
            time += " (" + " or ".join(f"_time:[{_stamp(a)}, {_stamp(b)})" for a, b in minutes) + ")"
        head = self.head(time, question.lines)
        # The shape is the message with numbers, IPs, UUIDs and times collapsed, cut to its first characters. The
        # cut is a regexp, a quarter of the query's CPU when every line runs it (60 of 280 ms on the 13 M-line day's
        # sample): only a shape longer in bytes than the cut in characters can need it, so only those run it.
        query = (
            f"{head} | copy _msg as {_SHAPE} | collapse_nums at {_SHAPE} prettify | len({_SHAPE}) as {_SHAPE_BYTES}"
            f" | extract_regexp if ({_SHAPE_BYTES}:>{question.length})"
            f' "(?s)^(?P<{_SHAPE}>.{{0,{question.length}}})" from {_SHAPE}'
            f" | stats by ({_SHAPE}) count() as lines, max(_time) as last, row_min(_time, _time, _msg) as first"
            f" | sort by (lines desc, {_SHAPE}) | limit {question.group_limit}"
        )
        return "/select/logsql/stats_query", _form(query, question.window)

    def rows(
        self, samples: list[tuple[dict[str, str], float]], by: tuple[LogField, ...], bucketed: bool
    ) -> list[CountRow]:
        """Fold the vector's rows (one per column: labels and value) into one `CountRow` per group and bucket.

        A day's coverage answer is ~30,000 rows (nodes × buckets), asked per day of a replay: a row costs one
        C-level pick of its key fields and one dict update; the group's labels and its bucket's time are made once
        per group, and each distinct bucket time is parsed once.
        """
        labels = [field_label(one) for one in by]
        keys = [self.name_of(one) for one in by] + (["_time"] if bucketed else [])
        pick = itemgetter(*keys) if len(keys) > 1 else (lambda row: (row[keys[0]],)) if keys else (lambda row: ())
        folded: dict[tuple[str, ...], dict[str, float]] = {}
        for row, value in samples:
            try:
                key = pick(row)
            except KeyError:  # a row without one of the fields: the field's value is empty
                key = tuple([row.get(name, "") for name in keys])
            counts = folded.get(key)
            if counts is None:
                counts = folded[key] = {}
            column = row.get("__name__", "")
            counts[column] = counts.get(column, 0.0) + value
        width = len(labels)
        starts: dict[str, float | None] = {}
        merged: dict[tuple[tuple[str, ...], float | None], dict[str, float]] = {}
        for key, counts in folded.items():
            bucket = None
            if bucketed:
                raw = key[width]
                bucket = starts[raw] if raw in starts else starts.setdefault(raw, _moment(raw))
            known = merged.setdefault((key[:width], bucket), counts)
            if known is not counts:  # two spellings of one bucket's time: one row
                for column, count in counts.items():
                    known[column] = known.get(column, 0.0) + count
        return [
            CountRow(dict(zip(labels, group, strict=True)), counts, bucket)
            for (group, bucket), counts in merged.items()
        ]

    def series(self, data: object, by: tuple[LogField, ...]) -> list[LineSeries]:
        """A bucketed one-column count's answer folded per group in one pass: the fast path of `rows` for coverage.

        A day's coverage answer is ~23,000 rows; `rows` makes an object per row, this makes one dict entry. It trusts
        nothing and checks nothing beyond what a pass can check for free: any surprise (not a vector, a row without
        its labels or value, a label that is not a string, a value that is no number) raises `TypeError`,
        `KeyError` or `ValueError`, and the caller then takes the checking path, which raises the precise error.
        A count that is not finite makes the total not finite, and is sent there too.
        """
        if type(data) is not dict or data.get("resultType") != "vector" or type(data.get("result")) is not list:
            raise TypeError("not a vector")
        labels = [field_label(one) for one in by]
        names = [self.name_of(one) for one in by]
        # The group's key: its one field's value as is (the usual case, no tuple per row), else a tuple of them.
        pick = itemgetter(*names) if names else _no_group
        per_group: dict[object, dict[str, float]] = {}
        total = 0.0
        for item in data["result"]:
            metric, pair = item["metric"], item["value"]
            if type(metric) is not dict or type(pair) is not list or len(pair) != 2:
                raise TypeError("not a row")
            "".join(metric.values())  # refuses a label that is not a string, at C speed
            count = float(pair[1])
            total += count
            try:
                group = pick(metric)
            except KeyError:  # a row without one of the group's fields: the field's value is empty (as in `rows`)
                present = tuple([metric.get(name, "") for name in names])
                group = present[0] if len(names) == 1 else present
            moment = metric["_time"]
            lines = per_group.get(group)
            if lines is None:
                lines = per_group[group] = {}
            lines[moment] = lines.get(moment, 0.0) + count
        if not math.isfinite(total):
            raise ValueError("a count that is not finite")
        starts: dict[str, float | None] = {}
        answer: list[LineSeries] = []
        for group, by_time in per_group.items():
            folded: dict[float, float] = {}
            for raw, count in by_time.items():
                start = starts[raw] if raw in starts else starts.setdefault(raw, _moment(raw))
                if start is not None and count > 0:  # two spellings of one bucket's time: one bucket
                    folded[start] = folded.get(start, 0.0) + count
            if folded:
                named = cast(tuple[str, ...], (group,) if len(names) == 1 else group)
                answer.append(LineSeries(dict(zip(labels, named, strict=True)), folded))
        return answer


def _form(query: str, window: Window) -> dict[str, str]:
    """A stats query's form: the query, the window's end as its time, and no partial answer."""
    return {"query": query, "time": rfc3339(window.end), **WHOLE_ANSWERS_ONLY}


def _stamp(unix: int) -> str:
    return rfc3339(datetime.fromtimestamp(unix, UTC))


def _no_group(metric: Mapping[str, str]) -> tuple[()]:
    return ()


_SHAPE = "digest_shape"
_SHAPE_BYTES = "digest_shape_bytes"  # `len` counts bytes: a shape within the cut in bytes is within it in characters
_FRACTION = re.compile(r"\.(\d{6})\d+")


_PLACEHOLDER = re.compile(r"<(?:N|IP4|UUID|DATE|TIME|DATETIME)>")
_HEX_WORD = re.compile(r"[a-fA-F]+")


def readable_shape(shape: str, example: str) -> str:
    """``shape`` with the words ``collapse_nums`` took for hex numbers put back from ``example``.

    ``collapse_nums`` collapses every run of hex digits, so "feeds" becomes "<N>s" and "bad request" "<N> request";
    a run of letters only is a word, not a number, and the example says which word it was. The grouping (done in
    the backend) is unchanged: only how the shape reads.
    """
    parts = _PLACEHOLDER.split(shape)
    marks = _PLACEHOLDER.findall(shape)
    if not marks:
        return shape
    groups = [r"(.+?)" if index < len(marks) - 1 or parts[-1] else r"(\S+)" for index in range(len(marks))]
    pattern = "".join(
        re.escape(part) + (groups[index] if index < len(marks) else "") for index, part in enumerate(parts)
    )
    match = re.match(pattern, example, re.DOTALL)
    if match is None:
        return shape
    out = [parts[0]]
    for index, mark in enumerate(marks):
        value = match.group(index + 1)
        out.append(value if mark == "<N>" and _HEX_WORD.fullmatch(value) else mark)
        out.append(parts[index + 1])
    return "".join(out)


def _moment(raw: str) -> float | None:
    """Unix seconds of an RFC 3339 time as VictoriaLogs writes it (a bucket's start, a line's time); None if not one.

    Nanoseconds are cut to the microseconds Python reads.
    """
    try:
        moment = datetime.fromisoformat(_FRACTION.sub(r".\1", raw).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _first_line(values: Mapping[str, str]) -> tuple[float, str] | None:
    """The time and text of ``row_min(_time, _time, _msg)``: a JSON object of the first line's two fields."""
    try:
        row = json.loads(values.get("first", ""))
    except ValueError:
        return None
    if not isinstance(row, dict) or not isinstance(row.get("_msg"), str):
        return None
    moment = _moment(str(row.get("_time", "")))
    return None if moment is None else (moment, row["_msg"])


def _number(raw: str | None) -> float | None:
    try:
        value = float(raw) if raw is not None else math.nan
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class VictoriaLogsSource(HttpSource):
    """VictoriaLogs through its LogsQL stats endpoint (server-side aggregation only)."""

    def __init__(
        self,
        *args: object,
        fields: Mapping[Role, str] | None = None,
        scope: Sequence[Matcher] = (),
        **kwargs: object,
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]  # the transport's own arguments, passed through
        self.writer = LogsqlWriter(fields, scope)

    async def count(self, question: LineCount) -> list[CountRow]:
        samples = await self._stats(self.writer.requests(question))
        return self.writer.rows(samples, question.by, question.bucket_seconds is not None)

    async def peak(self, question: PeakCount) -> list[CountRow]:
        samples = await self._stats(self.writer.requests(question))
        return self.writer.rows(samples, question.by, False)

    async def series(self, question: LineCount) -> list[LineSeries]:
        column = series_column(question)
        data = await self._answer(self.writer.requests(question))
        try:
            return self.writer.series(data, question.by)
        except (KeyError, TypeError, ValueError):
            # The checking path: raises the precise `SourceError`, or (NaN rows, which are no sample) answers.
            return series_of(self.writer.rows(self._checked(data), question.by, True), column)

    async def shapes(self, question: ShapeCount) -> Shapes:
        with answering_within(question.clock):
            answered = await self._post_json(*self.writer.shape_request(question))
        fields: dict[str, dict[str, str]] = {}
        for labels, text in result_labels_and_text(answered, self):
            fields.setdefault(labels.get(_SHAPE, ""), {})[labels.get("__name__", "")] = text
        shapes: list[Shape] = []
        for text, values in fields.items():
            lines, last, first = _number(values.get("lines")), _moment(values.get("last", "")), _first_line(values)
            if lines is None or last is None or first is None:
                raise self._error(
                    SourceErrorKind.BAD_RESPONSE, "a message shape without its count, times or first line"
                )
            example = first[1]
            shapes.append(
                Shape(readable_shape(text, example), lines=lines, first=first[0], last=last, example=example, key=text)
            )
        shapes.sort(key=lambda shape: (-shape.lines, shape.text))
        return Shapes(
            top=tuple(shapes[: question.top]),
            distinct=len(shapes),
            capped=len(shapes) >= question.group_limit,
            keys=tuple(shape.key for shape in shapes),
            sampled_every=question.sample_every,
        )

    async def values(self, name: str, window: Window) -> list[str]:
        # A count grouped by the field, in the window (the field may be a stream field or a plain one: both count).
        query = f"{self.writer.head(time_filter(window), EVERY_LINE)} | stats by ({field_name(name)}) count() as lines"
        rows = await self._stats([("/select/logsql/stats_query", _form(query, window))])
        return sorted({labels.get(name, "") for labels, count in rows if count > 0})

    @property
    def language(self) -> str:
        return "LogsQL"

    def reading_query(self, window: Window, lines: Filter, most_repeated: bool = False) -> str:
        return self.writer.reading_query(window, lines, most_repeated)

    async def _stats(self, requests: list[tuple[str, dict[str, str]]]) -> list[tuple[dict[str, str], float]]:
        return self._checked(await self._answer(requests))

    async def _answer(self, requests: list[tuple[str, dict[str, str]]]) -> object:
        # One request per question; `time` only anchors relative _time filters, and every query carries an absolute
        # _time filter as well.
        [(path, form)] = requests
        return await self._post_json(path, form)

    def _checked(self, data: object) -> list[tuple[dict[str, str], float]]:
        samples = self._vector_rows(data)
        for _, value in samples:
            if not math.isfinite(value):
                raise self._error(SourceErrorKind.BAD_RESPONSE, "a count that is not a finite number")
        return samples

"""The Loki log source: its LogQL, and the same answers as VictoriaLogs from the same records, on real servers.

The exactness tests push one small hand-made set of Vector-shaped records into a real Loki (through
`testbed.loki_server.LokiServer`, labelled as Promtail/Alloy would) and a real VictoriaLogs, with lines exactly on
the window's bounds, on bucket boundaries and just around them, and ask both sources every kind of question.
Without a Loki binary the Loki tests are skipped with a reason naming ``DIGEST_LOKI_BINARY`` (failed instead under
``DIGEST_REQUIRE_LOKI=1``).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from digest.backends.http import Endpoint
from digest.backends.loki import (
    Fold,
    LogqlWriter,
    LokiSource,
    bucket_plan,
    counted_terms,
    fold_plan,
    word_regex,
)
from digest.backends.passes import SharedPasses
from digest.backends.victorialogs import VictoriaLogsSource
from digest.checks.contract import SourceError, SourceErrorKind, Sources, Status, Window
from digest.checks.coverage import Grid, logs_question, pod_logs
from digest.checks.error_lines import ErrorLinesCheck, ErrorLinesPolicy
from digest.checks.log_questions import (
    EVERY_LINE,
    AllOf,
    AnyOf,
    CountRow,
    Empty,
    HasWord,
    Is,
    Json,
    LineCount,
    LineSeries,
    Matches,
    Native,
    Not,
    OneOf,
    PeakCount,
)
from digest.checks.log_storms import LogStormsCheck, LogStormsPolicy
from digest.pipeline.policy import Policy
from digest.pipeline.recording import SHARED_FAMILIES, recording_plan
from digest.testbed.embedded import EmbeddedBackends

try:
    from digest.testbed.loki_server import LokiServer, LokiUnavailable, find_loki_binary
except ImportError:  # pragma: no cover  # the testbed is part of the repository; this only guards a partial checkout
    LokiServer = None  # type: ignore[assignment,misc]

START = datetime(2026, 7, 20, 0, 30, tzinfo=UTC)  # a half hour: the first hour bucket is clipped
END = datetime(2026, 7, 20, 3, 30, tzinfo=UTC)
WINDOW = Window(start=START, end=END, zone=UTC, label="test")
ERROR_RULE = ErrorLinesCheck(ErrorLinesPolicy()).error_rule()


def _need_loki() -> None:
    """Skip (or fail under DIGEST_REQUIRE_LOKI=1) when no Loki binary is found."""
    reason = "no Loki binary: set DIGEST_LOKI_BINARY or run scripts/install-backends"
    try:
        if LokiServer is None:
            raise LokiUnavailable(reason)
        find_loki_binary()
    except LokiUnavailable as missing:
        if os.environ.get("DIGEST_REQUIRE_LOKI") == "1":
            pytest.fail(f"DIGEST_REQUIRE_LOKI=1 but {missing}")
        pytest.skip(f"{missing} (DIGEST_LOKI_BINARY)")


@pytest.fixture(scope="module")
def loki() -> Iterator[Any]:
    """One Loki for the module, holding the hand-made records."""
    _need_loki()
    with LokiServer() as server:
        summary = server.push_records([_ndjson(RECORDS)])
        assert summary.lines == len(RECORDS)
        server.wait_for_lines(START - timedelta(hours=1), END + timedelta(hours=1), len(RECORDS))
        yield server


def _loki_source(url: str, **endpoint: Any) -> LokiSource:
    return LokiSource(Endpoint(name="Loki", url=url, **endpoint))


# The records ------------------------------------------------------------------------------------------------------


def _record(
    moment: datetime, namespace: str, pod: str, message: str, level: str | None = None, node: str = "n1"
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "kubernetes": {"container_name": "app", "pod_name": pod, "pod_namespace": namespace, "pod_node_name": node},
        "message": message,
        "stream": "stderr",
        "timestamp": moment.isoformat(timespec="microseconds").replace("+00:00", "Z"),
    }
    if level is not None:
        record["level"] = level
    return record


def _records() -> list[dict[str, Any]]:
    at = START
    hour1 = datetime(2026, 7, 20, 1, tzinfo=UTC)
    hour2 = datetime(2026, 7, 20, 2, tzinfo=UTC)
    micro = timedelta(microseconds=1)
    out = [
        # The window's bounds: in at the start, out just before it and exactly at its end.
        _record(at - micro, "shop", "web-1", "before the window: error"),
        _record(at, "shop", "web-1", "at the start: error"),
        _record(END - micro, "shop", "web-1", "last microsecond: ERROR"),
        _record(END, "shop", "web-1", "at the end: error"),
        # Hour boundaries: a line exactly on one belongs to the bucket it starts.
        _record(hour1 - micro, "shop", "api-1", "just before one", "info"),
        _record(hour1, "shop", "api-1", "exactly one", "info"),
        _record(hour2, "shop", "api-1", "exactly two", "error"),
        _record(hour2 + micro, "shop", "api-1", "just after two", "ERR"),
    ]
    messages = [
        ("connection error: reset by peer", None),
        ("ERROR upstream gone", None),
        ("3 errors found", None),  # "errors" is another word
        ("error_count=0", None),  # "_" is a word character: no word "error" here
        ("éerror is not the word", None),  # a letter before it: no word either
        ("[error]", None),
        ("first line\nsecond line with an error", None),  # several lines: the word on the second
        ("all good", None),
        ("retry timeout", "warn"),
        ("handled", "error"),
        ("handled", "Fatal"),
        ("error in message but level is info", "info"),
        ("", None),
    ]
    moment = at + timedelta(minutes=5)
    for index, (message, level) in enumerate(messages):
        for pod in ("web-1", "api-1"):
            out.append(_record(moment + timedelta(seconds=index), "shop", pod, message, level))
    # A burst in one minute (the peak), a quiet trickle elsewhere.
    burst = datetime(2026, 7, 20, 2, 17, tzinfo=UTC)
    out += [_record(burst + timedelta(seconds=second), "feeds", "agg-1", f"tick {second}") for second in range(40)]
    out += [_record(burst + timedelta(minutes=1), "feeds", "agg-1", "minute boundary exactly")]
    out += [_record(at + timedelta(minutes=minute), "feeds", "agg-1", "quiet tick") for minute in range(0, 180, 7)]
    # JSON access-log lines (Envoy), a truncated one, one that is no JSON at all.
    gateway = datetime(2026, 7, 20, 1, 59, 59, tzinfo=UTC)
    access = [
        '{"response_code":"503","upstream":"shop-api","flags":"UF"}',
        '{"response_code":503,"upstream":"shop-api","flags":"-"}',
        '{"response_code":"200","upstream":"shop-api","flags":"-"}',
        '{"response_code":"504","upstream":"feeds","flags":"UT"}',
        '{"response_code":"200","upstream":"feeds","flags":"-"}',
        '{"upstream":"feeds","flags":"-"}',
        '{"response_code":"502","upstream":"feeds", truncated',
        "not json at all: error",
    ]
    for index, line in enumerate(access):
        out.append(_record(gateway + timedelta(milliseconds=500 * index), "gateway", "envoy-1", line))
    out.sort(key=lambda record: record["timestamp"])
    return out


RECORDS = _records()


def _ndjson(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(record) + "\n" for record in records).encode()


def _expected_totals() -> dict[tuple[str, str], int]:
    totals: dict[tuple[str, str], int] = {}
    for record in RECORDS:
        moment = datetime.fromisoformat(record["timestamp"])
        if START <= moment < END:
            key = (record["kubernetes"]["pod_namespace"], record["kubernetes"]["pod_name"])
            totals[key] = totals.get(key, 0) + 1
    return totals


def _table(rows: list[CountRow]) -> dict[tuple[tuple[tuple[str, str], ...], float | None], dict[str, float]]:
    """Rows keyed by group and bucket; a row of zeros says nothing and is left out (Loki has no series for it)."""
    table: dict[tuple[tuple[tuple[str, str], ...], float | None], dict[str, float]] = {}
    for row in rows:
        counts = {name: float(value) for name, value in row.counts.items()}
        if any(counts.values()):
            table[(tuple(sorted(row.group.items())), row.bucket)] = counts
    return table


# Unit tests of the LogQL ------------------------------------------------------------------------------------------


def test_writer_puts_each_filter_kind_where_loki_reads_it() -> None:
    """Each filter kind becomes the LogQL stage that reads it: selector, line filter, label filter, json, native."""
    writer = LogqlWriter()
    assert writer.log_query(AllOf()) == '{namespace=~".+"}'
    assert writer.log_query(Is("namespace", "shop")) == '{namespace="shop"}'
    assert writer.log_query(Is("pod", 'we"b')) == '{namespace=~".+"} | pod="we\\"b"'
    assert writer.log_query(OneOf("level", ("error", "err"))) == '{namespace=~".+"} | level=~"(?i)(error|err)"'
    assert writer.log_query(Matches("container", "a.+")) == '{namespace=~".+"} | container=~"a.+"'
    assert writer.log_query(Empty("node")) == '{namespace=~".+"} | node_name=""'
    assert writer.log_query(Not(Empty("level"))) == '{namespace=~".+"} | level!=""'
    word = word_regex("error").replace("\\", "\\\\")
    # The word's letters first, as a fast case-insensitive "contains", then the word-boundary regex on what is left.
    assert writer.log_query(HasWord("error")) == f'{{namespace=~".+"}} |~ "(?i)error" |~ "{word}"'
    assert writer.log_query(Not(HasWord("error"))) == f'{{namespace=~".+"}} !~ "{word}"'
    assert writer.log_query(AnyOf((Is("pod", "a"), Not(Is("pod", "b"))))) == (
        '{namespace=~".+"} | (pod="a" or pod!="b")'
    )
    assert writer.log_query(Not(AnyOf((Is("pod", "a"), Is("stream", "stdout"))))) == (
        '{namespace=~".+"} | (pod!="a" and stream!="stdout")'
    )
    assert writer.log_query(Native('|= "panic"')) == '{namespace=~".+"} |= "panic"'
    # Label filters on stream labels and metadata come before the line filters, which then read fewer lines.
    assert writer.log_query(AllOf((HasWord("error"), Empty("level")))) == (
        f'{{namespace=~".+"}} | level="" |~ "(?i)error" |~ "{word}"'
    )
    in_any = writer.log_query(AnyOf((Is("pod", "a"), HasWord("error"))))
    assert '| label_format digest_line="{{ __line__ }}"' in in_any
    assert in_any.endswith("| drop digest_line")
    json_query = writer.log_query(Matches(Json("response.code"), "5.."))
    assert '| json digest_json_0="[\\"response.code\\"]"' in json_query
    # A line that does not end in "}" (cut short, or not an object) reads no key, as on VictoriaLogs.
    assert '| regexp "(?P<digest_json_end>\\\\}\\\\s*$)" | json' in json_query
    # A key of a line cut short reads empty: the condition is tested on the end mark (empty) there.
    assert json_query.endswith(
        '| drop __error__, __error_details__ | ((digest_json_end!="" and digest_json_0=~"5..")'
        ' or (digest_json_end="" and digest_json_end=~"5.."))'
    )
    grouped = LogqlWriter().count_query(EVERY_LINE, (Json("upstream"),), timedelta(hours=1))
    # Grouped by a key: emptied per series of lines cut short, after the count (no template per line).
    assert "label_format" not in grouped
    assert grouped.startswith("sum by (digest_json_0) (label_replace(sum by (digest_json_0, digest_json_end) (")
    assert grouped.endswith('"digest_json_0", "", "digest_json_end", ""))')
    custom = LogqlWriter({"namespace": "k8s_namespace_name"})
    assert custom.log_query(AllOf()) == '{k8s_namespace_name=~".+"}'


def test_reading_queries_run_on_loki(loki: Any) -> None:
    """Both reading queries parse and run on a real Loki: the first lines, and the most repeated messages."""
    source = _loki_source(loki.url)
    lines = AllOf((Is("namespace", "feeds"), HasWord("tick")))
    first = source.reading_query(WINDOW, lines)
    top = source.reading_query(WINDOW, lines, most_repeated=True)
    assert source.language == "LogQL"
    with httpx.Client(base_url=loki.url, timeout=30.0) as client:
        read = client.get(
            "/loki/api/v1/query_range",
            params={"query": first, "start": "2026-07-20T00:30:00Z", "end": "2026-07-20T03:30:00Z", "limit": 5},
        )
        assert read.status_code == 200, read.text
        assert read.json()["data"]["result"]
        repeated = client.get("/loki/api/v1/query", params={"query": top, "time": "2026-07-20T03:30:00Z"})
        assert repeated.status_code == 200, repeated.text
        messages = {row["metric"]["digest_message"]: row["value"][1] for row in repeated.json()["data"]["result"]}
    assert messages["tick N"] == "40"
    asyncio.run(source.aclose())


def test_word_regex_follows_victorialogs_token_characters() -> None:
    """The word is bounded by what VictoriaLogs does not count as a token character, and only where it matters."""
    assert word_regex("error") == "(?:^|[^\\p{L}\\p{Nd}_])[eE][rR][rR][oO][rR](?:[^\\p{L}\\p{Nd}_]|$)"
    assert word_regex("error:") == "(?:^|[^\\p{L}\\p{Nd}_])[eE][rR][rR][oO][rR]\\:"
    assert word_regex("a.b") == "(?:^|[^\\p{L}\\p{Nd}_])[aA]\\.[bB](?:[^\\p{L}\\p{Nd}_]|$)"
    # An ASCII word's letters are their (?i) case orbits as classes (cheaper on Loki): k and s take the Kelvin sign
    # and the long s, as Go's case folding does. Any other word keeps (?i).
    assert word_regex("ks") == "(?:^|[^\\p{L}\\p{Nd}_])[kK\\x{212A}][sS\\x{17F}](?:[^\\p{L}\\p{Nd}_]|$)"
    assert word_regex("ошибка") == "(?i)(?:^|[^\\p{L}\\p{Nd}_])ошибка(?:[^\\p{L}\\p{Nd}_]|$)"


def test_native_under_any_of_is_refused_not_guessed() -> None:
    """A native fragment cannot be placed under AnyOf: the question is refused with a SourceError."""
    source = _loki_source("http://127.0.0.1:9")
    question = LineCount(window=WINDOW, columns=(("x", AnyOf((Native('|= "a"'), Is("pod", "b")))),))
    with pytest.raises(SourceError, match="native LogQL filter") as caught:
        asyncio.run(source.count(question))
    assert caught.value.kind is SourceErrorKind.QUERY
    assert source.queries_sent == 0
    asyncio.run(source.aclose())


def test_bucket_plan_clips_the_first_and_last_buckets() -> None:
    """A window from 00:30 to 03:30 in hours: clipped 00:00 and 03:00 buckets, whole ones from 01:00 to 02:00."""
    plan = bucket_plan(WINDOW, 3600)
    assert [(start.hour, start.minute, end.hour, end.minute, bucket) for start, end, bucket in plan.instants] == [
        (0, 30, 1, 0, datetime(2026, 7, 20, tzinfo=UTC).timestamp()),
        (3, 0, 3, 30, datetime(2026, 7, 20, 3, tzinfo=UTC).timestamp()),
    ]
    assert plan.first_whole == datetime(2026, 7, 20, 1, tzinfo=UTC).timestamp()
    assert plan.last_whole == datetime(2026, 7, 20, 2, tzinfo=UTC).timestamp()
    inside = bucket_plan(Window(START, START + timedelta(minutes=10), UTC, "x"), 3600)
    assert len(inside.instants) == 1
    assert inside.first_whole is None


# Exactness against real servers -----------------------------------------------------------------------------------

QUESTIONS: dict[str, LineCount | PeakCount] = {
    "errors_by_pod": LineCount(
        window=WINDOW, columns=(("total", EVERY_LINE), ("errors", ERROR_RULE)), by=("namespace", "pod")
    ),
    "lines_per_hour": LineCount(window=WINDOW, by=("namespace",), bucket_seconds=3600),
    "lines_per_hour_on_half_hours": LineCount(
        window=WINDOW, by=("namespace",), bucket_seconds=3600, bucket_offset_seconds=1800
    ),
    "lines_per_10_minutes_by_node": LineCount(window=WINDOW, by=("node",), bucket_seconds=600),
    "peak_per_minute": PeakCount(window=WINDOW, by=("namespace", "pod"), bucket_seconds=60),
    "access_log": LineCount(
        window=WINDOW,
        scope=Is("namespace", "gateway"),
        columns=(("requests", EVERY_LINE), ("errors", Matches(Json("response_code"), "5[0-9][0-9]"))),
        by=(Json("upstream"), Json("flags")),
        bucket_seconds=3600,
    ),
    "not_and_any_of": LineCount(
        window=WINDOW,
        scope=Is("namespace", "shop"),
        columns=(
            ("quiet", Not(AnyOf((HasWord("error"), OneOf("level", ("error", "err", "fatal")))))),
            ("timeout_or_api", AnyOf((HasWord("timeout"), Is("pod", "api-1")))),
            ("no_level_word", AllOf((Empty("level"), HasWord("error")))),
            ("word_not_level", AllOf((Not(HasWord("error")), Not(Empty("level"))))),
            ("json_missing_code", Empty(Json("response_code"))),
        ),
        by=("pod",),
    ),
}


@pytest.mark.parametrize("name", list(QUESTIONS))
def test_loki_answers_as_victorialogs_does(name: str, loki: Any, own_backends: EmbeddedBackends) -> None:
    """The same records, the same question: Loki's answer equals VictoriaLogs' row for row, bounds included."""
    own_backends.ingest_logs([_ndjson(RECORDS)])
    own_backends.wait_for_logs(START - timedelta(hours=1), END + timedelta(hours=1), len(RECORDS))
    question = QUESTIONS[name]

    async def both() -> tuple[list[CountRow], list[CountRow]]:
        victoria = VictoriaLogsSource(Endpoint(name="VictoriaLogs", url=own_backends.logs.url))
        source = _loki_source(loki.url)
        try:
            if isinstance(question, PeakCount):
                return await victoria.peak(question), await source.peak(question)
            return await victoria.count(question), await source.count(question)
        finally:
            await victoria.aclose()
            await source.aclose()

    expected, answered = asyncio.run(both())
    assert _table(expected), "VictoriaLogs answered nothing: the records did not load"
    assert _table(answered) == _table(expected)
    if name == "errors_by_pod":
        totals = {(row.group["namespace"], row.group["pod"]): row.counts["total"] for row in answered}
        assert totals == _expected_totals()


def test_hour_buckets_are_exact_at_their_boundaries(loki: Any) -> None:
    """Lines exactly on 01:00 and 02:00 open their bucket; the clipped first bucket starts at 00:30 sharp."""
    source = _loki_source(loki.url)
    question = LineCount(window=WINDOW, scope=Is("pod", "api-1"), by=(), bucket_seconds=3600)
    rows = asyncio.run(_asked(source, question))
    by_hour = {datetime.fromtimestamp(row.bucket or 0, tz=UTC).hour: row.counts["lines"] for row in rows}
    in_window = [datetime.fromisoformat(record["timestamp"]) for record in RECORDS]
    api = [
        moment
        for moment, record in zip(in_window, RECORDS, strict=True)
        if record["kubernetes"]["pod_name"] == "api-1" and START <= moment < END
    ]
    expected: dict[int, float] = {}
    for moment in api:
        expected[moment.hour] = expected.get(moment.hour, 0) + 1
    assert by_hour == expected
    assert by_hour[0] >= 1
    assert by_hour[1] >= 1
    assert by_hour[2] >= 2


def test_long_range_is_asked_in_pieces_under_the_points_limit(loki: Any) -> None:
    """Eight days per minute (11,520 points, over Loki's 11,000) are asked in pieces, and every line is counted."""
    window = Window(datetime(2026, 7, 16, tzinfo=UTC), datetime(2026, 7, 24, tzinfo=UTC), UTC, "8 days")
    source = _loki_source(loki.url)

    async def asked() -> list[CountRow]:
        try:
            return await source.peak(PeakCount(window=window, by=("namespace", "pod"), bucket_seconds=60))
        finally:
            await source.aclose()

    rows = asyncio.run(asked())
    lines = {(row.group["namespace"], row.group["pod"]): row.counts["lines"] for row in rows}
    expected: dict[tuple[str, str], float] = {}
    for record in RECORDS:
        key = (record["kubernetes"]["pod_namespace"], record["kubernetes"]["pod_name"])
        expected[key] = expected.get(key, 0) + 1
    assert lines == expected
    assert max(row.counts["peak"] for row in rows) == 40


async def _asked(source: LokiSource, question: LineCount) -> list[CountRow]:
    try:
        return await source.count(question)
    finally:
        await source.aclose()


# Shared passes (`digest.backends.passes`) -------------------------------------------------------------------------


def _family_questions(window: Window) -> dict[str, LineCount | PeakCount]:
    """The three questions the default policy's ``pod_lines`` family answers: error_lines', log_storms', coverage's."""
    storms = LogStormsCheck(LogStormsPolicy())
    return {
        "error_lines": ErrorLinesCheck(ErrorLinesPolicy()).question(window),
        "log_storms": storms.question(window),
        "coverage": logs_question(pod_logs(EVERY_LINE), Grid.of(window)),
        "coverage_on_half_hours": replace(
            logs_question(pod_logs(EVERY_LINE), Grid.of(window)), bucket_seconds=3600, bucket_offset_seconds=1800
        ),
    }


async def _each(source: Any, questions: dict[str, LineCount | PeakCount]) -> dict[str, Any]:
    """Every question asked at once (as the checks ask them), each answer as a comparable table."""

    async def one(question: LineCount | PeakCount) -> Any:
        if isinstance(question, PeakCount):
            return _table(await source.peak(question))
        if question.bucket_seconds is not None and len(question.columns) == 1:
            series = await source.series(question)
            return {tuple(sorted(one.group.items())): dict(one.lines) for one in series}
        return _table(await source.count(question))

    answers = await asyncio.gather(*(one(question) for question in questions.values()))
    return dict(zip(questions, answers, strict=True))


@pytest.mark.parametrize(
    "window",
    [
        WINDOW,
        # Off the minute at both ends: the first and last minutes are clipped, in the pass as in each question.
        Window(START + timedelta(seconds=30, milliseconds=500), END - timedelta(seconds=50), UTC, "clipped"),
    ],
    ids=["on the minute", "clipped minutes"],
)
def test_one_shared_pass_answers_the_checks_as_their_own_queries(loki: Any, window: Window) -> None:
    """error_lines, log_storms and coverage read from one pass of the window equal each asked alone, row for row."""
    questions = _family_questions(window)
    plan = recording_plan(Policy())

    async def both() -> tuple[dict[str, Any], dict[str, Any], int]:
        alone, inner = _loki_source(loki.url), _loki_source(loki.url)
        shared = SharedPasses(inner, plan, SHARED_FAMILIES)
        try:
            return await _each(alone, questions), await _each(shared, questions), shared.passes
        finally:
            await alone.aclose()
            await inner.aclose()

    expected, answered, passes = asyncio.run(both())
    assert all(expected.values()), "a question answered nothing: the records did not load"
    assert answered == expected
    assert passes == 1, "the four questions share one pass of the window"


def test_a_shared_pass_too_wide_for_max_query_series_asks_each_question(
    loki: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """510 pods: the pass per pod is refused; coverage's per-node question is then asked alone and answers."""
    day = datetime(2026, 6, 8, tzinfo=UTC)
    records = [
        _record(day + timedelta(seconds=1 + index), "wider", f"pod-{index:04d}", "it failed", node=f"n{index % 3}")
        for index in range(510)
    ]
    loki.push_records([_ndjson(records)])
    loki.wait_for_lines(day, day + timedelta(days=1), len(records), selector='{namespace="wider"}')
    window = Window(day, day + timedelta(days=1), UTC, "wider")
    error_lines = ErrorLinesCheck(ErrorLinesPolicy()).question(window)
    coverage = logs_question(pod_logs(EVERY_LINE), Grid.of(window))

    async def asked() -> tuple[SourceError | None, list[LineSeries], int]:
        inner = _loki_source(loki.url)
        shared = SharedPasses(inner, recording_plan(Policy()), SHARED_FAMILIES)
        refused = None
        try:
            try:
                await shared.count(error_lines)
            except SourceError as problem:
                refused = problem
            return refused, await shared.series(coverage), shared.passes
        finally:
            await inner.aclose()

    with caplog.at_level("INFO", logger="digest.backends.passes"):
        refused, series, passes = asyncio.run(asked())
    assert refused is not None  # error_lines' own question is too wide too
    assert "max_query_series" in refused.message
    assert {one.group["node"]: sum(one.lines.values()) for one in series} == {"n0": 170, "n1": 170, "n2": 170}
    assert passes == 1, "refused once, the pass is not asked again"
    said = [record.getMessage() for record in caplog.records if "shared pass was refused" in record.getMessage()]
    assert len(said) == 1


def test_a_shared_pass_past_the_answer_cap_leaves_each_question_to_itself(
    loki: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """20 pods logging every minute: the pass per minute passes the cap, each day's count per pod is still answered."""
    day = datetime(2026, 6, 10, tzinfo=UTC)
    records = [
        _record(day + timedelta(minutes=minute, seconds=1 + index), "busy", f"pod-{index:02d}", f"tick {level}", level)
        for minute in range(60)
        for index in range(20)
        for level in ("info", "error")
    ]
    loki.push_records([_ndjson(records)])
    loki.wait_for_lines(day, day + timedelta(days=1), len(records), selector='{namespace="busy"}')
    window = Window(day, day + timedelta(days=1), UTC, "busy")
    questions = _family_questions(window)
    cap = 16 * 1024  # bytes: more than a day's count per pod or per node, less than the minutes per pod

    async def asked(source: Any, question: LineCount | PeakCount) -> Any:
        try:
            return (await _each(source, {"one": question}))["one"]
        except SourceError as problem:
            return problem.message

    async def both() -> tuple[dict[str, Any], dict[str, Any], int]:
        alone, inner = _loki_source(loki.url, max_response_bytes=cap), _loki_source(loki.url, max_response_bytes=cap)
        shared = SharedPasses(inner, recording_plan(Policy()), SHARED_FAMILIES)
        try:
            expected = {name: await asked(alone, question) for name, question in questions.items()}
            answered = {name: await asked(shared, question) for name, question in questions.items()}
            return expected, answered, shared.passes
        finally:
            await alone.aclose()
            await inner.aclose()

    with caplog.at_level("INFO", logger="digest.backends.passes"):
        expected, answered, passes = asyncio.run(both())
    assert answered == expected
    totals = {key: counts["total"] for key, counts in answered["error_lines"].items()}
    assert totals == {((("namespace", "busy"), ("pod", f"pod-{index:02d}")), None): 120.0 for index in range(20)}
    assert "response larger than" in answered["log_storms"]  # its own minutes pass the cap too: said, as alone
    assert passes == 1, "the window's pass is not asked again"
    said = [record.getMessage() for record in caplog.records if "answered too much" in record.getMessage()]
    assert len(said) == 1


# Failure modes ----------------------------------------------------------------------------------------------------


def test_series_limit_is_named_and_the_check_is_unknown(loki: Any) -> None:
    """More than 500 pods in one answer: Loki's max_query_series is named, error_lines is UNKNOWN, never OK."""
    day = datetime(2026, 6, 1, tzinfo=UTC)
    # From 00:00:01: LokiServer.wait_for_lines counts (start, end], so nothing stands exactly on the start.
    many = [_record(day + timedelta(seconds=1 + index), "crowd", f"pod-{index:04d}", "error") for index in range(510)]
    summary = loki.push_records([_ndjson(many)])
    assert summary.lines == len(many)
    loki.wait_for_lines(day, day + timedelta(days=1), len(many), selector='{namespace="crowd"}')
    window = Window(day, day + timedelta(days=1), UTC, "crowd")
    source = _loki_source(loki.url)
    question = LineCount(window=window, by=("namespace", "pod"))
    with pytest.raises(SourceError, match=r"max_query_series \(500\) cut the answer"):
        asyncio.run(_asked(source, question))

    async def finding() -> Any:
        logs = _loki_source(loki.url)
        try:
            return await ErrorLinesCheck(ErrorLinesPolicy())(Sources(metrics=None, logs=logs), window)  # type: ignore[arg-type]
        finally:
            await logs.aclose()

    result = asyncio.run(finding())
    assert result.status is Status.UNKNOWN
    assert "max_query_series" in (result.error or "")


def test_not_a_loki_api_is_said_so(own_backends: EmbeddedBackends) -> None:
    """A VictoriaMetrics at the Loki URL (400 "unsupported path"): named as what it is, never a count."""
    source = _loki_source(own_backends.metrics.url)
    with pytest.raises(SourceError) as caught:
        asyncio.run(_asked(source, LineCount(window=WINDOW)))
    assert caught.value.message == f"{own_backends.metrics.url} is a VictoriaMetrics, not the Loki API"


def test_shapes_without_the_pattern_ingester_are_not_available(loki: Any) -> None:
    """A Loki without its pattern ingester (patterns API: 404): shapes are UNSUPPORTED, saying why."""
    source = _loki_source(loki.url)
    question = ErrorLinesCheck(ErrorLinesPolicy()).shape_question(WINDOW, "shop", {"web-1"})

    async def shapes() -> Any:
        try:
            return await source.shapes(question)
        finally:
            await source.aclose()

    with pytest.raises(SourceError) as caught:
        asyncio.run(shapes())
    assert caught.value.kind is SourceErrorKind.UNSUPPORTED
    assert caught.value.message == (
        "message shapes are not available on this backend: Loki's patterns API answers 404 (its pattern ingester is "
        "off: pattern_ingester.enabled)"
    )


def test_our_own_timeout_is_a_timeout(loki: Any) -> None:
    """A query that outlives the endpoint's timeout is a TIMEOUT SourceError, not an empty count."""
    source = _loki_source(loki.url, timeout_seconds=1e-6)
    with pytest.raises(SourceError) as caught:
        asyncio.run(_asked(source, LineCount(window=WINDOW)))
    assert caught.value.kind is SourceErrorKind.TIMEOUT


def test_loki_query_timeout_is_a_timeout() -> None:
    """Loki's own query timeout (1 ms here) is read as a TIMEOUT SourceError naming Loki's reason."""
    _need_loki()
    with LokiServer(extra_args=("-querier.query-timeout=1ms",)) as server:
        server.push_records([_ndjson(RECORDS)])
        source = _loki_source(server.url)
        with pytest.raises(SourceError) as caught:
            asyncio.run(_asked(source, LineCount(window=WINDOW, by=("namespace",))))
    assert caught.value.kind is SourceErrorKind.TIMEOUT, caught.value


def test_too_many_outstanding_requests_is_named() -> None:
    """A full query queue (HTTP 429 "too many outstanding requests") is an overload SourceError, not a count."""
    _need_loki()
    args = ("-querier.max-outstanding-requests-per-tenant=1", "-query-scheduler.max-outstanding-requests-per-tenant=1")
    with LokiServer(extra_args=args) as server:
        server.push_records([_ndjson(RECORDS)])
        source = _loki_source(server.url, max_concurrency=8)
        # Eight different day-long questions at once, each split by Loki into hourly sub-queries: the queue of one
        # overflows at the first of them.
        questions = [LineCount(window=WINDOW, scope=Is("pod", f"p{index}"), by=("namespace",)) for index in range(8)]

        async def all_at_once() -> list[Any]:
            try:
                return await asyncio.gather(*(source.count(one) for one in questions), return_exceptions=True)
            finally:
                await source.aclose()

        results = asyncio.run(all_at_once())
    errors = [one for one in results if isinstance(one, SourceError)]
    assert errors, f"Loki answered every query: {results}"
    assert all("too many outstanding requests" in str(one) for one in errors), errors
    assert all(one.kind is SourceErrorKind.HTTP for one in errors)


def test_not_ready_loki_is_named() -> None:
    """A query sent while Loki starts (HTTP 503 before /ready) is a "not ready" SourceError, never a count."""
    _need_loki()

    class Unwaited(LokiServer):  # type: ignore[misc,valid-type]
        def wait_ready(self) -> None:
            return None

    # Not ready for 60 s (the suite's config says 0 s): the poll below always meets the 503, however late the port
    # opens on a busy machine (with 0 s, Loki was sometimes ready before its first HTTP answer).
    with Unwaited(config_overrides={"ingester": {"lifecycler": {"min_ready_duration": "60s"}}}) as server:
        source = _loki_source(server.url, timeout_seconds=5.0)

        async def first_http_answer() -> SourceError | str:
            try:
                for _ in range(400):  # bounded: about 20 s of polling while the port opens
                    try:
                        await source.count(LineCount(window=WINDOW))
                    except SourceError as error:
                        # Refused or unanswered while the process starts (a busy machine) is no HTTP answer yet.
                        if error.kind not in (SourceErrorKind.UNREACHABLE, SourceErrorKind.TIMEOUT):
                            return error
                    else:
                        return "Loki answered a count before it was ready"
                    await asyncio.sleep(0.05)
                return "no HTTP answer from Loki in 400 polls"
            finally:
                await source.aclose()

        seen = asyncio.run(first_http_answer())
    assert isinstance(seen, SourceError), seen
    assert "not ready" in seen.message


def test_ingester_window_gap_shows_as_missing_buckets() -> None:
    """Unflushed lines older than query_ingesters_within are not counted: the coverage buckets show the hole."""
    _need_loki()
    overrides = {"querier": {"query_ingesters_within": "3h"}, "ingester": {"query_store_max_look_back_period": "0s"}}
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    window = Window(now - timedelta(hours=6), now, UTC, "last 6h")
    lines = [
        _record(window.start + timedelta(minutes=minute), "shop", "web-1", "steady") for minute in range(0, 6 * 60, 5)
    ]
    with LokiServer(config_overrides=overrides) as server:
        server.push_records([_ndjson(lines)])
        recent = window.end - timedelta(hours=2, minutes=1)  # between two lines: wait_for_lines counts (start, end]
        expected_recent = sum(1 for record in lines if datetime.fromisoformat(record["timestamp"]) >= recent)
        server.wait_for_lines(recent, window.end, expected_recent)
        grid = Grid.of(window)
        question = logs_question(pod_logs(EVERY_LINE), grid)
        rows = asyncio.run(_asked(_loki_source(server.url), question))
    seen = {grid.index_of_start(row.bucket or 0.0) for row in rows if row.counts["lines"] > 0}
    counted = sum(row.counts["lines"] for row in rows)
    assert counted < len(lines), "every line was counted: the ingester window did not hide any"
    missing = [index for index in range(len(grid.points)) if index not in seen]
    # The hole is whole buckets at the old end of the window, not lines quietly missing from every bucket.
    assert missing
    assert min(missing) == 0
    assert all(index in seen for index in range(len(grid.points) - 6, len(grid.points) - 1)), missing


def test_a_disjunction_that_reads_the_line_is_counted_by_inclusion_exclusion() -> None:
    """The error rule A ∨ (B ∧ C) is two plain queries added; the overlap, which cannot match, is not asked."""
    level = OneOf("level", ("error", "err"))
    unlabelled = AllOf((Empty("level"), HasWord("error")))
    assert counted_terms(AnyOf((level, unlabelled))) == [(1, level), (1, unlabelled)]
    # Without a contradiction the overlap is subtracted: count(A ∨ B) = count(A) + count(B) − count(A ∧ B).
    word, pod = HasWord("timeout"), Is("pod", "api-1")
    assert counted_terms(AnyOf((word, pod))) == [(1, word), (1, pod), (-1, AllOf((word, pod)))]


# Folded columns ---------------------------------------------------------------------------------------------------


def test_a_column_one_label_apart_is_counted_in_the_pass_of_every_line() -> None:
    """error_lines' error levels and envoy_flags' 5xx codes ride on their question's scan of every line."""
    scope = Is("namespace", "gateway")
    code = Matches(Json("response_code"), "5[0-9][0-9]")
    planned = fold_plan([scope, AllOf((scope, code))], scope)
    assert planned is not None
    assert (planned.base, planned.marks, dict(planned.folded), dict(planned.rest)) == (
        0,
        (Fold(Json("response_code"), "5[0-9][0-9]"),),
        {1: ((1, code),)},
        {1: ()},
    )
    levels = OneOf("level", ("error", "err"))
    unlabelled = AllOf((Empty("level"), HasWord("error")))
    planned = fold_plan([EVERY_LINE, AnyOf((levels, unlabelled))], EVERY_LINE)
    assert planned is not None
    assert planned.marks == (Fold("level", "(?i)(error|err)"),)
    assert dict(planned.rest) == {1: ((1, unlabelled),)}  # the word still needs the line: asked apart
    # No column of every line: nothing to fold into.
    assert fold_plan([levels, unlabelled], EVERY_LINE) is None
    question = LineCount(
        window=WINDOW, columns=(("total", EVERY_LINE), ("errors", ERROR_RULE)), by=("namespace", "pod")
    )
    writer = LogqlWriter()
    asked = [form["query"] for _, form in writer.requests(question)]
    assert len(asked) == 2  # every line with its error levels, then the unlabelled lines with the word
    assert asked[0].startswith("sum by (namespace, pod, digest_fold) (label_replace(sum by (namespace, pod, level) (")
    assert asked[0].endswith('"digest_fold", "1", "level", "(?i)(error|err|fatal|critical|panic)"))')


def test_columns_of_several_label_conditions_share_one_marked_pass() -> None:
    """Two conditions and a negation over three labels: one pass marks each, every column is read from its marks."""
    levels = OneOf("level", ("error", "err"))
    gateway = AllOf((Is("namespace", "gw"), Is("container", "envoy")))
    columns = [EVERY_LINE, AllOf((levels, Is("pod", "a"))), Not(gateway)]
    planned = fold_plan(columns, EVERY_LINE)
    assert planned is not None
    assert planned.marks == (
        Fold("level", "(?i)(error|err)"),
        Fold("pod", "(a)"),
        Fold("namespace", "(gw)"),
        Fold("container", "(envoy)"),
    )
    assert dict(planned.rest) == {1: (), 2: ()}  # nothing reads the line: nothing asked apart
    # A series marked error level, pod a, in the gateway's envoy: counted in the first column, not the second.
    assert planned.weights((True, True, True, True)) == {1: 1}
    assert planned.weights((False, False, True, False)) == {2: 1}
    assert planned.weights((True, False, False, False)) == {2: 1}
    question = LineCount(
        window=WINDOW,
        columns=(("total", EVERY_LINE), ("mine", columns[1]), ("chatter", columns[2])),
        by=("namespace", "pod"),
        bucket_seconds=60,
    )
    asked = [form["query"] for _, form in LogqlWriter().requests(question)]
    assert len(asked) == 1, asked  # one range query: the day's minutes, every column marked
    assert asked[0].startswith(
        "sum by (namespace, pod, digest_fold, digest_fold_1, digest_fold_2, digest_fold_3) (label_replace("
    )
    assert "sum by (namespace, pod, level, container) (count_over_time(" in asked[0]


def test_a_folded_count_too_wide_for_max_query_series_is_asked_apart(
    loki: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """300 pods of two levels: the folded pass (600 groups) is refused, the columns apart (300) answer exactly."""
    day = datetime(2026, 6, 5, tzinfo=UTC)
    pods = [f"pod-{index:03d}" for index in range(300)]
    records = [
        _record(day + timedelta(seconds=1 + 2 * index + offset), "wide", pod, message, level)
        for index, pod in enumerate(pods)
        for offset, (message, level) in enumerate((("it failed", "error"), ("all good", "info")))
    ]
    summary = loki.push_records([_ndjson(records)])
    assert summary.lines == len(records)
    loki.wait_for_lines(day, day + timedelta(days=1), len(records), selector='{namespace="wide"}')
    window = Window(day, day + timedelta(days=1), UTC, "wide")
    question = LineCount(
        window=window,
        scope=Is("namespace", "wide"),
        columns=(("total", EVERY_LINE), ("errors", ERROR_RULE)),
        by=("namespace", "pod"),
    )
    source = _loki_source(loki.url)

    async def twice() -> tuple[list[CountRow], list[CountRow]]:
        try:
            return await source.count(question), await source.count(question)
        finally:
            await source.aclose()

    with caplog.at_level("INFO", logger="digest.backends.loki"):
        first, second = asyncio.run(twice())
    expected = {("wide", pod): {"total": 2.0, "errors": 1.0} for pod in pods}
    for rows in (first, second):
        assert {(row.group["namespace"], row.group["pod"]): row.counts for row in rows} == expected
    said = [record.getMessage() for record in caplog.records if "max_query_series" in record.getMessage()]
    assert len(said) == 1, "the refusal is said once, and the source does not fold again"

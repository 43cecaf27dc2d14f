"""The source boundary: every backend failure becomes one SourceError kind, with a message that leaks nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from digest.backends.http import _AHEAD, Endpoint, QueryGate, asked_ahead
from digest.backends.prometheus import PrometheusSource
from digest.backends.recorded import RecordedLogs
from digest.backends.victorialogs import VictoriaLogsSource
from digest.checks.contract import SourceError, SourceErrorKind, Window
from digest.checks.log_questions import EVERY_LINE, CountRow, LineCount, LineSeries, PeakCount, ShapeCount, series_of
from digest.pipeline.policy import Policy
from digest.pipeline.recording import recording_plan
from digest.testbed.embedded import free_port
from tests.misbehaving_server import Behaviour, misbehaving_server, recording_server

AT = datetime(2026, 7, 21, tzinfo=UTC)
# Every line of the day before AT: the cheapest question a log backend answers.
DAY_LINES = LineCount(window=Window(AT - timedelta(days=1), AT, UTC, "2026-07-20"))
# Every line of that day per node and 10-minute bucket: what coverage asks (`LogsSource.series`).
BUCKETED_NODE_LINES = replace(DAY_LINES, by=("node",), bucket_seconds=600)
HTML_PAGE = b"<html><body><h1>502 Bad Gateway</h1></body></html>"


async def _query(url: str, timeout_seconds: float = 2.0, logs: bool = False) -> None:
    endpoint = Endpoint(name="VictoriaLogs" if logs else "VictoriaMetrics", url=url, timeout_seconds=timeout_seconds)
    source = VictoriaLogsSource(endpoint) if logs else PrometheusSource(endpoint)
    try:
        if isinstance(source, VictoriaLogsSource):
            await source.count(DAY_LINES)
        else:
            await source.instant("up", AT)
    finally:
        await source.aclose()


async def _series(url: str) -> None:
    # 2 s: a 502 is asked again until the deadline, and these answers never get better.
    source = VictoriaLogsSource(Endpoint(name="VictoriaLogs", url=url, timeout_seconds=2.0))
    try:
        await source.series(BUCKETED_NODE_LINES)
    finally:
        await source.aclose()


# Answers no backend should give, with the error kind and a fragment of the message each must raise.
BAD_ANSWERS = [
    (Behaviour(status=500, content_type="text/plain", body=b"internal"), SourceErrorKind.HTTP, "HTTP 500"),
    (Behaviour(status=502, content_type="text/html", body=HTML_PAGE), SourceErrorKind.HTTP, "HTTP 502"),
    (Behaviour(status=200, content_type="text/html", body=HTML_PAGE), SourceErrorKind.BAD_RESPONSE, "HTML page"),
    (Behaviour(body=b'{"status":"success","data":{"resultType":'), SourceErrorKind.BAD_RESPONSE, "malformed"),
    (
        Behaviour(body=b'{"status":"success","data":{"resultType":"matrix","result":[]}}'),
        SourceErrorKind.BAD_RESPONSE,
        "instant vector",
    ),
    (
        Behaviour(body=b'{"status":"success","isPartial":true,"data":{"resultType":"vector","result":[]}}'),
        SourceErrorKind.BAD_RESPONSE,
        "partial",
    ),
    (
        Behaviour(status=400, body=b'{"status":"error","errorType":"bad_data","error":"cannot parse query"}'),
        SourceErrorKind.QUERY,
        "cannot parse query",
    ),
    (
        Behaviour(body=b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}'),
        SourceErrorKind.BAD_RESPONSE,
        "not a number",
    ),
    (
        Behaviour(body=b'{"status":"success","data":{"resultType":"vector","result":[["up",1]]}}'),
        SourceErrorKind.BAD_RESPONSE,
        "not a list of series",
    ),
    (
        Behaviour(body=b'{"status":"success","data":{"resultType":"vector","result":[{"metric":[],"value":[1,"1"]}]}}'),
        SourceErrorKind.BAD_RESPONSE,
        "labels are not an object",
    ),
    (
        Behaviour(body=b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1]}]}}'),
        SourceErrorKind.BAD_RESPONSE,
        "[time, value] pair",
    ),
    (
        Behaviour(body=b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":"1x"}]}}'),
        SourceErrorKind.BAD_RESPONSE,
        "[time, value] pair",
    ),
]


@pytest.mark.parametrize(("behaviour", "kind", "fragment"), BAD_ANSWERS)
async def test_bad_answers_become_one_error_type(behaviour: Behaviour, kind: SourceErrorKind, fragment: str) -> None:
    """HTTP errors, HTML pages, malformed JSON, wrong shapes and partial answers raise SourceError of the right kind."""
    with misbehaving_server(behaviour) as url, pytest.raises(SourceError) as caught:
        await _query(url)
    assert caught.value.kind is kind
    assert fragment in str(caught.value)
    assert "<html" not in str(caught.value)


def _warned(*warnings: str) -> Behaviour:
    """A successful, empty answer that carries ``warnings``."""
    payload = {"status": "success", "data": {"resultType": "vector", "result": []}, "warnings": list(warnings)}
    return Behaviour(body=json.dumps(payload).encode())


# Prometheus 2.42's own words for a remote read that failed (its local data answered, the rest is missing).
REMOTE_READ_FAILED = (
    'remote_read: error sending request: Post "http://127.0.0.1:9/api/v1/read": dial tcp 127.0.0.1:9: '
    "connect: connection refused"
)


async def test_a_metrics_answer_warning_of_missing_data_is_partial() -> None:
    """A failed remote read (or a Thanos store) said in ``warnings`` is a partial answer; PromQL's own notes pass."""
    for warnings in ((REMOTE_READ_FAILED,), ("PromQL info: metric might not be a counter", REMOTE_READ_FAILED)):
        with misbehaving_server(_warned(*warnings)) as url, pytest.raises(SourceError) as caught:
            await _query(url)
        assert caught.value.kind is SourceErrorKind.BAD_RESPONSE
        assert "partial response (remote_read: error sending request" in str(caught.value)
    notes = (
        "PromQL warning: encountered a mix of histograms and floats",
        "PromQL info: metric might not be a counter",
        "12 more annotations omitted",
    )
    with misbehaving_server(_warned(*notes)) as url:
        await _query(url)
    with misbehaving_server(_warned(REMOTE_READ_FAILED)) as url:
        await _query(url, logs=True)  # VictoriaLogs writes no such warnings: its answers are not judged by them


INFINITE_COUNT = Behaviour(
    body=b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"_time":"x"},"value":[1,"Inf"]}]}}'
)


@pytest.mark.parametrize(
    ("behaviour", "kind", "fragment"),
    [*BAD_ANSWERS, (INFINITE_COUNT, SourceErrorKind.BAD_RESPONSE, "not a finite number")],
)
async def test_log_series_refuse_what_counts_refuse(behaviour: Behaviour, kind: SourceErrorKind, fragment: str) -> None:
    """VictoriaLogs' one-pass fold for coverage (`series`) raises the same errors as its checked `count`."""
    with misbehaving_server(behaviour) as url, pytest.raises(SourceError) as caught:
        await _series(url)
    assert caught.value.kind is kind
    assert fragment in str(caught.value)


async def test_log_series_fold_like_counts() -> None:
    """`series` answers what `count`'s rows say: spellings of one bucket merged, NaN dropped, labels as text."""
    result = [
        {"metric": {"__name__": "lines", "_time": "2026-07-20T00:00:00Z", "node": "a"}, "value": [1, "2"]},
        {"metric": {"__name__": "lines", "_time": "2026-07-20T00:00:00.000000000Z", "node": "a"}, "value": [1, "3"]},
        {"metric": {"__name__": "lines", "_time": "2026-07-20T00:10:00Z", "node": "a"}, "value": [1, "1"]},
        {"metric": {"__name__": "lines", "_time": "2026-07-20T00:10:00Z"}, "value": [1, "4"]},
        {"metric": {"__name__": "lines", "_time": "2026-07-20T00:20:00Z", "node": "b"}, "value": [1, "NaN"]},
        {"metric": {"__name__": "lines", "_time": "2026-07-20T00:20:00Z", "node": "c"}, "value": [1, "0"]},
    ]
    numbered = [
        *result,
        {"metric": {"__name__": "lines", "_time": "2026-07-20T00:30:00Z", "node": 7}, "value": [1, "1"]},
    ]
    start = datetime(2026, 7, 20, tzinfo=UTC).timestamp()
    for answer, extra in ((result, {}), (numbered, {(("node", "7"),): {start + 1800: 1.0}})):
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": answer}}).encode()
        with misbehaving_server(Behaviour(body=body)) as url:
            source = VictoriaLogsSource(Endpoint(name="VictoriaLogs", url=url), fields={"node": "node"})
            try:
                series, rows = await source.series(BUCKETED_NODE_LINES), await source.count(BUCKETED_NODE_LINES)
            finally:
                await source.aclose()
        folded = {tuple(one.group.items()): dict(one.lines) for one in series}
        assert folded == {tuple(one.group.items()): dict(one.lines) for one in series_of(rows, "lines")}
        assert folded == {
            (("node", "a"),): {start: 5.0, start + 600: 1.0},
            (("node", ""),): {start + 600: 4.0},
            **extra,
        }


async def test_slow_backend_times_out() -> None:
    """A backend slower than the query timeout raises a TIMEOUT error, within a bounded time."""
    with misbehaving_server(Behaviour(delay_seconds=3.0, body=b"{}")) as url, pytest.raises(SourceError) as caught:
        await _query(url, timeout_seconds=0.5, logs=True)
    assert caught.value.kind is SourceErrorKind.TIMEOUT


async def test_refused_connection_is_unreachable() -> None:
    """Nothing listening on the port: UNREACHABLE."""
    with pytest.raises(SourceError) as caught:
        await _query(f"http://127.0.0.1:{free_port()}")
    assert caught.value.kind is SourceErrorKind.UNREACHABLE


async def test_dns_failure_is_unreachable() -> None:
    """A host name that does not resolve: UNREACHABLE."""
    with pytest.raises(SourceError) as caught:
        await _query("http://backend.invalid:8428")
    assert caught.value.kind is SourceErrorKind.UNREACHABLE


async def test_credentials_never_appear_in_errors() -> None:
    """User info in the URL is stripped from error messages."""
    port = free_port()
    with pytest.raises(SourceError) as caught:
        await _query(f"http://reader:hunter2@127.0.0.1:{port}/select/0/prometheus")
    assert "hunter2" not in str(caught.value)
    assert f"127.0.0.1:{port}/select/0/prometheus" in str(caught.value)


EMPTY_VECTOR = b'{"status":"success","data":{"resultType":"vector","result":[]}}'


async def test_path_prefix_and_tenant_headers_reach_the_backend() -> None:
    """A vmselect-style path prefix is kept, VictoriaLogs tenants travel as AccountID/ProjectID, queries are pinned."""
    with recording_server(Behaviour(body=EMPTY_VECTOR)) as served:
        metrics = PrometheusSource(Endpoint(name="VictoriaMetrics", url=f"{served.url}/select/0/prometheus/"))
        logs = VictoriaLogsSource(
            Endpoint(name="VictoriaLogs", url=served.url, headers={"AccountID": "12", "ProjectID": "3"})
        )
        await metrics.instant("up", AT)
        await logs.count(DAY_LINES)
        await metrics.aclose()
        await logs.aclose()
    first, second = served.requests
    assert first.path == "/select/0/prometheus/api/v1/query"
    assert b"time=2026-07-21T00%3A00%3A00Z" in first.body
    assert second.path == "/select/logsql/stats_query"
    assert (second.headers["AccountID"], second.headers["ProjectID"]) == ("12", "3")


async def test_every_victorialogs_request_refuses_a_partial_answer() -> None:
    """Counts, peaks, series and shapes all ask VictoriaLogs for whole answers only (``allow_partial_response=0``)."""
    with recording_server(Behaviour(body=EMPTY_VECTOR)) as served:
        logs = VictoriaLogsSource(Endpoint(name="VictoriaLogs", url=served.url))
        await logs.count(DAY_LINES)
        await logs.peak(PeakCount(window=DAY_LINES.window, by=("pod",), bucket_seconds=60))
        await logs.series(replace(DAY_LINES, bucket_seconds=600))
        await logs.shapes(ShapeCount(window=DAY_LINES.window, lines=EVERY_LINE))
        await logs.aclose()
    assert len(served.requests) == 4
    for request in served.requests:
        assert request.path == "/select/logsql/stats_query"
        assert b"allow_partial_response=0" in request.body.split(b"&"), request.body[:120]


async def test_concurrency_is_bounded() -> None:
    """Twenty queries at once never put more than max_concurrency requests in flight."""
    with recording_server(Behaviour(body=EMPTY_VECTOR, delay_seconds=0.05)) as served:
        source = PrometheusSource(Endpoint(name="VictoriaMetrics", url=served.url, max_concurrency=3))
        await asyncio.gather(*(source.instant(f"up{{n='{index}'}}", AT) for index in range(20)))
        await source.aclose()
    assert len(served.requests) == 20
    assert served.max_in_flight == 3


async def test_queries_asked_ahead_take_the_next_free_slot() -> None:
    """With every slot taken, a query asked ahead is sent before those that were already waiting, which keep order."""
    with recording_server(Behaviour(body=EMPTY_VECTOR, delay_seconds=0.05)) as served:
        source = PrometheusSource(Endpoint(name="VictoriaMetrics", url=served.url, max_concurrency=1))

        async def asked(name: str, ahead: bool) -> None:
            with asked_ahead() if ahead else contextlib.nullcontext():
                await source.instant(f'up{{n="{name}"}}', AT)

        await asyncio.gather(asked("a", False), asked("b", False), asked("c", False), asked("d", True))
        await source.aclose()
    sent = [next(name for name in "abcd" if f"%22{name}%22".encode() in request.body) for request in served.requests]
    assert sent == ["a", "d", "b", "c"]
    assert served.max_in_flight == 1


async def test_a_cancelled_wait_for_a_slot_takes_none() -> None:
    """A request cancelled while it waits for a slot leaves it to the next one; the bound then frees as it should."""
    gate = QueryGate(1)
    admitted: list[str] = []

    async def holder(name: str, hold: asyncio.Event) -> None:
        async with gate:
            admitted.append(name)
            await hold.wait()

    first, released = asyncio.Event(), asyncio.Event()
    holding = asyncio.ensure_future(holder("first", first))
    await asyncio.sleep(0)
    cancelled = asyncio.ensure_future(holder("cancelled", released))
    waiting = asyncio.ensure_future(holder("waiting", released))
    await asyncio.sleep(0)
    cancelled.cancel()
    first.set()
    released.set()
    await asyncio.gather(holding, waiting)
    assert cancelled.cancelled()
    assert admitted == ["first", "waiting"]
    async with asyncio.timeout(1):  # the one slot is free again
        async with gate:
            pass


async def test_recorded_log_counts_are_asked_ahead() -> None:
    """Every request a log count makes through the records (read or scanned) is asked ahead of the other queries."""
    seen: list[bool] = []

    class Logs:
        """A log source answering nothing, noting whether it was asked ahead."""

        name, language = "VictoriaLogs", "LogsQL"

        async def count(self, question: LineCount) -> list[CountRow]:
            seen.append(_AHEAD.get())  # the context the requests would be sent in is what is under test
            return []

        async def series(self, question: LineCount) -> list[LineSeries]:
            seen.append(_AHEAD.get())
            return []

    # Records asked of a port nothing listens on: read or not, the log counts end in the log source.
    records = PrometheusSource(Endpoint(name="VictoriaMetrics", url=f"http://127.0.0.1:{free_port()}"))
    recorded = RecordedLogs(Logs(), records, recording_plan(Policy()))  # type: ignore[arg-type]  # a partial source
    await recorded.count(DAY_LINES)
    await recorded.series(BUCKETED_NODE_LINES)
    await records.aclose()
    assert seen == [True, True]
    assert _AHEAD.get() is False


async def test_rows_keep_their_labels_as_text_and_drop_nan() -> None:
    """A label sent as a number reads as text, a row without labels has none, and a NaN sample is no sample."""
    result = [
        {"metric": {"pod": "web-1", "restarts": 3}, "value": [1, "2"]},
        {"value": [1, "4.5"]},
        {"metric": {"pod": "web-2"}, "value": [1, "NaN"]},
    ]
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
    with misbehaving_server(Behaviour(body=body)) as url:
        source = PrometheusSource(Endpoint(name="VictoriaMetrics", url=url))
        try:
            samples = await source.instant("up", AT)
        finally:
            await source.aclose()
    assert [(dict(sample.labels), sample.value) for sample in samples] == [
        ({"pod": "web-1", "restarts": "3"}, 2.0),
        ({}, 4.5),
    ]


OK_VECTOR = Behaviour(body=b'{"status":"success","data":{"resultType":"vector","result":[]}}')


@pytest.mark.parametrize(
    "first",
    [
        [Behaviour(status=502, content_type="text/html", body=HTML_PAGE), Behaviour(status=503, body=b"")],
        [Behaviour(hang_up=True)],
        [Behaviour(status=504, body=b"")],
    ],
    ids=["502-then-503", "reset", "504"],
)
async def test_a_transient_failure_is_asked_again_within_the_deadline(first: list[Behaviour]) -> None:
    """A 502/503/504 or a connection reset, then an answer: the query succeeds, asked once more per failure."""
    with recording_server([*first, OK_VECTOR]) as served:
        await _query(served.url, timeout_seconds=10)
    assert len(served.requests) == len(first) + 1


async def test_a_failure_lasting_the_whole_deadline_is_the_error_with_its_attempts() -> None:
    """502 for the whole 2 s: SourceError HTTP 502, saying how many attempts were made; a 500 is not retried."""
    with recording_server(Behaviour(status=502, body=b"")) as served, pytest.raises(SourceError) as caught:
        await _query(served.url, timeout_seconds=2)
    assert caught.value.kind is SourceErrorKind.HTTP
    assert "HTTP 502" in str(caught.value)
    assert f"({len(served.requests)} attempts)" in str(caught.value)
    assert len(served.requests) >= 3
    with recording_server(Behaviour(status=500, body=b"")) as served, pytest.raises(SourceError):
        await _query(served.url, timeout_seconds=2)
    assert len(served.requests) == 1

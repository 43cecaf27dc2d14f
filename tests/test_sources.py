"""The source boundary: every backend failure becomes one SourceError kind, with a message that leaks nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from checks.contract import SourceError, SourceErrorKind
from digest.embedded import free_port
from digest.sources import Endpoint, PrometheusSource, VictoriaLogsSource
from tests.misbehaving_server import Behaviour, misbehaving_server

AT = datetime(2026, 7, 21, tzinfo=UTC)
HTML_PAGE = b"<html><body><h1>502 Bad Gateway</h1></body></html>"


async def _query(url: str, timeout_seconds: float = 2.0, logs: bool = False) -> None:
    endpoint = Endpoint(name="VictoriaLogs" if logs else "VictoriaMetrics", url=url, timeout_seconds=timeout_seconds)
    source = VictoriaLogsSource(endpoint) if logs else PrometheusSource(endpoint)
    try:
        if isinstance(source, VictoriaLogsSource):
            await source.stats("_time:1d | stats count()", AT)
        else:
            await source.instant("up", AT)
    finally:
        await source.aclose()


@pytest.mark.parametrize(
    ("behaviour", "kind", "fragment"),
    [
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
            Behaviour(
                body=b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}'
            ),
            SourceErrorKind.BAD_RESPONSE,
            "not a number",
        ),
    ],
)
async def test_bad_answers_become_one_error_type(behaviour: Behaviour, kind: SourceErrorKind, fragment: str) -> None:
    """HTTP errors, HTML pages, malformed JSON, wrong shapes and partial answers raise SourceError of the right kind."""
    with misbehaving_server(behaviour) as url, pytest.raises(SourceError) as caught:
        await _query(url)
    assert caught.value.kind is kind
    assert fragment in str(caught.value)
    assert "<html" not in str(caught.value)


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

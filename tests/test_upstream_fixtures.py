"""Real upstream records and responses (tests/fixtures, with attribution) go through the real code paths."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from digest.backends.http import Endpoint
from digest.backends.prometheus import PrometheusSource
from digest.backends.victorialogs import VictoriaLogsSource
from digest.checks.contract import Sources, Window
from digest.checks.envoy_flags import EnvoyFlagsCheck, EnvoyFlagsPolicy
from digest.checks.error_lines import ErrorLinesCheck, ErrorLinesPolicy
from digest.checks.log_questions import EVERY_LINE, LineCount
from digest.pipeline.window import day_window
from digest.testbed.embedded import EmbeddedBackends
from tests.misbehaving_server import Behaviour, misbehaving_server

FIXTURES = Path(__file__).parent / "fixtures"
AT = datetime(2024, 1, 2, tzinfo=UTC)
DAY = Window(AT - timedelta(days=1), AT, UTC, "2024-01-01")


def _fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


async def test_victorialogs_stats_response_parses() -> None:
    """The VictoriaLogs docs' stats_query answer parses into one sample per level with its count."""
    with misbehaving_server(Behaviour(body=_fixture("victorialogs_stats_query_response_example.fixed.json"))) as url:
        source = VictoriaLogsSource(Endpoint(name="VictoriaLogs", url=url))
        question = LineCount(window=DAY, columns=(("count(*)", EVERY_LINE),), by=("level",))
        rows = await source.count(question)
        await source.aclose()
    assert {row.group["level"]: row.counts["count(*)"] for row in rows} == {
        "info": 20395342,
        "warn": 1239222,
        "error": 832,
    }


def _ingest(backends: EmbeddedBackends, records: list[dict[str, object]]) -> None:
    backends.ingest_logs([("\n".join(json.dumps(record) for record in records) + "\n").encode()])


async def test_vector_sample_record_counts_as_an_error_line(own_backends: EmbeddedBackends) -> None:
    """Vector's own kubernetes_logs sample (a klog "error getting server version" line) is one error line."""
    record = json.loads(_fixture("vector_kubernetes_logs_sample_output.json"))
    _ingest(own_backends, [record])
    window = day_window(date(2020, 10, 15), ZoneInfo("UTC"))
    own_backends.wait_for_logs(window.start, window.end, 1)
    sources = _sources(own_backends)
    finding = await ErrorLinesCheck(ErrorLinesPolicy())(sources, window)
    await _close(sources)
    assert finding.value == 1
    assert finding.offenders[0].labels["namespace"] == "kube-system"
    assert finding.offenders[0].labels["workload"] == "storage-provisioner"


async def test_envoy_gateway_record_read_as_text_or_as_fields(own_backends: EmbeddedBackends) -> None:
    """Envoy Gateway's documented record counts as an unflagged 5xx whether shipped as JSON text or parsed fields."""
    record = json.loads(_fixture("envoy_gateway_access_log_example.json"))
    pod = {"pod_namespace": "envoy-gateway-system", "pod_name": "envoy-default-eg-bcdfg", "container_name": "envoy"}
    as_text = {"timestamp": record["start_time"], "message": json.dumps(record), "stream": "stdout", "kubernetes": pod}
    as_fields = {
        **record,
        "timestamp": record["start_time"],
        "message": "access",
        "stream": "stdout",
        "kubernetes": pod,
    }
    _ingest(own_backends, [as_text, as_fields])
    window = day_window(date(2025, 3, 8), ZoneInfo("UTC"))
    own_backends.wait_for_logs(window.start, window.end, 2)
    sources = _sources(own_backends)
    finding = await EnvoyFlagsCheck(EnvoyFlagsPolicy(use_istio_metrics=False))(sources, window)
    await _close(sources)
    assert finding.status.value == "OK"
    assert finding.summary == "no flagged 5xx in 2 requests"
    assert list(finding.evidence) == ["2 other 5xx came from the applications themselves (no proxy flag)"]


async def test_envoy_records_without_a_flag_field_are_unclassifiable(own_backends: EmbeddedBackends) -> None:
    """5xx records lacking response_flags (absent or null) are counted as unclassifiable, never as the application's."""
    record = json.loads(_fixture("envoy_gateway_access_log_example.json"))
    record["start_time"] = "2025-03-09T12:00:00.000Z"
    pod = {"pod_namespace": "envoy-gateway-system", "pod_name": "envoy-default-eg-bcdfg", "container_name": "envoy"}
    absent = {key: value for key, value in record.items() if key != "response_flags"}
    records: list[dict[str, object]] = [
        {"timestamp": record["start_time"], "message": json.dumps(absent), "stream": "stdout", "kubernetes": pod},
        {**absent, "timestamp": record["start_time"], "message": "access", "stream": "stdout", "kubernetes": pod},
        {
            "timestamp": record["start_time"],
            "message": json.dumps({**record, "response_flags": None}),
            "stream": "stdout",
            "kubernetes": pod,
        },
    ]
    _ingest(own_backends, records)
    window = day_window(date(2025, 3, 9), ZoneInfo("UTC"))
    own_backends.wait_for_logs(window.start, window.end, 3)
    sources = _sources(own_backends)
    finding = await EnvoyFlagsCheck(EnvoyFlagsPolicy(use_istio_metrics=False))(sources, window)
    await _close(sources)
    assert finding.status.value == "UNKNOWN"
    assert finding.summary.startswith("3 5xx not classifiable (no response_flags field)")
    assert not any("applications themselves" in line for line in finding.evidence)
    assert any(line.startswith("3 5xx cannot be classified") for line in finding.evidence)
    assert finding.error is not None
    assert "response_flags" in finding.error


def _sources(backends: EmbeddedBackends) -> Sources:
    metrics = PrometheusSource(Endpoint(name="VictoriaMetrics", url=backends.metrics.url))
    logs = VictoriaLogsSource(Endpoint(name="VictoriaLogs", url=backends.logs.url))
    return Sources(metrics=metrics, logs=logs)


async def _close(sources: Sources) -> None:
    for source in (sources.metrics, sources.logs):
        if isinstance(source, PrometheusSource | VictoriaLogsSource):
            await source.aclose()

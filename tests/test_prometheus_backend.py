"""Prometheus as the metrics backend: where PromQL differs from MetricsQL, the checks' queries still count exactly.

The whole corpus is compared with VictoriaMetrics in `tests/test_backend_parity.py`; this file pins the
differences the queries were written around, on the real Prometheus 2.42 of the session (`prometheus_corpus`).
"""

from __future__ import annotations

from datetime import UTC, date

from digest.app.engine import Config, open_sources
from digest.app.settings import load_settings
from digest.backends.http import Endpoint, HttpSource
from digest.checks.restarts import LIVENESS_FAILED, RestartsCheck, RestartsPolicy
from digest.pipeline.policy import Policy
from digest.pipeline.window import day_window
from digest.testbed.embedded import EmbeddedBackends
from digest.testbed.prometheus_server import PrometheusServer


def _config(metrics_url: str, logs_url: str) -> Config:
    settings = load_settings(
        vm_url=metrics_url, vl_url=logs_url, cluster="homelab", timezone="UTC", policy_file=None, query_timeout=60.0
    )
    return Config(settings=settings, policy=Policy())


async def test_failed_liveness_probes_are_an_exact_integer_on_prometheus(
    corpus_backends: EmbeddedBackends, prometheus_corpus: PrometheusServer
) -> None:
    """07-20's 5 failed liveness probes read 5 on Prometheus, where increase() says 4.0068 (first failure lost)."""
    window = day_window(date(2026, 7, 20), UTC)
    check = RestartsCheck(RestartsPolicy())
    async with open_sources(_config(prometheus_corpus.url, corpus_backends.logs.url).settings) as sources:
        increase = f"sum(increase({LIVENESS_FAILED}[{window.promql_range()}]))"
        extrapolated = await sources.metrics.instant(increase, window.end)
        assert [round(row.value, 4) for row in extrapolated] == [4.0068]  # what the check must not read
        counted = await sources.metrics.instant(check.queries(window)["probes"], window.end)
        assert [row.value for row in counted] == [5.0]
        finding = await check(sources, window)
    assert "failed liveness probes: feeds/feed-aggregator-npps2xwfrl-zwkbv/backend 5" in finding.evidence


async def test_prometheus_and_victoriametrics_are_told_apart(
    corpus_backends: EmbeddedBackends, prometheus_corpus: PrometheusServer
) -> None:
    """Prometheus 2.42 reports its revision: "a Prometheus"; the suite's VictoriaMetrics is "a VictoriaMetrics"."""
    for url, expected in ((prometheus_corpus.url, "a Prometheus"), (corpus_backends.metrics.url, "a VictoriaMetrics")):
        source = HttpSource(Endpoint("VictoriaMetrics", url))
        try:
            assert await source.what_answers() == expected
        finally:
            await source.aclose()

"""Prometheus as the metrics backend: every corpus day grades exactly as on VictoriaMetrics.

Both digests read the same VictoriaLogs; only the metrics backend differs. The graded JSON is compared whole, with
no normalisation: no field of it names the metrics backend.

Four days are known to differ, and not because of a query: the session's VictoriaMetrics holds every corpus day,
and consecutive days (07-19 and 07-20, 08-16 and 08-17) each carry the two hours around their shared midnight, so
VictoriaMetrics (which keeps samples of identical timestamps unless ``-dedup.minScrapeInterval`` is set) holds those
samples twice and measures 15 or 20 s scrapes where there are 30 s ones. Prometheus merges them. Those days are
strict xfails: once the loader stops duplicating samples, they pass, and the marker must go.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date
from typing import Any

import pytest

from checks.restarts import LIVENESS_FAILED, RestartsCheck, RestartsPolicy
from digest.corpus import DAYS
from digest.embedded import EmbeddedBackends
from digest.engine import Config, make_digest, open_sources
from digest.policy import Policy
from digest.render import to_json
from digest.settings import load_settings
from digest.window import day_window
from testbed.prometheus_server import PrometheusServer, missing_binaries

_DUPLICATED_SAMPLES = {date(2026, 7, 19), date(2026, 7, 20), date(2026, 8, 16), date(2026, 8, 17)}


@pytest.fixture(scope="module")
def prometheus() -> Iterator[PrometheusServer]:
    """One Prometheus holding every corpus day (backfilled with promtool), stopped by PID at the end."""
    missing = missing_binaries()
    if missing:
        pytest.fail(f"{', '.join(missing)} not on PATH: run scripts/install-backends")
    with PrometheusServer(DAYS.values()) as server:
        yield server


def _config(metrics_url: str, logs_url: str) -> Config:
    settings = load_settings(
        vm_url=metrics_url, vl_url=logs_url, cluster="homelab", timezone="UTC", policy_file=None, query_timeout=60.0
    )
    return Config(settings=settings, policy=Policy())


async def _graded(metrics_url: str, logs_url: str, day: date) -> dict[str, Any]:
    window = day_window(day, UTC)
    return to_json(await make_digest(_config(metrics_url, logs_url), window))


def _days() -> list[Any]:
    return [
        pytest.param(
            day,
            id=str(day),
            marks=[
                pytest.mark.xfail(
                    strict=True,
                    reason="VictoriaMetrics holds the overlapping corpus days' shared samples twice (15/20 s scrapes)",
                )
            ]
            if day in _DUPLICATED_SAMPLES
            else [],
        )
        for day in sorted(DAYS)
    ]


@pytest.mark.parametrize("day", _days())
async def test_day_grades_the_same_on_prometheus(
    corpus_backends: EmbeddedBackends, prometheus: PrometheusServer, day: date
) -> None:
    """A corpus day's graded JSON on Prometheus + VictoriaLogs equals the one on VictoriaMetrics + VictoriaLogs."""
    on_victoria_metrics = await _graded(corpus_backends.metrics.url, corpus_backends.logs.url, day)
    on_prometheus = await _graded(prometheus.url, corpus_backends.logs.url, day)
    assert on_prometheus == on_victoria_metrics


async def test_failed_liveness_probes_are_an_exact_integer_on_prometheus(
    corpus_backends: EmbeddedBackends, prometheus: PrometheusServer
) -> None:
    """07-20's 5 failed liveness probes read 5 on Prometheus, where increase() says 4.0068 (first failure lost)."""
    window = day_window(date(2026, 7, 20), UTC)
    check = RestartsCheck(RestartsPolicy())
    async with open_sources(_config(prometheus.url, corpus_backends.logs.url).settings) as sources:
        increase = f"sum(increase({LIVENESS_FAILED}[{window.promql_range()}]))"
        extrapolated = await sources.metrics.instant(increase, window.end)
        assert [round(row.value, 4) for row in extrapolated] == [4.0068]  # what the check must not read
        counted = await sources.metrics.instant(check.queries(window)["probes"], window.end)
        assert [row.value for row in counted] == [5.0]
        finding = await check(sources, window)
    assert "failed liveness probes: feeds/feed-aggregator-npps2xwfrl-zwkbv/backend 5" in finding.evidence

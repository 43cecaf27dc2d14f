"""Shared fixtures: real VictoriaMetrics and VictoriaLogs processes loaded with the incident corpus.

The corpus is loaded once per test session into one pair of backends (the days do not overlap), then stopped by
PID at the end. Tests that stop a backend get their own pair so the shared one stays intact.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from testbed.corpus import DAYS
from testbed.embedded import EmbeddedBackends, load_corpus_day
from testbed.loki_server import LokiServer, loki_binary_or_skip
from testbed.prometheus_server import PrometheusServer, missing_binaries

# The storm's non-error lines are scaled for the test suite (the error count stays exact at any scale); the demo
# loads the full volume. DIGEST_TEST_VOLUME_SCALE=1 runs the suite at full scale.
VOLUME_SCALE = float(os.environ.get("DIGEST_TEST_VOLUME_SCALE", "0.05"))


def backends_available() -> bool:
    """Whether both backend binaries are on PATH."""
    return shutil.which("victoria-metrics") is not None and shutil.which("victoria-logs") is not None


@pytest.fixture(scope="session")
def corpus_backends() -> Iterator[EmbeddedBackends]:
    """One VictoriaMetrics + VictoriaLogs pair holding every corpus day."""
    if not backends_available():
        pytest.fail("victoria-metrics / victoria-logs not on PATH: run scripts/install-backends")
    with EmbeddedBackends() as backends:
        for day in DAYS.values():
            load_corpus_day(backends, _scaled(day))
        yield backends


@pytest.fixture(scope="session")
def prometheus_corpus() -> Iterator[PrometheusServer]:
    """A Prometheus 2.42 holding every corpus day's metrics (backfilled with promtool)."""
    missing = missing_binaries()
    if missing:
        pytest.fail(f"{', '.join(missing)} not on PATH: run scripts/install-backends")
    with PrometheusServer(DAYS.values()) as server:
        yield server


@pytest.fixture(scope="session")
def loki_corpus() -> Iterator[LokiServer]:
    """A Loki 3.5.12 holding every corpus day's logs at the suite's volume scale, pushed as Promtail ships them."""
    binary = loki_binary_or_skip()
    with LokiServer(binary=binary) as server:
        server.push_days(_scaled(day) for day in DAYS.values())  # type: ignore[misc]  # scaled days are days
        yield server


@pytest.fixture
def own_backends() -> Iterator[EmbeddedBackends]:
    """A private pair of backends (for tests that stop one), empty until the test loads a day."""
    with EmbeddedBackends() as backends:
        yield backends


def _scaled(day: object) -> object:
    scale = getattr(day, "with_volume_scale", None)
    return scale(VOLUME_SCALE) if callable(scale) else day

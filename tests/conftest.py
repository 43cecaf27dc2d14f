"""Shared fixtures: real VictoriaMetrics, VictoriaLogs, Prometheus and Loki processes loaded with the incident corpus.

The corpus is loaded once per test process into one server of each kind (the days do not overlap), then stopped by
PID at the end. Tests that stop a backend get their own pair so the shared one stays intact. A load is kept as a
snapshot between runs on the same machine (``testbed.snapshots``; ``DIGEST_TEST_CACHE=off`` turns that off): a
later run, or the second pytest-xdist worker, copies the data directory and checks the counts instead of loading.

Every run ends with a summary of the time spent starting backends and loading data (``tests/timings.py``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import date

import pytest

from testbed.corpus import DAYS
from testbed.embedded import EmbeddedBackends, load_corpus_day, loaded_backends, wait_for_corpus_day
from testbed.loki_server import LokiServer, loaded_loki, loki_binary_or_skip
from testbed.prometheus_server import PrometheusServer, missing_binaries
from testbed.snapshots import binary_identity, snapshot_key

pytest_plugins = ["tests.timings"]

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
    days = [_scaled(day) for day in DAYS.values()]

    def load(backends: EmbeddedBackends) -> dict[str, object]:
        return {"lines": {day.date.isoformat(): load_corpus_day(backends, day) for day in days}}  # type: ignore[attr-defined]  # scaled days are days

    def verify(backends: EmbeddedBackends, manifest: dict[str, object]) -> None:
        lines = manifest["lines"]
        assert isinstance(lines, dict)
        for day, count in lines.items():
            wait_for_corpus_day(backends, date.fromisoformat(day), count)

    snapshot = snapshot_key(
        "corpus-victoria",
        [],
        f"scale={VOLUME_SCALE}",
        binary_identity("victoria-metrics"),
        binary_identity("victoria-logs"),
    )
    with loaded_backends(f"{len(days)} days: VictoriaMetrics + VictoriaLogs", snapshot, load, verify) as backends:
        yield backends


@pytest.fixture(scope="session")
def prometheus_corpus() -> Iterator[PrometheusServer]:
    """A Prometheus 2.42 holding every corpus day's metrics (backfilled with promtool)."""
    missing = missing_binaries()
    if missing:
        pytest.fail(f"{', '.join(missing)} not on PATH: run scripts/install-backends")
    snapshot = snapshot_key("corpus-prometheus", [], binary_identity("promtool"), binary_identity("prometheus"))
    with PrometheusServer(DAYS.values(), snapshot=snapshot) as server:
        yield server


@pytest.fixture(scope="session")
def loki_corpus() -> Iterator[LokiServer]:
    """A Loki 3.5.12 holding every corpus day's logs at the suite's volume scale, pushed as Promtail ships them."""
    binary = loki_binary_or_skip()
    days = [_scaled(day) for day in DAYS.values()]
    snapshot = snapshot_key("corpus-loki", [], f"scale={VOLUME_SCALE}", binary_identity(binary))
    with loaded_loki(days, snapshot, binary) as server:  # type: ignore[arg-type]  # scaled days are days
        yield server


@pytest.fixture
def own_backends() -> Iterator[EmbeddedBackends]:
    """A private pair of backends (for tests that stop one), empty until the test loads a day."""
    with EmbeddedBackends() as backends:
        yield backends


def _scaled(day: object) -> object:
    scale = getattr(day, "with_volume_scale", None)
    return scale(VOLUME_SCALE) if callable(scale) else day

"""Shared fixtures: real VictoriaMetrics and VictoriaLogs processes loaded with the incident corpus.

The corpus is loaded once per test session into one pair of backends (the days do not overlap), then stopped by
PID at the end. Tests that stop a backend get their own pair so the shared one stays intact.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from digest.corpus import DAYS
from digest.embedded import EmbeddedBackends, load_corpus_day

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


@pytest.fixture
def own_backends() -> Iterator[EmbeddedBackends]:
    """A private pair of backends (for tests that stop one), empty until the test loads a day."""
    with EmbeddedBackends() as backends:
        yield backends


def _scaled(day: object) -> object:
    scale = getattr(day, "with_volume_scale", None)
    return scale(VOLUME_SCALE) if callable(scale) else day

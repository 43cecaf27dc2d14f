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

from digest.testbed.corpus import DAYS, CorpusDay, scaled, suite_volume_scale
from digest.testbed.embedded import EmbeddedBackends, load_corpus_day, loaded_backends, wait_for_corpus_day
from digest.testbed.loki_server import LokiServer, corpus_loki_snapshot, loaded_loki, loki_binary_or_skip
from digest.testbed.prometheus_server import PrometheusServer, corpus_prometheus_snapshot, missing_binaries
from digest.testbed.snapshots import binary_identity, snapshot_key

pytest_plugins = ["tests.timings"]

# The tests resolve names that must not exist (``digest-test.invalid``: "does not resolve" is what they check). A
# resolver that drops such queries instead of answering NXDOMAIN (as on a machine without internet) makes each one
# wait out glibc's default 5 s × 2 tries × 2 families; one try of 1 s says the same, for this process and, through
# the environment, every command the tests run.
os.environ.setdefault("RES_OPTIONS", "timeout:1 attempts:1")

# The storm's non-error lines are scaled for the test suite (the error count stays exact at any scale); the demo
# loads the full volume. DIGEST_TEST_VOLUME_SCALE=1 runs the suite at full scale.
VOLUME_SCALE = suite_volume_scale()


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
        return {"lines": {day.date.isoformat(): load_corpus_day(backends, day) for day in days}}

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
    with PrometheusServer(DAYS.values(), snapshot=corpus_prometheus_snapshot()) as server:
        yield server


# The corpus Loki keeps its metric queries' results, as a Loki deployed by its Helm chart does (a results cache is on
# there by default; memcached there, Loki's embedded cache here). Its days are in the past, so an answer never changes;
# what changes is that a question asked again of the same Loki is answered once: the two Loki pairs of
# test_backend_parity differ only in their metrics backend and run in one group, and the doctor is asked in two
# formats. Measured alone on 2026-12-05: test_backend_parity 209 s -> 122 s (the second Loki pair 90 s -> 9 s). Tests
# of Loki's own behaviour (a slow scan, a timeout, the benchmarks' repeats) start a Loki of their own, without it.
LOKI_RESULTS_CACHE = ("-querier.cache-results=true", "-querier.cache-instant-metric-results=true")


@pytest.fixture(scope="session")
def loki_corpus() -> Iterator[LokiServer]:
    """A Loki 3.5.12 holding every corpus day's logs at the suite's volume scale, pushed as Promtail ships them."""
    binary = loki_binary_or_skip()
    days = [_scaled(day) for day in DAYS.values()]
    snapshot = corpus_loki_snapshot(VOLUME_SCALE, binary)
    with loaded_loki(days, snapshot, binary, extra_args=LOKI_RESULTS_CACHE) as server:
        yield server


@pytest.fixture
def own_backends() -> Iterator[EmbeddedBackends]:
    """A private pair of backends (for tests that stop one), empty until the test loads a day."""
    with EmbeddedBackends() as backends:
        yield backends


def _scaled(day: CorpusDay) -> CorpusDay:
    return scaled(day, VOLUME_SCALE)


# Scheduling on the pytest-xdist workers (scripts/test runs `-n 2 --dist loadgroup`) --------------------------------
# Each module is one group, so a module's fixtures are built once, on one worker; the modules below are spread
# instead (their tests share only session fixtures): test_backend_parity one group for the Loki pairs and one for
# Prometheus + VictoriaLogs (a pair's days are replayed together, and each worker replays the reference once),
# test_bot, test_bench and test_faults one group per test. Groups are handed out in collection order (scripts/test
# passes --no-loadscope-reorder: pytest-xdist would otherwise order them by their number of tests), so the longest go
# first (longest-processing-time first: the short ones fill the gaps at the end).
# The weights are each module's wall time in a full run on this 2-core machine, warm snapshots (2026-12-05, 15:30 UTC,
# `bash scripts/test` with a per-test timer; test_cause_ablations less the 65 s of its snapshot's build); a module
# not listed weighs 0 and goes last. A wrong weight costs balance, never correctness.
MODULE_SECONDS = {
    # Mostly waiting for Loki's ruler to evaluate twice, a minute apart (101 s): first, so the other worker fills the
    # wait.
    "test_loki_ruler": 300,
    "test_bench": 110,  # 2026-12-07: the quick programme without its replay (the replay-only test measures it)
    "test_cluster_scope": 85,  # 2026-12-07: without trends; Prometheus restored; half scoped on each backend
    "test_loki_patterns": 95,
    "test_bot": 95,
    "test_cause_ablations": 60,  # 2026-12-07: without trends
    "test_delivery_faults": 80,
    "test_doctor_inputs": 78,
    "test_coverage_ablations": 58,
    "test_digest_allowance": 25,  # 50 s before its bursts asked for the calm day (19 s alone)
    "test_corpus": 45,
    "test_recorded_counts": 45,
    "test_incident_days": 45,
    "test_coverage": 38,
    "test_cluster_shapes": 55,  # 2026-12-07: 33 shapes (5 s restored), digests, two doctors, look-backs, Prometheus
    "test_delivery_parts": 30,
    "test_backend_failures": 29,
    "test_image": 28,
    "test_vm_cluster": 27,
    "test_explanations": 24,
    "test_sources": 23,
    "test_replay": 22,
    "test_bad_input": 20,
    "test_week": 19,
    "test_history_store": 19,
    "test_loki_server": 17,
    "test_faults": 15,
    "test_links": 15,
    "test_input_matrix": 11,
    "test_loki_source": 9,
    "test_probe_inputs": 9,
    "test_helm_chart": 9,
}
# Groups that are neither a module nor a test: test_backend_parity's, each replaying the corpus days on its pairs (in
# the same run: 152 s for the Loki pairs, with the reference, which each worker replays once; 47 s for Prometheus +
# VictoriaLogs).
GROUP_SECONDS = {
    "test_backend_parity.loki": 100,  # 2026-12-07: trends of the day before only (97 s alone on a slow morning)
    "test_backend_parity.prometheus+victorialogs": 47,
}
SPREAD_BY_TEST = {"test_bot", "test_bench", "test_faults"}
# In the modules spread by test, the tests that take most of the module's time (their durations in the same run);
# the module's other tests share what is left of its time.
TEST_SECONDS = {
    "test_quick_benchmark_programme_measures_and_checks_every_figure": 88,
    "test_replay_only_programme_measures_the_replay_against_its_floor": 36,
    "test_slow_backends_yield_unknown_not_silence": 21,
}


def _group_of(item: pytest.Item) -> str:
    module = item.path.stem
    if module == "test_backend_parity":
        pair = getattr(getattr(item, "callspec", None), "params", {}).get("pair", "")
        # The Loki pairs together: their log questions are the same, answered once by the worker's corpus Loki.
        # No "]" in a group's name: pytest-xdist takes the node id's "@" suffix for its group only when no "]" follows
        # the "@" (its guard against a parameter holding "@"), else each test is a group of its own (seen: the Loki
        # pairs replayed on both workers when the group was "test_backend_parity[loki]").
        return f"{module}.loki" if pair.endswith("+loki") else f"{module}.{pair}"
    if module in SPREAD_BY_TEST:
        return item.nodeid
    return module


def _named_seconds(group: str, first: pytest.Item) -> float | None:
    """A group of one test that TEST_SECONDS weighs: its seconds; any other group: None."""
    if group == first.nodeid and first.name in TEST_SECONDS:
        return TEST_SECONDS[first.name]
    return None


# tryfirst: pytest-xdist's worker turns each test's xdist_group mark into the "@group" suffix of its node id in its
# own collection hook, which otherwise runs before this one (checked: without it a module's tests went to both
# workers): no mark would be seen, every test would be a group of its own, and a module's fixtures would be built on
# both workers (seen: the two-cluster stores built twice in one run). pyproject.toml keeps pytest below 9.2 for the
# same suffix.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group each test for the workers and put the heaviest groups first (stable within a group)."""
    del config
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        group = _group_of(item)
        item.add_marker(pytest.mark.xdist_group(group))
        groups.setdefault(group, []).append(item)

    named: dict[str, float] = {}  # per module: the seconds of its tests that TEST_SECONDS weighs
    unnamed: dict[str, int] = {}  # per module: its other groups, which share the rest of its time
    for group, members in groups.items():
        module, seconds = members[0].path.stem, _named_seconds(group, members[0])
        if seconds is None:
            unnamed[module] = unnamed.get(module, 0) + 1
        else:
            named[module] = named.get(module, 0) + seconds

    def weight(group: str) -> float:
        if group in GROUP_SECONDS:
            return GROUP_SECONDS[group]
        first = groups[group][0]
        seconds = _named_seconds(group, first)
        if seconds is not None:
            return seconds
        module = first.path.stem
        return max(0, MODULE_SECONDS.get(module, 0) - named.get(module, 0)) / unnamed[module]

    ordered = sorted(groups, key=lambda group: -weight(group))
    items[:] = [item for group in ordered for item in groups[group]]

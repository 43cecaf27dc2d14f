"""Trends' past days kept in the state file: a daily digest stops re-querying its last seven days, and stays right.

Real VictoriaMetrics + VictoriaLogs with the incident corpus; the store is a real SQLite file.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from digest.app.engine import Config, make_digest, open_history_store, open_sources, stored_history
from digest.app.settings import load_settings
from digest.backends.prometheus import PrometheusSource
from digest.backends.recorded import RecordedLogs
from digest.backends.victorialogs import VictoriaLogsSource
from digest.checks.error_lines import ErrorLinesPolicy
from digest.output.render import to_json
from digest.pipeline.policy import Policy
from digest.pipeline.state import HistoryStore
from digest.pipeline.trends import policy_fingerprint
from digest.pipeline.window import day_window
from digest.testbed.embedded import EmbeddedBackends, free_port

DAY = date(2026, 8, 17)  # the day after the keepalive race: its trends compare with 08-16 and 08-12


def _config(backends: EmbeddedBackends, state: Path) -> Config:
    settings = load_settings(
        vm_url=backends.metrics.url,
        vl_url=backends.logs.url,
        cluster="homelab",
        timezone="UTC",
        policy_file=None,
        query_timeout=20.0,
        state_path=state,
    )
    return Config(settings=settings, policy=Policy())


async def _digest_and_queries(config: Config, store: HistoryStore | None) -> tuple[dict[str, object], int, int]:
    window = day_window(DAY, config.settings.zone)
    async with open_sources(config.settings) as sources:
        digest = await make_digest(config, window, sources=sources, history=stored_history(config, store))
        assert isinstance(sources.metrics, PrometheusSource)
        # The log checks read recorded counts first where there are some (none here): the backend is inside.
        assert isinstance(sources.logs, RecordedLogs)
        assert isinstance(sources.logs.inner, VictoriaLogsSource)
        return to_json(digest), sources.metrics.queries_sent, sources.logs.inner.queries_sent


async def test_second_digest_reads_past_days_from_the_store(corpus_backends: EmbeddedBackends, tmp_path: Path) -> None:
    """The next digest of the day sends fewer queries and says exactly the same; blind past days are not stored."""
    config = _config(corpus_backends, tmp_path / "state.sqlite")
    without, metrics_without, logs_without = await _digest_and_queries(config, None)
    store = open_history_store(config.settings)
    assert store is not None
    try:
        first, metrics_first, logs_first = await _digest_and_queries(config, store)
        second, metrics_second, logs_second = await _digest_and_queries(config, store)
    finally:
        store.close()
    assert first == without == second
    assert first["trends"], "the day has trends to compare"
    # Only the digest's own window looks back (its trend days do not): the same questions, whichever came first.
    assert (metrics_first, logs_first) == (metrics_without, logs_without)
    assert metrics_second + logs_second < metrics_first + logs_first
    assert logs_second < logs_first
    with sqlite3.connect(tmp_path / "state.sqlite") as connection:
        stored = connection.execute("SELECT window_start FROM graded_history ORDER BY window_start").fetchall()
    # Only the fully seen past days are kept (08-12 and 08-16); the five without data are partial (nothing seen),
    # so they are asked again next time: data may still arrive for them (an ingestion lag, a backfill).
    assert [datetime.fromtimestamp(start, UTC).date() for (start,) in stored] == [date(2026, 8, 12), date(2026, 8, 16)]


async def test_days_whose_queries_failed_are_not_stored(corpus_backends: EmbeddedBackends, tmp_path: Path) -> None:
    """With the log backend unreachable, no past day is kept; once it answers, they are."""
    state = tmp_path / "state.sqlite"
    down = _config(corpus_backends, state)
    down = Config(
        settings=down.settings.model_copy(update={"vl_url": f"http://127.0.0.1:{free_port()}"}), policy=down.policy
    )
    store = open_history_store(down.settings)
    assert store is not None
    try:
        blind, _, _ = await _digest_and_queries(down, store)
        checks = blind["checks"]
        assert isinstance(checks, list)
        assert any(check["status"] == "UNKNOWN" for check in checks)
        with sqlite3.connect(state) as connection:
            assert connection.execute("SELECT count(*) FROM graded_history").fetchone() == (0,)
        await _digest_and_queries(_config(corpus_backends, state), store)
    finally:
        store.close()
    with sqlite3.connect(state) as connection:
        assert connection.execute("SELECT count(*) FROM graded_history").fetchone() == (2,)


def test_a_changed_graded_policy_does_not_read_old_findings() -> None:
    """The store's key follows the graded checks' settings, and ignores a diagnostic check's."""
    default = Policy()
    stricter = replace(default, error_lines=ErrorLinesPolicy(warn_lines=10))
    assert policy_fingerprint(default) == policy_fingerprint(Policy())
    assert policy_fingerprint(stricter) != policy_fingerprint(default)
    quieter_diagnosis = replace(default, log_storms=replace(default.log_storms, budget_per_minute=1))
    assert policy_fingerprint(quieter_diagnosis) == policy_fingerprint(default)


async def test_unusable_state_file_costs_the_cache_not_the_digest(
    corpus_backends: EmbeddedBackends, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A state file that is not SQLite is logged and skipped: the digest is computed from the backends as before."""
    state = tmp_path / "state.sqlite"
    state.write_bytes(b"this is not a database" * 100)
    config = _config(corpus_backends, state)
    with caplog.at_level(logging.WARNING, logger="digest.app.engine"):
        store = open_history_store(config.settings)
    assert store is None
    assert "trends will query every past day" in caplog.text
    payload, _, _ = await _digest_and_queries(config, store)
    assert payload["trends"]


async def test_store_failing_mid_digest_falls_back_to_the_backends(
    corpus_backends: EmbeddedBackends, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store closed under the digest (disk gone) is abandoned with a warning; the digest is still complete."""
    config = _config(corpus_backends, tmp_path / "state.sqlite")
    store = HistoryStore(tmp_path / "state.sqlite")
    store.close()
    with caplog.at_level(logging.WARNING, logger="digest.pipeline.trends"):
        payload, _, _ = await _digest_and_queries(config, store)
    assert "trend history store disabled" in caplog.text
    expected, _, _ = await _digest_and_queries(config, None)
    assert payload == expected

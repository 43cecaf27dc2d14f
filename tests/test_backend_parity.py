"""Parity: every corpus day graded the same on the four backend pairs the digest supports.

The reference is VictoriaMetrics + VictoriaLogs (the pair the goldens are reviewed on). The same days are loaded into
a real Prometheus 2.42 (backfilled with promtool) and a real Loki 3.5.12 (pushed as Promtail would ship them), and the
graded digest — status, score, every check's status, penalty, value, summary, offenders, evidence, coverage, the
explanations and trends — must be identical on Prometheus + VictoriaLogs, VictoriaMetrics + Loki and
Prometheus + Loki. Only what names the backend itself may differ: the "Where to look" hints quote the backend's own
query language. Nothing else is normalised, and never a number.

Each pair's days are graded together, as `digest replay` grades them (`digest.app.replay.replay`): the days share
their history, so a window that is one day's digest and another's trend day is queried once per pair instead of once
per day that reads it (on Loki the trend days were three quarters of the module's time), and each day is compared
with the day before only (the goldens read the default seven days). Each day is still compared on its own. The two
Loki pairs ask the same log questions of the same corpus Loki, which answers the second time from its results cache
(`tests/conftest.py`, `LOKI_RESULTS_CACHE`).

What the errors said (the error signatures, never graded) is compared apart: equal on the VictoriaLogs pairs; on the
Loki pairs, which cannot group lines by message shape, a note saying so wherever the reference names signatures.
"""

from __future__ import annotations

import asyncio
import io
import json
from datetime import date
from typing import Any

import pytest

from digest.app.engine import Config
from digest.app.replay import replay
from digest.app.settings import load_settings
from digest.output.render import to_json
from digest.pipeline.policy import Policy, TrendsPolicy
from digest.testbed.corpus import DAYS
from digest.testbed.embedded import EmbeddedBackends
from digest.testbed.loki_server import LokiServer
from digest.testbed.prometheus_server import PrometheusServer

PAIRS = ("prometheus+victorialogs", "victoriametrics+loki", "prometheus+loki")
REFERENCE = "victoriametrics+victorialogs"
# Per pair, every corpus day's (backend-neutral payload, signatures): replayed once per worker process.
_GRADED: dict[str, dict[date, tuple[dict[str, Any], dict[str, Any]]]] = {}


def _config(metrics_url: str, logs: dict[str, str]) -> Config:
    settings = load_settings(
        vm_url=metrics_url, cluster="homelab", timezone="UTC", policy_file=None, query_timeout=120.0, **logs
    )
    # The trends compared with the day before only: the trend code is the same whatever the number of days (the
    # goldens read the default seven on VictoriaMetrics + VictoriaLogs), and seven days before each of twelve scattered
    # corpus days are some seventy empty days, 56 s of the suite on Loki alone (measured 2026-12-07: 153 s, 97 s
    # without trends).
    return Config(settings=settings, policy=Policy(trends=TrendsPolicy(days=1)))


NOVELTY = "(novelty)"


def _graded(
    pair: str, corpus_backends: EmbeddedBackends, prometheus: PrometheusServer, loki: LokiServer
) -> dict[date, tuple[dict[str, Any], dict[str, Any]]]:
    """Every corpus day on ``pair``, replayed together: the backend-neutral payload, and the signatures apart."""
    if pair not in _GRADED:
        metrics_name, logs_name = pair.split("+")
        metrics_url = prometheus.url if metrics_name == "prometheus" else corpus_backends.metrics.url
        logs = {"loki_url": loki.url} if logs_name == "loki" else {"vl_url": corpus_backends.logs.url}
        days = sorted(DAYS)
        # Two days at once, as `digest replay` does by default; the sources' bound caps the queries in flight.
        digests = asyncio.run(replay(_config(metrics_url, logs), days, "summary", 2, io.StringIO(), io.StringIO()))
        _GRADED[pair] = {day: _backend_neutral(to_json(digest)) for day, digest in zip(days, digests, strict=True)}
    return _GRADED[pair]


def _backend_neutral(payload: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The payload without the hints, which quote the backend's own query language (LogsQL, LogQL), nor signatures.

    The signatures (and what is new among them) are kept apart, under each check's name and under ``novelty``.
    """
    copied = json.loads(json.dumps(payload))
    said = {}
    for check in copied["checks"]:
        check.pop("hint", None)
        said[check["name"]] = (check.pop("signatures"), check.pop("signatures_note"))
    said[NOVELTY] = (copied.pop("novelty"), None)
    return dict(copied), said


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("day", sorted(DAYS), ids=str)
def test_every_pair_grades_the_day_like_the_reference(
    day: date,
    pair: str,
    corpus_backends: EmbeddedBackends,
    prometheus_corpus: PrometheusServer,
    loki_corpus: LokiServer,
) -> None:
    """The day's graded digest on this backend pair equals VictoriaMetrics + VictoriaLogs', field for field."""
    expected, expected_said = _graded(REFERENCE, corpus_backends, prometheus_corpus, loki_corpus)[day]
    graded, said = _graded(pair, corpus_backends, prometheus_corpus, loki_corpus)[day]
    if pair.endswith("+loki"):
        # The test Loki runs no pattern ingester (and a backfilled day is one it could never hold): no signature, so
        # nothing new or gone, never every signature "new" for want of a history.
        assert said.pop(NOVELTY) == (None, None)
        for name, (signatures, _) in expected_said.items():
            if name == NOVELTY:
                continue
            assert said[name][0] == []
            if signatures:
                assert "not available on this backend: Loki's patterns API answers 404" in (said[name][1] or ""), name
    else:
        assert said == expected_said
    # Every differing check at once, with what it said, so that a failure names its check and its reason.
    assert [check["name"] for check in graded["checks"]] == [check["name"] for check in expected["checks"]]
    differing = [
        (mine["name"], mine["status"], mine["summary"], mine["error"])
        for mine, theirs in zip(graded["checks"], expected["checks"], strict=True)
        if mine != theirs
    ]
    assert differing == []
    assert graded == expected

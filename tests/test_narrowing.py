"""Cheap question first: the restart and memory subqueries narrowed to a few containers answer what the full ones do.

Also what that relies on: values from the cluster or the policy written into queries as exact literals, identical
queries coalesced by the sources. Real VictoriaMetrics and VictoriaLogs for the answers; a recording loopback server
for what the sources send.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from digest.backends.http import Endpoint, tls_context
from digest.backends.prometheus import PrometheusSource
from digest.backends.victorialogs import VictoriaLogsSource
from digest.checks.contract import Sample, Sources, Status, Window
from digest.checks.error_lines import ErrorLinesCheck, ErrorLinesPolicy
from digest.checks.memory_pressure import MemoryPressureCheck, MemoryPressurePolicy
from digest.checks.oom_kills import OomKillsCheck, OomKillsPolicy
from digest.checks.promql import MAX_NARROWED, any_of, container_matchers, quote, regex_literal, with_matchers
from digest.checks.restarted import restarted_query
from digest.checks.restarts import RestartsCheck, RestartsPolicy
from digest.testbed.corpus.model import Series
from digest.testbed.embedded import EmbeddedBackends
from tests.misbehaving_server import Behaviour, recording_server

SCRAPE_S = 30
GIB = 1024**3
KSM = {"job": "kube-state-metrics"}
# Pod names full of RE2 metacharacters and PromQL quoting: each must be matched literally by the narrowed query.
HOSTILE_PODS = ("web.1", "api+v2-0", "[cache]-1", 'quote"pod\\x', "star*(a|b)")


def _grid(start: datetime, end: datetime) -> list[int]:
    return list(range(int(start.timestamp()), int(end.timestamp()) + 1, SCRAPE_S))


def _series(name: str, labels: dict[str, str], times: Sequence[int], values: Sequence[float]) -> Series:
    return Series(labels={"__name__": name, **labels}, timestamps_ms=[t * 1000 for t in times], values=list(values))


def _window(start: datetime) -> Window:
    return Window(start=start, end=start + timedelta(hours=1), zone=ZoneInfo("UTC"), label="1h")


def _sources(backends: EmbeddedBackends) -> Sources:
    return Sources(
        metrics=PrometheusSource(Endpoint(name="VictoriaMetrics", url=backends.metrics.url, timeout_seconds=20.0)),
        logs=VictoriaLogsSource(Endpoint(name="VictoriaLogs", url=backends.logs.url, timeout_seconds=20.0)),
    )


async def _close(sources: Sources) -> None:
    for source in (sources.metrics, sources.logs):
        if isinstance(source, PrometheusSource | VictoriaLogsSource):
            await source.aclose()


def test_regex_literal_escapes_re2_metacharacters_only() -> None:
    """Metacharacters get a backslash, everything else (spaces, dashes, quotes) stays as RE2 accepts it."""
    assert regex_literal("a.b+c*(d|e)[f]{g}^h$i?j\\k") == "a\\.b\\+c\\*\\(d\\|e\\)\\[f\\]\\{g\\}\\^h\\$i\\?j\\\\k"
    assert regex_literal("my pod-1 'x'") == "my pod-1 'x'"
    assert quote('say "hi"\\') == 'say \\"hi\\"\\\\'
    assert any_of(["b", "a.1", "b"]) == "a\\\\.1|b"


def test_matchers_cover_every_container_and_extend_selectors() -> None:
    """The cross-product matchers name every namespace, pod and container; selectors gain them inside braces."""
    matchers = container_matchers([("ns-a", "p1", "app"), ("ns-b", "p2", "side")])
    assert matchers == 'namespace=~"ns-a|ns-b", pod=~"p1|p2", container=~"app|side"'
    assert with_matchers('m{a="b"}', 'c="d"') == 'm{a="b", c="d"}'
    assert with_matchers("m", 'c="d"') == 'm{c="d"}'
    assert with_matchers("m{}", 'c="d"') == 'm{c="d"}'
    assert with_matchers('m{a="b"}', "") == 'm{a="b"}'
    with pytest.raises(ValueError, match="at least one"):
        container_matchers([])


async def test_restart_queries_narrowed_to_hostile_pod_names_count_every_restart(
    own_backends: EmbeddedBackends,
) -> None:
    """Restarts and OOM kills of pods named with metacharacters are all found, exactly as the full queries find them."""
    window = _window(datetime(2025, 5, 6, 10, tzinfo=UTC))
    grid = _grid(window.start - timedelta(minutes=30), window.end + timedelta(minutes=5))
    restart_at = window.start.timestamp() + 20 * 60
    series = [_series("up", KSM, grid, [1.0] * len(grid))]
    for index, pod in enumerate(HOSTILE_PODS):
        labels = {**KSM, "namespace": "shop", "pod": pod, "container": "app"}
        # Pod k restarts k + 1 times, once a minute from 10:20; the calm pod never does.
        values = [float(sum(1 for step in range(index + 1) if t >= restart_at + 60 * step)) for t in grid]
        series.append(_series("kube_pod_container_status_restarts_total", labels, grid, values))
        reason = "OOMKilled" if index == 0 else "Error"
        after = [t for t in grid if t >= restart_at]
        series.append(
            _series(
                "kube_pod_container_status_last_terminated_reason",
                {**labels, "reason": reason},
                after,
                [1.0] * len(after),
            )
        )
    calm = {**KSM, "namespace": "shop", "pod": "web-1", "container": "app"}
    series.append(_series("kube_pod_container_status_restarts_total", calm, grid, [4.0] * len(grid)))
    own_backends.import_series(item.to_import_line() for item in series)
    own_backends.wait_for_series("kube_pod_container_status_restarts_total", window.end, len(HOSTILE_PODS) + 1)

    sources = _sources(own_backends)
    try:
        gate = await sources.metrics.instant(restarted_query(window), window.end)
        assert sorted(sample.labels["pod"] for sample in gate) == sorted(HOSTILE_PODS)

        restarts_check = RestartsCheck(RestartsPolicy())
        full = await sources.metrics.instant(restarts_check.queries(window)["restarts"], window.end)
        finding = await restarts_check(sources, window)
        counted = {offender.labels["pod"]: round(offender.fact("restarts") or 0) for offender in finding.offenders}
        expected = {pod: index + 1 for index, pod in enumerate(HOSTILE_PODS)}
        top = RestartsPolicy().top
        assert counted == dict(sorted(expected.items(), key=lambda item: (-item[1], item[0]))[:top])
        assert {sample.labels["pod"]: round(sample.value) for sample in full} == expected
        assert finding.value == sum(expected.values())

        oom = await OomKillsCheck(OomKillsPolicy())(sources, window)
        assert [(offender.labels["pod"], offender.value) for offender in oom.offenders] == [(HOSTILE_PODS[0], 1)]
    finally:
        await _close(sources)


async def test_memory_pressure_sees_a_container_whose_limit_was_lowered(own_backends: EmbeddedBackends) -> None:
    """A limit cut from 8 to 4 GiB under a 3.9 GiB working set is CRIT, though its peak over the top limit is 49 %."""
    window = _window(datetime(2025, 5, 7, 10, tzinfo=UTC))
    grid = _grid(window.start - timedelta(minutes=30), window.end + timedelta(minutes=5))
    cut = window.start.timestamp() + 20 * 60
    labels = {"namespace": "feeds", "pod": "agg-0", "container": "backend"}
    cadvisor = {**labels, "job": "kubelet", "image": "agg:1", "id": "/kubepods/agg"}
    series = [
        _series("up", KSM, grid, [1.0] * len(grid)),
        _series("container_memory_working_set_bytes", cadvisor, grid, [3.9 * GIB] * len(grid)),
        _series(
            "kube_pod_container_resource_limits",
            {**KSM, **labels, "resource": "memory", "unit": "byte"},
            grid,
            [8.0 * GIB if t < cut else 4.0 * GIB for t in grid],
        ),
    ]
    own_backends.import_series(item.to_import_line() for item in series)
    own_backends.wait_for_series("kube_pod_container_resource_limits", window.end, 1)

    sources = _sources(own_backends)
    try:
        finding = await MemoryPressureCheck(MemoryPressurePolicy())(sources, window)
    finally:
        await _close(sources)
    assert finding.status is Status.CRIT
    (offender,) = finding.offenders
    assert offender.labels["pod"] == "agg-0"
    assert offender.fact("peak_ratio") == pytest.approx(3.9 / 8)  # the peak is over the window's largest limit
    assert offender.value == pytest.approx(0.975, abs=0.001)


class _RecordingMetrics:
    """A metrics source that answers the restart gate with ``gated`` containers and records every query."""

    def __init__(self, gated: int) -> None:
        self.gated = gated
        self.queries: list[str] = []

    async def instant(self, query: str, at: datetime) -> list[Sample]:
        self.queries.append(query)
        if query.startswith("max by (job)"):
            return [Sample(labels={"job": "kube-state-metrics"}, value=1.0)]
        if "changes(" in query:
            return [
                Sample(labels={"namespace": "ns", "pod": f"pod-{index}", "container": "app"}, value=1.0)
                for index in range(self.gated)
            ]
        return []

    async def range(self, query: str, start: datetime, end: datetime, step_seconds: int) -> list[object]:
        raise AssertionError("no range query expected")


@pytest.mark.parametrize(("gated", "narrowed"), [(0, None), (3, True), (MAX_NARROWED + 1, False)])
async def test_restart_subqueries_are_skipped_narrowed_or_sent_whole(gated: int, narrowed: bool | None) -> None:
    """No restart: no subquery; a few: narrowed to them; more than MAX_NARROWED: the full query, never a huge one."""
    metrics = _RecordingMetrics(gated)
    window = _window(datetime(2025, 5, 8, 10, tzinfo=UTC))
    sources = Sources(metrics=metrics, logs=None)  # type: ignore[arg-type]  # the restart checks never ask for logs
    await RestartsCheck(RestartsPolicy())(sources, window)
    await OomKillsCheck(OomKillsPolicy())(sources, window)
    # The narrowed subqueries compare a counter with itself a minute before (the failed-probe count and the kernel's
    # OOM counter do too, whole: they are per node or per probe, not per restarted container).
    subqueries = [
        query
        for query in metrics.queries
        if "offset 1m" in query and "prober_probe_total" not in query and "node_vmstat_oom_kill" not in query
    ]
    if narrowed is None:
        assert subqueries == []
        return
    # restarts, reasons, kills; and the init containers' restarts and reasons (their own gate answered the same)
    assert len(subqueries) == 5
    assert sum("kube_pod_init_container_status_restarts_total" in query for query in subqueries) == 2
    for query in subqueries:
        assert ('pod=~"' in query) is narrowed


async def test_identical_queries_in_flight_are_sent_once_and_survive_a_cancelled_caller() -> None:
    """Two checks asking the same thing at once cost one request; one giving up does not fail the other."""
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
    with recording_server(Behaviour(body=body, delay_seconds=0.3)) as served:
        source = PrometheusSource(Endpoint(name="VictoriaMetrics", url=served.url, timeout_seconds=5.0))
        at = datetime(2025, 5, 9, tzinfo=UTC)
        try:
            impatient = asyncio.ensure_future(source.instant("up", at))
            patient = asyncio.ensure_future(source.instant("up", at))
            other = asyncio.ensure_future(source.instant("up == 1", at))
            await asyncio.sleep(0.05)
            impatient.cancel()
            assert await patient == []
            assert await other == []
            with pytest.raises(asyncio.CancelledError):
                await impatient
            assert await source.instant("up", at) == []  # once answered, it is asked again: no result cache
        finally:
            await source.aclose()
    assert len(served.requests) == 3
    assert source.queries_sent == 3


def test_plain_http_backends_load_no_certificate_bundle_and_fail_closed() -> None:
    """http:// only: an empty context that still verifies; any https:// URL: the CA bundle."""
    plain = tls_context(["http://vm:8428", "http://vl:9428"])
    assert plain.verify_mode is ssl.CERT_REQUIRED
    assert plain.check_hostname
    assert plain.cert_store_stats()["x509_ca"] == 0
    secure = tls_context(["http://vm:8428", "https://logs.example:9428"])
    assert secure.verify_mode is ssl.CERT_REQUIRED
    assert secure.cert_store_stats()["x509_ca"] > 0


async def test_error_levels_with_spaces_and_dots_are_matched_literally(own_backends: EmbeddedBackends) -> None:
    """Policy levels "fatal error" and "err.x" reach VictoriaLogs as exact literals: "errXx" is not counted."""
    levels = {"fatal error": 3, "err.x": 2, "errXx": 5, "info": 7}
    records = [
        json.dumps(
            {
                "timestamp": f"2026-03-05T10:00:{index:02d}Z",
                "message": "something happened",
                "level": level,
                "stream": "stdout",
                "kubernetes": {"pod_namespace": "shop", "pod_name": "web-0", "container_name": "app"},
            }
        )
        for index, level in enumerate(level for level, count in levels.items() for _ in range(count))
    ]
    own_backends.ingest_logs([("\n".join(records) + "\n").encode()])
    start = datetime(2026, 3, 5, 10, tzinfo=UTC)
    own_backends.wait_for_logs(start, start + timedelta(hours=1), sum(levels.values()))
    check = ErrorLinesCheck(ErrorLinesPolicy(error_levels=("fatal error", "err.x"), message_word="nothing-matches"))
    sources = _sources(own_backends)
    try:
        finding = await check(sources, _window(start))
    finally:
        await _close(sources)
    assert finding.value == 5
    assert finding.offenders[0].fact("total_lines") == 17

"""The seven diagnostic checks on real backends: they explain each incident day and stay quiet on calm days.

They are UNKNOWN — never OK — when they cannot see. Expected numbers come from the corpus's own facts
(testbed/corpus/README.md), never from the checks' output.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from digest.backends.http import Endpoint
from digest.backends.prometheus import PrometheusSource
from digest.backends.victorialogs import VictoriaLogsSource
from digest.checks.alerts import AlertsCheck, AlertsPolicy
from digest.checks.contract import Check, Finding, Quantity, Sources, Status, Unit, Window
from digest.checks.cpu_throttling import CpuThrottlingCheck, CpuThrottlingPolicy
from digest.checks.deployments import DeploymentsCheck, DeploymentsPolicy
from digest.checks.empty_endpoints import EmptyEndpointsCheck, EmptyEndpointsPolicy
from digest.checks.log_storms import LogStormsCheck, LogStormsPolicy
from digest.checks.memory_pressure import MemoryPressureCheck, MemoryPressurePolicy
from digest.checks.readiness import ReadinessCheck, ReadinessPolicy
from digest.checks.restarts import RestartsCheck, RestartsPolicy
from digest.pipeline.window import day_window
from digest.testbed.corpus import DAYS
from digest.testbed.corpus.model import Series
from digest.testbed.embedded import EmbeddedBackends, free_port

UTC_ZONE = ZoneInfo("UTC")
CHECKS: tuple[Check, ...] = (
    MemoryPressureCheck(MemoryPressurePolicy()),
    CpuThrottlingCheck(CpuThrottlingPolicy()),
    RestartsCheck(RestartsPolicy()),
    ReadinessCheck(ReadinessPolicy()),
    EmptyEndpointsCheck(EmptyEndpointsPolicy()),
    DeploymentsCheck(DeploymentsPolicy()),
    LogStormsCheck(LogStormsPolicy()),
    AlertsCheck(AlertsPolicy()),
)
SCRAPE_S = 30


def _sources(metrics_url: str, logs_url: str) -> Sources:
    metrics = PrometheusSource(Endpoint(name="VictoriaMetrics", url=metrics_url, timeout_seconds=20.0))
    logs = VictoriaLogsSource(Endpoint(name="VictoriaLogs", url=logs_url, timeout_seconds=20.0))
    return Sources(metrics=metrics, logs=logs)


async def _close(sources: Sources) -> None:
    for source in (sources.metrics, sources.logs):
        if isinstance(source, PrometheusSource | VictoriaLogsSource):
            await source.aclose()


async def _run(backends: EmbeddedBackends, window: Window, checks: Iterable[Check] = CHECKS) -> dict[str, Finding]:
    sources = _sources(backends.metrics.url, backends.logs.url)
    try:
        return {check.name: await check(sources, window) for check in checks}
    finally:
        await _close(sources)


async def _day(backends: EmbeddedBackends, day: date, *checks: Check) -> dict[str, Finding]:
    return await _run(backends, day_window(day, UTC_ZONE), checks or CHECKS)


def _not_ready(day: date) -> dict[str, float]:
    """Seconds each not-ready pod of the day's series had Ready=false, one 30 s scrape per step in (start, end]."""
    window = day_window(day, UTC_ZONE)
    start, end = window.start.timestamp(), window.end.timestamp()
    out: dict[str, float] = {}
    for series in DAYS[day].series():
        labels = series.labels
        if labels["__name__"] != "kube_pod_status_ready" or labels.get("condition") != "true":
            continue
        steps = sum(
            1 for t, v in zip(series.timestamps_ms, series.values, strict=True) if start < t / 1000 <= end and v == 0
        )
        if steps:
            out[labels["pod"]] = float(steps * SCRAPE_S)
    return out


def _facts(day: date) -> dict[str, Any]:
    # The facts are JSON-shaped values of several types; the assertions below say which.
    return dict(DAYS[day].expected.facts)


# Calm days ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("day", [date(2026, 7, 19), date(2026, 8, 17)], ids=str)
async def test_calm_days_are_ok_on_every_diagnostic_check(corpus_backends: EmbeddedBackends, day: date) -> None:
    """A calm day (and 08-17's 35,000-line/min access-log replay) is OK on all seven checks: no false positive."""
    findings = await _day(corpus_backends, day)
    assert {name: finding.status for name, finding in findings.items()} == {name: Status.OK for name in findings}
    assert all(finding.error is None and not finding.offenders for finding in findings.values())


@pytest.mark.parametrize("day", sorted(DAYS), ids=str)
async def test_diagnostic_checks_cost_nothing_by_default_and_see_every_corpus_day(
    corpus_backends: EmbeddedBackends, day: date
) -> None:
    """Default penalties are 0 (the seed rule grades), and on a corpus day no diagnostic check is blind."""
    findings = await _day(corpus_backends, day)
    assert {finding.penalty for finding in findings.values()} == {0}
    assert [name for name, finding in findings.items() if finding.status is Status.UNKNOWN] == []


# 2026-07-20, reconnect storm (seed 001) -----------------------------------------------------------------------------


async def test_storm_day_memory_pressure_precedes_the_oom(corpus_backends: EmbeddedBackends) -> None:
    """07-20: feeds/feed-aggregator's backend sat above 95 % of its 8 GiB limit before the 06:15 OOM, peak 99.6 %."""
    day = date(2026, 7, 20)
    finding = (await _day(corpus_backends, day, MemoryPressureCheck(MemoryPressurePolicy())))["memory_pressure"]
    assert finding.status is Status.CRIT
    offender = finding.offenders[0]
    worst = offender.labels
    assert (worst["namespace"], worst["container"]) == ("feeds", "backend")
    oom = next(item for item in _facts(day)["terminations"] if item["reason"] == "OOMKilled")
    assert worst["pod"] == oom["pod"]
    assert worst["since"] < "06:15"  # HH:MM in UTC: the pressure came before the kill
    peak, minutes_above = offender.facts["peak_ratio"], offender.facts["minutes_above"]
    assert (peak.unit, minutes_above.unit) == (Unit.RATIO, Unit.MINUTES)
    # The corpus states the peak as a percent with one decimal (99.6).
    assert round(100 * peak.value, 1) == _facts(day)["memory_peak_percent.feeds/feed-aggregator"]
    assert minutes_above.value >= 15


async def test_storm_day_restarts_carry_both_reasons(corpus_backends: EmbeddedBackends) -> None:
    """07-20: two restarts of the backend, one OOMKilled and one Error (the liveness kill), not two OOMs."""
    day = date(2026, 7, 20)
    finding = (await _day(corpus_backends, day, RestartsCheck(RestartsPolicy())))["restarts"]
    facts = _facts(day)
    assert finding.status is Status.WARN
    assert finding.value == facts["restarts"] == 2
    (offender,) = finding.offenders
    assert offender.fact("restarts") == 2
    assert set(offender.labels["reasons"].split(", ")) == {"OOMKilled", "Error"}
    liveness = facts["probe_failures.Liveness.feeds/feed-aggregator"]
    assert f"failed liveness probes: feeds/{offender.labels['pod']}/backend {liveness}" in finding.evidence


async def test_storm_day_log_storm_is_far_above_budget(corpus_backends: EmbeddedBackends) -> None:
    """07-20: feeds/feed-aggregator's peak minute is more than 10× the 1,000 lines/min per-pod budget: CRIT."""
    finding = (await _day(corpus_backends, date(2026, 7, 20), LogStormsCheck(LogStormsPolicy())))["log_storms"]
    assert finding.status is Status.CRIT
    worst = finding.offenders[0]
    assert (worst.labels["namespace"], worst.labels["workload"]) == ("feeds", "feed-aggregator")
    assert worst.value > 10 * 1_000
    assert worst.facts["lines"].unit is Unit.COUNT
    assert worst.facts["lines"].value > 4_539_734  # every error line plus the (scaled) warnings
    assert worst.fact("peak_per_minute") == worst.value
    assert "× the 1,000/min budget" in finding.summary


async def test_storm_day_alerts_say_nothing_fired_because_vmalert_was_up(corpus_backends: EmbeddedBackends) -> None:
    """07-20: no ALERTS, but the corpus has vmalert's up series: "no alert fired" is observed, not guessed."""
    finding = (await _day(corpus_backends, date(2026, 7, 20), AlertsCheck(AlertsPolicy())))["alerts"]
    assert _facts(date(2026, 7, 20))["alerts_fired"] == 0
    assert finding.status is Status.OK
    assert finding.summary == "no alert fired (vmalert up in the window)"


# 2026-08-12, readiness spiral (seed 000) ----------------------------------------------------------------------------


async def test_spiral_day_explains_throttling_readiness_and_empty_service(corpus_backends: EmbeddedBackends) -> None:
    """08-12: shop/api throttled > 50 % under 500m, 1,295 failed readiness probes, api empty 7 times in 60 scrapes."""
    day = date(2026, 8, 12)
    facts = _facts(day)
    findings = await _day(corpus_backends, day)

    cpu = findings["cpu_throttling"]
    assert cpu.status is Status.WARN
    assert {(item.labels["namespace"], item.labels["container"]) for item in cpu.offenders} == {("shop", "api")}
    assert len(cpu.offenders) == 4
    assert all(item.facts["worst_5m_ratio"].value > 0.5 for item in cpu.offenders)
    assert all(item.facts["cpu_limit"] == Quantity(0.5, Unit.CORES) for item in cpu.offenders)
    assert all(item.facts["throttled_ratio"].unit is Unit.RATIO for item in cpu.offenders)
    mean = sum(item.facts["throttled_ratio"].value for item in cpu.offenders) / 4
    assert mean == pytest.approx(float(facts["cpu_throttled_ratio.shop/api"]), abs=0.01)

    restarts = findings["restarts"]
    assert restarts.status is Status.OK
    assert restarts.value == facts["restarts"] == 0

    readiness = findings["readiness"]
    assert readiness.status is Status.CRIT
    assert {item.labels["pod"].rsplit("-", 2)[0] for item in readiness.offenders} == {"api"}
    assert all(item.fact("restarts") == 0 and item.labels["service"] == "api" for item in readiness.offenders)
    assert (
        sum(item.fact("readiness_failures") or 0 for item in readiness.offenders)
        == (facts["probe_failures.Readiness.shop/api"])
    )
    assert {item.labels["pod"]: item.fact("not_ready_seconds") for item in readiness.offenders} == _not_ready(day)
    assert "prober_probe_total" in readiness.observed

    empty = findings["empty_endpoints"]
    windows: Sequence[dict[str, Any]] = facts["endpoints_empty_windows.shop/api"]
    (service,) = empty.offenders
    assert (service.labels["namespace"], service.labels["service"]) == ("shop", "api")
    assert service.fact("empty_seconds") == SCRAPE_S * facts["endpoints_empty_scrapes.shop/api"]
    assert service.fact("episodes") == len(windows) == 7
    assert [span.seconds for span in service.spans] == [SCRAPE_S * w["scrapes"] for w in windows]
    assert empty.status is Status.CRIT  # 30 min in all, beyond the 5-minute mark

    deployments = findings["deployments"]
    (deployment,) = deployments.offenders
    assert (deployment.labels["namespace"], deployment.labels["deployment"]) == ("shop", "api")
    assert deployment.fact("unavailable_seconds") == SCRAPE_S * facts["replicas_unavailable_scrapes.shop/api"]
    assert deployment.fact("max_unavailable_replicas") == facts["replicas_unavailable_max.shop/api"]
    assert deployment.fact("rollouts") == 0  # no ReplicaSet created that day: unavailable replicas, not a rollout
    assert "with no rollout" in deployments.summary


# 2026-09-08, Recreate rollout (seed 003) ----------------------------------------------------------------------------


async def test_recreate_day_names_status_page_with_three_scrape_bounded_episodes(
    corpus_backends: EmbeddedBackends,
) -> None:
    """09-08: status-page empty for 1, 4 and 2 scrapes (15 s, 101 s, 58 s), its Deployment unavailable at those 7."""
    day = date(2026, 9, 8)
    facts = _facts(day)
    findings = await _day(
        corpus_backends, day, EmptyEndpointsCheck(EmptyEndpointsPolicy()), DeploymentsCheck(DeploymentsPolicy())
    )

    empty = findings["empty_endpoints"]
    windows: Sequence[dict[str, Any]] = facts["endpoints_empty_windows.shop/status-page"]
    assert [w["scrapes"] for w in windows] == [1, 4, 2]
    (service,) = empty.offenders
    assert (service.labels["namespace"], service.labels["service"]) == ("shop", "status-page")
    assert service.fact("episodes") == 3
    assert [span.seconds for span in service.spans] == [30, 120, 60]
    assert service.fact("longest_seconds") == 120
    assert service.fact("empty_seconds") == 210
    assert empty.status is Status.WARN  # 3.5 min in all, under the 5-minute mark
    assert "10:12 30 s, 14:47 2 min, 19:23 1 min" in empty.evidence[0]

    deployments = findings["deployments"]
    assert deployments.status is Status.WARN
    (deployment,) = deployments.offenders
    assert (deployment.labels["namespace"], deployment.labels["deployment"]) == ("shop", "status-page")
    assert deployment.fact("unavailable_seconds") == SCRAPE_S * facts["replicas_unavailable_scrapes.shop/status-page"]
    assert deployment.fact("max_unavailable_replicas") == facts["replicas_unavailable_max.shop/status-page"]
    assert deployment.labels["strategy"] == facts["deployment_strategy.shop/status-page"] == "Recreate"
    assert deployment.fact("rollouts") == facts["rollouts.shop/status-page"] == 3
    rollouts = [event for event in deployments.events if event.kind == "rollout"]
    assert [event.labels["strategy"] for event in rollouts] == ["Recreate"] * 3
    assert "during 3 rollout(s)" in deployments.summary


# 2026-10-05, conntrack near full ------------------------------------------------------------------------------------


async def test_conntrack_day_reports_the_alert_that_fired(corpus_backends: EmbeddedBackends) -> None:
    """10-05: ConntrackNearFull (warning, group platform) fired once, from 19:27 for 31 minutes, as the corpus says."""
    day = date(2026, 10, 5)
    facts = _facts(day)
    finding = (await _day(corpus_backends, day, AlertsCheck(AlertsPolicy())))["alerts"]
    assert finding.status is Status.WARN
    assert finding.value == facts["alerts_fired"] == 1
    (alert,) = finding.offenders
    assert alert.labels["alertname"] == "ConntrackNearFull"
    assert alert.labels["severity"] == "warning"
    assert alert.labels["alertgroup"] == "platform"
    assert alert.facts["firing_minutes"] == Quantity(facts["alert_firing_minutes.ConntrackNearFull"], Unit.MINUTES)
    (first,) = facts["alert_firing_from.ConntrackNearFull"]
    assert alert.labels["first_firing"] == first[11:16]


# Could not see ------------------------------------------------------------------------------------------------------


async def test_day_without_any_data_is_unknown_on_every_check(corpus_backends: EmbeddedBackends) -> None:
    """2026-06-01 holds nothing: every diagnostic check is UNKNOWN with an error, none says OK from nothing."""
    findings = await _day(corpus_backends, date(2026, 6, 1))
    assert {name: finding.status for name, finding in findings.items()} == {name: Status.UNKNOWN for name in findings}
    assert all(finding.error for finding in findings.values())
    assert findings["alerts"].error == "alerting not observable: no ALERTS series and no vmalert/Prometheus up series"


async def test_refused_connections_are_unknown_with_the_source_error() -> None:
    """Backends that refuse connections: every check UNKNOWN, its error the SourceError's text."""
    sources = _sources(f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}")
    window = day_window(date(2026, 7, 20), UTC_ZONE)
    try:
        findings = {check.name: await check(sources, window) for check in CHECKS}
    finally:
        await _close(sources)
    for name, finding in findings.items():
        assert finding.status is Status.UNKNOWN, name
        backend = "VictoriaLogs" if name == "log_storms" else "VictoriaMetrics"
        assert finding.error is not None
        assert finding.error.startswith(f"{backend} unreachable: cannot reach http://127.0.0.1:"), name
        assert "did not answer" in finding.summary, name


# Fallbacks and presence, on small synthetic series ------------------------------------------------------------------


def _grid(start: datetime, end: datetime) -> list[int]:
    return list(range(int(start.timestamp()), int(end.timestamp()) + 1, SCRAPE_S))


def _series(name: str, labels: dict[str, str], times: Sequence[int], value: float = 1.0) -> Series:
    return Series(
        labels={"__name__": name, **labels}, timestamps_ms=[t * 1000 for t in times], values=[value] * len(times)
    )


def _hour(start: datetime) -> Window:
    return Window(start=start, end=start + timedelta(hours=1), zone=UTC_ZONE, label="1h")


async def test_empty_endpoints_reads_slice_names_and_legacy_endpoints(own_backends: EmbeddedBackends) -> None:
    """Slices join their Service by name (empty only when all are); without EndpointSlices, legacy Endpoints count."""
    sliced = _hour(datetime(2025, 2, 3, 10, tzinfo=UTC))
    legacy = _hour(datetime(2025, 2, 4, 10, tzinfo=UTC))
    ksm = {"job": "kube-state-metrics", "namespace": "b"}
    grid = _grid(sliced.start - timedelta(minutes=10), sliced.end + timedelta(minutes=10))
    gap = {sliced.start.timestamp() + 1800 + offset for offset in (0, 30)}  # 10:30:00 and 10:30:30
    series = [
        _series("kube_endpointslice_info", {**ksm, "endpointslice": "checkout-x7k2p"}, grid),
        _series("kube_endpointslice_info", {**ksm, "endpointslice": "checkout-q9z4w"}, grid),
        _series(
            "kube_endpointslice_endpoints",
            {**ksm, "endpointslice": "checkout-x7k2p", "address": "10.0.0.1", "ready": "true"},
            [t for t in grid if t not in gap],
        ),
        # The second slice lists a ready address at 10:30:30 only: the Service is empty at 10:30:00 alone.
        _series(
            "kube_endpointslice_endpoints",
            {**ksm, "endpointslice": "checkout-q9z4w", "address": "fd00::1", "ready": "true"},
            [int(max(gap))],
        ),
    ]
    old_grid = _grid(legacy.start - timedelta(minutes=10), legacy.end + timedelta(minutes=10))
    outage = {legacy.start.timestamp() + 1200 + offset for offset in (0, 30, 60)}  # 10:20:00 to 10:21:00
    series += [
        _series("kube_endpoint_info", {**ksm, "endpoint": "legacy"}, old_grid),
        _series(
            "kube_endpoint_address",
            {**ksm, "endpoint": "legacy", "ip": "10.0.0.2", "ready": "true"},
            [t for t in old_grid if t not in outage],
        ),
    ]
    own_backends.import_series(item.to_import_line() for item in series)
    own_backends.wait_for_series('{__name__=~"kube_endpoint.*"}', legacy.end, 2)

    check = EmptyEndpointsCheck(EmptyEndpointsPolicy())
    by_name = (await _run(own_backends, sliced, [check]))["empty_endpoints"]
    (service,) = by_name.offenders
    assert service.labels == {"namespace": "b", "service": "checkout"}
    assert (service.fact("empty_seconds"), service.fact("episodes"), service.fact("longest_seconds")) == (30, 1, 30)
    assert by_name.status is Status.WARN

    old = (await _run(own_backends, legacy, [check]))["empty_endpoints"]
    (service,) = old.offenders
    assert (service.labels["service"], service.fact("empty_seconds"), service.fact("episodes")) == ("legacy", 90, 1)
    assert "no EndpointSlice series: read from the legacy Endpoints families" in old.evidence


async def test_presence_tells_absent_exporters_from_healthy_silence(own_backends: EmbeddedBackends) -> None:
    """No limits is OK (memory, CPU n/a), vmalert down is UNKNOWN, and an always-firing Watchdog is no incident."""
    window = _hour(datetime(2025, 3, 1, 10, tzinfo=UTC))
    watchdog_window = _hour(datetime(2025, 3, 2, 10, tzinfo=UTC))
    grid = _grid(window.start - timedelta(minutes=10), window.end + timedelta(minutes=10))
    later = _grid(watchdog_window.start, watchdog_window.end)
    container = {"job": "kubelet", "namespace": "a", "pod": "app-0", "container": "app", "image": "app:1", "id": "/x"}
    series = [
        _series("up", {"job": "kube-state-metrics"}, grid),
        _series("up", {"job": "vmalert"}, grid, value=0.0),
        _series("container_memory_working_set_bytes", container, grid, value=50e6),
        _series(
            "ALERTS",
            {"alertname": "Watchdog", "alertstate": "firing", "severity": "none", "alertgroup": "general"},
            later,
        ),
    ]
    own_backends.import_series(item.to_import_line() for item in series)
    own_backends.wait_for_series("ALERTS", watchdog_window.end, 1)

    checks = (MemoryPressureCheck(MemoryPressurePolicy()), CpuThrottlingCheck(CpuThrottlingPolicy()))
    findings = await _run(own_backends, window, [*checks, AlertsCheck(AlertsPolicy())])
    assert (findings["memory_pressure"].status, findings["memory_pressure"].summary) == (
        Status.OK,
        "no memory limits set: no container can be near one",
    )
    assert (findings["cpu_throttling"].status, findings["cpu_throttling"].value) == (Status.OK, None)
    assert "no container has a CPU limit" in findings["cpu_throttling"].summary
    assert findings["alerts"].status is Status.UNKNOWN
    assert findings["alerts"].error == 'up{job=~".*(vmalert|prometheus).*"} never 1 in the window'

    watchdog = (await _run(own_backends, watchdog_window, [AlertsCheck(AlertsPolicy())]))["alerts"]
    assert (watchdog.status, watchdog.value, watchdog.offenders) == (Status.OK, 0, ())
    assert watchdog.evidence == ["always-firing Watchdog ignored (it shows that alerting works)"]

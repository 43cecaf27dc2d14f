"""readiness, deployments and the measured scrape interval, on small hand-made series in a real VictoriaMetrics.

Each test writes the few series a question needs (at its own date, in a private backend) so that the answer is
known without the corpus: 15 s scrapes give 15 s precision, a rollout needs a ReplicaSet or a generation change,
the strategy is read from kube-state-metrics, and an absent family is "not observable", never "none".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from digest.backends.http import Endpoint
from digest.backends.prometheus import PrometheusSource
from digest.backends.victorialogs import VictoriaLogsSource
from digest.checks.contract import Finding, Sources, Status, Window
from digest.checks.deployments import DeploymentsCheck, DeploymentsPolicy
from digest.checks.empty_endpoints import EmptyEndpointsCheck, EmptyEndpointsPolicy
from digest.checks.readiness import ReadinessCheck, ReadinessPolicy
from digest.testbed.corpus.model import Series
from digest.testbed.embedded import EmbeddedBackends

UTC_ZONE = ZoneInfo("UTC")
KSM = {"job": "kube-state-metrics", "instance": "10.0.0.9:8080"}


def _window(start: datetime, hours: int = 2) -> Window:
    return Window(start=start, end=start + timedelta(hours=hours), zone=UTC_ZONE, label="2h")


def _grid(window: Window, every: int) -> list[int]:
    """Scrape moments from 10 minutes before the window to 10 after, every ``every`` seconds."""
    start, end = int(window.start.timestamp()) - 600, int(window.end.timestamp()) + 600
    return list(range(start, end + 1, every))


def _series(name: str, labels: dict[str, str], times: Sequence[int], value: Callable[[int], float] | float) -> Series:
    values = [value(t) if callable(value) else value for t in times]
    return Series(labels={"__name__": name, **KSM, **labels}, timestamps_ms=[t * 1000 for t in times], values=values)


async def _run(backends: EmbeddedBackends, window: Window, check: object) -> Finding:
    metrics = PrometheusSource(Endpoint(name="VictoriaMetrics", url=backends.metrics.url, timeout_seconds=20.0))
    logs = VictoriaLogsSource(Endpoint(name="VictoriaLogs", url=backends.logs.url, timeout_seconds=20.0))
    try:
        finding: Finding = await check(Sources(metrics=metrics, logs=logs), window)  # type: ignore[operator]
        return finding
    finally:
        await metrics.aclose()
        await logs.aclose()


def _load(backends: EmbeddedBackends, series: Sequence[Series], window: Window) -> None:
    backends.import_series(item.to_import_line() for item in series)
    backends.wait_for_series('up{job="kube-state-metrics"}', window.end, 1)


def _up(window: Window, every: int) -> Series:
    return _series("up", {}, _grid(window, every), 1.0)


async def test_fifteen_second_scrapes_give_fifteen_second_precision(own_backends: EmbeddedBackends) -> None:
    """An EndpointSlice empty for 3 scrapes of 15 s and a pod unready for 9 of them: 45 s and 2 min 15 s, said so."""
    window = _window(datetime(2025, 5, 6, 10, tzinfo=UTC))
    grid = _grid(window, 15)
    t0 = int(window.start.timestamp()) + 1800
    empty = {t0, t0 + 15, t0 + 30}
    unready = set(range(t0 - 45, t0 + 90, 15))
    slice_labels = {"namespace": "web", "endpointslice": "shop-k2x9q"}
    pod = {"namespace": "web", "pod": "shop-6f7d9c8b5-x2x4k", "uid": "u1"}
    series = [
        _up(window, 15),
        _series("kube_endpointslice_info", slice_labels, grid, 1.0),
        _series(
            "kube_endpointslice_endpoints",
            {
                **slice_labels,
                "address": "10.0.0.1",
                "ready": "true",
                "targetref_kind": "Pod",
                "targetref_name": pod["pod"],
            },
            [t for t in grid if t not in empty],
            1.0,
        ),
        _series("kube_pod_status_ready", {**pod, "condition": "true"}, grid, lambda t: 0.0 if t in unready else 1.0),
        _series("kube_pod_container_status_restarts_total", {**pod, "container": "app"}, grid, 0.0),
    ]
    _load(own_backends, series, window)

    endpoints = await _run(own_backends, window, EmptyEndpointsCheck(EmptyEndpointsPolicy()))
    (service,) = endpoints.offenders
    assert service.fact("empty_seconds") == 45
    assert service.fact("resolution_seconds") == 15
    assert "measured every 15 s: each episode's start and end are known to within 15 s" in endpoints.evidence

    readiness = await _run(own_backends, window, ReadinessCheck(ReadinessPolicy()))
    assert readiness.status is Status.WARN
    (offender,) = readiness.offenders
    assert offender.fact("not_ready_seconds") == 135
    assert offender.fact("restarts") == 0
    assert offender.fact("episodes") == 1
    assert "readiness_failures" not in offender.facts  # the prober is not scraped: not measured, not zero
    assert readiness.summary.startswith("web/shop-6f7d9c8b5-x2x4k not ready 2 min 15 s from 10:29 without a restart")
    assert "measured every 15 s: each episode's start and end are known to within 15 s" in readiness.evidence
    assert "prober_probe_total" in readiness.unobserved[0]


async def test_unready_pods_with_no_replicaset_families_are_not_a_rollout(own_backends: EmbeddedBackends) -> None:
    """Four replicas unavailable, no kube_replicaset_* nor generation: "rollouts not observable", no strategy guess."""
    window = _window(datetime(2025, 5, 7, 10, tzinfo=UTC))
    grid = _grid(window, 30)
    t0 = int(window.start.timestamp()) + 1800
    series = [
        _up(window, 30),
        _series(
            "kube_deployment_status_replicas_unavailable",
            {"namespace": "prod", "deployment": "fastapi"},
            grid,
            lambda t: 4.0 if t0 <= t < t0 + 1200 else 0.0,
        ),
    ]
    _load(own_backends, series, window)
    finding = await _run(own_backends, window, DeploymentsCheck(DeploymentsPolicy()))
    assert finding.status is Status.CRIT  # 20 min in a row
    assert finding.summary.startswith("prod/fastapi had up to 4 replicas unavailable for 20 min")
    assert "(rollouts not observable)" in finding.summary
    assert "Recreate" not in " ".join([finding.summary, *finding.evidence])
    assert not finding.events
    assert any(line.startswith("kube_replicaset_created") for line in finding.unobserved)


async def test_rollouts_come_from_replicasets_with_their_strategy(own_backends: EmbeddedBackends) -> None:
    """A ReplicaSet created in the window is a rollout; max_surge present → RollingUpdate, absent → Recreate."""
    window = _window(datetime(2025, 5, 8, 10, tzinfo=UTC))
    grid = _grid(window, 30)
    start = int(window.start.timestamp())
    created = {"status-7d8f9c6b5": start + 1200, "api-5c6d7e8f9": start + 3000}
    owners = {"status-7d8f9c6b5": "status", "api-5c6d7e8f9": "api"}
    series = [_up(window, 30)]
    for deployment in ("status", "api"):
        series.append(
            _series(
                "kube_deployment_status_replicas_unavailable",
                {"namespace": "shop", "deployment": deployment},
                grid,
                (lambda t: 1.0 if start + 1200 <= t < start + 1290 else 0.0) if deployment == "status" else 0.0,
            )
        )
        series.append(
            _series("kube_deployment_metadata_generation", {"namespace": "shop", "deployment": deployment}, grid, 3.0)
        )
    series += [
        _series(
            "kube_deployment_spec_strategy_rollingupdate_max_unavailable",
            {"namespace": "shop", "deployment": "api"},
            grid,
            0.0,
        ),
        _series(
            "kube_deployment_spec_strategy_rollingupdate_max_surge",
            {"namespace": "shop", "deployment": "api"},
            grid,
            1.0,
        ),
    ]
    for replicaset, moment in created.items():
        alive = [t for t in grid if t >= moment]
        labels = {"namespace": "shop", "replicaset": replicaset}
        series += [
            _series("kube_replicaset_created", labels, alive, float(moment)),
            _series(
                "kube_replicaset_owner",
                {**labels, "owner_kind": "Deployment", "owner_name": owners[replicaset], "owner_is_controller": "true"},
                alive,
                1.0,
            ),
            _series("kube_replicaset_spec_replicas", labels, alive, 1.0),
            _series("kube_replicaset_status_ready_replicas", labels, alive, lambda t, m=moment: float(t >= m + 90)),
        ]
    _load(own_backends, series, window)
    finding = await _run(own_backends, window, DeploymentsCheck(DeploymentsPolicy()))
    rollouts = {event.labels["deployment"]: event for event in finding.events if event.kind == "rollout"}
    assert set(rollouts) == {"status", "api"}
    assert rollouts["status"].labels["strategy"] == "Recreate"
    assert rollouts["api"].labels["strategy"] == "RollingUpdate"
    assert rollouts["api"].facts["max_surge_setting"].value == 1
    assert all(event.labels["state"] == "complete" for event in rollouts.values())
    assert finding.summary.startswith("shop/status had 1 replica unavailable for 1 min 30 s during 1 rollout(s)")
    assert any(
        "rollout of shop/api at 10:50: ReplicaSet api-5c6d7e8f9, RollingUpdate maxUnavailable 0, maxSurge 1" in line
        for line in finding.evidence
    )


async def test_a_healthy_surge_step_is_not_lost_capacity(own_backends: EmbeddedBackends) -> None:
    """The controller counts a not-yet-ready surge pod as unavailable; desired minus available says nothing was lost."""
    window = _window(datetime(2025, 5, 9, 10, tzinfo=UTC))
    grid = _grid(window, 30)
    t0 = int(window.start.timestamp()) + 1800
    surging = {t for t in grid if t0 <= t < t0 + 300}
    ident = {"namespace": "shop", "deployment": "api"}
    series = [
        _up(window, 30),
        _series("kube_deployment_spec_replicas", ident, grid, 4.0),
        _series("kube_deployment_status_replicas_available", ident, grid, 4.0),
        _series("kube_deployment_status_replicas_unavailable", ident, grid, lambda t: 1.0 if t in surging else 0.0),
    ]
    _load(own_backends, series, window)
    finding = await _run(own_backends, window, DeploymentsCheck(DeploymentsPolicy()))
    assert finding.status is Status.OK
    assert finding.summary.startswith("no Deployment had an unavailable replica")


async def test_pods_beyond_the_detail_limit_get_no_invented_moments(own_backends: EmbeddedBackends) -> None:
    """A pod not read in detail keeps its measured not-ready time and has no episodes a rule could overlap."""
    window = _window(datetime(2025, 5, 10, 10, tzinfo=UTC))
    grid = _grid(window, 30)
    t0 = int(window.start.timestamp()) + 1800
    series = [_up(window, 30)]
    for index, minutes in enumerate((10, 5)):
        unready = {t for t in grid if t0 <= t < t0 + minutes * 60}
        pod = {"namespace": "web", "pod": f"shop-6f7d9c8b5-x2x4{index}", "uid": f"u{index}"}
        series.append(
            _series("kube_pod_status_ready", {**pod, "condition": "true"}, grid, lambda t, u=unready: float(t not in u))
        )
    _load(own_backends, series, window)
    finding = await _run(own_backends, window, ReadinessCheck(ReadinessPolicy(detail_pods=1)))
    detailed, counted = finding.offenders
    assert (detailed.fact("not_ready_seconds"), len(detailed.spans)) == (600, 1)
    assert (counted.fact("not_ready_seconds"), counted.spans, counted.labels["state"]) == (300, (), "not ready")
    assert "episodes" not in counted.facts

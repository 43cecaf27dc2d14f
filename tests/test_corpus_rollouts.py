"""Pure tests of the corpus' rollout families (kube-state-metrics Deployments and ReplicaSets) and their four days.

2026-10-20 (spiral, prober not scraped), 10-28 (Recreate beside RollingUpdate), 11-05 (stuck RollingUpdate) and
11-12 (node NotReady).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from functools import cache

import pytest

from digest.testbed.corpus import DAYS
from digest.testbed.corpus.homelab import HomelabDay
from digest.testbed.corpus.model import Series
from digest.testbed.corpus.objects import Deployment, scaled_value

SPIRAL = dt.date(2026, 10, 20)
BESIDE = dt.date(2026, 10, 28)
STUCK = dt.date(2026, 11, 5)
NODE = dt.date(2026, 11, 12)
STEP = 30


@cache
def series_of(d: dt.date) -> tuple[Series, ...]:
    return tuple(DAYS[d].series())


def find(series: Iterable[Series], name: str, **labels: str) -> list[Series]:
    return [s for s in series if s.labels["__name__"] == name and all(s.labels.get(k) == v for k, v in labels.items())]


def one(series: Iterable[Series], name: str, **labels: str) -> Series:
    got = find(series, name, **labels)
    assert len(got) == 1, (name, labels, len(got))
    return got[0]


def samples(s: Series) -> dict[int, float]:
    return {t // 1_000: v for t, v in zip(s.timestamps_ms, s.values, strict=True)}


def homelab(d: dt.date) -> HomelabDay:
    day = DAYS[d]
    assert isinstance(day, HomelabDay)
    return day


def window_grid(d: dt.date) -> list[int]:
    w = homelab(d).window
    return list(range(w.start_s, w.end_s, STEP))


def at(d: dt.date, hhmmss: str) -> int:
    return homelab(d).window.at(hhmmss)


# --------------------------------------------------------------------------------------------------- families


def test_int_or_percent_resolves_like_kube_state_metrics() -> None:
    """Percentages: maxUnavailable rounds down, maxSurge rounds up; integers pass through."""
    assert scaled_value("25%", 4, round_up=False) == 1
    assert scaled_value("25%", 4, round_up=True) == 1
    assert scaled_value("25%", 1, round_up=False) == 0
    assert scaled_value("25%", 1, round_up=True) == 1
    assert scaled_value("10%", 4, round_up=False) == 0
    assert scaled_value("10%", 4, round_up=True) == 1
    assert scaled_value(0, 4, round_up=False) == 0
    dep = Deployment("shop", "status-page", 1, strategy="Recreate")
    assert dep.max_unavailable_replicas is None
    assert dep.max_surge_replicas is None
    with pytest.raises(ValueError, match="strategy"):
        Deployment("shop", "x", 1, strategy="BlueGreen")


@pytest.mark.parametrize("d", sorted(DAYS), ids=str)
def test_deployment_and_replicaset_families_agree(d: dt.date) -> None:
    """Per Deployment, kube-state-metrics' families agree with each other at every scrape.

    Spec, generation = observed, strategy parameters only for RollingUpdate, ReplicaSets owned and created before
    their pods, ``unavailable = max(0, spec - ready over its ReplicaSets)``, and at most spec + surge pods wanted.
    """
    day = homelab(d)
    ss = series_of(d)
    for dep in day.lab.deployments:
        ident = {"namespace": dep.namespace, "deployment": dep.name}
        assert set(one(ss, "kube_deployment_spec_replicas", **ident).values) == {dep.replicas}
        gen = one(ss, "kube_deployment_metadata_generation", **ident)
        assert gen.values == one(ss, "kube_deployment_status_observed_generation", **ident).values
        assert all(b - a in (0, 1) for a, b in zip(gen.values, gen.values[1:], strict=False))
        for family in ("max_unavailable", "max_surge"):
            got = find(ss, f"kube_deployment_spec_strategy_rollingupdate_{family}", **ident)
            assert len(got) == (1 if dep.strategy == "RollingUpdate" else 0), (dep.name, family)
        owners = find(ss, "kube_replicaset_owner", namespace=dep.namespace, owner_name=dep.name)
        assert owners
        assert all(s.labels["owner_kind"] == "Deployment" for s in owners)
        assert all(
            s.labels["owner_is_controller"] == "true" and s.labels["job"] == "kube-state-metrics" for s in owners
        )
        names = {s.labels["replicaset"] for s in owners}
        pods = [p for p in day.lab.pods if p.workload_key == dep.workload_key]
        assert {p.replicaset for p in pods} <= names
        created = {
            s.labels["replicaset"]: s.values[0] for s in find(ss, "kube_replicaset_created", namespace=dep.namespace)
        }
        for p in pods:
            assert created[p.replicaset] < p.start_s
        # One generation step per ReplicaSet created in the span, none otherwise.
        first, last = gen.timestamps_ms[0] // 1_000, gen.timestamps_ms[-1] // 1_000
        assert gen.values[-1] - gen.values[0] == sum(1 for n in names if first < created[n] <= last)
        spec = [samples(one(ss, "kube_replicaset_spec_replicas", namespace=dep.namespace, replicaset=n)) for n in names]
        ready = [
            samples(one(ss, "kube_replicaset_status_ready_replicas", namespace=dep.namespace, replicaset=n))
            for n in names
        ]
        unavailable = samples(one(ss, "kube_deployment_status_replicas_unavailable", **ident))
        for t, u in unavailable.items():
            assert u == max(0, dep.replicas - sum(r.get(t, 0) for r in ready)), (dep.name, t)
            total = sum(s.get(t, 0) for s in spec)
            if dep.strategy == "RollingUpdate":
                assert dep.replicas <= total <= dep.replicas + (dep.max_surge_replicas or 0), (dep.name, t, total)
            else:  # Recreate: the old ReplicaSet goes to 0 before the new one is created
                assert total <= dep.replicas, (dep.name, t, total)


# --------------------------------------------------------------------------------------------------- 10-20


def test_spiral_without_prober_metrics() -> None:
    """10-20: no prober series or target, throttled CFS, pods unready without restarts, empty slices, UH.

    And no ReplicaSet created: the generation does not move.
    """
    ss = series_of(SPIRAL)
    facts = DAYS[SPIRAL].expected.facts
    assert not find(ss, "prober_probe_total")
    assert not find(ss, "up", metrics_path="/metrics/probes")
    assert not [k for k in facts if k.startswith("probe_failures.")]
    assert int(str(facts["probe_failures_not_scraped.Readiness.shop/api"])) > 100
    assert len(find(ss, "container_cpu_cfs_throttled_periods_total", namespace="shop", container="api")) == 4
    assert float(str(facts["cpu_throttled_ratio_under_load.shop/api"])) > 0.5
    assert facts["restarts"] == 0
    for s in find(ss, "kube_pod_container_status_restarts_total", namespace="shop", container="api"):
        assert set(s.values) == {0.0}
    not_ready = [s for s in find(ss, "kube_pod_status_ready", namespace="shop", condition="false") if max(s.values)]
    assert len(not_ready) == 4
    windows = facts["endpoints_empty_windows.shop/api"]
    assert isinstance(windows, list)
    assert len(windows) == 5
    assert int(str(facts["gateway_flags.UH.httproute/shop/api/rule/0"])) > 1_000
    assert facts["rollouts.shop/api"] == 0
    w = homelab(SPIRAL).window
    assert all(s.values[0] < w.series_start_s for s in find(ss, "kube_replicaset_created"))
    gen = one(ss, "kube_deployment_metadata_generation", deployment="api")
    assert len(set(gen.values)) == 1


# --------------------------------------------------------------------------------------------------- 10-28


def test_recreate_beside_rolling() -> None:
    """10-28: the API's surge rollout never loses a ready endpoint; status-page's Recreate empties its slice."""
    ss = series_of(BESIDE)
    facts = DAYS[BESIDE].expected.facts
    assert set(one(ss, "kube_deployment_spec_strategy_rollingupdate_max_unavailable", deployment="api").values) == {0}
    assert set(one(ss, "kube_deployment_spec_strategy_rollingupdate_max_surge", deployment="api").values) == {1}
    assert not find(ss, "kube_deployment_spec_strategy_rollingupdate_max_surge", deployment="status-page")
    assert set(one(ss, "kube_deployment_status_replicas_unavailable", deployment="api").values) == {0}
    assert "gateway_flags.UH.httproute/shop/api/rule/0" not in facts
    assert facts["gateway_flags.UH"] == facts["gateway_flags.UH.httproute/shop/status-page/rule/0"] == 422
    assert facts["gateway_requests.httproute/shop/status-page/rule/0"] == 1_000
    assert facts["endpoints_empty_windows.shop/status-page"] == [
        {"start": "2026-10-28T13:27:50Z", "seconds": 88, "scrapes": 3}
    ]
    unavailable = samples(one(ss, "kube_deployment_status_replicas_unavailable", deployment="status-page"))
    assert [t for t in window_grid(BESIDE) if unavailable[t]] == [
        at(BESIDE, x) for x in ("13:28:00", "13:28:30", "13:29:00")
    ]
    # One new ReplicaSet each, in the window; the API's scales 0→4 while the old one scales 4→0.
    for wl in ("shop/api", "shop/status-page"):
        created = facts[f"replicasets_created.{wl}"]
        assert isinstance(created, list)
        assert len(created) == 1
    new = str(facts["replicaset_current.shop/api"])
    new_spec = list(one(ss, "kube_replicaset_spec_replicas", replicaset=new).values)
    assert new_spec == sorted(new_spec)
    assert new_spec[0] >= 1
    assert new_spec[-1] == 4
    old = next(s for s in find(ss, "kube_replicaset_spec_replicas", namespace="shop") if s.values[0] == 4)
    assert list(old.values) == sorted(old.values, reverse=True)
    assert old.values[-1] == 0
    assert facts["deployment_strategy.shop/status-page"] == "Recreate"
    assert facts["deployment_strategy.shop/api"] == "RollingUpdate"
    gen = one(ss, "kube_deployment_metadata_generation", deployment="status-page")
    assert gen.values[-1] - gen.values[0] == 1


# --------------------------------------------------------------------------------------------------- 11-05


def test_stuck_rollout() -> None:
    """11-05: the new ReplicaSet (spec 2) never has a ready pod, the old one keeps 3, unavailable stays 1."""
    day = homelab(STUCK)
    ss = series_of(STUCK)
    facts = day.expected.facts
    t0 = at(STUCK, "14:02:00")
    unavailable = samples(one(ss, "kube_deployment_status_replicas_unavailable", deployment="api"))
    assert [t for t in window_grid(STUCK) if unavailable[t]] == [t for t in window_grid(STUCK) if t >= t0]
    assert max(unavailable.values()) == 1
    old, new = str(facts["replicaset_previous.shop/api"]), str(facts["replicaset_current.shop/api"])
    assert samples(one(ss, "kube_replicaset_spec_replicas", replicaset=new))[t0 + 30] == 2
    assert set(one(ss, "kube_replicaset_status_ready_replicas", replicaset=new).values) == {0}
    assert samples(one(ss, "kube_replicaset_spec_replicas", replicaset=old))[t0 + 30] == 3
    assert samples(one(ss, "kube_replicaset_status_ready_replicas", replicaset=old))[t0 + 30] == 3
    assert facts["max_unavailable.shop/api"] == facts["max_surge.shop/api"] == 1
    crash_pods = facts["crashloop_pods.shop/api"]
    assert isinstance(crash_pods, list)
    assert len(crash_pods) == 2
    for pod in crash_pods:
        reasons = find(ss, "kube_pod_container_status_last_terminated_reason", pod=pod)
        assert [s.labels["reason"] for s in reasons] == ["Error"]
        assert set(one(ss, "kube_pod_container_status_last_terminated_exitcode", pod=pod).values) == {1}
        assert max(one(ss, "kube_pod_container_status_restarts_total", pod=pod).values) > 100
        assert not find(ss, "prober_probe_total", pod=pod)
        p = next(x for x in day.lab.pods if x.name == pod)
        gaps = [b.restarted_s - b.finished_s for b in p.terminations]
        assert gaps[:7] == [10, 20, 40, 80, 160, 300, 300]
    assert facts["restarts"] == facts["restarts.shop/api"] == 246
    assert facts["error_lines.shop/api"] == 2 * 246
    assert facts["gateway_5xx"] == 0
    assert not find(ss, "container_cpu_cfs_throttled_periods_total")
    # The slice always lists ready endpoints (the three old pods).
    ready = find(ss, "kube_endpointslice_endpoints", namespace="shop", ready="true")
    covered = set().union(*(set(samples(s)) for s in ready if s.labels["targetref_name"].startswith("api-")))
    assert set(window_grid(STUCK)) <= covered
    assert (day.expected.status, day.expected.score) == ("OK", 10)


def test_stuck_rollout_crash_records() -> None:
    """11-05: each crash writes the config error (level error) and uvicorn's plain ERROR line, in <restart>.log."""
    errors = 0
    files: set[str] = set()
    for chunk in DAYS[STUCK].log_chunks():
        for line in chunk.split(b"\n"):
            if b"DATABASE_URL" in line or b"Application startup failed" in line:
                record = json.loads(line)
                errors += 1
                files.add(record["file"].rsplit("/", 1)[1])
    assert errors == 2 * 246
    assert {"0.log", "1.log", "122.log"} <= files


# --------------------------------------------------------------------------------------------------- 11-12


def test_node_not_ready() -> None:
    """11-12: Ready unknown on pi5-2, kubelet series silent, evictions in the same ReplicaSet, UH on feeds only."""
    day = homelab(NODE)
    ss = series_of(NODE)
    facts = day.expected.facts
    unknown = samples(one(ss, "kube_node_status_condition", node="pi5-2", condition="Ready", status="unknown"))
    lost = [t for t in window_grid(NODE) if unknown[t]]
    assert lost[0] == at(NODE, "03:11:00")
    assert lost[-1] == at(NODE, "03:52:00")
    up = samples(one(ss, "up", metrics_path="/metrics/cadvisor", instance="pi5-2"))
    assert [t for t in window_grid(NODE) if not up[t]] == list(range(at(NODE, "03:10:00"), at(NODE, "03:52:00"), STEP))
    assert set(one(ss, "up", job="node-exporter", instance="pi5-2:9100").values) == {1}
    hang = range(at(NODE, "03:10:00"), at(NODE, "03:52:00"))
    for s in find(ss, "container_memory_working_set_bytes", instance="pi5-2"):
        assert not [t for t in samples(s) if t in hang]
    assert facts["restarts"] == 0
    evictions = facts["evictions"]
    assert isinstance(evictions, list)
    assert len(evictions) == 2
    for e in evictions:
        assert isinstance(e, dict)
        assert str(e["replacement"]).rsplit("-", 1)[0] == e["replicaset"]
        deletion = one(ss, "kube_pod_deletion_timestamp", pod=str(e["pod"]))
        assert set(deletion.values) == {at(NODE, "03:15:40")}
    assert facts["replicasets_created"] == 0
    for dep in ("feed-aggregator", "web"):
        assert len(set(one(ss, "kube_deployment_metadata_generation", deployment=dep).values)) == 1
    assert facts["gateway_flags.UH"] == facts["gateway_flags.UH.httproute/feeds/feed-aggregator/rule/0"]
    assert int(str(facts["gateway_flags.UH"])) > 0
    assert facts["endpoints_empty_windows.feeds/feed-aggregator"] == [
        {"start": "2026-11-12T03:10:40Z", "seconds": 317, "scrapes": 10}
    ]
    assert "endpoints_empty_windows.shop/web" not in facts
    assert facts["replicas_unavailable_max.shop/web"] == 1
    terminating = find(ss, "kube_endpointslice_endpoints", namespace="feeds", terminating="true")
    assert len(terminating) == 1

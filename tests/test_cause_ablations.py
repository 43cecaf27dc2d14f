"""Causes under missing exporters: every corpus day with one optional metric family removed, digested again.

Real clusters lack exporters the corpus has: few scrape the kubelet's prober metrics, kube-state-metrics older than
2.12 has no termination timestamps, a container without a CPU limit (or a cAdvisor without CFS) has no throttling
counters, kube-state-metrics ≥ 2.18 ships EndpointSlices but older ones (or a restricted ``--resources``) only the
legacy Endpoints, most clusters have no Istio, many no rule evaluator, and a kube-state-metrics restricted to a few
resources has no ReplicaSets (rollouts are then not observable). For each family, one VictoriaMetrics holds
every corpus day without it (EndpointSlices are replaced by the Endpoints families they would have been); logs come
from the session's VictoriaLogs, which holds the days unchanged. Then, for every day and family:

- an explanation whose rule also fires on the full day names the same cause, or says it cannot tell ("");
- a rule that does not fire on the full day may fire only to say it cannot tell;
- a rule may fall silent when the evidence for what it explains is gone (the matrix shows it).

A day that never had the family is not digested twice: its cell reads "absent". Each server's days are replayed
together, as `digest replay` grades them (`digest.app.replay.replay`), without trends: a cause is read from the day's
own findings (`digest.pipeline.explain.explain` reads nothing else), and the seven trend days of each of the twelve
days, nine times over, were two thirds of the module's time.
"""

from __future__ import annotations

import asyncio
import io
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import httpx
import pytest

from digest.app.engine import Config, make_digest
from digest.app.replay import replay
from digest.app.settings import load_settings
from digest.pipeline.policy import Policy, TrendsPolicy
from digest.pipeline.window import day_window
from digest.testbed.corpus import DAYS
from digest.testbed.corpus.model import Series
from digest.testbed.embedded import EmbeddedBackends, Server, free_port
from digest.testbed.snapshots import binary_identity, snapshot_key, timed
from tests.conftest import VOLUME_SCALE, _scaled

VM_ARGS = ["-search.latencyOffset=0s"]

Transform = Callable[[Series], Iterator[Series]]


def _without(*names: str) -> Transform:
    def transform(series: Series) -> Iterator[Series]:
        if series.labels["__name__"] not in names:
            yield series

    return transform


def _prefixed(prefix: str) -> Transform:
    def transform(series: Series) -> Iterator[Series]:
        if not series.labels["__name__"].startswith(prefix):
            yield series

    return transform


_ROLLOUT_FAMILIES = (
    "kube_deployment_metadata_generation",
    "kube_deployment_status_observed_generation",
    "kube_deployment_spec_strategy_rollingupdate_max_unavailable",
    "kube_deployment_spec_strategy_rollingupdate_max_surge",
)


def _rollout_families(series: Series) -> Iterator[Series]:
    name = series.labels["__name__"]
    if not name.startswith("kube_replicaset_") and name not in _ROLLOUT_FAMILIES:
        yield series


def _alerting(series: Series) -> Iterator[Series]:
    name = series.labels["__name__"]
    if name in ("ALERTS", "ALERTS_FOR_STATE"):
        return
    if name == "up" and ("vmalert" in series.labels.get("job", "") or "prometheus" in series.labels.get("job", "")):
        return
    yield series


def _legacy_endpoints(series: Series) -> Iterator[Series]:
    """EndpointSlice families → the legacy Endpoints ones (one Endpoints object per Service, named like it)."""
    name = series.labels["__name__"]
    if not name.startswith("kube_endpointslice"):
        yield series
        return
    labels = dict(series.labels)
    # The corpus names slices <service>-<5 characters>.
    service = labels.pop("endpointslice").rsplit("-", 1)[0]
    if name == "kube_endpointslice_info":
        yield Series(
            {**_keep(labels, "job", "instance", "namespace"), "__name__": "kube_endpoint_info", "endpoint": service},
            series.timestamps_ms,
            series.values,
        )
    elif name == "kube_endpointslice_endpoints":
        yield Series(
            {
                **_keep(labels, "job", "instance", "namespace", "ready"),
                "__name__": "kube_endpoint_address",
                "endpoint": service,
                "ip": labels.get("address", ""),
                "port_name": "http",
                "port_protocol": "TCP",
                "port_number": "8080",
            },
            series.timestamps_ms,
            series.values,
        )


def _keep(labels: dict[str, str], *names: str) -> dict[str, str]:
    return {name: labels[name] for name in names if name in labels}


@dataclass(frozen=True)
class Family:
    """One optional metric family and how its absence is made."""

    name: str
    transform: Transform


FAMILIES = (
    Family("prober metrics", _without("prober_probe_total")),
    Family(
        "ksm ≥ 2.12 fields",
        _without(
            "kube_pod_container_status_last_terminated_timestamp", "kube_pod_container_status_last_terminated_exitcode"
        ),
    ),
    Family(
        "cAdvisor throttling", _without("container_cpu_cfs_periods_total", "container_cpu_cfs_throttled_periods_total")
    ),
    Family("EndpointSlice → Endpoints", _legacy_endpoints),
    Family("Istio", _prefixed("istio_")),
    # kube-state-metrics with --resources restricted (no replicasets) and an allowlist without the Deployment's
    # generation and strategy: rollouts are then not observable, and must not be guessed.
    Family("ReplicaSets, generation, strategy", _rollout_families),
    Family("ALERTS / vmalert", _alerting),
    # Clusters whose kube-state-metrics does not export node conditions: a node's liveness is then read from its
    # kubelet's and node_exporter's own answers.
    Family("node conditions", _without("kube_node_status_condition")),
)


def _import(server: Server, lines: list[bytes]) -> None:
    response = httpx.post(f"{server.url}/api/v1/import", content=b"".join(lines), timeout=300.0)
    response.raise_for_status()


def _flush(server: Server) -> None:
    httpx.get(f"{server.url}/internal/force_flush", timeout=30.0)


def _config(metrics_url: str, logs_url: str) -> Config:
    settings = load_settings(
        vm_url=metrics_url, vl_url=logs_url, cluster="homelab", timezone="UTC", policy_file=None, query_timeout=30.0
    )
    return Config(settings=settings, policy=Policy(trends=TrendsPolicy(enabled=False)))


def _causes(metrics_url: str, logs_url: str, days: list[date]) -> dict[date, dict[str, str]]:
    """Each day's causes by rule; the days are replayed together, as `digest replay` grades them (two at a time)."""
    config = _config(metrics_url, logs_url)
    digests = asyncio.run(replay(config, days, "summary", 2, io.StringIO(), io.StringIO()))
    return {
        day: {explanation.rule: explanation.cause for explanation in digest.explanations}
        for day, digest in zip(days, digests, strict=True)
    }


@dataclass
class FamilyServers:
    """One VictoriaMetrics per family, each holding every corpus day without it; which (day, family) lost series."""

    servers: list[Server]
    removed: dict[tuple[date, str], int]


def _load(servers: list[Server]) -> dict[tuple[date, str], int]:
    removed: dict[tuple[date, str], int] = {}
    for day in sorted(DAYS):
        kept: list[list[bytes]] = [[] for _ in FAMILIES]
        for series in _scaled(DAYS[day]).series():
            line = series.to_import_line()  # most series pass every family unchanged: encode them once
            for index, family in enumerate(FAMILIES):
                out = list(family.transform(series))
                if out == [series]:
                    kept[index].append(line)
                    continue
                removed[(day, family.name)] = removed.get((day, family.name), 0) + 1
                kept[index].extend(item.to_import_line() for item in out)
        for server, lines in zip(servers, kept, strict=True):
            _import(server, lines)
    for server in servers:
        _flush(server)
    return removed


def _up_counts(server: Server) -> list[int]:
    """``count(up)`` at noon of each corpus day: what a restored server must show again."""
    counts = []
    for day in sorted(DAYS):
        answer = httpx.post(
            f"{server.url}/api/v1/query",
            data={"query": "count(up)", "time": f"{day.isoformat()}T12:00:00Z"},
            timeout=30.0,
        ).json()
        result = answer.get("data", {}).get("result", [])
        counts.append(int(float(result[0]["value"][1])) if result else 0)
    return counts


def _wait_for_counts(servers: list[Server], expected: list[list[int]], timeout_seconds: float = 60.0) -> None:
    """Bounded poll until every server shows the ``count(up)`` of every day that the load saw."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        seen = [_up_counts(server) for server in servers]
        if seen == expected:
            return
        assert time.monotonic() < deadline, f"count(up) by day {seen}, expected {expected}"
        for server in servers:
            _flush(server)
        time.sleep(0.2)


@pytest.fixture(scope="module")
def family_servers() -> Iterator[FamilyServers]:
    """The family servers, kept as a snapshot between runs (testbed.snapshots); stopped and removed at the end."""
    root = Path(tempfile.mkdtemp(prefix="digest-cause-ablations-"))
    servers = [Server(f"vm-{i}", "victoria-metrics", free_port(), root / f"vm-{i}") for i in range(len(FAMILIES))]
    snapshot = snapshot_key(
        "cause-ablations", [Path(__file__)], f"scale={VOLUME_SCALE}", binary_identity("victoria-metrics")
    )
    what = f"{len(DAYS)} days × {len(FAMILIES)} families: VictoriaMetrics"
    try:
        if snapshot is None:
            for server in servers:
                server.start(VM_ARGS)
            with timed("load", what, "uncached"):
                removed = _load(servers)
        else:
            with snapshot.claim() as kept:
                if kept.found:
                    with timed("load", what, "restored"):
                        for server in servers:
                            kept.restore(server.name, server.data_dir)
                            server.start(VM_ARGS)
                        _wait_for_counts(servers, kept.manifest["up"])
                        removed = {(date.fromisoformat(day), name): n for day, name, n in kept.manifest["removed"]}
                else:
                    for server in servers:
                        server.start(VM_ARGS)
                    with timed("load", what, "built"):
                        removed = _load(servers)
                        up = [_up_counts(server) for server in servers]
                        for server in servers:
                            server.stop(strict=True)
                        manifest = {
                            "up": up,
                            "removed": [[day.isoformat(), name, n] for (day, name), n in removed.items()],
                        }
                        with kept.saving({server.name: server.data_dir for server in servers}, manifest):
                            for server in servers:
                                server.start(VM_ARGS)
                            _wait_for_counts(servers, up)
        yield FamilyServers(servers, removed)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_causes_never_change_when_an_optional_exporter_is_missing(
    corpus_backends: EmbeddedBackends, family_servers: FamilyServers
) -> None:
    """Each corpus day minus each optional family: the same cause, or "cannot tell" — never a different cause."""
    servers, removed = family_servers.servers, family_servers.removed
    logs = corpus_backends.logs.url
    rows: list[str] = []
    problems: list[str] = []
    days = sorted(DAYS)
    full_days = _causes(corpus_backends.metrics.url, logs, days)
    ablated_days = {
        family.name: _causes(server.url, logs, [day for day in days if (day, family.name) in removed])
        for server, family in zip(servers, FAMILIES, strict=True)
    }
    for day in days:
        full = full_days[day]
        cells = [f"{day}  full: {_show(full)}"]
        for family in FAMILIES:
            if (day, family.name) not in removed:
                cells.append(f"    − {family.name}: absent")
                continue
            ablated = ablated_days[family.name][day]
            cells.append(f"    − {family.name}: {_show(ablated)}")
            for rule, cause in ablated.items():
                if cause and rule in full and cause != full[rule]:
                    problems.append(f"{day} − {family.name}: {rule} names {cause!r}, the full day {full[rule]!r}")
                if cause and rule not in full and not _said_by_another(rule, cause, full):
                    problems.append(f"{day} − {family.name}: {rule} names {cause!r}, silent on the full day")
        rows.extend(cells)
    print(f"cause ablation matrix: {len(DAYS)} days × {len(FAMILIES)} families", *rows, sep="\n")
    assert not problems, "\n".join(problems)
    # No column of the matrix is vacuous: every family removed exists on some corpus day.
    assert {name for _, name in removed} == {family.name for family in FAMILIES}


# A rule the full day kept silent because a more specific one said the same thing: the crash loop of a stuck
# rollout's new pods (stuck_rollout) or of an error flood (log_storm). Without the rollout families the crash loop is
# all that can be said, and it is the same cause.
_SAID_BY = {"crash_loop": ("stuck_rollout", "log_storm")}


def _said_by_another(rule: str, cause: str, full: dict[str, str]) -> bool:
    return cause == "crash_loop" and any(other in full for other in _SAID_BY.get(rule, ()))


def _show(causes: dict[str, str]) -> str:
    if not causes:
        return "(no explanation)"
    return ", ".join(f"{rule}={cause or 'cannot tell'}" for rule, cause in causes.items())


SPIRAL = date(2026, 8, 12)  # seed 000: the readiness spiral under CPU throttling


def test_the_readiness_spiral_without_node_conditions_still_names_readiness(
    corpus_backends: EmbeddedBackends, family_servers: FamilyServers
) -> None:
    """Seed 000 without kube_node_status_condition: the nodes kept reporting, so readiness (throttled) is the cause."""
    server = family_servers.servers[[family.name for family in FAMILIES].index("node conditions")]
    digest = asyncio.run(
        make_digest(
            _config(server.url, corpus_backends.logs.url), day_window(SPIRAL, load_settings(timezone="UTC").zone)
        )
    )
    [uh] = [explanation for explanation in digest.explanations if explanation.rule == "no_healthy_upstream"]
    assert uh.cause == "readiness", uh.text
    assert "CPU throttling" in uh.text
    assert "kubelet answered throughout" in uh.text

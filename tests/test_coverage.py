"""Coverage beyond the ablation matrix: excused nodes, exporters named by IP, the window's edge, policy validation.

Real VictoriaMetrics + VictoriaLogs hold variants of the calm day (07-19), each at a date of its own.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from digest.app.engine import Config, make_digest
from digest.app.settings import load_settings
from digest.checks.contract import Need, Window
from digest.checks.coverage import CoveragePolicy, Grid, Report
from digest.output.render import Renderer, to_json
from digest.pipeline.policy import LogsPolicy, Policy, PolicyError, TrendsPolicy, load_policy
from digest.pipeline.window import day_window
from digest.testbed.corpus.identity import NODE_IPS
from digest.testbed.corpus.model import Series
from digest.testbed.embedded import EmbeddedBackends, loaded_backends
from digest.testbed.prometheus_server import PrometheusServer
from digest.testbed.snapshots import binary_identity, snapshot_key
from tests.test_coverage_ablations import (
    Ablation,
    Copy,
    PrometheusCopy,
    _absent_exporter,
    _keep_line,
    _keep_series,
    _lines,
    _series,
)

CALM = date(2026, 7, 19)
OOM_DAY = date(2026, 7, 20)  # seed 001: an OOM kill beside the error flood
NODE = "pi5-1"  # the node the ablations of the calm day touch


def _cordoned(one: Series, start: int, node: str) -> Series | None:
    if one.labels["__name__"] == "kube_node_spec_unschedulable" and one.labels.get("node") == node:
        return Series(one.labels, one.timestamps_ms, [1.0] * len(one.values))
    return one


def _drained(one: Series, start: int, node: str) -> Series | None:
    """Cordoned and drained: its pods moved to pi5-2, its DaemonSet's pod left on it, its node_exporter gone."""
    if one.labels["__name__"] == "kube_pod_info" and one.labels.get("node") == node:
        if str(one.labels["pod"]).startswith("vector-"):  # a DaemonSet's pod stays: drain leaves it
            return Series({**one.labels, "created_by_kind": "DaemonSet"}, one.timestamps_ms, one.values)
        return Series({**one.labels, "node": "pi5-2", "host_ip": NODE_IPS["pi5-2"]}, one.timestamps_ms, one.values)
    kept = _cordoned(one, start, node)
    return None if kept is None else _absent_exporter(kept, start, node)


def _node_logs_until_eight(line: bytes, clock: str, node: str) -> bool:
    return f'"pod_node_name":"{node}"'.encode() not in line or clock < "08:00:00"


def _not_ready(one: Series, start: int, node: str) -> Series | None:
    if one.labels["__name__"] == "kube_node_status_condition" and one.labels.get("node") == node:
        ready = one.labels.get("status") == "false"
        return Series(one.labels, one.timestamps_ms, [1.0 if ready else 0.0] * len(one.values))
    return _absent_exporter(one, start, node)


def _by_ip(one: Series, _start: int, _node: str) -> Series | None:
    instance = one.labels.get("instance", "")
    if instance.endswith(":9100"):
        address = NODE_IPS[instance.removesuffix(":9100")]
        return Series({**one.labels, "instance": f"{address}:9100"}, one.timestamps_ms, one.values)
    return one


def _no_limit(one: Series, _start: int, node: str) -> Series | None:
    if one.labels["__name__"] == "node_nf_conntrack_entries_limit" and one.labels.get("instance") == f"{node}:9100":
        return None
    return one


# Kernel counters at their value since boot (the calm day's are 0 from the start): a first value that is history.
_SINCE_BOOT = {
    "node_vmstat_oom_kill": 8.0,
    "node_nf_conntrack_stat_drop": 3.0,
    "node_nf_conntrack_stat_early_drop": 2.0,
}


def _since_boot(one: Series) -> Series:
    base = _SINCE_BOOT.get(one.labels["__name__"])
    return one if base is None else Series(one.labels, one.timestamps_ms, [value + base for value in one.values])


def _exporter_rollout(one: Series, start: int, _node: str) -> Sequence[Series] | Series | None:
    """Every node's node_exporter pod replaced at noon: each of its series is two, told apart by ``pod``."""
    if not one.labels.get("instance", "").endswith(":9100"):
        return one
    one, noon = _since_boot(one), (start + 12 * 3600) * 1000
    halves = []
    for pod, keep in (("node-exporter-x2kfp", lambda t: t < noon), ("node-exporter-q7tzs", lambda t: t >= noon)):
        pairs = [(t, v) for t, v in zip(one.timestamps_ms, one.values, strict=True) if keep(t)]
        if pairs:
            times, values = zip(*pairs, strict=True)
            halves.append(Series({**one.labels, "pod": pod}, list(times), list(values)))
    return halves


def _fresh_install(one: Series, start: int, _node: str) -> Series | None:
    """Monitoring installed at 09:00: nothing before it, kernel counters at their value since boot."""
    one, nine = _since_boot(one), (start + 9 * 3600) * 1000
    pairs = [(t, v) for t, v in zip(one.timestamps_ms, one.values, strict=True) if t >= nine]
    return Series(one.labels, [t for t, _ in pairs], [v for _, v in pairs]) if pairs else None


def _split_at(one: Series, moment_ms: int) -> tuple[Series | None, Series | None]:
    """``one`` before and from ``moment_ms``; None for a half without samples."""
    halves: list[Series | None] = []
    for keep in (lambda t: t < moment_ms, lambda t: t >= moment_ms):
        pairs = [(t, v) for t, v in zip(one.timestamps_ms, one.values, strict=True) if keep(t)]
        halves.append(Series(one.labels, [t for t, _ in pairs], [v for _, v in pairs]) if pairs else None)
    return halves[0], halves[1]


_SHARDS = ("10.42.1.51:8080", "10.42.2.52:8080")


def _sharded(*, target_stays: bool) -> Callable[[Series, int, str], Sequence[Series] | Series | None]:
    """kube-state-metrics sharded in two by pod; shard 2 down from 06:00 (its target at up 0, or gone)."""

    def series(one: Series, start: int, _node: str) -> Sequence[Series] | Series | None:
        if one.labels.get("job") != "kube-state-metrics":
            return one
        six = (start + 6 * 3600) * 1000
        if one.labels["__name__"] == "up":
            first = Series({**one.labels, "instance": _SHARDS[0]}, one.timestamps_ms, one.values)
            before, after = _split_at(
                Series({**one.labels, "instance": _SHARDS[1]}, one.timestamps_ms, one.values), six
            )
            down = Series(after.labels, after.timestamps_ms, [0.0] * len(after.values)) if after else None
            return [part for part in (first, before, down if target_stays else None) if part is not None]
        shard = zlib.crc32(one.labels.get("pod", "").encode()) % 2 if one.labels.get("pod") else 0
        moved = Series({**one.labels, "instance": _SHARDS[shard]}, one.timestamps_ms, one.values)
        return moved if shard == 0 else _split_at(moved, six)[0]

    return series


def _ksm_moved(one: Series, start: int, _node: str) -> Sequence[Series] | Series | None:
    """kube-state-metrics' pod rescheduled at noon: every series of it continues under a new instance."""
    if one.labels.get("job") != "kube-state-metrics":
        return one
    before, after = _split_at(one, (start + 12 * 3600) * 1000)
    parts = [Series({**before.labels, "instance": _SHARDS[0]}, before.timestamps_ms, before.values)] if before else []
    if after:
        parts.append(Series({**after.labels, "instance": "10.42.3.77:8080"}, after.timestamps_ms, after.values))
    return parts


def _ha_pair(one: Series, _start: int, _node: str) -> Sequence[Series]:
    """Every series twice, from an HA pair of scrapers told apart by ``replica``; the second scrapes 7 s later."""
    return [
        Series({**one.labels, "replica": "prom-0"}, one.timestamps_ms, one.values),
        Series({**one.labels, "replica": "prom-1"}, [t + 7000 for t in one.timestamps_ms], one.values),
    ]


def _no_evaluator(one: Series, _start: int, _node: str) -> Series | None:
    """A cluster that never ran a rule evaluator: no vmalert target, no ALERTS series."""
    if one.labels.get("job") == "vmalert" or one.labels["__name__"].startswith("ALERTS"):
        return None
    return one


def _renamed(value: str) -> str:
    return value.replace("pi5-3", "pi5-4")


def _replaced(one: Series, start: int, node: str) -> Sequence[Series] | Series | None:
    """pi5-3 replaced at noon by pi5-4 at the same IP, node_exporter scraped by IP (its target is the same)."""
    one = _by_ip(one, start, node) or one
    if not any("pi5-3" in value for value in one.labels.values()):
        return one
    noon = (start + 12 * 3600) * 1000
    halves = []
    for rename, keep in ((False, lambda t: t < noon), (True, lambda t: t >= noon)):
        pairs = [(t, v) for t, v in zip(one.timestamps_ms, one.values, strict=True) if keep(t)]
        if pairs:
            labels = {key: _renamed(value) for key, value in one.labels.items()} if rename else dict(one.labels)
            halves.append(Series(labels, [t for t, _ in pairs], [v for _, v in pairs]))
    return halves


def _replaced_line(line: bytes, clock: str, _node: str) -> bool | bytes:
    if clock >= "12:00:00" and b'"pod_node_name":"pi5-3"' in line:
        return line.replace(b'"pod_node_name":"pi5-3"', b'"pod_node_name":"pi5-4"')
    return True


def _interval_change(one: Series, start: int, _node: str) -> Sequence[Series] | Series | None:
    """Scrapes every 30 s until noon, every 5 min after; shop/api's pods unready 15:00–15:40 (its Service empty)."""
    noon, down, up = ((start + hours * 3600) * 1000 for hours in (12, 15, 15 + 40 / 60))
    kept = [(t, v) for t, v in zip(one.timestamps_ms, one.values, strict=True) if t < noon or t % 300_000 == 0]
    labels = one.labels
    is_api = labels.get("namespace") == "shop" and labels.get("pod", labels.get("targetref_name", "")).startswith(
        "api-"
    )

    def during(t: int) -> bool:
        return down <= t < up

    if is_api and labels["__name__"] == "kube_pod_status_ready" and labels.get("condition") in ("true", "false"):
        unready = labels["condition"] == "true"
        kept = [(t, (0.0 if unready else 1.0) if during(t) else v) for t, v in kept]
    if is_api and labels["__name__"] == "kube_endpointslice_endpoints":
        ready = [(t, v) for t, v in kept if not during(t)]
        not_ready = [(t, v) for t, v in kept if during(t)]
        return [
            Series(labels, [t for t, _ in ready], [v for _, v in ready]),
            Series(
                {**labels, "ready": "false", "serving": "false"}, [t for t, _ in not_ready], [v for _, v in not_ready]
            ),
        ]
    return Series(labels, [t for t, _ in kept], [v for _, v in kept]) if kept else None


def _from_nine(_line: bytes, clock: str, _node: str) -> bool:
    return clock >= "09:00:00"


VARIANTS = {
    "drained": Copy(CALM, Ablation("drained, exporter gone", _drained, _keep_line, lambda _n: ()), date(2024, 1, 1)),
    # Cordoned, its pods still on it (ready all day), its log shipper stuck from 08:00: cordoned is not drained.
    "cordoned": Copy(
        CALM,
        Ablation("cordoned, logs stuck at 08:00", _cordoned, _node_logs_until_eight, lambda _n: ()),
        date(2023, 12, 22),
    ),
    "absent": Copy(CALM, Ablation("exporter gone", _absent_exporter, _keep_line, lambda _n: ()), date(2024, 1, 11)),
    "by_ip": Copy(CALM, Ablation("exporters named by IP", _by_ip, _keep_line, lambda _n: ()), date(2024, 1, 21)),
    "full": Copy(CALM, Ablation("full", _keep_series, _keep_line, lambda _n: ()), date(2024, 1, 31)),
    "no_limit": Copy(
        CALM, Ablation("a node without its limit", _no_limit, _keep_line, lambda _n: ()), date(2024, 2, 20)
    ),
    "rollout": Copy(CALM, Ablation("exporter rollout", _exporter_rollout, _keep_line, lambda _n: ()), date(2024, 3, 1)),
    "fresh": Copy(CALM, Ablation("fresh install", _fresh_install, _from_nine, lambda _n: ()), date(2024, 3, 11)),
    "shard_down": Copy(
        CALM, Ablation("ksm shard 2 down", _sharded(target_stays=True), _keep_line, lambda _n: ()), date(2024, 3, 21)
    ),
    "shard_gone": Copy(
        CALM, Ablation("ksm shard 2 gone", _sharded(target_stays=False), _keep_line, lambda _n: ()), date(2024, 3, 31)
    ),
    "ksm_moved": Copy(CALM, Ablation("ksm pod moved", _ksm_moved, _keep_line, lambda _n: ()), date(2024, 4, 10)),
    "oom_day": Copy(OOM_DAY, Ablation("full", _keep_series, _keep_line, lambda _n: ()), date(2024, 4, 20)),
    "oom_day_ha": Copy(OOM_DAY, Ablation("HA pair", _ha_pair, _keep_line, lambda _n: ()), date(2024, 4, 30)),
    # No rule evaluator today: 10 days after days that had one (gone), and more than 30 days after any (never).
    "evaluator_gone": Copy(
        CALM, Ablation("rule evaluator gone", _no_evaluator, _keep_line, lambda _n: ()), date(2024, 5, 10)
    ),
    "no_evaluator": Copy(
        CALM, Ablation("no rule evaluator", _no_evaluator, _keep_line, lambda _n: ()), date(2024, 7, 20)
    ),
    # Two days in a row: the second has every line of namespace feeds lost (its pods ran as before).
    "feeds_logged": Copy(CALM, Ablation("full", _keep_series, _keep_line, lambda _n: ()), date(2024, 5, 31)),
    "feeds_lost": Copy(
        CALM,
        Ablation(
            "namespace feeds' logs lost",
            _keep_series,
            lambda line, _c, _n: b'"pod_namespace":"feeds"' not in line,
            lambda _n: (),
        ),
        date(2024, 6, 1),
    ),
    # The day after: every access-log record of shop/api's route lost (the gateway logs its other routes).
    "route_lost": Copy(
        CALM,
        Ablation(
            "shop/api's access log lost",
            _keep_series,
            lambda line, _c, _n: b"httproute/shop/api/" not in line,
            lambda _n: (),
        ),
        date(2024, 6, 2),
    ),
    "replaced": Copy(
        CALM, Ablation("pi5-3 replaced by pi5-4 at its IP", _replaced, _replaced_line, lambda _n: ()), date(2024, 8, 20)
    ),
    "interval_change": Copy(
        CALM, Ablation("30 s, then 5 min scrapes", _interval_change, _keep_line, lambda _n: ()), date(2024, 8, 30)
    ),
    "no_kernel_counter": Copy(
        CALM,
        Ablation(
            "pi5-1 without node_vmstat_oom_kill",
            lambda one, _s, _n: (
                None
                if one.labels["__name__"] == "node_vmstat_oom_kill" and one.labels.get("instance") == f"{NODE}:9100"
                else one
            ),
            _keep_line,
            lambda _n: (),
        ),
        date(2024, 9, 9),
    ),
    "not_ready": Copy(
        CALM, Ablation("NotReady, no exporter", _not_ready, _keep_line, lambda _n: ()), date(2024, 2, 10)
    ),
}


def load_copies(backends: EmbeddedBackends, copies: Iterable[Copy]) -> int:
    """Each copy's series and log lines into ``backends`` (not waiting for them); the number of log lines sent."""
    counter = [0]
    for copy in copies:
        backends.import_series(_series(copy))
        backends.ingest_logs(_lines(copy, counter))
    return counter[0]


def _load_variants(backends: EmbeddedBackends) -> dict[str, Any]:
    """Every variant into an empty pair; waits until all of it is visible; the manifest holds the lines loaded."""
    manifest: dict[str, Any] = {"lines": load_copies(backends, VARIANTS.values())}
    _verify_variants(backends, manifest)
    return manifest


def wait_for_copies(backends: EmbeddedBackends, copies: Iterable[Copy], lines: int) -> None:
    """Bounded polls until each copy's nodes, and the ``lines`` log lines loaded with them, are visible."""
    zone = ZoneInfo("UTC")
    dates = []
    for copy in copies:
        window = day_window(copy.at, zone)
        backends.wait_for_series("kube_node_info", window.end, 3)
        if copy.ablation is not VARIANTS["fresh"].ablation:  # a fresh install: nothing before 09:00
            backends.wait_for_series("kube_node_info", window.start, 3)
        dates.append(copy.at)
    first, last = day_window(min(dates), zone), day_window(max(dates), zone)
    backends.wait_for_logs(first.start, last.end, lines)


def _verify_variants(backends: EmbeddedBackends, manifest: dict[str, Any]) -> None:
    wait_for_copies(backends, VARIANTS.values(), manifest["lines"])


@pytest.fixture(scope="module")
def variants() -> Iterator[EmbeddedBackends]:
    """The calm day's variants in one backend pair (kept as a snapshot between runs: testbed.snapshots)."""
    snapshot = snapshot_key(
        "coverage-variants",
        # The variants are made here and by the ablation module's helpers.
        [Path(__file__), Path(__file__).with_name("test_coverage_ablations.py")],
        binary_identity("victoria-metrics"),
        binary_identity("victoria-logs"),
    )
    what = f"{len(VARIANTS)} calm-day variants: VictoriaMetrics + VictoriaLogs"
    with loaded_backends(what, snapshot, _load_variants, _verify_variants) as backends:
        yield backends


def _config(backends: EmbeddedBackends, policy: Policy | None = None) -> Config:
    settings = load_settings(
        vm_url=backends.metrics.url, vl_url=backends.logs.url, cluster="homelab", timezone="UTC", policy_file=None
    )
    return Config(settings=settings, policy=policy or Policy(trends=TrendsPolicy(enabled=False)))


async def _digest(backends: EmbeddedBackends, day: date, policy: Policy | None = None) -> dict[str, object]:
    return to_json(await make_digest(_config(backends, policy), day_window(day, ZoneInfo("UTC"))))


def _check(payload: dict[str, object], name: str) -> dict[str, object]:
    checks = payload["checks"]
    assert isinstance(checks, list)
    return next(item for item in checks if item["name"] == name)


async def test_full_calm_day_is_fully_covered(variants: EmbeddedBackends) -> None:
    """The unablated day: every check saw the whole window and every node; OK 10/10 with nothing unseen."""
    payload = await _digest(variants, VARIANTS["full"].at)
    assert (payload["status"], payload["score"]) == ("OK", 10)
    assert payload["coverage"] == {
        "complete": True,
        "partial": [],
        "not_seen": [],
        "excused": [],
        "never_seen": [],
        "lacking": [],
    }
    assert _check(payload, "conntrack")["coverage"] == {
        "fraction": 1.0,
        "partial": False,
        "missing": [],
        "excused": [],
        "never_seen": [],
        "lacking": [],
        "error": None,
    }


async def test_drained_node_is_named_not_blind(variants: EmbeddedBackends) -> None:
    """A cordoned node whose node_exporter is gone is "drained", not a blind spot: the day stays OK."""
    payload = await _digest(variants, VARIANTS["drained"].at)
    assert (payload["status"], payload["score"]) == ("OK", 10)
    assert _check(payload, "conntrack")["status"] == "OK"
    coverage = payload["coverage"]
    assert isinstance(coverage, dict)
    assert coverage["excused"] == [{"node": NODE, "why": "drained"}]
    text = Renderer().render(
        await make_digest(_config(variants), day_window(VARIANTS["drained"].at, ZoneInfo("UTC"))), "text"
    )
    assert f"○ node {NODE} · drained" in text


async def test_a_cordoned_node_whose_pods_stay_is_not_drained(variants: EmbeddedBackends) -> None:
    """Cordoned but not drained (its pods ran on it all day): its logs stuck from 08:00 are unseen, not excused."""
    payload = await _digest(variants, VARIANTS["cordoned"].at)
    assert payload["status"] == "UNKNOWN"
    assert f"logs from {NODE} after 08:00" in str(payload["headline"])
    coverage = payload["coverage"]
    assert isinstance(coverage, dict)
    assert coverage["excused"] == []
    text = Renderer().render(
        await make_digest(_config(variants), day_window(VARIANTS["cordoned"].at, ZoneInfo("UTC"))), "text"
    )
    assert "drained" not in text


async def test_not_ready_node_is_named_not_blind(variants: EmbeddedBackends) -> None:
    """A NotReady node whose node_exporter is silent is "not ready", not a blind spot."""
    payload = await _digest(variants, VARIANTS["not_ready"].at)
    assert _check(payload, "conntrack")["status"] == "OK"
    assert payload["coverage"]["excused"] == [{"node": NODE, "why": "not ready"}]


async def test_missing_exporter_is_partial_unless_declared_absent(variants: EmbeddedBackends) -> None:
    """The same gap without a drain is a blind spot; declared in the policy's absent_nodes, it is "expected absent"."""
    blind = await _digest(variants, VARIANTS["absent"].at)
    assert blind["status"] == "UNKNOWN"
    assert f"not seen: node {NODE} (node_exporter, 24 h)" in str(blind["headline"])
    conntrack = _check(blind, "conntrack")
    assert conntrack["status"] == "UNKNOWN"
    assert str(conntrack["error"]).startswith("partial: ")
    coverage = conntrack["coverage"]
    assert isinstance(coverage, dict)
    assert coverage["missing"] == [
        {
            "kind": "node",
            "name": NODE,
            "source": "node_exporter",
            "from": f"{VARIANTS['absent'].at}T00:00:00Z",
            "to": "2024-01-12T00:00:00Z",
        }
    ]
    declared = Policy(trends=TrendsPolicy(enabled=False), coverage=CoveragePolicy(absent_nodes=(NODE,)))
    excused = await _digest(variants, VARIANTS["absent"].at, declared)
    assert (excused["status"], excused["score"]) == ("OK", 10)
    assert _check(excused, "conntrack")["coverage"]["excused"] == [{"node": NODE, "why": "expected absent"}]


async def test_exporters_named_by_ip_map_to_their_nodes(variants: EmbeddedBackends) -> None:
    """node_exporter targets named by IP are matched to kube_node_info's internal_ip: no node unseen, nodes by name."""
    payload = await _digest(variants, VARIANTS["by_ip"].at)
    assert (payload["status"], payload["score"]) == ("OK", 10)
    assert payload["coverage"]["not_seen"] == []
    conntrack = _check(payload, "conntrack")
    assert " on pi5-2 (" in str(conntrack["summary"])
    assert [offender["labels"]["node"] for offender in conntrack["offenders"]] == ["pi5-2", "pi5-1", "pi5-3"]  # type: ignore[index]


async def test_window_after_the_newest_data_says_until_when(variants: EmbeddedBackends) -> None:
    """The day after the last one loaded (only its first 30 minutes collected) is partial: "data until 00:30"."""
    payload = await _digest(variants, date(2024, 2, 11))
    assert payload["status"] == "UNKNOWN"
    assert "not seen: data until 00:30 (23.5 h unseen)" in str(payload["headline"])
    assert all(item["status"] != "OK" for item in payload["checks"])


def test_grid_cuts_a_day_in_ten_minute_buckets_whatever_its_zone() -> None:
    """A UTC day has 144 buckets of 600 s; a 23-hour DST day 138; an odd window keeps partial end buckets."""
    utc = day_window(CALM, ZoneInfo("UTC"))
    assert (Grid.of(utc).step, len(Grid.of(utc).points)) == (600, 144)
    spring = day_window(date(2026, 3, 29), ZoneInfo("Europe/Paris"))
    assert (Grid.of(spring).step, len(Grid.of(spring).points)) == (600, 138)
    odd = Window(utc.start.replace(minute=3), utc.end.replace(minute=3), ZoneInfo("UTC"), "odd")
    grid = Grid.of(odd)
    assert sum(grid.weight(index) for index in range(len(grid.points))) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("coverage", "key"),
    [
        ({"window_fraction": 1.5}, "coverage.window_fraction"),
        ({"window_fraction": ".nan"}, "coverage.window_fraction"),
        ({"node_tolerance": -1}, "coverage.node_tolerance"),
        ({"shipper_silence_minutes": 0}, "coverage.shipper_silence_minutes"),
        ({"node_gap_minutes": 99999}, "coverage.node_gap_minutes"),
        ({"bogus": 1}, "coverage.bogus"),
    ],
)
def test_bad_coverage_policy_is_refused_naming_the_key(tmp_path: Path, coverage: dict[str, object], key: str) -> None:
    """A coverage threshold that makes no sense is one error naming its key, not a silent blind spot."""
    path = tmp_path / "policy.yaml"
    body = json.dumps({"coverage": coverage}).replace('".nan"', ".nan")
    path.write_text(body)
    with pytest.raises(PolicyError, match=key.replace(".", r"\.")):
        load_policy(path)


def test_coverage_policy_defaults_are_the_documented_ones() -> None:
    """The defaults the README documents: 95 % of the window, every node, 30-minute gaps."""
    policy = load_policy(None).coverage
    assert (policy.window_fraction, policy.node_tolerance, policy.node_gap_minutes) == (0.95, 0, 30)
    assert (policy.shipper_silence_minutes, policy.absent_nodes) == (30, ())
    assert replace(policy, window_fraction=0.5).validate() is None


async def test_logs_without_a_node_field_say_so_rather_than_blame_every_node(variants: EmbeddedBackends) -> None:
    """A log node field the lines do not carry: per-node log coverage is unmeasurable, said once, no node blamed."""
    policy = Policy(trends=TrendsPolicy(enabled=False), logs=LogsPolicy(fields={"node": "kubernetes.host"}))
    payload = await _digest(variants, VARIANTS["full"].at, policy)
    errors = _check(payload, "error_lines")
    assert errors["status"] == "UNKNOWN"
    assert "no log line names its node" in str(errors["error"])
    assert payload["coverage"]["not_seen"] == []
    assert "logs from" not in str(payload["headline"])


def test_partly_seen_check_keeps_the_digest_from_ok_and_says_how_much_was_seen() -> None:
    """A clean result on partial data becomes UNKNOWN; the digest is UNKNOWN, its note counts the checks fully seen."""
    from digest.checks.contract import Coverage, Finding, Gap, GapKind, Status
    from digest.checks.coverage import apply
    from digest.output.render import headline
    from digest.pipeline.score import grade

    window = day_window(CALM, ZoneInfo("UTC"))
    gap = Gap(GapKind.NODE, NODE, "node_exporter", window.start, window.end)
    partial = Coverage(fraction=1.0, missing=(gap,), partial=True)
    clean = Finding(name="conntrack", status=Status.OK, penalty=0, value=0.03, summary="peak 3 % on pi5-2")
    judged = apply(clean, partial, window)
    assert (judged.status, judged.penalty, judged.error) == (
        Status.UNKNOWN,
        0,
        f"partial: node {NODE} (node_exporter, 24 h)",
    )
    costly = Finding(name="error_lines", status=Status.CRIT, penalty=2, value=9e5, summary="flood")
    assert apply(costly, partial, window).penalty == 2  # what was seen still costs its points
    others = [
        Finding(name=name, status=Status.OK, penalty=0, value=0, summary="fine", coverage=Coverage(fraction=1.0))
        for name in ("oom_kills", "error_lines", "envoy_flags")
    ]
    digest = grade("homelab", window, [*others, judged], (), Policy())
    assert digest.status.value == "UNKNOWN"
    assert headline(digest) == f"UNKNOWN · homelab · 2026-07-19 · not seen: node {NODE} (node_exporter, 24 h)"
    text = Renderer().render(digest, "text")
    assert "score 10/10 on what could be seen: 3 of 4 graded checks saw the whole window and every node" in text
    assert f"? conntrack partly seen · peak 3 % on pi5-2, in the part seen — node {NODE} (node_exporter, 24 h)" in text


def test_today_before_it_is_over_says_until_when_data_was_seen(own_backends: EmbeddedBackends) -> None:
    """`digest run --date <today>` on a day collected up to now: UNKNOWN, "data until" about now, never OK."""
    from datetime import UTC, datetime, timedelta

    from tests.command import backend_env, run_digest

    now = datetime.now(UTC).replace(microsecond=0)
    today = now.date()
    clock = now.strftime("%H:%M:%S")

    def until_now(one: Series, start: int, _node: str) -> Series | None:
        # The ablations see the corpus day's own times, before the shift to today: cut at the same time of day.
        cut = (start + int((now - datetime(today.year, today.month, today.day, tzinfo=UTC)).total_seconds())) * 1000
        pairs = [(t, v) for t, v in zip(one.timestamps_ms, one.values, strict=True) if t < cut]
        return Series(one.labels, [t for t, _ in pairs], [v for _, v in pairs]) if pairs else None

    copy = Copy(CALM, Ablation("collected until now", until_now, lambda _l, c, _n: c < clock, lambda _n: ()), today)
    counter = [0]
    own_backends.import_series(_series(copy))
    own_backends.ingest_logs(_lines(copy, counter))
    own_backends.wait_for_series("kube_node_info", now - timedelta(minutes=1), 3)
    window = day_window(today, ZoneInfo("UTC"))
    own_backends.wait_for_logs(window.start, window.end, counter[0])

    result = run_digest("run", "--date", today.isoformat(), "--format", "json", env=backend_env(own_backends))
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["status"] == "UNKNOWN"
    assert all(item["status"] != "OK" for item in payload["checks"])
    # Whatever the time of day (at 23:55 the day is 99 % seen), the headline says what was not seen.
    not_seen = payload["coverage"]["not_seen"]
    assert not_seen, payload["headline"]
    assert "not seen: " in payload["headline"]
    if now - window.start < timedelta(minutes=20):
        return  # nothing collected yet but the first bucket: the whole day is "no data", said as such
    if not not_seen[0].startswith("data until "):
        # Data up to the last 10-minute bucket: the unseen part is the rest of the day, from when it was asked.
        assert len(not_seen) == 1, not_seen
        assert not_seen[0].endswith(" (not over yet)"), not_seen
        asked = datetime.strptime(not_seen[0].split()[1], "%H:%M").replace(
            year=today.year, month=today.month, day=today.day, tzinfo=UTC
        )
        assert now - timedelta(minutes=1) <= asked <= now + timedelta(minutes=2)
        return
    seen_until = datetime.strptime(not_seen[0].split()[2], "%H:%M").replace(
        year=today.year, month=today.month, day=today.day, tzinfo=UTC
    )
    # Said to the 10-minute bucket: the end of the one the data stopped in.
    assert now - timedelta(minutes=20) <= seen_until <= now + timedelta(minutes=10)


def _report(window: Window, buckets: set[int]) -> tuple[Report, Need]:
    from digest.checks.contract import Backend, Need
    from digest.checks.coverage import Fleet, Report, Seen

    need = Need("kube-state-metrics", Backend.METRICS, "up", up_target=True)
    fleet = Fleet(first_seen={}, deleted_after={}, excused={})
    return Report(Grid.of(window), {need: Seen(buckets=buckets)}, {}, fleet), need


def test_a_source_silent_for_the_last_half_hour_is_partial_though_96_percent_was_seen() -> None:
    """Scattered gaps are tolerated to 95 %; a silence running to the window's end (dead since 23:00) is not."""
    from digest.checks.coverage import coverage_of, describe

    window = day_window(CALM, ZoneInfo("UTC"))
    policy = CoveragePolicy()
    scattered, need = _report(window, set(range(144)) - {10, 11, 12, 40, 41, 42})  # 1 h missing, data came back
    judged = coverage_of(scattered, [need], policy)
    assert (judged.fraction, judged.partial) == (0.9583, False)
    dead_since_23, _ = _report(window, set(range(138)))  # the last hour missing: 95.8 % seen, but it never came back
    judged = coverage_of(dead_since_23, [need], policy)
    assert (judged.fraction, judged.partial) == (0.9583, True)
    assert describe(judged, window) == "saw 23 h of 24 h; data until 23:00 (1 h unseen)"
    lagging, _ = _report(window, set(range(142)))  # 20 minutes of ingestion lag: tolerated
    assert not coverage_of(lagging, [need], policy).partial


def test_a_window_asked_before_its_end_is_partial_even_with_every_bucket_seen() -> None:
    """The part of a window that has not happened yet cannot be vouched for: asked at 23:59, every check is partial."""
    from datetime import UTC, datetime

    from digest.checks.coverage import coverage_of, describe
    from digest.pipeline.window import as_asked

    day = day_window(CALM, ZoneInfo("UTC"))
    asked = as_asked(day, datetime(2026, 7, 19, 23, 59, 30, tzinfo=UTC))
    assert asked.asked_at is not None
    assert as_asked(day, datetime(2026, 7, 20, 0, 0, tzinfo=UTC)) == day  # asked at its end: the window is over
    report, need = _report(asked, set(range(144)))
    judged = coverage_of(report, [need], CoveragePolicy())
    assert (judged.fraction, judged.partial) == (1.0, True)
    assert describe(judged, asked) == "after 23:59 (not over yet)"
    from digest.checks.contract import Finding, Status
    from digest.checks.coverage import apply
    from digest.output.render import Renderer
    from digest.pipeline.score import grade

    clean = Finding(name="oom_kills", status=Status.OK, penalty=0, value=0, summary="no OOM kill")
    seen_so_far = apply(clean, judged, asked)
    assert seen_so_far.status is Status.UNKNOWN
    assert seen_so_far.hint == "The window is not over: ask again after 00:00 for all of it."
    text = Renderer().render(grade("homelab", asked, [seen_so_far], (), Policy()), "text")
    assert text.startswith("UNKNOWN · homelab · 2026-07-19 · not seen: after 23:59 (not over yet)\n")
    assert "\nscore 10/10 so far, on what could be seen: 0 of 1 graded checks saw the whole window" in text


def test_a_quiet_log_source_is_not_a_stuck_shipper() -> None:
    """Half an hour without a line is a gap for a node that writes 40 lines a bucket, not for one that writes 2."""
    from digest.checks.coverage import _loud_enough

    policy = CoveragePolicy()
    assert _loud_enough(dict.fromkeys(range(100), 40.0), (100, 102), policy)  # 120 lines expected in 30 min
    assert not _loud_enough(dict.fromkeys(range(100), 2.0), (100, 109), policy)  # 20 expected in 100 min: a lull
    assert _loud_enough(dict.fromkeys(range(100), 2.0), (100, 124), policy)  # 50 expected in 250 min: a gap
    assert _loud_enough({}, (0, 143), policy)  # nothing at all in the window: silent beyond doubt


def test_coverage_off_in_the_policy_vouches_for_nothing() -> None:
    """With coverage disabled nothing is measured: each check's coverage and the top-level "complete" are null."""
    from digest.checks.contract import Finding, Status
    from digest.pipeline.score import grade

    window = day_window(CALM, ZoneInfo("UTC"))
    findings = [Finding(name="oom_kills", status=Status.OK, penalty=0, value=0, summary="no OOM kill")]
    payload = to_json(grade("homelab", window, findings, (), Policy(coverage=CoveragePolicy(enabled=False))))
    assert payload["coverage"]["complete"] is None
    assert payload["checks"][0]["coverage"] is None


async def test_a_node_without_its_conntrack_limit_is_named_not_dropped(variants: EmbeddedBackends) -> None:
    """A node with conntrack entries but no limit series cannot be graded: conntrack is UNKNOWN and names the node."""
    payload = await _digest(variants, VARIANTS["no_limit"].at)
    assert payload["status"] == "UNKNOWN"
    assert f"not seen: node {NODE} (conntrack limit, 24 h)" in str(payload["headline"])
    conntrack = _check(payload, "conntrack")
    assert conntrack["status"] == "UNKNOWN"
    assert f"{NODE} has no limit series" in str(conntrack["error"])
    assert any(f"fill not measured: {NODE} has no limit series" in line for line in conntrack["evidence"])


async def test_an_exporter_rollout_invents_no_kernel_oom_kill_or_drop(variants: EmbeddedBackends) -> None:
    """node_exporter relabelled at noon, counters at their value since boot: no OOM kill, no drop, still OK 10/10."""
    payload = await _digest(variants, VARIANTS["rollout"].at)
    assert (payload["status"], payload["score"]) == ("OK", 10)
    oom = _check(payload, "oom_kills")
    assert oom["status"] == "OK"
    assert not any("kernel" in line or "node_vmstat_oom_kill" in line for line in oom["evidence"])
    conntrack = _check(payload, "conntrack")
    assert conntrack["status"] == "OK"
    assert str(conntrack["summary"]).endswith(", no drops")


async def test_a_fresh_install_at_nine_invents_no_kernel_oom_kill(variants: EmbeddedBackends) -> None:
    """Monitoring that starts at 09:00 is a partial day (data from 09:00), never 8 OOM kills on every node."""
    payload = await _digest(variants, VARIANTS["fresh"].at)
    assert payload["status"] == "UNKNOWN"
    assert "not seen: no data 00:00–08:50" in str(payload["headline"])  # the 09:00 scrape seen in (08:50, 09:00]
    oom = _check(payload, "oom_kills")
    assert not any("kernel" in line or "node_vmstat_oom_kill" in line for line in oom["evidence"])
    assert "dropped" not in str(_check(payload, "conntrack")["summary"])


@pytest.mark.parametrize("variant", ["rollout", "fresh", "interval_change"])
async def test_counters_read_the_same_on_prometheus_after_a_rollout_and_a_fresh_install(
    variants: EmbeddedBackends, variant: str
) -> None:
    """A rollout, a fresh install and a scrape interval change read the same, word for word, on both backends."""
    with PrometheusServer([PrometheusCopy(VARIANTS[variant])]) as prometheus:
        settings = load_settings(
            vm_url=prometheus.url, vl_url=variants.logs.url, cluster="homelab", timezone="UTC", policy_file=None
        )
        config = Config(settings=settings, policy=Policy(trends=TrendsPolicy(enabled=False)))
        on_prometheus = to_json(await make_digest(config, day_window(VARIANTS[variant].at, ZoneInfo("UTC"))))
    on_victoria = await _digest(variants, VARIANTS[variant].at)
    assert (on_prometheus["status"], on_prometheus["score"]) == (on_victoria["status"], on_victoria["score"])
    for name in ("oom_kills", "conntrack", "readiness", "empty_endpoints"):
        mine, theirs = _check(on_prometheus, name), _check(on_victoria, name)
        assert (mine["status"], mine["summary"], mine["evidence"]) == (
            theirs["status"],
            theirs["summary"],
            theirs["evidence"],
        )


@pytest.mark.parametrize("variant", ["shard_down", "shard_gone"])
async def test_a_kube_state_metrics_shard_down_is_named_by_its_target(variants: EmbeddedBackends, variant: str) -> None:
    """One of two kube-state-metrics shards down from 06:00 (up 0 or its target gone) is named: never max(up)."""
    payload = await _digest(variants, VARIANTS[variant].at)
    assert payload["status"] == "UNKNOWN"
    assert f"kube-state-metrics {_SHARDS[1]} down after 06:" in str(payload["headline"])
    assert _SHARDS[0] not in str(payload["headline"])


async def test_a_kube_state_metrics_pod_moved_is_no_blind_spot(variants: EmbeddedBackends) -> None:
    """kube-state-metrics rescheduled at noon under a new instance: the day stays fully seen, OK 10/10."""
    payload = await _digest(variants, VARIANTS["ksm_moved"].at)
    assert (payload["status"], payload["score"]) == ("OK", 10)
    assert "not seen" not in str(payload["headline"])


async def test_an_ha_pair_reads_like_one_scraper(variants: EmbeddedBackends) -> None:
    """Every series twice (replica="prom-0|1"): the same grade and the same words for every check as with one copy."""
    single = await _digest(variants, VARIANTS["oom_day"].at)
    paired = await _digest(variants, VARIANTS["oom_day_ha"].at)
    assert _check(single, "oom_kills")["status"] == "WARN"
    differ = []
    for name in [str(item["name"]) for item in single["checks"]]:  # type: ignore[union-attr]
        mine, theirs = _check(paired, name), _check(single, name)
        keys = ("status", "summary", "error", "evidence")
        if [mine[key] for key in keys] != [theirs[key] for key in keys]:
            differ.append((name, [mine[key] for key in keys], [theirs[key] for key in keys]))
    assert differ == [], "\n".join(map(repr, differ))
    assert (paired["status"], paired["score"]) == (single["status"], single["score"])


async def test_a_rule_evaluator_never_deployed_is_not_watched_and_keeps_the_day_ok(variants: EmbeddedBackends) -> None:
    """No rule evaluator now nor in the 30 days before: alerts not watched, said once, the calm day still OK 10/10."""
    payload = await _digest(variants, VARIANTS["no_evaluator"].at)
    assert (payload["status"], payload["score"]) == ("OK", 10)
    assert "not seen" not in str(payload["headline"])
    assert "alerts" not in [item["name"] for item in payload["checks"]]  # type: ignore[union-attr]
    assert payload["unwatched"] == [
        {"name": "alerts", "never_seen": ["rule evaluator"], "days": 30, "silence": "alerts.enabled"}
    ]
    digest = await make_digest(_config(variants), day_window(VARIANTS["no_evaluator"].at, ZoneInfo("UTC")))
    text = Renderer().render(digest, "text")
    assert "Not watched here: alerts (no rule evaluator in 30 days) · alerts.enabled: false in the policy" in text
    assert "could not be checked" not in text
    assert "not checked" not in text


async def test_a_rule_evaluator_seen_before_and_missing_today_is_a_blind_spot(variants: EmbeddedBackends) -> None:
    """A rule evaluator scraped on earlier days and absent today is unseen, named in the headline, as before."""
    payload = await _digest(variants, VARIANTS["evaluator_gone"].at)
    assert payload["status"] == "UNKNOWN"
    assert "not seen: rule evaluator (24 h)" in str(payload["headline"])


async def test_a_namespace_whose_logs_are_lost_is_unseen_not_quiet(variants: EmbeddedBackends) -> None:
    """Namespace feeds logged the day before and its pods ran today, but no line of it came: the log checks name it."""
    policy = Policy(trends=TrendsPolicy(days=1))
    before = await _digest(variants, VARIANTS["feeds_logged"].at, policy)
    assert (before["status"], before["score"]) == ("OK", 10)  # the day before had no earlier day to compare with
    payload = await _digest(variants, VARIANTS["feeds_lost"].at, policy)
    assert payload["status"] == "UNKNOWN"
    assert "not seen: logs of namespace feeds (24 h)" in str(payload["headline"])
    error_lines = _check(payload, "error_lines")
    assert error_lines["status"] == "UNKNOWN"
    assert "feeds" not in str(_check(payload, "conntrack")["coverage"])  # the metrics checks saw all they read
    assert "route" not in str(payload["headline"])  # every route logged on both days


async def test_a_route_whose_access_log_is_lost_is_unseen_not_clean(variants: EmbeddedBackends) -> None:
    """shop/api's route had requests the day before and none today, shop's pods running: envoy_flags names it."""
    payload = await _digest(variants, VARIANTS["route_lost"].at, Policy(trends=TrendsPolicy(days=1)))
    envoy = _check(payload, "envoy_flags")
    assert envoy["status"] == "UNKNOWN", envoy
    assert "access log of route httproute/shop/api/rule/0 (24 h)" in str(payload["headline"])
    assert "Does the gateway still log httproute/shop/api/rule/0" in str(envoy["hint"])
    assert "route" not in str(_check(payload, "error_lines")["coverage"])  # the app logs are whole


async def test_namespaces_that_log_or_never_logged_are_not_named(variants: EmbeddedBackends) -> None:
    """A full calm day after another: namespaces with pods but no lines on either day are not named, OK 10/10."""
    payload = await _digest(variants, VARIANTS["feeds_logged"].at, Policy(trends=TrendsPolicy(days=1)))
    assert (payload["status"], payload["score"]) == ("OK", 10)
    assert "namespace" not in str(payload["headline"])


async def test_a_node_replaced_by_one_reusing_its_ip_is_no_blind_spot(variants: EmbeddedBackends) -> None:
    """pi5-3 replaced at noon by pi5-4 at the same IP (exporters by IP): each node seen while it existed, OK 10/10."""
    payload = await _digest(variants, VARIANTS["replaced"].at)
    assert "not seen" not in str(payload["headline"])
    assert (payload["status"], payload["score"]) == ("OK", 10)


async def test_a_scrape_interval_change_keeps_durations_right_in_each_part(variants: EmbeddedBackends) -> None:
    """30 s scrapes until noon, 5 min after: shop/api's 40 minutes unready read as 40 minutes, CRIT, said once."""
    payload = await _digest(variants, VARIANTS["interval_change"].at)
    readiness = _check(payload, "readiness")
    assert readiness["status"] == "CRIT"
    for offender in readiness["offenders"]:  # type: ignore[union-attr]
        assert 35 * 60 <= offender["facts"]["not_ready_seconds"]["value"] <= 45 * 60, offender
    empty = _check(payload, "empty_endpoints")
    assert empty["status"] == "CRIT"
    [api] = [o for o in empty["offenders"] if o["labels"]["service"] == "api"]  # type: ignore[union-attr]
    assert 35 * 60 <= api["facts"]["empty_seconds"]["value"] <= 45 * 60, api
    said = "scrape interval 30 s until 12:00, 5 min after"
    assert any(line.startswith(said) for line in empty["evidence"]), empty["evidence"]
    assert any(line.startswith(said) for line in readiness["evidence"]), readiness["evidence"]


async def test_a_node_without_the_kernel_oom_counter_is_named_in_the_cross_check(variants: EmbeddedBackends) -> None:
    """pi5-1's node_exporter without node_vmstat_oom_kill: the cross-check says it is blind there, not "no kill"."""
    payload = await _digest(variants, VARIANTS["no_kernel_counter"].at)
    oom = _check(payload, "oom_kills")
    assert f"kernel cross-check blind on {NODE}: no node_vmstat_oom_kill" in oom["evidence"]  # type: ignore[operator]

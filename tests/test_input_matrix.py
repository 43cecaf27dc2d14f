"""The input matrix: each check × each input it declares × one entity, generated from the registry; fleet changes.

The ablation matrix (`tests.test_coverage_ablations`) cuts whole parts of the monitoring; this one asks each check,
input by input, what it does when one entity lacks that input — the way real clusters fail. The cases are generated
from what the checks declare (`Check.needs`), so a new check or a new input is in the matrix without editing it:

* a per-node metrics input (node_exporter's conntrack entries, the conntrack limit, cAdvisor): that series family
  gone on one node;
* a scraped target (kube-state-metrics, the rule evaluator): a second target of its job, down from 06:00 (one shard of
  two, one evaluator of an HA pair);
* the pods' logs: one node's lines gone;
* the gateway's access log: the flag field gone from one route's records (the 5xx are then unclassifiable);
* an optional input no corpus day holds (Istio) is listed as not applicable, never counted as passed.

Each ablated day is loaded beside its full day into one VictoriaMetrics + VictoriaLogs pair, each at a date of its own
(ten days apart). For every combination: every check that declared the input is not OK, and the digest is never better
than the full day without the entity named in its headline.

The fleet-change family (`tests.test_coverage` builds them) must read like the full day: a node replaced by one
reusing its IP, an exporter DaemonSet rollout, kube-state-metrics' pod moved, every series from an HA pair — no blind
spot, no invented event; a fresh install at 09:00 is partial up to 09:00 and invents no kill. The test prints the
number of combinations.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from digest.app.engine import Config, make_digest
from digest.app.settings import load_settings
from digest.checks import registry
from digest.checks.contract import Backend, Need
from digest.output.render import to_json
from digest.pipeline.policy import Policy, TrendsPolicy
from digest.pipeline.window import day_window
from digest.testbed.corpus.model import Series
from digest.testbed.embedded import EmbeddedBackends, loaded_backends
from digest.testbed.snapshots import binary_identity, snapshot_key
from tests.test_coverage import VARIANTS as FLEET_VARIANTS
from tests.test_coverage import load_copies, wait_for_copies
from tests.test_coverage_ablations import Ablation, Copy, _cut, _keep_line, _keep_series

CALM = date(2026, 7, 19)
RACE = date(2026, 8, 16)  # seed 004: 35 × UC on shop/api, the day with flagged 5xx in the access log
NODE = "pi5-1"
FIRST = date(2022, 1, 1)
SPACING_DAYS = 10
ROUTE = b"httproute/shop/api/"
FLAGS = re.compile(rb'\\"response_flags\\":\\"[^\\"]*\\",')


@dataclass(frozen=True)
class Case:
    """One input of the checks that declare it, and how one entity loses it (None: no corpus day holds it)."""

    need: Need
    checks: tuple[str, ...]
    entity: str = ""
    day: date = CALM
    ablation: Ablation | None = None


def _metric(need: Need) -> str:
    return need.query.split("{", 1)[0]


def _on_node(series: Series) -> bool:
    return series.labels.get("instance", "").split(":", 1)[0] == NODE or series.labels.get("node") == NODE


def _family_gone_on_node(metric: str) -> Callable[[Series, int, str], Series | None]:
    def series(one: Series, _start: int, _node: str) -> Series | None:
        return None if one.labels["__name__"] == metric and _on_node(one) else one

    return series


def _family_stops_on_node(metric: str, hour: int) -> Callable[[Series, int, str], Series | None]:
    def series(one: Series, start: int, _node: str) -> Series | None:
        if one.labels["__name__"] != metric or not _on_node(one):
            return one
        return _cut(one, (start + hour * 3600) * 1000)

    return series


def _second_target_down(job: str) -> Callable[[Series, int, str], Sequence[Series] | Series | None]:
    """A second target of ``job`` (a shard, an HA peer), up until 06:00 and down after."""
    pattern = re.compile(job)

    def series(one: Series, start: int, _node: str) -> Sequence[Series] | Series | None:
        if one.labels["__name__"] != "up" or not pattern.fullmatch(one.labels.get("job", "")):
            return one
        six = (start + 6 * 3600) * 1000
        values = [1.0 if t < six else 0.0 for t in one.timestamps_ms]
        return [one, Series({**one.labels, "instance": "10.42.9.9:8080"}, one.timestamps_ms, values)]

    return series


def _job(need: Need) -> str:
    found = re.search(r'job=~"([^"]*)"', need.query)
    return found.group(1) if found else ".*"


def _node_lines_gone(line: bytes, _clock: str, _node: str) -> bool:
    return f'"pod_node_name":"{NODE}"'.encode() not in line


def _route_unflagged(line: bytes, _clock: str, _node: str) -> bool | bytes:
    if ROUTE in line and b"response_flags" in line:
        return FLAGS.sub(b"", line)
    return True


def _case(need: Need, checks: tuple[str, ...]) -> Case:
    """How one entity loses ``need``: generated from what kind of input it is."""
    if need.backend is Backend.METRICS and need.per_node and need.own_nodes:
        # An input expected only where it was (the kernel OOM counter): one node's series stops mid-window.
        name = f"{_metric(need)} stops on node {NODE} at 10:00"
        return Case(
            need,
            checks,
            f"node {NODE}",
            CALM,
            Ablation(name, _family_stops_on_node(_metric(need), 10), _keep_line, _no),
        )
    if need.backend is Backend.METRICS and need.per_node:
        name = f"{_metric(need)} gone on node {NODE}"
        return Case(
            need, checks, f"node {NODE}", CALM, Ablation(name, _family_gone_on_node(_metric(need)), _keep_line, _no)
        )
    if need.backend is Backend.METRICS and need.up_target:
        name = f"a second {need.label} target down from 06:00"
        return Case(
            need,
            checks,
            "target 10.42.9.9:8080",
            CALM,
            Ablation(name, _second_target_down(_job(need)), _keep_line, _no),
        )
    if need.backend is Backend.LOGS and need.per_node:
        return Case(
            need, checks, f"node {NODE}", CALM, Ablation(f"logs of {NODE} gone", _keep_series, _node_lines_gone, _no)
        )
    if need.backend is Backend.LOGS:
        name = "response_flags gone from shop/api's records"
        return Case(need, checks, "route shop/api", RACE, Ablation(name, _keep_series, _route_unflagged, _no))
    return Case(need, checks)  # an optional metrics input no corpus day holds (Istio's)


def _no(_node: str) -> tuple[str, ...]:
    return ()


def cases() -> list[Case]:
    """Every input the enabled checks declare, with the checks that declare it."""
    policy = Policy()
    by_need: dict[Need, list[str]] = {}
    for entry in registry.CHECKS:
        if not policy.enabled(entry.name):
            continue
        for need in entry.build(getattr(policy, entry.name)).needs():
            by_need.setdefault(need, []).append(entry.name)
    return [_case(need, tuple(names)) for need, names in by_need.items()]


CASES = cases()
FULL = Ablation("full day", _keep_series, _keep_line, _no)
FLEET = ("replaced", "rollout", "ksm_moved", "oom_day_ha", "fresh")


@dataclass
class Loaded:
    """The backend pair and the copies it holds, by case."""

    backends: EmbeddedBackends
    copies: dict[str, Copy] = field(default_factory=dict)


def _copies() -> dict[str, Copy]:
    copies: dict[str, Copy] = {}
    at = FIRST

    def add(key: str, day: date, ablation: Ablation) -> None:
        nonlocal at
        copies[key] = Copy(day, ablation, at)
        at = date.fromordinal(at.toordinal() + SPACING_DAYS)

    for day in sorted({case.day for case in CASES if case.ablation is not None}):
        add(f"full {day}", day, FULL)
    for case in CASES:
        if case.ablation is not None:
            add(case.need.label, case.day, case.ablation)
    for name in FLEET:
        variant = FLEET_VARIANTS[name]
        add(f"fleet {name}", variant.day, variant.ablation)
    add("full oom day", FLEET_VARIANTS["oom_day"].day, FULL)
    return copies


def _loader(copies: dict[str, Copy]) -> Callable[[EmbeddedBackends], dict[str, Any]]:
    def load(backends: EmbeddedBackends) -> dict[str, Any]:
        manifest: dict[str, Any] = {"lines": load_copies(backends, copies.values()), "copies": _listed(copies)}
        _verifier(copies)(backends, manifest)
        return manifest

    return load


def _listed(copies: dict[str, Copy]) -> list[list[str]]:
    return [[key, copy.day.isoformat(), copy.at.isoformat()] for key, copy in copies.items()]


def _verifier(copies: dict[str, Copy]) -> Callable[[EmbeddedBackends, dict[str, Any]], None]:
    def verify(backends: EmbeddedBackends, manifest: dict[str, Any]) -> None:
        # The snapshot's key covers checks/, which the matrix is derived from; a kept copy list that differs from
        # today's would still be a stale store, and fails here rather than grading the wrong copies.
        assert manifest["copies"] == _listed(copies), "the kept matrix is not today's: remove the snapshot"
        wait_for_copies(backends, copies.values(), manifest["lines"])

    return verify


@pytest.fixture(scope="module")
def loaded() -> Iterator[Loaded]:
    """Every copy of the matrix in one backend pair (kept as a snapshot between runs: testbed.snapshots)."""
    copies = _copies()
    here = Path(__file__).resolve()
    snapshot = snapshot_key(
        "input-matrix",
        # The matrix is derived from what the checks declare (checks/), and made with the coverage modules' helpers.
        [
            here,
            here.with_name("test_coverage.py"),
            here.with_name("test_coverage_ablations.py"),
            here.parent.parent / "checks",
        ],
        binary_identity("victoria-metrics"),
        binary_identity("victoria-logs"),
    )
    what = f"{len(copies)} input-matrix copies: VictoriaMetrics + VictoriaLogs"
    with loaded_backends(what, snapshot, _loader(copies), _verifier(copies)) as backends:
        yield Loaded(backends, copies)


async def _digest(backends: EmbeddedBackends, at: date) -> dict[str, object]:
    settings = load_settings(
        vm_url=backends.metrics.url, vl_url=backends.logs.url, cluster="homelab", timezone="UTC", policy_file=None
    )
    config = Config(settings=settings, policy=Policy(trends=TrendsPolicy(enabled=False)))
    return to_json(await make_digest(config, day_window(at, ZoneInfo("UTC"))))


_RANK = {"OK": 3, "WARNING": 2, "CRITICAL": 1, "UNKNOWN": 0}


def _checks(payload: dict[str, object]) -> dict[str, dict[str, object]]:
    items = payload["checks"]
    assert isinstance(items, list)
    return {str(item["name"]): item for item in items}


async def test_every_input_of_every_check_on_one_entity_and_every_fleet_change(loaded: Loaded) -> None:
    """Each input lost on one entity: its checks never OK, never better unnamed; fleet changes change nothing."""
    keys = list(loaded.copies)
    bound = asyncio.Semaphore(4)

    async def one(key: str) -> dict[str, object]:
        async with bound:
            return await _digest(loaded.backends, loaded.copies[key].at)

    digests = dict(zip(keys, await asyncio.gather(*(one(key) for key in keys)), strict=True))
    failures: list[str] = []
    combinations = 0
    for case in CASES:
        label = f"{case.need.label} × {', '.join(case.checks)}"
        if case.ablation is None:
            print(f"n/a  {label}: no corpus day holds this input")
            continue
        digest, full = digests[case.need.label], digests[f"full {case.day}"]
        headline = str(digest["headline"])
        print(f"{case.entity:<24} {label:<70} {headline}")
        for name in case.checks:
            combinations += 1
            if _checks(digest)[name]["status"] == "OK":
                failures.append(f"{name} OK without {case.need.label} on {case.entity}: {headline}")
        better = _RANK[str(digest["status"])] > _RANK[str(full["status"])]
        if (better or digest["status"] == "OK") and "not seen" not in headline:
            failures.append(f"{case.need.label} on {case.entity}: {headline} (full day: {full['headline']})")
    for name in FLEET:
        combinations += 1
        digest = digests[f"fleet {name}"]
        headline = str(digest["headline"])
        print(f"fleet change {name:<24} {headline}")
        if name == "fresh":
            oom = _checks(digest)["oom_kills"]
            if any("kernel" in line for line in oom["evidence"]):  # type: ignore[union-attr]
                failures.append(f"fresh install invented a kernel OOM kill: {oom['evidence']}")
            continue
        full = digests["full oom day"] if name == "oom_day_ha" else digests[f"full {CALM}"]
        if "not seen" in headline or (digest["status"], digest["score"]) != (full["status"], full["score"]):
            failures.append(f"fleet change {name}: {headline} (full day: {full['headline']})")
    print(
        f"input matrix: {combinations} combinations ({len(CASES)} inputs × the checks declaring them, one entity "
        f"each, + {len(FLEET)} fleet changes)"
    )
    assert combinations >= len(CASES) + len(FLEET)
    assert not failures, "\n".join(failures)

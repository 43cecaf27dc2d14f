"""The ablation matrix: every corpus day with part of its monitoring removed, digested on real backends.

Monitoring fails partly far more often than wholly: an exporter dies at 01:00, one node's node_exporter or log
shipper is gone, kube-state-metrics stops at noon. For every corpus day × each ablation below, the day is loaded with
that part removed into one VictoriaMetrics + VictoriaLogs pair, shifted to a date of its own (ten days apart, so
that no copy sees another in its look-backs), next to an unablated copy of the same day; then:

(a) the digest is never OK;
(b) it never scores better than the full day without naming the unseen part;
(c) its headline names the missing part.

Cheap enough for the default suite: the storm day's flood is thinned to one line in a hundred (its thresholds scaled
with it, in this test's policy for that day only), and trends are off (they do not grade).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest

from digest.app.engine import Config, make_digest
from digest.app.settings import load_settings
from digest.output.render import to_json
from digest.pipeline.policy import Policy, TrendsPolicy
from digest.pipeline.window import day_window
from digest.testbed.corpus import DAYS, scaled
from digest.testbed.corpus.model import CorpusDay, Series
from digest.testbed.embedded import EmbeddedBackends, loaded_backends
from digest.testbed.snapshots import binary_identity, snapshot_key

FIRST_COPY = date(2023, 6, 1)
SPACING_DAYS = 10
STORM = date(2026, 7, 20)
STORM_THINNING = 100  # keep one storm line in this many
# The node each day's incident lives on: removing that one hides the most.
KEY_NODE = {STORM: "pi5-2", date(2026, 10, 5): "pi5-3"}
ENVOY = (b'"container_name":"envoy"', b'"pod_namespace":"envoy-gateway-system"')


@dataclass(frozen=True)
class Ablation:
    """One way monitoring fails partly: what it drops, and the words the headline must then carry."""

    name: str
    # (series, day start in s, node) → kept part, None, or several series (one relabelled mid-day)
    series: Callable[[Series, int, str], Series | Sequence[Series] | None]
    lines: Callable[[bytes, str, str], bool | bytes]  # (record, "HH:MM:SS", node) → keep, or the record rewritten
    says: Callable[[str], tuple[str, ...]]  # node → phrases the headline must contain


def _keep_series(series: Series, _start: int, _node: str) -> Series | None:
    return series


def _keep_line(_line: bytes, _clock: str, _node: str) -> bool:
    return True


def _cut(series: Series, before_ms: int, after_ms: int | None = None) -> Series | None:
    """The samples outside [before_ms, after_ms) of ``series`` (None when nothing is left)."""
    pairs = [
        (t, v)
        for t, v in zip(series.timestamps_ms, series.values, strict=True)
        if t < before_ms or (after_ms is not None and t >= after_ms)
    ]
    if not pairs:
        return None
    return Series(series.labels, [t for t, _ in pairs], [v for _, v in pairs])


def cut_after(hour: int) -> Ablation:
    """Every sample and log line after ``hour``:00 of the day gone: the exporters and the shipper died then."""

    def series(one: Series, start: int, _node: str) -> Series | None:
        return _cut(one, (start + hour * 3600) * 1000)

    return Ablation(
        f"everything cut after {hour:02d}:00",
        series,
        lambda _line, clock, _node: clock < f"{hour:02d}:00:00",
        lambda _node: (f"data until {hour:02d}:00",),
    )


def _node_exporter_of(one: Series, node: str) -> bool:
    return one.labels.get("instance") == f"{node}:9100"


def _absent_exporter(one: Series, _start: int, node: str) -> Series | None:
    return None if _node_exporter_of(one, node) else one


def _exporter_down(one: Series, _start: int, node: str) -> Series | None:
    if not _node_exporter_of(one, node):
        return one
    if one.labels["__name__"] == "up":
        return Series(one.labels, one.timestamps_ms, [0.0] * len(one.values))
    return None


def _ksm_gone_at_noon(one: Series, start: int, _node: str) -> Series | None:
    if one.labels.get("job") != "kube-state-metrics":
        return one
    return _cut(one, (start + 12 * 3600) * 1000, (start + 86400 + 1800) * 1000 + 1)


def _cadvisor_absent(one: Series, _start: int, node: str) -> Series | None:
    is_cadvisor = one.labels.get("metrics_path") == "/metrics/cadvisor"
    return None if is_cadvisor and one.labels.get("instance") == node else one


def _node_of(line: bytes, node: str) -> bool:
    return f'"pod_node_name":"{node}"'.encode() in line


ABLATIONS = (
    cut_after(1),
    cut_after(5),
    Ablation(
        "one node's node_exporter absent",
        _absent_exporter,
        _keep_line,
        lambda node: (f"node {node} (node_exporter, 24 h)",),
    ),
    Ablation(
        "one node's node_exporter down (up = 0)",
        _exporter_down,
        _keep_line,
        lambda node: (f"node {node} (node_exporter, 24 h)",),
    ),
    Ablation(
        "one node's logs absent",
        _keep_series,
        lambda line, _clock, node: not _node_of(line, node),
        lambda node: (f"logs from {node} (24 h)",),
    ),
    Ablation(
        "one node's logs absent after noon",
        _keep_series,
        lambda line, clock, node: not (_node_of(line, node) and clock >= "12:00:00"),
        lambda node: (f"logs from {node} after 12:00",),
    ),
    Ablation("kube-state-metrics gone at noon", _ksm_gone_at_noon, _keep_line, lambda _node: ("kube-state-metrics",)),
    Ablation("one node's cAdvisor absent", _cadvisor_absent, _keep_line, lambda node: (f"node {node} (cAdvisor",)),
    Ablation(
        "Envoy access logs gone after noon",
        _keep_series,
        lambda line, clock, _node: not (all(part in line for part in ENVOY) and clock >= "12:00:00"),
        lambda _node: ("access logs after 12:00",),
    ),
)
FULL = Ablation("full day", _keep_series, _keep_line, lambda _node: ())


@dataclass(frozen=True)
class Copy:
    """One (possibly ablated) corpus day, loaded at its own date."""

    day: date
    ablation: Ablation
    at: date

    @property
    def node(self) -> str:
        return KEY_NODE.get(self.day, "pi5-1")


def _copies() -> list[Copy]:
    copies: list[Copy] = []
    for day in sorted(DAYS):
        for ablation in (FULL, *ABLATIONS):
            copies.append(Copy(day, ablation, FIRST_COPY + timedelta(days=SPACING_DAYS * len(copies))))
    return copies


COPIES = _copies()


def _day_start(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())


def _corpus(day: date) -> CorpusDay:
    return scaled(DAYS[day], 0.01)


@functools.lru_cache(maxsize=1)  # copies come day by day: each day is generated once
def _day_series(day: date) -> tuple[Series, ...]:
    return tuple(_corpus(day).series())


@functools.lru_cache(maxsize=1)
def _day_lines(day: date) -> tuple[bytes, ...]:
    """The day's log records, the storm's thinned to one in ``STORM_THINNING``."""
    storm = b'"pod_name":"feed-aggregator-' if day == STORM else None
    kept: list[bytes] = []
    seen_storm = 0
    for chunk in _corpus(day).log_chunks():
        for line in chunk.split(b"\n"):
            if not line:
                continue
            if storm is not None and storm in line:
                seen_storm += 1
                if seen_storm % STORM_THINNING:
                    continue
            kept.append(line)
    return tuple(kept)


@functools.lru_cache(maxsize=1)
def _day_heads(day: date) -> tuple[bytes, ...]:
    """Each series of the day as its import line up to its timestamps: ``{"metric":…,"values":[…],"timestamps":[``.

    Most ablations keep most series whole, and a copy differs from the day only in its timestamps: encoding each
    series' labels and values once per day instead of once per copy is most of what building the matrix costs.
    """
    heads = []
    marker = b',"timestamps":['
    for one in _day_series(day):
        line = one.to_import_line()  # Series.to_import_line writes metric, values, then timestamps, on one line
        heads.append(line[: line.rindex(marker) + len(marker)])
    return tuple(heads)


def _series(copy: Copy) -> Iterator[bytes]:
    start = _day_start(copy.day)
    shift_ms = (_day_start(copy.at) - start) * 1000
    for one, head in zip(_day_series(copy.day), _day_heads(copy.day), strict=True):
        kept = copy.ablation.series(one, start, copy.node)
        if kept is one:
            yield head + ",".join(map(str, [t + shift_ms for t in one.timestamps_ms])).encode() + b"]}\n"
        elif kept is not None:
            for part in (kept,) if isinstance(kept, Series) else kept:
                yield Series(part.labels, [t + shift_ms for t in part.timestamps_ms], part.values).to_import_line()


@dataclass(frozen=True)
class PrometheusCopy:
    """A copy as the Prometheus testbed backfills it: the day's series, ablated and moved to its date.

    ``time_valued`` names the series whose values are times (unix seconds), moved by as much as the timestamps, as
    the VictoriaMetrics side of the same test moves them (tests/test_cluster_shapes.py); () leaves values as they are.
    """

    copy: Copy
    time_valued: tuple[str, ...] = ()

    @property
    def date(self) -> date:
        return self.copy.at

    def series(self) -> Iterator[Series]:
        start = _day_start(self.copy.day)
        shift = _day_start(self.copy.at) - start
        for one in _day_series(self.copy.day):
            kept = self.copy.ablation.series(one, start, self.copy.node)
            for part in () if kept is None else (kept,) if isinstance(kept, Series) else kept:
                values = part.values
                if part.labels["__name__"] in self.time_valued:
                    values = [value + shift for value in values]
                yield Series(part.labels, [t + shift * 1000 for t in part.timestamps_ms], values)


def _lines(copy: Copy, counter: list[int]) -> Iterator[bytes]:
    old = f'"timestamp":"{copy.day.isoformat()}T'.encode()
    new = f'"timestamp":"{copy.at.isoformat()}T'.encode()
    lines = _day_lines(copy.day)
    for first in range(0, len(lines), 20_000):
        kept: list[bytes] = []
        for line in lines[first : first + 20_000]:
            where = line.rfind(old)
            clock = line[where + len(old) : where + len(old) + 8].decode()
            verdict = copy.ablation.lines(line, clock, copy.node)
            if verdict is True:
                kept.append(line)
            elif verdict:  # the record rewritten (a node renamed after its replacement)
                kept.append(verdict)
        counter[0] += len(kept)
        if kept:
            yield (b"\n".join(kept) + b"\n").replace(old, new)


def _wait_for_metrics(backends: EmbeddedBackends, timeout_seconds: float = 120.0) -> None:
    """Bounded poll until every copy's kube_node_info (all copies keep it at 00:30) is visible."""
    deadline = time.monotonic() + timeout_seconds
    pending = list(COPIES)
    while pending and time.monotonic() < deadline:
        still: list[Copy] = []
        for copy in pending:
            at = datetime(copy.at.year, copy.at.month, copy.at.day, 0, 30, tzinfo=UTC).isoformat()
            answer = httpx.post(
                f"{backends.metrics.url}/api/v1/query", data={"query": "count(kube_node_info)", "time": at}, timeout=30
            ).json()
            result = answer.get("data", {}).get("result", [])
            if not result or float(result[0]["value"][1]) < 3:
                still.append(copy)
        pending = still
        if pending:
            httpx.get(f"{backends.metrics.url}/internal/force_flush", timeout=30)
            time.sleep(0.2)
    assert not pending, f"{len(pending)} copies not visible in VictoriaMetrics after {timeout_seconds:g} s"


def _load_copies(backends: EmbeddedBackends) -> dict[str, object]:
    counter = [0]
    for copy in COPIES:
        backends.import_series(_series(copy))
        backends.ingest_logs(_lines(copy, counter))
    manifest: dict[str, object] = {"lines": counter[0]}
    _verify_copies(backends, manifest)
    return manifest


def _verify_copies(backends: EmbeddedBackends, manifest: dict[str, object]) -> None:
    """Bounded polls until every copy's metrics and all of the copies' log lines are visible."""
    _wait_for_metrics(backends)
    first = datetime(FIRST_COPY.year, FIRST_COPY.month, FIRST_COPY.day, tzinfo=UTC)
    last = datetime(COPIES[-1].at.year, COPIES[-1].at.month, COPIES[-1].at.day, tzinfo=UTC) + timedelta(days=1)
    lines = manifest["lines"]
    assert isinstance(lines, int)
    backends.wait_for_logs(first, last, lines, timeout_seconds=180)


@pytest.fixture(scope="module")
def ablated_backends() -> Iterator[EmbeddedBackends]:
    """One backend pair holding every copy of the matrix (kept as a snapshot between runs: testbed.snapshots)."""
    snapshot = snapshot_key(
        "coverage-ablations",
        [Path(__file__)],
        binary_identity("victoria-metrics"),
        binary_identity("victoria-logs"),
    )
    what = f"{len(COPIES)} ablated copies: VictoriaMetrics + VictoriaLogs"
    with loaded_backends(what, snapshot, _load_copies, _verify_copies) as backends:
        yield backends


def _policy(day: date) -> Policy:
    policy = Policy(trends=TrendsPolicy(enabled=False))
    if day != STORM:
        return policy
    # The storm is thinned a hundredfold: so are the thresholds that read its volume.
    errors = replace(policy.error_lines, warn_lines=50_000 // STORM_THINNING, crit_lines=500_000 // STORM_THINNING)
    storms = replace(policy.log_storms, budget_per_minute=1_000 // STORM_THINNING)
    return replace(policy, error_lines=errors, log_storms=storms)


async def _digest_of(backends: EmbeddedBackends, copy: Copy) -> dict[str, object]:
    settings = load_settings(
        vm_url=backends.metrics.url, vl_url=backends.logs.url, cluster="homelab", timezone="UTC", policy_file=None
    )
    config = Config(settings=settings, policy=_policy(copy.day))
    return to_json(await make_digest(config, day_window(copy.at, ZoneInfo("UTC"))))


async def test_no_ablation_reads_ok_or_better_unnamed(ablated_backends: EmbeddedBackends) -> None:
    """Every corpus day × every ablation: never OK, never better than the full day unnamed, the gap in the headline."""
    bound = asyncio.Semaphore(4)  # a few digests at a time, as a replay runs them

    async def one(copy: Copy) -> dict[str, object]:
        async with bound:
            return await _digest_of(ablated_backends, copy)

    digests = await asyncio.gather(*(one(copy) for copy in COPIES))
    full = {copy.day: digest for copy, digest in zip(COPIES, digests, strict=True) if copy.ablation is FULL}
    failures: list[str] = []
    ran = 0
    for copy, digest in zip(COPIES, digests, strict=True):
        expected = DAYS[copy.day].expected
        if copy.ablation is FULL:
            # The thinned storm keeps its grade: the baseline is the day as the corpus means it.
            if (digest["status"], digest["score"]) != (expected.status, expected.score):
                failures.append(f"{copy.day} full day: {digest['headline']}")
            continue
        ran += 1
        headline = str(digest["headline"])
        print(f"{copy.day} · {copy.ablation.name:<38} · {headline}")
        where = f"{copy.day} {copy.ablation.name} ({copy.node}): {headline}"
        if digest["status"] == "OK":
            failures.append(f"(a) OK: {where}")
        score, baseline = digest["score"], full[copy.day]["score"]
        if isinstance(score, int) and isinstance(baseline, int) and score > baseline and "not seen:" not in headline:
            failures.append(f"(b) better than the full day ({baseline}) with nothing named: {where}")
        for words in copy.ablation.says(copy.node):
            if words not in headline:
                failures.append(f"(c) headline lacks {words!r}: {where}")
    print(
        f"ablation matrix: {ran} combinations ({len(DAYS)} days × {len(ABLATIONS)} ablations) + {len(full)} full days"
    )
    assert ran == len(DAYS) * len(ABLATIONS)
    assert not failures, "\n".join(failures)

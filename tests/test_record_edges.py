"""Recorded counts on a minute's edge: each line counted once, in its own minute, whatever its timestamp's precision.

An hour of pod logs whose lines sit on the minutes' edges (``10:05:00`` exactly), in their first second, mid-minute
and on their last instant, stamped in seconds, milliseconds and nanoseconds (unix numbers, as shippers send them)
and in RFC 3339, is loaded into a real VictoriaLogs. A real vmalert replays `digest rules --for vmalert --replay`
over the hour into a VictoriaMetrics without deduplication: each of its range requests shares a boundary with the
next, and VictoriaLogs answers a bucket at both ends, so every minute that has lines on its edge is written twice
with one timestamp, once whole and once with only those lines (issue 53). The live rules, asked as vmalert asks them
at each minute, count [t − 60 s, t) exactly.

This VictoriaLogs (built from Debian trixie's source) answers such a two-bucket request with both buckets, and now
and then stamps both alike (measured: 4 of 90 answers), so which sample is the minute cannot be told: the digest
finds the minutes written twice with different counts and scans the window, saying why, rather than read a count
that may be short or long. A VictoriaLogs with the fix of its issue 587 answers one bucket per request, and the
minutes are read from the records. Checked here: the premise (two samples at one timestamp), the digest of the hour
equal to the scanned one with the reason named, the live rules exact on the edges at every precision — on
VictoriaLogs, and on a real Loki the rules `digest rules --for loki` writes, asked as its ruler asks them (``[1m]
offset 1ns``: [t − 60 s, t)).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import yaml

from digest.backends.loki import rfc3339_nanos, unix_nanos
from digest.testbed.embedded import EmbeddedBackends, Server, free_port
from digest.testbed.loki_server import LokiServer, loki_binary_or_skip
from tests.command import backend_env, clean_env, run_digest
from tests.test_recorded_counts import flush_and_wait, replay, rfc3339

START = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
END = START + timedelta(hours=1)
NODE = "edge-node-1"


def _stamp(moment: datetime, precision: str) -> int | str:
    """``moment`` as a shipper writes it: unix seconds, milliseconds or nanoseconds, or RFC 3339."""
    whole = int(moment.timestamp())
    nanos = whole * 10**9 + moment.microsecond * 1000
    if precision == "s":
        return whole
    if precision == "ms":
        return nanos // 10**6
    if precision == "ns":
        return nanos
    return moment.isoformat().replace("+00:00", "Z")


def _offsets(precision: str) -> tuple[float, ...]:
    """Seconds into each minute where a line sits: the edge, its first second, mid-minute, the last instant."""
    if precision == "s":
        return (0.0, 1.0, 30.0, 59.0)
    return (0.0, 0.5, 30.25, 59.999)


def _record(moment: datetime, precision: str, error: bool) -> dict[str, Any]:
    pod = f"stamp-{precision}-7c9d5b8f4-x2k9q"
    return {
        "kubernetes": {
            "container_name": "app",
            "pod_name": pod,
            "pod_namespace": "edges",
            "pod_node_name": NODE,
            "pod_uid": f"uid-{precision}",
        },
        "message": f"{'ERROR' if error else 'INFO'} edges.{precision} line at {moment.isoformat()}",
        "source_type": "kubernetes_logs",
        "stream": "stderr" if error else "stdout",
        "timestamp": _stamp(moment, precision),
    }


def _lines() -> list[dict[str, Any]]:
    lines = []
    for minute in range(60):
        base = START + timedelta(minutes=minute)
        for precision in ("s", "ms", "ns", "rfc3339"):
            for index, offset in enumerate(_offsets(precision)):
                # Errors on the edge every third minute: the error column crosses the boundary too.
                error = index == 0 and minute % 3 == 0
                lines.append(_record(base + timedelta(seconds=offset), precision, error))
    # The hour's own end: a line exactly at 11:00, which belongs to the next hour and must not be counted in this one.
    lines.append(_record(END, "ns", True))
    return lines


def _edge_minutes(lines: list[dict[str, Any]]) -> set[datetime]:
    """The minutes whose very first instant has a line (the replay writes those twice)."""
    found = set()
    for line in lines:
        text = line["message"].rsplit(" at ", 1)[1]
        moment = datetime.fromisoformat(text)
        if moment.second == 0 and moment.microsecond == 0:
            found.add(moment)
    return found


@dataclass(frozen=True)
class Edges:
    """The hour's logs, and the records a replay wrote of them."""

    backends: EmbeddedBackends
    records: Server
    heartbeat: str
    lines: int


@pytest.fixture(scope="module")
def edges(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edges]:
    """The hour loaded into VictoriaLogs and replayed by vmalert into a VictoriaMetrics that does not deduplicate."""
    folder = tmp_path_factory.mktemp("edges")
    lines = _lines()
    with EmbeddedBackends() as backends:
        backends.ingest_logs([("\n".join(json.dumps(line) for line in lines) + "\n").encode()])
        backends.wait_for_logs(START - timedelta(hours=1), END + timedelta(hours=1), len(lines))
        printed = run_digest("rules", "--for", "vmalert", "--replay", env=backend_env(backends))
        assert printed.returncode == 0, printed.stderr
        rule_file = folder / "replay.yml"
        rule_file.write_text(printed.stdout)
        heartbeat = yaml.safe_load(printed.stdout)["groups"][0]["rules"][-1]["record"]
        store = Server("victoria-metrics", "victoria-metrics", free_port(), folder / "vm")
        store.start(["-search.latencyOffset=0s"])  # no -dedup.minScrapeInterval: every sample written is kept
        try:
            replay(rule_file, backends.logs.url, store.url, START, END, folder / "vmalert.log")
            # Every sample written, the boundaries' too, before anything is read: a minute per request, and a
            # boundary sample at each minute whose first instant has lines (11:00's included).
            edge_minutes = {line_minute for line_minute in _edge_minutes(lines) if START < line_minute <= END}
            samples = f'count_over_time({{__name__="{heartbeat}", stats_result="pod_lines"}}[3601s])'
            flush_and_wait(store.url, f"{samples} >= {60 + len(edge_minutes)}", END, 1)
            yield Edges(backends, store, heartbeat, len(lines) - 1)
        finally:
            store.stop()


def _scanned_minutes(edges: Edges) -> dict[datetime, int]:
    """Each minute's lines counted in VictoriaLogs over [m, m + 60 s)."""
    counts = {}
    url = f"{edges.backends.logs.url}/select/logsql/stats_query"
    for minute in range(60):
        first = START + timedelta(minutes=minute)
        query = f"_time:[{rfc3339(first)}, {rfc3339(first + timedelta(minutes=1))}) | stats count() as lines"
        answer = httpx.post(url, data={"query": query, "time": rfc3339(END)}, timeout=30).json()["data"]["result"]
        counts[first] = int(answer[0]["value"][1]) if answer else 0
    return counts


def test_a_replay_writes_the_edge_minutes_twice_with_one_timestamp(edges: Edges) -> None:
    """The premise: the store holds two heartbeat samples at a minute whose edge has lines, the larger one whole."""
    selector = f'{{__name__="{edges.heartbeat}", stats_result="pod_lines"}}'
    answer = httpx.post(
        f"{edges.records.url}/api/v1/query",
        data={"query": f"{selector}[1h]", "time": rfc3339(END - timedelta(milliseconds=1)), "nocache": "1"},
        timeout=30,
    ).json()["data"]["result"]
    [series] = answer
    stamps = [round(float(moment)) for moment, _ in series["values"]]
    assert len(stamps) > len(set(stamps)), "no minute was written twice: the replay's boundary buckets are gone"


def _digest(edges: Edges, recorded: bool) -> dict[str, Any]:
    env = backend_env(
        edges.backends,
        DIGEST_RECORDS_URL=edges.records.url,
        DIGEST_RECORDED_COUNTS="auto" if recorded else "off",
    )
    done = run_digest("run", "--last", "1h", "--at", rfc3339(END), "--format", "json", env=env, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_a_replay_over_edge_lines_is_never_read_short_and_says_why(edges: Edges) -> None:
    """Minutes written twice with different counts: the hour is scanned, naming why, never read from the records."""
    recorded, scanned = _digest(edges, recorded=True), _digest(edges, recorded=False)
    for name in ("error_lines", "log_storms"):
        origin = next(check for check in recorded["checks"] if check["name"] == name)["counted_from"]
        assert origin["source"] == "scanned", origin
        assert "written more than once with different counts" in origin["note"], origin
        assert "recorded twice" not in origin["note"], origin
    for payload in (recorded, scanned):
        for check in payload["checks"]:
            check.pop("counted_from", None)
    assert recorded["checks"] == scanned["checks"]
    error_lines = next(check for check in scanned["checks"] if check["name"] == "error_lines")
    # 20 minutes × 4 stamp forms, each with an error line on the edge; the 11:00 error is the next hour's.
    assert error_lines["summary"].endswith("80 in the cluster"), error_lines["summary"]


def test_each_edge_minute_is_counted_once_in_the_logs(edges: Edges) -> None:
    """The scanned minutes, [m, m + 60 s) in VictoriaLogs: the edge lines in their own minute, 11:00 in none."""
    scanned = _scanned_minutes(edges)
    assert sum(scanned.values()) == edges.lines
    assert set(scanned.values()) == {16}  # 4 lines a minute in each of the 4 stamp forms


def test_the_live_rules_count_each_edge_line_in_the_minute_it_starts(edges: Edges) -> None:
    """Asked as vmalert asks live (``time=t``), the heartbeat counts [t − 60 s, t): an edge line in its own minute."""
    live = yaml.safe_load(run_digest("rules", "--for", "vmalert", env=backend_env(edges.backends)).stdout)
    heartbeat = live["groups"][0]["rules"][-1]["expr"]
    scanned = _scanned_minutes(edges)
    url = f"{edges.backends.logs.url}/select/logsql/stats_query"
    for minute in (1, 2, 3, 30, 60):
        at = START + timedelta(minutes=minute)
        answer = httpx.post(url, data={"query": heartbeat, "time": rfc3339(at)}, timeout=30).json()["data"]["result"]
        counted = {row["metric"]["__name__"]: int(row["value"][1]) for row in answer}
        assert counted["pod_lines"] == scanned[at - timedelta(minutes=1)], at


def _nanos(record: dict[str, Any]) -> int:
    """A record's timestamp in Unix nanoseconds, as a shipper's number or RFC 3339 says it."""
    stamp, text = record["timestamp"], record["message"].rsplit(" at ", 1)[1]
    if isinstance(stamp, str):
        return unix_nanos(datetime.fromisoformat(text))
    digits = len(str(stamp))
    return int(stamp) * (10**9 if digits <= 10 else 10**6 if digits <= 13 else 1)


@pytest.fixture(scope="module")
def loki_edges() -> Iterator[LokiServer]:
    """The same hour in a real Loki 3.5.12, each line at its precision's exact instant (pushed as Promtail does)."""
    binary = loki_binary_or_skip()
    lines = _lines()
    streams: dict[tuple[str, str], list[list[str]]] = {}
    for record in sorted(lines, key=_nanos):
        key = (record["kubernetes"]["pod_name"], record["stream"])
        streams.setdefault(key, []).append([str(_nanos(record)), record["message"]])
    with LokiServer(binary=binary) as loki:
        body = {
            "streams": [
                {
                    "stream": {"namespace": "edges", "pod": pod, "container": "app", "node_name": NODE, "stream": kind},
                    "values": values,
                }
                for (pod, kind), values in streams.items()
            ]
        }
        httpx.post(f"{loki.url}/loki/api/v1/push", json=body, timeout=60).raise_for_status()
        loki.wait_for_lines(START - timedelta(seconds=1), END + timedelta(seconds=1), len(lines))
        yield loki


def test_the_loki_rules_count_each_edge_line_in_the_minute_it_starts(loki_edges: LokiServer) -> None:
    """Asked as Loki's ruler asks them (an instant query at t), the Loki rules count [t − 60 s, t) at each precision."""
    printed = run_digest("rules", "--for", "loki", env=clean_env())
    assert printed.returncode == 0, printed.stderr
    rules = yaml.safe_load(printed.stdout)["groups"][0]["rules"]
    heartbeat = next(
        rule["expr"]
        for rule in rules
        if rule["record"].startswith("digest:recorder:") and rule["labels"]["stats_result"] == "pod_lines"
    )
    for minute, expected in ((1, 16), (2, 16), (3, 16), (30, 16), (60, 16), (61, 1)):  # 11:01: the 11:00 line alone
        at = START + timedelta(minutes=minute)
        answer = httpx.get(
            f"{loki_edges.url}/loki/api/v1/query",
            params={"query": heartbeat, "time": rfc3339_nanos(unix_nanos(at))},
            timeout=30,
        ).json()["data"]["result"]
        assert [int(float(row["value"][1])) for row in answer] == [expected], at

"""Lines that reach the log store after their minute was recorded are counted, on VictoriaLogs and on Loki.

A recorder counts a minute once, when it evaluates it; a line that arrives later — a shipper's backlog after an
outage, a node's agent that was cut off — is in the logs and not in the record. The digest counts each run of recorded
minutes in the log backend (a count, no line read), and where the logs now hold more lines than the records it finds
the minutes per minute and scans them instead, saying so (`digest.backends.recorded.RecordedLogs._late`).

Two hours and a quarter of a pod's lines (four a minute, one in four an error), up to a minute ago, are loaded into a
real VictoriaLogs and a real Loki 3.5.12; a real vmalert replays `digest rules --for vmalert --replay` over them from
VictoriaLogs and `digest rules --for loki` from Loki's API, each into a VictoriaMetrics of its own (a replay is a
recorder that evaluated every minute at once). Then error lines arrive, stamped

* 10 s before the last recorded minute's end: what a recorder that evaluates at once (Loki's ruler, vmalert with
  ``-rule.evalDelay=0s``) misses of a line 10 s late (vmalert's default 30 s delay counts them: `test_loki_ruler`);
* 5 minutes before they arrive;
* 2 hours before they arrive,

each into the pod's own stream and into a new pod's of the same workload. The digest of the window read from the
records must be the scanned one and name the minutes it scanned for them. Loki itself refuses a line more than an
hour behind its stream's newest (``max_chunk_age`` / 2): the 2-hour-late line of the pod's own stream is not stored,
in neither digest — the one place late lines are lost, and they are lost to a scan too. Above Loki's bound on what
it counts again (`digest.backends.loki.RECOUNT_LINES`, lowered here) the records are read as they are, and the note
says the late lines were not looked for.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import yaml

from digest.app.engine import Config, make_digest, open_sources
from digest.app.settings import load_settings
from digest.backends.recorded import RecordedLogs, Slots
from digest.checks.contract import Window
from digest.output.render import to_json
from digest.pipeline.policy import Policy
from digest.testbed.embedded import EmbeddedBackends, Server, free_port
from digest.testbed.loki_server import LokiServer, loki_binary_or_skip
from tests.command import clean_env, run_digest
from tests.test_recorded_counts import flush_and_wait, replay

NAMESPACE = "shop"
POD = "orders-api-6d8f7b9c5-k2x7p"
STEP = timedelta(seconds=15)
LATENESS = {"10s": timedelta(seconds=10), "5min": timedelta(minutes=5), "2h": timedelta(hours=2)}
# A new pod of the same workload per lateness (a restart): its lines add to the workload error_lines reports.
NEW_POD_SUFFIX = {"10s": "x7k2p", "5min": "m9n4t", "2h": "q4w2z"}


def _record(moment: datetime, pod: str, error: bool, number: int) -> dict[str, Any]:
    return {
        "timestamp": moment.isoformat().replace("+00:00", "Z"),
        "message": f"{'ERROR payment declined' if error else 'INFO order placed'} #{number}",
        "stream": "stderr" if error else "stdout",
        "kubernetes": {
            "pod_namespace": NAMESPACE,
            "pod_name": pod,
            "container_name": "app",
            "pod_node_name": "node-1",
        },
    }


def _chunk(records: Sequence[dict[str, Any]]) -> bytes:
    return ("\n".join(json.dumps(record) for record in records) + "\n").encode()


@dataclass(frozen=True)
class Late:
    """The two stores with their recorders' records, the recorded window, and the late lines each one holds."""

    victoria: EmbeddedBackends
    victoria_records: Server
    loki: LokiServer
    loki_records: Server
    loki_zeros: Server  # `digest rules --for loki` replayed as they are: what Loki's range API makes of them
    start: datetime
    end: datetime
    base_lines: int
    base_errors: int
    # Per store: the late error lines it took, by lateness and stream ("own", "new"); and when each was stamped.
    taken: dict[str, dict[tuple[str, str], int]]
    stamps: dict[str, datetime]

    def late_minutes(self, store: str) -> set[datetime]:
        """The window's minutes that hold a late line ``store`` took."""
        return {
            self.stamps[name].replace(second=0, microsecond=0)
            for (name, _), count in self.taken[store].items()
            if count and self.start <= self.stamps[name] < self.end
        }

    def late_errors(self, store: str) -> int:
        """The late error lines ``store`` took inside the window."""
        return sum(
            count for (name, _), count in self.taken[store].items() if self.start <= self.stamps[name] < self.end
        )


def _push_loki(loki: LokiServer, records: Sequence[dict[str, Any]]) -> int:
    """Push one record at a time as Promtail would; the lines Loki took (it answers 400 for one it refuses)."""
    taken = 0
    for record in records:
        kubernetes = record["kubernetes"]
        stamp = datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00"))
        nanos = str(int(stamp.timestamp()) * 10**9 + stamp.microsecond * 1000)
        body = {
            "streams": [
                {
                    "stream": {
                        "namespace": kubernetes["pod_namespace"],
                        "pod": kubernetes["pod_name"],
                        "container": kubernetes["container_name"],
                        "node_name": kubernetes["pod_node_name"],
                        "stream": record["stream"],
                    },
                    "values": [[nanos, record["message"]]],
                }
            ]
        }
        answer = httpx.post(f"{loki.url}/loki/api/v1/push", json=body, timeout=30)
        if answer.status_code == 204:
            taken += 1
        else:
            assert answer.status_code == 400, answer.text
            assert "too far behind" in answer.text, answer.text
    return taken


@pytest.fixture(scope="module")
def late(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Late]:
    """Both stores loaded and recorded over the window, then sent the late lines."""
    binary = loki_binary_or_skip()
    root = tmp_path_factory.mktemp("late")
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    start, end = now - timedelta(hours=2, minutes=15), now - timedelta(minutes=1)
    base: list[dict[str, Any]] = []
    # Off the minutes' edges: a replay over lines on them is test_record_edges' subject (this VictoriaLogs answers
    # the boundary minute twice), not this module's.
    moment, number = start + timedelta(seconds=7), 0
    while moment < end:
        base.append(_record(moment, POD, number % 4 == 0, number))
        moment, number = moment + STEP, number + 1
    base_errors = sum(1 for record in base if record["stream"] == "stderr")
    vmalert_rules, loki_rules, loki_replay = (root / "vmalert.yml", root / "loki.yml", root / "loki-replay.yml")
    for path, evaluator in ((vmalert_rules, ["vmalert", "--replay"]), (loki_rules, ["loki"])):
        done = run_digest("rules", "--for", *evaluator, env=clean_env())
        assert done.returncode == 0, done.stderr
        path.write_text(done.stdout)
    # Loki's ruler evaluates only the present, and Loki's range API answers nothing to the rules' own offset (under a
    # millisecond: docs/recording.md). For a replay the offset becomes 1 ms: exact for these lines, stamped to the
    # millisecond — a stand-in for a ruler that ran at the time.
    assert loki_rules.read_text().count("offset 1ns") >= 3
    loki_replay.write_text(loki_rules.read_text().replace("offset 1ns", "offset 1ms"))
    victoria = EmbeddedBackends()
    victoria_records = Server("victoria-metrics", "victoria-metrics", free_port(), root / "vm-victoria")
    loki = LokiServer(binary=binary)
    loki_records = Server("victoria-metrics", "victoria-metrics", free_port(), root / "vm-loki")
    loki_zeros = Server("victoria-metrics", "victoria-metrics", free_port(), root / "vm-loki-zeros")
    try:
        victoria.start()
        loki.start()
        for store in (victoria_records, loki_records, loki_zeros):
            store.start(["-search.latencyOffset=0s"])
        victoria.ingest_logs([_chunk(base)])
        victoria.wait_for_logs(start, end, len(base))
        assert loki.push_records([_chunk(base)]).lines == len(base)
        loki.wait_for_lines(start - timedelta(seconds=1), end, len(base))  # its range is open on the left
        # The replayed LogsQL stamps a minute at its start, the LogQL (the live rules) at its end: one more step.
        replay(vmalert_rules, victoria.logs.url, victoria_records.url, start, end, root / "vmalert.log")
        for rule_file, store in ((loki_replay, loki_records), (loki_rules, loki_zeros)):
            replay(
                rule_file,
                f"{loki.url}/loki",
                store.url,
                start,
                end + timedelta(minutes=1),
                root / "vmalert-loki.log",
                "-rule.validateExpressions=false",
            )
        minutes = int((end - start).total_seconds() // 60)
        for store, rule_file in (
            (victoria_records, vmalert_rules),
            (loki_records, loki_rules),
            (loki_zeros, loki_rules),
        ):
            heartbeat = yaml.safe_load(rule_file.read_text())["groups"][0]["rules"][-1]["record"]
            selector = f'count_over_time({{__name__="{heartbeat}", stats_result="pod_lines"}}[3h]) >= {minutes}'
            flush_and_wait(store.url, selector, end + timedelta(minutes=1), 1)
        # The late lines, after the records: each lateness into the pod's stream and a new pod's.
        arrival = datetime.now(UTC)
        stamps = {name: end - lateness if name == "10s" else arrival - lateness for name, lateness in LATENESS.items()}
        if stamps["5min"] >= end - timedelta(minutes=1):
            pytest.fail(f"loading and replaying took {arrival - now}: the 5-minute-late line would miss the window")
        late_lines: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for name, stamp in stamps.items():
            for stream, pod in (("own", POD), ("new", f"orders-api-6d8f7b9c5-{NEW_POD_SUFFIX[name]}")):
                late_lines[(name, stream)] = [_record(stamp, pod, True, 10_000 + index) for index in range(3)]
        taken: dict[str, dict[tuple[str, str], int]] = {"victorialogs": {}, "loki": {}}
        everything = [record for records in late_lines.values() for record in records]
        victoria.ingest_logs([_chunk(everything)])
        victoria.wait_for_logs(start, end, len(base) + len(everything))
        for key, records in late_lines.items():
            taken["victorialogs"][key] = len(records)
            taken["loki"][key] = _push_loki(loki, records)
        loki.wait_for_lines(start - timedelta(seconds=1), end, len(base) + sum(taken["loki"].values()))
        yield Late(
            victoria,
            victoria_records,
            loki,
            loki_records,
            loki_zeros,
            start,
            end,
            len(base),
            base_errors,
            taken,
            stamps,
        )
    finally:
        victoria.stop()
        loki.stop()
        victoria_records.stop()
        loki_records.stop()
        loki_zeros.stop()


def _digest(late: Late, store: str, end: datetime, recorded: bool) -> dict[str, Any]:
    """The window's digest on ``store``'s logs, from its records (and the logs where they fall short) or scanned."""
    if store == "loki":
        urls = {"vm_url": late.loki_records.url, "loki_url": late.loki.url}
    elif store == "loki-zeros":
        urls = {"vm_url": late.loki_zeros.url, "loki_url": late.loki.url}
    else:
        urls = {"vm_url": late.victoria_records.url, "vl_url": late.victoria.logs.url}
    settings = load_settings(
        **urls, recorded_counts="auto" if recorded else "off", cluster=store, timezone="UTC", policy_file=None
    )
    window = Window(late.start, end, UTC, store)
    return to_json(asyncio.run(make_digest(Config(settings=settings, policy=Policy()), window)))


def _check(digest: dict[str, Any], name: str) -> dict[str, Any]:
    return next(check for check in digest["checks"] if check["name"] == name)


def _without_origin(digest: dict[str, Any]) -> list[dict[str, Any]]:
    return [{key: value for key, value in check.items() if key != "counted_from"} for check in digest["checks"]]


def test_loki_refuses_only_the_line_an_hour_behind_its_own_stream(late: Late) -> None:
    """Loki stores every late line but the 2-hour-late ones of a stream that has newer lines; VictoriaLogs every one."""
    assert set(late.taken["victorialogs"].values()) == {3}
    refused = {key for key, count in late.taken["loki"].items() if count == 0}
    assert refused == {("2h", "own")}
    assert all(count == 3 for key, count in late.taken["loki"].items() if key not in refused)


@pytest.mark.parametrize("store", ["victorialogs", "loki"])
def test_late_lines_are_counted_and_their_minutes_named(late: Late, store: str) -> None:
    """Read from records that missed them, the late lines are counted: the scanned digest, with the minutes named."""
    scanned, recorded = _digest(late, store, late.end, recorded=False), _digest(late, store, late.end, recorded=True)
    for read, counted in zip(_without_origin(recorded), _without_origin(scanned), strict=True):
        assert read == counted, read["name"]
    errors = _check(recorded, "error_lines")
    assert errors["value"] == late.base_errors + late.late_errors(store)
    minutes = late.late_minutes(store)
    assert len(minutes) == 3  # one per lateness (on Loki the 2-hour-late line only in the new pod's stream)
    assert errors["counted_from"] == {
        "source": "both",
        "recorded_seconds": (late.end - late.start).total_seconds() - 60.0 * len(minutes),
        "scanned_seconds": 60.0 * len(minutes),
        "note": f"{len(minutes)} minutes hold more lines than were recorded (late lines, or a recorder that counted"
        " short): those minutes scanned",
    }


@pytest.mark.parametrize("store", ["victorialogs", "loki"])
def test_a_window_without_late_lines_is_read_from_the_records_alone(late: Late, store: str) -> None:
    """The recount finds nothing where no line came late: every minute from the records, no note."""
    end = late.start + timedelta(minutes=10)  # the earliest late line is 2 hours before it arrived: 15 min in
    assert all(minute >= end for minute in late.late_minutes(store))
    errors = _check(_digest(late, store, end, recorded=True), "error_lines")
    assert errors["counted_from"] == {
        "source": "recorded",
        "recorded_seconds": 600.0,
        "scanned_seconds": 0.0,
        "note": None,
    }


def test_loki_rules_replayed_as_they_are_count_nothing_and_are_not_believed(late: Late) -> None:
    """`vmalert -replay` of the Loki rules writes zeros (Loki's range API): every minute is found short and scanned."""
    heartbeat = httpx.post(
        f"{late.loki_zeros.url}/api/v1/query",
        data={"query": 'max(max_over_time({__name__=~"digest:recorder:.+"}[3h]))', "time": late.end.isoformat()},
        timeout=30,
    ).json()["data"]["result"]
    assert [float(sample["value"][1]) for sample in heartbeat] == [0.0]  # the premise: a heartbeat of zeros
    scanned, recorded = _digest(late, "loki", late.end, recorded=False), _digest(late, "loki-zeros", late.end, True)
    for read, counted in zip(_without_origin(recorded), _without_origin(scanned), strict=True):
        assert read == counted, read["name"]
    minutes = int((late.end - late.start).total_seconds() // 60)
    assert _check(recorded, "error_lines")["counted_from"] == {
        "source": "scanned",
        "recorded_seconds": 0.0,
        "scanned_seconds": 60.0 * minutes,
        "note": f"{minutes} minutes hold more lines than were recorded (late lines, or a recorder that counted"
        " short): those minutes scanned",
    }


def test_on_loki_records_too_many_to_count_again_are_read_as_they_are_and_said_to_be(
    late: Late, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above Loki's recount bound the late lines are not looked for: the records are read, and the note says so."""
    monkeypatch.setattr("digest.backends.loki.RECOUNT_LINES", late.base_lines - 1)
    errors = _check(_digest(late, "loki", late.end, recorded=True), "error_lines")
    assert errors["value"] == late.base_errors  # the records' count: the late lines are not in it
    assert errors["counted_from"] == {
        "source": "recorded",
        "recorded_seconds": (late.end - late.start).total_seconds(),
        "scanned_seconds": 0.0,
        "note": "lines that reached the logs after their minute was recorded were not looked for: the records hold"
        f" {late.base_lines:,} lines, which this log backend would count again at the cost of scanning them",
    }


def test_on_loki_only_the_digests_own_window_is_counted_again(late: Late) -> None:
    """On Loki a window the digest does not grade (a trend's earlier day) is read from its records as they are."""

    async def measured() -> tuple[Slots, Slots]:
        settings = load_settings(
            vm_url=late.loki_records.url, loki_url=late.loki.url, cluster="loki", timezone="UTC", policy_file=None
        )
        async with open_sources(settings, Policy()) as sources:
            logs = sources.logs
            assert isinstance(logs, RecordedLogs)
            window = Window(late.start, late.end, UTC, "loki")
            trend = await logs.slots(window)
            logs.graded(window)
            return trend, await logs.slots(window)

    trend, graded = asyncio.run(measured())
    minutes = int((late.end - late.start).total_seconds() // 60)
    assert len(trend.recorded["pod_lines"]) == minutes
    assert "pod_lines" not in trend.notes
    assert len(graded.recorded["pod_lines"]) == minutes - len(late.late_minutes("loki"))
    assert graded.notes["pod_lines"].startswith("3 minutes hold more lines than were recorded")

"""Recorders live: Loki's ruler and vmalert evaluate the digest's rules as the minutes pass; the digest reads them.

A real Loki 3.5.12 with its ruler on (rules from local storage, remote write to a VictoriaMetrics of the test's own)
takes lines stamped around now, since a ruler only evaluates the present. Once it has recorded a few minutes, the
digest of a window around them reads those minutes from the records and scans the rest: the same digest as the
scanned one. The ruler evaluates its group at an offset of its own within the minute, so the per-minute peaks are
scanned, and said to be.

In the same minutes (the wait is the cost of this module, so both recorders share it), a real vmalert evaluates
`digest rules --for vmalert` — the live rules, ``_time:1m`` — against a VictoriaLogs holding the same lines and writes
into a VictoriaMetrics of its own: vmalert evaluates on the minute, so its minutes give the peaks too. A second
vmalert evaluates the Loki rules themselves against Loki's API (LogQL passed through unparsed), on the minute as well:
the way to Loki records that give the peaks too.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import yaml

from digest.app.engine import Config, make_digest
from digest.app.settings import load_settings
from digest.checks.contract import Window
from digest.output.render import to_json
from digest.pipeline.policy import Policy
from digest.testbed.embedded import EmbeddedBackends, Server, free_port, log_tail
from digest.testbed.loki_server import LokiServer, loki_binary_or_skip
from tests.command import clean_env, run_digest, stop_process
from tests.test_recorded_counts import vmalert_binary

PODS = ("api-7c9d8f6b5d-x2x9k", "feed-aggregator-lc5zrwsjcm-gkcjb", "redis-0")
# Lines from this long before the ruler starts until this long after: the ruler records the minutes as they pass.
BEFORE, AFTER = timedelta(minutes=4), timedelta(minutes=5)
# The ruler's first evaluation comes within a minute of its start; the next a minute later.
RECORDED_SLOTS = 2
# Lines sent this long after their timestamp while the recorders run (to VictoriaLogs), and the pod that writes them.
LATE_BY = timedelta(seconds=10)
LATE_POD = "ledger-5b7c9d8f6-p8q2r"


@dataclass(frozen=True)
class Ruled:
    """The Loki (with its ruler) and the VictoriaMetrics it writes into, and the lines' span; the same for vmalert."""

    loki: LokiServer
    records: Server
    first: datetime
    heartbeat: str
    # vmalert's side: the VictoriaLogs it reads (``victoria.logs``), the VictoriaMetrics it writes (``.metrics``).
    victoria: EmbeddedBackends
    vmalert_heartbeat: str
    # A second vmalert evaluating the Loki rules against Loki's own API, into a VictoriaMetrics of its own.
    loki_records: Server


def records_around(now: datetime) -> list[str]:
    """Vector-shaped records, one every 400 ms per pod, a third of them errors, from BEFORE now to AFTER it."""
    lines = []
    moment, number = now - BEFORE, 0
    while moment < now + AFTER:
        for pod in PODS:
            level = "error" if number % 3 == 0 else "info"
            record = {
                "timestamp": moment.isoformat().replace("+00:00", "Z"),
                "message": f"{level.upper()} request {number} done",
                "level": level,
                "stream": "stderr",
                "kubernetes": {
                    "pod_namespace": "shop",
                    "pod_name": pod,
                    "container_name": "app",
                    "pod_node_name": "node-1",
                },
            }
            lines.append(json.dumps(record))
            number += 1
        moment += timedelta(milliseconds=400)
    return lines


def late_record(moment: datetime, pod: str, message: str) -> dict[str, Any]:
    """One error line of ``pod``, stamped ``moment`` (sent after it: late)."""
    return {
        "timestamp": moment.isoformat().replace("+00:00", "Z"),
        "message": message,
        "level": "error",
        "stream": "stderr",
        "kubernetes": {"pod_namespace": "shop", "pod_name": pod, "container_name": "app", "pod_node_name": "node-1"},
    }


def heartbeats(records: Server, name: str) -> list[float]:
    """The times of the heartbeat's samples so far."""
    httpx.get(f"{records.url}/internal/force_flush", timeout=30)
    exported = httpx.post(f"{records.url}/api/v1/export", data={"match[]": f'{{__name__="{name}"}}'}, timeout=30)
    times: set[float] = set()
    for line in exported.text.splitlines():
        times.update(stamp / 1000 for stamp in json.loads(line)["timestamps"])
    return sorted(times)


@pytest.fixture(scope="module")
def ruled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ruled]:
    """A Loki whose ruler has recorded RECORDED_SLOTS minutes of lines pushed around now."""
    binary = loki_binary_or_skip()
    root = tmp_path_factory.mktemp("ruler")
    records = Server("victoria-metrics", "victoria-metrics", free_port(), root / "vm")
    records.start(["-search.latencyOffset=0s"])
    rules = run_digest("rules", "--for", "loki", env=clean_env())
    assert rules.returncode == 0, rules.stderr
    # Local rule storage: one folder per tenant ("fake" without auth), a file per rule namespace.
    (root / "rules" / "fake").mkdir(parents=True)
    (root / "rules" / "fake" / "digest.yaml").write_text(rules.stdout)
    heartbeat = yaml.safe_load(rules.stdout)["groups"][0]["rules"][-1]["record"]
    ruler = {
        "ruler": {
            "storage": {"type": "local", "local": {"directory": str(root / "rules")}},
            "rule_path": str(root / "rule-scratch"),
            "enable_api": True,
            "poll_interval": "2s",
            "remote_write": {"enabled": True, "clients": {"digest": {"url": f"{records.url}/api/v1/write"}}},
            "wal": {"dir": str(root / "ruler-wal")},
        }
    }
    vmalert_rules = run_digest("rules", "--for", "vmalert", env=clean_env())
    assert vmalert_rules.returncode == 0, vmalert_rules.stderr
    (root / "vmalert.yaml").write_text(vmalert_rules.stdout)
    vmalert_heartbeat = yaml.safe_load(vmalert_rules.stdout)["groups"][0]["rules"][-1]["record"]
    loki = LokiServer(config_overrides=ruler, binary=binary)
    victoria = EmbeddedBackends()
    loki_records = Server("victoria-metrics", "victoria-metrics", free_port(), root / "vm-loki")
    recorders: list[subprocess.Popen[bytes]] = []
    try:
        loki.start()
        victoria.start()
        loki_records.start(["-search.latencyOffset=0s"])
        now = datetime.now(UTC)
        lines = records_around(now)
        text = ("\n".join(lines) + "\n").encode()
        summary = loki.push_records([text])
        assert summary.lines == len(lines)
        victoria.ingest_logs([text])
        victoria.wait_for_logs(now - BEFORE - timedelta(minutes=1), now + AFTER + timedelta(minutes=1), len(lines))
        # vmalert on VictoriaLogs (the live rules), and vmalert on Loki's API (`digest rules --for loki`: LogQL, which
        # vmalert passes through unparsed, asked at the minute itself).
        for name, datasource, rule_file, written, extra in (
            ("vmalert", victoria.logs.url, root / "vmalert.yaml", victoria.metrics.url, []),
            (
                "vmalert-loki",
                f"{loki.url}/loki",
                root / "rules" / "fake" / "digest.yaml",
                loki_records.url,
                ["-rule.validateExpressions=false", "-rule.evalDelay=0s"],
            ),
        ):
            with (root / f"{name}.log").open("ab") as log:
                recorders.append(
                    subprocess.Popen(  # the binary was resolved on PATH, the arguments are ours
                        [
                            vmalert_binary(),
                            f"-rule={rule_file}",
                            f"-datasource.url={datasource}",
                            f"-remoteWrite.url={written}",
                            "-remoteWrite.flushInterval=1s",
                            f"-httpListenAddr=127.0.0.1:{free_port()}",
                            "-loggerLevel=WARN",
                            *extra,
                        ],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                    )
                )
        # Bounded: each recorder evaluates once a minute; RECORDED_SLOTS evaluations take at most that many and one
        # more (vmalert waits up to a minute to start its group on the minute).
        deadline = time.monotonic() + 60 * (RECORDED_SLOTS + 1) + 30
        while (
            len(heartbeats(records, heartbeat)) < RECORDED_SLOTS
            or len(heartbeats(victoria.metrics, vmalert_heartbeat)) < RECORDED_SLOTS
            or len(heartbeats(loki_records, heartbeat)) < RECORDED_SLOTS
        ):
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the ruler wrote {len(heartbeats(records, heartbeat))} heartbeats ({loki.tail_log()}), vmalert "
                    f"{len(heartbeats(victoria.metrics, vmalert_heartbeat))} ({log_tail(root / 'vmalert.log')}), "
                    f"vmalert on Loki {len(heartbeats(loki_records, heartbeat))} "
                    f"({log_tail(root / 'vmalert-loki.log')})"
                )
            # A line 10 s late, to VictoriaLogs only: vmalert evaluates a minute 30 s after its end
            # (``-rule.evalDelay``), so its records count it (the Loki recorders evaluate at once: see the last test).
            moment = datetime.now(UTC) - LATE_BY
            victoria.ingest_logs([(json.dumps(late_record(moment, LATE_POD, "ERROR late by 10 s")) + "\n").encode()])
            time.sleep(2)
        yield Ruled(loki, records, now - BEFORE, heartbeat, victoria, vmalert_heartbeat, loki_records)
    finally:
        for recorder in recorders:
            stop_process(recorder)
        victoria.stop()
        loki.stop()
        loki_records.stop()
        records.stop()


def digest_json(
    ruled: Ruled, start: datetime, end: datetime, recorded: bool, recorder: str = "ruler"
) -> dict[str, Any]:
    """The window's digest, reading the recorder's records or not: Loki's ruler's or vmalert's on Loki, or vmalert's."""
    if recorder == "ruler":
        urls = {"vm_url": ruled.records.url, "loki_url": ruled.loki.url}
    elif recorder == "vmalert-loki":
        urls = {"vm_url": ruled.loki_records.url, "loki_url": ruled.loki.url}
    else:
        urls = {"vm_url": ruled.victoria.metrics.url, "vl_url": ruled.victoria.logs.url}
    settings = load_settings(
        **urls,
        recorded_counts="auto" if recorded else "off",
        cluster=recorder,
        timezone="UTC",
        policy_file=None,
    )
    window = Window(start, end, UTC, recorder)
    return to_json(asyncio.run(make_digest(Config(settings=settings, policy=Policy()), window)))


def without_origin(digest: dict[str, Any]) -> list[dict[str, Any]]:
    """The digest's checks without ``counted_from``: what must not depend on where counts came from."""
    return [{key: value for key, value in check.items() if key != "counted_from"} for check in digest["checks"]]


def test_every_rule_is_evaluated_without_error(ruled: Ruled) -> None:
    """Loki's ruler loads every rule `digest rules --for loki` writes and evaluates each without an error."""
    answer = httpx.get(f"{ruled.loki.url}/prometheus/api/v1/rules", timeout=30).json()
    rules = [rule for group in answer["data"]["groups"] for rule in group["rules"]]
    assert rules
    for rule in rules:
        assert (rule["health"], rule.get("lastError", "")) == ("ok", ""), rule["name"]


def test_minutes_the_ruler_recorded_are_read_and_the_rest_scanned(ruled: Ruled) -> None:
    """A window around the ruler's minutes: error_lines reads them and scans the rest, the digest is the scanned one."""
    beats = heartbeats(ruled.records, ruled.heartbeat)
    start = ruled.first.replace(second=0, microsecond=0) + timedelta(minutes=1)
    end = datetime.fromtimestamp(int(beats[-1]), UTC) + timedelta(seconds=30)
    inside = [moment for moment in beats if start.timestamp() <= moment - 60 and moment <= end.timestamp()]
    assert len(inside) >= RECORDED_SLOTS - 1
    scanned = digest_json(ruled, start, end, recorded=False)
    recorded = digest_json(ruled, start, end, recorded=True)
    strip = [{key: value for key, value in check.items() if key != "counted_from"} for check in recorded["checks"]]
    assert strip == [
        {key: value for key, value in check.items() if key != "counted_from"} for check in scanned["checks"]
    ]
    origins = {check["name"]: check["counted_from"] for check in recorded["checks"]}
    seconds = (end - start).total_seconds()
    assert origins["error_lines"] == {
        "source": "both",
        "recorded_seconds": 60.0 * len(inside),
        "scanned_seconds": seconds - 60.0 * len(inside),
        "note": None,
    }
    # Each minute of the ruler starts at its group's offset, not on the minute: busiest minutes are scanned.
    assert origins["log_storms"] is not None
    assert origins["log_storms"]["source"] == "scanned"
    assert "not on the window's minute grid" in origins["log_storms"]["note"]


@pytest.mark.parametrize("recorder", ["vmalert", "vmalert-loki"])
def test_minutes_vmalert_recorded_live_are_read_peaks_included(ruled: Ruled, recorder: str) -> None:
    """Minutes vmalert recorded live (on VictoriaLogs, or the Loki rules on Loki's API) are read, busiest too."""
    if recorder == "vmalert":
        beats = heartbeats(ruled.victoria.metrics, ruled.vmalert_heartbeat)
    else:
        beats = heartbeats(ruled.loki_records, ruled.heartbeat)
    assert all(moment % 60 == 0 for moment in beats), beats  # on the minute: each stamps the end of its minute
    start = ruled.first.replace(second=0, microsecond=0) + timedelta(minutes=1)
    end = datetime.fromtimestamp(int(beats[-1]), UTC) + timedelta(seconds=30)
    inside = [moment for moment in beats if start.timestamp() <= moment - 60 and moment <= end.timestamp()]
    assert len(inside) >= RECORDED_SLOTS - 1
    scanned = digest_json(ruled, start, end, recorded=False, recorder=recorder)
    recorded = digest_json(ruled, start, end, recorded=True, recorder=recorder)
    assert without_origin(recorded) == without_origin(scanned)
    origins = {check["name"]: check["counted_from"] for check in recorded["checks"]}
    seconds = (end - start).total_seconds()
    both = {
        "source": "both",
        "recorded_seconds": 60.0 * len(inside),
        "scanned_seconds": seconds - 60.0 * len(inside),
        "note": None,
    }
    assert origins["error_lines"] == both
    assert origins["log_storms"] == both  # on the minute: Loki's ruler's own records, off it, leave these scanned
    if recorder == "vmalert":
        # Non-vacuous: the lines sent 10 s late are in the recorded minutes, and were counted there (no note above).
        first_slot = datetime.fromtimestamp(inside[0] - 60, UTC)
        last_slot_end = datetime.fromtimestamp(inside[-1], UTC)
        assert victoria_lines(ruled, f'kubernetes.pod_name:="{LATE_POD}"', first_slot, last_slot_end) > 0


def victoria_lines(ruled: Ruled, query: str, start: datetime, end: datetime) -> int:
    """VictoriaLogs' count of the lines matching ``query`` in [start, end)."""
    answer = httpx.post(
        f"{ruled.victoria.logs.url}/select/logsql/stats_query",
        data={
            "query": f"{query} _time:[{start.isoformat()}, {end.isoformat()}) | stats count() as lines",
            "time": end.isoformat(),
        },
        timeout=30,
    )
    answer.raise_for_status()
    result = answer.json()["data"]["result"]
    return int(result[0]["value"][1]) if result else 0


def test_lines_sent_after_their_minute_was_recorded_are_counted(ruled: Ruled) -> None:
    """Last (it adds lines): error lines sent minutes late into recorded minutes are counted, their minutes named.

    Loki's ruler evaluates off the clock's minutes, so the run of its minutes that holds them is scanned whole;
    vmalert's are found minute by minute.
    """
    beats = {
        "ruler": heartbeats(ruled.records, ruled.heartbeat),
        "vmalert-loki": heartbeats(ruled.loki_records, ruled.heartbeat),
        "vmalert": heartbeats(ruled.victoria.metrics, ruled.vmalert_heartbeat),
    }
    # In the middle of each recorder's last recorded minute (its sample counts the minute before it).
    moments = {recorder: datetime.fromtimestamp(times[-1] - 30, UTC) for recorder, times in beats.items()}
    lines = [
        late_record(moments[recorder], "api-7c9d8f6b5d-x2x9k", f"ERROR sent late for {recorder} #{number}")
        for recorder in moments
        for number in range(3)
    ]
    body = ("\n".join(json.dumps(line) for line in lines) + "\n").encode()
    assert ruled.loki.push_records([body]).lines == len(lines)
    ruled.victoria.ingest_logs([body])
    start = ruled.first.replace(second=0, microsecond=0) + timedelta(minutes=1)
    ruled.victoria.wait_for_logs(start, datetime.now(UTC), 0)
    for moment in moments.values():
        deadline = time.monotonic() + 60
        while victoria_lines(ruled, '"sent late"', moment, moment + timedelta(milliseconds=1)) < 3:
            assert time.monotonic() < deadline, "VictoriaLogs never showed the late lines"
            time.sleep(0.2)
        while (
            ruled.loki.count_lines(
                moment - timedelta(milliseconds=1), moment, '{pod="api-7c9d8f6b5d-x2x9k"} |= "sent late"'
            )
            < 3
        ):
            assert time.monotonic() < deadline, "Loki never showed the late lines"
            time.sleep(0.2)
    for recorder, times in beats.items():
        end = datetime.fromtimestamp(int(times[-1]), UTC) + timedelta(seconds=30)
        scanned = digest_json(ruled, start, end, recorded=False, recorder=recorder)
        recorded = digest_json(ruled, start, end, recorded=True, recorder=recorder)
        assert without_origin(recorded) == without_origin(scanned), recorder
        note = next(check for check in recorded["checks"] if check["name"] == "error_lines")["counted_from"]["note"]
        if recorder == "ruler":
            assert "recorded off the clock's minutes and so not told apart, hold more lines than" in note, note
            continue
        # Every store took every late line: each recorded minute of the window that holds one of them is named.
        slots = {int(moment) - 60 for moment in times if start.timestamp() <= moment - 60 and moment <= end.timestamp()}
        late = {int(moment.timestamp()) // 60 * 60 for moment in moments.values()} & slots
        said = "1 minute holds" if len(late) == 1 else f"{len(late)} minutes hold"
        assert late, recorder
        assert note.startswith(f"{said} more lines than were recorded (late lines"), (recorder, note)

"""Recorded log counts: vmalert evaluates the digest's own rules against VictoriaLogs, and the digest reads them.

A real vmalert (built from Debian trixie's source, the same as VictoriaLogs) replays `digest rules --for vmalert
--replay` over every corpus day, reading the suite's VictoriaLogs and writing into a VictoriaMetrics of its own
(``DIGEST_RECORDS_URL``), so that the rest of the suite keeps scanning. Each day's digest from the records must be
the scanned digest, check for check; one day has a recorder outage in the middle, one has counts that contradict
the recorder's heartbeat, one an hour written twice (the same samples again, as two recorders write into a store
that does not deduplicate), and a policy whose error rule changed must not read the old rule's series.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from time import sleep
from typing import Any

import httpx
import pytest
import yaml

from digest.app.engine import Config, make_digest
from digest.app.settings import load_settings
from digest.checks.contract import rfc3339
from digest.output.render import to_json
from digest.pipeline.policy import Policy, load_policy
from digest.pipeline.window import day_window
from digest.testbed.corpus import DAYS
from digest.testbed.embedded import EmbeddedBackends, Server, free_port
from digest.testbed.snapshots import binary_identity, snapshot_key
from tests.command import backend_env, clean_env, run_digest
from tests.conftest import VOLUME_SCALE
from tests.misbehaving_server import Behaviour, recording_server

LOG_CHECKS = ("error_lines", "log_storms", "envoy_flags")
# The recorder is down from 09:00 to 13:00 on this day (its replay skips those hours).
OUTAGE_DAY = date(2026, 8, 17)
OUTAGE = (time(9), time(13))
# On this day one minute's recorded count is made wrong after the replay: the records must not be trusted.
TAMPERED_DAY = date(2026, 10, 5)
# On this day an hour of records is written twice, the same samples again (two recorders, a store that does not
# deduplicate): a sum over the day would count that hour twice, in the heartbeat and the families alike; each slot is
# read once, its largest sample, so the day reads as recorded once.
TWICE_DAY = date(2026, 11, 12)
TWICE = (time(5), time(6))


def vmalert_binary() -> str:
    """Path of a vmalert that evaluates ``type: vlogs`` groups; the test fails (never skips) without one."""
    path = shutil.which("vmalert")
    if path is None:
        pytest.fail("vmalert is not on PATH: run scripts/install-backends")
    shown = subprocess.run([path, "-help"], capture_output=True, text=True, check=False)
    help_text = shown.stdout + shown.stderr
    if "-rule.defaultRuleType" not in help_text:
        pytest.fail(f"{path} cannot evaluate type: vlogs groups (bookworm's 1.79): run scripts/install-backends")
    return path


def rules(corpus_backends: EmbeddedBackends, *args: str, policy_file: Path | None = None) -> str:
    """`digest rules ARGS` as the CLI prints them."""
    extra = {"DIGEST_POLICY_FILE": str(policy_file)} if policy_file else {}
    done = run_digest("rules", *args, env=backend_env(corpus_backends, **extra))
    assert done.returncode == 0, done.stderr
    return done.stdout


def replay(
    rule_file: Path, logs_url: str, records_url: str, start: datetime, end: datetime, log: Path, *extra: str
) -> None:
    """``vmalert -replay`` of ``rule_file`` over [start, end), one minute per request (see recording_rules).

    ``extra``: more vmalert flags (``-rule.validateExpressions=false`` for LogQL read from Loki's API).
    """
    command = [
        vmalert_binary(),
        f"-rule={rule_file}",
        f"-datasource.url={logs_url}",
        f"-remoteWrite.url={records_url}",
        f"-replay.timeFrom={rfc3339(start)}",
        f"-replay.timeTo={rfc3339(end)}",
        "-replay.maxDatapointsPerQuery=1",
        "-replay.rulesDelay=0s",
        "-replay.disableProgressBar",
        f"-httpListenAddr=127.0.0.1:{free_port()}",
        "-loggerLevel=WARN",
        *extra,
    ]
    with log.open("a") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=300, check=False)
    assert done.returncode == 0, log.read_text()[-2000:]


@dataclass(frozen=True)
class Records:
    """The VictoriaMetrics the replays wrote into, and the suite's backends they read."""

    url: str
    corpus: EmbeddedBackends


def day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time(), UTC)
    return start, start + timedelta(days=1)


def flush_and_wait(url: str, selector: str, at: datetime, expected: int) -> None:
    """Poll (bounded) until ``count(selector)`` at ``at`` is at least ``expected`` on the records store."""
    seen = -1
    for _ in range(150):
        httpx.get(f"{url}/internal/force_flush", timeout=30)
        answer = httpx.post(
            f"{url}/api/v1/query", data={"query": f"count({selector})", "time": rfc3339(at), "nocache": "1"}
        ).json()
        result = answer["data"]["result"]
        seen = int(float(result[0]["value"][1])) if result else 0
        if seen >= expected:
            return
        sleep(0.2)
    pytest.fail(f"records store shows {seen} of {expected} series {selector}")


def load_records(store: Server, rule_file: Path, logs_url: str, folder: Path) -> None:
    """Replay every corpus day into ``store`` (the outage day around its outage), then tamper with one minute."""
    spans: list[tuple[datetime, datetime]] = []
    for day in sorted(DAYS):
        start, end = day_bounds(day)
        if day == OUTAGE_DAY:
            down, up = (datetime.combine(day, moment, UTC) for moment in OUTAGE)
            spans += [(start, down), (up, end)]
        else:
            spans.append((start, end))
    # A replay is one request per rule and minute, mostly waiting on VictoriaLogs: three at once.
    with ThreadPoolExecutor(3) as pool:
        done = [
            pool.submit(replay, rule_file, logs_url, store.url, start, end, folder / f"vmalert-{number}.log")
            for number, (start, end) in enumerate(spans)
        ]
        for one in done:
            one.result()
    # One minute of the tampered day gets a second count in the family's total, which its heartbeat does not have.
    start, _ = day_bounds(TAMPERED_DAY)
    bogus = {
        "metric": {
            "__name__": family_of(rule_file),
            "stats_result": "total",
            "digest_stamp": "start",
            "namespace": "x",
        },
        "values": [7],
        "timestamps": [int((start + timedelta(hours=5)).timestamp() * 1000)],
    }
    httpx.post(f"{store.url}/api/v1/import", content=json.dumps(bogus) + "\n", timeout=30).raise_for_status()
    # The hour written twice: every record series of it exported and imported again, samples unchanged.
    httpx.get(f"{store.url}/internal/force_flush", timeout=30)
    first, last = (datetime.combine(TWICE_DAY, moment, UTC) for moment in TWICE)
    exported = httpx.post(
        f"{store.url}/api/v1/export",
        data={
            "match[]": '{__name__=~"digest:.+"}',
            "start": rfc3339(first),
            "end": rfc3339(last - timedelta(seconds=1)),
        },
        timeout=60,
    )
    exported.raise_for_status()
    assert exported.text.strip()
    httpx.post(f"{store.url}/api/v1/import", content=exported.content, timeout=60).raise_for_status()


def family_of(rule_file: Path) -> str:
    """The first family's record name (pod_lines)."""
    return str(yaml.safe_load(rule_file.read_text())["groups"][0]["rules"][0]["record"])


def verify_records(store: Server, rule_file: Path) -> None:
    """Bounded polls until every day's heartbeat and the tampered minute are visible."""
    heartbeat = yaml.safe_load(rule_file.read_text())["groups"][0]["rules"][-1]["record"]
    for day in sorted(DAYS):
        flush_and_wait(store.url, f'last_over_time({{__name__="{heartbeat}"}}[1d])', day_bounds(day)[1], 2)
    selector = f'last_over_time({{__name__="{family_of(rule_file)}", namespace="x"}}[1d])'
    flush_and_wait(store.url, selector, day_bounds(TAMPERED_DAY)[1], 1)
    # The hour written twice: two heartbeat samples a minute (per column) in it.
    last = datetime.combine(TWICE_DAY, TWICE[1], UTC)
    doubled = f'count_over_time({{__name__="{heartbeat}", stats_result="pod_lines"}}[1h]) >= 120'
    flush_and_wait(store.url, doubled, last - timedelta(milliseconds=1), 1)


@pytest.fixture(scope="module")
def records(corpus_backends: EmbeddedBackends, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Records]:
    """Every corpus day replayed by vmalert into a VictoriaMetrics of its own: an outage, a tampered day, an hour twice.

    Kept as a snapshot between runs (`testbed.snapshots`), keyed by the rules, this module and the binaries.
    """
    folder = tmp_path_factory.mktemp("records")
    rule_file = folder / "replay-rules.yml"
    rule_file.write_text(rules(corpus_backends, "--for", "vmalert", "--replay"))
    store = Server("victoria-metrics", "victoria-metrics", free_port(), folder / "vm")
    arguments = ["-search.latencyOffset=0s"]
    key = snapshot_key(
        "corpus-records",
        [Path(__file__)],
        rule_file.read_text(),
        f"scale={VOLUME_SCALE}",
        binary_identity("vmalert"),
        binary_identity("victoria-logs"),
        binary_identity("victoria-metrics"),
    )
    try:
        if key is None:
            store.start(arguments)
            load_records(store, rule_file, corpus_backends.logs.url, folder)
        else:
            with key.claim() as kept:
                if kept.found:
                    kept.restore("vm", store.data_dir)
                    store.start(arguments)
                else:
                    store.start(arguments)
                    load_records(store, rule_file, corpus_backends.logs.url, folder)
                    verify_records(store, rule_file)
                    store.stop(strict=True)
                    with kept.saving({"vm": store.data_dir}, {}):
                        store.start(arguments)
                        verify_records(store, rule_file)
        verify_records(store, rule_file)
        yield Records(url=store.url, corpus=corpus_backends)
    finally:
        store.stop()


def digest_json(records: Records, day: date, recorded: bool, policy: Policy | None = None) -> dict[str, Any]:
    """The day's digest as JSON, from the records (and the logs for what they miss) or from the logs alone."""
    settings = load_settings(
        vm_url=records.corpus.metrics.url,
        vl_url=records.corpus.logs.url,
        records_url=records.url,
        recorded_counts="auto" if recorded else "off",
        cluster="homelab",
        timezone="UTC",
        policy_file=None,
    )
    config = Config(settings=settings, policy=policy or Policy())
    return to_json(asyncio.run(make_digest(config, day_window(day, settings.zone))))


def without_origin(digest: dict[str, Any]) -> dict[str, Any]:
    """The digest with each check's ``counted_from`` left out: what must not depend on where counts came from."""
    return {
        **digest,
        "checks": [{key: value for key, value in check.items() if key != "counted_from"} for check in digest["checks"]],
    }


def origins(digest: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    return {check["name"]: check["counted_from"] for check in digest["checks"]}


@pytest.mark.parametrize("day", sorted(DAYS), ids=str)
def test_recorded_digest_is_the_scanned_digest(records: Records, day: date) -> None:
    """On every corpus day the digest read from vmalert's records equals the scanned one, check for check."""
    scanned = digest_json(records, day, recorded=False)
    recorded = digest_json(records, day, recorded=True)
    assert without_origin(recorded) == without_origin(scanned)
    for name, origin in origins(scanned).items():
        assert origin is None or origin["source"] == "scanned", name
    seen = origins(recorded)
    assert {name for name, origin in seen.items() if origin is not None} == set(LOG_CHECKS)
    for name in LOG_CHECKS:
        origin = seen[name]
        assert origin is not None
        if day == TAMPERED_DAY and name != "envoy_flags":
            assert origin["source"] == "scanned", name
            assert (
                origin["note"]
                == "recorded counts not used (1 minutes' counts disagree with the recorder's heartbeat): scanned"
            )
        elif day == OUTAGE_DAY:
            assert origin == {
                "source": "both",
                "recorded_seconds": 20 * 3600.0,
                "scanned_seconds": 4 * 3600.0,
                "note": None,
            }, name
        else:
            assert origin == {"source": "recorded", "recorded_seconds": 86400.0, "scanned_seconds": 0.0, "note": None}


def test_a_changed_error_rule_reads_new_series(records: Records, tmp_path: Path) -> None:
    """A policy whose error rule changed reads (and would record) new names: the old rule's series are not mixed in."""
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("checks:\n  error_lines:\n    message_word: failure\n")
    policy = load_policy(policy_file)
    old = yaml.safe_load(rules(records.corpus, "--for", "vmalert"))["groups"][0]["rules"]
    new = yaml.safe_load(rules(records.corpus, "--for", "vmalert", policy_file=policy_file))["groups"][0]["rules"]
    changed = {rule["record"].split(":")[1] for rule in new} - {rule["record"].split(":")[1] for rule in old}
    assert not changed  # the same families…
    assert {rule["record"] for rule in new} ^ {rule["record"] for rule in old} == {
        old[0]["record"],
        new[0]["record"],
        old[-1]["record"],
        new[-1]["record"],
    }  # …but pod_lines and the heartbeat under new versions; access_lines, untouched by the rule, keeps its name
    day = date(2026, 7, 20)
    seen = origins(digest_json(records, day, recorded=True, policy=policy))
    assert seen["error_lines"] == {
        "source": "scanned",
        "recorded_seconds": 0.0,
        "scanned_seconds": 86400.0,
        "note": None,
    }
    assert seen["log_storms"] is not None
    assert seen["log_storms"]["source"] == "scanned"
    # The heartbeat is versioned by every family: with it renamed, nothing recorded is trusted yet.
    assert seen["envoy_flags"] is not None
    assert seen["envoy_flags"]["source"] == "scanned"


def test_live_rules_count_the_minute_before(records: Records) -> None:
    """The live rules, evaluated as vmalert does (``time=t``, no range), count exactly the lines of [t - 60 s, t)."""
    live = yaml.safe_load(rules(records.corpus, "--for", "vmalert"))["groups"][0]
    assert (live["type"], live["interval"]) == ("vlogs", "60s")
    assert all(rule["expr"].startswith("_time:1m ") for rule in live["rules"])
    assert all(rule["labels"] == {"digest_stamp": "end"} for rule in live["rules"])
    heartbeat = live["rules"][-1]["expr"]
    url = f"{records.corpus.logs.url}/select/logsql/stats_query"
    for minute in (datetime(2026, 7, 20, 6, 15, tzinfo=UTC), datetime(2026, 7, 20, 20, 31, tzinfo=UTC)):
        answer = httpx.post(url, data={"query": heartbeat, "time": rfc3339(minute)}).json()["data"]["result"]
        counted = {row["metric"]["__name__"]: row["value"][1] for row in answer}
        scan = f"_time:[{rfc3339(minute - timedelta(minutes=1))}, {rfc3339(minute)}) | stats count() as pod_lines"
        direct = httpx.post(url, data={"query": scan, "time": rfc3339(minute)}).json()["data"]["result"]
        assert counted["pod_lines"] == direct[0]["value"][1] != "0"


def test_vmalert_parses_the_rules_and_refuses_a_broken_one(records: Records, tmp_path: Path) -> None:
    """A real vmalert's dry run accepts the live and the replay rules, and names a rule whose LogsQL is broken."""
    for args in (("--for", "vmalert"), ("--for", "vmalert", "--replay")):
        path = tmp_path / "rules.yml"
        path.write_text(rules(records.corpus, *args))
        done = subprocess.run(
            [vmalert_binary(), "-dryRun", f"-rule={path}", "-loggerLevel=WARN"], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
    broken = path.read_text().replace("| stats", "| stats by (", 1)
    path.write_text(broken)
    done = subprocess.run(
        [vmalert_binary(), "-dryRun", f"-rule={path}", "-loggerLevel=WARN"], capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "digest:pod_lines" in done.stderr + done.stdout


def test_vmalert_asks_victorialogs_for_whole_answers_only(tmp_path: Path) -> None:
    """Live and replay rules ask for whole answers; a real vmalert's replay sends allow_partial_response=0 each time."""
    printed = {
        mode: run_digest("rules", "--for", "vmalert", *extra, env=clean_env())
        for mode, extra in (("live", ()), ("replay", ("--replay",)))
    }
    for done in printed.values():
        assert done.returncode == 0, done.stderr
        [group] = yaml.safe_load(done.stdout)["groups"]
        assert group["params"] == {"allow_partial_response": ["0"]}
    rule_file = tmp_path / "replay-rules.yml"
    rule_file.write_text(printed["replay"].stdout)
    start = datetime(2026, 7, 20, tzinfo=UTC)
    answer = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    with recording_server(Behaviour(body=answer)) as served:
        replay(rule_file, served.url, served.url, start, start + timedelta(minutes=2), tmp_path / "vmalert.log")
    asked = [request for request in served.requests if request.path.startswith("/select/logsql/")]
    assert len(asked) == 2 * len(yaml.safe_load(printed["replay"].stdout)["groups"][0]["rules"])
    for request in asked:
        assert "allow_partial_response=0" in request.path.split("?", 1)[1].split("&"), request.path


def test_rules_command_refuses_what_it_cannot_do(records: Records) -> None:
    """`digest rules --for loki --replay` is a usage error (Loki's ruler has no replay); `--for` is required."""
    done = run_digest("rules", "--for", "loki", "--replay", env=backend_env(records.corpus))
    assert done.returncode == 2
    assert "--replay goes with --for vmalert" in done.stderr
    done = run_digest("rules", env=backend_env(records.corpus))
    assert done.returncode == 2
    assert "--for" in done.stderr


def test_doctor_says_where_the_counts_come_from(records: Records, tmp_path: Path) -> None:
    """`digest doctor` names each log check's source, and rules written for another policy when it finds only those."""
    env = backend_env(records.corpus, DIGEST_RECORDS_URL=records.url)
    done = run_digest("doctor", "--at", "2026-07-21T00:00:00Z", "--format", "json", env=env)
    payload = json.loads(done.stdout)
    assert {name: one["source"] for name, one in payload["recorded_counts"]["checks"].items()} == dict.fromkeys(
        LOG_CHECKS, "recorded"
    )
    assert set(payload["recorded_counts"]["expected"]) <= set(payload["recorded_counts"]["found"])
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("checks:\n  error_lines:\n    error_levels: [error, fatal]\n")
    done = run_digest("doctor", "--at", "2026-07-21T00:00:00Z", env={**env, "DIGEST_POLICY_FILE": str(policy_file)})
    assert "error_lines: scanned" in done.stdout
    assert "rules written for another policy or log scope — write them again with `digest rules`" in done.stdout


def test_records_parts_fold_into_series_as_their_merged_rows_do() -> None:
    """Records' parts, as rows or as signed series, fold into the merged rows' series: signs summed, empties out."""
    from digest.backends.recorded import _merged
    from digest.checks.log_questions import CountRow, LineSeries, added_series, series_of

    first, second = {"node": "n1"}, {"node": "n2"}
    parts = [
        [
            CountRow(first, {"total": 5.0}, 0.0),
            CountRow(first, {"total": 3.0}, 600.0),
            CountRow(second, {"total": 2.0}, 0.0),
            CountRow({"node": "n4", "zone": "z"}, {"total": 4.0}, 0.0),
        ],
        # Another part (a scanned gap, another stamp): equal groups in other mappings (their labels in another
        # order, too), and subtracted families.
        [
            CountRow(dict(first), {"total": -3.0}, 600.0),
            CountRow(dict(second), {"total": -2.0}, 0.0),
            CountRow(second, {"total": 1.0}, 1200.0),
            CountRow({"zone": "z", "node": "n4"}, {"total": -1.0}, 0.0),
        ],
        [CountRow({"node": "n3"}, {"total": -1.0}, 0.0), CountRow(first, {"other": 9.0}, 0.0)],
    ]

    def by_group(series: list[LineSeries]) -> list[tuple[list[tuple[str, str]], dict[float, float]]]:
        return sorted((sorted(one.group.items()), dict(one.lines)) for one in series)

    folded = by_group(series_of([row for part in parts for row in part], "total"))
    assert folded == by_group(series_of(_merged(parts, peak=False), "total"))
    # The same parts as `RecordedLogs.series` reads them: each series' lines per bucket, signed.
    signed = [
        [(row.group, {row.bucket: row.counts["total"]}) for row in part if "total" in row.counts] for part in parts
    ]
    assert by_group(added_series(signed)) == folded
    assert folded == [
        ([("node", "n1")], {0.0: 5.0}),
        ([("node", "n2")], {1200.0: 1.0}),
        ([("node", "n4"), ("zone", "z")], {0.0: 3.0}),
    ]

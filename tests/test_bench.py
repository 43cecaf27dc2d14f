"""The benchmark's parts: the big-day generator streams exact days, and the programme measures and checks itself.

Real VictoriaMetrics and VictoriaLogs: the generated day is loaded and digested, and ``bench.runner --quick`` starts
its own pair, measures every figure of docs/benchmarks.md on small volumes, and stops them.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import struct
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from bench.floor import LOGS, METRICS, Dependencies, FloorResult, Query, checks_queries, query_text, window_of
from bench.generate import DAY, LoadReport, Shape, Volume, build_cluster, day_facts, load, log_chunks, volume_on
from bench.pairs import ALL_PAIRS, LOKI, parse_pairs
from bench.proxy import CountingProxy
from bench.recorded import Timed, startup_report
from bench.report import render_replays, replay_met
from bench.runner import (
    PRODUCT_PACKAGES,
    QUICK,
    ReplayResult,
    Run,
    compiled_product,
    digest_env,
    not_checked_in,
)
from bench.startup import Startup, library_modules
from digest.app.engine import Config, make_digest
from digest.app.settings import load_settings
from digest.pipeline.policy import Policy, TrendsPolicy
from digest.pipeline.window import day_window
from digest.testbed.embedded import EmbeddedBackends

REPO = Path(__file__).resolve().parent.parent
SMALL = Shape(pods=40, namespaces=4, nodes=4, cadvisor=True)


def _bench(args: list[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m <args>`` (one of the bench modules) from the repository root, its output captured."""
    return subprocess.run(  # our own modules, fixed arguments
        [sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_log_generation_streams_bounded_chunks_with_the_planned_counts() -> None:
    """A day is rendered chunk by chunk (never whole in memory), and its records are exactly the planned ones."""
    cluster = build_cluster(SMALL)
    volume = Volume(lines=30_000, envoy_records=3_000)
    facts = day_facts(cluster, DAY, volume)
    records = chunks = errors = 0
    for chunk in log_chunks(cluster, DAY, volume, chunk_records=2_000):
        lines = chunk.splitlines()
        assert len(lines) <= 2_000 + 1_000  # a chunk closes at the first second past its size
        chunks += 1
        records += len(lines)
        errors += sum(1 for line in lines if b"ERROR feeds.ws relay" in line)
    assert chunks >= 10
    assert records == facts.log_lines == volume.lines + volume.envoy_records
    assert errors == facts.flood_error_lines


async def test_generated_day_is_digested_with_its_exact_facts(own_backends: EmbeddedBackends) -> None:
    """Loaded into real backends, the generated day's flood error lines and OOM kill are what the digest counts."""
    cluster = build_cluster(SMALL)
    report = load(own_backends, cluster, [DAY], Volume(lines=30_000, envoy_records=3_000))
    (facts,) = report.facts
    settings = load_settings(
        vm_url=own_backends.metrics.url, vl_url=own_backends.logs.url, timezone="UTC", policy_file=None
    )
    digest = await make_digest(Config(settings=settings, policy=Policy()), day_window(DAY, settings.zone))
    by_name = {finding.name: finding for finding in digest.findings}
    assert by_name["error_lines"].value == facts.flood_error_lines
    assert by_name["error_lines"].offenders[0].labels["workload"] == facts.flood_workload.split("/")[1]
    assert by_name["oom_kills"].value == facts.oom_kills == 1
    # The floor asks what the check asks after its count: the flood workload's shapes, one request.
    from bench.floor import resolve_dependencies

    window = day_window(DAY, settings.zone)
    dependencies = await asyncio.to_thread(
        resolve_dependencies, own_backends.metrics.url, window, None, own_backends.logs.url
    )
    [shapes] = dependencies.shape_questions or ()
    [said] = by_name["error_lines"].signatures
    assert said.labels["workload"] == facts.flood_workload.split("/")[1]
    assert [query.purpose for query in checks_queries(window, dependencies) if "shapes" in query.purpose] == [
        "error_lines.shapes#1"
    ]
    assert shapes.window == window
    # The replay's floor asks them too, for each window it covers (the day's; the 7 days before it hold no data).
    from bench.floor import replay_queries

    queries, windows = await asyncio.to_thread(
        replay_queries, [DAY], own_backends.metrics.url, None, None, own_backends.logs.url
    )
    assert windows == 8
    assert [query.purpose for query in queries if "shapes" in query.purpose] == [f"{DAY} error_lines.shapes#1"]


async def _requests_per_digest(shape: Shape) -> tuple[dict[str, int], dict[str, int], int]:
    """The metrics and logs requests (by path) of one digest of DAY on a cluster of ``shape``, and its node count."""
    with EmbeddedBackends() as backends:
        load(backends, build_cluster(shape), [DAY], Volume(lines=5_000, envoy_records=500))
        with CountingProxy(backends.metrics.url) as metrics, CountingProxy(backends.logs.url) as logs:
            settings = load_settings(vm_url=metrics.url, vl_url=logs.url, timezone="UTC", policy_file=None)
            # Trends off: the earlier days hold only the generated hour before DAY, whose random restarts decide
            # whether their OOM check gets as far as the kernel counter (what happened, not how big the fleet is).
            policy = Policy(trends=TrendsPolicy(days=0))
            digest = await make_digest(Config(settings=settings, policy=policy), day_window(DAY, settings.zone))
            assert digest.status.value != "UNKNOWN", [f.summary for f in digest.findings if f.error]
            return dict(metrics.counts.by_path), dict(logs.counts.by_path), shape.nodes


async def test_requests_per_digest_do_not_grow_with_nodes_and_pods() -> None:
    """The same day on 4 nodes / 40 pods and on 16 nodes / 160 pods costs the same requests to each backend."""
    small = await _requests_per_digest(Shape(pods=40, namespaces=4, nodes=4, cadvisor=True))
    large = await _requests_per_digest(Shape(pods=160, namespaces=8, nodes=16, cadvisor=True))
    assert small[:2] == large[:2], (small, large)
    print(f"requests per digest: {sum(small[0].values())} + {sum(small[1].values())} on 4 and on 16 nodes")


def test_gc_cost_replays_with_the_collector_defaults_and_with_the_digest_tuning(own_backends: EmbeddedBackends) -> None:
    """`bench.gc_cost`, whose figures the docs quote, replays a loaded day under both collector settings."""
    load(own_backends, build_cluster(SMALL), [DAY], Volume(lines=5_000, envoy_records=500))
    env = {key: value for key, value in os.environ.items() if not key.startswith("DIGEST_")}
    env.update(DIGEST_VM_URL=own_backends.metrics.url, DIGEST_VL_URL=own_backends.logs.url, DIGEST_TIMEZONE="UTC")
    day = DAY.isoformat()
    result = _bench(["bench.gc_cost", "--from", day, "--to", day, "--repeats", "1"], timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2_000:]
    assert "median, default:" in result.stdout
    assert "median, tuned:" in result.stdout
    assert "full collections" in result.stdout


def test_quick_benchmark_programme_measures_and_checks_every_figure() -> None:
    """`bench.runner --quick` runs the floor, proxy, naive and warm measures, each checked (the replay's: below)."""
    # One run per measure: the programme's plumbing and its checks, not medians worth publishing. The replay and the
    # state file are the next test's (`--replay-only`): measured twice, they cost the suite 40 s more.
    result = _bench(["bench.runner", "--quick", "--no-write", "--repeats", "1", "--skip-replay"], timeout=900)
    assert result.returncode == 0, result.stderr[-2_000:]
    out = result.stdout
    for measure in (
        "ratio digest / checks floor",
        "recorded floor",
        "digest computed inside a running process",
        "peak RSS",
        "naive: download the error lines",
        "backend requests per digest",
        "The backend pairs side by side",
    ):
        assert measure in out, measure
    assert "requests per digest independent of size ✅ met" in out
    assert "digest counts every error line ✅ met" in out
    assert "peak RSS ≤ 150 MB and flat ✅ met" in out
    assert "checks floor of its windows" not in out  # --skip-replay
    assert result.stderr.count("backends stopped") == 2  # small day, big day: each pair stopped


def test_replay_only_programme_measures_the_replay_against_its_floor() -> None:
    """`bench.runner --quick --replay-only` loads the replay days alone: the replay, its floors, the state file."""
    # The smallest replay days the programme takes: the plumbing of --replay-only, not a figure worth publishing.
    result = _bench(
        ["bench.runner", "--quick", "--replay-only", "--repeats", "1", "--replay-lines", "10000"], timeout=600
    )
    assert result.returncode == 0, result.stderr[-2_000:]
    out = result.stdout
    assert "command `bench/run --quick --replay-only --repeats 1 --replay-lines 10000`" in out
    for measure in (
        "`digest replay --concurrency 2`",
        "checks floor of its windows",
        "recorded floor",
        "`DIGEST_STATE_PATH` set, past days stored by an earlier digest",
    ):
        assert measure in out, measure
    assert "Goals: replay ≤ 1.2× its floor (VM + VL, 5 days)" in out
    assert "ratio digest / checks floor" not in out  # no small or big day
    assert result.stderr.count("backends stopped") == 1


def test_backends_option_rejects_an_unknown_pair_with_a_usage_line() -> None:
    """`bench/run --backends` names the unknown pair under a usage line and exits 2 before starting anything."""
    result = _bench(["bench.runner", "--quick", "--backends", "victoriametrics+elasticsearch"], timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: bench/run")
    assert "unknown backend pair 'victoriametrics+elasticsearch'" in result.stderr
    assert "backends up" not in result.stderr
    assert parse_pairs("all") == list(ALL_PAIRS)
    assert parse_pairs("prometheus+loki,victoriametrics+victorialogs") == [ALL_PAIRS[0], ALL_PAIRS[3]]


def test_slow_pairs_replay_days_are_bounded_by_the_replay_dataset() -> None:
    """`--loki-replay-days` and `--prometheus-replay-days` outside 1..the dataset's days get a usage line, exit 2."""
    for option, value in (("--loki-replay-days", "0"), ("--prometheus-replay-days", "6")):
        result = _bench(["bench.runner", "--quick", option, value], timeout=120)
        assert result.returncode == 2
        assert result.stderr.startswith("usage: bench/run")
        assert f"{option}: between 1 and 5" in result.stderr
        assert "backends up" not in result.stderr


def test_floor_of_a_loki_pair_sends_loki_requests_for_its_logs() -> None:
    """The checks floor written for a Loki pair asks Loki's query API for every log question, and no LogsQL."""
    window = window_of(DAY)
    for pair in ALL_PAIRS:
        queries = checks_queries(window, Dependencies(), writer=pair.writer())
        logs = [query for query in queries if query.backend == LOGS]
        metrics = [query for query in queries if query.backend == METRICS]
        assert logs
        assert metrics
        assert all(query.path.startswith("/api/v1/query") for query in metrics)
        if pair.logs == LOKI:
            assert all(query.path in ("/loki/api/v1/query", "/loki/api/v1/query_range") for query in logs)
            assert not any("_time:" in query.form["query"] for query in logs)
            assert all("count_over_time(" in query.form["query"] for query in logs)
        else:
            assert all(query.path.startswith("/select/logsql/") for query in logs)


def _replay_result(proxied: dict[str, int], timed: list[dict[str, int]]) -> ReplayResult:
    """A replay of 2 days measured 3 times at 1.0× its floor, with the given checks not checked."""
    cluster = build_cluster(SMALL)
    days = [DAY - timedelta(days=1), DAY]
    volume = Volume(lines=1_000)
    load_report = LoadReport(0, 0, 0.0, 0, 0, 0.0, tuple(day_facts(cluster, day, volume) for day in days))
    result = ReplayResult(days=days, load=load_report, not_checked=proxied, timed_not_checked=timed)
    for _ in timed:
        result.many.append(Run(10.0, 1.0, 50.0, 0, "", ""))
        result.many_backend_cpu.append((1.0, 1.0))
        result.floors.append(FloorResult(10.0, {}))
        result.recorded_floors.append(FloorResult(10.0, {}))
    return result


def test_replay_summaries_name_the_checks_not_checked_with_their_days() -> None:
    """`not_checked_in` counts, per check, the days whose summary line says it was not checked."""
    summaries = (
        "2026-06-21 CRITICAL 8/10 · oom_kills −1 · envoy_flags −1 · error_lines not checked\n"
        "2026-06-22 CRITICAL 7/10 · oom_kills −1 · error_lines −1 · envoy_flags −1\n"
        "2026-06-23 UNKNOWN · error_lines not checked · log_storms not checked\n"
    )
    assert not_checked_in(summaries) == {"error_lines": 2, "log_storms": 1}
    assert not_checked_in("2026-06-22 OK 10/10\n") == {}


def test_replay_goal_is_missed_when_a_timed_replay_gave_up_on_a_check() -> None:
    """A replay at 1.0× its floor misses the goal when one timed run left a check unchecked, and says which."""
    info = {"fingerprint_start": "a", "fingerprint_end": "a"}
    whole = _replay_result({}, [{}, {}, {}])
    gave_up = _replay_result({}, [{}, {"error_lines": 11}, {}])
    assert whole.complete
    assert not gave_up.complete
    assert replay_met(whole)
    assert not replay_met(gave_up)
    text = render_replays(QUICK, [gave_up], info, "bench/run", floor_concurrency=4, replay_concurrency=2)
    assert "**1.00×** | " in text
    assert "❌ missed (checks not checked)" in text
    assert "in the timed ones: VM + VL: run 2 `error_lines` 11." in text
    assert "Goals: replay ≤ 1.2× its floor (VM + VL, 2 days) ❌ missed." in text
    text = render_replays(QUICK, [whole], info, "bench/run", floor_concurrency=4, replay_concurrency=2)
    assert "Checks not checked in the proxied replays (days): none; in the timed ones: none." in text
    assert "Goals: replay ≤ 1.2× its floor (VM + VL, 2 days) ✅ met." in text


def test_replay_query_timeout_reaches_the_digest_and_is_bounded() -> None:
    """`--replay-query-timeout` becomes DIGEST_QUERY_TIMEOUT of the replayed digests; outside (0, 600] exit 2."""
    pair = ALL_PAIRS[0]
    assert digest_env("http://m", "http://l", pair, 300.0)["DIGEST_QUERY_TIMEOUT"] == "300"
    assert "DIGEST_QUERY_TIMEOUT" not in digest_env("http://m", "http://l", pair)
    result = _bench(["bench.runner", "--quick", "--replay-only", "--replay-query-timeout", "0"], timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: bench/run")
    assert "--replay-query-timeout: more than 0 and at most 600" in result.stderr
    assert "backends up" not in result.stderr


def test_replay_lines_option_is_bounded_with_a_usage_line() -> None:
    """`--replay-lines` below its lower bound (10,000 lines) gets a usage line and exit 2, nothing started."""
    result = _bench(["bench.runner", "--quick", "--replay-only", "--replay-lines", "9999"], timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: bench/run")
    assert "--replay-lines: between 10,000 and 13,000,000" in result.stderr
    assert "backends up" not in result.stderr


def test_a_request_is_reported_by_its_query_whether_sent_as_a_form_a_body_or_in_the_path() -> None:
    """`query_text` reads the query a replayed request asks, wherever the request carried it, else its path."""
    body = Query(METRICS, "/api/v1/query", {}, "m#1", b"query=sum%28up%29&time=1", "application/x-www-form-urlencoded")
    form = Query(LOGS, "/select/logsql/stats_query", {"query": "* | stats count()"}, "l#2")
    path = Query(LOGS, "/loki/api/v1/query?query=count_over_time%28%7Ba%3D%22b%22%7D%5B1m%5D%29", {}, "l#3")
    bare = Query(LOGS, "/loki/api/v1/labels", {}, "l#4")
    assert [query_text(one) for one in (body, form, path, bare)] == [
        "sum(up)",
        "* | stats count()",
        'count_over_time({a="b"}[1m])',
        "/loki/api/v1/labels",
    ]


def test_a_week_of_quiet_days_before_a_flood_takes_a_volume_per_day() -> None:
    """`volume_on` gives one volume to every day, or each day its own (the quiet week before the flood)."""
    quiet, flood = Volume(lines=1_000), Volume(lines=9_000)
    before = DAY - timedelta(days=1)
    assert volume_on(quiet, DAY) is quiet
    week = {before: quiet, DAY: flood}
    assert (volume_on(week, before), volume_on(week, DAY)) == (quiet, flood)


def test_the_product_is_timed_from_bytecode_the_interpreter_accepts() -> None:
    """Before a digest is timed, each product module has a bytecode file whose header matches its source."""
    compiled_product.__wrapped__()
    modules = [path for package in PRODUCT_PACKAGES for path in (REPO / package).rglob("*.py")]
    assert len(modules) > 50
    for module in modules:
        cached = Path(importlib.util.cache_from_source(str(module)))
        header = cached.read_bytes()[:16]
        assert header[:4] == importlib.util.MAGIC_NUMBER, module
        source = module.stat()
        # A timestamp-based .pyc (flags 0) holds its source's modification time and size: the import's own check.
        flags, mtime, size = struct.unpack("<3I", header[4:16])
        assert (flags, mtime, size) == (0, int(source.st_mtime) & 0xFFFFFFFF, source.st_size & 0xFFFFFFFF), module


def test_fewer_than_three_repeats_never_write_the_table_of_medians() -> None:
    """`--repeats 1` is a check that the programme runs: refused with a usage line when the table would be written."""
    result = _bench(["bench.runner", "--repeats", "1"], timeout=120)
    assert result.returncode == 2
    assert "--repeats: at least 3 when the table is written" in result.stderr
    result = _bench(["bench.runner", "--quick", "--repeats", "0"], timeout=120)
    assert result.returncode == 2
    assert "--repeats: at least 1" in result.stderr


def test_startup_probes_split_the_clis_imports_into_libraries_and_the_projects_own() -> None:
    """`bench.startup` lists only other packages' modules, and times the interpreter, the libraries and the CLI."""
    names = library_modules()
    assert {"httpx", "pydantic_settings", "asyncio"} <= set(names)
    assert not [name for name in names if name.split(".")[0] in ("digest", "checks")]
    result = _bench(["bench.startup", "--repeats", "3"], timeout=120)
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout)
    # The libraries take ten times the bare interpreter; the CLI's lead over them is too small to assert on a busy
    # machine, so only the arithmetic is.
    assert 0 < measured["interpreter"] < measured["libraries"]
    assert measured["own"] == max(0.0, measured["cli"] - measured["libraries"])
    assert measured["library_modules"] == len(names)
    assert "of which the digest's own modules" in result.stderr
    refused = _bench(["bench.startup", "--repeats", "0"], timeout=60)
    assert refused.returncode == 2
    assert "--repeats: at least 1" in refused.stderr


def test_startup_report_estimates_each_recorded_digest_without_the_projects_own_start_up() -> None:
    """Without the project's own start-up, a run is estimated as the libraries' plus the in-process digest."""
    startup = Startup(interpreter=0.03, libraries=0.22, cli=0.31, library_modules=316)
    recorded = Timed(ALL_PAIRS[0], "0.1 M lines", "recorded", seconds=[1.08], floors=[0.65], warm=[0.73])
    scanned = Timed(ALL_PAIRS[0], "0.1 M lines", "scanned", seconds=[1.02], floors=[0.68])
    report = startup_report([recorded, scanned], startup)
    assert "the digest's own modules 0.090 s" in report
    lines = [line for line in report.splitlines() if line.startswith("- ")]
    assert lines == [
        f"- {ALL_PAIRS[0].label}, 0.1 M lines: the libraries' start-up and the in-process digest together 0.95 s, "
        "1.46× the floor (0.65 s); the run took 1.08 s, 1.66×"
    ]


def test_corpus_days_tables_each_day_against_the_days_before_it() -> None:
    """`bench.corpus_days` puts each recorded count on the day its window starts, and tables a day against the rest."""
    from bench.corpus_days import DayRun, _table, counted_day  # the module starts servers only in main()
    from bench.proxy import Recorded

    instant = Recorded("POST", "/loki/api/v1/query", b"query=sum%28x%29&time=2026-08-15T23%3A59%3A59.999999999Z", None)
    ranged = Recorded("GET", "/loki/api/v1/query_range?query=q&start=2026-08-16T00%3A00%3A00Z&step=600", b"", None)
    assert counted_day(instant) == "2026-08-15"
    assert counted_day(ranged) == "2026-08-16"
    assert counted_day(Recorded("GET", "/loki/api/v1/label/pod/values?start=1786924799000000000", b"", None)) == "?"
    run = DayRun(DAY, seconds=[3.0, 1.0, 2.0], verdict="OK 10/10", requests=40, alone={DAY.isoformat(): 1.5, "x": 2.0})
    table = _table([run], argparse.Namespace(per_request=True, against=""), 60.0)
    assert f"| {DAY} | 2.00 s | OK 10/10 | 40 | 1.50 s / 2.00 s |" in table
    # Against another checkout, run for run in turn: its median and the ratio beside this one's.
    paired = DayRun(DAY, seconds=[3.0, 1.0, 2.0], verdict="OK 10/10", requests=40, against=[4.0, 4.2, 3.8])
    table = _table([paired], argparse.Namespace(per_request=False, against="../before"), 60.0)
    assert "`python -m bench.corpus_days --against ../before`" in table
    assert f"| {DAY} | 2.00 s | 4.00 s | 0.50× | OK 10/10 | 40 | — |" in table

"""The digest with and without recorded counts, on a quiet and a flooded day: ``python -m bench.recorded``.

Issue 33's question: does a digest cost the same on the 13 M-line day as on the 0.1 M-line day once vmalert records
the log counts? For each day (the benchmark's generated cluster: 2,000 pods on 200 nodes; 0.1 M and 13 M log lines)
it loads VictoriaMetrics and VictoriaLogs (and, with ``--loki``, Loki), replays `digest rules --for vmalert
--replay` over the day with a real vmalert into the same VictoriaMetrics (the replay's own time is reported), and
times ``digest run --date … --format json`` through counting proxies, ``--repeats`` times each (median):

* **recorded**: ``DIGEST_RECORDED_COUNTS=auto`` (the default) with the records present;
* **scanned**: ``DIGEST_RECORDED_COUNTS=off``, today's figures for contrast;
* **no shapes**: recorded, with a policy that asks for no shapes (``signatures: 0``): the difference with the first
  is what "what the errors said" adds (a bounded sample on a flood);
* **outage**: a recorder outage in the middle of the day: the records read from another VictoriaMetrics
  (``DIGEST_RECORDS_URL``, proxied and counted with the metrics) into which vmalert replayed the day but for
  09:00-13:00, so the digest reads 20 hours from records and scans 4; its verdict and error count must be the
  recorded run's.

Beside each recorded and scanned digest, its **recorded floor**: the exact requests the last proxied run sent,
replayed directly and concurrently (at most ``DIGEST_MAX_CONCURRENCY`` per backend, `bench.floor.run_floor`) after
each run, median of as many: how close ``digest run`` comes to the time its own queries take. Beside the recorded
run, the same digest computed ``--repeats`` times inside one running process (`bench.warm`), as the bot computes a
``/digest``: what the digest costs once the interpreter has started and imported it.

Each run's digest is checked: no check UNKNOWN (every check checked with the default timeouts), the error lines
counted equal to those generated, and each log check's ``counted_from`` what the mode says. On Loki the records are
the ones vmalert made from VictoriaLogs, which holds the same lines: the digest's records do not depend on the log
backend that is scanned (their names carry the policy and the scope, not the backend).

With ``--week`` the seven days before are loaded too, each with the 0.1 M-line day's volume (logs and metrics), and
replayed with the day: the digest's trends then read the week from the records, as in a cluster whose recorder ran
all week, where without it they scan seven days that hold no line (vmalert writes no heartbeat for an empty minute,
so they cannot be told from a recorder that was down). On Loki that scan is most of a recorded digest.

Also ``python -X importtime`` of the CLI: what a ``digest run`` pays before its first query; and `bench.startup`'s
split of that start-up (the interpreter, the libraries, the project's own modules) with, per recorded digest, what a
one-shot run would take if the project's own modules cost nothing: the libraries' start-up and the in-process digest
together, over the floor.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from bench.floor import LOGS, METRICS, Query, cost_alone, query_text, run_floor, sent_fields
from bench.generate import DAY, build_cluster, day_facts
from bench.pairs import ALL_PAIRS, LOKI, REFERENCE, VICTORIALOGS, VICTORIAMETRICS, Pair
from bench.proxy import CountingProxy
from bench.runner import (
    FULL,
    MAX_CONCURRENCY,
    _stop_on_sigterm,
    checked,
    digest_command,
    digest_env,
    machine,
    measured,
    process_cpu,
    recorded_queries,
    revision,
    say,
    servers_loaded,
    settle,
    with_backend_cpu,
)
from bench.startup import CLI_PROBE, Startup, probe_environment
from bench.startup import measure as measure_startup
from digest.testbed.embedded import Server, free_port

LOG_CHECKS = ("error_lines", "log_storms", "envoy_flags")
# The recorder's outage in the "outage" mode: vmalert replays the day but for these hours.
OUTAGE_HOURS = (9, 13)
# ``--week``: the days before the day that the trends compare it with, loaded and recorded too.
WEEK_BEFORE = 7


@dataclass
class Timed:
    """One pair, day and mode: the median digest and what every run of it said."""

    pair: Pair
    day: str
    mode: str
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    requests: tuple[int, int] = (0, 0)
    headline: str = ""
    unknown: list[str] = field(default_factory=list)
    errors_counted: float = 0.0
    origins: dict[str, str] = field(default_factory=dict)
    floors: list[float] = field(default_factory=list)  # the recorded floor after each run (recorded, scanned)
    warm: list[float] = field(default_factory=list)  # recorded: the digest inside one running process (bench.warm)
    # CPU seconds the metrics store and the log store spent during each timed run (read from /proc around it).
    backend_cpu: list[tuple[float, float]] = field(default_factory=list)
    # ``--per-request``: each request of the proxied run sent alone, its backend's CPU seconds (the heaviest first).
    alone: list[tuple[float, float, str, str]] = field(default_factory=list)  # (CPU s, wall s, backend, query)
    error_origin: dict[str, object] = field(default_factory=dict)  # error_lines' counted_from, whole

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else float("nan")

    @property
    def floor(self) -> float:
        return statistics.median(self.floors) if self.floors else float("nan")

    @property
    def warm_median(self) -> float:
        return statistics.median(self.warm) if self.warm else float("nan")


def replay(rules: Path, logs_url: str, metrics_url: str, span: tuple[datetime, datetime] | None = None) -> float:
    """``vmalert -replay`` of the day (or of ``span``), one minute per request; its seconds."""
    day_start = datetime.combine(DAY, datetime.min.time(), UTC)
    start, end = span or (day_start, day_start + timedelta(days=1))
    binary = shutil.which("vmalert")
    if binary is None:
        raise RuntimeError("vmalert is not on PATH: run scripts/install-backends")
    command = [
        binary,
        f"-rule={rules}",
        f"-datasource.url={logs_url}",
        f"-remoteWrite.url={metrics_url}",
        f"-replay.timeFrom={start.isoformat().replace('+00:00', 'Z')}",
        f"-replay.timeTo={end.isoformat().replace('+00:00', 'Z')}",
        "-replay.maxDatapointsPerQuery=1",
        "-replay.rulesDelay=0s",
        "-replay.disableProgressBar",
        "-httpListenAddr=127.0.0.1:0",
        "-loggerLevel=ERROR",
    ]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)  # noqa: S603  # our binary and arguments
    if done.returncode != 0:
        raise RuntimeError(f"vmalert replay failed: {done.stderr[-600:]}")
    httpx.get(f"{metrics_url}/internal/force_flush", timeout=60)
    return time.monotonic() - started


def digest_runs(
    pair: Pair,
    day: str,
    mode: str,
    metrics_url: str,
    logs_url: str,
    pids: Sequence[int],
    repeats: int,
    no_shapes: Path,
    records_url: str | None = None,
    per_request: bool = False,
) -> Timed:
    """``repeats`` timed digests of the day in ``mode`` (recorded, scanned, no shapes, outage), each checked.

    One proxied run first counts the requests and captures them (a Python proxy on the path adds its own latency to
    every request, so the timed runs go to the backends directly); after each timed recorded or scanned run, its
    recorded floor: the captured requests, replayed directly.
    """
    timed = Timed(pair=pair, day=day, mode=mode)
    command = [*digest_command(), "run", "--date", DAY.isoformat(), "--format", "json"]

    def environment(metrics: str, logs: str, records: str | None) -> dict[str, str]:
        env = digest_env(metrics, logs, pair)
        env["DIGEST_RECORDED_COUNTS"] = "off" if mode == "scanned" else "auto"
        if mode == "no shapes":
            env["DIGEST_POLICY_FILE"] = str(no_shapes)
        if records is not None:
            env["DIGEST_RECORDS_URL"] = records
        return env

    with (
        CountingProxy(metrics_url) as metrics_proxy,
        CountingProxy(logs_url) as logs_proxy,
        CountingProxy(records_url or metrics_url) as records_proxy,
    ):
        counted = measured(
            command, environment(metrics_proxy.url, logs_proxy.url, records_proxy.url if records_url else None)
        )
        metrics_counts, logs_counts = metrics_proxy.reset(), logs_proxy.reset()
        timed.requests = (metrics_counts.requests + records_proxy.reset().requests, logs_counts.requests)
    if counted.code != 0:
        raise RuntimeError(f"digest run ({pair.key}, {day}, {mode}) exited {counted.code}: {counted.stderr[-600:]}")
    replayed = recorded_queries(metrics_counts, logs_counts)
    if per_request and mode in ("recorded", "scanned"):
        costs = cost_alone(replayed, metrics_url, logs_url, {METRICS: pids[0], LOGS: pids[1]}, process_cpu)
        timed.alone = sorted(
            ((seconds, wall, query.backend, f"{query_text(query)} @ {_when(query)}") for seconds, wall, query in costs),
            key=lambda one: -one[1],
        )
    for _ in range(repeats):
        run, spent = with_backend_cpu(pids, command, environment(metrics_url, logs_url, records_url))
        timed.backend_cpu.append(spent)
        if mode in ("recorded", "scanned"):
            timed.floors.append(asyncio.run(run_floor(replayed, metrics_url, logs_url, MAX_CONCURRENCY)).seconds)
        if run.code != 0:
            raise RuntimeError(f"digest run ({pair.key}, {day}, {mode}) exited {run.code}: {run.stderr[-600:]}")
        verdict = json.loads(run.stdout)
        checks = {check["name"]: check for check in verdict["checks"]}
        timed.seconds.append(run.seconds)
        timed.cpu.append(run.cpu_seconds)
        timed.headline = str(verdict["headline"])
        timed.unknown = [name for name, check in checks.items() if check["status"] == "UNKNOWN"]
        timed.errors_counted = (
            sum(offender["value"] for offender in checks["error_lines"]["offenders"])
            if checks["error_lines"]["offenders"]
            else 0.0
        )
        timed.origins = {
            name: (checks[name]["counted_from"] or {}).get("source", "?") for name in LOG_CHECKS if name in checks
        }
        timed.error_origin = dict(checks["error_lines"]["counted_from"] or {})
    if mode == "recorded":
        # The same digest inside one running process, as the bot computes it: start-up paid once.
        warm_command = [sys.executable, "-m", "bench.warm", "--date", DAY.isoformat(), "--repeats", str(repeats)]
        warm = checked(measured(warm_command, environment(metrics_url, logs_url, records_url)), "warm digests")
        timed.warm = [float(seconds) for seconds in json.loads(warm.stdout)["seconds"]]
    floor = f"; recorded floor {timed.floor:.2f} s" if timed.floors else ""
    floor += f"; in a running process {timed.warm_median:.2f} s" if timed.warm else ""
    say(
        f"{pair.short} {day} {mode}: {timed.median:.2f} s median of {timed.seconds}{floor}; {timed.headline}; "
        f"{timed.origins}"
    )
    return timed


# Fresh interpreters per start-up probe (`bench.startup`): three probes, about 0.3 s each at most.
STARTUP_REPEATS = 15


def import_seconds() -> tuple[float, list[tuple[float, str]]]:
    """``python -X importtime`` of `bench.startup.CLI_PROBE`: the total, and the packages whose own modules cost most.

    The collector is tuned first, as the `digest` script tunes it (`digest.app.console_script`). Each module's own
    time (not its cumulative time, which counts what it imports) is added to its top-level package's, so that
    pydantic's modules count as pydantic even when the digest's settings import them.
    """
    done = subprocess.run(  # noqa: S603  # this interpreter, our probe
        [sys.executable, "-X", "importtime", "-c", CLI_PROBE],
        capture_output=True,
        text=True,
        check=True,
        env=probe_environment(),
    )
    own: dict[str, float] = {}
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|\s*(\S+)", line)
        if not match:
            continue
        root = match.group(3).split(".")[0]
        own[root] = own.get(root, 0.0) + int(match.group(1)) / 1e6
    heaviest = sorted(((seconds, name) for name, seconds in own.items()), reverse=True)[:8]
    return sum(own.values()), heaviest


def cpu_cell(timed: Timed) -> str:
    """The CPU a digest's run cost its own process and each backend: with 2 cores, what its wall time follows."""
    if not timed.backend_cpu:
        return "not measured"
    metrics = statistics.median(one for one, _ in timed.backend_cpu)
    logs = statistics.median(two for _, two in timed.backend_cpu)
    return f"{statistics.median(timed.cpu):.2f} s; {metrics:.2f} s; {logs:.2f} s"


def _when(query: Query) -> str:
    """When a request asks about: its ``time``, or ``start``–``end`` (a range query)."""
    form = sent_fields(query)
    if "start" in form:
        return f"{form['start']}..{form.get('end', '')} step {form.get('step', '')}"
    return form.get("time", "")


def every_request(results: Sequence[Timed]) -> str:
    """``--per-request``: every request of every measured digest, longest first (tab-separated)."""
    rows = [
        f"{timed.pair.label}\t{timed.day}\t{timed.mode}\t{wall * 1000:.0f}\t{seconds * 1000:.0f}\t{backend}\t{query}"
        for timed in results
        for seconds, wall, backend, query in timed.alone
    ]
    return "pair\tday\tmode\twall ms\tCPU ms\tbackend\tquery @ time\n" + "\n".join(rows) + "\n"


def alone_report(results: Sequence[Timed], heaviest: int = 8) -> str:
    """``--per-request``: per pair, day and mode, the backends' CPU for the digest's requests sent one by one."""
    lines: list[str] = []
    for timed in results:
        if not timed.alone:
            continue
        spent = {
            backend: sum(seconds for seconds, _, one, _ in timed.alone if one == backend) for backend in (METRICS, LOGS)
        }
        waited = {
            backend: sum(wall for _, wall, one, _ in timed.alone if one == backend) for backend in (METRICS, LOGS)
        }
        lines.append(
            f"{timed.pair.label}, {timed.day}, {timed.mode}, each request sent alone: the metrics store "
            f"{spent[METRICS]:.2f} s of CPU ({waited[METRICS]:.2f} s waited), the log store {spent[LOGS]:.2f} s "
            f"({waited[LOGS]:.2f} s waited) in all; the longest:"
        )
        lines += [
            f"- {wall * 1000:.0f} ms ({seconds * 1000:.0f} ms CPU), {backend}: `{query[:160]}`"
            for seconds, wall, backend, query in timed.alone[:heaviest]
        ]
        lines.append("")
    return "\n".join(lines) + ("\n" if lines else "")


def startup_report(results: Sequence[Timed], startup: Startup) -> str:
    """`bench.startup`'s split of start-up, and per recorded digest what a run would take without the project's own.

    A ``digest run`` pays the interpreter and the libraries' imports before anything of the project runs, then the
    digest itself, about what it costs in a running process. Their sum over the recorded floor estimates the ratio a
    run would have if the project's own modules and set-up cost nothing (the in-process median is noisy: an estimate).
    """
    lines = [f"Start-up (`python -m bench.startup`, median of {STARTUP_REPEATS} each): {startup.line()}."]
    for timed in results:
        if timed.mode != "recorded" or not timed.warm or not timed.floors:
            continue
        without_own = startup.libraries + timed.warm_median
        lines.append(
            f"- {timed.pair.label}, {timed.day}: the libraries' start-up and the in-process digest together "
            f"{without_own:.2f} s, {without_own / timed.floor:.2f}× the floor ({timed.floor:.2f} s); the run took "
            f"{timed.median:.2f} s, {timed.median / timed.floor:.2f}×"
        )
    return "\n".join(lines) + "\n\n"


def table(results: Sequence[Timed], replays: dict[str, float]) -> str:
    """A Markdown table: per pair and day, the two modes side by side."""
    lines = [
        "| pair | day | `digest run`, recorded counts | its recorded floor; ratio | the same digest in a running "
        "process (the bot); ratio to the floor | scanned | its recorded floor; ratio | requests (metrics + logs), "
        "recorded / scanned | log checks' counts, recorded run | verdict "
        "| vmalert replay (of the day; with `--week`, of the 8 days) | recorded, no shapes asked "
        "| recorder outage 09-13 h: time; error_lines counted from; same verdict and errors "
        "| CPU per recorded digest: the digest; the metrics store; the log store (medians) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_key = {(one.pair.key, one.day, one.mode): one for one in results}
    for pair_key, day in dict.fromkeys((one.pair.key, one.day) for one in results):
        recorded, scanned = by_key[(pair_key, day, "recorded")], by_key[(pair_key, day, "scanned")]
        bare = by_key.get((pair_key, day, "no shapes"))
        outage = by_key.get((pair_key, day, "outage"))
        outage_cell = "not run"
        if outage is not None:
            origin = outage.error_origin
            same = outage.headline == recorded.headline and outage.errors_counted == recorded.errors_counted
            outage_cell = (
                f"{outage.median:.2f} s; {origin.get('source')} ({origin.get('recorded_seconds', 0):,.0f} s "
                f"recorded, {origin.get('scanned_seconds', 0):,.0f} s scanned); {'yes' if same else 'NO'}"
            )
        lines.append(
            f"| {recorded.pair.label} | {day} | {recorded.median:.2f} s "
            f"| {recorded.floor:.2f} s; {recorded.median / recorded.floor:.2f}× "
            f"| {recorded.warm_median:.2f} s; {recorded.warm_median / recorded.floor:.2f}× "
            f"| {scanned.median:.2f} s | {scanned.floor:.2f} s; {scanned.median / scanned.floor:.2f}× "
            f"| {recorded.requests[0]} + {recorded.requests[1]} / {scanned.requests[0]} + {scanned.requests[1]} "
            f"| {', '.join(f'{name}: {source}' for name, source in recorded.origins.items())} "
            f"| {recorded.headline}{' (UNKNOWN: ' + ', '.join(recorded.unknown) + ')' if recorded.unknown else ''} "
            f"| {replays.get(day, float('nan')):.1f} s | {bare.median if bare else float('nan'):.2f} s "
            f"| {outage_cell} | {cpu_cell(recorded)} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Load each day, replay its records, time the digests; print (and write) the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.recorded", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="digests per pair, day and mode (median)")
    parser.add_argument("--big-lines", type=int, default=FULL.big.lines, help="the big day's log lines (13 M)")
    parser.add_argument("--loki", action="store_true", help="also VictoriaMetrics + Loki (loading Loki is slow)")
    parser.add_argument("--days", default="small,big", help="which days: small, big or both (default)")
    parser.add_argument("--output", type=Path, help="also write the table (with the run's header) to this file")
    parser.add_argument("--no-outage", action="store_true", help="skip the recorder-outage mode")
    parser.add_argument(
        "--per-request",
        action="store_true",
        help="also send each request of the recorded and scanned digests alone and report what each costs its"
        " backend's CPU",
    )
    parser.add_argument(
        "--week",
        action="store_true",
        help=f"also the {WEEK_BEFORE} days before, quiet (0.1 M lines each) and recorded: the trends read records",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    started = time.monotonic()
    pairs = [pair for pair in ALL_PAIRS if pair.metrics == VICTORIAMETRICS and pair.logs == VICTORIALOGS]
    if args.loki:
        pairs += [pair for pair in ALL_PAIRS if pair.metrics == VICTORIAMETRICS and pair.logs == LOKI]
    cluster = build_cluster(FULL.shape)
    volumes = {"0.1 M lines": FULL.small, f"{args.big_lines / 1e6:g} M lines": replace(FULL.big, lines=args.big_lines)}
    wanted = {"small": "0.1 M lines", "big": next(iter(list(volumes)[1:]))}
    chosen = [wanted[name] for name in args.days.split(",")]
    results: list[Timed] = []
    replays: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="digest-bench-rules-") as folder:
        rules = Path(folder) / "replay.yaml"
        printed = subprocess.run(  # noqa: S603  # the installed digest, our arguments
            [*digest_command(), "rules", "--for", "vmalert", "--replay"],
            capture_output=True,
            text=True,
            check=True,
            env={key: value for key, value in os.environ.items() if not key.startswith("DIGEST_")},
        )
        rules.write_text(printed.stdout)
        no_shapes = Path(folder) / "no-shapes.yaml"
        no_shapes.write_text("checks:\n  error_lines:\n    signatures: 0\n")
        before = [DAY - timedelta(days=back) for back in range(WEEK_BEFORE, 0, -1)] if args.week else []
        day_start = datetime.combine(DAY, datetime.min.time(), UTC)
        first = datetime.combine(before[0], datetime.min.time(), UTC) if before else day_start
        for day in chosen:
            volume = volumes[day]
            facts = day_facts(cluster, DAY, volume)
            loaded_volumes = {**dict.fromkeys(before, FULL.small), DAY: volume}
            with (
                servers_loaded(day, cluster, [*before, DAY], loaded_volumes, pairs) as (loaded, _report),
                contextlib.ExitStack() as stack,
            ):
                say(f"{day}: {settle(loaded.pids)}")
                metrics_url, logs_url, _ = loaded.of(REFERENCE)
                replays[day] = replay(rules, logs_url, metrics_url, (first, day_start + timedelta(days=1)))
                say(f"{day}: vmalert replay {replays[day]:.1f} s")
                outage_store = None
                if not args.no_outage:
                    # Another store holding the day's records but for the outage's hours.
                    outage_store = Server("records-outage", "victoria-metrics", free_port(), Path(folder) / day)
                    outage_store.start(["-search.latencyOffset=0s"])
                    stack.callback(outage_store.stop)  # stopped however the day's runs end
                    down, up = (day_start + timedelta(hours=hour) for hour in OUTAGE_HOURS)
                    for span in ((first, down), (up, day_start + timedelta(days=1))):
                        replay(rules, logs_url, outage_store.url, span)
                # vmalert wrote a day of samples: VictoriaMetrics merges them in the background for a while, which
                # the first digests would otherwise share the cores with.
                outage_pids = [outage_store.process.pid] if outage_store and outage_store.process else []
                say(f"{day}: after the replay, {settle([*loaded.pids, *outage_pids])}")
                modes = ("recorded", "scanned", "no shapes", *(("outage",) if outage_store else ()))
                for pair in pairs:
                    metrics_url, logs_url, pair_pids = loaded.of(pair)
                    for mode in modes:
                        records_url = outage_store.url if mode == "outage" and outage_store else None
                        timed = digest_runs(
                            pair,
                            day,
                            mode,
                            metrics_url,
                            logs_url,
                            pair_pids,
                            args.repeats,
                            no_shapes,
                            records_url,
                            args.per_request,
                        )
                        expected = {"scanned": "scanned", "outage": "both"}.get(mode, "recorded")
                        if timed.unknown:
                            say(f"  UNKNOWN checks: {timed.unknown}")
                        if any(source != expected for name, source in timed.origins.items() if name != "envoy_flags"):
                            say(f"  counted_from is not {expected}: {timed.origins}")
                        say(f"  error lines generated {facts.flood_error_lines:,}")
                        results.append(timed)
    total, heaviest = import_seconds()
    startup = measure_startup(STARTUP_REPEATS)
    info = machine()
    header = (
        f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, `python -m bench.recorded"
        f"{' ' + ' '.join(argv or sys.argv[1:]) if (argv or sys.argv[1:]) else ''}`, {revision()}, "
        f"{time.monotonic() - started:.0f} s; {info['cores']} cores; VictoriaLogs {info['victoria-logs']}"
    )
    imports = ", ".join(f"{name} {seconds * 1000:.0f} ms" for seconds, name in heaviest)
    text = (
        f"{header}\n\n{table(results, replays)}\n\n{alone_report(results)}{startup_report(results, startup)}"
        f"`python -X importtime -c '{CLI_PROBE}'`: {total:.2f} s in all; by package (its modules' own "
        f"time): {imports}\n"
    )
    print(text)
    if args.output is not None:
        args.output.write_text(text, encoding="utf-8")
        if args.per_request:
            args.output.with_suffix(".requests.tsv").write_text(every_request(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

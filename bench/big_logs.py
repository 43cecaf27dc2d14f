"""The big day's log questions on VictoriaLogs and on Loki, side by side in one run: ``python -m bench.big_logs``.

Why a programme of its own: `bench/run` measures each pair's floor (every check's queries sent directly) three times
per day, and on Loki the floor grows with the lines: 17 s for one day of 210,000 records on these 2 cores, so about
a quarter of an hour per floor at 13.2 M records — six floors would not fit any session. This measures what a user
choosing a log backend needs to know, once per log backend, with VictoriaMetrics for the metrics of both:

* the load: records, seconds until every line is visible, the log server's resident memory afterwards;
* one ``digest run --format json`` through the counting proxies: its wall time, the verdict, the error lines it
  counted against those generated, its requests, and which checks read UNKNOWN and why (the digest's own 30 s query
  timeout applies: that is what a user with default settings would read);
* the ``error_lines`` question's queries sent directly, as the floor sends them (at most 4 in flight), with a long
  client timeout (``--timeout``), so that the time Loki needs is measured rather than cut off; with the log server's
  CPU seconds spent on them.

It prints a Markdown table (and writes it to ``--output``). The servers are embedded, on loopback ports, in temporary
directories, and stopped by PID at the end (also on Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.floor import checks_queries, resolve_dependencies, run_floor, window_of
from bench.generate import DAY, build_cluster, day_facts
from bench.pairs import ALL_PAIRS, LOKI, VICTORIALOGS, VICTORIAMETRICS, Pair, rss_mib
from bench.proxy import CountingProxy
from bench.runner import (
    FULL,
    MAX_CONCURRENCY,
    _stop_on_sigterm,
    digest_command,
    digest_env,
    machine,
    measured,
    process_cpu,
    revision,
    say,
    servers_loaded,
    settle,
)

PAIRS = tuple(pair for pair in ALL_PAIRS if pair.metrics == VICTORIAMETRICS and pair.logs in (VICTORIALOGS, LOKI))


@dataclass
class Measure:
    """One log backend's answers on the big day."""

    pair: Pair
    logs_rss_mib: float = float("nan")
    digest_seconds: float = float("nan")
    digest_rss_mib: float = float("nan")
    headline: str = ""
    counted_errors: float = 0.0
    requests: tuple[int, int] = (0, 0)
    unknown: dict[str, str] = field(default_factory=dict)
    question_queries: int = 0
    question_seconds: float = float("nan")
    question_slowest: float = float("nan")
    question_cpu: float = float("nan")
    question_error: str = ""


def measure(pair: Pair, metrics_url: str, logs_url: str, logs_pid: int, timeout: float) -> Measure:
    """One proxied digest and the ``error_lines`` question sent directly, on ``pair``'s loaded servers."""
    result = Measure(pair=pair, logs_rss_mib=rss_mib(logs_pid))
    command = [*digest_command(), "run", "--date", DAY.isoformat(), "--format", "json"]
    with CountingProxy(metrics_url) as metrics_proxy, CountingProxy(logs_url) as logs_proxy:
        run = measured(command, digest_env(metrics_proxy.url, logs_proxy.url, pair))
        result.requests = (metrics_proxy.reset().requests, logs_proxy.reset().requests)
    if run.code != 0:
        raise RuntimeError(f"digest run on {pair.key} exited {run.code}: {run.stderr.strip()[-600:]}")
    verdict = json.loads(run.stdout)
    by_name = {check["name"]: check for check in verdict["checks"]}
    result.digest_seconds, result.digest_rss_mib = run.seconds, run.max_rss_mib
    result.headline = str(verdict["headline"])
    result.counted_errors = float(by_name["error_lines"]["value"] or 0)
    result.unknown = {
        name: str(check.get("error") or check.get("summary") or "")
        for name, check in by_name.items()
        if check.get("status") == "UNKNOWN"
    }
    say(f"{pair.short}: digest {run.seconds:.1f} s: {result.headline}; error_lines {result.counted_errors:,.0f}")

    window = window_of(DAY)
    queries = [
        query
        for query in checks_queries(window, resolve_dependencies(metrics_url, window), writer=pair.writer())
        if query.purpose.startswith("error_lines.")
    ]
    result.question_queries = len(queries)
    cpu_before = process_cpu(logs_pid)
    started = time.monotonic()
    try:
        floor = asyncio.run(run_floor(queries, metrics_url, logs_url, MAX_CONCURRENCY, timeout_seconds=timeout))
        result.question_seconds = floor.seconds
        result.question_slowest = max(floor.per_query.values(), default=0.0)
    except Exception as exc:  # a refusal or a timeout is the measurement: say it rather than stop the run
        result.question_error = f"{type(exc).__name__}: {str(exc)[:200]} (after {time.monotonic() - started:.0f} s)"
    result.question_cpu = process_cpu(logs_pid) - cpu_before
    say(f"{pair.short}: error_lines question {result.question_seconds:.1f} s {result.question_error}")
    return result


def table(measures: Sequence[Measure], expected_errors: int, records: int, loads: dict[str, str]) -> str:
    """The side-by-side Markdown table."""
    names = [measure.pair.label for measure in measures]
    rows: list[tuple[str, list[str]]] = [
        ("load (records; until all visible)", [loads.get(measure.pair.logs, "") for measure in measures]),
        ("log server RSS after loading", [f"{m.logs_rss_mib:.0f} MiB" for m in measures]),
        (
            "`error_lines` question sent directly (queries; wall; slowest request)",
            [
                m.question_error or f"{m.question_queries}; {m.question_seconds:.2f} s; {m.question_slowest:.2f} s"
                for m in measures
            ],
        ),
        ("log server CPU seconds for that question", [f"{m.question_cpu:.1f}" for m in measures]),
        ("`digest run` (default settings: 30 s per query)", [f"{m.digest_seconds:.1f} s" for m in measures]),
        ("`digest run` peak RSS", [f"{m.digest_rss_mib:.0f} MiB" for m in measures]),
        ("verdict", [m.headline for m in measures]),
        (
            "error lines counted / generated",
            [f"{m.counted_errors:,.0f} / {expected_errors:,}" for m in measures],
        ),
        ("requests per digest (metrics + logs)", [f"{m.requests[0]} + {m.requests[1]}" for m in measures]),
        (
            "checks UNKNOWN (why)",
            ["; ".join(f"`{name}`: {reason[:140]}" for name, reason in m.unknown.items()) or "none" for m in measures],
        ),
    ]
    lines = [f"| measure ({records:,} records, {expected_errors:,} error lines) | {' | '.join(names)} |"]
    lines.append("|---|" + "---|" * len(names))
    lines.extend(f"| {label} | {' | '.join(cell.replace('|', '/') for cell in cells)} |" for label, cells in rows)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Load the big day into VictoriaLogs and Loki, measure both, print (and write) the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.big_logs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=FULL.big.lines, help="application log lines (default 13 M)")
    parser.add_argument("--timeout", type=float, default=900.0, help="client timeout of the direct question, s")
    parser.add_argument("--output", type=Path, help="also write the table (with the run's header) to this file")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    started = time.monotonic()
    cluster = build_cluster(FULL.shape)
    volume = replace(FULL.big, lines=args.lines)
    facts = day_facts(cluster, DAY, volume)
    measures: list[Measure] = []
    with servers_loaded("big", cluster, [DAY], volume, PAIRS) as (loaded, report):
        say(f"big: {settle(loaded.pids)}")
        loads = {VICTORIALOGS: f"{report.facts[0].log_lines:,}; {report.logs_seconds:.0f} s"}
        for load in loaded.loads:
            if load.backend == LOKI:
                loads[LOKI] = f"{load.items:,}; {load.seconds:.0f} s"
        for pair in PAIRS:
            metrics_url, logs_url, pids = loaded.of(pair)
            measures.append(measure(pair, metrics_url, logs_url, pids[1], args.timeout))
    info = machine()
    header = (
        f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, `python -m bench.big_logs"
        f"{'' if args.lines == FULL.big.lines else f' --lines {args.lines}'}`, {revision()}, "
        f"{time.monotonic() - started:.0f} s; {info['cores']} cores, {info.get('ram', '?')} RAM; "
        f"VictoriaLogs {info['victoria-logs']}; {info['loki']}"
    )
    text = f"{header}\n\n{table(measures, facts.flood_error_lines, facts.log_lines, loads)}\n"
    print(text)
    if args.output is not None:
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

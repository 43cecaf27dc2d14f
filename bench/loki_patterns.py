"""What naming the shapes costs on Loki (patterns API + counts), against counting the errors alone.

``python -m bench.loki_patterns --lines 1000000``

Why a programme of its own: Loki's pattern ingester mines only lines it ingests live and keeps about 3 hours, so
the backfilled benchmark days of `bench/run` can never show a pattern (the digest there gets one 404 or one empty
answer per workload). This pushes one flooding workload's lines stamped over the last two hours into a Loki with its
pattern ingester on — 90 % one storm shape, the rest a tail of ``--tail`` shapes, and as many info lines as errors —
waits until the patterns are mined, then measures, three times each, with the digest's own source:

* the workload's error lines counted alone (the error rule's metric queries: what error_lines asks anyway);
* ``LokiSource.shapes`` for the workload: the patterns request, each counted pattern and the rest, the first and
  last line of each shown shape;
* the same shapes read from 1 minute in N (``--sample-every N``; by default the N error_lines asks for these lines,
  ``ceil(lines / signature_sample_lines)``, at least 2; Loki reads 1 in more past 64 minutes): each count reads
  only the sampled minutes, and each shown shape's first and last line are read in its first and last sampled minute;
* the first and last line of each shape shown, read over the whole window instead (six log queries of limit 1, each
  with its own pattern filter only): what the sample does not send.

with their requests and the Loki process's CPU seconds. Loki is started on a loopback port in a temporary directory
and stopped by its PID at the end. It prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx

from bench.runner import process_cpu, revision, say
from digest.backends.http import Endpoint
from digest.backends.loki import LokiSource, pattern_filter
from digest.checks.contract import Window
from digest.checks.error_lines import ErrorLinesCheck, ErrorLinesPolicy
from digest.checks.log_questions import every as every_of
from digest.testbed.loki_server import LokiServer

PATTERN_FLAGS = ("-pattern-ingester.enabled=true", "-pattern-ingester.min-ready-duration=0s")
NAMESPACE = "feeds"
POD = "feed-aggregator-7c9d8f6b5-x2k4q"
STORM = "ERROR feeds.ws relay: connect ETIMEDOUT 203.0.113.{a}:{port} after {ms}ms"
TAIL_WORDS = ("cache", "queue", "disk", "tls", "dns", "auth", "quota", "lease", "index", "shard", "codec", "pool")
SPAN = timedelta(hours=2)
ROUNDS = 3


def tail_message(shape: int, index: int) -> str:
    """One line of the tail's shape ``shape``: a different word count per shape, so that Drain keeps them apart."""
    words = " ".join(TAIL_WORDS[(shape + k) % len(TAIL_WORDS)] for k in range(2 + shape % 9))
    return f"ERROR {words} failed code={shape} attempt {index}"


def records(start: datetime, errors: int, tail: int) -> Iterator[bytes]:
    """Vector-shaped NDJSON chunks: ``errors`` error lines and as many info lines, in time order."""
    storm = errors * 9 // 10
    step = SPAN / (2 * errors)
    chunk: list[str] = []
    for index in range(2 * errors):
        moment = start + step * index
        if index % 2:
            message, level = f"GET /feeds/{index % 977} 200 in {index % 90}ms", "info"
        elif index // 2 < storm:
            message = STORM.format(a=index % 250, port=1000 + index % 9000, ms=index % 997)
            level = "error"
        else:
            message, level = tail_message(index % tail, index), "error"
        record = {
            "kubernetes": {"container_name": "app", "pod_name": POD, "pod_namespace": NAMESPACE, "pod_node_name": "n1"},
            "message": message,
            "level": level,
            "stream": "stderr",
            "timestamp": moment.isoformat(timespec="microseconds").replace("+00:00", "Z"),
        }
        chunk.append(json.dumps(record))
        if len(chunk) == 50_000:
            yield ("\n".join(chunk) + "\n").encode()
            chunk = []
    if chunk:
        yield ("\n".join(chunk) + "\n").encode()


def mined(url: str, window: Window) -> int:
    """How many patterns Loki answers for the workload's streams in ``window``."""
    form = {"query": f'{{namespace="{NAMESPACE}"}}', "start": window.start.isoformat(), "end": window.end.isoformat()}
    answer = httpx.post(f"{url}/loki/api/v1/patterns", data=form, timeout=60).json()
    return len(answer.get("data") or [])


def sample_every(lines: int, asked: int) -> int:
    """One minute in how many the sampled shapes read: ``asked``, else error_lines' choice for ``lines``, at least 2."""
    return asked if asked > 0 else max(2, ErrorLinesCheck(ErrorLinesPolicy()).sample_every(lines))


async def measure(
    url: str, pid: int, window: Window, every: int, rounds: int = ROUNDS
) -> list[tuple[str, float, int, float, str]]:
    """(what, median seconds, requests, Loki CPU seconds per round, answer) for the count and the shapes."""
    check = ErrorLinesCheck(ErrorLinesPolicy())
    rule = check.shape_question(window, NAMESPACE, {POD})
    source = LokiSource(Endpoint(name="Loki", url=url, timeout_seconds=600))
    rows = []
    shown: list[str] = []
    try:
        for what in ("count", "shapes", "shapes sampled", "whole-window first and last lines"):
            times, cpu, sent, answer = [], [], 0, ""
            for _ in range(rounds):
                before_cpu, before_sent, started = process_cpu(pid), source.queries_sent, time.perf_counter()
                if what == "count":
                    answer = f"{await source.total(window, rule.lines):,.0f} error lines"
                elif what == "whole-window first and last lines":
                    # The log queries of limit 1 that `shapes` sends for its shown shapes, sent alone (each with its
                    # own pattern filter: `shapes` also excludes the patterns ranked before it).
                    await asyncio.gather(
                        *(
                            source._edge(window, every_of(rule.lines, pattern_filter(pattern)), direction)
                            for pattern in shown
                            for direction in ("forward", "backward")
                        )
                    )
                    answer = f"{len(shown)} shapes × first and last line, over the whole window"
                else:
                    sampled = what == "shapes sampled"
                    shapes = await source.shapes(replace(rule, sample_every=every if sampled else 1))
                    shown = [shape.key for shape in shapes.top]
                    top = f"top {shapes.top[0].lines:,.0f} ({shapes.top[0].text[:50]}…)" if shapes.top else "no top"
                    answer = f"{shapes.distinct} shapes, {top}, {shapes.unshaped:,.0f} unshaped"
                    if sampled:
                        answer = f"1 minute in {shapes.sampled_every}: " + answer
                times.append(time.perf_counter() - started)
                cpu.append(process_cpu(pid) - before_cpu)
                sent = source.queries_sent - before_sent
            rows.append((what, statistics.median(times), sent, statistics.median(cpu), answer))
    finally:
        await source.aclose()
    return rows


def main(argv: list[str] | None = None) -> int:
    """Load, wait for the patterns, measure, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="error lines of the workload (default 1,000,000)")
    parser.add_argument("--tail", type=int, default=40, help="shapes of the tail (default 40)")
    parser.add_argument(
        "--sample-every",
        type=int,
        default=0,
        help="the sampled shapes read 1 minute in N (default: error_lines' N for these lines, at least 2)",
    )
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help=f"times each question is asked, the median kept (default {ROUNDS})"
    )
    args = parser.parse_args(argv)
    every = sample_every(args.lines, args.sample_every)
    with LokiServer(extra_args=PATTERN_FLAGS) as server:
        now = datetime.now(UTC).replace(microsecond=0)
        start = now - SPAN - timedelta(minutes=1)
        say(f"pushing {2 * args.lines:,} lines stamped {start:%H:%M}–{now:%H:%M} UTC")
        loaded = time.perf_counter()
        summary = server.push_records(records(start, args.lines, args.tail))
        server.wait_for_lines(start - timedelta(minutes=1), now, summary.lines, timeout_seconds=1800)
        say(f"{summary.lines:,} lines visible after {time.perf_counter() - loaded:.0f} s")
        end = now + timedelta(minutes=1)
        window = Window(start=end - timedelta(hours=3), end=end, zone=UTC, label="the last 3 hours")
        deadline = time.monotonic() + 600
        while mined(server.url, window) < 5:
            if time.monotonic() > deadline:
                say("the pattern ingester mined fewer than 5 patterns in 600 s")
                return 1
            time.sleep(1)
        rows = asyncio.run(measure(server.url, server.pid, window, every, args.rounds))
    print(
        f"Loki patterns at {revision()}: {args.lines:,} error lines (+ as many info), tail of {args.tail} shapes, "
        f"the sample asked 1 minute in {every} of the 3-hour window (the row says what Loki read)"
    )
    print(f"| question | median of {args.rounds} | requests | Loki CPU s | answer |")
    print("|---|---|---|---|---|")
    for what, seconds, sent, cpu, answer in rows:
        print(f"| {what} | {seconds:.2f} s | {sent} | {cpu:.1f} | {answer} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

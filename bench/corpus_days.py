"""The corpus days scanned on Prometheus + Loki, as a first digest sees them: ``python -m bench.corpus_days``.

Why a programme of its own: the generated days of `bench/run` and `bench.recorded` are one cluster shape (2,000
pods, one access log); the corpus days are the incidents the digest exists for, with their access logs, floods and
quiet days, and a reader of issue 53 asked how long a digest of such a day takes on Prometheus + Loki without
recorded counts and without a state file — every one of the seven earlier days of the trends counted again, as a
first `digest run --date`, a replay or a `/digest` of the last 24 h does.

It starts a Prometheus 2.42 and a Loki 3.5.12 holding every corpus day (the tests' snapshots when kept: the logs at
the suite's volume scale, ``DIGEST_TEST_VOLUME_SCALE``, 0.05 unless set; Loki's results cache off, so that every
digest counts its lines), times ``digest run --date D --format json`` for each day (``--repeats`` runs, the median
kept) and prints a Markdown table: seconds, the verdict, and (``--per-request``) the seconds the digest's log requests
take sent one by one — recorded by a counting proxy in one more run, each sent once alone, summed for the day's own
window and for the days before it (the trends' seven, the look-back) — which is where a Loki digest's time goes. Both
servers are stopped by PID at the end (also on Ctrl-C).

``--against DIR`` times another checkout's digest too (a git worktree of an earlier commit, its modules first on
``PYTHONPATH``), run for run in turn with this one's, so that a before-and-after is measured on the same minutes of a
machine whose speed drifts (up to 2× between mornings here); the verdicts must agree.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from urllib.parse import parse_qsl, urlsplit

import httpx

from bench.proxy import CountingProxy, Recorded
from bench.runner import _stop_on_sigterm, digest_command, revision, say
from digest.testbed.corpus import DAYS, scaled, suite_volume_scale
from digest.testbed.loki_server import corpus_loki_snapshot, loaded_loki, loki_binary_or_skip
from digest.testbed.prometheus_server import PrometheusServer, corpus_prometheus_snapshot

VOLUME_SCALE = suite_volume_scale()
_DAY = re.compile(r"\d{4}-\d\d-\d\d")
_COUNTS = ("/loki/api/v1/query", "/loki/api/v1/query_range")


@dataclass
class DayRun:
    """One corpus day's digests."""

    day: date
    seconds: list[float] = field(default_factory=list)
    verdict: str = ""
    requests: int = 0
    alone: dict[str, float] = field(default_factory=dict)  # the day a request counts → its seconds, sent alone
    against: list[float] = field(default_factory=list)  # the other checkout's runs (``--against``), in turn


def main(argv: Sequence[str] | None = None) -> int:
    """Load the corpus, time each day's digest, print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.corpus_days", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="digests per day (median)")
    parser.add_argument("--days", default="", help="comma-separated YYYY-MM-DD (default: every corpus day)")
    parser.add_argument("--per-request", action="store_true", help="also send each log request alone, per day")
    parser.add_argument(
        "--against",
        default="",
        help="another checkout of the project (a git worktree): its digest timed too, run for run in turn with this"
        " one's, for a paired comparison on a machine whose speed drifts",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    wanted = [date.fromisoformat(day) for day in args.days.split(",") if day] or sorted(DAYS)
    started = time.monotonic()
    binary = loki_binary_or_skip()
    days = [scaled(day, VOLUME_SCALE) for day in DAYS.values()]
    runs: list[DayRun] = []
    with (
        PrometheusServer(DAYS.values(), snapshot=corpus_prometheus_snapshot()) as prometheus,
        loaded_loki(days, corpus_loki_snapshot(VOLUME_SCALE, binary), binary) as loki,
    ):
        say(f"Prometheus {prometheus.url}, Loki {loki.url}: {len(days)} corpus days")
        env = {key: value for key, value in os.environ.items() if not key.startswith("DIGEST_")}
        env.update(DIGEST_VM_URL=prometheus.url, DIGEST_LOKI_URL=loki.url, DIGEST_TIMEZONE="UTC")
        for day in wanted:
            run = DayRun(day)
            command = [*digest_command(), "run", "--date", day.isoformat(), "--format", "json"]
            for _ in range(max(1, args.repeats)):
                run.seconds.append(_timed(command, env, run))
                if args.against:
                    # The other checkout's modules first on the path: the same console script runs its code.
                    other = DayRun(day)
                    run.against.append(_timed(command, {**env, "PYTHONPATH": args.against}, other))
                    if other.verdict != run.verdict:
                        raise RuntimeError(f"{day}: {run.verdict} here, {other.verdict} in {args.against}")
            if args.per_request:
                with CountingProxy(loki.url) as proxy:
                    subprocess.run(  # noqa: S603  # the same digest, its log requests recorded on the way
                        command, env={**env, "DIGEST_LOKI_URL": proxy.url}, capture_output=True, check=False
                    )
                    recorded = proxy.reset().recorded
                run.requests = len(recorded)
                run.alone = alone(loki.url, recorded)
            say(f"{day}: {statistics.median(run.seconds):.2f} s {run.verdict}")
            runs.append(run)
    print(_table(runs, args, time.monotonic() - started))
    return 0


def _timed(command: Sequence[str], env: Mapping[str, str], run: DayRun) -> float:
    """One digest's seconds; its verdict kept in ``run``."""
    began = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)  # noqa: S603
    seconds = time.monotonic() - began
    if done.returncode not in (0, 1, 2):
        raise RuntimeError(f"{' '.join(command[-4:])}: exit {done.returncode}: {done.stderr[-500:]}")
    payload = json.loads(done.stdout)
    run.verdict = f"{payload.get('status')} {payload.get('score')}/10"
    return seconds


def alone(url: str, recorded: Sequence[Recorded]) -> dict[str, float]:
    """Each recorded count sent again alone, once; its seconds summed per day it counts (its window's first day)."""
    spent: dict[str, float] = defaultdict(float)
    with httpx.Client(base_url=url, timeout=300.0) as client:
        for request in recorded:
            if urlsplit(request.target).path not in _COUNTS:
                continue  # label values and the patterns API: not a count of lines
            headers = {"Content-Type": request.content_type} if request.content_type else {}
            began = time.monotonic()
            client.request(request.method, request.target, content=request.body, headers=headers).raise_for_status()
            spent[counted_day(request)] += time.monotonic() - began
    return dict(spent)


def counted_day(request: Recorded) -> str:
    """The first day a count's window covers: its range's start, or its instant's time (``?`` when neither)."""
    fields = dict(parse_qsl(urlsplit(request.target).query))
    fields.update(parse_qsl(request.body.decode("utf-8", errors="replace")))
    found = _DAY.search(fields.get("start", fields.get("time", "")))
    return found.group(0) if found else "?"


def _table(runs: Sequence[DayRun], args: argparse.Namespace, elapsed: float) -> str:
    header = (
        f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, `python -m bench.corpus_days"
        f"{' --per-request' if args.per_request else ''}{' --against ' + args.against if args.against else ''}`,"
        f" {revision()}, {elapsed:.0f} s; logs at volume scale {VOLUME_SCALE:g}\n\n"
    )
    against = " | the other checkout, in turn (median) | ratio" if args.against else ""
    lines = [
        f"| day | `digest run`, scanned (median){against} | verdict | Loki requests |"
        " its log requests sent alone: of the day / of the days before (trends, look-back) |"
    ]
    lines.append("|---|---|" + ("---|---|" if args.against else "") + "---|---|---|")
    for run in runs:
        own = run.alone.get(run.day.isoformat(), 0.0)
        before = sum(run.alone.values()) - own
        alone = f"{own:.2f} s / {before:.2f} s" if run.alone else "—"
        mine = statistics.median(run.seconds)
        other = ""
        if run.against:
            theirs = statistics.median(run.against)
            other = f" | {theirs:.2f} s | {mine / theirs:.2f}×"
        lines.append(f"| {run.day} | {mine:.2f} s{other} | {run.verdict} | {run.requests} | {alone} |")
    return header + "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

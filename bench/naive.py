"""The naive baseline: download every error line of the day and count them per workload in Python.

What it measures and why: this is what a digest would cost if it did not let the backend count — the approach the
digest's design rules out ("no log line is ever downloaded"). It sends the error rule of ``ErrorLinesCheck``
(default policy) to VictoriaLogs' ``/select/logsql/query`` for the window of ``digest run --date``, streams the
JSON-lines answer, parses every record and counts per (namespace, workload) with the digest's own ``workload_of``.
The stream is consumed line by line, so its memory stays modest; its time and the bytes it pulls grow with the
number of error lines. ``bench/run`` runs it as a subprocess to read its peak RSS; it prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import date

import httpx

from bench.floor import window_of
from digest.backends.victorialogs import DEFAULT_FIELDS, LogsqlWriter, time_filter
from digest.checks.error_lines import ErrorLinesCheck, workload_of
from digest.pipeline.policy import Policy


def error_lines_query(day: date) -> str:
    """The LogsQL that selects the day's error lines with the digest's default rule."""
    check = ErrorLinesCheck(Policy().error_lines)
    return f"{time_filter(window_of(day))} {LogsqlWriter().filter(check.error_rule())}"


def count_errors(vl_url: str, day: date) -> tuple[Counter[tuple[str, str]], int, int]:
    """Error lines per (namespace, workload), records read and bytes downloaded."""
    namespace_field, pod_field = DEFAULT_FIELDS["namespace"], DEFAULT_FIELDS["pod"]
    counts: Counter[tuple[str, str]] = Counter()
    records = size = 0
    form = {"query": error_lines_query(day)}
    with httpx.stream(
        "POST", f"{vl_url.rstrip('/')}/select/logsql/query", data=form, timeout=httpx.Timeout(60.0, read=600.0)
    ) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line:
                continue
            size += len(line) + 1
            record = json.loads(line)
            records += 1
            counts[(record.get(namespace_field, ""), workload_of(record.get(pod_field, "")))] += 1
    return counts, records, size


def main(argv: Sequence[str] | None = None) -> int:
    """Count, then print ``{"seconds", "records", "bytes", "top"}`` as JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m bench.naive", description=__doc__.splitlines()[0])
    parser.add_argument("--vl-url", required=True, help="VictoriaLogs base URL")
    parser.add_argument("--date", required=True, help="the UTC day, YYYY-MM-DD")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    counts, records, size = count_errors(args.vl_url, date.fromisoformat(args.date))
    elapsed = time.perf_counter() - started
    top = [{"workload": f"{ns}/{wl}", "errors": n} for (ns, wl), n in counts.most_common(3)]
    json.dump({"seconds": elapsed, "records": records, "bytes": size, "top": top}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m bench.gc_cost --from D1 --to D2``: what CPython's cyclic garbage collector costs ``digest replay``.

Why it exists: a replay parses answers of ~30,000 rows a day (the coverage of a 200-node fleet), each row a few dicts
and lists that live until the answer is folded. With CPython's default thresholds (700, 10, 10) they survive the
young collections, get promoted, and trigger full collections that walk every object of the process again. The
`digest` entry point tunes the collector (`digest.app.cli.tune_garbage_collection`); this measures both settings on
the same backends, alternating, each in a fresh process.

Each child runs ``digest replay --concurrency 2 --from D1 --to D2`` in-process with a `gc.callbacks` hook that sums
the CPU time spent in collections, per generation; ``default`` replaces the tuning with a no-op. The backends are
the environment's (``DIGEST_VM_URL``, ``DIGEST_VL_URL``…), loaded for instance with ``python -m bench.generate
--days N --vm-url URL --vl-url URL``. Output: one line per run, then the medians.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

MODES = ("default", "tuned")


def _child(mode: str, first: str, last: str) -> None:
    """Replay in this process and print the collector's cost as one JSON line on stdout's last line."""
    from digest.app import cli

    if mode == "default":
        cli.tune_garbage_collection = lambda: None  # CPython's own thresholds, nothing frozen
    seconds: dict[int, float] = {}
    counts: dict[int, int] = {}
    started = [0.0]

    def hook(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.process_time()
        else:
            generation = int(info["generation"])
            seconds[generation] = seconds.get(generation, 0.0) + time.process_time() - started[0]
            counts[generation] = counts.get(generation, 0) + 1

    gc.callbacks.append(hook)
    wall = time.perf_counter()
    with open(os.devnull, "w", encoding="utf-8") as sink:
        stdout, stderr = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = sink
        try:
            code = cli.main(["replay", "--concurrency", "2", "--from", first, "--to", last])
        finally:
            sys.stdout, sys.stderr = stdout, stderr
    gc.callbacks.remove(hook)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "mode": mode,
                "code": code,
                "wall": time.perf_counter() - wall,
                "cpu": usage.ru_utime + usage.ru_stime,
                "gc": sum(seconds.values()),
                "full": counts.get(2, 0),
                "full_seconds": seconds.get(2, 0.0),
                "collections": sum(counts.values()),
            }
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Alternate default and tuned replays, each in a fresh process; print each run and the medians."""
    parser = argparse.ArgumentParser(prog="python -m bench.gc_cost", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--from", dest="first", required=True, help="first day (YYYY-MM-DD)")
    parser.add_argument("--to", dest="last", required=True, help="last day (YYYY-MM-DD)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per setting (default %(default)s)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.first, args.last)
        return 0
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for _ in range(max(1, args.repeats)):
        for mode in MODES:
            done = subprocess.run(  # noqa: S603 — this module, the days given, no shell
                [sys.executable, "-m", "bench.gc_cost", "--child", mode, "--from", args.first, "--to", args.last],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0 or not done.stdout.strip():
                print(f"{mode}: the replay failed: {done.stderr.strip()[-300:]}", file=sys.stderr)
                return 1
            run = json.loads(done.stdout.strip().splitlines()[-1])
            if run["code"] != 0:
                print(f"{mode}: digest replay exited {run['code']}", file=sys.stderr)
                return 1
            runs[mode].append(run)
            print(
                f"{mode}: {run['wall']:.2f} s wall, {run['cpu']:.2f} CPU-s, of which collector {run['gc']:.2f} s "
                f"({run['collections']} collections, {run['full']} full: {run['full_seconds']:.2f} s)"
            )
    for mode, measured in runs.items():
        print(
            f"median, {mode}: {statistics.median(r['wall'] for r in measured):.2f} s wall, "
            f"{statistics.median(r['cpu'] for r in measured):.2f} CPU-s, collector "
            f"{statistics.median(r['gc'] for r in measured):.2f} s, "
            f"{statistics.median(r['full'] for r in measured):.0f} full collections"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

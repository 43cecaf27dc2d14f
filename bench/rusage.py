"""Run a command and write its wall time, CPU time and peak RSS as JSON — from a process small enough not to skew them.

Why a separate process: Linux carries the parent's memory high-water mark into a child that is forked (or
vforked) and then execs (``exec_mmap`` folds the old address space's peak into ``maxrss``), so ``wait4`` in the
benchmark runner, which holds generated data, would report the runner's peak for every child. This helper imports
only ``json``, ``os``, ``sys`` and ``time`` (about 10 MB resident), spawns the command, and reports
``max(helper, command)`` peak RSS — the command's own whenever it is the larger, as every measured command is.

Usage: ``python -I -S bench/rusage.py REPORT.json COMMAND [ARG…]``; the command's stdio is inherited.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> int:
    """Spawn ``argv[2:]``, wait for it, write ``{"seconds", "cpu_seconds", "max_rss_kib", "code"}`` to ``argv[1]``."""
    report, command = sys.argv[1], sys.argv[2:]
    started = time.perf_counter()
    pid = os.posix_spawnp(command[0], command, os.environ)
    _, status, usage = os.wait4(pid, 0)
    elapsed = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    with open(report, "w", encoding="utf-8") as handle:
        cpu = usage.ru_utime + usage.ru_stime
        json.dump({"seconds": elapsed, "cpu_seconds": cpu, "max_rss_kib": usage.ru_maxrss, "code": code}, handle)
    return code


if __name__ == "__main__":
    raise SystemExit(main())

"""``bench/run``: the digest's benchmark, end to end, on generated days loaded into real backends.

What is measured, side by side in one run, and why:

* ``digest run --date 2026-07-20 --format json`` wall time (a subprocess, median of ≥ 3 runs) against the *floor*:
  the checks' own queries sent directly and concurrently (``bench.floor``). Their ratio is what the digest adds on
  top of the backends — interpreter start-up, imports, sequential queries inside checks, extra queries, rendering.
  Goal: ≤ 1.2×. The *recorded floor* (the digest's exact requests, replayed) separates "more queries" from
  "slower client".
* Peak RSS of ``digest run`` (``bench/rusage.py`` around the subprocess) on a small day (1 M log lines) and a big
  one (13 M): counting happens in the backends, so memory must not follow the lines. Goal: ≤ 150 MB and flat.
* A naive baseline for contrast (``bench.naive``): download the error lines and count them in Python — time, peak
  RSS and bytes pulled, the cost the digest's design avoids.
* ``digest replay`` over 30 days (fewer on the Prometheus and Loki pairs) against the floor of the same windows'
  queries (``bench.floor.replay_queries``; error_lines' shapes questions included on VictoriaLogs, as in the day's
  floor) sent with the same per-backend bound. Goal: ≤ 1.2×.
* Backend requests per digest, counted by a loopback proxy in front of each backend (``bench.proxy``), on the small
  and on the big day: the number must not grow with pods or lines.

Set-up is the runner's own: embedded VictoriaMetrics and VictoriaLogs (``testbed.embedded``) in temporary
directories, loaded by ``bench.generate``, left to finish their background merges, stopped by PID at the end (also
on Ctrl-C or SIGTERM). The machine may be shared: the CPU that other processes used during the measurements is
measured and printed with the results. The results (rendered by ``bench.report``) are printed as a table and, for a
full run, written between the markers of ``docs/benchmarks.md`` (the hand-written analysis around them is kept).
``--quick`` runs the same programme on small volumes, on VictoriaMetrics + VictoriaLogs unless ``--backends`` says
otherwise, in about two minutes. ``--backends`` chooses the backend pairs (``bench.pairs``): each dataset is loaded
once into every server the chosen pairs use, and each pair is measured on it in turn; ``digest replay`` is measured
against the floor of the same days' queries (goal ≤ 1.2×).
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import datetime as dt
import functools
import hashlib
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Self
from urllib.parse import urlsplit

from bench.floor import (
    LOGS,
    METRICS,
    FloorResult,
    Query,
    checks_queries,
    replay_queries,
    resolve_dependencies,
    run_floor,
    window_of,
)
from bench.generate import (
    DAY,
    Cluster,
    DayFacts,
    LoadReport,
    Shape,
    Volume,
    Volumes,
    build_cluster,
    load,
    volume_on,
)
from bench.pairs import (
    LOKI,
    PROMETHEUS,
    REFERENCE,
    VICTORIALOGS,
    Pair,
    ServerLoad,
    digest_backend_env,
    parse_pairs,
    rss_mib,
    start_loki,
    start_prometheus,
)
from bench.proxy import CountingProxy, Counts
from bench.report import median_of, render, render_replays
from digest.app.settings import Settings
from digest.testbed.embedded import EmbeddedBackends

if TYPE_CHECKING:
    from digest.testbed.loki_server import LokiServer
    from digest.testbed.prometheus_server import PrometheusServer

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "benchmarks.md"
RUSAGE = Path(__file__).resolve().parent / "rusage.py"
START_MARK = "<!-- bench:results:start -->"
END_MARK = "<!-- bench:results:end -->"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# The digest's default that the figures depend on, read from the product, not restated here.
MAX_CONCURRENCY: int = Settings.model_fields["max_concurrency"].default
REPLAY_CONCURRENCY = 2  # passed to `digest replay --concurrency` explicitly (its default, too)


@dataclass(frozen=True)
class Profile:
    """The volumes of one benchmark programme."""

    name: str
    small: Volume
    big: Volume
    shape: Shape
    replay_days: int
    replay_volume: Volume
    repeats: int
    default_pairs: str = "all"  # --backends when not given
    # Log backends whose pairs are measured on the big day too (the others on the small day only).
    big_day_logs: tuple[str, ...] = (VICTORIALOGS,)
    # Replay days loaded into Prometheus and Loki (the last ones of the dataset): backfilling with promtool (~4 min
    # a day of the full cluster on 2 cores) and pushing to Loki are slow, so their pairs replay fewer days.
    prometheus_replay_days: int = 3
    loki_replay_days: int = 7
    # DIGEST_QUERY_TIMEOUT of the replayed digests; None: the product's default (30 s). The floor waits up to 300 s a
    # query, so a backend slower than the digest's timeout makes the replay give up where its floor does not.
    replay_query_timeout: float | None = None


MIN_REPLAY_LINES = 10_000  # half the quick profile's day (20,000 lines); smaller replay days have not been tried

FULL = Profile(
    name="full",
    # 0.1 M lines, not 1 M: the small day is where all four pairs are compared, and Loki on 2 cores took 13-29 s per
    # digest of its 0.11 M records (at 1.2 M records one per-pod count alone took 17-19 s).
    small=Volume(lines=100_000, envoy_records=10_000),
    big=Volume(lines=13_000_000),
    shape=Shape(cadvisor=True),
    replay_days=30,
    replay_volume=Volume(lines=200_000, envoy_records=10_000),
    repeats=3,
    prometheus_replay_days=1,
    loki_replay_days=1,
)
QUICK = Profile(
    name="quick",
    small=Volume(lines=100_000, envoy_records=10_000),
    big=Volume(lines=1_000_000, envoy_records=20_000),
    shape=Shape(pods=200, namespaces=10, nodes=20, cadvisor=True),
    replay_days=5,
    replay_volume=Volume(lines=20_000, envoy_records=1_000),
    repeats=3,
    # Loki takes minutes even on these volumes (and Prometheus' backfill half a minute a day): the quick default is
    # the reference pair alone; `--quick --backends all` measures the four (544 s with two of them).
    default_pairs="victoriametrics+victorialogs",
    prometheus_replay_days=2,
    loki_replay_days=2,
)


# --------------------------------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class Run:
    """One measured subprocess: wall time, CPU time, peak RSS (MiB), exit code and output."""

    seconds: float
    cpu_seconds: float
    max_rss_mib: float
    code: int
    stdout: str
    stderr: str


def measured(command: Sequence[str], env: dict[str, str]) -> Run:
    """Run ``command``; its wall time, CPU time and own peak RSS, read by the small ``bench/rusage.py`` helper.

    Not ``wait4`` from here: a child inherits this process's memory high-water mark (see ``bench/rusage.py``).
    The helper itself is about 10 MiB resident, the floor of what can be reported.
    """
    with tempfile.TemporaryDirectory(prefix="digest-bench-") as tmp:
        report = Path(tmp) / "rusage.json"
        out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
        helper = [sys.executable, "-I", "-S", str(RUSAGE), str(report), *command]
        with out_path.open("wb") as out, err_path.open("wb") as err:
            subprocess.run(helper, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, check=False)  # noqa: S603
        if not report.exists():
            raise RuntimeError(f"{command[0]}: the rusage helper wrote no report: {err_path.read_text()[-400:]}")
        usage = json.loads(report.read_text())
        return Run(
            float(usage["seconds"]),
            float(usage["cpu_seconds"]),
            int(usage["max_rss_kib"]) / 1024,
            int(usage["code"]),
            out_path.read_text(errors="replace"),
            err_path.read_text(errors="replace"),
        )


# The product's packages, compiled to bytecode before a digest is timed (`compiled_product`).
PRODUCT_PACKAGES = ("digest", "checks", "templates")


@functools.cache
def compiled_product() -> None:
    """Compile the product's modules to bytecode (``__pycache__``, ignored by git), once per benchmark process.

    A regular install compiles them (pip does, and the image at its build), and an editable install writes them at
    its first import; but where ``PYTHONDONTWRITEBYTECODE`` is set, as in many CI and container shells, the editable
    install of the project's virtualenv would compile every module again in each timed ``digest`` process: 0.1 s of
    CPU per run on the 2-core machine of 2026-12-05, a cost no installed digest pays. Files already compiled and
    unchanged are left as they are.
    """
    for package in PRODUCT_PACKAGES:
        if not compileall.compile_dir(REPO / package, quiet=1):
            raise RuntimeError(f"{package}: a module does not compile")


def digest_command() -> list[str]:
    """The installed ``digest`` console script (the one beside this interpreter first: no version-manager shim).

    The product's modules are compiled first (`compiled_product`), so that every timed run reads their bytecode.
    """
    compiled_product()
    beside = Path(sys.executable).with_name("digest")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("digest")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from digest.app.cli import main; sys.exit(main())"]


def digest_env(
    metrics_url: str, logs_url: str, pair: Pair = REFERENCE, query_timeout: float | None = None
) -> dict[str, str]:
    """The environment of a digest subprocess: default policy and settings, this pair's servers, UTC.

    ``query_timeout``: DIGEST_QUERY_TIMEOUT when given (the product's default otherwise).
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("DIGEST_")}
    env.update(digest_backend_env(pair, metrics_url, logs_url))
    env.update(DIGEST_TIMEZONE="UTC", DIGEST_CLUSTER="bench")
    if query_timeout is not None:
        env["DIGEST_QUERY_TIMEOUT"] = f"{query_timeout:g}"
    return env


def not_checked_in(summaries: str) -> dict[str, int]:
    """The checks a replay's summary lines say were not checked, with the number of days each."""
    found: dict[str, int] = {}
    for summary in summaries.splitlines():
        for part in summary.split(" · "):
            if part.endswith(" not checked"):
                name = part.removesuffix(" not checked").split()[-1]
                found[name] = found.get(name, 0) + 1
    return found


def python_env() -> dict[str, str]:
    """The environment of a ``python -m bench.…`` subprocess."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    return env


def checked(run: Run, what: str) -> Run:
    """``run`` if it exited 0; otherwise stop the benchmark with its stderr."""
    if run.code != 0:
        raise RuntimeError(f"{what} exited {run.code}: {run.stderr.strip()[-600:]}")
    return run


# --------------------------------------------------------------------------------------------------- CPU


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a live process has used, from /proc."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return 0.0


def _machine_busy() -> float:
    """CPU seconds all cores have been busy since boot (idle and iowait excluded)."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        values = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
        user, nice, system, _idle, _iowait, irq, softirq, steal = values
        return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS
    return 0.0


def _own_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass
class CpuMeter:
    """Splits the machine's CPU use over an interval into ours (runner, children, backends) and everyone else's."""

    pids: Sequence[int]
    wall: float = 0.0
    busy: float = 0.0
    own: float = 0.0
    backends: float = 0.0
    other_cores: float = 0.0
    backends_cores: float = 0.0

    def __enter__(self) -> Self:
        self.wall, self.busy, self.own = time.monotonic(), _machine_busy(), _own_cpu()
        self.backends = sum(process_cpu(pid) for pid in self.pids)
        return self

    def __exit__(self, *_: object) -> None:
        elapsed = max(time.monotonic() - self.wall, 1e-9)
        backends = sum(process_cpu(pid) for pid in self.pids) - self.backends
        other = (_machine_busy() - self.busy) - (_own_cpu() - self.own) - backends
        self.other_cores = max(0.0, other / elapsed)
        self.backends_cores = backends / elapsed


def settle(pids: Sequence[int], quiet_cores: float = 0.05, window_seconds: float = 2.0, limit: float = 180.0) -> str:
    """Wait until the backends' background work (merges) uses under ``quiet_cores``; say how long that took."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        before = sum(process_cpu(pid) for pid in pids)
        time.sleep(window_seconds)
        if (sum(process_cpu(pid) for pid in pids) - before) / window_seconds < quiet_cores:
            return f"backends idle {time.monotonic() - started:.0f} s later"
    return f"backends still busy after {limit:.0f} s (measured anyway)"


# --------------------------------------------------------------------------------------------------- backends


class BenchBackends(EmbeddedBackends):
    """`EmbeddedBackends` whose VictoriaLogs lets one query run 15 minutes, not 30 s: the naive download needs it."""

    def start(self) -> Self:
        try:
            self.metrics.start(["-search.latencyOffset=0s"])
            self.logs.start(["-search.maxQueryDuration=15m"])
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def pids(self) -> list[int]:
        """PIDs of both backend processes."""
        return [server.process.pid for server in (self.metrics, self.logs) if server.process is not None]


@contextlib.contextmanager
def backends_running() -> Iterator[BenchBackends]:
    """Backends in a temporary directory, stopped by PID and removed however the block ends."""
    backends = BenchBackends()
    try:
        backends.start()
        say(f"backends up: PIDs {', '.join(map(str, backends.pids))}")
        yield backends
    finally:
        backends.stop()
        say("backends stopped")


# --------------------------------------------------------------------------------------------------- results


@dataclass
class DayResult:
    """Everything measured on one generated day."""

    label: str
    facts: DayFacts
    load: LoadReport
    pair: Pair = REFERENCE
    server_loads: list[ServerLoad] = field(default_factory=list)  # Prometheus and Loki, when loaded
    backend_rss: tuple[float, float] = (float("nan"), float("nan"))  # MiB, metrics and logs server after loading
    backend_cpu: list[tuple[float, float]] = field(default_factory=list)  # CPU seconds of both servers per digest
    headline: str = ""
    counted_errors: float = 0.0
    digest_runs: list[Run] = field(default_factory=list)
    floors: list[FloorResult] = field(default_factory=list)
    recorded_floors: list[FloorResult] = field(default_factory=list)
    startup: list[Run] = field(default_factory=list)
    warm_seconds: list[float] = field(default_factory=list)  # digests computed inside one running process
    naive: Run | None = None
    naive_out: dict[str, object] = field(default_factory=dict)
    naive_error: str = ""
    vm_counts: Counts = field(default_factory=Counts)
    vl_counts: Counts = field(default_factory=Counts)
    checks_query_count: int = 0
    unknown: dict[str, str] = field(default_factory=dict)
    other_cores: float = 0.0
    settled: str = ""

    @property
    def digest_median(self) -> float:
        return statistics.median(run.seconds for run in self.digest_runs)

    @property
    def floor_median(self) -> float:
        return statistics.median(result.seconds for result in self.floors)

    @property
    def recorded_median(self) -> float:
        return statistics.median(result.seconds for result in self.recorded_floors)

    @property
    def ratio(self) -> float:
        return self.digest_median / self.floor_median

    @property
    def warm_median(self) -> float:
        return statistics.median(self.warm_seconds) if self.warm_seconds else float("nan")

    @property
    def max_rss(self) -> float:
        return max(run.max_rss_mib for run in self.digest_runs)

    def floor_query_medians(self) -> dict[str, float]:
        """Median latency of each query inside the checks-floor batches."""
        names = self.floors[0].per_query.keys()
        return {name: statistics.median(result.per_query[name] for result in self.floors) for name in names}


@dataclass
class ReplayResult:
    """``digest replay`` of many days on one pair, against the floor of the same days' queries."""

    days: list[dt.date]
    load: LoadReport
    pair: Pair = REFERENCE
    server_loads: list[ServerLoad] = field(default_factory=list)
    many: list[Run] = field(default_factory=list)
    # CPU seconds the metrics and the logs server used during each replay.
    many_backend_cpu: list[tuple[float, float]] = field(default_factory=list)
    many_counts: tuple[Counts, Counts] = (Counts(), Counts())
    floors: list[FloorResult] = field(default_factory=list)  # the checks floor of every window the replay asks
    recorded_floors: list[FloorResult] = field(default_factory=list)  # the replay's own requests, replayed
    floor_query_count: int = 0
    floor_windows: int = 0  # replayed days + the earlier days the trends ask
    other_cores: float = 0.0
    backends_cores: float = 0.0
    not_checked: dict[str, int] = field(default_factory=dict)  # in the proxied replay
    timed_not_checked: list[dict[str, int]] = field(default_factory=list)  # in each timed replay
    # `digest run` of the last replayed day, without a state file and with one that holds the past days.
    run_day: dt.date | None = None
    run_without_store: list[Run] = field(default_factory=list)
    run_with_store: list[Run] = field(default_factory=list)
    run_without_store_counts: tuple[Counts, Counts] = (Counts(), Counts())
    run_with_store_counts: tuple[Counts, Counts] = (Counts(), Counts())

    @property
    def replay_median(self) -> float:
        return statistics.median(run.seconds for run in self.many)

    @property
    def floor_median(self) -> float:
        return statistics.median(result.seconds for result in self.floors)

    @property
    def recorded_median(self) -> float:
        return statistics.median(result.seconds for result in self.recorded_floors)

    @property
    def ratio(self) -> float:
        """The replay's wall time over the checks floor of its windows."""
        return self.replay_median / self.floor_median

    @property
    def complete(self) -> bool:
        """Every replay, proxied and timed, checked every check.

        A replay that gave up on one did less than its floor, so its ratio says nothing about the goal.
        """
        return not self.not_checked and not any(self.timed_not_checked)


def with_backend_cpu(
    pids: Sequence[int], command: Sequence[str], env: dict[str, str]
) -> tuple[Run, tuple[float, float]]:
    """``measured(command)`` and the CPU seconds each of the two backends (metrics, logs) used meanwhile."""
    before = [process_cpu(pid) for pid in pids]
    run = measured(command, env)
    vm, vl = (process_cpu(pid) - start for pid, start in zip(pids, before, strict=True))
    return run, (vm, vl)


# --------------------------------------------------------------------------------------------------- phases


def say(message: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def recorded_queries(vm: Counts, vl: Counts) -> list[Query]:
    """The requests a proxied digest sent, as floor queries replayed byte for byte."""
    queries: list[Query] = []
    for backend, counts in ((METRICS, vm), (LOGS, vl)):
        for index, request in enumerate(counts.recorded):
            path = urlsplit(request.target).path
            if "query" not in path:
                continue  # Loki's /ready probe, asked once by the source: not a query, and no JSON answer
            purpose = f"{backend}#{index} {path}"
            queries.append(Query(backend, request.target, {}, purpose, request.body, request.content_type))
    return queries


def product_fingerprint() -> str:
    """A hash of the product's source files (names, sizes, modification times), to notice a change mid-run."""
    digest = hashlib.sha256()
    for folder in PRODUCT_PACKAGES:
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in (".py", ".j2") and "__pycache__" not in path.parts:
                stat = path.stat()
                digest.update(f"{path.relative_to(REPO)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:12]


def run_profiled(command: Sequence[str], env: dict[str, str], out: Path) -> None:
    """Run ``command`` (a Python console script) once under pyinstrument and write its text report to ``out``."""
    run = measured([sys.executable, "-m", "pyinstrument", "-r", "text", "-o", str(out), *command], env)
    say(f"profile written to {out}" if run.code == 0 else f"pyinstrument failed: {run.stderr.strip()[-200:]}")


@dataclass
class LoadedServers:
    """The servers one dataset was loaded into: VictoriaMetrics and VictoriaLogs, and Prometheus / Loki if needed."""

    backends: BenchBackends
    prometheus: PrometheusServer | None = None
    loki: LokiServer | None = None
    loads: list[ServerLoad] = field(default_factory=list)

    def of(self, pair: Pair) -> tuple[str, str, list[int]]:
        """The metrics URL, the logs URL and the two servers' PIDs (metrics, logs) of ``pair``."""
        if pair.metrics == PROMETHEUS:
            if self.prometheus is None or self.prometheus.process is None:
                raise RuntimeError("Prometheus was not loaded for this dataset")
            metrics_url, metrics_pid = self.prometheus.url, self.prometheus.process.pid
        else:
            metrics_url, metrics_pid = self.backends.metrics.url, self.backends.pids[0]
        if pair.logs == LOKI:
            if self.loki is None:
                raise RuntimeError("Loki was not loaded for this dataset")
            logs_url, logs_pid = self.loki.url, self.loki.pid
        else:
            logs_url, logs_pid = self.backends.logs.url, self.backends.pids[1]
        return metrics_url, logs_url, [metrics_pid, logs_pid]

    @property
    def pids(self) -> list[int]:
        """Every server's PID."""
        pids = list(self.backends.pids)
        if self.prometheus is not None and self.prometheus.process is not None:
            pids.append(self.prometheus.process.pid)
        if self.loki is not None and self.loki.process is not None:
            pids.append(self.loki.pid)
        return pids


class SharedPrometheus:
    """A Prometheus backfilled once for some days and kept for every dataset with the same metrics; stopped on exit."""

    def __init__(self) -> None:
        self.server: PrometheusServer | None = None
        self.load: ServerLoad | None = None
        self.days: list[dt.date] = []

    def loaded(self, cluster: Cluster, days: list[dt.date]) -> tuple[PrometheusServer, ServerLoad]:
        """The server holding ``days`` (backfilled now unless it already holds exactly them)."""
        if self.server is None or self.load is None or self.days != days:
            self.stop()
            say(f"backfilling Prometheus with {len(days)} day(s)")
            self.server, self.load = start_prometheus(cluster, days)
            self.days = days
            pid = self.server.process.pid if self.server.process else "?"
            say(f"Prometheus up (PID {pid}): {self.load.items:,} samples in {self.load.seconds:.0f} s")
        return self.server, self.load

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            say("Prometheus stopped")
        self.server, self.load = None, None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


@contextlib.contextmanager
def servers_loaded(
    label: str,
    cluster: Cluster,
    days: Sequence[dt.date],
    volume: Volumes,
    pairs: Sequence[Pair],
    slow_days: tuple[int, int] | None = None,
    prometheus: SharedPrometheus | None = None,
) -> Iterator[tuple[LoadedServers, LoadReport]]:
    """Every server the pairs use, each loaded once with ``days``.

    ``slow_days``: how many of the last days Prometheus and Loki get. ``prometheus``: the one Prometheus of the
    small and the big day, whose metrics are the same (backfilling it is the slowest load of all).
    """
    ordered = sorted(days)
    prometheus_days, loki_days = slow_days or (len(ordered), len(ordered))
    with backends_running() as backends, contextlib.ExitStack() as stack:
        records = sum(volume_on(volume, day).lines + volume_on(volume, day).envoy_records for day in days)
        say(f"{label}: loading {len(days)} day(s), {records:,} records")
        report = load(backends, cluster, days, volume, progress=True)
        loaded = LoadedServers(backends)
        if any(pair.metrics == PROMETHEUS for pair in pairs):
            if prometheus is None:
                prometheus = stack.enter_context(SharedPrometheus())
            loaded.prometheus, prometheus_load = prometheus.loaded(cluster, ordered[-prometheus_days:])
            loaded.loads.append(prometheus_load)
        if any(pair.logs == LOKI for pair in pairs):
            slow = ordered[-loki_days:]
            say(f"{label}: pushing {len(slow)} day(s) to Loki")
            loaded.loki, loki_load = start_loki(cluster, slow, volume)
            stack.callback(loaded.loki.stop)
            loaded.loads.append(loki_load)
            say(f"{label}: Loki up (PID {loaded.loki.pid}): {loki_load.items:,} records in {loki_load.seconds:.0f} s")
        yield loaded, report
        say(f"{label}: stopping the servers")


def measure_day(
    label: str,
    cluster: Cluster,
    volume: Volume,
    repeats: int,
    pairs: Sequence[Pair],
    detailed: Pair,
    profile_dir: Path | None = None,
    prometheus: SharedPrometheus | None = None,
) -> list[DayResult]:
    """Load one small or big day into every server the pairs use and measure each pair on it.

    ``detailed`` (one of ``pairs``) also gets the warm digests and the naive baseline.
    """
    results: list[DayResult] = []
    with servers_loaded(label, cluster, [DAY], volume, pairs, prometheus=prometheus) as (loaded, report):
        settled = settle(loaded.pids)
        say(f"{label}: {settled}")
        for pair in pairs:
            result = DayResult(label=label, facts=report.facts[0], load=report, pair=pair, settled=settled)
            result.server_loads = list(loaded.loads)
            metrics_url, logs_url, pids = loaded.of(pair)
            result.backend_rss = (rss_mib(pids[0]), rss_mib(pids[1]))
            measure_pair_day(result, metrics_url, logs_url, pids, repeats, pair == detailed, profile_dir)
            results.append(result)
        if detailed in pairs:
            main = next(result for result in results if result.pair == detailed)
            measure_naive(main, loaded.backends.logs.url)
    return results


def measure_pair_day(
    result: DayResult,
    metrics_url: str,
    logs_url: str,
    pids: list[int],
    repeats: int,
    detailed: bool,
    profile_dir: Path | None,
) -> None:
    """Digest, floors, counts and (``detailed``) warm digests of one pair on a loaded day."""
    pair, label = result.pair, f"{result.label} {result.pair.short}"
    command = [*digest_command(), "run", "--date", DAY.isoformat(), "--format", "json"]

    # First digest through the counting proxies: counts and records its requests, and warms both backends.
    with CountingProxy(metrics_url) as vm_proxy, CountingProxy(logs_url) as vl_proxy:
        run = checked(measured(command, digest_env(vm_proxy.url, vl_proxy.url, pair)), "digest run (proxied)")
        result.vm_counts, result.vl_counts = vm_proxy.reset(), vl_proxy.reset()
    verdict = json.loads(run.stdout)
    result.headline = str(verdict["headline"])
    by_name = {check["name"]: check for check in verdict["checks"]}
    result.counted_errors = float(by_name["error_lines"]["value"] or 0)
    result.unknown = {
        name: str(check.get("error") or check.get("summary") or "")
        for name, check in by_name.items()
        if check.get("status") == "UNKNOWN"
    }
    say(
        f"{label}: {result.headline}; error_lines {result.counted_errors:,.0f} (expected "
        f"{result.facts.flood_error_lines:,}); requests {result.vm_counts.requests} + {result.vl_counts.requests}"
    )

    window = window_of(DAY)
    # The shapes questions error_lines asks after its count are part of the checks floor (VictoriaLogs answers them;
    # on Loki the check asks none).
    shapes_from = None if pair.logs == LOKI else logs_url
    queries = checks_queries(
        window, resolve_dependencies(metrics_url, window, logs_url=shapes_from), writer=pair.writer()
    )
    replayed = recorded_queries(result.vm_counts, result.vl_counts)
    result.checks_query_count = len(queries)
    asyncio.run(run_floor(queries, metrics_url, logs_url, MAX_CONCURRENCY))  # warm-up, as the proxied digest was
    env = digest_env(metrics_url, logs_url, pair)
    with CpuMeter(pids) as meter:
        for index in range(repeats):
            digest_run, cpu = with_backend_cpu(pids, command, env)
            result.digest_runs.append(checked(digest_run, "digest run"))
            result.backend_cpu.append(cpu)
            result.floors.append(asyncio.run(run_floor(queries, metrics_url, logs_url, MAX_CONCURRENCY)))
            result.recorded_floors.append(asyncio.run(run_floor(replayed, metrics_url, logs_url, MAX_CONCURRENCY)))
            say(
                f"{label}: run {index + 1}/{repeats}: digest {result.digest_runs[-1].seconds:.2f} s "
                f"({result.digest_runs[-1].max_rss_mib:.0f} MiB), checks floor {result.floors[-1].seconds:.2f} s, "
                f"recorded floor {result.recorded_floors[-1].seconds:.2f} s"
            )
        if detailed:
            for _ in range(repeats):
                result.startup.append(checked(measured([*digest_command(), "--help"], env), "digest --help"))
            warm_command = [sys.executable, "-m", "bench.warm", "--date", DAY.isoformat(), "--repeats", str(repeats)]
            warm = checked(measured(warm_command, env), "warm digests")
            result.warm_seconds = [float(seconds) for seconds in json.loads(warm.stdout)["seconds"]]
            say(f"{label}: warm digests in one process: {', '.join(f'{t:.2f}' for t in result.warm_seconds)} s")
    result.other_cores = meter.other_cores
    if detailed and profile_dir is not None and "big" in result.label:
        run_profiled(command, env, profile_dir / f"digest-run-{result.label.split()[0]}.txt")


def measure_naive(result: DayResult, vl_url: str) -> None:
    """The naive baseline on VictoriaLogs: download the error lines and count them in Python."""
    say(f"{result.label}: naive baseline (download {result.facts.error_lines:,} error lines)")
    naive_command = [sys.executable, "-m", "bench.naive", "--vl-url", vl_url, "--date", DAY.isoformat()]
    naive = measured(naive_command, python_env())
    if naive.code == 0:
        result.naive, result.naive_out = naive, json.loads(naive.stdout)
        say(f"{result.label}: naive {naive.seconds:.1f} s, {naive.max_rss_mib:.0f} MiB")
    else:
        result.naive_error = (naive.stderr.strip().splitlines() or ["no message"])[-1][:200]
        say(f"{result.label}: naive baseline failed: {result.naive_error}")


def measure_replay(
    cluster: Cluster,
    profile: Profile,
    repeats: int,
    pairs: Sequence[Pair],
    detailed: Pair,
    profile_dir: Path | None = None,
) -> list[ReplayResult]:
    """Load the replay dataset and, per pair, time ``digest replay`` against the floor of the same days' queries."""
    days = [DAY - dt.timedelta(days=profile.replay_days - k) for k in range(profile.replay_days)]
    slow = (min(profile.prometheus_replay_days, len(days)), min(profile.loki_replay_days, len(days)))
    results: list[ReplayResult] = []
    with servers_loaded("replay", cluster, days, profile.replay_volume, pairs, slow) as (loaded, report):
        say(f"replay: {settle(loaded.pids)}")
        for pair in pairs:
            count = min(
                slow[0] if pair.metrics == PROMETHEUS else len(days), slow[1] if pair.logs == LOKI else len(days)
            )
            pair_days = days[-count:]
            result = ReplayResult(days=pair_days, load=report, pair=pair, server_loads=list(loaded.loads))
            metrics_url, logs_url, pids = loaded.of(pair)
            measure_pair_replay(
                result,
                metrics_url,
                logs_url,
                pids,
                repeats,
                profile_dir if pair == detailed else None,
                profile.replay_query_timeout,
            )
            if pair == detailed:
                measure_history_store(
                    pair, metrics_url, logs_url, days[-1], result, repeats, profile.replay_query_timeout
                )
            results.append(result)
    return results


def measure_pair_replay(
    result: ReplayResult,
    metrics_url: str,
    logs_url: str,
    pids: list[int],
    repeats: int,
    profile_dir: Path | None,
    query_timeout: float | None = None,
) -> None:
    """One pair's replay: proxied once (counts, recorded requests), then replays and both floors interleaved."""
    pair, days = result.pair, result.days
    label = f"replay {pair.short}"
    command = [
        *digest_command(), "replay", "--concurrency", str(REPLAY_CONCURRENCY),
        "--from", days[0].isoformat(), "--to", days[-1].isoformat(),
    ]  # fmt: skip
    with CountingProxy(metrics_url) as vm_proxy, CountingProxy(logs_url) as vl_proxy:
        proxied = digest_env(vm_proxy.url, vl_proxy.url, pair, query_timeout)
        result.not_checked = not_checked_in(checked(measured(command, proxied), "digest replay (proxied)").stdout)
        result.many_counts = (vm_proxy.reset(), vl_proxy.reset())
    if result.not_checked:
        say(f"{label}: proxied replay: not checked (days): {_named_counts(result.not_checked)}")
    # error_lines' shapes questions are part of the floor, as in the day's checks floor (on Loki the check asks none).
    shapes_from = None if pair.logs == LOKI else logs_url
    queries, windows = replay_queries(days, metrics_url, pair.writer(), logs_url=shapes_from)
    result.floor_query_count, result.floor_windows = len(queries), windows
    replayed = recorded_queries(*result.many_counts)
    env = digest_env(metrics_url, logs_url, pair, query_timeout)
    with CpuMeter(pids) as meter:
        for index in range(repeats):
            many, many_cpu = with_backend_cpu(pids, command, env)
            result.many.append(checked(many, "digest replay"))
            result.many_backend_cpu.append(many_cpu)
            result.timed_not_checked.append(not_checked_in(many.stdout))
            result.floors.append(asyncio.run(run_floor(queries, metrics_url, logs_url, MAX_CONCURRENCY)))
            result.recorded_floors.append(asyncio.run(run_floor(replayed, metrics_url, logs_url, MAX_CONCURRENCY)))
            say(
                f"{label}: run {index + 1}/{repeats}: {len(days)} days {result.many[-1].seconds:.2f} s, checks floor "
                f"{result.floors[-1].seconds:.2f} s, recorded floor {result.recorded_floors[-1].seconds:.2f} s"
                + (
                    f"; not checked (days): {_named_counts(result.timed_not_checked[-1])}"
                    if result.timed_not_checked[-1]
                    else ""
                )
            )
    result.other_cores, result.backends_cores = meter.other_cores, meter.backends_cores
    if profile_dir is not None:
        run_profiled(command, env, profile_dir / "digest-replay-many.txt")


def _named_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(counts.items()))


def measure_history_store(
    pair: Pair,
    metrics_url: str,
    logs_url: str,
    day: dt.date,
    result: ReplayResult,
    repeats: int,
    query_timeout: float | None = None,
) -> None:
    """``digest run`` of a day whose 7 previous days have data: without a state file, and with one that has them."""
    command = [*digest_command(), "run", "--date", day.isoformat(), "--format", "json"]
    result.run_day = day
    with tempfile.TemporaryDirectory(prefix="digest-bench-state-") as tmp:
        plain = digest_env(metrics_url, logs_url, pair, query_timeout)
        stored = {**plain, "DIGEST_STATE_PATH": str(Path(tmp) / "state.sqlite")}
        checked(measured(command, stored), "digest run filling the state file")
        with CountingProxy(metrics_url) as vm_proxy, CountingProxy(logs_url) as vl_proxy:
            proxied = digest_env(vm_proxy.url, vl_proxy.url, pair, query_timeout)
            without = checked(measured(command, proxied), "digest run without state (proxied)")
            result.run_without_store_counts = (vm_proxy.reset(), vl_proxy.reset())
            with_store = checked(
                measured(command, {**proxied, "DIGEST_STATE_PATH": stored["DIGEST_STATE_PATH"]}),
                "digest run with state (proxied)",
            )
            result.run_with_store_counts = (vm_proxy.reset(), vl_proxy.reset())
        if json.loads(without.stdout) != json.loads(with_store.stdout):
            raise RuntimeError(f"digest run {day}: the stored past days changed the digest")
        for _ in range(repeats):
            result.run_without_store.append(checked(measured(command, plain), "digest run without state"))
            result.run_with_store.append(checked(measured(command, stored), "digest run with state"))
    say(
        f"history store: digest run {day}: {median_of(result.run_without_store):.2f} s without state, "
        f"{median_of(result.run_with_store):.2f} s with the past days stored"
    )


# --------------------------------------------------------------------------------------------------- report


def machine() -> dict[str, str]:
    """Cores, RAM, CPU model, OS, Python and backend versions of this machine (no paths, no host names)."""
    info = {"cores": str(os.cpu_count() or "?"), "python": platform.python_version(), "kernel": platform.release()}
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["ram"] = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                info["os"] = line.split("=", 1)[1].strip('"')
    info["victoria-metrics"] = backend_version("victoria-metrics")
    info["victoria-logs"] = backend_version("victoria-logs")
    info["prometheus"] = "Prometheus " + _first_line(["prometheus", "--version"]).removeprefix("prometheus, ")
    info["loki"] = "Loki " + _first_line([os.environ.get("DIGEST_LOKI_BINARY") or "loki", "-version"]).removeprefix(
        "loki, "
    )
    info["revision"] = revision()
    return info


def _first_line(command: list[str]) -> str:
    """The first line ``command`` prints (a version), or "not installed"."""
    path = shutil.which(command[0])
    if path is None:
        return "not installed"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([path, *command[1:]], capture_output=True, text=True, timeout=10, check=False)  # noqa: S603
        text = (out.stdout or out.stderr).strip()
        if text:
            return text.splitlines()[0]
    return "version not reported"


def backend_version(binary: str) -> str:
    """What the binary says with ``-version``, else the Debian package owning it, else "not reported"."""
    path = shutil.which(binary)
    if path is None:
        return "not installed"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([path, "-version"], capture_output=True, text=True, timeout=10, check=False)  # noqa: S603
        text = (out.stdout or out.stderr).strip()
        if text:
            return text.splitlines()[0]
    dpkg = shutil.which("dpkg-query")
    if dpkg:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            owner = subprocess.run([dpkg, "-S", path], capture_output=True, text=True, timeout=10, check=False)  # noqa: S603
            package = owner.stdout.split(":", 1)[0].strip() if owner.returncode == 0 else ""
            if package:
                version = subprocess.run(  # noqa: S603
                    [dpkg, "-W", "-f", "${Version}", package], capture_output=True, text=True, timeout=10, check=False
                ).stdout.strip()
                return f"{version} (Debian package; the binary prints no version)"
    return "version not reported by the binary (not from a Debian package)"


def revision() -> str:
    """The commit measured, and how many product files differ from it in the working tree."""
    git = shutil.which("git")
    if git is None:
        return "unknown"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(  # noqa: S603
            [git, "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
        status = subprocess.run(  # noqa: S603
            [git, "-C", str(REPO), "status", "--porcelain", "--", "digest", "checks", "templates"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.splitlines()
        dirty = (
            f" + uncommitted changes to {len(status)} product files (digest/, checks/, templates/)" if status else ""
        )
        return f"commit {head}{dirty}"
    return "unknown"


DOC_HEADER = """# Benchmarks

How fast and how frugal `digest run` is on a big day, measured by `bench/run` (see `bench/runner.py` for what is
measured and why). The block between the markers is rewritten by every full run; the text around it is not.

"""


def write_doc(path: Path, block: str) -> None:
    """Replace the generated block of ``path`` (between the markers), keeping the rest."""
    generated = f"{START_MARK}\n{block}\n{END_MARK}"
    text = path.read_text(encoding="utf-8") if path.exists() else DOC_HEADER + f"{START_MARK}\n{END_MARK}\n"
    if START_MARK in text and END_MARK in text:
        before, rest = text.split(START_MARK, 1)
        after = rest.split(END_MARK, 1)[1]
        text = before + generated + after
    else:
        text = text.rstrip() + "\n\n" + generated + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/run",
        description="Benchmark digest on generated days, per backend pair (VictoriaMetrics or Prometheus, "
        "VictoriaLogs or Loki): wall time against the direct-query floor, peak RSS on a small and a 13 M-line day, a "
        "naive baseline, replay against its floor, request counts.",
        epilog="A full run (all four pairs) took 53 minutes on a shared 2-core machine and rewrites the results "
        "block of docs/benchmarks.md; --quick (VictoriaMetrics + VictoriaLogs) takes about two minutes and only "
        "prints the table unless --output is given.",
    )
    parser.add_argument("--quick", action="store_true", help="small volumes, a fast sanity run (< 2 minutes)")
    parser.add_argument(
        "--repeats",
        type=int,
        help="measured runs per measure (default 3; at least 3 when the table is written, as its figures are medians; "
        "1 or 2 when it is not (--no-write, or --quick without --output): a check that the programme runs)",
    )
    parser.add_argument("--output", type=Path, help="Markdown file to update (default docs/benchmarks.md, full run)")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument("--skip-replay", action="store_true", help="leave out the multi-day replay measure")
    parser.add_argument(
        "--replay-only",
        action="store_true",
        help="measure the multi-day replay against its floor only (no small or big day); prints its table",
    )
    parser.add_argument(
        "--backends",
        metavar="PAIRS",
        help="comma list of backend pairs to measure: victoriametrics+victorialogs, prometheus+victorialogs, "
        "victoriametrics+loki, prometheus+loki, or all (default: all; --quick: victoriametrics+victorialogs)",
    )
    parser.add_argument(
        "--big-day",
        metavar="PAIRS",
        help="pairs measured on the big day too, among --backends (default: those reading VictoriaLogs; Loki needs "
        "~15 minutes to take in the 13 M lines and ~10 GB of memory), or all",
    )
    for backend, default in (("prometheus", FULL.prometheus_replay_days), ("loki", FULL.loki_replay_days)):
        parser.add_argument(
            f"--{backend}-replay-days",
            type=int,
            metavar="N",
            help=f"days the replay measure replays on the pairs with {backend.capitalize()} (default {default} in a "
            f"full run; at most the replay dataset's {FULL.replay_days}): loading them is slow",
        )
    parser.add_argument(
        "--replay-lines",
        type=int,
        metavar="N",
        help=f"log lines of each replay day (default {FULL.replay_volume.lines:,} in a full run), and a twentieth as "
        "many gateway access records, as in both profiles; fewer make a 30-day replay on Loki fit in a session",
    )
    parser.add_argument(
        "--replay-query-timeout",
        type=float,
        metavar="SECONDS",
        help="DIGEST_QUERY_TIMEOUT of the replayed digests (default: the product's, 30 s). A replay that gives up on "
        "a check does less than its floor (which waits up to 300 s a query): its goal reads missed, so raise this "
        "where a 2-core Loki answers a day's count in more than 30 s",
    )
    parser.add_argument(
        "--profile-dir",
        type=Path,
        help="also run digest once under pyinstrument (big day, replays) and write the reports there",
    )
    return parser


def shown_command(argv: Sequence[str]) -> str:
    """The command as the document shows it: directories given to options replaced by their placeholder."""
    shown: list[str] = ["bench/run"]
    hide_next = False
    for arg in argv:
        if hide_next:
            shown.append("DIR" if shown[-1] == "--profile-dir" else "FILE")
            hide_next = False
        elif arg in ("--profile-dir", "--output"):
            shown.append(arg)
            hide_next = True
        elif arg.startswith(("--profile-dir=", "--output=")):
            shown.append(arg.split("=", 1)[0] + ("=DIR" if arg.startswith("--profile-dir") else "=FILE"))
        else:
            shown.append(arg)
    return " ".join(shown)


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    del frame
    raise SystemExit(128 + signum)


def replay_repeats(repeats: int) -> int:
    """Timed replays for ``repeats`` per measure: each takes a while, so two fewer, but three for a median."""
    return min(repeats, max(3, repeats - 2))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the whole programme, print the table, write the document."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        pairs = parse_pairs(args.backends or (QUICK if args.quick else FULL).default_pairs)
    except ValueError as problem:
        parser.error(f"--backends: {problem}")  # the usage line, this message, exit 2
    try:
        big_day = None if args.big_day is None else parse_pairs(args.big_day)
    except ValueError as problem:
        parser.error(f"--big-day: {problem}")
    if big_day is not None and not set(big_day) & set(pairs):
        parser.error("--big-day: none of these pairs is among --backends")
    if args.replay_only and args.skip_replay:
        parser.error("--replay-only: not with --skip-replay")
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    profile = QUICK if args.quick else FULL
    output = args.output or (None if args.quick else DOC)
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats: at least 1")
    if args.repeats is not None and args.repeats < 3 and output is not None and not args.no_write:
        parser.error("--repeats: at least 3 when the table is written (its figures are medians); fewer with --no-write")
    repeats = args.repeats or profile.repeats
    profile = replace(profile, repeats=repeats)
    for name in ("prometheus_replay_days", "loki_replay_days"):
        days = getattr(args, name)
        if days is not None:
            if not 1 <= days <= profile.replay_days:
                parser.error(f"--{name.replace('_', '-')}: between 1 and {profile.replay_days}")
            profile = replace(profile, **{name: days})
    if args.replay_lines is not None:
        if not MIN_REPLAY_LINES <= args.replay_lines <= FULL.big.lines:
            parser.error(f"--replay-lines: between {MIN_REPLAY_LINES:,} and {FULL.big.lines:,}")
        volume = replace(profile.replay_volume, lines=args.replay_lines, envoy_records=args.replay_lines // 20)
        profile = replace(profile, replay_volume=volume)
    if args.replay_query_timeout is not None:
        if not 0 < args.replay_query_timeout <= 600:
            parser.error("--replay-query-timeout: more than 0 and at most 600 (DIGEST_QUERY_TIMEOUT's range)")
        profile = replace(profile, replay_query_timeout=args.replay_query_timeout)
    command = shown_command(argv if argv is not None else sys.argv[1:])
    started = time.monotonic()
    info = machine()
    info["fingerprint_start"] = product_fingerprint()
    cluster = build_cluster(profile.shape)
    profile_dir = args.profile_dir
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
    small_label, big_label = (
        f"{name} ({volume.lines / 1e6:g} M lines)" for name, volume in (("small", profile.small), ("big", profile.big))
    )
    if args.replay_only:
        say(f"pairs: {', '.join(pair.key for pair in pairs)}; the replay only")
        replays = measure_replay(cluster, profile, replay_repeats(repeats), pairs, pairs[0], profile_dir)
        info["fingerprint_end"] = product_fingerprint()
        print(
            render_replays(
                profile,
                replays,
                info,
                command,
                floor_concurrency=MAX_CONCURRENCY,
                replay_concurrency=REPLAY_CONCURRENCY,
            )
        )
        say(f"done in {time.monotonic() - started:.0f} s")
        return 0
    # The big day is measured on the pairs of the profile's big-day log backends (all pairs if none is one of them);
    # the detailed tables show the reference pair, or the first pair measured on both days.
    if big_day is not None:
        big_pairs = [pair for pair in pairs if pair in big_day]
    else:
        big_pairs = [pair for pair in pairs if pair.logs in profile.big_day_logs] or pairs[:1]
    detailed = REFERENCE if REFERENCE in big_pairs else big_pairs[0]
    say(f"pairs: {', '.join(pair.key for pair in pairs)}; on the big day: {', '.join(p.key for p in big_pairs)}")
    with SharedPrometheus() as prometheus:  # the small and the big day have the same metrics: one backfill
        small = measure_day(small_label, cluster, profile.small, repeats, pairs, detailed, prometheus=prometheus)
        big = measure_day(big_label, cluster, profile.big, repeats, big_pairs, detailed, profile_dir, prometheus)
    replay_runs = replay_repeats(repeats)
    replays = [] if args.skip_replay else measure_replay(cluster, profile, replay_runs, pairs, detailed, profile_dir)
    info["fingerprint_end"] = product_fingerprint()
    block = render(
        profile,
        cluster,
        (small, big, replays),
        info,
        command,
        floor_concurrency=MAX_CONCURRENCY,
        replay_concurrency=REPLAY_CONCURRENCY,
    )
    print(block)
    if output is not None and not args.no_write:
        write_doc(output, block)
        say(f"results written to {output}")
    say(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

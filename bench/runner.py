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
* ``digest replay`` over 30 days against one day, on a 30-day dataset. Goal: ≤ 3×.
* Backend requests per digest, counted by a loopback proxy in front of each backend (``bench.proxy``), on the small
  and on the big day: the number must not grow with pods or lines.

Set-up is the runner's own: embedded VictoriaMetrics and VictoriaLogs (``digest.embedded``) in temporary
directories, loaded by ``bench.generate``, left to finish their background merges, stopped by PID at the end (also
on Ctrl-C or SIGTERM). The machine may be shared: the CPU that other processes used during the measurements is
measured and printed with the results. The results are printed as a table and, for a full run, written between the
markers of ``docs/benchmarks.md`` (the hand-written analysis around them is kept). ``--quick`` runs the same
programme on small volumes in well under two minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import re
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
from typing import Self
from urllib.parse import parse_qs, urlsplit

from bench.floor import (
    LOGS,
    METRICS,
    Dependencies,
    FloorResult,
    Query,
    checks_queries,
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
    build_cluster,
    load,
)
from bench.proxy import CountingProxy, Counts
from digest.embedded import EmbeddedBackends
from digest.policy import Policy
from digest.settings import Settings

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "benchmarks.md"
RUSAGE = Path(__file__).resolve().parent / "rusage.py"
START_MARK = "<!-- bench:results:start -->"
END_MARK = "<!-- bench:results:end -->"
RATIO_GOAL = 1.2
RSS_GOAL_MB = 150.0
REPLAY_GOAL = 3.0
FLAT_TOLERANCE = 0.10
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# The digest's defaults that the figures depend on, read from the product, not restated here.
MAX_CONCURRENCY: int = Settings.model_fields["max_concurrency"].default
TREND_DAYS = Policy().trends.days
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


FULL = Profile(
    name="full",
    small=Volume(lines=1_000_000),
    big=Volume(lines=13_000_000),
    shape=Shape(cadvisor=True),
    replay_days=30,
    replay_volume=Volume(lines=200_000, envoy_records=10_000),
    repeats=5,
)
QUICK = Profile(
    name="quick",
    small=Volume(lines=100_000, envoy_records=10_000),
    big=Volume(lines=1_000_000, envoy_records=20_000),
    shape=Shape(pods=200, namespaces=10, nodes=20, cadvisor=True),
    replay_days=5,
    replay_volume=Volume(lines=20_000, envoy_records=1_000),
    repeats=3,
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


def digest_command() -> list[str]:
    """The installed ``digest`` console script (the one beside this interpreter first: no version-manager shim)."""
    beside = Path(sys.executable).with_name("digest")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("digest")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from digest.cli import main; sys.exit(main())"]


def digest_env(vm_url: str, vl_url: str) -> dict[str, str]:
    """The environment of a digest subprocess: default policy and settings, these backends, UTC."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DIGEST_")}
    env.update(DIGEST_VM_URL=vm_url, DIGEST_VL_URL=vl_url, DIGEST_TIMEZONE="UTC", DIGEST_CLUSTER="bench")
    return env


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


def _process_cpu(pid: int) -> float:
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
        self.backends = sum(_process_cpu(pid) for pid in self.pids)
        return self

    def __exit__(self, *_: object) -> None:
        elapsed = max(time.monotonic() - self.wall, 1e-9)
        backends = sum(_process_cpu(pid) for pid in self.pids) - self.backends
        other = (_machine_busy() - self.busy) - (_own_cpu() - self.own) - backends
        self.other_cores = max(0.0, other / elapsed)
        self.backends_cores = backends / elapsed


def settle(pids: Sequence[int], quiet_cores: float = 0.05, window_seconds: float = 2.0, limit: float = 180.0) -> str:
    """Wait until the backends' background work (merges) uses under ``quiet_cores``; say how long that took."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        before = sum(_process_cpu(pid) for pid in pids)
        time.sleep(window_seconds)
        if (sum(_process_cpu(pid) for pid in pids) - before) / window_seconds < quiet_cores:
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
    """``digest replay`` over many days against one."""

    days: list[dt.date]
    load: LoadReport
    one_day: dt.date
    many: list[Run] = field(default_factory=list)
    one: list[Run] = field(default_factory=list)
    # CPU seconds VictoriaMetrics and VictoriaLogs used during each run of ``many`` / ``one``.
    many_backend_cpu: list[tuple[float, float]] = field(default_factory=list)
    one_backend_cpu: list[tuple[float, float]] = field(default_factory=list)
    many_counts: tuple[Counts, Counts] = (Counts(), Counts())
    one_counts: tuple[Counts, Counts] = (Counts(), Counts())
    other_cores: float = 0.0
    backends_cores: float = 0.0
    not_checked: dict[str, int] = field(default_factory=dict)
    # `digest run` of the last replayed day, without a state file and with one that holds the past days.
    run_day: dt.date | None = None
    run_without_store: list[Run] = field(default_factory=list)
    run_with_store: list[Run] = field(default_factory=list)
    run_without_store_counts: tuple[Counts, Counts] = (Counts(), Counts())
    run_with_store_counts: tuple[Counts, Counts] = (Counts(), Counts())

    @property
    def ratio(self) -> float:
        return statistics.median(run.seconds for run in self.many) / statistics.median(run.seconds for run in self.one)

    @property
    def work_ratio(self) -> float:
        """CPU seconds of digest and both backends, 30 days over one day (medians)."""
        return _work(self.many, self.many_backend_cpu) / _work(self.one, self.one_backend_cpu)


def _work(runs: Sequence[Run], backend_cpu: Sequence[tuple[float, float]]) -> float:
    return statistics.median(run.cpu_seconds + vm + vl for run, (vm, vl) in zip(runs, backend_cpu, strict=True))


def with_backend_cpu(
    pids: Sequence[int], command: Sequence[str], env: dict[str, str]
) -> tuple[Run, tuple[float, float]]:
    """``measured(command)`` and the CPU seconds each of the two backends used meanwhile."""
    before = [_process_cpu(pid) for pid in pids]
    run = measured(command, env)
    vm, vl = (_process_cpu(pid) - start for pid, start in zip(pids, before, strict=True))
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
            purpose = f"{backend}#{index} {urlsplit(request.target).path}"
            queries.append(Query(backend, request.target, {}, purpose, request.body, request.content_type))
    return queries


_MOMENT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")


_MATCHERS = re.compile(r'namespace=~"(?:[^"\\]|\\.)*", pod=~"(?:[^"\\]|\\.)*", container=~"(?:[^"\\]|\\.)*"')


def _normalized(query: str) -> str:
    """A query with its window's timestamps and narrowing matchers blanked: one check's query on any day alike."""
    return _MATCHERS.sub("…", _MOMENT.sub("…", query))


def query_labels(day: dt.date, cluster: Cluster) -> dict[str, str]:
    """Normalized query text → the check purpose that produces it (``oom_kills.kills``…).

    Conntrack's peak-minute query is labelled with what the generator knows: the flooding pod's node peaks.
    """
    instance = f"{cluster.pods[cluster.flood].node}:9100"
    some = (("n", "p", "c"),)
    full = checks_queries(window_of(day), Dependencies(conntrack_instance=instance))
    narrowed = checks_queries(
        window_of(day), Dependencies(conntrack_instance=instance, restarted=some, memory_candidates=some)
    )
    return {_normalized(query.form["query"]): query.purpose for query in (*full, *narrowed)}


def backend_time(counts: Sequence[Counts], labels: dict[str, str]) -> list[tuple[str, int, float]]:
    """``(query, requests, summed latency)`` over recorded requests, the costliest first."""
    totals: dict[str, tuple[int, float]] = {}
    for one in counts:
        for request in one.recorded:
            text = parse_qs(request.body.decode(errors="replace")).get("query", [request.target])[0]
            key = _normalized(text)
            label = labels.get(key) or f"`{key[:60]}…`"
            number, seconds = totals.get(label, (0, 0.0))
            totals[label] = (number + 1, seconds + request.seconds)
    return sorted(((label, n, sec) for label, (n, sec) in totals.items()), key=lambda row: -row[2])


def _time_table(rows: list[tuple[str, int, float]], top: int = 8) -> list[str]:
    total = sum(seconds for _, _, seconds in rows) or 1e-9
    lines = ["| query (check.purpose) | requests | summed latency | share |", "|---|---|---|---|"]
    for label, number, seconds in rows[:top]:
        lines.append(
            f"| {label if label.startswith('`') else f'`{label}`'} | {number} | {seconds:.1f} s | "
            f"{100 * seconds / total:.0f} % |"
        )
    rest = rows[top:]
    if rest:
        lines.append(
            f"| {len(rest)} other queries | {sum(n for _, n, _ in rest)} | {sum(s for _, _, s in rest):.1f} s | "
            f"{100 * sum(s for _, _, s in rest) / total:.0f} % |"
        )
    return lines


def product_fingerprint() -> str:
    """A hash of the product's source files (names, sizes, modification times), to notice a change mid-run."""
    digest = hashlib.sha256()
    for folder in ("digest", "checks", "templates"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in (".py", ".j2") and "__pycache__" not in path.parts:
                stat = path.stat()
                digest.update(f"{path.relative_to(REPO)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:12]


def run_profiled(command: Sequence[str], env: dict[str, str], out: Path) -> None:
    """Run ``command`` (a Python console script) once under pyinstrument and write its text report to ``out``."""
    run = measured([sys.executable, "-m", "pyinstrument", "-r", "text", "-o", str(out), *command], env)
    say(f"profile written to {out}" if run.code == 0 else f"pyinstrument failed: {run.stderr.strip()[-200:]}")


def measure_day(
    label: str, cluster: Cluster, volume: Volume, repeats: int, profile_dir: Path | None = None
) -> DayResult:
    """Load one big or small day and measure digest, floors, naive baseline and request counts on it."""
    with backends_running() as backends:
        say(f"{label}: loading {volume.lines:,} log lines + {volume.envoy_records:,} access-log records")
        report = load(backends, cluster, [DAY], volume, progress=True)
        result = DayResult(label=label, facts=report.facts[0], load=report)
        result.settled = settle(backends.pids)
        say(f"{label}: {result.settled}")
        vm_url, vl_url = backends.metrics.url, backends.logs.url
        command = [*digest_command(), "run", "--date", DAY.isoformat(), "--format", "json"]

        # First digest through the counting proxies: counts and records its requests, and warms both backends.
        with CountingProxy(vm_url) as vm_proxy, CountingProxy(vl_url) as vl_proxy:
            run = checked(measured(command, digest_env(vm_proxy.url, vl_proxy.url)), "digest run (proxied)")
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
        queries = checks_queries(window, resolve_dependencies(vm_url, window))
        replayed = recorded_queries(result.vm_counts, result.vl_counts)
        result.checks_query_count = len(queries)
        asyncio.run(
            run_floor(queries, vm_url, vl_url, MAX_CONCURRENCY)
        )  # warm-up, as the proxied run was for the digest
        env = digest_env(vm_url, vl_url)
        with CpuMeter(backends.pids) as meter:
            for index in range(repeats):
                result.digest_runs.append(checked(measured(command, env), "digest run"))
                result.floors.append(asyncio.run(run_floor(queries, vm_url, vl_url, MAX_CONCURRENCY)))
                result.recorded_floors.append(asyncio.run(run_floor(replayed, vm_url, vl_url, MAX_CONCURRENCY)))
                say(
                    f"{label}: run {index + 1}/{repeats}: digest {result.digest_runs[-1].seconds:.2f} s "
                    f"({result.digest_runs[-1].max_rss_mib:.0f} MiB), checks floor {result.floors[-1].seconds:.2f} s, "
                    f"recorded floor {result.recorded_floors[-1].seconds:.2f} s"
                )
            for _ in range(repeats):
                result.startup.append(checked(measured([*digest_command(), "--help"], env), "digest --help"))
            warm_command = [sys.executable, "-m", "bench.warm", "--date", DAY.isoformat(), "--repeats", str(repeats)]
            warm = checked(measured(warm_command, env), "warm digests")
            result.warm_seconds = [float(seconds) for seconds in json.loads(warm.stdout)["seconds"]]
            say(f"{label}: warm digests in one process: {', '.join(f'{t:.2f}' for t in result.warm_seconds)} s")
        result.other_cores = meter.other_cores

        if profile_dir is not None:
            run_profiled(command, env, profile_dir / f"digest-run-{label.split()[0]}.txt")

        say(f"{label}: naive baseline (download {result.facts.error_lines:,} error lines)")
        naive_command = [sys.executable, "-m", "bench.naive", "--vl-url", vl_url, "--date", DAY.isoformat()]
        naive = measured(naive_command, python_env())
        if naive.code == 0:
            result.naive, result.naive_out = naive, json.loads(naive.stdout)
            say(f"{label}: naive {naive.seconds:.1f} s, {naive.max_rss_mib:.0f} MiB")
        else:
            result.naive_error = (naive.stderr.strip().splitlines() or ["no message"])[-1][:200]
            say(f"{label}: naive baseline failed: {result.naive_error}")
    return result


def measure_replay(cluster: Cluster, profile: Profile, repeats: int, profile_dir: Path | None = None) -> ReplayResult:
    """Load ``replay_days`` consecutive days ending the day before ``DAY`` and time replays of all and of one."""
    days = [DAY - dt.timedelta(days=profile.replay_days - k) for k in range(profile.replay_days)]
    with backends_running() as backends:
        volume = profile.replay_volume
        say(f"replay: loading {len(days)} days of {volume.lines + volume.envoy_records:,} records")
        report = load(backends, cluster, days, volume, progress=True)
        say(f"replay: {settle(backends.pids)}")
        one_day = days[len(days) // 2]
        result = ReplayResult(days=days, load=report, one_day=one_day)
        replay = [*digest_command(), "replay", "--concurrency", str(REPLAY_CONCURRENCY)]
        many_command = [*replay, "--from", days[0].isoformat(), "--to", days[-1].isoformat()]
        one_command = [*replay, "--from", one_day.isoformat(), "--to", one_day.isoformat()]
        with CountingProxy(backends.metrics.url) as vm_proxy, CountingProxy(backends.logs.url) as vl_proxy:
            env = digest_env(vm_proxy.url, vl_proxy.url)
            summaries = checked(measured(many_command, env), "digest replay (proxied)").stdout.splitlines()
            result.many_counts = (vm_proxy.reset(), vl_proxy.reset())
            checked(measured(one_command, env), "digest replay one day (proxied)")
            result.one_counts = (vm_proxy.reset(), vl_proxy.reset())
        for summary in summaries:
            for part in summary.split(" · "):
                if part.endswith(" not checked"):
                    name = part.removesuffix(" not checked").split()[-1]
                    result.not_checked[name] = result.not_checked.get(name, 0) + 1
        env = digest_env(backends.metrics.url, backends.logs.url)
        with CpuMeter(backends.pids) as meter:
            for index in range(repeats):
                many, many_cpu = with_backend_cpu(backends.pids, many_command, env)
                one, one_cpu = with_backend_cpu(backends.pids, one_command, env)
                result.many.append(checked(many, "digest replay"))
                result.one.append(checked(one, "digest replay one day"))
                result.many_backend_cpu.append(many_cpu)
                result.one_backend_cpu.append(one_cpu)
                say(
                    f"replay: run {index + 1}/{repeats}: {len(days)} days {result.many[-1].seconds:.2f} s, "
                    f"1 day {result.one[-1].seconds:.2f} s"
                )
        result.other_cores, result.backends_cores = meter.other_cores, meter.backends_cores
        measure_history_store(backends, days[-1], result, repeats)
        if profile_dir is not None:
            run_profiled(many_command, env, profile_dir / "digest-replay-many.txt")
            run_profiled(one_command, env, profile_dir / "digest-replay-one.txt")
    return result


def measure_history_store(backends: EmbeddedBackends, day: dt.date, result: ReplayResult, repeats: int) -> None:
    """``digest run`` of a day whose 7 previous days have data: without a state file, and with one that has them."""
    command = [*digest_command(), "run", "--date", day.isoformat(), "--format", "json"]
    result.run_day = day
    with tempfile.TemporaryDirectory(prefix="digest-bench-state-") as tmp:
        plain = digest_env(backends.metrics.url, backends.logs.url)
        stored = {**plain, "DIGEST_STATE_PATH": str(Path(tmp) / "state.sqlite")}
        checked(measured(command, stored), "digest run filling the state file")
        with CountingProxy(backends.metrics.url) as vm_proxy, CountingProxy(backends.logs.url) as vl_proxy:
            proxied = digest_env(vm_proxy.url, vl_proxy.url)
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
        f"history store: digest run {day}: {_median(result.run_without_store):.2f} s without state, "
        f"{_median(result.run_with_store):.2f} s with the past days stored"
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
    info["revision"] = revision()
    return info


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


def _mark(ok: bool) -> str:
    return "✅ met" if ok else "❌ missed"


def _size(count: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


def _median(runs: Sequence[Run], attribute: str = "seconds") -> float:
    return statistics.median(float(getattr(run, attribute)) for run in runs)


def goals(small: DayResult, big: DayResult, replay: ReplayResult | None) -> dict[str, bool]:
    """Each goal of the brief and whether this run met it."""
    rss_ok = max(small.max_rss, big.max_rss) * 2**20 / 1e6 <= RSS_GOAL_MB
    flat = big.max_rss <= small.max_rss * (1 + FLAT_TOLERANCE)
    met = {
        f"ratio ≤ {RATIO_GOAL}× (small)": small.ratio <= RATIO_GOAL,
        f"ratio ≤ {RATIO_GOAL}× (big)": big.ratio <= RATIO_GOAL,
        f"peak RSS ≤ {RSS_GOAL_MB:.0f} MB and flat": rss_ok and flat,
        "requests per digest independent of size": (small.vm_counts.by_path, small.vl_counts.by_path)
        == (big.vm_counts.by_path, big.vl_counts.by_path),
        "digest counts every error line": small.counted_errors == small.facts.flood_error_lines
        and big.counted_errors == big.facts.flood_error_lines,
    }
    if replay is not None:
        met[f"replay {len(replay.days)} days ≤ {REPLAY_GOAL}× one day"] = replay.ratio <= REPLAY_GOAL
    return met


def _naive_cells(result: DayResult) -> tuple[str, str, str]:
    if result.naive is None:
        failed = f"failed: {result.naive_error}"
        return failed, "-", "-"
    out = result.naive_out
    return (
        f"{result.naive.seconds:.1f} s",
        f"{result.naive.max_rss_mib:.0f} MiB",
        f"{_size(float(str(out.get('bytes', 0))))} / {int(str(out.get('records', 0))):,}",
    )


def render(
    profile: Profile,
    cluster: Cluster,
    results: tuple[DayResult, DayResult, ReplayResult | None],
    info: dict[str, str],
    command: str,
) -> str:
    """The results as Markdown: context, the main table, the replay table, goals, details."""
    small, big, replay = results
    met = goals(small, big, replay)
    n = len(small.digest_runs)
    lines = [
        f"Run of {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, profile `{profile.name}`, command `{command}` "
        f"(from the repository root), product at {info.get('revision')}.",
        "",
        f"Machine: {info.get('cores')} cores ({info.get('cpu', '?')}), {info.get('ram', '?')} RAM, "
        f"{info.get('os', '?')} (Linux {info.get('kernel')}), Python {info.get('python')}; "
        f"VictoriaMetrics {info.get('victoria-metrics')}; VictoriaLogs {info.get('victoria-logs')}. "
        f"Other processes used {small.other_cores:.2f} / {big.other_cores:.2f} cores on average during the small / "
        "big measurements" + (f" and {replay.other_cores:.2f} during the replays" if replay else "") + ".",
        "",
        f"Cluster: {profile.shape.pods:,} pods in {profile.shape.namespaces} namespaces on {profile.shape.nodes} nodes "
        f"(+ the flooding pod and the gateway), metrics every {profile.shape.step_s} s"
        + (" with cAdvisor memory" if profile.shape.cadvisor else "")
        + f"; day {DAY} (UTC). Median of {n} interleaved runs each; every digest checked against the generated facts.",
        "",
    ]
    naive_small, naive_big = _naive_cells(small), _naive_cells(big)
    rows = [
        (
            f"`digest run` wall time, median of {n}",
            f"{small.digest_median:.2f} s",
            f"{big.digest_median:.2f} s",
            "",
            "",
        ),
        (
            f"checks floor: the checks' {small.checks_query_count} queries sent directly, concurrently "
            f"(≤ {MAX_CONCURRENCY} per backend)",
            f"{small.floor_median:.2f} s",
            f"{big.floor_median:.2f} s",
            "",
            "",
        ),
        (
            "**ratio digest / checks floor**",
            f"**{small.ratio:.2f}×**",
            f"**{big.ratio:.2f}×**",
            f"≤ {RATIO_GOAL}×",
            _mark(met[f"ratio ≤ {RATIO_GOAL}× (small)"] and met[f"ratio ≤ {RATIO_GOAL}× (big)"]),
        ),
        (
            "recorded floor: the digest's own requests replayed concurrently; ratio",
            f"{small.recorded_median:.2f} s; {small.digest_median / small.recorded_median:.2f}×",
            f"{big.recorded_median:.2f} s; {big.digest_median / big.recorded_median:.2f}×",
            "",
            "",
        ),
        (
            "digest computed inside a running process (start-up paid once, as in `digest serve`; no state file), "
            "median; ratio to the checks floor",
            f"{small.warm_median:.2f} s; {small.warm_median / small.floor_median:.2f}×",
            f"{big.warm_median:.2f} s; {big.warm_median / big.floor_median:.2f}×",
            "",
            "",
        ),
        (
            "`digest run` CPU time (user + system), median",
            f"{_median(small.digest_runs, 'cpu_seconds'):.2f} s",
            f"{_median(big.digest_runs, 'cpu_seconds'):.2f} s",
            "",
            "",
        ),
        (
            "`digest --help`: interpreter start-up + imports, no query, median",
            f"{_median(small.startup):.2f} s",
            f"{_median(big.startup):.2f} s",
            "",
            "",
        ),
        (
            "**`digest run` peak RSS** (max of the runs)",
            f"**{small.max_rss:.0f} MiB**",
            f"**{big.max_rss:.0f} MiB**",
            f"≤ {RSS_GOAL_MB:.0f} MB, flat",
            _mark(met[f"peak RSS ≤ {RSS_GOAL_MB:.0f} MB and flat"]),
        ),
        ("naive: download the error lines, count in Python — wall time", naive_small[0], naive_big[0], "contrast", ""),
        ("naive: peak RSS", naive_small[1], naive_big[1], "", ""),
        ("naive: bytes downloaded / records parsed", naive_small[2], naive_big[2], "", ""),
        (
            "**backend requests per digest** (VictoriaMetrics + VictoriaLogs)",
            f"**{small.vm_counts.requests} + {small.vl_counts.requests}**",
            f"**{big.vm_counts.requests} + {big.vl_counts.requests}**",
            "constant",
            _mark(met["requests per digest independent of size"]),
        ),
        (
            "bytes the digest sent / received",
            f"{_size(small.vm_counts.bytes_up + small.vl_counts.bytes_up)} / "
            f"{_size(small.vm_counts.bytes_down + small.vl_counts.bytes_down)}",
            f"{_size(big.vm_counts.bytes_up + big.vl_counts.bytes_up)} / "
            f"{_size(big.vm_counts.bytes_down + big.vl_counts.bytes_down)}",
            "",
            "",
        ),
        (
            "digest's verdict; flood error lines counted / generated",
            f"{small.headline.split(' · ')[0]}; {small.counted_errors:,.0f} / {small.facts.flood_error_lines:,}",
            f"{big.headline.split(' · ')[0]}; {big.counted_errors:,.0f} / {big.facts.flood_error_lines:,}",
            "exact",
            _mark(met["digest counts every error line"]),
        ),
    ]
    head = [f"{r.label}: {r.facts.log_lines:,} records, {r.facts.error_lines:,} error lines" for r in (small, big)]
    lines += [
        f"| measure | {head[0]} | {head[1]} | goal | |",
        "|---|---|---|---|---|",
        *(f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows),
        "",
    ]
    for result in (small, big):
        if result.unknown:
            lines.append(
                f"UNKNOWN checks on the {result.label.split()[0]} day (series the generator does not write): "
                + "; ".join(f"`{name}` ({reason[:90]})" for name, reason in sorted(result.unknown.items()))
                + "."
            )
            lines.append("")
    if replay is not None:
        lines += _replay_lines(replay)
    lines += ["Requests by path (one `digest run`, small / big):", ""]
    for name, here, there in (
        ("VictoriaMetrics", small.vm_counts, big.vm_counts),
        ("VictoriaLogs", small.vl_counts, big.vl_counts),
    ):
        paths = sorted(set(here.by_path) | set(there.by_path))
        lines.append(f"* {name}: " + ", ".join(f"`{p}` {here.by_path[p]} / {there.by_path[p]}" for p in paths))
    labels = query_labels(DAY, cluster)
    lines += [
        "",
        "Where the backends' time goes in one `digest run` on the big day (sum of request latencies seen by the "
        "counting proxy; the requests overlap, so the sum exceeds the wall time):",
        "",
        *_time_table(backend_time([big.vm_counts, big.vl_counts], labels)),
    ]
    if replay is not None:
        lines += [
            "",
            f"The same for the proxied `digest replay` of {len(replay.days)} days:",
            "",
            *_time_table(backend_time(list(replay.many_counts), labels)),
        ]
    small_q, big_q = small.floor_query_medians(), big.floor_query_medians()
    slowest = sorted(big_q, key=lambda name: -big_q[name])[:12]
    lines += [
        "",
        f"Checks floor, median latency of the {len(slowest)} slowest of its {len(big_q)} queries inside the "
        "concurrent batch:",
        "",
        "| query | small | big |",
        "|---|---|---|",
        *(f"| `{name}` | {_seconds(small_q.get(name))} | {_seconds(big_q.get(name))} |" for name in slowest),
        "",
        "Loading (not part of any measure):",
        "",
    ]
    for result in (small, big):
        r = result.load
        lines.append(
            f"* {result.label}: {r.samples:,} samples in {r.metrics_seconds:.0f} s; {r.log_records:,} records "
            f"({_size(r.log_bytes)}) in {r.logs_seconds:.0f} s ({r.log_records / max(r.logs_seconds, 1e-9):,.0f}/s); "
            f"{result.settled}"
        )
    if replay is not None:
        r = replay.load
        lines.append(
            f"* replay: {r.samples:,} samples in {r.metrics_seconds:.0f} s; {r.log_records:,} records in "
            f"{r.logs_seconds:.0f} s"
        )
    lines += ["", "Goals: " + "; ".join(f"{name} {_mark(ok)}" for name, ok in met.items()) + ".", ""]
    if info.get("fingerprint_start") != info.get("fingerprint_end"):
        lines += [
            "**Warning:** the product's source files changed while this run was measuring (fingerprint "
            f"{info.get('fingerprint_start')} → {info.get('fingerprint_end')}); some measures straddle two versions.",
            "",
        ]
    return "\n".join(lines)


def _replay_lines(replay: ReplayResult) -> list[str]:
    many, one = _median(replay.many), _median(replay.one)
    first, last, middle = replay.days[0], replay.days[-1], replay.one_day
    per_day = replay.load.facts[0]
    k = len(replay.many)
    return [
        f"Replay dataset: {len(replay.days)} days {first} … {last}, each {per_day.log_lines:,} records "
        f"({per_day.error_lines:,} error lines), the same cluster and metrics. The backends used "
        f"{replay.backends_cores:.2f} cores on average during the replays.",
        "",
        f"| `digest replay --concurrency {REPLAY_CONCURRENCY}` | wall time, median of {k} | CPU seconds: digest / "
        "VictoriaMetrics / VictoriaLogs | requests (VM + VL) | goal | |",
        "|---|---|---|---|---|---|",
        f"| `--from {first} --to {last}` ({len(replay.days)} days) | {many:.2f} s | "
        f"{_cpu_cells(replay.many, replay.many_backend_cpu)} | "
        f"{replay.many_counts[0].requests} + {replay.many_counts[1].requests} | | |",
        f"| `--from {middle} --to {middle}` (1 day) | {one:.2f} s | {_cpu_cells(replay.one, replay.one_backend_cpu)} | "
        f"{replay.one_counts[0].requests} + {replay.one_counts[1].requests} | | |",
        f"| **ratio** | **{replay.ratio:.2f}×** | work (all CPU seconds): {replay.work_ratio:.2f}× | | "
        f"≤ {REPLAY_GOAL}× | {_mark(replay.ratio <= REPLAY_GOAL)} |",
        "",
        "Checks not checked in the proxied replay (days): "
        + (", ".join(f"`{name}` {count}" for name, count in sorted(replay.not_checked.items())) or "none")
        + ".",
        "",
        *_store_lines(replay),
    ]


def _seconds(value: float | None) -> str:
    """A latency, or a dash for a query that run did not send."""
    return "–" if value is None else f"{value:.3f} s"


def _cpu_cells(runs: Sequence[Run], backend_cpu: Sequence[tuple[float, float]]) -> str:
    vm = statistics.median(cpu[0] for cpu in backend_cpu)
    vl = statistics.median(cpu[1] for cpu in backend_cpu)
    return f"{_median(runs, 'cpu_seconds'):.2f} / {vm:.2f} / {vl:.2f}"


def _store_lines(replay: ReplayResult) -> list[str]:
    if replay.run_day is None or not replay.run_without_store:
        return []
    day, k = replay.run_day, len(replay.run_without_store)
    with_data = sum(1 for other in replay.days if 1 <= (day - other).days <= TREND_DAYS)
    without, stored = replay.run_without_store_counts, replay.run_with_store_counts
    return [
        f"The state file's trend history, on the replay dataset ({with_data} of the {TREND_DAYS} days before {day} "
        f"have data): `digest run --date {day}`, median of {k}.",
        "",
        "| `digest run` | wall time | CPU time of digest | requests (VM + VL) |",
        "|---|---|---|---|",
        f"| without a state file: the {TREND_DAYS} past days queried again | "
        f"{_median(replay.run_without_store):.2f} s | {_median(replay.run_without_store, 'cpu_seconds'):.2f} s | "
        f"{without[0].requests} + {without[1].requests} |",
        f"| `DIGEST_STATE_PATH` set, past days stored by an earlier digest | {_median(replay.run_with_store):.2f} s | "
        f"{_median(replay.run_with_store, 'cpu_seconds'):.2f} s | {stored[0].requests} + {stored[1].requests} |",
        "",
    ]


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
        description="Benchmark digest on generated days in embedded VictoriaMetrics/VictoriaLogs: wall time against "
        "the direct-query floor, peak RSS at 1 M and 13 M log lines, a naive baseline, 30-day replay, request counts.",
        epilog="A full run takes 10-20 minutes on 2 cores and rewrites the results block of docs/benchmarks.md; "
        "--quick takes about a minute and only prints the table unless --output is given.",
    )
    parser.add_argument("--quick", action="store_true", help="small volumes, a fast sanity run (< 2 minutes)")
    parser.add_argument("--repeats", type=int, help="measured runs per measure (default 5, quick 3; at least 3)")
    parser.add_argument("--output", type=Path, help="Markdown file to update (default docs/benchmarks.md, full run)")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument("--skip-replay", action="store_true", help="leave out the multi-day replay measure")
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the whole programme, print the table, write the document."""
    args = _parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    profile = QUICK if args.quick else FULL
    repeats = max(3, args.repeats or profile.repeats)
    profile = replace(profile, repeats=repeats)
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
    small = measure_day(small_label, cluster, profile.small, repeats)
    big = measure_day(big_label, cluster, profile.big, repeats, profile_dir)
    replay = None if args.skip_replay else measure_replay(cluster, profile, max(3, repeats - 2), profile_dir)
    info["fingerprint_end"] = product_fingerprint()
    block = render(profile, cluster, (small, big, replay), info, command)
    print(block)
    output = args.output or (None if args.quick else DOC)
    if output is not None and not args.no_write:
        write_doc(output, block)
        say(f"results written to {output}")
    say(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

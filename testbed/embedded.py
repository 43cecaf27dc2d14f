"""Real VictoriaMetrics and VictoriaLogs processes on free loopback ports, for `digest demo` and the tests.

Each server gets a temporary data directory and a retention of 100 years: both servers silently drop samples older
than their retention, and replayed incident days are months old. Loading goes through the servers' own ingestion
APIs (`/api/v1/import`, `/insert/jsonline`) and is followed by a bounded poll until the data is visible — never a
blind sleep. Processes are stopped by their PID and the directories removed.

``loaded_backends`` hands out a pair loaded by a given function, restored from a snapshot of an earlier run when one
is kept (``testbed.snapshots``), and checked by the same bounded polls either way.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import httpx

from digest.checks.contract import rfc3339
from digest.testbed.snapshots import Snapshot, SnapshotKey, record, timed

if TYPE_CHECKING:
    from digest.testbed.corpus.model import CorpusDay

LOG_STREAM_FIELDS = "kubernetes.pod_namespace,kubernetes.pod_name,kubernetes.container_name,stream"
_RETENTION = "100y"


def _said(response: httpx.Response) -> str:
    """What a refusing backend said: its start and its end.

    VictoriaLogs quotes the offending line first and gives the reason last, so a cut after 200 characters kept the line
    and lost why.
    """
    text = response.text.strip()
    return text if len(text) <= 800 else f"{text[:300]} … {text[-500:]}"


class EmbeddedError(RuntimeError):
    """A backend binary is missing, did not start, or did not take the data."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def log_tail(path: Path | None, lines: int = 5) -> str:
    """The last ``lines`` lines of a server's log, joined on one line (its end only: a log may be large)."""
    if path is None or not path.exists():
        return "(no log)"
    text = path.read_bytes()[-20_000:].decode(errors="replace")
    return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"


def wait_ready(
    name: str,
    process: subprocess.Popen[bytes] | None,
    url: str,
    timeout_seconds: float,
    log_path: Path | None,
    error: type[Exception],
) -> None:
    """Poll ``url`` (bounded) until it answers 200.

    If the process exits or time runs out, raise ``error`` with the last answer and the log's tail.
    """
    deadline = time.monotonic() + timeout_seconds
    last = "no answer"
    while time.monotonic() < deadline:
        if process is None or process.poll() is not None:
            code = None if process is None else process.returncode
            raise error(f"{name} exited at start (exit code {code}): {log_tail(log_path)} (log: {log_path})")
        try:
            response = httpx.get(url, timeout=2.0)
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        else:
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code} {response.text.strip()[:120]}"
        time.sleep(0.1)
    raise error(f"{name} not ready after {timeout_seconds:g} s ({last}): {log_tail(log_path)} (log: {log_path})")


@dataclass
class Server:
    """One backend process."""

    name: str
    binary: str
    port: int
    data_dir: Path
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, extra_args: Iterable[str] = ()) -> None:
        path = shutil.which(self.binary)
        if path is None:
            raise EmbeddedError(f"{self.binary} is not on PATH: run scripts/install-backends first")
        started = time.monotonic()
        self.log_path = self.data_dir.parent / f"{self.name}.log"
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(  # noqa: S603  # the binary was resolved on PATH, arguments are ours
                [
                    path,
                    f"-storageDataPath={self.data_dir}",
                    f"-retentionPeriod={_RETENTION}",
                    f"-httpListenAddr=127.0.0.1:{self.port}",
                    "-loggerLevel=ERROR",
                    *extra_args,
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.wait_healthy()
        record("start", self.binary, time.monotonic() - started)

    def wait_healthy(self, timeout_seconds: float = 30.0) -> None:
        wait_ready(self.name, self.process, f"{self.url}/health", timeout_seconds, self.log_path, EmbeddedError)

    def stop(self, strict: bool = False) -> None:
        """Stop the process by its PID (SIGTERM, then SIGKILL after 10 s).

        ``strict`` (before a snapshot): wait up to 60 s, and raise ``EmbeddedError`` if the process had to be killed
        or was not running, since its data may then be incomplete.
        """
        if self.process is None:
            if strict:
                raise EmbeddedError(f"{self.name} was not running: its data cannot be trusted whole")
            return
        process, self.process = self.process, None
        if process.poll() is not None:
            if strict:
                raise EmbeddedError(
                    f"{self.name} exited on its own (code {process.returncode}): {log_tail(self.log_path)}"
                )
            return
        process.terminate()
        try:
            process.wait(timeout=60 if strict else 10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
            if strict:
                raise EmbeddedError(f"{self.name} did not stop within 60 s of SIGTERM: killed") from None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class EmbeddedBackends:
    """A VictoriaMetrics and a VictoriaLogs on free ports in a temporary directory."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="digest-backends-")))
    metrics: Server = field(init=False)
    logs: Server = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = Server("victoria-metrics", "victoria-metrics", free_port(), self.root / "vm")
        self.logs = Server("victoria-logs", "victoria-logs", free_port(), self.root / "vl")

    def start(self) -> Self:
        """Start both servers on their data directories (empty, restored, or kept from before ``halt``)."""
        try:
            # Queries "up to now" must see what was just imported; a real install keeps its 30 s offset. Adjacent
            # corpus days share the hours around their midnight: without deduplication VictoriaMetrics keeps a sample
            # imported twice twice, and reads 15 s scrapes where there were 30 s ones (Prometheus keeps one).
            self.metrics.start(["-search.latencyOffset=0s", "-dedup.minScrapeInterval=1ms"])
            self.logs.start()
        except BaseException:
            self.stop()
            raise
        return self

    def halt(self, strict: bool = False) -> None:
        """Stop both processes and keep their data directories (to snapshot them, or start again).

        ``strict``: each must exit on its own after SIGTERM (having flushed), within a minute, or ``EmbeddedError``.
        """
        self.logs.stop(strict=strict)
        self.metrics.stop(strict=strict)

    def stop(self) -> None:
        self.halt()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # Loading -----------------------------------------------------------------------------------------------------

    def import_series(self, lines: Iterable[bytes]) -> int:
        """Send VictoriaMetrics /api/v1/import JSON lines; returns how many series were sent."""
        count = 0

        def body() -> Iterator[bytes]:
            nonlocal count
            batch: list[bytes] = []
            for line in lines:
                batch.append(line)
                count += 1
                if len(batch) >= 200:
                    yield b"".join(batch)
                    batch = []
            if batch:
                yield b"".join(batch)

        response = httpx.post(f"{self.metrics.url}/api/v1/import", content=body(), timeout=120.0)
        if response.status_code >= 300:
            raise EmbeddedError(f"VictoriaMetrics import failed: HTTP {response.status_code} {_said(response)}")
        self._flush(self.metrics)
        return count

    def ingest_logs(
        self, chunks: Iterable[bytes], stream_fields: str = LOG_STREAM_FIELDS, tenant: Mapping[str, str] | None = None
    ) -> None:
        """Stream newline-delimited JSON records to VictoriaLogs (Vector kubernetes_logs shape).

        ``tenant``: the ``AccountID``/``ProjectID`` headers of another tenant than the default (0:0).
        """
        params = {"_msg_field": "message", "_time_field": "timestamp", "_stream_fields": stream_fields}
        # Without this content type VictoriaLogs answers 200 and drops the body.
        headers = {"Content-Type": "application/stream+json", **(tenant or {})}
        response = httpx.post(
            f"{self.logs.url}/insert/jsonline", params=params, headers=headers, content=iter(chunks), timeout=600.0
        )
        if response.status_code >= 300:
            raise EmbeddedError(f"VictoriaLogs ingestion failed: HTTP {response.status_code} {_said(response)}")
        self._flush(self.logs)

    def _flush(self, server: Server) -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(f"{server.url}/internal/force_flush", timeout=30.0)

    def wait_for_logs(
        self,
        start: datetime,
        end: datetime,
        expected: int,
        timeout_seconds: float = 60.0,
        tenant: Mapping[str, str] | None = None,
    ) -> None:
        """Poll VictoriaLogs until ``expected`` records of [start, end) are visible (bounded), in ``tenant``."""
        query = f"_time:[{rfc3339(start)}, {rfc3339(end)}) | stats count() as lines"
        deadline = time.monotonic() + timeout_seconds
        seen = -1
        while time.monotonic() < deadline:
            response = httpx.post(
                f"{self.logs.url}/select/logsql/stats_query",
                data={"query": query, "time": rfc3339(end)},
                headers=dict(tenant or {}),
                timeout=30.0,
            )
            result = response.json().get("data", {}).get("result", []) if response.status_code == 200 else []
            seen = int(float(result[0]["value"][1])) if result else 0
            if seen >= expected:
                return
            self._flush(self.logs)
            time.sleep(0.2)
        raise EmbeddedError(f"VictoriaLogs shows {seen} of {expected} records after {timeout_seconds:g} s")

    def wait_for_series(self, selector: str, at: datetime, expected: int, timeout_seconds: float = 60.0) -> None:
        """Poll VictoriaMetrics until ``count(selector)`` at ``at`` reaches ``expected`` (bounded)."""
        deadline = time.monotonic() + timeout_seconds
        seen = -1
        while time.monotonic() < deadline:
            response = httpx.post(
                f"{self.metrics.url}/api/v1/query",
                data={"query": f"count({selector})", "time": rfc3339(at)},
                timeout=30.0,
            )
            result = response.json().get("data", {}).get("result", []) if response.status_code == 200 else []
            seen = int(float(result[0]["value"][1])) if result else 0
            if seen >= expected:
                return
            self._flush(self.metrics)
            time.sleep(0.2)
        raise EmbeddedError(f"VictoriaMetrics shows {seen} of {expected} series {selector} after {timeout_seconds:g} s")


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """The UTC day [00:00, next 00:00)."""
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return start, start + timedelta(days=1)


def load_corpus_day(backends: EmbeddedBackends, day: CorpusDay) -> int:
    """Load one incident day into the backends and wait (bounded) until the digest can see all of it.

    Returns the number of log records loaded (what ``wait_for_corpus_day`` waits for).
    """
    backends.import_series(series.to_import_line() for series in day.series())
    backends.ingest_logs(day.log_chunks())
    lines = day.log_line_count()
    wait_for_corpus_day(backends, day.date, lines)
    return lines


def wait_for_corpus_day(backends: EmbeddedBackends, day: date, lines: int) -> None:
    """Bounded polls until the day's kube-state-metrics series and its ``lines`` log records are visible."""
    start, end = day_bounds(day)
    backends.wait_for_series('up{job="kube-state-metrics"}', end, 1)
    backends.wait_for_logs(start - timedelta(days=1), end + timedelta(days=1), lines)


@contextlib.contextmanager
def loaded_backends(
    what: str,
    snapshot: SnapshotKey | None,
    load: Callable[[EmbeddedBackends], dict[str, Any]],
    verify: Callable[[EmbeddedBackends, dict[str, Any]], None],
    backends_type: Callable[[], EmbeddedBackends] = EmbeddedBackends,
) -> Iterator[EmbeddedBackends]:
    """A started pair holding what ``load`` puts in it, from ``snapshot`` when one is kept; stopped on exit.

    ``load`` loads an empty pair, waits until it is visible and returns a manifest (the counts ``verify`` needs);
    ``verify`` polls (bounded) until a pair shows what the manifest says. A pair restored from a snapshot is verified
    before it is handed out; so is a fresh load after it was stopped, saved and started again.
    """
    backends = backends_type()
    try:
        if snapshot is None:
            backends.start()
            with timed("load", what, "uncached"):
                load(backends)
        else:
            with snapshot.claim() as kept:
                _load_or_restore(backends, what, kept, load, verify)
        yield backends
    finally:
        backends.stop()


def _load_or_restore(
    backends: EmbeddedBackends,
    what: str,
    kept: Snapshot,
    load: Callable[[EmbeddedBackends], dict[str, Any]],
    verify: Callable[[EmbeddedBackends, dict[str, Any]], None],
) -> None:
    if kept.found:
        with timed("load", what, "restored"):
            kept.restore("vm", backends.metrics.data_dir)
            kept.restore("vl", backends.logs.data_dir)
            backends.start()
            verify(backends, kept.manifest)
        return
    backends.start()
    with timed("load", what, "built"):
        manifest = load(backends)
        backends.halt(strict=True)
        with kept.saving({"vm": backends.metrics.data_dir, "vl": backends.logs.data_dir}, manifest):
            backends.start()
            verify(backends, manifest)

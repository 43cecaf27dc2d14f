"""A real Grafana Loki 3.5.12 process on free loopback ports, loaded with corpus days, for the tests and the demo.

Why a real Loki: the Loki log source must meet the real server's answers and limits (``max_query_series``, query
timeouts, step alignment), which a fake would only imitate. No package registry ships Loki, so the binary comes from
``DIGEST_LOKI_BINARY`` or ``loki`` on PATH (``scripts/install-backends`` unpacks one when ``../shared/backends/``
exists); without one, ``LokiUnavailable`` says so in one line and the tests skip (or fail under
``DIGEST_REQUIRE_LOKI=1``).

Loading converts the corpus' Vector ``kubernetes_logs`` records the way Promtail or Alloy would ship them: stream
labels ``namespace``, ``pod``, ``container``, ``node_name``, ``stream``; the line is ``message``; ``level`` (when
present) becomes structured metadata. Loki refuses an entry more than half of ``max_chunk_age`` (1 h) behind its
stream's newest entry, so each stream's entries are pushed in time order and days in chronological order
(``push_days`` sorts them); pushing an older day after a newer one fails loudly. Every load ends with a bounded poll
until Loki counts exactly the lines pushed — never a blind sleep. The process is stopped by its PID.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import httpx
import yaml

from digest.backends.loki import rfc3339_nanos, unix_nanos
from digest.testbed.embedded import free_port, log_tail, wait_ready
from digest.testbed.snapshots import SnapshotKey, binary_identity, record, snapshot_key, timed

if TYPE_CHECKING:
    from digest.testbed.corpus.model import CorpusDay

BINARY_VARIABLE = "DIGEST_LOKI_BINARY"
REQUIRE_VARIABLE = "DIGEST_REQUIRE_LOKI"
CONFIG_PATH = Path(__file__).with_name("loki-local.yaml")
READY_TIMEOUT_SECONDS = 90.0
STOP_GRACE_SECONDS = 10.0
# A clean stop after a bulk load flushes every in-memory chunk: seconds on a quiet machine, more beside a busy one.
HALT_GRACE_SECONDS = 300.0
# Two bodies in flight: Loki parses one while the next is converted. Plain JSON, not gzip: on 2 cores gzip cost more
# CPU (client and server) than it saved on loopback (measured: 47 s against 33 s for the storm day's 432 MB).
PUSH_CONCURRENCY = 2
PUSH_GZIP = False
# Half of the 1 h a stream accepts behind its newest entry (max_chunk_age 2h / 2): see _Pusher.
_OVERLAP_LIMIT_NS = 30 * 60 * 1_000_000_000

_DISCARDED = re.compile(r'loki_discarded_samples_total\{[^}]*\breason="(?P<reason>[^"]*)"[^}]*\} (?P<value>\S+)')
_ENV_REFERENCE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


class LokiUnavailable(RuntimeError):  # noqa: N818  # reads as the condition callers skip on: "Loki is unavailable"
    """No Loki binary was found; the message is one line naming ``DIGEST_LOKI_BINARY``."""


class LokiError(RuntimeError):
    """Loki did not start, refused a push, or did not show the lines pushed in time."""


def find_loki_binary() -> str:
    """The Loki binary to run: ``DIGEST_LOKI_BINARY`` when set, else ``loki`` on PATH."""
    configured = os.environ.get(BINARY_VARIABLE, "").strip()
    if configured:
        path = Path(configured)
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        raise LokiUnavailable(f"{BINARY_VARIABLE}={configured} is not an executable file: point it at a Loki binary")
    found = shutil.which("loki")
    if found is None:
        raise LokiUnavailable(
            f"no Loki binary: set {BINARY_VARIABLE} to a Loki 3.5 binary or run scripts/install-backends "
            "(it unpacks one when ../shared/backends/ exists)"
        )
    return found


def loki_required() -> bool:
    """Whether a missing Loki must fail the tests (``DIGEST_REQUIRE_LOKI=1``, as CI sets) rather than skip them."""
    return os.environ.get(REQUIRE_VARIABLE, "").strip() == "1"


def loki_binary_or_skip() -> str:
    """For tests: the Loki binary; without one, skip naming ``DIGEST_LOKI_BINARY`` (fail if Loki is required)."""
    import pytest  # only the tests call this; the demo tooling must not need pytest

    try:
        return find_loki_binary()
    except LokiUnavailable as error:
        if loki_required():
            pytest.fail(f"{error} ({REQUIRE_VARIABLE}=1: Loki is required here)", pytrace=False)
        pytest.skip(str(error))


@dataclass(frozen=True)
class PushedDay:
    """What ``push_day`` sent for one day, and how long it took."""

    date: str
    lines: int
    lines_by_namespace: Mapping[str, int]
    first_ns: int
    last_ns: int
    body_bytes: int
    push_seconds: float
    visible_seconds: float
    # The lines pushed: every Kubernetes line, or one cluster's on a shared Loki (``push_day(labels=…)``).
    selector: str = '{namespace=~".+"}'

    @property
    def lines_per_second(self) -> float:
        return self.lines / self.push_seconds if self.push_seconds > 0 else float("inf")

    @property
    def window(self) -> tuple[datetime, datetime]:
        """``(start, end]`` holding exactly the day's entries: 1 µs before the first, the last (to the µs above)."""
        return _from_unix_ns(self.first_ns) - timedelta(microseconds=1), _from_unix_ns(self.last_ns + 999)


@dataclass
class LokiServer:
    """A Loki process on two free 127.0.0.1 ports with a temporary data directory; a context manager.

    ``extra_args`` are passed after the config (``-querier.max-concurrent=1``); flags override the config file.
    ``config_overrides`` is merged into ``testbed/loki-local.yaml`` (nested mappings merge, other values replace),
    e.g. ``{"querier": {"query_ingesters_within": "3h"}}``. Loki's output goes to ``log_path`` (outside the data
    directory); a start error quotes its tail and names it. ``stop()`` keeps the log when Loki failed to start, exited
    on its own, or ``keep_log`` is set, and removes it after a clean run so test runs do not fill the temp directory.
    """

    extra_args: Sequence[str] = ()
    config_overrides: Mapping[str, Any] | None = None
    binary: str | None = None
    ready_timeout_seconds: float = READY_TIMEOUT_SECONDS
    keep_log: bool = False
    http_port: int = field(default=0, init=False)
    grpc_port: int = field(default=0, init=False)
    root: Path | None = field(default=None, init=False)
    log_path: Path | None = field(default=None, init=False)
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    pushed: list[PushedDay] = field(default_factory=list, init=False)
    _client: httpx.Client | None = field(default=None, init=False, repr=False)
    _discarded_before: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    # Life cycle -------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise LokiError("Loki is not started")
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> Self:
        """Start Loki and wait (bounded) until ``/ready`` answers 200; raise ``LokiError`` with the log's tail."""
        if self.process is not None:
            return self
        # Found before anything is made: a missing binary left an empty data directory and log behind per start.
        self.binary = self.binary or find_loki_binary()
        self.prepare()
        self._launch()
        return self

    def prepare(self) -> Self:
        """Make the temporary directory, the log file and choose the ports, without starting Loki (see ``resume``)."""
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="digest-loki-"))
            self.http_port, self.grpc_port = free_port(), free_port()
            while self.grpc_port == self.http_port:
                self.grpc_port = free_port()
            descriptor, log_name = tempfile.mkstemp(prefix="digest-loki-", suffix=".log")
            os.close(descriptor)
            self.log_path = Path(log_name)
        return self

    def halt(self, strict: bool = False) -> None:
        """Stop the process and keep the data directory (to snapshot it, or ``resume``).

        ``strict`` (before a snapshot): Loki must exit on its own after SIGTERM, having flushed every chunk to its
        store (its write-ahead log is off), within ``HALT_GRACE_SECONDS``; else ``LokiError``.
        """
        if strict and (self.process is None or self.process.poll() is not None):
            raise LokiError(f"Loki was not running when halted: its data cannot be trusted whole ({self.tail_log()})")
        self._terminate(HALT_GRACE_SECONDS if strict else STOP_GRACE_SECONDS, strict)
        if self._client is not None:
            self._client.close()
            self._client = None

    def resume(self) -> Self:
        """Start Loki on the data directory ``halt`` kept, or one restored into ``data_dir`` after ``prepare``."""
        if self.root is None:
            raise LokiError("Loki was never prepared: nothing to resume")
        self._launch()
        return self

    @property
    def data_dir(self) -> Path:
        if self.root is None:
            raise LokiError("Loki is not started")
        return self.root / "data"

    def _launch(self) -> None:
        if self.root is None or self.log_path is None:
            raise LokiError("Loki was not prepared: call start() or prepare() first")
        binary = self.binary or find_loki_binary()
        config_path = self.root / "loki.yaml"
        config_path.write_text(render_config(self.data_dir, self.http_port, self.grpc_port, self.config_overrides))
        started = time.monotonic()
        try:
            with self.log_path.open("ab") as log_file:
                self.process = subprocess.Popen(  # noqa: S603  # the binary was resolved by find_loki_binary, the arguments are ours
                    [binary, f"-config.file={config_path}", *self.extra_args],
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            self._client = httpx.Client(base_url=self.url, timeout=httpx.Timeout(120.0, connect=5.0))
            self.wait_ready()
        except BaseException:
            self.keep_log = True  # the error names the log; it must still be there to read
            self.stop()
            raise
        record("start", "loki", time.monotonic() - started)

    def wait_ready(self) -> None:
        """Poll ``/ready`` until 200, the process exits, or ``ready_timeout_seconds`` pass."""
        wait_ready("Loki", self.process, f"{self.url}/ready", self.ready_timeout_seconds, self.log_path, LokiError)

    def tail_log(self, lines: int = 5) -> str:
        """The last lines of Loki's log, joined on one line."""
        return log_tail(self.log_path, lines)

    def stop(self) -> None:
        """Stop the process by its PID (SIGTERM, then SIGKILL after 10 s); remove its data (and a clean run's log)."""
        if self._client is not None:
            self._client.close()
            self._client = None
        self._terminate()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        if self.log_path is not None and not self.keep_log:
            self.log_path.unlink(missing_ok=True)

    def _terminate(self, grace_seconds: float = STOP_GRACE_SECONDS, strict: bool = False) -> None:
        """SIGTERM, then SIGKILL after ``grace_seconds``; ``strict``: having to kill it is a ``LokiError``."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is not None:
            self.keep_log = True  # Loki exited on its own: its log says why
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_GRACE_SECONDS)
            if strict:
                raise LokiError(f"Loki did not flush and stop within {grace_seconds:g} s of SIGTERM") from None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # Queries ----------------------------------------------------------------------------------------------------

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            raise LokiError("Loki is not started")
        return self._client

    def count_lines(self, start: datetime, end: datetime, selector: str = '{namespace=~".+"}') -> int:
        """Lines of ``selector`` in ``(start, end]``, by one instant query at ``end`` (exact, no step alignment).

        ``count_over_time(…[r])`` at ``T`` counts ``(T - r, T]`` with ``T`` to the nanosecond; ``r`` is rounded up
        to whole milliseconds (LogQL's finest unit), so ``start`` may move up to 1 ms earlier.
        """
        end_ns = unix_nanos(end)
        return self._count(end_ns, end_ns - unix_nanos(start), selector)

    def _count(self, end_ns: int, span_ns: int, selector: str, timeout_seconds: float = 120.0) -> int:
        span_ms = max(1, -(-span_ns // 1_000_000))
        response = self.client.get(
            "/loki/api/v1/query",
            params={"query": f"sum(count_over_time({selector}[{span_ms}ms]))", "time": str(end_ns)},
            # A count over millions of lines takes Loki minutes on 2 cores: the poll's own deadline bounds it.
            timeout=timeout_seconds,
        )
        if response.status_code != 200:
            raise LokiError(f"Loki count query failed: HTTP {response.status_code} {response.text.strip()[:300]}")
        result = response.json().get("data", {}).get("result", [])
        return int(float(result[0]["value"][1])) if result else 0

    def wait_for_lines(
        self,
        start: datetime,
        end: datetime,
        expected: int,
        timeout_seconds: float = 120.0,
        selector: str = '{namespace=~".+"}',
    ) -> None:
        """Poll (bounded) until Loki counts exactly ``expected`` lines of ``selector`` in ``(start, end]``."""
        end_ns = unix_nanos(end)
        self._wait(end_ns, end_ns - unix_nanos(start), expected, timeout_seconds, selector)

    def _wait(self, end_ns: int, span_ns: int, expected: int, timeout_seconds: float, selector: str) -> None:
        deadline = time.monotonic() + timeout_seconds
        where = f"{selector} in the {span_ns / 1e9:g} s up to {rfc3339_nanos(end_ns)}"
        while True:
            seen = self._count(end_ns, span_ns, selector, max(120.0, deadline - time.monotonic()))
            if seen == expected:
                return
            if seen > expected:
                raise LokiError(f"Loki counts {seen} lines of {where}, more than the {expected} expected")
            # Loki may answer 204 to a push and still drop entries (e.g. "too_far_behind" after an older day was
            # pushed after a newer one): those lines will never show, so say why now instead of at the deadline.
            dropped = {
                reason: count - self._discarded_before.get(reason, 0)
                for reason, count in self.discarded_lines().items()
                if count > self._discarded_before.get(reason, 0)
            }
            if dropped:
                reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(dropped.items()))
                raise LokiError(f"Loki shows {seen} of {expected} lines of {where}: it discarded lines ({reasons})")
            if time.monotonic() >= deadline:
                raise LokiError(f"Loki shows {seen} of {expected} lines of {where} after {timeout_seconds:g} s")
            time.sleep(0.2)

    def discarded_lines(self) -> dict[str, int]:
        """Lines Loki has discarded since it started, by reason (``loki_discarded_samples_total``)."""
        response = self.client.get("/metrics")
        if response.status_code != 200:
            return {}
        totals: dict[str, int] = {}
        for line in response.text.splitlines():
            match = _DISCARDED.match(line)
            if match:
                totals[match["reason"]] = totals.get(match["reason"], 0) + int(float(match["value"]))
        return totals

    # Loading ----------------------------------------------------------------------------------------------------

    def push_days(self, days: Iterable[CorpusDay], timeout_seconds: float = 120.0) -> list[PushedDay]:
        """Push several corpus days oldest first, whatever order they come in (see ``push_day``)."""
        return [self.push_day(day, timeout_seconds) for day in sorted(days, key=lambda day: day.date)]

    def push_day(
        self, day: CorpusDay, timeout_seconds: float = 120.0, labels: Mapping[str, str] | None = None
    ) -> PushedDay:
        """Push one corpus day's log records and wait (bounded) until Loki counts exactly that many lines.

        Days must be pushed in chronological order: Loki refuses entries more than 1 h behind the newest entry of
        the same stream, and pods keep their names from one day to the next. The count covers the day's own
        entries only (from its first to its last), so it is exact even beside an adjacent day already loaded.
        ``labels`` are added to every stream (``{"cluster": "prod"}``: one cluster of a shared Loki), and the count
        is of those streams only.
        """
        started = time.monotonic()
        extra = dict(labels or {})
        summary = self.push_records(day.log_chunks(), labels=extra)
        pushed_at = time.monotonic()
        expected = day.log_line_count()
        if summary.lines != expected:
            raise LokiError(f"{day.date}: converted {summary.lines} records, the corpus says {expected}")
        if summary.first_ns is None or summary.last_ns is None:
            raise LokiError(f"{day.date}: no log records to push")
        result = PushedDay(
            date=day.date.isoformat(),
            lines=summary.lines,
            lines_by_namespace=dict(summary.lines_by_namespace),
            first_ns=summary.first_ns,
            last_ns=summary.last_ns,
            body_bytes=summary.body_bytes,
            push_seconds=pushed_at - started,
            visible_seconds=0.0,
            selector="{"
            + ", ".join(['namespace=~".+"', *(f"{name}={json.dumps(value)}" for name, value in extra.items())])
            + "}",
        )
        self.wait_for_day(result, timeout_seconds)
        result = replace(result, visible_seconds=time.monotonic() - pushed_at)
        self.pushed.append(result)
        return result

    def wait_for_day(self, pushed: PushedDay, timeout_seconds: float = 120.0) -> None:
        """Poll (bounded) until Loki counts exactly the lines ``push_day`` pushed for that day."""
        span_ns = (pushed.last_ns - pushed.first_ns) // 1_000_000 * 1_000_000 + 1_000_000
        self._wait(pushed.last_ns, span_ns, pushed.lines, timeout_seconds, pushed.selector)

    def push_records(
        self,
        chunks: Iterable[bytes],
        concurrency: int = PUSH_CONCURRENCY,
        compress: bool = PUSH_GZIP,
        labels: Mapping[str, str] | None = None,
    ) -> PushSummary:
        """Convert newline-delimited Vector records to Loki streams and push them in batches; no visibility wait."""
        summary = PushSummary()
        self._discarded_before = self.discarded_lines()
        pusher = _Pusher(self.client, concurrency, compress)
        extra = b"".join(
            b",%b:%b" % (json.dumps(k).encode(), json.dumps(v).encode()) for k, v in (labels or {}).items()
        )
        try:
            for chunk in chunks:
                pusher.submit(_convert_chunk(chunk, summary, extra))
        finally:
            pusher.close()
        summary.send_seconds = pusher.send_seconds
        return summary


@dataclass
class PushSummary:
    """Counts of what was converted and pushed."""

    lines: int = 0
    lines_by_namespace: dict[str, int] = field(default_factory=dict)
    first_ns: int | None = None
    last_ns: int | None = None
    body_bytes: int = 0
    send_seconds: float = 0.0

    @property
    def first(self) -> datetime | None:
        """The earliest entry's time (to the microsecond)."""
        return None if self.first_ns is None else _from_unix_ns(self.first_ns)

    @property
    def last(self) -> datetime | None:
        """The latest entry's time (to the microsecond)."""
        return None if self.last_ns is None else _from_unix_ns(self.last_ns)


class _Pusher:
    """Sends push bodies from worker threads, at most ``concurrency`` at a time, while the caller converts more.

    Loki refuses an entry more than 1 h behind its stream's newest entry, and two bodies in flight may be applied in
    either order. A body therefore waits for every earlier body in flight that shares a stream with it unless the
    two together span less than 30 min; a quiet stream's chunk can span hours, a busy one's a minute.
    """

    def __init__(self, client: httpx.Client, concurrency: int, compress: bool) -> None:
        self.client = client
        self.compress = compress
        self.send_seconds = 0.0
        self.concurrency = max(1, concurrency)
        self.executor = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="loki-push")
        # (future, streams, first entry ns) of every body not yet known to be sent.
        self.in_flight: list[tuple[Future[None], frozenset[bytes], int]] = []
        self.lock = threading.Lock()

    def submit(self, batch: _Batch) -> None:
        if not batch.streams:
            return
        for future, _, _ in self.in_flight:
            if future.done():
                future.result()  # a refused push stops the load here, not at the end
        self.in_flight = [item for item in self.in_flight if not item[0].done()]
        streams = frozenset(batch.keys)
        waits = [
            future
            for future, keys, first_ns in self.in_flight
            if batch.last_ns - first_ns >= _OVERLAP_LIMIT_NS and not keys.isdisjoint(streams)
        ]
        batch.summary.body_bytes += len(batch.body)
        self.in_flight.append((self.executor.submit(self._send, batch.body, waits), streams, batch.first_ns))
        # Bound the memory held by queued bodies.
        while len(self.in_flight) > 2 * self.concurrency:
            self.in_flight.pop(0)[0].result()

    def _send(self, body: bytes, after: Sequence[Future[None]]) -> None:
        for earlier in after:
            earlier.result()
        headers = {"Content-Type": "application/json"}
        if self.compress:
            # zlib releases the GIL, so compressing here overlaps with the next chunk's conversion.
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        started = time.monotonic()
        delay = 0.2
        for _attempt in range(8):
            response = self.client.post("/loki/api/v1/push", content=body, headers=headers)
            if response.status_code in (200, 204):
                with self.lock:
                    self.send_seconds += time.monotonic() - started
                return
            # 429 (rate limited) and 5xx are retryable; a 400 names entries Loki refused, which a retry cannot fix.
            if response.status_code != 429 and response.status_code < 500:
                raise LokiError(f"Loki refused a push: HTTP {response.status_code} {response.text.strip()[:300]}")
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        raise LokiError(f"Loki kept refusing a push: HTTP {response.status_code} {response.text.strip()[:300]}")

    def close(self) -> None:
        try:
            for future, _, _ in self.in_flight:
                future.result()
        finally:
            self.executor.shutdown(wait=True, cancel_futures=True)


@dataclass
class _Batch:
    streams: int
    keys: list[bytes]
    body: bytes
    summary: PushSummary
    first_ns: int = 0
    last_ns: int = 0


# (container, pod, namespace, node, stream) as JSON-escaped bytes; entries (unix ns, message) or (unix ns, message,
# level), the message and the level still JSON-escaped.
_StreamKey = tuple[bytes, bytes, bytes, bytes, bytes]
_Entry = tuple[int, bytes] | tuple[int, bytes, bytes]
_LABELS = b'{"namespace":"%b","pod":"%b","container":"%b","node_name":"%b","stream":"%b"}'
_PLAIN = b'["%d","%b"]'
_WITH_LEVEL = b'["%d","%b",{"level":"%b"}]'
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FRACTION_SCALE = [10 ** (9 - digits) for digits in range(10)]
_MESSAGE_KEY = b'"message":"'
_SOURCE_TYPE_KEY = b'","source_type":"'
_TIMESTAMP_KEY = b'"timestamp":"'


class _UnparsedError(ValueError):
    """A record the fast path does not recognise; it is decoded with ``json`` instead."""


class _FastParser:
    """Splits a Vector record without decoding it, so a corpus day's millions of lines load in seconds.

    A record is ``<head>"message":"<message>","source_type":…,"stream":"…","timestamp":"<time>"}``. Every record of
    one container shares its head (file, kubernetes fields, level) and its tail up to the timestamp, so those are
    decoded with ``json`` once each and cached; the message is copied into the push body still JSON-escaped. The
    keys can be found with plain byte searches: inside a JSON string every ``"`` is escaped, so ``"message":"``
    only occurs as the key. Anything unexpected raises ``_UnparsedError`` and the line goes through ``json``.
    """

    def __init__(self) -> None:
        self.heads: dict[bytes, tuple[bytes, bytes, bytes, bytes, bytes]] = {}
        self.tails: dict[bytes, bytes] = {}

    def group(self, chunk: bytes) -> dict[_StreamKey, list[_Entry]]:
        """The chunk's records, grouped by stream (in chunk order)."""
        by_stream: dict[_StreamKey, list[_Entry]] = {}
        # (head, tail up to the minute) → (the stream's entries, level, the minute in ns): one look-up per line.
        slots: dict[tuple[bytes, bytes], tuple[list[_Entry], bytes, int]] = {}
        for line in chunk.split(b"\n"):
            if not line:
                continue
            message_at = line.find(_MESSAGE_KEY) + 11
            source_at = line.rfind(_SOURCE_TYPE_KEY)
            # The timestamp's seconds: ":SS.ffffffZ\"}" (13 bytes) after "…T HH:MM".
            seconds_at = line.rfind(_TIMESTAMP_KEY) + 29
            rest = line[seconds_at:]
            slot_key = (line[:message_at], line[source_at:seconds_at])
            slot = slots.get(slot_key)
            if slot is None:
                try:
                    slot = slots[slot_key] = self._slot(slot_key, by_stream, 10 < message_at <= source_at)
                except _UnparsedError:
                    slot = None
            if slot is None or len(rest) != 13 or rest[10:] != b'Z"}' or rest[3] != 46:
                key, entry = _parse_json(line)
                by_stream.setdefault(key, []).append(entry)
                continue
            entries, level, minute_ns = slot
            try:
                nanoseconds = minute_ns + int(rest[1:3]) * 1_000_000_000 + int(rest[4:10]) * 1_000
            except ValueError:
                key, entry = _parse_json(line)
                by_stream.setdefault(key, []).append(entry)
                continue
            message = line[message_at:source_at]
            entries.append((nanoseconds, message, level) if level else (nanoseconds, message))
        return by_stream

    def _slot(
        self, slot_key: tuple[bytes, bytes], by_stream: dict[_StreamKey, list[_Entry]], found: bool
    ) -> tuple[list[_Entry], bytes, int]:
        if not found:
            raise _UnparsedError
        head, tail = slot_key
        parsed_head = self.heads.get(head)
        if parsed_head is None:
            parsed_head = self.heads[head] = self._parse_head(head)
        container, pod, namespace, node, level = parsed_head
        # The tail ends with the timestamp's minute, "2026-07-20T08:50" (16 bytes).
        stream = self.tails.get(tail[:-16])
        if stream is None:
            stream = self.tails[tail[:-16]] = self._parse_tail(tail[:-16])
        minute_ns = self._minute(tail[-16:]) * 1_000_000_000
        return by_stream.setdefault((container, pod, namespace, node, stream), []), level, minute_ns

    @staticmethod
    def _parse_head(head: bytes) -> tuple[bytes, bytes, bytes, bytes, bytes]:
        try:
            record = json.loads(head[: -len(_MESSAGE_KEY)] + b'"message":""}')
        except ValueError as error:
            raise _UnparsedError from error
        kubernetes = record.get("kubernetes")
        if not isinstance(kubernetes, dict):
            raise _UnparsedError
        level = record.get("level")
        return (
            _escaped(kubernetes.get("container_name")),
            _escaped(kubernetes.get("pod_name")),
            _escaped(kubernetes.get("pod_namespace")),
            _escaped(kubernetes.get("pod_node_name")),
            _escaped(level) if level else b"",
        )

    @staticmethod
    def _parse_tail(tail: bytes) -> bytes:
        try:
            record = json.loads(b'{"' + tail[3:] + b'"}')
        except ValueError as error:
            raise _UnparsedError from error
        if set(record) - {"source_type", "stream", "timestamp"}:
            raise _UnparsedError
        return _escaped(record.get("stream"))

    @staticmethod
    def _minute(prefix: bytes) -> int:
        try:
            moment = datetime.fromisoformat(prefix.decode() + ":00+00:00")
        except ValueError as error:
            raise _UnparsedError from error
        return (moment - _EPOCH).days * 86_400 + (moment - _EPOCH).seconds


def _escaped(value: object) -> bytes:
    """``value`` as the inside of a JSON string (``""`` for none)."""
    return json.dumps("" if value is None else str(value))[1:-1].encode()


def _parse_json(line: bytes) -> tuple[_StreamKey, _Entry]:
    """The general path: any record shape Vector may write, decoded with ``json``."""
    record = json.loads(line)
    kubernetes = record.get("kubernetes") or {}
    key = (
        _escaped(kubernetes.get("container_name")),
        _escaped(kubernetes.get("pod_name")),
        _escaped(kubernetes.get("pod_namespace")),
        _escaped(kubernetes.get("pod_node_name")),
        _escaped(record.get("stream")),
    )
    level = record.get("level")
    entry = (_timestamp_ns(str(record["timestamp"])), _escaped(record.get("message")))
    return key, ((*entry, _escaped(level)) if level else entry)


def _convert_chunk(chunk: bytes, summary: PushSummary, extra_labels: bytes = b"") -> _Batch:
    """One chunk of Vector records → one Loki push body, entries of each stream in time order.

    ``extra_labels`` (``,"cluster":"prod"``) are appended to every stream's labels.
    """
    by_stream = _FastParser().group(chunk)
    parts: list[bytes] = []
    first_ns: int | None = None
    last_ns: int | None = None
    counts = summary.lines_by_namespace
    for key, entries in by_stream.items():
        # Tuples sort by time first (a tie falls back to the message, which keeps the order deterministic).
        entries.sort()
        container, pod, namespace, node, stream = key
        labels = _LABELS % (namespace, pod, container, node, stream)
        if extra_labels:
            labels = labels[:-1] + extra_labels + b"}"
        values = b",".join([_WITH_LEVEL % entry if len(entry) == 3 else _PLAIN % entry for entry in entries])
        parts.append(b'{"stream":%b,"values":[%b]}' % (labels, values))
        name = json.loads(b'"%b"' % namespace)
        counts[name] = counts.get(name, 0) + len(entries)
        summary.lines += len(entries)
        if first_ns is None or entries[0][0] < first_ns:
            first_ns = entries[0][0]
        if last_ns is None or entries[-1][0] > last_ns:
            last_ns = entries[-1][0]
    if first_ns is not None and last_ns is not None:
        summary.first_ns = first_ns if summary.first_ns is None else min(summary.first_ns, first_ns)
        summary.last_ns = last_ns if summary.last_ns is None else max(summary.last_ns, last_ns)
    body = b'{"streams":[%b]}' % b",".join(parts)
    keys = [b"\x00".join(key) for key in by_stream]
    return _Batch(len(parts), keys, body, summary, first_ns or 0, last_ns or 0)


def _from_unix_ns(nanoseconds: int) -> datetime:
    return _EPOCH + timedelta(microseconds=nanoseconds // 1_000)


# Config -----------------------------------------------------------------------------------------------------------


def corpus_loki_snapshot(scale: float, binary: str) -> SnapshotKey | None:
    """Where a Loki holding every corpus day at ``scale`` is kept: the test suite's, and `bench.corpus_days`'."""
    return snapshot_key("corpus-loki", [], f"scale={scale}", binary_identity(binary))


@contextmanager
def loaded_loki(
    days: Iterable[CorpusDay],
    snapshot: SnapshotKey | None,
    binary: str | None = None,
    extra_args: Sequence[str] = (),
) -> Iterator[LokiServer]:
    """A started Loki holding ``days`` (pushed as ``push_days`` pushes them), from ``snapshot`` when one is kept.

    ``extra_args``: flags for the query side only (as `LokiServer`'s); what is stored, and so the snapshot, is the same.

    A fresh load is stopped (Loki flushes every chunk to its store on a clean stop, its write-ahead log being off),
    saved, and started again; a restored one counts each day's lines exactly, as ``push_day`` waited for, before it
    is handed out. Stopped, its directory removed, on exit.
    """
    ordered = sorted(days, key=lambda day: day.date)
    what = f"{len(ordered)} days: Loki (push API)"
    server = LokiServer(binary=binary, extra_args=extra_args)
    try:
        if snapshot is None:
            server.start()
            with timed("load", what, "uncached"):
                server.push_days(ordered)
        else:
            with snapshot.claim() as kept:
                if kept.found:
                    with timed("load", what, "restored"):
                        server.prepare()
                        kept.restore("data", server.data_dir)
                        server.resume()
                        server.pushed = [PushedDay(**pushed) for pushed in kept.manifest["pushed"]]
                        for pushed in server.pushed:
                            server.wait_for_day(pushed)
                else:
                    server.start()
                    with timed("load", what, "built"):
                        server.push_days(ordered)
                        server.halt(strict=True)
                        manifest = {"pushed": [asdict(item) for item in server.pushed]}
                        with kept.saving({"data": server.data_dir}, manifest):
                            server.resume()
                            for pushed in server.pushed:
                                server.wait_for_day(pushed)
        yield server
    finally:
        server.stop()


def render_config(data_dir: Path, http_port: int, grpc_port: int, overrides: Mapping[str, Any] | None = None) -> str:
    """``testbed/loki-local.yaml`` with its ``${VAR:-default}`` references filled in and ``overrides`` merged."""
    values = {"LOKI_DATA_DIR": str(data_dir), "LOKI_HTTP_PORT": str(http_port), "LOKI_GRPC_PORT": str(grpc_port)}
    text = _ENV_REFERENCE.sub(lambda match: values.get(match.group(1), match.group(2) or ""), CONFIG_PATH.read_text())
    config = yaml.safe_load(text)
    if overrides:
        config = _merge(config, overrides)
    return yaml.safe_dump(config, sort_keys=False)


def _merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        current = merged.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[key] = _merge(current, value)
        else:
            merged[key] = value
    return merged


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)", re.IGNORECASE)


def _timestamp_ns(text: str) -> int:
    """An RFC 3339 timestamp as Unix nanoseconds, keeping all nine digits (``datetime`` stops at six)."""
    match = _RFC3339.fullmatch(text.strip())
    if match is None:
        raise LokiError(f"not an RFC 3339 timestamp: {text[:40]!r}")
    whole, fraction, zone = match.groups()
    moment = datetime.fromisoformat(whole + ("+00:00" if zone.upper() == "Z" else zone))
    return unix_nanos(moment) + int((fraction or "0").ljust(9, "0"))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m testbed.loki_server``: start Loki, load the corpus days, print the URL, stop on Ctrl-C."""
    import argparse  # only the command line needs it

    from digest.testbed.corpus import DAYS, scaled

    parser = argparse.ArgumentParser(prog="python -m testbed.loki_server", description=main.__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="volume scale of the storm days (tests use 0.05)")
    parser.add_argument("--no-wait", action="store_true", help="stop once loaded (to measure the load)")
    arguments = parser.parse_args(argv)
    days = [scaled(day, arguments.scale) for day in DAYS.values()]
    try:
        with LokiServer() as loki:
            print(f"loki: {loki.url} (PID {loki.pid}), loading {len(days)} days", flush=True)
            started = time.monotonic()
            for day in sorted(days, key=lambda day: day.date):  # oldest first, as push_days does
                pushed = loki.push_day(day)
                print(
                    f"  {pushed.date}: {pushed.lines:,} lines, pushed in {pushed.push_seconds:.1f} s"
                    f" ({pushed.lines_per_second:,.0f}/s), visible {pushed.visible_seconds:.1f} s later",
                    flush=True,
                )
            lines = sum(pushed.lines for pushed in loki.pushed)
            elapsed = time.monotonic() - started
            print(f"loaded {lines:,} lines in {elapsed:.1f} s ({lines / elapsed:,.0f}/s); RSS {_rss(loki.pid)}")
            if not arguments.no_wait:
                print("Ctrl-C stops it", flush=True)
                threading.Event().wait()
    except KeyboardInterrupt:
        pass
    except (LokiUnavailable, LokiError) as error:
        print(f"loki: {error}", flush=True)
        return 1
    return 0


def _rss(pid: int) -> str:
    """The process's resident memory, as /proc reports it (Linux)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "unknown"
    return next((line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("VmRSS:")), "?")


if __name__ == "__main__":
    raise SystemExit(main())

"""A real Prometheus on a free loopback port, backfilled with corpus days, to prove the checks' PromQL on it.

The digest speaks the Prometheus HTTP API, but its corpus lives in VictoriaMetrics, whose MetricsQL differs from
PromQL (extrapolation, look-back, the sample before a window). This server lets a test grade the same days on
Prometheus itself.

Loading: Prometheus has no import API, so the days are written as OpenMetrics text and turned into TSDB blocks
with ``promtool tsdb create-blocks-from openmetrics``, before the server starts on that data directory.

* One OpenMetrics file per two-hour block range. promtool reads its input file once per block range it covers, so
  one file per day (26.5 hours, 14 ranges) is parsed 14 times; one file per range is parsed once, and the ranges
  are backfilled side by side, one promtool per core.
* Overlapping days are merged before they are written. Each corpus day spans D-1 22:00Z..D+1 00:30Z, so
  consecutive days (07-19 and 07-20, 08-16 and 08-17) share series and timestamps. Their samples are merged per
  series and de-duplicated per timestamp (the earlier day wins; the corpus days agree on every shared sample), so
  each block range is written once and no two blocks overlap: what Prometheus holds is exactly the set of samples
  VictoriaMetrics shows, without relying on its merge of overlapping blocks.
* Days are taken in date order and written as they become complete: once a day is read, the blocks before its
  first one can gain nothing from later days, so they are written and let go. Memory holds about two days
  whatever the number of days (30 benchmark days held at once passed 16 GB and kept growing).
* Families are grouped (``# TYPE <name> unknown``: the corpus carries no types and the checks need none), label
  values escaped, a series' samples in time order, timestamps in seconds, and the file ends with ``# EOF``.

The server gets a minimal configuration (no scrape job), a retention of 100 years (the days are replayed months
after they happened) and a temporary directory; it is ready when ``/-/ready`` answers 200 (a bounded poll), and is
stopped by its PID (SIGTERM, then SIGKILL) with its directory removed.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
import time
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice, pairwise
from operator import lt
from pathlib import Path
from typing import TYPE_CHECKING, Self, TextIO

from digest.testbed.embedded import free_port, wait_ready
from digest.testbed.snapshots import SnapshotKey, binary_identity, record, snapshot_key, timed

if TYPE_CHECKING:
    from digest.testbed.corpus.model import CorpusDay

BLOCK_MS = 2 * 3600 * 1000  # promtool's block range: two hours, aligned on the epoch
_RETENTION = "100y"
_CONFIG = "# No scrape job: the data is backfilled.\nglobal:\n  evaluation_interval: 1m\n"

LabelsKey = tuple[tuple[str, str], ...]


class PrometheusServerError(RuntimeError):
    """A Prometheus binary is missing, the backfill failed, or the server did not get ready."""


def missing_binaries() -> list[str]:
    """The Prometheus binaries (``prometheus``, ``promtool``) that are not on PATH."""
    return [binary for binary in ("prometheus", "promtool") if shutil.which(binary) is None]


@dataclass
class _MergedSeries:
    """One series gathered from every day that has it: chunks of (timestamps in ms, values), in day order.

    Each chunk's timestamps are strictly increasing (``_Part.add`` makes them so), which lets a part be split at a
    block boundary by bisection.
    """

    labels: LabelsKey
    chunks: list[tuple[array[int], array[float]]] = field(default_factory=list)

    def samples(self) -> tuple[array[int], array[float]]:
        """Timestamps (ascending, unique) and their values; on a shared timestamp the earliest chunk wins."""
        if len(self.chunks) == 1:
            return self.chunks[0]
        timestamps, values = array("q"), array("d")
        for chunk_timestamps, chunk_values in self.chunks:
            timestamps.extend(chunk_timestamps)
            values.extend(chunk_values)
        if all(earlier[0][-1] < later[0][0] for earlier, later in pairwise(self.chunks)):
            return timestamps, values  # chunks that follow one another (a day's segments): joined as they are
        return _ordered(timestamps, values)

    def split(self, boundary_ms: int) -> _MergedSeries:
        """The samples before ``boundary_ms`` as a new series; this one keeps the rest."""
        head = _MergedSeries(self.labels)
        kept: list[tuple[array[int], array[float]]] = []
        for timestamps, values in self.chunks:
            cut = bisect_left(timestamps, boundary_ms)
            if cut:
                head.chunks.append((timestamps[:cut], values[:cut]))
            if cut < len(timestamps):
                kept.append((timestamps[cut:], values[cut:]))
        self.chunks = kept
        return head


@dataclass
class _Part:
    """Series merged from the days, series by series: those not yet written, or complete blocks split off them."""

    series: dict[LabelsKey, _MergedSeries] = field(default_factory=dict)

    def add(self, day: CorpusDay) -> None:
        for item in day.series():
            timestamps = _integers(item.timestamps_ms)
            if not timestamps:
                continue
            values = _floats(item.values)
            if not all(map(lt, timestamps, islice(timestamps, 1, None))):
                timestamps, values = _ordered(timestamps, values)
            key = tuple(sorted(item.labels.items()))
            self.series.setdefault(key, _MergedSeries(key)).chunks.append((timestamps, values))

    def absorb(self, other: _Part) -> None:
        """Take ``other``'s series after this part's own (this part's samples win a shared timestamp)."""
        for key, merged in other.series.items():
            self.series.setdefault(key, _MergedSeries(key)).chunks.extend(merged.chunks)

    def first_block(self) -> int:
        return min(chunk[0][0] for merged in self.series.values() for chunk in merged.chunks) // BLOCK_MS

    def split(self, boundary_block: int) -> _Part:
        """The blocks before ``boundary_block`` as a new part; this one keeps the rest."""
        head = _Part()
        for key, merged in list(self.series.items()):
            before = merged.split(boundary_block * BLOCK_MS)
            if before.chunks:
                head.series[key] = before
            if not merged.chunks:
                del self.series[key]
        return head


def _integers(moments: Sequence[int]) -> array[int]:
    # The benchmark's generator hands over arrays already; only a corpus day's lists are converted.
    if isinstance(moments, array) and moments.typecode == "q":
        return moments
    return array("q", map(int, moments))


def _floats(values: Sequence[float]) -> array[float]:
    if isinstance(values, array) and values.typecode == "d":
        return values
    return array("d", map(float, values))


def _ordered(timestamps: array[int], values: array[float]) -> tuple[array[int], array[float]]:
    """A chunk sorted by time, one sample per timestamp (the first one given wins)."""
    merged: dict[int, float] = {}
    for moment, value in zip(timestamps, values, strict=True):
        merged.setdefault(moment, value)
    ordered = sorted(merged)
    return array("q", ordered), array("d", (merged[moment] for moment in ordered))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _seconds(moment_ms: int) -> str:
    whole, milliseconds = divmod(moment_ms, 1000)
    return f"{whole}.{milliseconds:03d}" if milliseconds else str(whole)


def _sample_prefix(labels: LabelsKey) -> tuple[str, str]:
    """The metric name and ``name{labels} `` of a series."""
    name = dict(labels)["__name__"]
    inside = ",".join(f'{key}="{_escape(value)}"' for key, value in labels if key != "__name__")
    return name, (f"{name}{{{inside}}} " if inside else f"{name} ")


def write_block_files(series: Iterable[_MergedSeries], directory: Path) -> list[Path]:
    """One OpenMetrics file per two-hour block range the series cover; returns their paths."""
    prepared = []
    for item in series:
        timestamps, values = item.samples()
        name, prefix = _sample_prefix(item.labels)
        prepared.append((name, item.labels, prefix, timestamps, values))
    # Families grouped, series in a stable order within them.
    prepared.sort(key=lambda entry: (entry[0], entry[1]))
    blocks = sorted({moment // BLOCK_MS for _, _, _, timestamps, _ in prepared for moment in timestamps})
    paths: list[Path] = []
    for block in blocks:
        start, end = block * BLOCK_MS, (block + 1) * BLOCK_MS
        path = directory / f"block-{block}.om"
        with path.open("w", encoding="utf-8") as out:
            _write_block(out, prepared, start, end)
        paths.append(path)
    return paths


def _write_block(
    out: TextIO,
    prepared: list[tuple[str, LabelsKey, str, array[int], array[float]]],
    start: int,
    end: int,
) -> None:
    family = None
    for name, _, prefix, timestamps, values in prepared:
        low, high = bisect_left(timestamps, start), bisect_left(timestamps, end)
        if low == high:
            continue
        if name != family:
            out.write(f"# TYPE {name} unknown\n")
            family = name
        out.write(
            "".join(f"{prefix}{_number(values[index])} {_seconds(timestamps[index])}\n" for index in range(low, high))
        )
    out.write("# EOF\n")


class PrometheusServer:
    """A Prometheus process holding the given corpus days, on a free 127.0.0.1 port, in a temporary directory.

    With ``snapshot``, the backfilled blocks are taken from it when it holds them, and saved to it when it does not
    (``testbed.snapshots``): the blocks are a pure function of the days, promtool and this module.
    """

    def __init__(
        self,
        days: Iterable[CorpusDay],
        ready_timeout_seconds: float = 120.0,
        snapshot: SnapshotKey | None = None,
        extra_config: str = "",
    ) -> None:
        self._days = sorted(days, key=lambda day: day.date)
        self._ready_timeout = ready_timeout_seconds
        self._snapshot = snapshot
        # YAML appended to the configuration's top level (a `remote_read` section, say).
        self._extra_config = extra_config
        self.port = free_port()
        self.root: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        missing = missing_binaries()
        if missing:
            raise PrometheusServerError(f"{', '.join(missing)} not on PATH: run scripts/install-backends first")
        self.root = Path(tempfile.mkdtemp(prefix="digest-prometheus-"))
        try:
            self._fill(self.root / "data")
            started = time.monotonic()
            self._launch(self.root)
            self._wait_ready()
            record("start", "prometheus", time.monotonic() - started)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the process by its PID (SIGTERM, then SIGKILL after 10 s) and remove the directory."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # Backfill ------------------------------------------------------------------------------------------------------

    def _fill(self, data_dir: Path) -> None:
        what = f"{len(self._days)} days: Prometheus (promtool backfill)"
        if self._snapshot is None:
            with timed("load", what, "uncached"):
                self._backfill(data_dir)
            return
        with self._snapshot.claim() as kept:
            if kept.found:
                with timed("load", what, "restored"):
                    kept.restore("data", data_dir)
                return
            with timed("load", what, "built"):
                self._backfill(data_dir)
                with kept.saving({"data": data_dir}, {"days": [day.date.isoformat() for day in self._days]}):
                    pass  # promtool's blocks are whole once it exits; Prometheus has not opened them yet

    def _backfill(self, data_dir: Path) -> None:
        assert self.root is not None  # noqa: S101  # start() sets it before calling
        staging = self.root / "staging"
        staging.mkdir()
        data_dir.mkdir()
        jobs: list[Future[None]] = []
        with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            for number, part in enumerate(self._parts()):
                part_dir = staging / f"part-{number}"
                part_dir.mkdir()
                for path in write_block_files(part.series.values(), part_dir):
                    jobs.append(pool.submit(_promtool, path, data_dir))
            for job in jobs:
                job.result()
        shutil.rmtree(staging, ignore_errors=True)

    def _parts(self) -> Iterator[_Part]:
        """The days' samples in parts of complete blocks, in time order, each written once and then let go."""
        pending = _Part()
        written_below: int | None = None  # every block below this one has been handed out
        for day in self._days:
            incoming = _Part()
            incoming.add(day)
            if not incoming.series:
                continue
            boundary = incoming.first_block()
            if written_below is not None and boundary < written_below:
                raise PrometheusServerError(f"corpus day {day.date} overlaps a day already written out of order")
            # Days come in date order and none starts before the one read last: the blocks below it are complete.
            complete = pending.split(boundary)
            if complete.series:
                yield complete
            written_below = boundary
            pending.absorb(incoming)
        if pending.series:
            yield pending

    # Process -------------------------------------------------------------------------------------------------------

    def _launch(self, root: Path) -> None:
        config = root / "prometheus.yml"
        config.write_text(_CONFIG + self._extra_config)
        binary = shutil.which("prometheus")
        if binary is None:
            raise PrometheusServerError("prometheus not on PATH: run scripts/install-backends first")
        with (root / "prometheus.log").open("wb") as log_file:
            self.process = subprocess.Popen(  # noqa: S603  # the binary was resolved on PATH, arguments are ours
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={root / 'data'}",
                    f"--storage.tsdb.retention.time={_RETENTION}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def _wait_ready(self) -> None:
        log = self.root / "prometheus.log" if self.root is not None else None
        wait_ready("prometheus", self.process, f"{self.url}/-/ready", self._ready_timeout, log, PrometheusServerError)


def _promtool(path: Path, data_dir: Path) -> None:
    """Backfill one OpenMetrics file into ``data_dir`` (its blocks are moved there once complete), then drop it."""
    binary = shutil.which("promtool")
    if binary is None:
        raise PrometheusServerError("promtool not on PATH: run scripts/install-backends first")
    output = path.with_suffix(".blocks")
    result = subprocess.run(  # noqa: S603  # the binary was resolved on PATH, arguments are ours
        [binary, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(path), str(output)],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if result.returncode != 0:
        reason = " ".join(result.stderr.decode(errors="replace").split())[:300]
        raise PrometheusServerError(f"promtool could not backfill {path.name}: {reason}")
    for block in output.iterdir():
        block.rename(data_dir / block.name)
    path.unlink()


def corpus_prometheus_snapshot() -> SnapshotKey | None:
    """Where the corpus' Prometheus blocks are kept: one key for every Prometheus that holds the whole corpus."""
    return snapshot_key("corpus-prometheus", [], binary_identity("promtool"), binary_identity("prometheus"))

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
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Self, TextIO

from testbed.embedded import free_port, wait_ready

if TYPE_CHECKING:
    from testbed.corpus.model import CorpusDay

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
    """One series gathered from every day that has it: chunks of (timestamps in ms, values), in day order."""

    labels: LabelsKey
    chunks: list[tuple[array[int], array[float]]] = field(default_factory=list)

    def samples(self) -> tuple[array[int], array[float]]:
        """Timestamps (ascending, unique) and their values; on a shared timestamp the earliest chunk wins."""
        if len(self.chunks) == 1:
            timestamps, values = self.chunks[0]
            if all(earlier < later for earlier, later in pairwise(timestamps)):
                return timestamps, values
        merged: dict[int, float] = {}
        for timestamps, values in self.chunks:
            for moment, value in zip(timestamps, values, strict=True):
                merged.setdefault(moment, value)
        ordered = sorted(merged)
        return array("q", ordered), array("d", (merged[moment] for moment in ordered))


@dataclass
class _Cluster:
    """Days whose block ranges touch, merged series by series before they are written."""

    series: dict[LabelsKey, _MergedSeries] = field(default_factory=dict)
    first_block: int = 0
    last_block: int = -1

    def add(self, day: CorpusDay) -> None:
        for item in day.series():
            key = tuple(sorted(item.labels.items()))
            timestamps = array("q", (int(moment) for moment in item.timestamps_ms))
            if not timestamps:
                continue
            values = array("d", (float(value) for value in item.values))
            merged = self.series.setdefault(key, _MergedSeries(key))
            merged.chunks.append((timestamps, values))
            first, last = min(timestamps) // BLOCK_MS, max(timestamps) // BLOCK_MS
            if self.last_block < self.first_block:
                self.first_block, self.last_block = first, last
            else:
                self.first_block, self.last_block = min(self.first_block, first), max(self.last_block, last)

    def touches(self, first_block: int, last_block: int) -> bool:
        return bool(self.series) and first_block <= self.last_block and last_block >= self.first_block


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
    """A Prometheus process holding the given corpus days, on a free 127.0.0.1 port, in a temporary directory."""

    def __init__(self, days: Iterable[CorpusDay], ready_timeout_seconds: float = 120.0) -> None:
        self._days = sorted(days, key=lambda day: day.date)
        self._ready_timeout = ready_timeout_seconds
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
            self._backfill(self.root / "data")
            self._launch(self.root)
            self._wait_ready()
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

    def _backfill(self, data_dir: Path) -> None:
        assert self.root is not None  # noqa: S101  # start() sets it before calling
        staging = self.root / "staging"
        staging.mkdir()
        data_dir.mkdir()
        jobs: list[Future[None]] = []
        with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            for number, cluster in enumerate(self._clusters()):
                cluster_dir = staging / f"cluster-{number}"
                cluster_dir.mkdir()
                for path in write_block_files(cluster.series.values(), cluster_dir):
                    jobs.append(pool.submit(_promtool, path, data_dir))
            for job in jobs:
                job.result()
        shutil.rmtree(staging, ignore_errors=True)

    def _clusters(self) -> Iterator[_Cluster]:
        """The days merged into clusters whose block ranges do not touch one another (days in date order)."""
        current = _Cluster()
        written: list[tuple[int, int]] = []
        for day in self._days:
            incoming = _Cluster()
            incoming.add(day)
            if not incoming.series:
                continue
            if current.touches(incoming.first_block, incoming.last_block):
                for key, merged in incoming.series.items():
                    current.series.setdefault(key, _MergedSeries(key)).chunks.extend(merged.chunks)
                current.first_block = min(current.first_block, incoming.first_block)
                current.last_block = max(current.last_block, incoming.last_block)
                continue
            if current.series:
                written.append((current.first_block, current.last_block))
                yield current
            if any(first <= incoming.last_block and last >= incoming.first_block for first, last in written):
                raise PrometheusServerError(f"corpus day {day.date} overlaps a day already written out of order")
            current = incoming
        if current.series:
            yield current

    # Process -------------------------------------------------------------------------------------------------------

    def _launch(self, root: Path) -> None:
        config = root / "prometheus.yml"
        config.write_text(_CONFIG)
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

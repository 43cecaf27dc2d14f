"""The backend pairs the benchmark compares, and the servers each dataset is loaded into (once per server).

The digest reads metrics from VictoriaMetrics or Prometheus and logs from VictoriaLogs or Loki
(``DIGEST_LOKI_URL`` instead of ``DIGEST_VL_URL``): four pairs. A dataset (one generated day, or the replay's days)
is loaded once into each server that a measured pair uses, and the pairs that share a server share its load:
VictoriaMetrics and VictoriaLogs always (``bench.generate.load``: the naive baseline and the floors' dependency
look-ups read them), Prometheus and Loki only when a selected pair needs them.

* **Prometheus** has no import API: the generator's ``/api/v1/import`` lines are read back a day-long segment at a
  time (``GeneratedSegment``) and backfilled with promtool by ``testbed.prometheus_server.PrometheusServer``, which
  writes each block range once it is complete, before the server starts on that data. Memory holds about two
  segments, not the days (30 days of the replay's cluster read back whole passed 16 GB).
* **Loki** gets the generator's Vector records converted the way Promtail or Alloy ship them
  (``testbed.loki_server.LokiServer.push_records``), then a bounded poll until it counts exactly the records
  generated. Its ``max_query_series`` (default 500) is raised for the benchmark: the digest counts lines per pod, and
  the generated cluster has 2,002 pods, which the default refuses (a Loki operator of such a cluster must raise it).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.generate import Cluster, Volumes, day_facts, log_chunks, segments, series_lines, volume_on
from digest.backends.loki import LogqlWriter
from digest.backends.victorialogs import LogsqlWriter
from digest.testbed.corpus.model import Series

if TYPE_CHECKING:
    from bench.floor import LogWriter
    from digest.testbed.loki_server import LokiServer
    from digest.testbed.prometheus_server import PrometheusServer

VICTORIAMETRICS = "victoriametrics"
PROMETHEUS = "prometheus"
VICTORIALOGS = "victorialogs"
LOKI = "loki"
METRICS_BACKENDS = (VICTORIAMETRICS, PROMETHEUS)
LOGS_BACKENDS = (VICTORIALOGS, LOKI)
NAMES = {VICTORIAMETRICS: "VictoriaMetrics", PROMETHEUS: "Prometheus", VICTORIALOGS: "VictoriaLogs", LOKI: "Loki"}
SHORT = {VICTORIAMETRICS: "VM", PROMETHEUS: "Prom", VICTORIALOGS: "VL", LOKI: "Loki"}
# Loki's max_query_series for the benchmark: above the generated cluster's 2,002 pods and 200 nodes.
LOKI_MAX_QUERY_SERIES = 10_000


@dataclass(frozen=True)
class Pair:
    """One metrics backend and one log backend, as the digest is configured with them."""

    metrics: str
    logs: str

    @property
    def key(self) -> str:
        """``victoriametrics+victorialogs``: how ``--backends`` names it."""
        return f"{self.metrics}+{self.logs}"

    @property
    def label(self) -> str:
        """``VictoriaMetrics + VictoriaLogs``."""
        return f"{NAMES[self.metrics]} + {NAMES[self.logs]}"

    @property
    def short(self) -> str:
        """``VM + VL``."""
        return f"{SHORT[self.metrics]} + {SHORT[self.logs]}"

    def writer(self) -> LogWriter:
        """The writer of the log backend's requests (the floor's queries for this pair)."""
        return LogqlWriter() if self.logs == LOKI else LogsqlWriter()


ALL_PAIRS = tuple(Pair(metrics, logs) for metrics in METRICS_BACKENDS for logs in LOGS_BACKENDS)
REFERENCE = ALL_PAIRS[0]  # VictoriaMetrics + VictoriaLogs: the pair of the detailed tables


def parse_pairs(text: str) -> list[Pair]:
    """``--backends``: a comma list of pair keys, or ``all``; `ValueError` naming the unknown pair."""
    by_key = {pair.key: pair for pair in ALL_PAIRS}
    chosen: list[Pair] = []
    for item in (part.strip() for part in text.split(",")):
        if item == "all":
            chosen.extend(ALL_PAIRS)
        elif item in by_key:
            chosen.append(by_key[item])
        else:
            known = ", ".join(by_key)
            raise ValueError(f"unknown backend pair {item!r}: choose from {known}, or all")
    # In the canonical order, each once.
    return [pair for pair in ALL_PAIRS if pair in chosen]


def digest_backend_env(pair: Pair, metrics_url: str, logs_url: str) -> dict[str, str]:
    """The DIGEST_* variables that point the digest at this pair's servers."""
    env = {"DIGEST_VM_URL": metrics_url}
    env["DIGEST_LOKI_URL" if pair.logs == LOKI else "DIGEST_VL_URL"] = logs_url
    return env


# --------------------------------------------------------------------------------------------------- Prometheus


@dataclass
class GeneratedLines:
    """The generator's import lines for the days, read once, in order, and handed out segment by segment."""

    lines: Iterator[bytes]
    samples: int = 0
    _held: dict[str, Any] | None = None
    _read_until_ms: int = 0

    def take(self, start_ms: int, end_ms: int) -> Iterator[Series]:
        """The series segments starting in [start_ms, end_ms): asked for in time order, each range once."""
        if start_ms < self._read_until_ms:
            raise RuntimeError("the generated segments are read once, in time order")
        self._read_until_ms = end_ms
        while True:
            record = self._held if self._held is not None else self._next()
            self._held = None
            if record is None:
                return
            if record["timestamps"][0] >= end_ms:
                self._held = record
                return
            self.samples += len(record["timestamps"])
            yield Series(
                labels=record["metric"],
                timestamps_ms=array("q", record["timestamps"]),
                values=array("d", record["values"]),
            )

    def _next(self) -> dict[str, Any] | None:
        line = next(self.lines, None)
        return None if line is None else json.loads(line)


@dataclass
class GeneratedSegment:
    """One day-long segment of the generated series, read as ``PrometheusServer`` reads a corpus day.

    It has a ``date`` and ``series()``; the server takes the days in date order, so the generator is read once.
    """

    source: GeneratedLines
    start_s: int
    end_s: int

    @property
    def date(self) -> dt.date:
        return dt.datetime.fromtimestamp(self.start_s, dt.UTC).date()

    def series(self) -> Iterator[Series]:
        return self.source.take(self.start_s * 1_000, self.end_s * 1_000)


@dataclass(frozen=True)
class ServerLoad:
    """How one Prometheus or Loki was loaded: what went in, how long it took."""

    backend: str
    days: int
    items: int  # samples (Prometheus) or records (Loki)
    seconds: float


def start_prometheus(cluster: Cluster, days: Sequence[dt.date]) -> tuple[PrometheusServer, ServerLoad]:
    """A Prometheus backfilled with the generated series of ``days``, started and ready."""
    from digest.testbed.prometheus_server import PrometheusServer  # only when a pair uses Prometheus

    started = time.monotonic()
    source = GeneratedLines(series_lines(cluster, days))
    parts = [GeneratedSegment(source, start, end) for start, end in segments(days)]
    # A segment has what the server reads of a corpus day (date, series()), not the rest of CorpusDay.
    server = PrometheusServer(parts, ready_timeout_seconds=600.0)  # type: ignore[arg-type]
    server.start()
    return server, ServerLoad(PROMETHEUS, len(days), source.samples, time.monotonic() - started)


def start_loki(cluster: Cluster, days: Sequence[dt.date], volume: Volumes) -> tuple[LokiServer, ServerLoad]:
    """A Loki holding the generated records of ``days`` (oldest first), every one of them visible."""
    from digest.testbed.loki_server import LokiServer  # only when a pair uses Loki

    days = sorted(days)
    server = LokiServer(config_overrides={"limits_config": {"max_query_series": LOKI_MAX_QUERY_SERIES}})
    server.start()
    try:
        started = time.monotonic()

        def every_day() -> Iterator[bytes]:
            for day in days:
                yield from log_chunks(cluster, day, volume_on(volume, day))

        summary = server.push_records(every_day())
        expected = sum(day_facts(cluster, day, volume_on(volume, day)).log_lines for day in days)
        first = dt.datetime.combine(days[0], dt.time.min, tzinfo=dt.UTC)
        last = dt.datetime.combine(days[-1] + dt.timedelta(days=1), dt.time.min, tzinfo=dt.UTC)
        server.wait_for_lines(first, last, expected, timeout_seconds=900)
        if summary.lines != expected:
            raise RuntimeError(f"Loki: converted {summary.lines:,} records, {expected:,} were generated")
        return server, ServerLoad(LOKI, len(days), summary.lines, time.monotonic() - started)
    except BaseException:
        server.stop()
        raise


def rss_mib(pid: int) -> float:
    """Resident memory of a live process (``VmRSS``), MiB; NaN when it cannot be read."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class PairServers:
    """The URLs and PIDs of one pair's two servers."""

    pair: Pair
    metrics_url: str
    logs_url: str
    pids: list[int] = field(default_factory=list)  # metrics, logs

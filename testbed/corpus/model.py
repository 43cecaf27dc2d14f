"""The corpus interface: what a generated incident day hands to the loader and to the golden tests.

A corpus day is pure data. ``series()`` yields what the exporters would have exposed (as VictoriaMetrics
``/api/v1/import`` lines), ``log_chunks()`` streams what Vector's ``kubernetes_logs`` source would have shipped,
and ``expected`` is what the digest must say about the UTC calendar day ``date``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

STATUSES = ("OK", "WARNING", "CRITICAL", "UNKNOWN")


def _json_number(value: float) -> float | int:
    # VictoriaMetrics accepts both, but integral gauges and counters read better (and diff better) without ".0".
    if not math.isfinite(value):
        raise ValueError(f"a sample must be finite to be written as JSON, got {value!r}")
    if value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


@dataclass(frozen=True)
class Series:
    """One time series: its labels (``__name__`` included) and its samples."""

    labels: Mapping[str, str]
    timestamps_ms: Sequence[int]
    values: Sequence[float]

    def __post_init__(self) -> None:
        """Reject a series without a name or with unpaired samples."""
        if "__name__" not in self.labels:
            raise ValueError(f"series labels need __name__: {dict(self.labels)!r}")
        if len(self.timestamps_ms) != len(self.values):
            raise ValueError(
                f"{self.labels['__name__']}: {len(self.timestamps_ms)} timestamps for {len(self.values)} values"
            )

    def to_import_line(self) -> bytes:
        """Return one VictoriaMetrics ``/api/v1/import`` JSON line, newline included."""
        record = {
            "metric": dict(self.labels),
            "values": [_json_number(float(v)) for v in self.values],
            "timestamps": [int(t) for t in self.timestamps_ms],
        }
        return json.dumps(record, separators=(",", ":"), allow_nan=False).encode("utf-8") + b"\n"


@dataclass(frozen=True)
class Expected:
    """What the digest must say about the day: status, score on 10, and the numbers it must show."""

    status: str
    score: int
    facts: Mapping[str, object]

    def __post_init__(self) -> None:
        """Reject an unknown status or a score outside 0-10."""
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if not 0 <= self.score <= 10:
            raise ValueError(f"score is on 10, got {self.score}")


class CorpusDay(Protocol):
    """An incident day: the window is ``[date 00:00Z, date+1 00:00Z)``."""

    date: dt.date
    name: str
    title: str
    expected: Expected

    def series(self) -> Iterator[Series]:
        """Yield every metric series of the day (D-1 22:00Z to D+1 00:30Z, 30 s resolution)."""
        ...

    def log_chunks(self) -> Iterator[bytes]:
        """Stream newline-delimited JSON log records in chunks of about 20,000 records."""
        ...

    def log_line_count(self) -> int:
        """Return the exact number of records ``log_chunks()`` yields."""
        ...

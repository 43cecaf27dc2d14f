"""How the Prometheus testbed turns days into block files: each sample once, earliest day winning, a day at a time.

No promtool or server here: `PrometheusServer._parts` and `write_block_files` are pure. The real backfill is proven by
the parity suite (`tests/test_backend_parity.py`) and the benchmark's Prometheus pairs (`tests/test_bench.py`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from digest.testbed.corpus.model import Series
from digest.testbed.prometheus_server import BLOCK_MS, PrometheusServer, PrometheusServerError, write_block_files

HOUR_MS = 3_600_000
_EPOCH_DAY = dt.date(2026, 7, 18)


def _day_start_ms(day: dt.date) -> int:
    return int(dt.datetime.combine(day, dt.time.min, tzinfo=dt.UTC).timestamp() * 1000)


@dataclass
class _Day:
    """A corpus-like day spanning D-1 22:00Z..D+1 00:30Z every 30 minutes, its values tagged with the day."""

    date: dt.date
    reads: list[dt.date] = field(default_factory=list)
    tag: float = 0.0

    def series(self) -> Iterator[Series]:
        self.reads.append(self.date)
        start = _day_start_ms(self.date) - 2 * HOUR_MS
        stamps = list(range(start, _day_start_ms(self.date) + 24 * HOUR_MS + HOUR_MS // 2 + 1, HOUR_MS // 2))
        yield Series({"__name__": "up", "job": "node"}, stamps, [self.tag] * len(stamps))


def _days(count: int, reads: list[dt.date]) -> list[_Day]:
    return [_Day(_EPOCH_DAY + dt.timedelta(days=n), reads, tag=float(n)) for n in range(count)]


def _samples(server: PrometheusServer) -> Iterator[tuple[int, list[tuple[int, float]]]]:
    for number, part in enumerate(server._parts()):  # the pure half of the backfill is under test
        for merged in part.series.values():
            timestamps, values = merged.samples()
            yield number, list(zip(timestamps, values, strict=True))


def test_overlapping_days_become_parts_of_whole_blocks_each_sample_once_earliest_day_winning() -> None:
    """Three overlapping days give every timestamp once, the earlier day's value on shared ones, parts block-aligned."""
    reads: list[dt.date] = []
    server = PrometheusServer(_days(3, reads))
    by_part: dict[int, list[tuple[int, float]]] = {}
    for number, samples in _samples(server):
        by_part.setdefault(number, []).extend(samples)
    everything = [sample for number in sorted(by_part) for sample in by_part[number]]
    moments = [moment for moment, _ in everything]
    assert moments == sorted(set(moments))  # in time order, no timestamp twice
    first_day_end = _day_start_ms(_EPOCH_DAY) + 24 * HOUR_MS + HOUR_MS // 2
    assert dict(everything)[first_day_end] == 0.0  # shared with the second day: the first day's value
    assert dict(everything)[first_day_end + HOUR_MS // 2] == 1.0
    blocks = [{moment // BLOCK_MS for moment, _ in samples} for samples in by_part.values()]
    assert all(not (one & other) for index, one in enumerate(blocks) for other in blocks[index + 1 :])


def test_a_complete_part_is_handed_out_before_the_later_days_are_read() -> None:
    """The first part comes out after two days are read, not after all of them: memory holds days, not the range."""
    reads: list[dt.date] = []
    parts = PrometheusServer(_days(4, reads))._parts()  # the streaming itself is under test
    next(parts)
    assert reads == [_EPOCH_DAY, _EPOCH_DAY + dt.timedelta(days=1)]
    assert sum(1 for _ in parts) == 3  # then one per later day read, and the last day's remainder


def test_a_day_that_reaches_back_into_written_blocks_is_refused() -> None:
    """A day that starts before blocks already handed out is an error, not a second block over the same range."""
    early = _Day(_EPOCH_DAY)

    @dataclass
    class _Reaching(_Day):
        def series(self) -> Iterator[Series]:
            yield Series({"__name__": "up"}, [_day_start_ms(_EPOCH_DAY) - 3 * HOUR_MS], [1.0])

    server = PrometheusServer(
        [early, _Day(_EPOCH_DAY + dt.timedelta(days=1)), _Reaching(_EPOCH_DAY + dt.timedelta(days=2))]
    )
    with pytest.raises(PrometheusServerError, match="out of order"):
        list(server._parts())  # the pure half of the backfill is under test


def test_block_files_hold_one_block_each_in_openmetrics(tmp_path: Path) -> None:
    """The written files are OpenMetrics (`# TYPE`, second timestamps, `# EOF`), one per two-hour block range."""
    server = PrometheusServer(_days(1, []))
    paths = [
        path for part in server._parts() for path in write_block_files(part.series.values(), tmp_path)
    ]  # as _backfill does
    assert len(paths) == len({path.name for path in paths}) == 14  # 26.5 hours from 22:00: 14 block ranges
    text = paths[0].read_text()
    assert text.startswith("# TYPE up unknown\n")
    assert text.endswith("# EOF\n")
    assert 'up{job="node"} 0.0 ' in text

"""The digest's chart: the right numbers in the right hours from the real backends, and a PNG whatever happens.

The corpus tests read the incident days from real VictoriaMetrics + VictoriaLogs (the session's `corpus_backends`);
the others use a recording fake to check what is asked of the backends and how gaps and failures are drawn.
"""

from __future__ import annotations

import dataclasses
import struct
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from digest.app.engine import open_sources
from digest.app.settings import load_settings
from digest.backends.victorialogs import LogsqlWriter, time_filter
from digest.checks.contract import RangeSeries, Sample, Sources, Window
from digest.checks.envoy_flags import EnvoyFlagsPolicy
from digest.checks.log_questions import CountRow, Filter, LineCount, LineSeries, PeakCount
from digest.checks.promql import open_range
from digest.output.chart import CAPTION_LIMIT, chart_caption, chart_drawing, render_chart, time_ticks
from digest.output.chart_data import ChartData, ConntrackFill, Counts, HourlyPanel, collect_chart_data
from digest.output.drawing import nice_ticks
from digest.pipeline.policy import Policy
from digest.pipeline.window import day_window, last_window
from digest.testbed.embedded import EmbeddedBackends, free_port

UTC_ZONE = ZoneInfo("UTC")
STORM = date(2026, 7, 20)
ROLLOUT = date(2026, 9, 8)
STORM_PNG = Path("/tmp/digest-chart-2026-07-20.png")  # noqa: S108  # a fixed path, to look at the chart by hand
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@asynccontextmanager
async def _sources(vm_url: str, vl_url: str) -> AsyncIterator[Sources]:
    settings = load_settings(vm_url=vm_url, vl_url=vl_url, timezone="UTC", policy_file=None, query_timeout=20.0)
    async with open_sources(settings) as sources:
        yield sources


async def _chart_of(backends: EmbeddedBackends, day: date) -> ChartData:
    async with _sources(backends.metrics.url, backends.logs.url) as sources:
        return await collect_chart_data(sources, day_window(day, UTC_ZONE), Policy())


def _hour(data: ChartData, index: int) -> int:
    return datetime.fromtimestamp(data.buckets[index], tz=UTC).hour


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE
    assert head[12:16] == b"IHDR"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def render_storm_chart(data: ChartData) -> Path:
    """Render 2026-07-20's chart where a person can open it (the helper used to review the chart's look)."""
    render_chart(data, STORM_PNG, "CRITICAL 8/10 · homelab · 2026-07-20")
    return STORM_PNG


# On the incident corpus -----------------------------------------------------------------------------------------


async def test_storm_day_error_flood_by_hour_and_conntrack(corpus_backends: EmbeddedBackends) -> None:
    """07-20: feed-aggregator's 4,539,734 error lines peak in 20:00-21:00 UTC; pi5-2's conntrack peaks near 72 %."""
    data = await _chart_of(corpus_backends, STORM)

    assert data.errors is not None, data.errors_reason
    assert len(data.buckets) == 24
    assert not any(data.errors.blind)
    top = data.errors.series[0]
    assert top.label == "feeds/feed-aggregator"
    assert top.total == 4_539_734
    assert _hour(data, top.peak_index) == 20
    # Every hour at its place: the flood grows, drops after the OOM kill (06:15) and the liveness kill (17:03).
    hourly = [value or 0 for value in top.values]
    assert hourly[5] > hourly[6]
    assert hourly[16] > hourly[17]
    assert hourly[18] < hourly[19] < hourly[20]
    assert [counts.label for counts in data.errors.series] == ["feeds/feed-aggregator", "logging/vector", "shop/web"]
    assert data.errors.total == 4_539_772

    assert data.flags is not None, data.flags_reason
    assert data.flags.series == ()  # the gateway answered no 5xx that day: said in words, not drawn as zero

    assert data.conntrack is not None, data.conntrack_reason
    assert data.conntrack.node == "pi5-2"
    assert data.conntrack.peak == pytest.approx(0.72, abs=0.005)
    assert max(value for _, value in data.conntrack.points) == pytest.approx(94_083 / 131_072, abs=1e-6)
    assert data.conntrack.peak_at == datetime(2026, 7, 20, 21, 10, tzinfo=UTC).timestamp()
    assert len(data.conntrack.points) == 288

    path = render_storm_chart(data)
    assert _png_size(path) == (1080, 1350)
    assert path.stat().st_size > 10_000
    caption = chart_caption("CRITICAL 8/10 · homelab · 2026-07-20", data)
    assert len(caption) <= CAPTION_LIMIT
    assert "feeds/feed-aggregator 4,539,734, peak 680,660 in 20:00–21:00" in caption
    assert "peak 72 % on pi5-2 near 21:10" in caption


async def test_rollout_day_uh_by_hour(corpus_backends: EmbeddedBackends, tmp_path: Path) -> None:
    """09-08: the flags panel holds 840 UH, in the hours of the three Recreate rollouts (72, 488, 280)."""
    data = await _chart_of(corpus_backends, ROLLOUT)

    assert data.flags is not None, data.flags_reason
    flags = data.flags.as_dict()
    assert list(flags) == ["UH"]
    uh = flags["UH"]
    assert sum(value or 0 for value in uh) == 840
    assert {_hour(data, index): value for index, value in enumerate(uh) if value} == {10: 72, 14: 488, 19: 280}

    render_chart(data, tmp_path / "rollout.png", "CRITICAL 8/10 · homelab · 2026-09-08")
    assert _png_size(tmp_path / "rollout.png") == (1080, 1350)
    assert "5xx: 840 UH" in chart_caption("CRITICAL 8/10 · homelab · 2026-09-08", data)


# Without backends -----------------------------------------------------------------------------------------------


async def test_refused_backends_leave_every_panel_unavailable_and_a_png(tmp_path: Path) -> None:
    """Nothing listening: each panel is None with the source's reason, and the chart is still a valid PNG."""
    port = free_port()
    async with _sources(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}") as sources:
        data = await collect_chart_data(sources, day_window(STORM, UTC_ZONE), Policy())

    assert (data.errors, data.flags, data.conntrack) == (None, None, None)
    assert "VictoriaLogs unreachable" in data.errors_reason
    assert "VictoriaLogs unreachable" in data.flags_reason
    assert "VictoriaMetrics unreachable" in data.conntrack_reason

    path = tmp_path / "blind.png"
    render_chart(data, path, "UNKNOWN · homelab · 2026-07-20")
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    assert path.stat().st_size > 10_000
    caption = chart_caption("UNKNOWN · homelab · 2026-07-20", data)
    assert len(caption) <= CAPTION_LIMIT
    assert caption.count("not available") == 3


class _RecordingSources:
    """Metrics and logs sources answering from canned rows and recording every query with its time arguments."""

    name = "VictoriaLogs"
    language = "LogsQL"

    def __init__(self, log_rows: Mapping[str, list[CountRow]], peaks: list[Sample], fill: list[RangeSeries]) -> None:
        self.log_rows = log_rows
        self.writer = LogsqlWriter()
        self.peaks = peaks
        self.fill = fill
        self.calls: list[tuple[str, str, tuple[object, ...]]] = []

    async def instant(self, query: str, at: datetime) -> list[Sample]:
        self.calls.append(("instant", query, (at,)))
        return self.peaks

    async def range(self, query: str, start: datetime, end: datetime, step_seconds: int) -> list[RangeSeries]:
        self.calls.append(("range", query, (start, end, step_seconds)))
        return self.fill

    async def count(self, question: LineCount) -> list[CountRow]:
        # The question as VictoriaLogs would be asked it, so that the test reads the query that would be sent.
        query = self.writer.count_query(question)
        self.calls.append(("stats", query, (question.window.end,)))
        return self.log_rows["flags" if "unpack_json" in query else "errors"]

    async def peak(self, question: PeakCount) -> list[CountRow]:
        raise AssertionError("the chart asks no peak question")

    async def series(self, question: LineCount) -> list[LineSeries]:
        raise AssertionError("the chart asks no series question")

    def reading_query(self, window: Window, lines: Filter, most_repeated: bool = False) -> str:
        return self.writer.reading_query(window, lines, most_repeated)


def _row(moment: datetime, value: float, **group: str) -> CountRow:
    """A bucket of one group with ``value`` errors (or 5xx) among its lines."""
    total = "requests" if "response_flags" in group else "lines"
    return CountRow(group=group, counts={total: value + 1, "errors": value}, bucket=moment.timestamp())


async def test_queries_are_few_concurrent_safe_and_pinned_to_the_window() -> None:
    """At most 4 queries, all pinned to the window, with buckets on the reader's whole hours (India: offset 30m)."""
    zone = ZoneInfo("Asia/Kolkata")
    window = day_window(STORM, zone)  # 2026-07-19T18:30Z .. 2026-07-20T18:30Z
    start = window.start
    pod = {"namespace": "feeds", "pod": "feed-aggregator-npps2xwfrl-zwkbv"}
    other = {"namespace": "feeds", "pod": "feed-aggregator-pdpwg4q8qw-dl78n"}
    fake = _RecordingSources(
        log_rows={
            # Lines only from 03:00 local on: the first three hours are blind, hour 4 had lines and no error.
            "errors": [
                _row(start + timedelta(hours=3), 5, **pod),
                _row(start + timedelta(hours=3), 2, **other),
                _row(start + timedelta(hours=4), 0, **pod),
                _row(start + timedelta(hours=20), 9, **pod),
            ],
            "flags": [_row(start + timedelta(hours=hour), 0, response_flags="-") for hour in range(24)],
        },
        peaks=[Sample({"instance": "pi5-1:9100"}, 0.2), Sample({"instance": "pi5-2:9100"}, 0.5)],
        fill=[
            RangeSeries({"instance": "pi5-2:9100"}, [(start.timestamp() + 600, 0.4), (start.timestamp() + 900, 0.5)])
        ],
    )
    data = await collect_chart_data(Sources(metrics=fake, logs=fake), window, Policy())

    assert len(fake.calls) <= 4
    for kind, query, times in fake.calls:
        if kind == "stats":
            assert query.startswith(time_filter(window)), query
            assert "_time:3600s offset 1800s" in query
            assert times == (window.end,)
        elif kind == "instant":
            assert f"[{open_range(window.seconds)}:1m]" in query
            assert times == (window.end,)
        else:
            assert 'instance="pi5-2:9100"' in query
            assert times == (window.start + timedelta(minutes=5), window.end, 300)

    assert data.buckets[0] == window.start.timestamp()  # local midnight, i.e. 18:30Z
    assert data.errors is not None
    workload = data.errors.series[0]
    assert workload.label == "feeds/feed-aggregator"
    assert workload.values[:5] == (None, None, None, 7, 0)
    assert workload.total == 16
    assert data.errors.blind[:5] == (True, True, True, False, False)
    assert data.blind_hours(data.errors) == 21  # only hours 3, 4 and 20 held any line
    assert data.flags is not None
    assert data.flags.series == ()
    assert data.conntrack is not None
    assert (data.conntrack.node, data.conntrack.peak, data.conntrack.peak_at) == ("pi5-2", 0.5, start.timestamp() + 900)
    caption = chart_caption("WARNING 9/10 · homelab · 2026-07-20", data)
    assert "no log line at all in 21 of 24 h" in caption


async def test_disabled_checks_are_neither_queried_nor_drawn(tmp_path: Path) -> None:
    """A check disabled in the policy sends no query; its panel says it is disabled instead of drawing anything."""
    fake = _RecordingSources(log_rows={"errors": [], "flags": []}, peaks=[], fill=[])
    policy = dataclasses.replace(Policy(), envoy_flags=EnvoyFlagsPolicy(enabled=False))
    data = await collect_chart_data(Sources(metrics=fake, logs=fake), day_window(STORM, UTC_ZONE), policy)

    assert not any("unpack_json" in query for _, query, _ in fake.calls)
    assert data.flags is None
    assert data.flags_reason == "envoy_flags is disabled in the policy"
    assert (data.errors, data.errors_reason) == (None, "no log line in the window")
    assert (data.conntrack, data.conntrack_reason) == (None, "no node_nf_conntrack_* series in the window")
    render_chart(data, tmp_path / "disabled.png", "UNKNOWN · homelab · 2026-07-20")
    assert _png_size(tmp_path / "disabled.png") == (1080, 1350)


def test_caption_never_exceeds_telegrams_limit() -> None:
    """Long workload names, many flags and long error reasons still give a caption of at most 1,024 characters."""
    window = day_window(STORM, UTC_ZONE)
    buckets = tuple(window.start.timestamp() + 3600 * hour for hour in range(24))
    long_name = "n" * 300 + "/" + "w" * 300
    panel = HourlyPanel(series=(Counts(long_name, tuple(range(24))),), blind=(False,) * 24, total=276)
    flags = HourlyPanel(
        series=tuple(Counts(f"FLAG{index}" * 30, (1,) * 24) for index in range(6)), blind=(True,) * 24, total=144
    )
    data = ChartData(
        window=window,
        bucket_seconds=3600,
        buckets=buckets,
        errors=panel,
        errors_reason="",
        flags=flags,
        flags_reason="",
        conntrack=None,
        conntrack_reason="VictoriaMetrics http: " + "x" * 2000,
    )
    caption = chart_caption("CRITICAL 0/10 · " + "c" * 2000, data)
    assert len(caption) <= CAPTION_LIMIT
    assert caption.endswith("…")
    said = chart_caption("CRITICAL 0/10 · x", data, "Most said: a/b · 92 % of its errors · " + "e" * 2000)
    assert len(said) <= CAPTION_LIMIT
    assert said.endswith("…")


def test_ticks_follow_the_readers_clock_on_a_dst_day() -> None:
    """Paris' 23-hour spring-forward day ticks at local 00:00, 03:00 … 21:00; a week ticks at local midnights."""
    paris = ZoneInfo("Europe/Paris")
    spring = day_window(date(2026, 3, 29), paris)
    assert spring.seconds == 23 * 3600
    _, labels, _ = time_ticks(spring)
    assert labels == ["00:00", "03:00", "06:00", "09:00", "12:00", "15:00", "18:00", "21:00", "00:00"]

    week = last_window(timedelta(days=7), datetime(2026, 7, 22, 12, tzinfo=UTC), paris)
    ticks, labels, _ = time_ticks(week)
    assert labels == ["Thu 16", "Fri 17", "Sat 18", "Sun 19", "Mon 20", "Tue 21", "Wed 22"]
    assert all(datetime.fromtimestamp(tick, tz=paris).hour == 0 for tick in ticks)


def test_a_short_window_renders_with_hourly_ticks(tmp_path: Path) -> None:
    """A 6-hour window with a conntrack gap renders (the line breaks at the gap instead of bridging it)."""
    window = Window(
        start=datetime(2026, 7, 20, 18, tzinfo=UTC), end=datetime(2026, 7, 21, tzinfo=UTC), zone=UTC_ZONE, label="6h"
    )
    first = window.start.timestamp()
    points = tuple((first + 300 * step, 0.5) for step in range(1, 73) if not 20 <= step < 40)
    data = ChartData(
        window=window,
        bucket_seconds=3600,
        buckets=tuple(first + 3600 * hour for hour in range(6)),
        errors=HourlyPanel(
            series=(Counts("feeds/feed-aggregator", (1, 2, None, 4, 5, 6)),),
            blind=(False, False, True, False, False, False),
            total=18,
        ),
        errors_reason="",
        flags=HourlyPanel(
            series=(Counts("UH", (0, 3, 0, 0, 0, 0)), Counts("app 5xx", (1, 0, 0, 0, 0, 2))),
            blind=(False,) * 6,
            total=6,
        ),
        flags_reason="",
        conntrack=ConntrackFill("pi5-2", points, 0.5, first + 300, 0.8, 0.95),
        conntrack_reason="",
    )
    major, labels, _ = time_ticks(window)
    assert labels == ["18:00", "19:00", "20:00", "21:00", "22:00", "23:00", "00:00"]
    assert len(major) == len(labels)
    render_chart(data, tmp_path / "short.png", "WARNING 9/10 · homelab · 6h to 2026-07-21 00:00")
    assert _png_size(tmp_path / "short.png") == (1080, 1350)


async def test_unseen_spans_are_shaded_on_the_chart(corpus_backends: EmbeddedBackends, tmp_path: Path) -> None:
    """The digest's unseen hours of the logs (12:00-24:00) are cross-hatched on the errors panel, and only there."""
    from PIL import Image

    data = await _chart_of(corpus_backends, STORM)
    window = day_window(STORM, UTC_ZONE)
    noon = window.start.timestamp() + 12 * 3600
    path = tmp_path / "unseen.png"
    render_chart(
        data,
        path,
        "CRITICAL 8/10 · homelab · 2026-07-20 · not seen: logs from pi5-2 after 12:00",
        unseen=[(noon, window.end.timestamp(), "logs")],
    )
    unseen_fill = (0xF6, 0xE0, 0xE0)
    with Image.open(path) as image:
        pixels = image.convert("RGB")
        width, height = pixels.size

        def shaded(xs: range, ys: range) -> int:
            return sum(1 for x in xs for y in ys if pixels.getpixel((x, y)) == unseen_fill)

        errors_panel, conntrack_panel = range(0, height // 3, 3), range(2 * height // 3, height, 3)
        left, right = range(0, width // 2, 3), range(width // 2, width, 3)
        assert shaded(right, errors_panel) > 1_000  # half of the errors panel
        assert shaded(left, errors_panel) < shaded(right, errors_panel) / 20  # the legend swatch at most
        # Conntrack comes from node_exporter, which saw the whole day: nothing shaded there.
        assert shaded(right, conntrack_panel) == 0


def test_a_long_not_seen_title_wraps_on_real_lines_inside_the_figure(tmp_path: Path) -> None:
    """A long headline, panel message and "most said" line break on real lines, and no text leaves the figure."""
    window = day_window(date(2026, 7, 25), UTC_ZONE)
    data = ChartData(
        window=window,
        bucket_seconds=3600,
        buckets=tuple(window.start.timestamp() + 3600 * hour for hour in range(24)),
        errors=None,
        errors_reason="no log line in the window",
        flags=None,
        flags_reason="envoy_flags is disabled in the policy",
        conntrack=None,
        conntrack_reason="no node_nf_conntrack_* series in the window",
    )
    title = (
        "WARNING 7/10 · homelab-production-cluster · 2026-07-25 · not seen: cAdvisor (24 h); "
        "kube-state-metrics (24 h); node_exporter on pi5-1, pi5-2, pi5-3 (02:00–09:30); 2 more"
    )
    said = (
        "Most said: feeds/feed-aggregator · 92 % of its errors · new today · ERROR feeds.ws relay: connect "
        "ETIMEDOUT <IP4>:<N> while resolving upstream relay-backup-east.feeds.svc.cluster.local after 3 retries"
    )
    drawing = chart_drawing(data, title, (), said)
    texts = [text.text for text in drawing.texts if text.text.strip()]
    [heading] = [text for text in texts if text.startswith("WARNING 7/10")]
    assert heading.count("\n") >= 2, heading  # wrapped, the unseen parts on lines of their own
    assert any(line.startswith("not seen: cAdvisor") for line in heading.split("\n"))
    assert [text for text in texts if "\\n" in text] == []
    [note] = [text for text in texts if text.startswith("Most said")]
    assert note.count("\n") == 1  # wrapped on two lines, the rest left out
    assert note.endswith("…")
    assert sum(text.startswith("not available:") for text in texts) == 3
    width, height = drawing.image.size
    outside = [
        (text.text, text.box)
        for text in drawing.texts
        if text.box[0] < 0 or text.box[1] < 0 or text.box[2] > width or text.box[3] > height
    ]
    assert outside == []
    render_chart(data, tmp_path / "long-title.png", title)
    assert _png_size(tmp_path / "long-title.png") == (1080, 1350)


def test_count_axes_get_three_to_five_round_ticks() -> None:
    """A count axis ticks at round whole steps from 0, as MaxNLocator chose: 07-20's by 300,000, a quiet day's by 1."""
    # 07-20: a peak of 680,660 under three legend rows gives an axis up to 1,080,413.
    assert nice_ticks(1_080_413, bins=4, integer=True, min_ticks=3) == [0, 300_000, 600_000, 900_000]
    assert nice_ticks(4, bins=4, integer=True, min_ticks=3) == [0, 1, 2, 3, 4]
    assert nice_ticks(9.3, bins=4, integer=True, min_ticks=3) == [0, 3, 6, 9]
    assert nice_ticks(5.1, bins=4, integer=True, min_ticks=3) == [0, 2, 4]


def test_rendering_never_imports_matplotlib(tmp_path: Path) -> None:
    """Both charts are drawn with Pillow alone: matplotlib is never imported, even where it is installed."""
    script = f"""
import sys
from datetime import date
from pathlib import Path
from zoneinfo import ZoneInfo

from digest.output.chart import render_chart
from digest.output.chart_data import ChartData
from digest.output.week_chart import render_week_chart
from digest.pipeline.week import DayResult, Week, week_days
from digest.pipeline.score import DigestStatus
from digest.pipeline.window import day_window

window = day_window(date(2026, 7, 20), ZoneInfo("UTC"))
data = ChartData(window, 3600, (window.start.timestamp(),), None, "down", None, "down", None, "down")
render_chart(data, Path({str(tmp_path / "day.png")!r}), "UNKNOWN · homelab")
days = tuple(DayResult(day, DigestStatus.OK, 10, 10, "calm") for day in week_days(2026, 33))
render_week_chart(Week("homelab", 2026, 33, days=days), Path({str(tmp_path / "week.png")!r}))
assert "matplotlib" not in sys.modules, "matplotlib was imported"
assert "numpy" not in sys.modules, "numpy was imported"
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert _png_size(tmp_path / "day.png") == (1080, 1350)
    assert _png_size(tmp_path / "week.png") == (1080, 1080)

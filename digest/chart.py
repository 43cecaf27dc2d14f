r"""The digest's chart: three stacked panels over the window, drawn for a phone screen.

The text digest says *what* went wrong; the chart shows *when*, which is what a reader needs to connect an incident
to a deploy, a cron or a load test. One panel per incident shape of the post-mortems:

1. **Error lines per hour of the top workloads** (3 by default). 07-20: feeds/feed-aggregator's 4.5 M error lines
   were not a burst but a flood that grew all day to 680,660 in 20:00-21:00 and stopped with the 21:33 mitigation.
2. **5xx per hour by Envoy response flag** (5xx without a flag are the applications' own, shown as "app 5xx").
   08-12 (readiness spiral) and 09-08 (the Recreate rollout): UH comes in bursts at the moments the service had no
   ready endpoint; the hours line them up with the load test or the rollouts.
3. **Conntrack fill of the worst node, per 5 minutes**, with the 80 % and 95 % lines of the policy. 07-20: pi5-2
   crept up to 72 % with the reconnect storm; 10-05: pi5-3 touched 96.5 % at 19:40. The distance to the lines is
   the point, so the axis always runs from 0 to 100 %.

Counting happens in the backends, never by downloading lines, through the same seam as the checks: two log
questions (`checks.log_questions.LineCount`, answered by VictoriaLogs or Loki) and two PromQL queries, at most four
sent concurrently, each pinned to the window::

    lines and error lines (error_lines' rule) per hour, namespace and pod, in error_lines' scope
    access-log lines and 5xx answers per hour and response flag, in envoy_flags' scope
    max by (instance) (max_over_time((node_nf_conntrack_entries / node_nf_conntrack_entries_limit)[<window>:1m]))
    max_over_time((node_nf_conntrack_entries{instance="<worst>"} / node_nf_conntrack_entries_limit{…})[300s:1m])

Every line is counted beside the errors so that an hour with lines and no error reads 0, and an hour without any
line reads "not seen" — on either backend. The buckets are shifted so that they start on the reader's whole hours
(India's :30 included). Windows longer than two days get buckets of several hours so a week stays readable on a
phone. On VictoriaLogs the buckets are a ``_time:1h`` group of ``/select/logsql/stats_query``, not
``stats_query_range``: the VictoriaLogs that ``scripts/install-backends`` builds (Debian trixie's source) shares
one ``timestamp`` variable between the concurrent workers of its range handler, so values land on the wrong hour
from one run to the next (sums stay right, hours do not).

A panel whose query failed or found no data at all says "not available: <reason>"; it never draws a flat zero that
would read as "all quiet". Within a panel, a bucket in which the backend holds no line at all of the panel's scope
(the shipper or the gateway was silent) is a hatched gap, not a zero. A panel that saw its lines and found nothing
to draw (no error line, no 5xx) says so in words.

Every label- or log-derived string drawn or captioned (workload and flag labels, the node, the headline, a
backend's error) goes through `digest.safe_text`: control and bidi characters become visible escapes and ``$``
cannot switch on matplotlib's math mode. Text is wrapped *after* it is made visible (so the line breaks drawn are
real ones, never a ``\n`` escape), and the title is wrapped until its drawn width fits the figure. A legend label
longer than `LEGEND_LABEL_LIMIT` characters (a 300-character pod name would run off the 1080 px figure) keeps
its start and end around an ellipsis: ``payments-api-…-7d9f8``.

Rendering uses matplotlib's object API on the Agg canvas (``Figure`` + ``FigureCanvasAgg``), matplotlib's recipe
for servers: pyplot's global figure registry is never touched, so nothing is left open and it is safe to call from
a worker thread (``asyncio.to_thread(render_chart, …)``) in the bot.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, PercentFormatter

from checks.conntrack import ConntrackCheck
from checks.contract import (
    SourceError,
    Sources,
    Window,
    fmt_int,
    fmt_percent,
    local_time,
    node_name,
)
from checks.envoy_flags import EnvoyFlagsCheck
from checks.error_lines import ErrorLinesCheck, workload_of
from checks.log_questions import EVERY_LINE, CountRow, Json, LineCount
from checks.promql import quote
from digest.policy import Policy
from digest.safe_text import for_matplotlib, middle_ellipsis, visible

CAPTION_LIMIT = 1024  # Telegram's limit for a photo caption
CONNTRACK_STEP_SECONDS = 300
_MAX_BUCKETS = 48  # hourly up to two days; longer windows get buckets of several hours
_MAX_FLAGS = 4  # flags drawn one by one; the rest are summed as "other flags"
APP_5XX = "app 5xx"  # 5xx without a response flag: the upstream application answered it
_OTHER_FLAGS = "other flags"

# Okabe-Ito: distinguishable with the common colour-vision deficiencies, and on a dim phone screen.
_SERIES_COLOURS = ("#D55E00", "#0072B2", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
_APP_COLOUR = "#8C8C8C"
_WARN_COLOUR = "#E69F00"
_CRIT_COLOUR = "#C0392B"
_TEXT_COLOUR = "#222222"
_MUTED_COLOUR = "#666666"

_FIG_SIZE = (7.2, 9.0)  # inches: 1080 × 1350 px at 150 dpi, a phone's portrait screen
_DPI = 150
_TITLE_PT = 16
_PANEL_TITLE_PT = 13
_LABEL_PT = 12
_TICK_PT = 12
_LEGEND_PT = 11
_LINE_WIDTH = 2.8
# Characters of a series' name in a legend: the widest that fits beside its count at the legend's size.
LEGEND_LABEL_LIMIT = 40
_NODE_LIMIT = 24  # characters of the node's name in the conntrack panel's title
_MESSAGE_WIDTH = 50  # characters per line of a panel's message ("not available: <reason>")
_MESSAGE_LINES = 6


@dataclass(frozen=True)
class Counts:
    """One line of an hourly panel: what it counts and its count in each bucket of `ChartData.buckets`.

    None marks a bucket in which the backend holds no line at all of the panel's scope (the shipper or the gateway
    was silent): it is drawn as a gap, never as zero.
    """

    label: str
    values: tuple[int | None, ...]

    @property
    def total(self) -> int:
        return sum(value for value in self.values if value is not None)

    @property
    def peak_index(self) -> int:
        """The bucket with the highest count (the first one on a tie)."""
        return max(range(len(self.values)), key=lambda index: (self.values[index] or 0, -index))

    @property
    def peak(self) -> int:
        return self.values[self.peak_index] or 0


@dataclass(frozen=True)
class HourlyPanel:
    """An hourly panel: its lines, and the buckets in which it could not see anything."""

    series: tuple[Counts, ...]  # largest first; empty when the backend saw lines but nothing to count
    blind: tuple[bool, ...]  # per bucket: the backend holds no line at all of the panel's scope
    total: int  # everything counted: every workload's error lines, every 5xx

    def as_dict(self) -> dict[str, tuple[int | None, ...]]:
        """Label → counts per bucket (None where blind)."""
        return {counts.label: counts.values for counts in self.series}


@dataclass(frozen=True)
class ConntrackFill:
    """The worst node's conntrack table fill over the window."""

    node: str
    points: tuple[tuple[float, float], ...]  # (unix seconds, fraction 0..1): the peak of the 5 minutes ending there
    peak: float  # the window's peak fill, minute resolution
    peak_at: float | None  # when the 5-minute series reached its highest point
    warn_ratio: float  # the policy's lines (80 %, 95 % by default)
    crit_ratio: float


@dataclass(frozen=True)
class ChartData:
    """What the chart draws. A panel is None when it could not be drawn; its ``*_reason`` then says why."""

    window: Window
    bucket_seconds: int  # 3600 for windows up to two days
    buckets: tuple[float, ...]  # start of each bucket (unix seconds), the first one at or before the window start
    errors: HourlyPanel | None  # the top workloads ("namespace/workload"); total: every workload's error lines
    errors_reason: str
    flags: HourlyPanel | None  # per response flag, APP_5XX for none, at most 4 flags + "other flags"
    flags_reason: str
    conntrack: ConntrackFill | None
    conntrack_reason: str

    def blind_hours(self, panel: HourlyPanel) -> float:
        """Hours of the window in which ``panel``'s backend holds no line at all."""
        start, end = self.window.start.timestamp(), self.window.end.timestamp()
        seconds = sum(
            min(bucket + self.bucket_seconds, end) - max(bucket, start)
            for bucket, blind in zip(self.buckets, panel.blind, strict=True)
            if blind
        )
        return seconds / 3600


# Collecting ---------------------------------------------------------------------------------------------------------


def bucket_seconds(window: Window) -> int:
    """One hour, or whole hours enough to keep the window within 48 buckets."""
    return 3600 * max(1, math.ceil(window.seconds / (_MAX_BUCKETS * 3600)))


def bucket_offset(window: Window, step: int) -> int:
    """Seconds by which buckets are shifted from UTC multiples of ``step`` to start on the reader's whole hours."""
    utc_offset = window.start.astimezone(window.zone).utcoffset() or timedelta(0)
    return int(utc_offset.total_seconds()) % step


def bucket_starts(window: Window, step: int) -> tuple[float, ...]:
    """The start of every bucket that overlaps the window (the first and last ones may be partial)."""
    offset = bucket_offset(window, step)
    start = int(window.start.timestamp())
    first = start - (start - offset) % step
    end = window.end.timestamp()
    return tuple(float(moment) for moment in range(first, math.ceil(end), step) if moment < end)


def conntrack_node_query(instance: str) -> str:
    """One node's conntrack fill, each point the peak of the 5 minutes ending there (1-minute subquery)."""
    selector = quote(instance)
    return (
        f'max_over_time((node_nf_conntrack_entries{{instance="{selector}"}} / '
        f'node_nf_conntrack_entries_limit{{instance="{selector}"}})[{CONNTRACK_STEP_SECONDS}s:1m])'
    )


def chart_questions(window: Window, policy: Policy) -> dict[str, LineCount]:
    """The log questions behind the hourly panels, by purpose."""
    step = bucket_seconds(window)
    offset = bucket_offset(window, step)
    errors = ErrorLinesCheck(policy.error_lines)
    flags = EnvoyFlagsCheck(policy.envoy_flags)
    return {
        "errors": LineCount(
            window=window,
            scope=errors.scope(),
            columns=(("lines", EVERY_LINE), ("errors", errors.error_rule())),
            by=("namespace", "pod"),
            bucket_seconds=step,
            bucket_offset_seconds=offset,
        ),
        "flags": replace(
            flags.log_question(window),
            by=(Json(policy.envoy_flags.flags_field),),
            bucket_seconds=step,
            bucket_offset_seconds=offset,
        ),
    }


def chart_queries(window: Window, policy: Policy, instance: str = "<worst node>") -> dict[str, str]:
    """The PromQL behind the conntrack panel, by purpose (``conntrack_node`` for the worst node's ``instance``)."""
    return {
        # The conntrack check's own worst-node question: the chart shows the node the digest names.
        "conntrack_worst": ConntrackCheck(policy.conntrack).queries(window)["peak"],
        "conntrack_node": conntrack_node_query(instance),
    }


async def collect_chart_data(sources: Sources, window: Window, policy: Policy, top: int = 3) -> ChartData:
    """Query the backends for the three panels concurrently (at most four queries); never raises `SourceError`."""
    step = bucket_seconds(window)
    buckets = bucket_starts(window, step)
    queries = chart_queries(window, policy)
    questions = chart_questions(window, policy)
    (errors, errors_reason), (flags, flags_reason), (conntrack, conntrack_reason) = await asyncio.gather(
        _error_panel(sources, policy, questions["errors"], buckets, step, top),
        _flags_panel(sources, policy, questions["flags"], buckets, step),
        _conntrack_panel(sources, window, policy, queries["conntrack_worst"]),
    )
    return ChartData(
        window=window,
        bucket_seconds=step,
        buckets=buckets,
        errors=errors,
        errors_reason=errors_reason,
        flags=flags,
        flags_reason=flags_reason,
        conntrack=conntrack,
        conntrack_reason=conntrack_reason,
    )


def _bucket_index(row: CountRow, buckets: Sequence[float], step: int) -> int | None:
    """The chart bucket of a bucketed row."""
    if row.bucket is None or not buckets:
        return None
    index = round((row.bucket - buckets[0]) / step)
    return index if 0 <= index < len(buckets) else None


def _hourly_panel(
    per_label: dict[str, list[float]], seen: set[int], buckets: int
) -> tuple[list[Counts], tuple[bool, ...]]:
    """Counts with None in the buckets nothing was seen in, largest first, and the blind mask."""
    blind = tuple(index not in seen for index in range(buckets))
    ranked = sorted(
        (
            Counts(label, tuple(None if blind[index] else round(value) for index, value in enumerate(values)))
            for label, values in per_label.items()
        ),
        key=lambda counts: (-counts.total, counts.label),
    )
    return ranked, blind


async def _error_panel(
    sources: Sources, policy: Policy, question: LineCount, buckets: Sequence[float], step: int, top: int
) -> tuple[HourlyPanel | None, str]:
    if not policy.error_lines.enabled:
        return None, "error_lines is disabled in the policy"
    try:
        rows = await sources.logs.count(question)
    except SourceError as exc:
        return None, str(exc)
    if not rows:
        return None, "no log line in the window"
    per_workload: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(buckets))
    seen: set[int] = set()  # buckets with at least one line: a pod has a row in a bucket only if it logged there
    for row in rows:
        index = _bucket_index(row, buckets, step)
        if index is None or row.counts.get("lines", 0.0) <= 0:
            continue
        seen.add(index)
        namespace = row.group.get("namespace", "")
        workload = workload_of(row.group.get("pod", ""))
        per_workload[f"{namespace}/{workload}"][index] += row.counts.get("errors", 0.0)
    if not seen:
        return None, "the log backend answered without time buckets"
    ranked, blind = _hourly_panel(per_workload, seen, len(buckets))
    series = tuple(counts for counts in ranked[:top] if counts.total > 0)
    return HourlyPanel(series=series, blind=blind, total=sum(counts.total for counts in ranked)), ""


async def _flags_panel(
    sources: Sources, policy: Policy, question: LineCount, buckets: Sequence[float], step: int
) -> tuple[HourlyPanel | None, str]:
    if not policy.envoy_flags.enabled:
        return None, "envoy_flags is disabled in the policy"
    try:
        rows = await sources.logs.count(question)
    except SourceError as exc:
        return None, str(exc)
    if not rows:
        return None, "no Envoy access log in the window"
    per_flag: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(buckets))
    seen: set[int] = set()  # buckets with at least one access-log line: every line lands in some flag's row
    for row in rows:
        index = _bucket_index(row, buckets, step)
        if index is None or row.counts.get("requests", 0.0) <= 0:
            continue
        seen.add(index)
        flag = row.group.get(policy.envoy_flags.flags_field, "")
        per_flag[APP_5XX if flag in ("", "-", "null") else flag][index] += row.counts.get("errors", 0.0)
    if not seen:
        return None, "the log backend answered without time buckets"
    ranked, blind = _hourly_panel(per_flag, seen, len(buckets))
    app = [counts for counts in ranked if counts.label == APP_5XX and counts.total > 0]
    flagged = [counts for counts in ranked if counts.label != APP_5XX and counts.total > 0]
    if len(flagged) > _MAX_FLAGS:
        rest = flagged[_MAX_FLAGS - 1 :]
        summed = [sum(value or 0 for value in column) for column in zip(*(c.values for c in rest), strict=True)]
        other = Counts(_OTHER_FLAGS, tuple(None if blind[i] else value for i, value in enumerate(summed)))
        flagged = [*flagged[: _MAX_FLAGS - 1], other]
    total = sum(counts.total for counts in ranked)
    return HourlyPanel(series=tuple(flagged + app), blind=blind, total=total), ""


async def _conntrack_panel(
    sources: Sources, window: Window, policy: Policy, worst_query: str
) -> tuple[ConntrackFill | None, str]:
    if not policy.conntrack.enabled:
        return None, "conntrack is disabled in the policy"
    try:
        peaks = await sources.metrics.instant(worst_query, window.end)
        if not peaks:
            return None, "no node_nf_conntrack_* series in the window"
        worst = max(peaks, key=lambda sample: sample.value)
        instance = worst.labels.get("instance", "")
        # Each point is the peak of the 5 minutes ending at it: starting 5 minutes in keeps them inside the window.
        series = await sources.metrics.range(
            conntrack_node_query(instance),
            window.start + timedelta(seconds=CONNTRACK_STEP_SECONDS),
            window.end,
            CONNTRACK_STEP_SECONDS,
        )
    except SourceError as exc:
        return None, str(exc)
    first = window.start.timestamp() + CONNTRACK_STEP_SECONDS
    points = sorted(
        (moment, value)
        for one in series
        for moment, value in one.points
        if first <= moment <= window.end.timestamp() and math.isfinite(value)
    )
    node = node_name(instance) or "?"
    if not points:
        return None, f"no conntrack samples for {node}"
    peak_at = max(points, key=lambda point: point[1])[0]
    return (
        ConntrackFill(
            node=node,
            points=tuple(points),
            peak=worst.value,
            peak_at=peak_at,
            warn_ratio=policy.conntrack.warn_ratio,
            crit_ratio=policy.conntrack.crit_ratio,
        ),
        "",
    )


# Caption ------------------------------------------------------------------------------------------------------------


def _bucket_span(data: ChartData, index: int) -> str:
    start = max(data.buckets[index], data.window.start.timestamp())
    end = min(data.buckets[index] + data.bucket_seconds, data.window.end.timestamp())
    return f"{local_time(start, data.window)}–{local_time(end, data.window)}"


def _short(reason: str, limit: int = 160) -> str:
    line = " ".join(reason.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _blind_note(data: ChartData, panel: HourlyPanel, what: str) -> str:
    hours = data.blind_hours(panel)
    return f"; {what} in {hours:g} of {data.window.seconds / 3600:g} h" if hours else ""


def chart_caption(headline: str, data: ChartData) -> str:
    """The photo's caption: the headline, then one line for the panels; never over Telegram's 1,024 characters."""
    errors_panel, flags_panel = data.errors, data.flags
    if errors_panel is None:
        errors = f"Errors: not available ({_short(data.errors_reason)})"
    elif not errors_panel.series:
        errors = "Errors: none" + _blind_note(data, errors_panel, "no log line at all")
    else:
        worst = errors_panel.series[0]
        errors = (
            f"Errors: {worst.label} {fmt_int(worst.total)}, peak {fmt_int(worst.peak)} "
            f"in {_bucket_span(data, worst.peak_index)}"
        )
        if errors_panel.total > worst.total:
            errors += f" ({fmt_int(errors_panel.total)} in the cluster)"
        errors += _blind_note(data, errors_panel, "no log line at all")
    if flags_panel is None:
        flags = f"5xx: not available ({_short(data.flags_reason)})"
    elif not flags_panel.series:
        flags = "5xx: none" + _blind_note(data, flags_panel, "no access log")
    else:
        flags = "5xx: " + ", ".join(f"{fmt_int(counts.total)} {counts.label}" for counts in flags_panel.series)
        flags += _blind_note(data, flags_panel, "no access log")
    if data.conntrack is None:
        conntrack = f"Conntrack: not available ({_short(data.conntrack_reason)})"
    else:
        fill = data.conntrack
        at = f" near {local_time(fill.peak_at, data.window)}" if fill.peak_at is not None else ""
        conntrack = f"Conntrack: peak {fmt_percent(fill.peak)} on {fill.node}{at}"
    # The headline and each panel's line carry labels and backend errors: made visible, the newline between is ours.
    caption = f"{_short(visible(headline), 200)}\n{visible(errors)} · {visible(flags)} · {visible(conntrack)}"
    return caption if len(caption) <= CAPTION_LIMIT else caption[: CAPTION_LIMIT - 1] + "…"


# Rendering ----------------------------------------------------------------------------------------------------------


def _thousands(value: float, _position: float | None = None) -> str:
    return f"{value:,.0f}"


def _zone_name(window: Window) -> str:
    key = getattr(window.zone, "key", None)
    return key if isinstance(key, str) else window.zone.tzname(window.start) or "UTC"


def _bucket_edges(data: ChartData) -> list[float]:
    """Bucket edges clipped to the window, as matplotlib dates."""
    start, end = data.window.start.timestamp(), data.window.end.timestamp()
    edges = [min(max(moment, start), end) for moment in data.buckets]
    edges.append(min(data.buckets[-1] + data.bucket_seconds, end) if data.buckets else end)
    return edges


def _drawn(values: Sequence[int | None]) -> list[float]:
    """Counts for matplotlib: a bucket without any line becomes NaN, which leaves a gap."""
    return [math.nan if value is None else float(value) for value in values]


def _per_bucket(data: ChartData) -> str:
    return "hour" if data.bucket_seconds == 3600 else f"{data.bucket_seconds // 3600} h"


def _panel_title(ax: Axes, text: str) -> None:
    ax.set_title(text, loc="left", fontsize=_PANEL_TITLE_PT, fontweight="bold", color=_TEXT_COLOUR, pad=8)


def _message(ax: Axes, text: str, muted: bool = True) -> None:
    """A panel without a plot: its message in the middle, no axes drawn."""
    ax.text(
        0.5,
        0.5,
        for_matplotlib(text, width=_MESSAGE_WIDTH, max_lines=_MESSAGE_LINES),
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=_LABEL_PT,
        color=_MUTED_COLOUR if muted else _TEXT_COLOUR,
        linespacing=1.4,
        bbox={"boxstyle": "round,pad=0.6", "facecolor": "#F4F4F4", "edgecolor": "#DDDDDD"} if muted else None,
    )
    ax.set_yticks([])
    ax.set_ylim(0, 1)
    ax.tick_params(axis="x", which="both", length=0)
    for side in ("left", "right", "top", "bottom"):
        ax.spines[side].set_visible(False)


def _style_counts_axis(ax: Axes, highest: float, legend_entries: int) -> None:
    # Head-room above the highest bar, as tall as the legend, so that the legend never has to cover data.
    legend_share = min(0.55, 0.1 + 0.09 * legend_entries)
    ax.set_ylim(0, max(highest / (1 - legend_share), 4))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True, min_n_ticks=3))
    ax.yaxis.set_major_formatter(FuncFormatter(_thousands))
    ax.grid(axis="y", color="#DDDDDD", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("right", "top"):
        ax.spines[side].set_visible(False)


def _shade_gaps(ax: Axes, edges: Sequence[float], blind: Sequence[bool], label: str) -> None:
    """Hatch the buckets in which the backend holds no line at all: blind, not quiet."""
    labelled = False
    for index, is_blind in enumerate(blind):
        if is_blind:
            ax.axvspan(
                edges[index],
                edges[index + 1],
                facecolor="#EEEEEE",
                edgecolor="#BBBBBB",
                hatch="//",
                linewidth=0,
                label=None if labelled else label,
                zorder=0,
            )
            labelled = True


# Characters per title line at the title's size on the 1080 px wide figure, to start with: `_fit_title` narrows it
# until the drawn title fits, since the width of a character depends on the font and the glyph.
_TITLE_WIDTH = 52
_TITLE_MIN_WIDTH = 16
_TITLE_LINES = (3, 4)  # at most, for the status line and for the unseen parts: the panels keep their height
_TITLE_MARGIN = 0.96  # share of the figure's width the title may take
_NUMBER_AND_UNIT = re.compile(r"(\d) (h|min|%)(?!\w)")


def _wrapped(title: str, width: int) -> str:
    r"""The headline made visible and wrapped to ``width`` characters, the unseen parts starting a line of their own.

    Each part is escaped before it is wrapped: the newlines are the wrapping's, a newline in a label stays ``\n``.
    """
    # A number keeps its unit on its line ("24 h", "80 %"): a no-break space, which the wrapping never breaks at.
    title = _NUMBER_AND_UNIT.sub("\\1\u00a0\\2", title)
    head, separator, unseen = title.partition(" · not seen: ")
    parts = [(head, _TITLE_LINES[0])] + ([(f"not seen: {unseen}", _TITLE_LINES[1])] if separator else [])
    return "\n".join(for_matplotlib(part, width=width, max_lines=lines) for part, lines in parts)


def _fit_title(figure: Figure, title: str) -> None:
    """Set the figure's title, wrapped narrower until its drawn width lies within the figure."""
    for width in range(_TITLE_WIDTH, _TITLE_MIN_WIDTH - 1, -4):
        heading = figure.suptitle(
            _wrapped(title, width), fontsize=_TITLE_PT, fontweight="bold", color=_TEXT_COLOUR, linespacing=1.25
        )
        if heading.get_window_extent().width <= figure.bbox.width * _TITLE_MARGIN:
            return


def _shade_unseen(ax: Axes, data: ChartData, unseen: Sequence[tuple[float, float]]) -> None:
    """Cross-hatch the spans some source of the digest did not cover (before the panel draws, so its legend has it)."""
    start, end = data.window.start.timestamp(), data.window.end.timestamp()
    for index, (first, last) in enumerate(sorted(unseen)):
        ax.axvspan(
            max(first, start),
            min(last, end),
            facecolor="#F6E0E0",
            edgecolor="#C98C8C",
            hatch="xx",
            linewidth=0,
            label="not seen (coverage)" if index == 0 else None,
            zorder=0,
        )


def legend_label(counts: Counts) -> str:
    """A series' legend entry: its name made visible and cut to `LEGEND_LABEL_LIMIT` around "…", then its total."""
    name = middle_ellipsis(visible(counts.label), LEGEND_LABEL_LIMIT)
    return for_matplotlib(f"{name} · {fmt_int(counts.total)}")


def _legend(ax: Axes) -> None:
    # "best" places the legend where it covers the fewest bars, points and lines (the thresholds included).
    ax.legend(loc="best", fontsize=_LEGEND_PT, frameon=True, framealpha=0.92, edgecolor="#CCCCCC", borderpad=0.5)


def _draw_errors(ax: Axes, data: ChartData) -> None:
    _panel_title(ax, f"Error lines per {_per_bucket(data)} · top workloads")
    panel = data.errors
    if panel is None:
        _message(ax, f"not available: {data.errors_reason}")
        return
    if not panel.series:
        _message(ax, "no error line in the window" + _blind_note(data, panel, "no log line at all"), muted=False)
        return
    edges = _bucket_edges(data)
    for position, counts in enumerate(panel.series):
        colour = _SERIES_COLOURS[position % len(_SERIES_COLOURS)]
        # The worst workload is filled (it is the story); the next ones are outlines drawn over it.
        ax.stairs(
            _drawn(counts.values),
            edges,
            color=colour,
            linewidth=_LINE_WIDTH,
            baseline=0,
            fill=position == 0,
            alpha=0.85 if position == 0 else 1.0,
            zorder=2 + position,
            label=legend_label(counts),
        )
    _shade_gaps(ax, edges, panel.blind, "no log line")
    _style_counts_axis(ax, max(counts.peak for counts in panel.series), len(panel.series) + any(panel.blind))
    _legend(ax)


def _draw_flags(ax: Axes, data: ChartData) -> None:
    _panel_title(ax, f"5xx per {_per_bucket(data)} by Envoy response flag")
    panel = data.flags
    if panel is None:
        _message(ax, f"not available: {data.flags_reason}")
        return
    if not panel.series:
        _message(ax, "no 5xx answered through the gateway" + _blind_note(data, panel, "no access log"), muted=False)
        return
    edges = _bucket_edges(data)
    lefts = edges[:-1]
    widths = [(right - left) * 0.86 for left, right in itertools.pairwise(edges)]
    bottoms = [0.0] * len(lefts)
    flagged = 0
    for counts in panel.series:
        if counts.label == APP_5XX:
            colour = _APP_COLOUR
        else:
            colour = _SERIES_COLOURS[flagged % len(_SERIES_COLOURS)]
            flagged += 1
        heights = [float(value or 0) for value in counts.values]
        ax.bar(
            lefts,
            heights,
            width=widths,
            bottom=bottoms,
            align="edge",
            color=colour,
            zorder=2,
            label=legend_label(counts),
        )
        bottoms = [bottom + height for bottom, height in zip(bottoms, heights, strict=True)]
    _shade_gaps(ax, edges, panel.blind, "no access log")
    _style_counts_axis(ax, max(bottoms), len(panel.series) + any(panel.blind))
    _legend(ax)


def _conntrack_line(fill: ConntrackFill) -> tuple[list[float], list[float]]:
    """The 5-minute points, broken (NaN) where samples are missing rather than bridged."""
    times: list[float] = []
    values: list[float] = []
    previous: float | None = None
    for moment, value in fill.points:
        if previous is not None and moment - previous > 2 * CONNTRACK_STEP_SECONDS:
            times.append((previous + moment) / 2)
            values.append(math.nan)
        times.append(moment)
        values.append(value)
        previous = moment
    return times, values


def _draw_conntrack(ax: Axes, data: ChartData) -> None:
    fill = data.conntrack
    if fill is None:
        _panel_title(ax, "Conntrack fill of the worst node")
        _message(ax, f"not available: {data.conntrack_reason}")
        return
    # The one line is named in the title and the policy's lines where they start: a legend box would hide either
    # the data or the thresholds, since the fill can reach any height.
    node = middle_ellipsis(visible(fill.node), _NODE_LIMIT)
    title = f"Conntrack fill · {node}"
    if fill.peak_at is not None:
        title += f" · peak {fmt_percent(fill.peak)} at {local_time(fill.peak_at, data.window)}"
    _panel_title(ax, for_matplotlib(title))
    times, values = _conntrack_line(fill)
    highest = max(value for _, value in fill.points)
    ax.fill_between(times, values, color=_SERIES_COLOURS[1], alpha=0.15, linewidth=0)
    ax.plot(times, values, color=_SERIES_COLOURS[1], linewidth=_LINE_WIDTH, zorder=4)
    if fill.peak_at is not None:
        ax.plot([fill.peak_at], [highest], marker="o", markersize=9, color=_SERIES_COLOURS[1], zorder=5, clip_on=False)
    for ratio, colour, name in ((fill.warn_ratio, _WARN_COLOUR, "warn"), (fill.crit_ratio, _CRIT_COLOUR, "crit")):
        ax.axhline(ratio, color=colour, linewidth=2.2, linestyle=(0, (5, 3)), zorder=3)
        ax.annotate(
            f"{name} {fmt_percent(ratio)}",
            (0, ratio),
            xycoords=("axes fraction", "data"),
            xytext=(4, 2),
            textcoords="offset points",
            ha="left",
            va="bottom",
            fontsize=_LEGEND_PT,
            fontweight="bold",
            color=colour,
            zorder=4,
            bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.75},
        )
    ax.set_ylim(0, 1.0)
    ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0, symbol=" %"))
    ax.grid(axis="y", color="#DDDDDD", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("right", "top"):
        ax.spines[side].set_visible(False)


def time_ticks(window: Window) -> tuple[list[float], list[str], list[float]]:
    """Major ticks (unix seconds) with their labels, and minor ticks, on the reader's whole hours or midnights.

    Up to 30 h: every 3 hours ("03:00"), every hour for short windows; longer: every local midnight ("Mon 20"),
    every other one beyond 8 days. Computed in the reader's zone, so a DST day still ticks at 03:00 local.
    """
    start, end = window.start.timestamp(), window.end.timestamp()
    hours = window.seconds / 3600
    daily = hours > 30
    every_days = max(1, math.ceil(hours / 24 / 8))
    every_hours = 3 if hours > 12 else 1
    major: list[float] = []
    labels: list[str] = []
    minor: list[float] = []
    moment = math.ceil(start / 900) * 900  # every quarter of an hour covers zones at :30 and :45
    while moment <= end:
        local = datetime.fromtimestamp(moment, tz=window.zone)
        if local.minute == 0:
            if daily and local.hour == 0 and local.toordinal() % every_days == 0:
                major.append(moment)
                labels.append(local.strftime("%a %d"))
            elif not daily and local.hour % every_hours == 0:
                major.append(moment)
                labels.append(local.strftime("%H:%M"))
            elif (daily and local.hour % 6 == 0) or not daily:
                minor.append(moment)
        moment += 900
    return major, labels, minor


def _time_axis(ax: Axes, data: ChartData) -> None:
    window = data.window
    ax.set_xlim(window.start.timestamp(), window.end.timestamp())
    major, labels, minor = time_ticks(window)
    ax.xaxis.set_major_locator(FixedLocator(major))
    ax.xaxis.set_minor_locator(FixedLocator(minor))
    names = dict(zip(major, labels, strict=True))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _position: names.get(value, "")))
    ax.set_xlabel(f"time ({_zone_name(window)})", fontsize=_LABEL_PT, color=_MUTED_COLOUR)


# The sources each panel is drawn from: a panel shades only the unseen spans of its own sources.
PANEL_SOURCES = (("logs",), ("access logs", "Istio metrics"), ("node_exporter",))


def render_chart(data: ChartData, path: Path, title: str, unseen: Sequence[tuple[float, float, str]] = ()) -> None:
    """Draw the three panels into a PNG at ``path`` (1080 × 1350 px), titled ``title``.

    ``unseen`` are the spans (unix seconds) the digest's coverage could not vouch for, with the source that missed
    them: each panel shades those of its own sources (`PANEL_SOURCES`), so a quiet stretch of a line is never read
    as a calm one. A long title (the headline's unseen parts) is wrapped.
    """
    figure = chart_figure(data, title, unseen)
    try:
        figure.savefig(path, format="png", dpi=_DPI)
    finally:
        figure.clear()  # drop every artist now rather than at the next garbage collection


def chart_figure(data: ChartData, title: str, unseen: Sequence[tuple[float, float, str]] = ()) -> Figure:
    """The chart's figure on an Agg canvas, drawn but not saved (`render_chart` saves it; tests inspect it)."""
    # Constrained layout (matplotlib's successor of tight_layout) fits titles, legends and tick labels.
    layout = ConstrainedLayoutEngine(h_pad=0.1, hspace=0.07, w_pad=0.08)
    figure = Figure(figsize=_FIG_SIZE, dpi=_DPI, layout=layout, facecolor="white")
    FigureCanvasAgg(figure)  # attaches the Agg canvas to the figure; no window, no pyplot
    try:
        axes = figure.subplots(3, 1, sharex=True, height_ratios=(1.15, 1.0, 1.0))
        _fit_title(figure, title)
        for ax in axes:
            ax.tick_params(labelsize=_TICK_PT, colors=_TEXT_COLOUR)
            ax.tick_params(axis="x", which="major", length=6, width=1.2)
        for ax, sources in zip(axes, PANEL_SOURCES, strict=True):
            _shade_unseen(ax, data, [(first, last) for first, last, source in unseen if source in sources])
        _draw_errors(axes[0], data)
        _draw_flags(axes[1], data)
        _draw_conntrack(axes[2], data)
        _time_axis(axes[2], data)
    except BaseException:
        figure.clear()
        raise
    return figure

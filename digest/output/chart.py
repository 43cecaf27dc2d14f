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

What each panel counts, and how it is asked, is `digest.output.chart_data`'s.

Every label- or log-derived string drawn or captioned (workload and flag labels, the node, the headline, a
backend's error) goes through `digest.output.safe_text`: control and bidi characters become visible escapes and ``$``
cannot switch on matplotlib's math mode. Text is wrapped *after* it is made visible (so the line breaks drawn are
real ones, never a ``\n`` escape), and the title is wrapped until its drawn width fits the figure. A legend label
longer than `LEGEND_LABEL_LIMIT` characters (a 300-character pod name would run off the 1080 px figure) keeps
its start and end around an ellipsis: ``payments-api-…-7d9f8``.

Rendering uses matplotlib's object API on the Agg canvas (``Figure`` + ``FigureCanvasAgg``), matplotlib's recipe
for servers: pyplot's global figure registry is never touched, so nothing is left open and it is safe to call from
a worker thread (``asyncio.to_thread(render_chart, …)``) in the bot.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, PercentFormatter

from checks.contract import (
    Window,
    fmt_int,
    fmt_percent,
    local_time,
)
from digest.output.chart_data import APP_5XX, CONNTRACK_STEP_SECONDS, ChartData, ConntrackFill, Counts, HourlyPanel
from digest.output.safe_text import for_matplotlib, middle_ellipsis, visible

CAPTION_LIMIT = 1024  # Telegram's limit for a photo caption

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
_SAID_PT = 11  # the line under the error panel's title: what the worst workload's errors said
_SAID_WIDTH = 80  # characters of it per line that fit the panel's width at that size
_LEGEND_PT = 11
_LINE_WIDTH = 2.8
# Characters of a series' name in a legend: the widest that fits beside its count at the legend's size.
LEGEND_LABEL_LIMIT = 40
_NODE_LIMIT = 24  # characters of the node's name in the conntrack panel's title
_MESSAGE_WIDTH = 50  # characters per line of a panel's message ("not available: <reason>")
_MESSAGE_LINES = 6


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


def chart_caption(headline: str, data: ChartData, said: str = "") -> str:
    """The photo's caption: the headline, one line for the panels, then what the worst workload's errors said.

    Never over Telegram's 1,024 characters; ``said`` (`digest.output.render.most_said`) is redacted already.
    """
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
    if said:
        caption += f"\n{_short(visible(said), 300)}"
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


def _draw_errors(ax: Axes, data: ChartData, said: str = "") -> None:
    if said:
        # The title is lifted by the lines of small text that sit between it and the plot; they are kept out of the
        # layout (wrapped to the panel's width instead), which would otherwise narrow every panel to fit them.
        lines = for_matplotlib(said, width=_SAID_WIDTH, max_lines=2)
        ax.set_title(
            f"Error lines per {_per_bucket(data)} · top workloads",
            loc="left",
            fontsize=_PANEL_TITLE_PT,
            fontweight="bold",
            color=_TEXT_COLOUR,
            pad=10 + _SAID_PT * 1.35 * (lines.count("\n") + 1),
        )
        note = ax.annotate(
            lines,
            xy=(0, 1),
            xycoords="axes fraction",
            xytext=(0, 5),
            textcoords="offset points",
            ha="left",
            va="bottom",
            fontsize=_SAID_PT,
            color=_TEXT_COLOUR,
        )
        note.set_in_layout(False)
    else:
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


def render_chart(
    data: ChartData, path: Path, title: str, unseen: Sequence[tuple[float, float, str]] = (), said: str = ""
) -> None:
    """Draw the three panels into a PNG at ``path`` (1080 × 1350 px), titled ``title``.

    ``unseen`` are the spans (unix seconds) the digest's coverage could not vouch for, with the source that missed
    them: each panel shades those of its own sources (`PANEL_SOURCES`), so a quiet stretch of a line is never read
    as a calm one. A long title (the headline's unseen parts) is wrapped. ``said`` (what the worst workload's errors
    said) is written under the error panel's title.
    """
    figure = chart_figure(data, title, unseen, said)
    try:
        figure.savefig(path, format="png", dpi=_DPI)
    finally:
        figure.clear()  # drop every artist now rather than at the next garbage collection


def chart_figure(
    data: ChartData, title: str, unseen: Sequence[tuple[float, float, str]] = (), said: str = ""
) -> Figure:
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
        _draw_errors(axes[0], data, said)
        _draw_flags(axes[1], data)
        _draw_conntrack(axes[2], data)
        _time_axis(axes[2], data)
    except BaseException:
        figure.clear()
        raise
    return figure

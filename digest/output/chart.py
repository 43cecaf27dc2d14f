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
backend's error) goes through `digest.output.safe_text`: control and bidi characters become visible escapes. Text
is wrapped *after* it is made visible (so the line breaks drawn are real ones, never a ``\n`` escape), and the
title is wrapped until its drawn width fits the figure. A legend label
longer than `LEGEND_LABEL_LIMIT` characters (a 300-character pod name would run off the 1080 px figure) keeps
its start and end around an ellipsis: ``payments-api-…-7d9f8``.

The drawing is Pillow's (`digest.output.drawing`, which says why and how), laid out here the way matplotlib's
constrained layout laid out the old chart: the title on top, three panels of heights 1.15 : 1 : 1 sharing the time
axis, their left edge where the widest tick label ends. The same sizes in points at 150 dpi, the same colours and
the same legend placement. `chart_drawing` returns the image with every text drawn and its box, for tests; it is
a pure function of its arguments, safe in a worker thread (``asyncio.to_thread(render_chart, …)``) in the bot.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from digest.checks.contract import (
    Window,
    fmt_int,
    fmt_percent,
    local_time,
)
from digest.output.brief import zone_name
from digest.output.chart_data import APP_5XX, CONNTRACK_STEP_SECONDS, ChartData, ConntrackFill, Counts, HourlyPanel
from digest.output.drawing import (
    GRID_COLOUR,
    MUTED_COLOUR,
    TEXT_COLOUR,
    Box,
    Canvas,
    Drawing,
    LegendEntry,
    Panel,
    nice_ticks,
    points,
)
from digest.output.safe_text import for_drawing, middle_ellipsis, visible

CAPTION_LIMIT = 1024  # Telegram's limit for a photo caption

# Okabe-Ito: distinguishable with the common colour-vision deficiencies, and on a dim phone screen.
_SERIES_COLOURS = ("#D55E00", "#0072B2", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
_APP_COLOUR = "#8C8C8C"
_WARN_COLOUR = "#E69F00"
_CRIT_COLOUR = "#C0392B"

_WIDTH, _HEIGHT = 1080, 1350  # a phone's portrait screen (7.2 × 9 inches at 150 dpi before)
# Font sizes in points at 150 dpi, the old chart's.
_TITLE_SIZE = points(16)
_PANEL_TITLE_SIZE = points(13)
_LABEL_SIZE = points(12)
_TICK_SIZE = points(12)
_SAID_SIZE = points(11)  # the line under the error panel's title: what the worst workload's errors said
_SAID_WIDTH = 80  # characters of it per line that fit the panel's width at that size
_LEGEND_SIZE = points(11)
_LINE_WIDTH = points(2.8)
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

# The old layout's measures, in points at 150 dpi: margins of 0.08 inch at the sides and 0.1 at top and bottom,
# matplotlib's tick lengths and paddings, the panels' titles 8 points above their plots.
_PAD_X = points(0.08 * 72)
_PAD_Y = points(0.1 * 72)
_TICK_PAD = points(3.5)
_Y_TICK_LENGTH = points(3.5)
_X_MAJOR_TICK = (points(6), points(1.2))  # length, width
_X_MINOR_TICK = (points(2), points(0.6))
_TITLE_PAD = points(8)
_PANEL_GAP = points(10)  # between a panel's tick marks and the next panel's title
_LABEL_PAD = points(4)  # between the time labels and the axis' name
_HEIGHT_RATIOS = (1.15, 1.0, 1.0)  # the error panel is the story: a little taller
_SPINE_COLOUR = "#000000"
_BLIND_FILL, _BLIND_HATCH, _BLIND_SPACING = "#EEEEEE", "#BBBBBB", 18.0
_UNSEEN_FILL, _UNSEEN_HATCH, _UNSEEN_SPACING = "#F6E0E0", "#C98C8C", 24.0
_BAR_SHARE = 0.86  # of a bucket's width: the gaps tell the buckets apart
_MESSAGE_BOX = ("#F4F4F4", "#DDDDDD")  # fill and edge of a "not available" message


def _bucket_edges(data: ChartData) -> list[float]:
    """Bucket edges clipped to the window (unix seconds)."""
    start, end = data.window.start.timestamp(), data.window.end.timestamp()
    edges = [min(max(moment, start), end) for moment in data.buckets]
    edges.append(min(data.buckets[-1] + data.bucket_seconds, end) if data.buckets else end)
    return edges


def _stairs(values: Sequence[int | None], edges: Sequence[float]) -> list[list[tuple[float, float]]]:
    """The step outline of each run of counts, from the baseline and back to it; a bucket without lines is a gap."""
    runs: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    for index, value in enumerate(values):
        if value is None:
            if current:
                runs.append([*current, (edges[index], 0.0)])
                current = []
            continue
        if not current:
            current = [(edges[index], 0.0)]
        current += [(edges[index], float(value)), (edges[index + 1], float(value))]
    if current:
        runs.append([*current, (edges[len(values)], 0.0)])
    return runs


def _per_bucket(data: ChartData) -> str:
    return "hour" if data.bucket_seconds == 3600 else f"{data.bucket_seconds // 3600} h"


@dataclass(frozen=True)
class _Plan:
    """What a panel shows, known before the layout: the layout needs its tick labels and the lines over it."""

    title: str
    y_ticks: tuple[tuple[float, str], ...] = ()
    y_top: float = 1.0
    message: str | None = None  # a panel without a plot says this instead
    muted: bool = True  # the message is a failure (grey box) rather than a finding (plain text)
    said: str = ""  # the error panel's lines under its title, unwrapped


def _counts_plan(title: str, highest: float, legend_entries: int, said: str = "") -> _Plan:
    # Head-room above the highest bar, as tall as the legend, so that the legend never has to cover data.
    legend_share = min(0.55, 0.1 + 0.09 * legend_entries)
    top = max(highest / (1 - legend_share), 4)
    ticks = tuple((value, f"{value:,.0f}") for value in nice_ticks(top, bins=4, integer=True, min_ticks=3))
    return _Plan(title, ticks, top, said=said)


def _errors_plan(data: ChartData, said: str) -> _Plan:
    title = f"Error lines per {_per_bucket(data)} · top workloads"
    panel = data.errors
    if panel is None:
        return _Plan(title, message=f"not available: {data.errors_reason}", said=said)
    if not panel.series:
        message = "no error line in the window" + _blind_note(data, panel, "no log line at all")
        return _Plan(title, message=message, muted=False, said=said)
    return _counts_plan(title, max(counts.peak for counts in panel.series), len(panel.series) + any(panel.blind), said)


def _flags_plan(data: ChartData) -> _Plan:
    title = f"5xx per {_per_bucket(data)} by Envoy response flag"
    panel = data.flags
    if panel is None:
        return _Plan(title, message=f"not available: {data.flags_reason}")
    if not panel.series:
        return _Plan(
            title,
            message="no 5xx answered through the gateway" + _blind_note(data, panel, "no access log"),
            muted=False,
        )
    stacked = [sum(counts.values[index] or 0 for counts in panel.series) for index in range(len(data.buckets))]
    return _counts_plan(title, max(stacked, default=0), len(panel.series) + any(panel.blind))


def _conntrack_plan(data: ChartData) -> _Plan:
    fill = data.conntrack
    if fill is None:
        return _Plan("Conntrack fill of the worst node", message=f"not available: {data.conntrack_reason}")
    # The one line is named in the title and the policy's lines where they start: a legend box would hide either
    # the data or the thresholds, since the fill can reach any height.
    node = middle_ellipsis(visible(fill.node), _NODE_LIMIT)
    title = f"Conntrack fill · {node}"
    if fill.peak_at is not None:
        title += f" · peak {fmt_percent(fill.peak)} at {local_time(fill.peak_at, data.window)}"
    ticks = tuple((share / 4, f"{25 * share} %") for share in range(5))
    return _Plan(for_drawing(title), ticks, 1.0)


# Characters per title line at the title's size on the 1080 px wide figure, to start with: `_fit_title` narrows it
# until the drawn title fits, since the width of a character depends on the font and the glyph.
_TITLE_WIDTH = 52
_TITLE_MIN_WIDTH = 16
_TITLE_LINES = (3, 4)  # at most, for the status line and for the unseen parts: the panels keep their height
_TITLE_MARGIN = 0.96  # share of the figure's width the title may take
_TITLE_SPACING = 1.25  # baseline to baseline, in font sizes
_NUMBER_AND_UNIT = re.compile(r"(\d) (h|min|%)(?!\w)")


def _wrapped(title: str, width: int) -> str:
    r"""The headline made visible and wrapped to ``width`` characters, the unseen parts starting a line of their own.

    Each part is escaped before it is wrapped: the newlines are the wrapping's, a newline in a label stays ``\n``.
    """
    # A number keeps its unit on its line ("24 h", "80 %"): a no-break space, which the wrapping never breaks at.
    title = _NUMBER_AND_UNIT.sub("\\1\u00a0\\2", title)
    head, separator, unseen = title.partition(" · not seen: ")
    parts = [(head, _TITLE_LINES[0])] + ([(f"not seen: {unseen}", _TITLE_LINES[1])] if separator else [])
    return "\n".join(for_drawing(part, width=width, max_lines=lines) for part, lines in parts)


def _fit_title(canvas: Canvas, title: str) -> str:
    """The title wrapped narrower until its drawn width lies within the figure's margin."""
    widths = range(_TITLE_WIDTH, _TITLE_MIN_WIDTH - 1, -4)
    return canvas.fitted(lambda width: _wrapped(title, width), widths, _TITLE_SIZE, _WIDTH * _TITLE_MARGIN, bold=True)


def _said_lines(canvas: Canvas, said: str, room: float) -> str:
    """What the errors said on at most two lines, wrapped narrower until they fit ``room`` pixels."""
    return canvas.fitted(
        lambda width: for_drawing(said, width=width, max_lines=2), range(_SAID_WIDTH, 20, -4), _SAID_SIZE, room
    )


def _title_size(canvas: Canvas, title: str, room: float) -> float:
    """The panel title's size: its own, or smaller when a long node name would run off the figure."""
    size = _PANEL_TITLE_SIZE
    while size > points(8) and canvas.width_of(title, size, bold=True) > room:
        size -= 1
    return size


def _heading_room(said_lines: str) -> float:
    """Pixels between a panel's plot and its title's baseline: the lines of what was said sit in between."""
    if not said_lines:
        return _TITLE_PAD
    return points(10 + 11 * 1.35 * (said_lines.count("\n") + 1))


def _horizontal(
    canvas: Canvas, plans: Sequence[_Plan], x_range: tuple[float, float], major: Sequence[float], labels: Sequence[str]
) -> tuple[float, float]:
    """The plots' left and right edges: after the widest tick label, and where every time label fits the figure."""
    widest = max((canvas.width_of(label, _TICK_SIZE) for plan in plans for _, label in plan.y_ticks), default=0.0)
    left = _PAD_X + widest + _TICK_PAD + _Y_TICK_LENGTH
    right = _WIDTH - _PAD_X
    start, end = x_range
    shares = [(moment - start) / (end - start) if end > start else 0.0 for moment in major]
    for share, label in zip(shares, labels, strict=True):
        # A label is centred on its tick: an early tick stands at least half the label's width from the edge (this
        # matters when every panel is a message, without tick labels on the left to push the plots right).
        if share < 0.5:
            left = max(left, (_PAD_X + canvas.width_of(label, _TICK_SIZE) / 2 - share * right) / (1 - share))
    for share, label in zip(shares, labels, strict=True):
        if share > 0:
            # The label is centred on its tick: the tick may stand no further right than half the label's width.
            right = min(right, left + (_WIDTH - _PAD_X - canvas.width_of(label, _TICK_SIZE) / 2 - left) / share)
    return left, right


def _plot_boxes(canvas: Canvas, top: float, left: float, right: float, rooms: Sequence[float]) -> list[Box]:
    """The three plots' boxes: the height left by the titles and the time axis, shared 1.15 : 1 : 1."""
    title_ascent = canvas.font(_PANEL_TITLE_SIZE, bold=True).getmetrics()[0]
    tick_ascent, tick_descent = canvas.font(_TICK_SIZE).getmetrics()
    label_ascent, label_descent = canvas.font(_LABEL_SIZE).getmetrics()
    headers = [
        (_X_MAJOR_TICK[0] if index else 0.0) + _PANEL_GAP + title_ascent + room for index, room in enumerate(rooms)
    ]
    footer = _X_MAJOR_TICK[0] + _TICK_PAD + tick_ascent + tick_descent + _LABEL_PAD + label_ascent + label_descent
    unit = (_HEIGHT - _PAD_Y - footer - top - sum(headers)) / sum(_HEIGHT_RATIOS)
    boxes: list[Box] = []
    y = top
    for header, ratio in zip(headers, _HEIGHT_RATIOS, strict=True):
        y += header
        boxes.append((left, y, right, y + unit * ratio))
        y += unit * ratio
    return boxes


def _message(canvas: Canvas, box: Box, text: str, muted: bool) -> None:
    """A panel without a plot: its message in the middle, no axes drawn."""
    lines = for_drawing(text, width=_MESSAGE_WIDTH, max_lines=_MESSAGE_LINES)
    centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
    if muted:
        left, top, right, bottom = canvas.text_box(centre, lines, _LABEL_SIZE, anchor=("m", "m"), spacing=1.4)
        pad = 0.6 * _LABEL_SIZE
        canvas.rectangle(
            (left - pad, top - pad, right + pad, bottom + pad),
            fill=_MESSAGE_BOX[0],
            outline=_MESSAGE_BOX[1],
            width=points(1),
            radius=pad,
        )
    canvas.text(centre, lines, _LABEL_SIZE, MUTED_COLOUR if muted else TEXT_COLOUR, anchor=("m", "m"), spacing=1.4)


def _shade_gaps(panel: Panel, edges: Sequence[float], blind: Sequence[bool]) -> bool:
    """Hatch the buckets in which the backend holds no line at all: blind, not quiet. Whether there was one."""
    for index, is_blind in enumerate(blind):
        if is_blind:
            panel.span(edges[index], edges[index + 1], _BLIND_FILL, "/", _BLIND_HATCH, _BLIND_SPACING)
    return any(blind)


def _blind_entry(label: str) -> LegendEntry:
    return LegendEntry(label, _BLIND_FILL, "hatch", hatch="/", hatch_colour=_BLIND_HATCH, hatch_spacing=_BLIND_SPACING)


_UNSEEN_ENTRY = LegendEntry(
    "not seen (coverage)", _UNSEEN_FILL, "hatch", hatch="x", hatch_colour=_UNSEEN_HATCH, hatch_spacing=_UNSEEN_SPACING
)


def legend_label(counts: Counts) -> str:
    """A series' legend entry: its name made visible and cut to `LEGEND_LABEL_LIMIT` around "…", then its total."""
    name = middle_ellipsis(visible(counts.label), LEGEND_LABEL_LIMIT)
    return for_drawing(f"{name} · {fmt_int(counts.total)}")


def _draw_errors(panel: Panel, data: ChartData, plan: _Plan, entries: list[LegendEntry]) -> None:
    errors = data.errors
    if errors is None:
        return
    edges = _bucket_edges(data)
    blind = _shade_gaps(panel, edges, errors.blind)
    panel.y_axis(plan.y_ticks, _TICK_SIZE, TEXT_COLOUR, GRID_COLOUR)
    for position, counts in enumerate(errors.series):
        colour = _SERIES_COLOURS[position % len(_SERIES_COLOURS)]
        # The worst workload is filled (it is the story); the next ones are outlines drawn over it.
        for run in _stairs(counts.values, edges):
            if position == 0:
                panel.area(run, colour, 0.85)
            else:
                panel.path(run, colour, _LINE_WIDTH)
        entries.append(
            LegendEntry(legend_label(counts), colour, "patch", alpha=0.85)
            if position == 0
            else LegendEntry(legend_label(counts), colour, "line")
        )
    if blind:
        entries.append(_blind_entry("no log line"))
    panel.spines(_SPINE_COLOUR)
    # Placed where it covers the fewest bars, steps and lines, as matplotlib's loc="best" did.
    panel.legend(entries, _LEGEND_SIZE, TEXT_COLOUR)


def _draw_flags(panel: Panel, data: ChartData, plan: _Plan, entries: list[LegendEntry]) -> None:
    flags = data.flags
    if flags is None:
        return
    edges = _bucket_edges(data)
    if _shade_gaps(panel, edges, flags.blind):
        entries.append(_blind_entry("no access log"))
    panel.y_axis(plan.y_ticks, _TICK_SIZE, TEXT_COLOUR, GRID_COLOUR)
    bottoms = [0.0] * (len(edges) - 1)
    flagged = 0
    for counts in flags.series:
        if counts.label == APP_5XX:
            colour = _APP_COLOUR
        else:
            colour = _SERIES_COLOURS[flagged % len(_SERIES_COLOURS)]
            flagged += 1
        for index, (left, right) in enumerate(itertools.pairwise(edges)):
            height = float(counts.values[index] or 0)
            if height > 0:
                panel.bar(left, left + (right - left) * _BAR_SHARE, bottoms[index], bottoms[index] + height, colour)
            bottoms[index] += height
        entries.append(LegendEntry(legend_label(counts), colour))
    panel.spines(_SPINE_COLOUR)
    panel.legend(entries, _LEGEND_SIZE, TEXT_COLOUR)


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


def _runs(times: Sequence[float], values: Sequence[float]) -> list[list[tuple[float, float]]]:
    """The line's stretches between its NaN breaks."""
    runs: list[list[tuple[float, float]]] = [[]]
    for moment, value in zip(times, values, strict=True):
        if math.isnan(value):
            runs.append([])
        else:
            runs[-1].append((moment, value))
    return [run for run in runs if run]


def _draw_conntrack(panel: Panel, data: ChartData, plan: _Plan, entries: list[LegendEntry]) -> None:
    del entries  # no legend: the node is named in the title, the policy's lines where they start
    fill = data.conntrack
    if fill is None:
        return
    canvas = panel.canvas
    panel.y_axis(plan.y_ticks, _TICK_SIZE, TEXT_COLOUR, GRID_COLOUR)
    runs = _runs(*_conntrack_line(fill))
    colour = _SERIES_COLOURS[1]
    for run in runs:
        panel.area([(run[0][0], 0.0), *run, (run[-1][0], 0.0)], colour, 0.15)
    lines = ((fill.warn_ratio, _WARN_COLOUR, "warn"), (fill.crit_ratio, _CRIT_COLOUR, "crit"))
    for ratio, line_colour, _ in lines:
        panel.level(ratio, line_colour, points(2.2), (points(5 * 2.2), points(3 * 2.2)))
    for run in runs:
        panel.path(run, colour, _LINE_WIDTH)
    if fill.peak_at is not None:
        highest = max(value for _, value in fill.points)
        canvas.circle((panel.x(fill.peak_at), panel.y(highest)), points(9) / 2, colour)
    panel.spines(_SPINE_COLOUR)
    for ratio, line_colour, name in lines:
        # Over a white box, so that neither the fill nor the line under it blurs the label.
        at = (panel.box[0] + points(4), panel.y(ratio) - points(2))
        label = f"{name} {fmt_percent(ratio)}"
        left, top, right, bottom = canvas.text_box(at, label, _LEGEND_SIZE, bold=True, anchor=("l", "b"))
        pad = 0.1 * _LEGEND_SIZE
        canvas.rectangle((left - pad, top - pad, right + pad, bottom + pad), fill="#FFFFFF", alpha=0.75)
        canvas.text(at, label, _LEGEND_SIZE, line_colour, bold=True, anchor=("l", "b"))


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


def _time_axis(panels: Sequence[Panel], plans: Sequence[_Plan], data: ChartData) -> None:
    """Tick marks under every plotted panel; the labels and the axis' name under the last panel only."""
    major, labels, minor = time_ticks(data.window)
    for panel, plan in zip(panels, plans, strict=True):
        if plan.message is None:  # a message panel has no axes to mark
            panel.x_ticks(major, TEXT_COLOUR, *_X_MAJOR_TICK)
            panel.x_ticks(minor, TEXT_COLOUR, *_X_MINOR_TICK)
    bottom_panel = panels[-1]
    canvas = bottom_panel.canvas
    row = bottom_panel.box[3] + _X_MAJOR_TICK[0] + _TICK_PAD
    lowest = row
    for moment, label in zip(major, labels, strict=True):
        box = canvas.text((bottom_panel.x(moment), row), label, _TICK_SIZE, TEXT_COLOUR, anchor=("m", "t"))
        lowest = max(lowest, box[3])
    if not labels:
        ascent, descent = canvas.font(_TICK_SIZE).getmetrics()
        lowest = row + ascent + descent
    left, _, right, _ = bottom_panel.box
    canvas.text(
        ((left + right) / 2, lowest + _LABEL_PAD),
        f"time ({zone_name(data.window)})",
        _LABEL_SIZE,
        MUTED_COLOUR,
        anchor=("m", "t"),
    )


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
    chart_drawing(data, title, unseen, said).image.save(path, format="PNG")


def chart_drawing(
    data: ChartData, title: str, unseen: Sequence[tuple[float, float, str]] = (), said: str = ""
) -> Drawing:
    """The chart drawn, with every text and legend frame on it (`render_chart` saves its image; tests read it)."""
    canvas = Canvas(_WIDTH, _HEIGHT)
    heading = _fit_title(canvas, title)
    title_box = canvas.text(
        (_WIDTH / 2, _PAD_Y), heading, _TITLE_SIZE, TEXT_COLOUR, bold=True, anchor=("m", "t"), spacing=_TITLE_SPACING
    )
    plans = (_errors_plan(data, said), _flags_plan(data), _conntrack_plan(data))
    major, labels, _ = time_ticks(data.window)
    window = data.window
    x_range = (window.start.timestamp(), window.end.timestamp())
    left, right = _horizontal(canvas, plans, x_range, major, labels)
    # The lines of what was said are wrapped to the plot's width: they sit over it, between its title and the plot.
    said_lines = [_said_lines(canvas, plan.said, _WIDTH - _PAD_X - left) if plan.said else "" for plan in plans]
    boxes = _plot_boxes(canvas, title_box[3], left, right, [_heading_room(lines) for lines in said_lines])
    panels = [Panel(canvas, box, x_range, (0.0, plan.y_top)) for plan, box in zip(plans, boxes, strict=True)]
    draws = (_draw_errors, _draw_flags, _draw_conntrack)
    for panel, plan, lines, sources, draw in zip(panels, plans, said_lines, PANEL_SOURCES, draws, strict=True):
        box = panel.box
        room = _heading_room(lines)
        canvas.text(
            (box[0], box[1] - room),
            plan.title,
            _title_size(canvas, plan.title, _WIDTH - _PAD_X - box[0]),
            TEXT_COLOUR,
            bold=True,
        )
        if lines:
            canvas.text((box[0], box[1] - points(5)), lines, _SAID_SIZE, TEXT_COLOUR, anchor=("l", "b"))
        # The spans some source of the digest did not cover, under everything else, in the legend first.
        spans = sorted((first, last) for first, last, source in unseen if source in sources)
        for first, last in spans:
            panel.span(max(first, x_range[0]), min(last, x_range[1]), _UNSEEN_FILL, "x", _UNSEEN_HATCH, _UNSEEN_SPACING)
        if plan.message is not None:
            _message(canvas, box, plan.message, plan.muted)
        else:
            draw(panel, data, plan, [_UNSEEN_ENTRY] if spans else [])
    _time_axis(panels, plans, data)
    return canvas.finish()

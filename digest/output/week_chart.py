"""The week's chart: each day's score and error lines, one bar per day, in a PNG sized for a phone.

Two panels, Monday to Sunday: the score of each day's digest (its bar coloured by the day's status, the maximum drawn
as a line), and the error lines of each day's worst workload (error_lines' value). A day without a score or without
a count has no bar but a "?" where the bar would stand, so an unseen day never reads as a perfect or a quiet one.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.ticker import FuncFormatter, MaxNLocator

from digest.output.chart import CAPTION_LIMIT
from digest.output.render import week_headline
from digest.output.safe_text import for_matplotlib, visible
from digest.pipeline.score import DigestStatus
from digest.pipeline.week import Week, format_value

_FIG_SIZE = (7.2, 7.2)  # inches: 1080 × 1080 px at 150 dpi
_DPI = 150
_TITLE_PT = 15
_PANEL_TITLE_PT = 13
_TICK_PT = 12
_VALUE_PT = 11
_TEXT_COLOUR = "#222222"
_MUTED_COLOUR = "#666666"
_STATUS_COLOURS = {
    DigestStatus.OK: "#009E73",
    DigestStatus.WARNING: "#E69F00",
    DigestStatus.CRITICAL: "#C0392B",
    DigestStatus.UNKNOWN: "#8C8C8C",
}
_ERRORS_COLOUR = "#D55E00"
_TITLE_WIDTH = 60


def week_caption(week: Week) -> str:
    """The photo's caption: the week's headline and its score sparkline, within Telegram's limit."""
    caption = f"{visible(week_headline(week))}\nScores {week.sparkline}"
    return caption if len(caption) <= CAPTION_LIMIT else caption[: CAPTION_LIMIT - 1] + "…"


def render_week_chart(week: Week, path: Path) -> None:
    """Draw the week's two panels into a PNG at ``path``."""
    figure = week_figure(week)
    try:
        figure.savefig(path, format="png", dpi=_DPI)
    finally:
        figure.clear()


def week_figure(week: Week) -> Figure:
    """The week's figure on an Agg canvas, drawn but not saved."""
    figure = Figure(
        figsize=_FIG_SIZE, dpi=_DPI, layout=ConstrainedLayoutEngine(h_pad=0.1, hspace=0.08), facecolor="white"
    )
    FigureCanvasAgg(figure)
    try:
        scores, errors = figure.subplots(2, 1, sharex=True)
        figure.suptitle(
            for_matplotlib(week_headline(week), width=_TITLE_WIDTH, max_lines=3),
            fontsize=_TITLE_PT,
            fontweight="bold",
            color=_TEXT_COLOUR,
        )
        labels = [f"{day.day:%a}\n{day.day:%m-%d}" for day in week.days]
        positions = list(range(len(week.days)))
        _draw_scores(scores, week, positions)
        _draw_errors(errors, week, positions)
        errors.set_xticks(positions, labels)
        errors.set_xlim(-0.6, len(positions) - 0.4)  # room for the first and last day's "?"
        for ax in (scores, errors):
            ax.tick_params(labelsize=_TICK_PT, colors=_TEXT_COLOUR)
            ax.spines[["top", "right"]].set_visible(False)
            ax.grid(axis="y", color="#DDDDDD", linewidth=0.8, zorder=0)
    except BaseException:
        figure.clear()
        raise
    return figure


def _title(ax: Axes, text: str) -> None:
    ax.set_title(text, loc="left", fontsize=_PANEL_TITLE_PT, fontweight="bold", color=_TEXT_COLOUR, pad=8)


def _unknown(ax: Axes, position: int, height: float) -> None:
    ax.text(position, height, "?", ha="center", va="bottom", fontsize=_TICK_PT + 4, color=_MUTED_COLOUR)


def _draw_scores(ax: Axes, week: Week, positions: list[int]) -> None:
    _title(ax, "Score of each day's digest")
    top = max((day.max_score for day in week.days), default=10)
    for position, day in zip(positions, week.days, strict=True):
        if not day.scored:
            _unknown(ax, position, 0.2)
            continue
        ax.bar(position, day.score, width=0.7, color=_STATUS_COLOURS[day.status], zorder=2)
        ax.text(position, day.score, f"{day.score}", ha="center", va="bottom", fontsize=_VALUE_PT)
    ax.axhline(top, color=_MUTED_COLOUR, linewidth=1.0, linestyle="--", zorder=1)
    ax.set_ylim(0, top * 1.15)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))


def _draw_errors(ax: Axes, week: Week, positions: list[int]) -> None:
    _title(ax, "Error lines of each day's worst workload")
    known = [day.error_lines for day in week.days if day.error_lines is not None]
    top = max(known, default=0.0) or 1.0
    for position, day in zip(positions, week.days, strict=True):
        if day.error_lines is None:
            _unknown(ax, position, top * 0.02)
            continue
        ax.bar(position, day.error_lines, width=0.7, color=_ERRORS_COLOUR, zorder=2)
        ax.text(
            position,
            day.error_lines,
            format_value("error_lines", day.error_lines),
            ha="center",
            va="bottom",
            fontsize=_VALUE_PT - 2,
        )
    ax.set_ylim(0, top * 1.2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _position: f"{value:,.0f}"))

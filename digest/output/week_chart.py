"""The week's chart: each day's score and error lines, one bar per day, in a PNG sized for a phone.

Two panels, Monday to Sunday: the score of each day's digest (its bar coloured by the day's status, the maximum drawn
as a line), and the error lines of each day's worst workload (error_lines' value). A day without a score or without
a count has no bar but a "?" where the bar would stand, so an unseen day never reads as a perfect or a quiet one.

Drawn with Pillow (`digest.output.drawing`) at the daily chart's sizes; the headline is wrapped narrower until it
fits the figure's width. `week_drawing` returns the image with every text on it, for tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from digest.output.chart import CAPTION_LIMIT
from digest.output.drawing import GRID_COLOUR, MUTED_COLOUR, TEXT_COLOUR, Canvas, Drawing, Panel, nice_ticks, points
from digest.output.render import week_headline
from digest.output.safe_text import for_drawing, visible
from digest.pipeline.score import DigestStatus
from digest.pipeline.week import Week, format_value

_WIDTH, _HEIGHT = 1080, 1080  # 7.2 × 7.2 inches at 150 dpi before
_TITLE_SIZE = points(15)
_PANEL_TITLE_SIZE = points(13)
_TICK_SIZE = points(12)
_VALUE_SIZE = points(11)
_UNKNOWN_SIZE = points(16)
_STATUS_COLOURS = {
    DigestStatus.OK: "#009E73",
    DigestStatus.WARNING: "#E69F00",
    DigestStatus.CRITICAL: "#C0392B",
    DigestStatus.UNKNOWN: "#8C8C8C",
}
_ERRORS_COLOUR = "#D55E00"
_TITLE_WIDTH = 60  # characters per line to start with, narrowed until the drawn title fits
_TITLE_LINES = 3
_TITLE_MARGIN = 0.96  # share of the figure's width the title may take
_BAR_WIDTH = 0.7  # of a day
# The old layout's measures in points at 150 dpi: margins, matplotlib's ticks and paddings, the gap between panels.
_PAD_X = points(0.08 * 72)
_PAD_Y = points(0.1 * 72)
_TICK_LENGTH = points(3.5)
_TICK_PAD = points(3.5)
_TITLE_PAD = points(8)
_PANEL_GAP = points(12)


def week_caption(week: Week) -> str:
    """The photo's caption: the week's headline and its score sparkline, within Telegram's limit."""
    caption = f"{visible(week_headline(week))}\nScores {week.sparkline}"
    return caption if len(caption) <= CAPTION_LIMIT else caption[: CAPTION_LIMIT - 1] + "…"


def render_week_chart(week: Week, path: Path) -> None:
    """Draw the week's two panels into a PNG at ``path``."""
    week_drawing(week).image.save(path, format="PNG")


def _fit_title(canvas: Canvas, headline: str) -> str:
    return canvas.fitted(
        lambda width: for_drawing(headline, width=width, max_lines=_TITLE_LINES),
        range(_TITLE_WIDTH, 19, -4),
        _TITLE_SIZE,
        _WIDTH * _TITLE_MARGIN,
        bold=True,
    )


def _thousands(value: float) -> str:
    return f"{value:,.0f}"


def week_drawing(week: Week) -> Drawing:
    """The week's chart drawn, with every text on it (`render_week_chart` saves its image; tests read it)."""
    canvas = Canvas(_WIDTH, _HEIGHT)
    title_box = canvas.text(
        (_WIDTH / 2, _PAD_Y),
        _fit_title(canvas, week_headline(week)),
        _TITLE_SIZE,
        TEXT_COLOUR,
        bold=True,
        anchor=("m", "t"),
    )
    score_top = max((day.max_score for day in week.days), default=10)
    known = [day.error_lines for day in week.days if day.error_lines is not None]
    errors_top = max(known, default=0.0) or 1.0
    score_ticks = [(value, f"{value:.0f}") for value in nice_ticks(score_top * 1.15, bins=5)]
    errors_ticks = [(value, _thousands(value)) for value in nice_ticks(errors_top * 1.2, bins=6)]
    widest = max(canvas.width_of(label, _TICK_SIZE) for _, label in score_ticks + errors_ticks)
    left = _PAD_X + widest + _TICK_PAD + _TICK_LENGTH
    right = _WIDTH - _PAD_X
    # Two panels of equal height between the title and the day labels (two lines each).
    title_ascent = canvas.font(_PANEL_TITLE_SIZE, bold=True).getmetrics()[0]
    ascent, descent = canvas.font(_TICK_SIZE).getmetrics()
    footer = _TICK_LENGTH + _TICK_PAD + ascent + descent + _TICK_SIZE * 1.2 + _PAD_Y
    header = _PANEL_GAP + title_ascent + _TITLE_PAD
    height = (_HEIGHT - footer - title_box[3] - 2 * header - _TICK_LENGTH) / 2
    scores_top = title_box[3] + header
    errors_box_top = scores_top + height + _TICK_LENGTH + header
    days = len(week.days)
    x_range = (-0.6, days - 0.4)  # room for the first and last day's "?"
    scores = Panel(canvas, (left, scores_top, right, scores_top + height), x_range, (0.0, score_top * 1.15))
    errors = Panel(canvas, (left, errors_box_top, right, errors_box_top + height), x_range, (0.0, errors_top * 1.2))
    positions = list(range(days))
    _draw_scores(scores, week, positions, score_ticks, score_top)
    _draw_errors(errors, week, positions, errors_ticks, errors_top)
    for panel in (scores, errors):
        panel.x_ticks(positions, TEXT_COLOUR, _TICK_LENGTH, points(0.8))
        panel.spines()
    row = errors.box[3] + _TICK_LENGTH + _TICK_PAD
    for position, day in zip(positions, week.days, strict=True):
        canvas.text(
            (errors.x(position), row), f"{day.day:%a}\n{day.day:%m-%d}", _TICK_SIZE, TEXT_COLOUR, anchor=("m", "t")
        )
    return canvas.finish()


def _title(panel: Panel, text: str) -> None:
    panel.canvas.text((panel.box[0], panel.box[1] - _TITLE_PAD), text, _PANEL_TITLE_SIZE, TEXT_COLOUR, bold=True)


def _unknown(panel: Panel, position: int, height: float) -> None:
    panel.canvas.text((panel.x(position), panel.y(height)), "?", _UNKNOWN_SIZE, MUTED_COLOUR, anchor=("m", "b"))


def _draw_scores(
    panel: Panel, week: Week, positions: list[int], ticks: Sequence[tuple[float, str]], top: float
) -> None:
    _title(panel, "Score of each day's digest")
    panel.y_axis(ticks, _TICK_SIZE, TEXT_COLOUR, GRID_COLOUR)
    for position, day in zip(positions, week.days, strict=True):
        if not day.scored:
            _unknown(panel, position, 0.2)
            continue
        panel.bar(position - _BAR_WIDTH / 2, position + _BAR_WIDTH / 2, 0, day.score, _STATUS_COLOURS[day.status])
        panel.canvas.text(
            (panel.x(position), panel.y(day.score)), f"{day.score}", _VALUE_SIZE, TEXT_COLOUR, anchor=("m", "b")
        )
    panel.level(top, MUTED_COLOUR, points(1.0), (points(3.7), points(1.6)))


def _draw_errors(
    panel: Panel, week: Week, positions: list[int], ticks: Sequence[tuple[float, str]], top: float
) -> None:
    _title(panel, "Error lines of each day's worst workload")
    panel.y_axis(ticks, _TICK_SIZE, TEXT_COLOUR, GRID_COLOUR)
    for position, day in zip(positions, week.days, strict=True):
        if day.error_lines is None:
            _unknown(panel, position, top * 0.02)
            continue
        panel.bar(position - _BAR_WIDTH / 2, position + _BAR_WIDTH / 2, 0, day.error_lines, _ERRORS_COLOUR)
        panel.canvas.text(
            (panel.x(position), panel.y(day.error_lines)),
            format_value("error_lines", day.error_lines),
            _VALUE_SIZE - points(2),
            TEXT_COLOUR,
            anchor=("m", "b"),
        )

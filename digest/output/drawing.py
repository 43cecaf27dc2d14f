"""What the two charts are drawn with: Pillow, a vendored DejaVu Sans, and a record of every text written.

The charts were matplotlib's until the image had to shrink under 200 MB: matplotlib, numpy (with OpenBLAS),
fontTools, contourpy, kiwisolver, pyparsing, cycler and dateutil weighed about 125 MB of it for two fixed layouts of
bars, steps and lines. Pillow draws them with this module's few primitives, and the layout is computed in
`digest.output.chart` and `digest.output.week_chart`. Sizes are still given in points at the old 150 dpi
(`points`), so a chart keeps the sizes that were tuned for a phone.

How it is drawn, and why:

* **Shapes at twice the size, then reduced** (`SCALE`, Lanczos): Pillow draws lines and polygons without
  anti-aliasing, and the reduction smooths their edges (a rising line has no staircase on a phone's screen).
* **Text afterwards, at its real size**: FreeType anti-aliases glyphs itself, sharper than a reduced copy. Text is
  drawn last, above every shape, as matplotlib drew it. The layout is Pillow's basic one (no libraqm): bidi
  controls never reach the chart (`digest.output.safe_text`), and the drawing is the same wherever it runs.
* **A record of every text** (`DrawnText`: its string and its box) and of every legend's frame, returned in a
  `Drawing` with the image: tests read what a chart says and where, instead of reading pixels.
* **Legends where they hide least** (`Panel.legend`): each panel keeps a coarse "ink" mask of its data (shaded spans
  count less than bars and lines), and the legend goes to the first corner or side, upper right first, that covers
  the least of it — what matplotlib's ``loc="best"`` did.

A `Canvas` belongs to one drawing call; the fonts' bytes are read once and shared (immutable), the FreeType faces are
the canvas' own. So a chart is a pure function of its inputs, safe in a worker thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Literal

from PIL import Image, ImageDraw, ImageFont

SCALE = 2  # shapes are drawn at this multiple of the final size, then reduced
PIXELS_PER_POINT = 150 / 72  # the matplotlib charts' 150 dpi: sizes keep the points they were tuned in

Box = tuple[float, float, float, float]  # left, top, right, bottom, in pixels of the final image
Point = tuple[float, float]
Horizontal = Literal["l", "m", "r"]
Vertical = Literal["t", "m", "s", "b"]  # top of the first line, middle, baseline of the last line, bottom
Hatch = Literal["/", "x"]

# The two charts' shared look: text, what is said in a lower voice ("?", a failed panel), the grid's lines.
TEXT_COLOUR = "#222222"
MUTED_COLOUR = "#666666"
GRID_COLOUR = "#DDDDDD"

_INK_SPAN = 1  # a shaded span in the ink mask: the legend may cover it sooner than data
_INK_DATA = 12  # bars, steps, lines and their fills


def points(value: float) -> float:
    """``value`` points in pixels at 150 dpi."""
    return value * PIXELS_PER_POINT


def rgb(colour: str) -> tuple[int, int, int]:
    """``#RRGGBB`` as a triple."""
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def rgba(colour: str, alpha: float) -> tuple[int, int, int, int]:
    """``#RRGGBB`` with an opacity from 0 to 1."""
    return (*rgb(colour), round(255 * alpha))


@functools.lru_cache(maxsize=2)
def _font_bytes(bold: bool) -> bytes:
    """The TrueType file, read once from the package (bytes are immutable: safe to share between threads)."""
    name = "DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf"
    return resources.files("digest.output").joinpath("fonts", name).read_bytes()


@dataclass(frozen=True)
class DrawnText:
    """A text written on a chart: its string (lines joined by newlines) and the box of its layout, in pixels."""

    text: str
    box: Box


@dataclass(frozen=True, eq=False)
class Drawing:
    """A finished chart: the image, every text written on it and the frame of each legend."""

    image: Image.Image
    texts: tuple[DrawnText, ...]
    legends: tuple[Box, ...]


@dataclass(frozen=True)
class _Line:
    """One line of text waiting for the reduced image."""

    position: Point
    text: str
    font: ImageFont.FreeTypeFont
    colour: str
    anchor: str


class Canvas:
    """A white image of ``width`` × ``height`` pixels being drawn: shapes now (at `SCALE`), text at `finish`."""

    def __init__(self, width: int, height: int) -> None:
        self.width = width
        self.height = height
        self._image = Image.new("RGB", (width * SCALE, height * SCALE), "white")
        self._draw = ImageDraw.Draw(self._image, "RGBA")  # "RGBA": a colour with an alpha blends, as in matplotlib
        self._lines: list[_Line] = []
        self._texts: list[DrawnText] = []
        self._legends: list[Box] = []
        self._fonts: dict[tuple[float, bool], ImageFont.FreeTypeFont] = {}

    # Text -----------------------------------------------------------------------------------------------------------

    def font(self, size: float, bold: bool = False) -> ImageFont.FreeTypeFont:
        """DejaVu Sans (or Bold) at ``size`` pixels per em."""
        key = (size, bold)
        if key not in self._fonts:
            self._fonts[key] = ImageFont.truetype(
                io.BytesIO(_font_bytes(bold)), size, layout_engine=ImageFont.Layout.BASIC
            )
        return self._fonts[key]

    def width_of(self, text: str, size: float, bold: bool = False) -> float:
        """The drawn width of ``text``'s widest line."""
        face = self.font(size, bold)
        return max(face.getlength(line) for line in text.split("\n"))

    def fitted(
        self, wrap: Callable[[int], str], widths: Iterable[int], size: float, room: float, bold: bool = False
    ) -> str:
        """``wrap(width)`` at the first of ``widths`` (widest first) whose drawn lines fit ``room`` pixels.

        Else the last one tried. The width of a character depends on the font and the glyph, so a title or a note
        is wrapped narrower until it fits.
        """
        text = ""
        for width in widths:
            text = wrap(width)
            if self.width_of(text, size, bold) <= room:
                break
        return text

    def text_box(
        self,
        position: Point,
        text: str,
        size: float,
        bold: bool = False,
        anchor: tuple[Horizontal, Vertical] = ("l", "s"),
        spacing: float = 1.2,
    ) -> Box:
        """Where `text` would draw ``text``, without drawing it."""
        face = self.font(size, bold)
        lines = text.split("\n")
        ascent, descent = face.getmetrics()
        advance = size * spacing  # baseline to baseline
        height = ascent + advance * (len(lines) - 1) + descent
        x, y = position
        horizontal, vertical = anchor
        top = {
            "t": y,
            "m": y - height / 2,
            "s": y - ascent - advance * (len(lines) - 1),
            "b": y - height,
        }[vertical]
        width = max(face.getlength(line) for line in lines)
        left = {"l": x, "m": x - width / 2, "r": x - width}[horizontal]
        return left, top, left + width, top + height

    def text(
        self,
        position: Point,
        text: str,
        size: float,
        colour: str,
        bold: bool = False,
        anchor: tuple[Horizontal, Vertical] = ("l", "s"),
        spacing: float = 1.2,
    ) -> Box:
        """Write ``text`` (lines apart by ``spacing`` × ``size``, each aligned as the block) and return its box."""
        box = self.text_box(position, text, size, bold, anchor, spacing)
        face = self.font(size, bold)
        ascent, _ = face.getmetrics()
        horizontal = anchor[0]
        x = {"l": box[0], "m": (box[0] + box[2]) / 2, "r": box[2]}[horizontal]
        for index, line in enumerate(text.split("\n")):
            baseline = box[1] + ascent + size * spacing * index
            self._lines.append(_Line((x, baseline), line, face, colour, f"{horizontal}s"))
        self._texts.append(DrawnText(text, box))
        return box

    # Shapes ---------------------------------------------------------------------------------------------------------

    @staticmethod
    def _scaled(points_: Sequence[Point]) -> list[tuple[float, float]]:
        return [(x * SCALE, y * SCALE) for x, y in points_]

    def line(self, path: Sequence[Point], colour: str, width: float) -> None:
        """A polyline ``width`` pixels wide with round joints (no notch where a step turns)."""
        if len(path) >= 2:
            self._draw.line(self._scaled(path), fill=rgb(colour), width=max(1, round(width * SCALE)), joint="curve")

    def dashed(self, start: Point, end: Point, colour: str, width: float, dash: tuple[float, float]) -> None:
        """A straight line of ``dash`` (on, off) pixels."""
        (x0, y0), (x1, y1) = start, end
        length = math.hypot(x1 - x0, y1 - y0)
        if length == 0:
            return
        on, off = dash
        moved = 0.0
        while moved < length:
            stop = min(moved + on, length)
            self.line(
                [
                    (x0 + (x1 - x0) * moved / length, y0 + (y1 - y0) * moved / length),
                    (x0 + (x1 - x0) * stop / length, y0 + (y1 - y0) * stop / length),
                ],
                colour,
                width,
            )
            moved = stop + off

    def polygon(self, outline: Sequence[Point], colour: str, alpha: float = 1.0) -> None:
        """A filled polygon, translucent below ``alpha`` 1."""
        if len(outline) >= 3:
            self._draw.polygon(self._scaled(outline), fill=rgba(colour, alpha))

    def rectangle(
        self,
        box: Box,
        fill: str | None = None,
        outline: str | None = None,
        width: float = 0.0,
        alpha: float = 1.0,
        radius: float = 0.0,
    ) -> None:
        """A rectangle, filled and/or outlined, translucent below ``alpha`` 1, its corners rounded by ``radius``."""
        left, top, right, bottom = (value * SCALE for value in box)
        if right <= left or bottom <= top:
            return
        self._draw.rounded_rectangle(
            (left, top, right, bottom),
            radius=radius * SCALE,
            fill=None if fill is None else rgba(fill, alpha),
            outline=None if outline is None else rgba(outline, alpha),
            width=round(width * SCALE) if outline is not None else 0,
        )

    def circle(self, centre: Point, radius: float, colour: str) -> None:
        """A filled disc."""
        x, y = centre
        self._draw.ellipse(
            ((x - radius) * SCALE, (y - radius) * SCALE, (x + radius) * SCALE, (y + radius) * SCALE), fill=rgb(colour)
        )

    def hatch(self, box: Box, pattern: Hatch, colour: str, spacing: float, width: float = points(1.0)) -> None:
        """Diagonal lines over ``box``: "/" rising, "x" both ways, ``spacing`` pixels apart along a row.

        The lines are laid on a grid of the whole image, so that hatches of neighbouring boxes join up.
        """
        left, top, right, bottom = box
        if right <= left or bottom <= top:
            return
        thickness = max(1, round(width * SCALE))
        families = ((1, -1), (1, 1)) if pattern == "x" else ((1, -1),)
        for _, slope in families:
            # Rising lines are x + y = c, falling ones x - y = c: c steps by the spacing over the box's range.
            if slope < 0:
                first, last = left + top, right + bottom
            else:
                first, last = left - bottom, right - top
            step = math.floor(first / spacing)
            while step * spacing <= last:
                c = step * spacing
                if slope < 0:
                    start_x, stop_x = max(left, c - bottom), min(right, c - top)
                    ends = ((start_x, c - start_x), (stop_x, c - stop_x))
                else:
                    start_x, stop_x = max(left, c + top), min(right, c + bottom)
                    ends = ((start_x, start_x - c), (stop_x, stop_x - c))
                if stop_x > start_x:
                    self._draw.line(self._scaled(ends), fill=rgb(colour), width=thickness)
                step += 1

    def add_legend_frame(self, box: Box) -> None:
        """Record a legend's frame in the `Drawing`."""
        self._legends.append(box)

    def finish(self) -> Drawing:
        """Reduce the shapes to the final size, write the text over them, and return the drawing."""
        image = self._image.resize((self.width, self.height), Image.Resampling.LANCZOS)
        draw = ImageDraw.Draw(image)
        for line in self._lines:
            draw.text(line.position, line.text, font=line.font, fill=rgb(line.colour), anchor=line.anchor)
        return Drawing(image, tuple(self._texts), tuple(self._legends))


# Axes ---------------------------------------------------------------------------------------------------------------

# The steps of matplotlib's MaxNLocator (times a power of ten) that the old charts' axes used.
_NICE_STEPS = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)


def nice_ticks(top: float, bins: int, integer: bool = True, min_ticks: int = 2) -> list[float]:
    """Ticks from 0 to ``top``: at most ``bins`` intervals of a round step, at least ``min_ticks`` ticks if it can.

    MaxNLocator's choice for an axis from 0: the smallest step of 1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 × 10^n (whole
    numbers only for a count) that covers ``top`` in ``bins`` intervals, a smaller one while that gives too few ticks.
    """
    if top <= 0:
        return [0.0]
    scale = 10 ** math.floor(math.log10(top / bins))
    # MaxNLocator's extended steps: a tenth of each (but 10), each, and 15, so that one of them always fits.
    steps = [0.1 * step * scale for step in _NICE_STEPS[:-1]] + [step * scale for step in _NICE_STEPS]
    steps.append(15.0 * scale)
    if integer:
        steps = [step for step in steps if step < 1 or abs(step - round(step)) < 0.001]
    raw = top / bins
    chosen = next(index for index, step in enumerate(steps) if step >= raw)
    ticks: list[float] = []
    for step in reversed(steps[: chosen + 1]):
        if integer and math.floor(top) >= min_ticks - 1:
            step = max(1.0, step)
        ticks = [index * step for index in range(math.floor(top / step + 1e-9) + 1)]
        if len(ticks) >= min_ticks:
            break
    return ticks


@dataclass(frozen=True)
class LegendEntry:
    """One row of a legend: its label and its swatch (a filled patch, a hatched patch or a line)."""

    label: str
    colour: str
    kind: Literal["patch", "line", "hatch"] = "patch"
    alpha: float = 1.0
    hatch: Hatch = "/"
    hatch_colour: str = "#BBBBBB"
    hatch_spacing: float = 18.0


# Corners and sides in matplotlib's order of preference for loc="best".
_LEGEND_PLACES = (
    ("r", "t"),
    ("l", "t"),
    ("l", "b"),
    ("r", "b"),
    ("l", "m"),
    ("r", "m"),
    ("m", "b"),
    ("m", "t"),
    ("m", "m"),
)


@dataclass
class Panel:
    """A plot area of a canvas (``box``, in pixels) showing ``x_range`` × ``y_range`` of data.

    Its data drawn through it (spans, bars, steps, lines) is also marked on a coarse ink mask, which `legend` reads
    to find the place where a legend hides the least.
    """

    canvas: Canvas
    box: Box
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    _ink: Image.Image = field(init=False, repr=False)

    def __post_init__(self) -> None:
        left, top, right, bottom = self.box
        self._ink = Image.new("L", (max(1, round(right - left)), max(1, round(bottom - top))), 0)

    def x(self, value: float) -> float:
        """The pixel column of ``value``, kept within the panel."""
        low, high = self.x_range
        left, _, right, _ = self.box
        share = (value - low) / (high - low) if high > low else 0.0
        return left + (right - left) * min(max(share, 0.0), 1.0)

    def y(self, value: float) -> float:
        """The pixel row of ``value``, kept within the panel."""
        low, high = self.y_range
        _, top, _, bottom = self.box
        share = (value - low) / (high - low) if high > low else 0.0
        return bottom - (bottom - top) * min(max(share, 0.0), 1.0)

    def _mark(self, outline: Sequence[Point], weight: int, width: float = 0.0) -> None:
        left, top, _, _ = self.box
        shifted = [(x - left, y - top) for x, y in outline]
        draw = ImageDraw.Draw(self._ink)
        if width:
            draw.line(shifted, fill=weight, width=max(1, round(width)))
        elif len(shifted) >= 3:
            draw.polygon(shifted, fill=weight)
        elif len(shifted) == 2:
            draw.rectangle((*shifted[0], *shifted[1]), fill=weight)

    def span(self, first: float, last: float, fill: str, pattern: Hatch, hatch_colour: str, spacing: float) -> None:
        """A hatched band over the whole height between ``first`` and ``last`` (x values)."""
        _, top, _, bottom = self.box
        band = (self.x(first), top, self.x(last), bottom)
        self.canvas.rectangle(band, fill=fill)
        self.canvas.hatch(band, pattern, hatch_colour, spacing)
        self._mark([(band[0], band[1]), (band[2], band[3])], _INK_SPAN)

    def bar(self, x0: float, x1: float, y0: float, y1: float, colour: str) -> None:
        """A filled rectangle between data coordinates."""
        band = (self.x(x0), self.y(y1), self.x(x1), self.y(y0))
        self.canvas.rectangle(band, fill=colour)
        self._mark([(band[0], band[1]), (band[2], band[3])], _INK_DATA)

    def area(self, outline: Sequence[Point], colour: str, alpha: float) -> None:
        """A translucent filled polygon in data coordinates."""
        pixels = [(self.x(x), self.y(y)) for x, y in outline]
        self.canvas.polygon(pixels, colour, alpha)
        self._mark(pixels, _INK_DATA)

    def path(self, points_: Sequence[Point], colour: str, width: float) -> None:
        """A polyline in data coordinates."""
        pixels = [(self.x(x), self.y(y)) for x, y in points_]
        self.canvas.line(pixels, colour, width)
        self._mark(pixels, _INK_DATA, width)

    def level(self, value: float, colour: str, width: float, dash: tuple[float, float]) -> None:
        """A dashed horizontal line across the panel at ``value``."""
        left, _, right, _ = self.box
        row = self.y(value)
        self.canvas.dashed((left, row), (right, row), colour, width, dash)
        self._mark([(left, row), (right, row)], _INK_DATA, width)

    def y_axis(self, ticks: Sequence[tuple[float, str]], size: float, colour: str, grid: str | None) -> None:
        """Left ticks with their labels, and a light grid line at each (under the data, so drawn first)."""
        left, _, right, _ = self.box
        for value, label in ticks:
            row = self.y(value)
            if grid is not None:
                self.canvas.line([(left, row), (right, row)], grid, points(0.8))
            self.canvas.line([(left - points(3.5), row), (left, row)], colour, points(0.8))
            self.canvas.text((left - points(3.5) - points(3.5), row), label, size, colour, anchor=("r", "m"))

    def x_ticks(self, ticks: Sequence[float], colour: str, length: float, width: float) -> None:
        """Tick marks under the panel at ``ticks`` (x values)."""
        _, _, _, bottom = self.box
        for value in ticks:
            column = self.x(value)
            self.canvas.line([(column, bottom), (column, bottom + length)], colour, width)

    def spines(self, colour: str = "#000000") -> None:
        """The left and bottom edges (the top and right ones are left out, as in the old charts)."""
        left, top, right, bottom = self.box
        half = points(0.8) / 2
        self.canvas.line([(left, top), (left, bottom + half)], colour, points(0.8))
        self.canvas.line([(left - half, bottom), (right, bottom)], colour, points(0.8))

    def _covered(self, place: Box) -> int:
        """How much ink lies under ``place``: its pixels, weighted (data counts more than shaded spans)."""
        left, top, _, _ = self.box
        crop = self._ink.crop((place[0] - left, place[1] - top, place[2] - left, place[3] - top))
        return sum(level * count for level, count in enumerate(crop.histogram()))

    def legend(self, entries: Sequence[LegendEntry], size: float, colour: str) -> Box | None:
        """A boxed legend, one row per entry, placed where it covers the least ink (upper right on a tie)."""
        if not entries:
            return None
        canvas = self.canvas
        pad = 0.5 * size  # matplotlib's borderpad, labelspacing and borderaxespad, in font sizes
        handle, handle_height, gap = 2.0 * size, 0.7 * size, 0.8 * size
        row = 1.5 * size
        text_width = max(canvas.width_of(entry.label, size) for entry in entries)
        width = 2 * pad + handle + gap + text_width
        height = 2 * pad + row * len(entries) - 0.5 * size
        left, top, right, bottom = self.box
        # Never wider than the figure: a label is cut to LEGEND_LABEL_LIMIT characters before it gets here.
        places: list[Box] = []
        for horizontal, vertical in _LEGEND_PLACES:
            x = {"l": left + pad, "m": (left + right - width) / 2, "r": right - pad - width}[horizontal]
            y = {"t": top + pad, "m": (top + bottom - height) / 2, "b": bottom - pad - height}[vertical]
            places.append((x, y, x + width, y + height))
        # min() keeps the first of equals: upper right when the head-room leaves every corner of the top free.
        frame = min(places, key=self._covered)
        canvas.rectangle(frame, fill="#FFFFFF", outline="#CCCCCC", width=points(0.8), alpha=0.92, radius=0.2 * size)
        canvas.add_legend_frame(frame)
        for index, entry in enumerate(entries):
            middle = frame[1] + pad + row * index + size / 2
            swatch_left = frame[0] + pad
            swatch = (swatch_left, middle - handle_height / 2, swatch_left + handle, middle + handle_height / 2)
            if entry.kind == "line":
                canvas.line([(swatch[0], middle), (swatch[2], middle)], entry.colour, points(2.8))
            else:
                canvas.rectangle(swatch, fill=entry.colour, alpha=entry.alpha)
                if entry.kind == "hatch":
                    canvas.hatch(swatch, entry.hatch, entry.hatch_colour, entry.hatch_spacing)
            canvas.text((swatch[2] + gap, middle), entry.label, size, colour, anchor=("l", "m"))
        return frame

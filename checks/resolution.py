"""The scrape interval actually present in the data, so that durations are measured at the precision it allows.

A duration read from scraped gauges (how long a Service had no ready endpoint, how long a pod was not ready) is
known only to one scrape: a 15 s scrape gives 15 s precision, a 60 s one 60 s. Assuming 30 s would either invent
precision (60 s scrapes read at 30 s steps count each sample twice) or throw it away (15 s scrapes read at 30 s
steps miss half the samples, and an empty endpoint seen at one scrape may fall between steps).

Query: the most samples any series of the family had in each hour of the window (a range query, one point an
hour)::

    max(count_over_time(<selector>[1h]))      (the range open on the left), every hour

Each hour's interval is an hour divided by that count, rounded to the second (jitter makes 121 samples of a 30 s
scrape read 29.75 s). The maximum, not the median: a pod that lived half an hour has half the samples, not a slower
scrape. Two scrapers of the same target make different series (their ``instance`` differs), so they do not halve
it. Fewer than two samples in every hour: unknown, and the caller uses its configured interval and says so.

**Segments.** The interval can change within the window (30 s until noon, 5 min after: a scrape config edited, a
VMAgent's ``scrape_interval`` raised under load). The step is the finest interval, so the fine part keeps its
precision; every read looks back as far as the coarsest interval (``lookback``), so each step of the coarse part
still reads its latest scrape instead of nothing (a 40-minute unready spell read at 30 s steps with a 30 s
look-back over 5 min scrapes is 8 steps: 4 minutes). ``last_over_time`` takes the newest sample of its range, so
the longer look-back blurs nothing where scrapes are dense; only a series that ends (a pod deleted) is read up to
one coarse scrape past its end. Hours with fewer than two samples are gaps, not a segment. The change is said once:
"scrape interval 30 s until 12:00, 5 min after".

Known limit: the steps of a subquery fall on multiples of the step (Prometheus aligns them to the epoch), and each
step reads the one scrape in (t - interval, t]. A scraper whose phase sits within its jitter of that grid (samples
at t ± a few ms) sometimes puts two samples in one step and none in the next: counts then come out short, and say
nothing of it. Centring the read on the measured phase needs a negative ``offset``; not done yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from .contract import SourceError, Sources, Span, Window, fmt_duration, local_time
from .promql import open_range

_HOUR = 3600
# Prometheus refuses range queries of more than 11,000 points per series; longer windows get a coarser step.
MAX_POINTS = 11_000


@dataclass(frozen=True)
class Segment:
    """A part of the window scraped at one interval: ``until`` (unix seconds) and its interval."""

    until: float
    seconds: int


@dataclass(frozen=True)
class Resolution:
    """The step durations are measured at, and whether it was measured in the data or assumed from the policy.

    ``lookback`` is how far each step reads back: the coarsest interval of the window (``seconds`` when it has one).
    ``segments`` are the parts of the window at different intervals, when there are several; ``said`` words them.
    """

    seconds: int
    measured: bool
    lookback: int = 0
    segments: tuple[Segment, ...] = ()
    said: str = ""

    @property
    def look(self) -> int:
        """The look-back of every read: the coarsest interval, at least the step."""
        return max(self.seconds, self.lookback)

    def bound(self) -> str:
        """How a reader is told the precision: "measured every 15 s" or "read at an assumed 30 s"."""
        if self.measured and self.said:
            return f"{self.said}: each episode's start and end are known to within one scrape of its part"
        if self.measured:
            return f"measured every {self.seconds} s: each episode's start and end are known to within {self.seconds} s"
        return f"scrape interval not measurable: read at an assumed {self.seconds} s, each duration to one step"


def interval_query(selector: str) -> str:
    """The PromQL whose answer, every hour, is the most samples one series had in that hour."""
    # The range open on the left (`open_range`): Prometheus 2 would count 121 samples of a 30 s scrape in an hour.
    return f"max(count_over_time({selector}[{open_range(_HOUR)}]))"


def step_for(window: Window, interval: int) -> int:
    """The evaluation step: the scrape interval, coarser only when the window would exceed the point limit."""
    return max(interval, -(-window.seconds // MAX_POINTS))


async def resolve(sources: Sources, window: Window, selector: str, configured: int, assumed: int) -> Resolution:
    """The policy's interval when it sets one (``configured`` > 0), else the one measured on ``selector``."""
    if configured:
        return Resolution(configured, measured=False)
    return await scrape_interval(sources, window, selector, assumed)


async def scrape_interval(sources: Sources, window: Window, selector: str, assumed: int) -> Resolution:
    """The scrape interval of ``selector``'s series in the window; ``assumed`` when the data cannot tell.

    A configured interval of 0 means "measure"; any other configured value is used as is (an operator who knows
    better). A backend error while measuring falls back to the assumption: the duration queries that follow will
    meet the same error and say so.
    """
    first = window.start + timedelta(seconds=min(_HOUR, window.seconds))
    try:
        series = await sources.metrics.range(interval_query(selector), first, window.end, _HOUR)
    except SourceError:
        return Resolution(assumed, measured=False)
    hours = sorted(
        (moment, max(1, round(_HOUR / count))) for one in series for moment, count in one.points if count >= 2
    )
    if not hours:
        return Resolution(assumed, measured=False)
    finest, coarsest = min(seconds for _, seconds in hours), max(seconds for _, seconds in hours)
    if coarsest < finest * 1.5:  # jitter (29 s, 30 s, 31 s), not a change of interval
        return Resolution(finest, measured=True)
    segments = _segments(hours)
    return Resolution(finest, measured=True, lookback=coarsest, segments=segments, said=_said(segments, window))


def _segments(hours: Sequence[tuple[float, int]]) -> tuple[Segment, ...]:
    """Consecutive hours at about the same interval (within half of it) as segments."""
    out: list[Segment] = []
    for moment, seconds in hours:
        if out and abs(seconds - out[-1].seconds) < 0.5 * min(seconds, out[-1].seconds):
            out[-1] = Segment(moment, out[-1].seconds)
        else:
            out.append(Segment(moment, seconds))
    return tuple(out)


def _said(segments: Sequence[Segment], window: Window) -> str:
    """The parts in order, each with where it ends: "scrape interval 30 s until 12:00, 5 min after"."""
    parts = []
    for index, segment in enumerate(segments):
        every = fmt_duration(segment.seconds)
        if index == len(segments) - 1:
            parts.append(f"{every} after" if index else every)
        else:
            # A segment's last full hour ends at ``until``; the next one's first hour starts there.
            parts.append(f"{every} until {local_time(segment.until, window)}")
    return "scrape interval " + ", ".join(parts)


def runs(moments: Sequence[float], step: int) -> list[Span]:
    """Steps of a range query as spans: a step at t stands for the scrape in (t - step, t]; a missing step ends one."""
    spans: list[Span] = []
    for moment in sorted(moments):
        if spans and moment - spans[-1].end <= step * 1.5:
            spans[-1] = Span(spans[-1].start, moment)
        else:
            spans.append(Span(moment - step, moment))
    return spans

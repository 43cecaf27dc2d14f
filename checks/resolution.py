"""The scrape interval actually present in the data, so that durations are measured at the precision it allows.

A duration read from scraped gauges (how long a Service had no ready endpoint, how long a pod was not ready) is
known only to one scrape: a 15 s scrape gives 15 s precision, a 60 s one 60 s. Assuming 30 s would either invent
precision (60 s scrapes read at 30 s steps count each sample twice) or throw it away (15 s scrapes read at 30 s
steps miss half the samples, and an empty endpoint seen at one scrape may fall between steps).

Query: the most samples any series of the family had in one hour, over the window's hours::

    max(max_over_time(count_over_time(<selector>[1h])[<window>:1h]))      (both ranges open on the left)

The interval is an hour divided by that count, rounded to the second (jitter makes 121 samples of a 30 s scrape
read 29.75 s). The maximum, not the median: a pod that lived half an hour has half the samples, not a slower
scrape. Two scrapers of the same target make different series (their ``instance`` differs), so they do not halve
it. Fewer than two samples in every hour: unknown, and the caller uses its configured interval and says so.

Known limit: the steps of a subquery fall on multiples of the step (Prometheus aligns them to the epoch), and each
step reads the one scrape in (t - interval, t]. A scraper whose phase sits within its jitter of that grid (samples
at t ± a few ms) sometimes puts two samples in one step and none in the next: counts then come out short, and say
nothing of it. Centring the read on the measured phase needs a negative ``offset``; not done yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from checks.contract import SourceError, Sources, Span, Window
from checks.promql import open_range

_HOUR = 3600
# Prometheus refuses range queries of more than 11,000 points per series; longer windows get a coarser step.
MAX_POINTS = 11_000


@dataclass(frozen=True)
class Resolution:
    """The step durations are measured at, and whether it was measured in the data or assumed from the policy."""

    seconds: int
    measured: bool

    def bound(self) -> str:
        """How a reader is told the precision: "measured on 15 s scrapes" or "assumed 30 s scrapes"."""
        if self.measured:
            return f"measured on {self.seconds} s scrapes: each episode is known to one scrape at either end"
        return f"scrape interval not measurable: read at an assumed {self.seconds} s, each duration to one step"


def interval_query(selector: str, window: Window) -> str:
    """The PromQL whose answer is the most samples one series had in an hour of the window."""
    hours = max(1, window.seconds // _HOUR)
    # Ranges open on the left (`open_range`): Prometheus 2 would count 121 samples of a 30 s scrape in an hour.
    return f"max(max_over_time(count_over_time({selector}[{open_range(_HOUR)}])[{open_range(hours * _HOUR)}:1h]))"


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
    try:
        samples = await sources.metrics.instant(interval_query(selector, window), window.end)
    except SourceError:
        return Resolution(assumed, measured=False)
    most = max((sample.value for sample in samples), default=0.0)
    if most < 2:
        return Resolution(assumed, measured=False)
    return Resolution(max(1, round(_HOUR / most)), measured=True)


def runs(moments: Sequence[float], step: int) -> list[Span]:
    """Steps of a range query as spans: a step at t stands for the scrape in (t - step, t]; a missing step ends one."""
    spans: list[Span] = []
    for moment in sorted(moments):
        if spans and moment - spans[-1].end <= step * 1.5:
            spans[-1] = Span(spans[-1].start, moment)
        else:
            spans.append(Span(moment - step, moment))
    return spans

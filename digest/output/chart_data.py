"""The chart's data: what its three panels count, asked through the same seam as the checks.

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
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from digest.checks.conntrack import ConntrackCheck
from digest.checks.contract import SourceError, Sources, Window, node_name
from digest.checks.envoy_flags import EnvoyFlagsCheck
from digest.checks.error_lines import ErrorLinesCheck, workload_of
from digest.checks.log_questions import EVERY_LINE, CountRow, Json, LineCount
from digest.checks.promql import quote
from digest.pipeline.policy import Policy

CONNTRACK_STEP_SECONDS = 300
MAX_BUCKETS = 48  # hourly up to two days; longer windows get buckets of several hours
MAX_FLAGS = 4  # flags drawn one by one; the rest are summed as "other flags"
APP_5XX = "app 5xx"  # 5xx without a response flag: the upstream application answered it
OTHER_FLAGS = "other flags"


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
    return 3600 * max(1, math.ceil(window.seconds / (MAX_BUCKETS * 3600)))


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
    if len(flagged) > MAX_FLAGS:
        rest = flagged[MAX_FLAGS - 1 :]
        summed = [sum(value or 0 for value in column) for column in zip(*(c.values for c in rest), strict=True)]
        other = Counts(OTHER_FLAGS, tuple(None if blind[i] else value for i, value in enumerate(summed)))
        flagged = [*flagged[: MAX_FLAGS - 1], other]
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

"""Trends: today's signals against the previous days, queried from the backends (so a replay needs no history).

The graded checks are run again on each of the previous ``days`` windows of the same length (the same code, the
same queries, shifted), concurrently under the sources' bound. A signal is called out when today's value is at least
``min_factor`` times the median of the previous days that had data — "error_lines 4,539,734: 378,311 times the usual
12 (the middle of the last 7 days)" —
or when it appears from nothing; days whose check was UNKNOWN (no data) do not count toward the median. The previous
day's grade gives "score 10 → 8 since yesterday".

Re-running seven days' graded checks for every digest is seven days of log scanning on a real cluster: the daily
digest (the bot, ``digest run`` with a state file) keeps each past window's graded findings in a `HistoryStore` and
reads them back; a replay recomputes everything from the backends.

Why the median: one bad day last week must not make today's flood look normal; why ×3: day-to-day noise of a
healthy cluster stays well within it, and the incidents behind this project were ×100 and more.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import statistics
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, timedelta

from digest.checks.contract import Finding, Sightings, Signature, Sources, Status, Window, WorkloadSignatures, fmt_int
from digest.pipeline.collect import Collected, build_checks, collect
from digest.pipeline.novelty import ShapeHistory
from digest.pipeline.policy import CHECK_POLICIES, Policy
from digest.pipeline.score import Digest, DigestStatus, grade
from digest.pipeline.state import HistoryStore, StateError
from digest.pipeline.week import DayResult, complete, day_result, decode_day, encode_day
from digest.pipeline.window import WindowError, day_window

log = logging.getLogger(__name__)


def shifted(window: Window, days_back: int) -> Window:
    """The window ``days_back`` days earlier, in local wall time (a calendar day stays a calendar day across DST).

    A calendar day is rebuilt by `day_window`, so a past day that the zone skipped (Samoa's 30 December 2011) raises
    `WindowError` instead of becoming a window that ends before it starts.
    """
    day = _calendar_day(window.label)
    if day is not None:
        return day_window(day - timedelta(days=days_back), window.zone)
    start = (window.start.astimezone(window.zone).replace(tzinfo=None) - timedelta(days=days_back)).replace(
        tzinfo=window.zone
    )
    end = (window.end.astimezone(window.zone).replace(tzinfo=None) - timedelta(days=days_back)).replace(
        tzinfo=window.zone
    )
    return Window(
        start=start.astimezone(UTC), end=end.astimezone(UTC), zone=window.zone, label=f"{window.label} −{days_back}d"
    )


def _calendar_day(label: str) -> date | None:
    """The day a calendar day's window is labelled with (``2026-07-20``); None for any other window's label."""
    if len(label) != 10:
        return None
    try:
        return date.fromisoformat(label)
    except ValueError:
        return None  # ten characters that are not a day: a window of its own


def earlier_windows(window: Window, days: int) -> list[Window]:
    """The ``days`` windows before ``window``, newest first, leaving out calendar days the zone skipped."""
    windows: list[Window] = []
    for back in range(1, days + 1):
        try:
            windows.append(shifted(window, back))
        except WindowError:
            continue  # a day with no minute has no digest to compare with
    return windows


WindowKey = tuple[datetime, datetime]


class History:
    """Graded findings per window, each computed once: a replay's days are each other's history.

    Holds tasks, not results, so that two days computed at the same time share the computation of a third. With a
    `HistoryStore` (the daily digest's state file), past windows read back what an earlier digest computed, so a
    digest queries its own window and the one day not seen yet instead of the last seven again. A window is stored
    only when every query answered, every check finished and every check saw the whole window and fleet
    (`Collected.complete`): a day the backends could not be asked, or saw only in part (no data yet, an exporter that
    died, a node's shipper stuck), is asked again next time — data may still arrive for it.
    """

    def __init__(
        self, store: HistoryStore | None = None, cluster: str = "", policy: Policy | None = None, scope: str = ""
    ) -> None:
        self._tasks: dict[WindowKey, asyncio.Future[Collected]] = {}
        self._store = store
        self._cluster = cluster
        # The sources' sightings are the cluster's as its settings scope it: another selector, another memory.
        self._sightings_key = f"{cluster} {scope}".strip()
        self._recalled: asyncio.Future[None] | None = None
        self._fingerprint = policy_fingerprint(policy) if policy is not None else ""
        # The workloads' error signatures per window, kept beside their findings for "new today".
        self.shapes = ShapeHistory(store, cluster, self._fingerprint)
        # A day's whole digest depends on the whole policy, not only on the graded checks'.
        self._day_fingerprint = hashlib.sha256(repr(policy).encode()).hexdigest()[:16] if policy is not None else ""

    def stored_day(self, window: Window) -> DayResult | None:
        """The week's summary of this calendar day, if an earlier digest of it stored one."""
        if self._store is None:
            return None
        try:
            payload = self._store.load_day(
                self._cluster, self._day_fingerprint, window.start.timestamp(), window.end.timestamp()
            )
            return None if payload is None else decode_day(payload)
        except (StateError, ValueError, KeyError, TypeError) as exc:
            self._give_up(exc)
            return None

    def keep_day(self, window: Window, digest: Digest) -> None:
        """Store the week's summary of a calendar day's digest, when the day was seen whole (else it is asked again)."""
        if self._store is None or len(window.label) != 10 or not complete(digest):
            return
        try:
            day = date.fromisoformat(window.label)
            self._store.save_day(
                self._cluster,
                self._day_fingerprint,
                window.start.timestamp(),
                window.end.timestamp(),
                encode_day(day_result(day, digest)),
            )
        except (StateError, ValueError) as exc:
            self._give_up(exc)

    async def recall_sightings(self, sightings: Sightings) -> None:
        """Fill ``sightings`` with what earlier digests learnt of this cluster's sources, once per history.

        Several days of a replay start at once: they all wait for the one read (a worker thread's, never the loop's).
        """
        if self._recalled is None:
            self._recalled = asyncio.ensure_future(self._recall(sightings))
        await asyncio.shield(self._recalled)

    async def _recall(self, sightings: Sightings) -> None:
        if self._store is None:
            return
        try:
            spans = await asyncio.to_thread(self._store.load_sightings, self._sightings_key)
        except StateError as exc:
            self._give_up(exc)
            return
        sightings.learn(spans)

    async def keep_sightings(self, sightings: Sightings) -> None:
        """Store what ``sightings`` learnt since the last call (a worker thread writes it)."""
        spans = sightings.take_unsaved()
        if self._store is None or not spans:
            return
        try:
            await asyncio.to_thread(self._store.save_sightings, self._sightings_key, spans)
        except StateError as exc:
            self._give_up(exc)

    def offer(self, window: Window, graded: Awaitable[Collected]) -> None:
        """Make ``graded`` (the graded findings of ``window``, being computed anyway) available to later days."""
        self._tasks.setdefault((window.start, window.end), asyncio.ensure_future(graded))

    async def get(self, window: Window, compute: Callable[[], Awaitable[Collected]]) -> Collected:
        """The graded findings of ``window``, computed now unless another day already did or is doing it."""
        key = (window.start, window.end)
        if key not in self._tasks:
            self._tasks[key] = asyncio.ensure_future(self._stored_or_computed(window, compute))
        return await asyncio.shield(self._tasks[key])

    async def _stored_or_computed(self, window: Window, compute: Callable[[], Awaitable[Collected]]) -> Collected:
        # The store is SQLite: read and written in a worker thread, never on the event loop.
        stored = await asyncio.to_thread(self._load, window)
        if stored is not None:
            return stored
        computed = await compute()
        if computed.complete:
            await asyncio.to_thread(self._save, window, computed)
        return computed

    def _load(self, window: Window) -> Collected | None:
        if self._store is None:
            return None
        try:
            payload = self._store.load(
                self._cluster, self._fingerprint, window.start.timestamp(), window.end.timestamp()
            )
            return None if payload is None else _decode(payload)
        except (StateError, ValueError, KeyError, TypeError) as exc:
            self._give_up(exc)
            return None

    def _save(self, window: Window, collected: Collected) -> None:
        if self._store is None:
            return
        try:
            self._store.save(
                self._cluster,
                self._fingerprint,
                window.start.timestamp(),
                window.end.timestamp(),
                _encode(collected),
            )
        except StateError as exc:
            self._give_up(exc)

    def _give_up(self, exc: Exception) -> None:
        log.warning("trend history store disabled for this digest, querying the backends instead: %s", exc)
        self._store = None


def policy_fingerprint(policy: Policy) -> str:
    """What the stored findings depend on: the graded checks' settings (a changed threshold recomputes)."""
    graded = {name: repr(getattr(policy, name)) for name in sorted(CHECK_POLICIES) if policy.graded(name)}
    return hashlib.sha256(json.dumps(graded, sort_keys=True).encode()).hexdigest()[:16]


def _encode(collected: Collected) -> str:
    findings = [
        {
            "name": finding.name,
            "status": finding.status.value,
            "penalty": finding.penalty,
            "value": finding.value,
            # Lines per namespace (error_lines): a namespace that logged every day and fell silent is named unseen.
            "namespace_lines": dict(finding.namespace_lines),
            "workload_lines": dict(finding.workload_lines),
            # Access-log lines per route (envoy_flags): a route that had requests every day and none today is unseen.
            "route_lines": dict(finding.route_lines),
            # The top signatures (their redacted shapes, never an example line): "gone since yesterday" reads them.
            "signatures": [
                {
                    "labels": dict(workload.labels),
                    "distinct": workload.distinct,
                    "capped": workload.capped,
                    "top": [
                        {"key": one.key, "text": one.text, "lines": one.lines, "share": one.share}
                        for one in workload.signatures
                    ],
                }
                for workload in finding.signatures
            ],
        }
        for finding in collected.findings
    ]
    return json.dumps({"findings": findings, "disabled": list(collected.disabled)})


def _decode(payload: str) -> Collected:
    """Findings as trends and grading need them: status, penalty, value and the top signatures (no wording)."""
    raw = json.loads(payload)
    findings = tuple(
        Finding(
            name=str(item["name"]),
            status=Status(item["status"]),
            penalty=int(item["penalty"]),
            value=None if item["value"] is None else float(item["value"]),
            summary="(stored by an earlier digest)",
            signatures=tuple(_decode_signatures(item.get("signatures", []))),
            namespace_lines={str(name): float(lines) for name, lines in item.get("namespace_lines", {}).items()},
            route_lines={str(name): float(lines) for name, lines in item.get("route_lines", {}).items()},
            workload_lines={str(name): float(lines) for name, lines in item.get("workload_lines", {}).items()},
        )
        for item in raw["findings"]
    )
    return Collected(findings=findings, disabled=tuple(str(name) for name in raw["disabled"]))


def _decode_signatures(raw: list[dict[str, object]]) -> list[WorkloadSignatures]:
    said = []
    for workload in raw:
        labels = workload["labels"]
        top = workload["top"]
        if not isinstance(labels, dict) or not isinstance(top, list):
            raise TypeError("stored signatures are not digest's")
        said.append(
            WorkloadSignatures(
                labels={str(name): str(value) for name, value in labels.items()},
                signatures=tuple(
                    Signature(
                        text=str(one["text"]),
                        lines=float(one["lines"]),
                        share=float(one["share"]),
                        first=0.0,
                        last=0.0,
                        key=str(one["key"]),
                    )
                    for one in top
                ),
                distinct=int(str(workload["distinct"])),
                capped=bool(workload["capped"]),
            )
        )
    return said


def graded_only(collected: Collected, policy: Policy) -> Collected:
    """The part of a day's findings that trends compare."""
    return Collected(
        findings=tuple(finding for finding in collected.findings if policy.graded(finding.name)),
        disabled=collected.disabled,
        complete=collected.complete,
        unwatched=collected.unwatched,
    )


async def previous_digests(
    cluster: str,
    window: Window,
    sources: Sources,
    policy: Policy,
    deadline_seconds: float,
    history: History | None = None,
) -> list[Digest]:
    """The graded checks of each previous window, newest first (yesterday is the first)."""
    checks = [check for check in build_checks(policy) if policy.graded(check.name)]
    windows = earlier_windows(window, policy.trends.days)
    shared = history if history is not None else History()

    def compute(past: Window) -> Callable[[], Awaitable[Collected]]:
        # A trend day does not look back a month for what it lacks: the digest's own window does (measure).
        return lambda: collect(checks, sources, past, policy, deadline_seconds, look_back=False)

    collected = await asyncio.gather(*(shared.get(past, compute(past)) for past in windows))
    return [
        grade(cluster, past, result.findings, result.disabled, policy)
        for past, result in zip(windows, collected, strict=True)
    ]


def trend_lines(today: Digest, history: list[Digest], policy: Policy) -> tuple[str, ...]:
    """The lines worth reading: signals far above their recent median, and the change of score since yesterday."""
    lines: list[str] = []
    for finding in today.findings:
        if not today.is_graded(finding) or finding.value is None or finding.status is Status.UNKNOWN:
            continue
        past = [_value(day, finding.name) for day in history]
        seen = [value for value in past if value is not None]
        if not seen:
            continue
        median = statistics.median(seen)
        # A healthy signal needs a much larger jump to be worth a line than one that already costs points.
        factor = policy.trends.min_factor if finding.status is not Status.OK else policy.trends.min_factor**2
        if median > 0 and finding.value >= factor * median:
            times = f"{fmt_int(finding.value / median)} times"
            if len(seen) == 1:
                # Not "the previous day" unless it is yesterday: the one day with data may be a week back.
                usual = f"{'the previous day' if past[0] is not None else 'the one earlier day with data'}'s"
                lines.append(
                    f"{finding.name} {_show(finding, finding.value)}: {times} {usual} {_show(finding, median)}"
                )
            else:
                days = f"last {len(seen)} days" if len(seen) == len(history) else f"{len(seen)} earlier days with data"
                lines.append(
                    f"{finding.name} {_show(finding, finding.value)}: {times} the usual {_show(finding, median)} "
                    f"(the middle of the {days})"
                )
        elif median == 0 and finding.value > 0 and finding.status is not Status.OK:
            if len(seen) == len(history):
                before = "the previous day" if len(seen) == 1 else f"the {len(seen)} previous days"
            elif len(seen) == 1:
                # Not "the previous day" unless it is yesterday: the one day with data may be a week back.
                before = "the previous day" if past[0] is not None else "the one earlier day with data"
            else:
                before = f"the {len(seen)} earlier days with data"
            lines.append(f"{finding.name} {_show(finding, finding.value)}, none on {before}")
    if history:
        yesterday = history[0]
        comparable = DigestStatus.UNKNOWN not in (yesterday.status, today.status)
        if comparable and yesterday.score != today.score:
            lines.append(f"score {yesterday.score} → {today.score} since yesterday")
    return tuple(lines)


def _value(digest: Digest, name: str) -> float | None:
    finding = next((item for item in digest.findings if item.name == name), None)
    if finding is None or finding.status is Status.UNKNOWN:
        return None
    return finding.value


def _show(finding: Finding, value: float) -> str:
    """A value in the unit of its check: ratios as percentages, counts as counts."""
    if finding.name == "conntrack":
        return f"{value * 100:.0f} %"
    return fmt_int(value)

"""Running the enabled checks of a policy concurrently over one window, and judging what each of them saw.

No check may crash the digest: a check that raises or overruns its deadline becomes an UNKNOWN finding that
carries the reason. Beside the checks, `checks.coverage` measures how much of the window and of the fleet the
sources they depend on covered (a constant number of queries), and its rule turns a clean result on partial data
into UNKNOWN.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from digest.backends.recorded import RecordedLogs
from digest.checks import coverage, registry
from digest.checks.contract import (
    Backend,
    Check,
    CountedFrom,
    Coverage,
    Finding,
    MetricsSource,
    RangeSeries,
    Sample,
    SourceError,
    SourceErrorKind,
    Sources,
    Status,
    Unwatched,
    Window,
    unknown,
)
from digest.checks.log_questions import (
    CountRow,
    Filter,
    LineCount,
    LineSeries,
    LogsSource,
    PeakCount,
    ShapeCount,
    Shapes,
)
from digest.pipeline.policy import Policy

log = logging.getLogger(__name__)

# The order checks appear in the digest and its JSON: the registry's.
CHECK_ORDER = registry.ORDER


@dataclass(frozen=True)
class Collected:
    """The findings of the enabled checks, in display order, and the names of the disabled ones.

    ``complete`` is False when a query failed, a check overran its deadline or raised, or a check saw only part
    of the window or of the fleet: the findings are still right to show (each says what it could not see), but not
    the final word on the window — a history store keeps only complete windows, so that a backend's bad minute or a
    day not over yet is not remembered as the day's truth.
    """

    findings: tuple[Finding, ...]
    disabled: tuple[str, ...]
    complete: bool = True
    # Checks whose every source is a component this cluster never had (no Envoy, no rule evaluator): not among the
    # findings, not graded, named once (`checks.coverage.unwatched`).
    unwatched: tuple[Unwatched, ...] = ()
    # Logs read whole from a store shared with other clusters: the nodes heard there that this cluster has not.
    foreign_nodes: tuple[str, ...] = ()
    # Metrics read whole from a store that holds several clusters (by the label the logs are scoped by): their names.
    metrics_clusters: tuple[str, ...] = ()
    # Logs read whole from a store whose lines carry the metrics' scope label with another value: the values.
    log_clusters: tuple[str, ...] = ()
    # Cluster selectors that matched nothing in the window, each as its setting and matchers.
    empty_scopes: tuple[str, ...] = ()


@dataclass
class _Failures:
    """Whether any query of one collection failed."""

    seen: bool = False


@dataclass(frozen=True)
class _WatchedMetrics:
    inner: MetricsSource
    failures: _Failures

    async def instant(self, query: str, at: datetime) -> list[Sample]:
        try:
            return await self.inner.instant(query, at)
        except SourceError:
            self.failures.seen = True
            raise

    async def range(self, query: str, start: datetime, end: datetime, step_seconds: int) -> list[RangeSeries]:
        try:
            return await self.inner.range(query, start, end, step_seconds)
        except SourceError:
            self.failures.seen = True
            raise


@dataclass(frozen=True)
class _WatchedLogs:
    inner: LogsSource
    failures: _Failures
    # The count questions one check asked (each check has its own): where their counts came from is said after.
    asked: list[LineCount | PeakCount] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def language(self) -> str:
        return self.inner.language

    async def count(self, question: LineCount) -> list[CountRow]:
        self.asked.append(question)
        try:
            return await self.inner.count(question)
        except SourceError:
            self.failures.seen = True
            raise

    async def peak(self, question: PeakCount) -> list[CountRow]:
        self.asked.append(question)
        try:
            return await self.inner.peak(question)
        except SourceError:
            self.failures.seen = True
            raise

    async def series(self, question: LineCount) -> list[LineSeries]:
        self.asked.append(question)
        try:
            return await self.inner.series(question)
        except SourceError:
            self.failures.seen = True
            raise

    async def shapes(self, question: ShapeCount) -> Shapes:
        try:
            return await self.inner.shapes(question)
        except SourceError as exc:
            # A backend that cannot group by shape has not failed: nothing to retry on a later run.
            if exc.kind is not SourceErrorKind.UNSUPPORTED:
                self.failures.seen = True
            raise

    async def values(self, name: str, window: Window) -> list[str]:
        try:
            return await self.inner.values(name, window)
        except SourceError:
            self.failures.seen = True
            raise

    def reading_query(self, window: Window, lines: Filter, most_repeated: bool = False) -> str:
        return self.inner.reading_query(window, lines, most_repeated)


def counted_from(logs: LogsSource, asked: Sequence[LineCount | PeakCount], window: Window) -> CountedFrom | None:
    """Where the counts of a check's questions about ``window`` came from (None: it asked for none).

    A source that reads recorded counts (`RecordedLogs`) says it per question; any other scanned them all.
    """
    mine = [question for question in asked if question.window == window]
    if not mine:
        return None
    origins = logs.origins if isinstance(logs, RecordedLogs) else {}
    recorded = scanned = 0.0
    notes: list[str] = []
    for question in mine:
        origin = origins.get(question, CountedFrom(0.0, float(window.seconds)))
        recorded, scanned = max(recorded, origin.recorded_seconds), max(scanned, origin.scanned_seconds)
        if origin.note and origin.note not in notes:
            notes.append(origin.note)
    return CountedFrom(recorded, scanned, "; ".join(notes))


def build_checks(policy: Policy) -> list[Check]:
    """The enabled checks, configured by the policy, in the registry's order."""
    return [entry.build(getattr(policy, entry.name)) for entry in registry.CHECKS if policy.enabled(entry.name)]


async def _guarded(
    check: Check, sources: Sources, window: Window, deadline_seconds: float, failures: _Failures
) -> Finding:
    try:
        async with asyncio.timeout(deadline_seconds):
            return await check(sources, window)
    except TimeoutError:
        failures.seen = True
        return unknown(
            check.name,
            f"{check.name} not checked: no answer within {deadline_seconds:g} s",
            f"timeout: no complete answer within the check deadline of {deadline_seconds:g} s",
        )
    except Exception as exc:  # a bug in one check must not take the whole digest down
        failures.seen = True
        log.exception("check %s failed", check.name)
        return unknown(check.name, f"{check.name} not checked: internal error", f"internal error: {type(exc).__name__}")


async def _coverage(
    checks: Sequence[Check],
    sources: Sources,
    window: Window,
    policy: Policy,
    deadline_seconds: float,
    look_back: bool,
) -> coverage.Report | str:
    """What the checks' sources covered, or why it could not be measured."""
    try:
        async with asyncio.timeout(deadline_seconds):
            return await coverage.measure(
                sources, window, (need for check in checks for need in check.needs()), policy.coverage, look_back
            )
    except TimeoutError:
        return f"no answer within the check deadline of {deadline_seconds:g} s"
    except Exception as exc:  # a bug in the coverage code must not take the digest down, nor read as full coverage
        log.exception("coverage failed")
        return f"internal error: {type(exc).__name__}"


async def collect(
    checks: Sequence[Check],
    sources: Sources,
    window: Window,
    policy: Policy,
    deadline_seconds: float,
    look_back: bool = True,
) -> Collected:
    """Run ``checks`` concurrently (the sources bound the number of queries in flight) and judge their coverage.

    ``look_back`` False for a trend day: what the cluster has is the digest's own window's to learn
    (`checks.coverage.measure`).
    """
    failures = _Failures()
    # Every check's run is cut off ``deadline_seconds`` from now (`_guarded`): the sources tell the checks when.
    watched = replace(
        sources,
        metrics=_WatchedMetrics(sources.metrics, failures),
        logs=_WatchedLogs(sources.logs, failures),
        deadline=asyncio.get_running_loop().time() + deadline_seconds,
    )
    # Each check its own log watcher, to say afterwards where the counts it asked for came from.
    watchers = [_WatchedLogs(sources.logs, failures) for _ in checks]
    own = [replace(watched, logs=watcher) for watcher in watchers]
    measuring = (
        asyncio.ensure_future(_coverage(checks, watched, window, policy, deadline_seconds, look_back))
        if policy.coverage.enabled
        else None
    )
    clusters = asyncio.ensure_future(_metrics_clusters(sources, window))
    log_clusters = asyncio.ensure_future(_log_clusters(sources, window))
    findings = list(
        await asyncio.gather(
            *(
                _guarded(check, mine, window, deadline_seconds, failures)
                for check, mine in zip(checks, own, strict=True)
            )
        )
    )
    for index, watcher in enumerate(watchers):
        counted = counted_from(sources.logs, watcher.asked, window)
        if counted is not None:
            findings[index] = replace(findings[index], counted_from=counted)
    partial = False
    unwatched: list[Unwatched] = []
    foreign: tuple[str, ...] = ()
    if measuring is not None:
        report = await measuring
        foreign = report.foreign_nodes if isinstance(report, coverage.Report) else ()
        for index, check in enumerate(checks):
            seen = (
                coverage.coverage_of(report, check.needs(), policy.coverage)
                if isinstance(report, coverage.Report)
                else Coverage(fraction=0.0, partial=True, error=report)
            )
            findings[index] = coverage.apply(findings[index], seen, window)
            partial = partial or seen.partial
            never = (
                coverage.unwatched(report, check.name, check.needs(), policy.coverage)
                if isinstance(report, coverage.Report)
                else None
            )
            # Only a check that found nothing: one that did (a WARN, a CRIT) saw something after all.
            if never is not None and findings[index].status in _NOTHING_FOUND:
                unwatched.append(never)
    several = await clusters
    in_logs = await log_clusters
    for index, check in enumerate(checks):
        if not any(need.backend is Backend.LOGS for need in check.needs()):
            continue
        # The logs' own label says they hold other clusters (even with the same node names); else their nodes do.
        if in_logs:
            findings[index] = _not_this_clusters(findings[index], in_logs, Mixed.LOG_CLUSTERS)
        elif foreign:
            findings[index] = _not_this_clusters(findings[index], foreign, Mixed.LOG_NODES)
    if len(several) > 1:
        # Several clusters' series in the metrics: no count, node or gap can be told to be this cluster's.
        findings = [_not_this_clusters(finding, several, Mixed.METRICS) for finding in findings]
        unwatched = []
    empty = await _empty_scopes(sources, window, checks, findings, unwatched)
    if empty:
        # A cluster selector that matches nothing: every check on that store is blind because of the setting, and
        # nothing it reads is "never had" (the store was not seen at all).
        for index, check in enumerate(checks):
            blind = [scope for scope in empty if any(need.backend is scope.backend for need in check.needs())]
            if blind:
                findings[index] = _scope_matches_nothing(findings[index], blind[0])
        blinded = {
            check.name for check in checks if any(need.backend in {s.backend for s in empty} for need in check.needs())
        }
        unwatched = [one for one in unwatched if one.name not in blinded]
    left_out = {one.name for one in unwatched}
    disabled = tuple(name for name in CHECK_ORDER if not policy.enabled(name))
    return Collected(
        findings=tuple(finding for finding in findings if finding.name not in left_out),
        disabled=disabled,
        complete=not failures.seen and not partial and not foreign and not in_logs and len(several) < 2 and not empty,
        unwatched=tuple(unwatched),
        foreign_nodes=foreign,
        metrics_clusters=several if len(several) > 1 else (),
        log_clusters=in_logs,
        empty_scopes=tuple(f"{scope.setting} {{{scope.written}}}" for scope in empty),
    )


@dataclass(frozen=True)
class EmptyScope:
    """A store's cluster selector that matched nothing in the window: the setting, as written."""

    backend: Backend
    setting: str
    written: str


async def _empty_scopes(
    sources: Sources,
    window: Window,
    checks: Sequence[Check],
    findings: Sequence[Finding],
    unwatched: Sequence[Unwatched],
) -> list[EmptyScope]:
    """The scoped stores whose scope finds nothing in the window, asked only where a check on them saw nothing.

    A typo in the selector (``cluster="prd"``) reads as every input missing ("never seen: kube-state-metrics"), with
    hints about exporters and policy switches that point the wrong way. One cheap question per scoped store settles
    it: any ``up`` series in the metrics' scope (one instant query), any value of the scope's label in the logs (the
    log store's index on Loki, a grouped count on VictoriaLogs). Asked only when a check on that store is UNKNOWN or
    left out as never had, so a day that reads fine costs no request. A failed question says nothing: the checks'
    own queries say what failed.
    """
    blind_names = {finding.name for finding in findings if finding.status is Status.UNKNOWN}
    blind_names |= {one.name for one in unwatched}
    empty: list[EmptyScope] = []
    for backend, written in ((Backend.METRICS, sources.metrics_scope), (Backend.LOGS, sources.logs_scope)):
        if not written:
            continue
        reading = [check for check in checks if any(need.backend is backend for need in check.needs())]
        if not any(check.name in blind_names for check in reading):
            continue
        try:
            if backend is Backend.METRICS:
                rows = await sources.metrics.instant(f"count(count_over_time(up[{window.promql_range()}]))", window.end)
                found = any(row.value > 0 for row in rows)
            else:
                found = bool(await sources.logs.values(sources.logs_scope_label, window))
        except SourceError:
            continue
        if not found:
            setting = "DIGEST_METRICS_SELECTOR" if backend is Backend.METRICS else "DIGEST_LOGS_SELECTOR"
            empty.append(EmptyScope(backend, setting, written))
    return empty


def _scope_matches_nothing(finding: Finding, scope: EmptyScope) -> Finding:
    """A finding on a store whose cluster selector matched nothing: UNKNOWN, costing nothing, naming the setting."""
    what = "series" if scope.backend is Backend.METRICS else "log lines"
    return _blinded(
        finding,
        summary=f"{finding.name} not checked: {scope.setting} matches nothing",
        error=f"{scope.setting} {{{scope.written}}} matches no {what} in the window",
        hint=(
            f"Check the label and its value in {scope.setting} (the Helm chart's backends.clusterSelector."
            f"{'metrics' if scope.backend is Backend.METRICS else 'logs'}); digest doctor lists the clusters the "
            "store holds."
        ),
        coverage=finding.coverage and replace(finding.coverage, missing=(), excused=(), never_seen=()),
    )


def _blinded(finding: Finding, summary: str, error: str, hint: str, coverage: Coverage | None) -> Finding:
    """``finding`` made UNKNOWN and costing nothing for a reason of the setting or the store, its evidence dropped."""
    return replace(
        finding,
        status=Status.UNKNOWN,
        penalty=0,
        summary=summary,
        error=error,
        hint=hint,
        coverage=coverage,
        offenders=(),
        evidence=(),
        signatures=(),
        signatures_note="",
        namespace_lines={},
        workload_lines={},
        route_lines={},
    )


async def _metrics_clusters(sources: Sources, window: Window) -> tuple[str, ...]:
    """The values of the label the logs are scoped by in the metrics' ``up`` series, when the metrics are not scoped.

    One instant query; () when nothing is to be asked or it fails (the checks' own queries will say what failed).
    """
    label = sources.metrics_unscoped_by
    if not label:
        return ()
    try:
        rows = await sources.metrics.instant(
            f"count by ({label}) (count_over_time(up[{window.promql_range()}]))", window.end
        )
    except SourceError:
        return ()
    return tuple(sorted({row.labels.get(label, "") for row in rows} - {""}))


async def _log_clusters(sources: Sources, window: Window) -> tuple[str, ...]:
    """The values of the metrics' scope label in logs read whole, when one is not this cluster's; else ().

    Asked only when the metrics are scoped (``cluster="prod"``) and the logs are not: the log backend's index (Loki's
    label values) or a count grouped by the field (VictoriaLogs). Logs without the label say nothing here; their
    nodes are judged instead (`checks.coverage.measure`). A failure says nothing either: the log checks' own
    queries say what failed.
    """
    label, ours = sources.logs_unscoped_by
    if not (sources.logs_unscoped and label):
        return ()
    try:
        values = await sources.logs.values(label, window)
    except SourceError:
        return ()
    found = tuple(sorted(set(values) - {""}))
    return found if set(found) - {ours} else ()


class Mixed(enum.Enum):
    """What showed that data read whole holds another cluster's."""

    LOG_NODES = "the logs name nodes this cluster does not have"
    LOG_CLUSTERS = "the logs' lines carry the metrics' cluster label with other values"
    METRICS = "the metrics carry the logs' cluster label with several values"


def _not_this_clusters(finding: Finding, foreign: Sequence[str], mixed: Mixed) -> Finding:
    """A finding on data that holds another cluster's: UNKNOWN and costing nothing, with why.

    Logs: the metrics are scoped to this cluster and the logs are not, and the logs named nodes the cluster does not
    have, or carry the metrics' scope label with another value, so their counts are several clusters' — a flood there
    may be none of this cluster's, a quiet day may hide one. Metrics: the logs are scoped and the metrics are not, and
    hold several clusters (named by the logs' label): every count, node and gap may be another cluster's, so none is
    named.
    """
    named = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
    coverage = finding.coverage
    if mixed is Mixed.METRICS:
        what = "metrics"
        error = f"the metrics hold several clusters ({named}): another cluster's series would be graded as this one's"
        hint = (
            "The metrics store is shared: set DIGEST_METRICS_SELECTOR as DIGEST_LOGS_SELECTOR is set; digest doctor "
            "lists the clusters it holds."
        )
        # The fleet was several clusters': no gap can be told to be this one's.
        coverage = coverage and replace(coverage, missing=(), excused=())
    else:
        what = "logs"
        held = (
            (f"lines of several clusters ({named})" if len(foreign) > 1 else f"lines of cluster {named}")
            if mixed is Mixed.LOG_CLUSTERS
            else f"lines of nodes this cluster does not have ({named})"
        )
        error = f"the logs hold {held}: another cluster's lines would be graded as this one's"
        hint = (
            "The log store is shared: set DIGEST_LOGS_SELECTOR to this cluster's stream field or label (as "
            "DIGEST_METRICS_SELECTOR scopes the metrics); digest doctor lists the clusters it holds."
        )
    return _blinded(
        finding, f"{finding.name} not checked: the {what} are not scoped to this cluster", error, hint, coverage
    )


# What a check with nothing to watch answers: nothing (OK) or that it had nothing to read (UNKNOWN).
_NOTHING_FOUND = (Status.OK, Status.UNKNOWN)

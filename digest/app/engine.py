"""The engine: settings and policy read once, then one window queried, checked and graded.

`make_digest` is the one function behind `digest run`, `digest demo`, the bot's `/digest` and its noon post, so a
replayed day runs exactly the code of today's digest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from digest.app.settings import ConfigError, LogBackend, RecordedCounts, Settings, load_settings
from digest.backends.http import tls_context
from digest.backends.prometheus import PrometheusSource
from digest.backends.recorded import RecordedLogs
from digest.backends.scope import render
from digest.backends.victorialogs import VictoriaLogsSource
from digest.checks.contract import Finding, Sightings, Sources, Window
from digest.checks.error_lines import ErrorLinesCheck
from digest.checks.log_questions import LogsSource
from digest.pipeline.ack_store import AckStore
from digest.pipeline.acks import Ack, from_policy
from digest.pipeline.collect import Collected, build_checks, collect
from digest.pipeline.novelty import Novelty, ShapeHistory, judge
from digest.pipeline.policy import Policy, PolicyError, load_policy
from digest.pipeline.recording import SHARED_FAMILIES, recording_plan
from digest.pipeline.score import Digest, grade
from digest.pipeline.silent_logs import judge_silent_logs
from digest.pipeline.state import HistoryStore, StateError
from digest.pipeline.trends import History, graded_only, previous_digests, shifted, trend_lines
from digest.pipeline.week import DayResult, Week, day_result, skipped_day, week_days
from digest.pipeline.window import WindowError, day_window

if TYPE_CHECKING:
    # Imported where used: a digest on VictoriaLogs does not need Loki's source.
    from digest.backends.loki import LokiSource

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Config:
    """Settings and policy, read once at start and passed down."""

    settings: Settings
    policy: Policy


def load_config() -> Config:
    """Settings from the environment, then the policy file they name; `ConfigError` names what is wrong."""
    settings = load_settings()
    try:
        policy = load_policy(settings.policy_file)
    except PolicyError as exc:
        raise ConfigError(f"DIGEST_POLICY_FILE: {exc}") from None
    return Config(settings=settings, policy=policy)


def open_history_store(settings: Settings) -> HistoryStore | None:
    """The trends' store of past graded findings in the state file; None (logged) when the file is unusable."""
    try:
        return HistoryStore(settings.state_path)
    except StateError as exc:
        log.warning("trends will query every past day: %s", exc)
        return None


def stored_history(config: Config, store: HistoryStore | None) -> History:
    """A `History` for one digest that reads and fills ``store``."""
    settings = config.settings
    scope = f"{render(settings.metrics_scope)} {render(settings.logs_scope)}".strip()
    return History(store=store, cluster=settings.cluster, policy=config.policy, scope=scope)


def policy_acks(policy: Policy) -> list[Ack]:
    """The policy's known exceptions (``acks:``) as acks."""
    return [from_policy(a.check, a.subject, a.reason, a.until, a.at_most) for a in policy.acks]


def load_acks(config: Config) -> list[Ack]:
    """The policy's exceptions, then the acks in the state file (none from it, logged, when it cannot be read).

    Blocking (SQLite): called off the event loop. An unreadable file costs the acks, which can only make the digest
    say more, never less.
    """
    acks = policy_acks(config.policy)
    settings = config.settings
    if not settings.state_path.exists():
        return acks
    try:
        store = AckStore(settings.state_path)
    except StateError as exc:
        log.warning("acks not read: %s", exc)
        return acks
    try:
        acks.extend(store.all(settings.cluster))
    except StateError as exc:
        log.warning("acks not read: %s", exc)
    finally:
        store.close()
    return acks


@asynccontextmanager
async def open_sources(settings: Settings, policy: Policy | None = None) -> AsyncIterator[Sources]:
    """HTTP clients of both backends, closed on exit. Share one pair to share the concurrency bound.

    The log backend is the one the settings select (Loki when DIGEST_LOKI_URL is set), reading the fields the
    policy's ``logs.fields`` names over its defaults.
    """
    vm, log_endpoint, elsewhere = settings.vm_endpoint(), settings.logs_endpoint(), settings.records_endpoint()
    tls = tls_context([vm.url, log_endpoint.url, *([elsewhere.url] if elsewhere else [])])
    fields = (policy or Policy()).logs.role_fields()
    plan = recording_plan(policy or Policy(), settings.logs_scope)
    metrics = PrometheusSource(vm, tls=tls, scope=settings.metrics_scope)
    logs: VictoriaLogsSource | LokiSource
    recount_up_to: int | None = None  # VictoriaLogs counts a day's lines again from its blocks' headers
    if settings.log_backend is LogBackend.LOKI:
        from digest.backends.loki import RECOUNT_LINES, LokiSource
        from digest.backends.passes import SharedPasses

        logs = LokiSource(log_endpoint, tls=tls, fields=fields, scope=settings.logs_scope)
        recount_up_to = RECOUNT_LINES
        # Loki reads every line of the window for each count: the checks' counts of one family share one pass.
        shared: LogsSource = SharedPasses(
            logs, recording_plan(policy or Policy(), settings.logs_scope), SHARED_FAMILIES
        )
    else:
        logs = VictoriaLogsSource(log_endpoint, tls=tls, fields=fields, scope=settings.logs_scope)
        shared = logs
    counted = shared
    records = metrics if elsewhere is None else PrometheusSource(elsewhere, tls=tls, scope=settings.metrics_scope)
    if settings.recorded_counts is RecordedCounts.AUTO:
        # Counts recorded by vmalert or Loki's ruler where they cover the window; the logs scanned for the rest.
        counted = RecordedLogs(counted, records, plan, recount_up_to)
    try:
        # Half scoped: the metrics name one cluster, the logs do not (the settings name no logs selector).
        half = bool(settings.metrics_scope) and not settings.logs_scope
        # The other half: the label the logs are scoped by, when the metrics are not scoped at all.
        by = next((one.name for one in settings.logs_scope if one.operator == "="), "")
        # And the metrics' label and value, when the logs are not scoped: asked of the logs, it tells their clusters.
        metrics_by = next(((one.name, one.value) for one in settings.metrics_scope if one.operator == "="), ("", ""))
        yield Sources(
            metrics=metrics,
            logs=counted,
            logs_unscoped=half,
            logs_unscoped_by=metrics_by if half else ("", ""),
            metrics_unscoped_by=by if not settings.metrics_scope else "",
            metrics_scope=render(settings.metrics_scope),
            logs_scope=render(settings.logs_scope),
            logs_scope_label=next((one.name for one in settings.logs_scope), ""),
            sightings=Sightings(),
        )
    finally:
        await metrics.aclose()
        await logs.aclose()
        if records is not metrics:
            await records.aclose()


async def make_digest(
    config: Config,
    window: Window,
    deadline_seconds: float | None = None,
    sources: Sources | None = None,
    history: History | None = None,
) -> Digest:
    """Query the backends for ``window`` and grade it. Never raises for a backend failure.

    Each check gets ``deadline_seconds`` (default: four query timeouts, room for its few sequential queries);
    a check that overruns it is UNKNOWN, so the digest comes back in bounded time even from a hung backend.
    ``sources`` lets several digests (a replay) share clients and so one bound on queries in flight; ``history``
    lets them share the previous days the trends compare with.
    """
    settings = config.settings
    deadline = deadline_seconds if deadline_seconds is not None else settings.query_timeout * 4
    if sources is None:
        async with open_sources(settings, config.policy) as own:
            return await _digest(config, window, deadline, own, history)
    return await _digest(config, window, deadline, sources, history)


async def _digest(config: Config, window: Window, deadline: float, sources: Sources, history: History | None) -> Digest:
    policy = config.policy
    cluster = config.settings.cluster
    checks = build_checks(policy)
    if history is not None and sources.sightings is not None:
        # What earlier digests learnt of the sources (the state file): a look-back asks only what it does not know.
        await history.recall_sightings(sources.sightings)
    if isinstance(sources.logs, RecordedLogs):
        sources.logs.graded(window)  # where counting the logs again is costly, only the digest's own window
    today = asyncio.ensure_future(collect(checks, sources, window, policy, deadline))
    past: list[Digest] = []
    if policy.trends.enabled and policy.trends.days:
        if history is not None:
            history.offer(window, _graded(today, policy))
        past = await previous_digests(cluster, window, sources, policy, deadline, history)
    # A namespace or a route that logged every earlier day and fell silent today is unseen, not quiet.
    collected = await judge_silent_logs(await today, past, checks, sources, window, policy)
    acks = await asyncio.to_thread(load_acks, config)
    digest = grade(cluster, window, collected.findings, collected.disabled, policy, collected.unwatched, acks)
    novelty = await _novelty(policy, sources, window, digest, past, history, deadline)
    digest = replace(
        digest,
        trends=trend_lines(digest, past, policy),
        novelty=novelty,
        complete=collected.complete,
        foreign_log_nodes=collected.foreign_nodes,
        metrics_clusters=collected.metrics_clusters,
        log_clusters=collected.log_clusters,
        empty_scopes=collected.empty_scopes,
    )
    if history is not None:
        await asyncio.to_thread(
            history.keep_day, window, digest
        )  # for the weekly digest, when a state file holds the history
        if sources.sightings is not None:
            await history.keep_sightings(sources.sightings)
    return digest


async def make_week(
    config: Config, year: int, week: int, store: HistoryStore | None = None, concurrency: int = 2
) -> Week:
    """The week at a glance: each day's result read from ``store``, or computed with `make_digest` (and stored).

    The days computed share clients (one bound on queries in flight) and one `History`, so the trends' earlier days
    they have in common are asked once; at most ``concurrency`` days are computed at once.
    """
    settings = config.settings
    history = stored_history(config, store)
    days = week_days(year, week)
    results: dict[date, DayResult] = {}
    windows: dict[date, Window] = {}
    for day in days:
        try:
            windows[day] = day_window(day, settings.zone)
        except WindowError:
            # A day the zone skipped (Samoa's 2011-12-30) has no digest: said so, never scored.
            results[day] = skipped_day(day, config.policy.grade.max_score, settings.zone)
            continue
        stored = await asyncio.to_thread(history.stored_day, windows[day])
        if stored is not None:
            results[day] = stored
    stored_days = sum(1 for day in results if day in windows)
    missing = [day for day in days if day not in results]
    if missing:
        gate = asyncio.Semaphore(max(1, concurrency))
        async with open_sources(settings, config.policy) as sources:

            async def one(day: date) -> tuple[date, Digest]:
                async with gate:
                    return day, await make_digest(config, windows[day], sources=sources, history=history)

            for day, digest in await asyncio.gather(*(one(day) for day in missing)):
                results[day] = day_result(day, digest)
    return Week(
        cluster=settings.cluster,
        year=year,
        week=week,
        days=tuple(results[day] for day in days),
        stored=stored_days,
    )


async def _novelty(
    policy: Policy,
    sources: Sources,
    window: Window,
    digest: Digest,
    past: list[Digest],
    history: History | None,
    deadline: float,
) -> Novelty | None:
    """New today and gone since yesterday, against the trends' earlier days (none when trends are off).

    Bounded like a check: ``deadline`` seconds from now, whatever the log backend's query slots are busy with.
    """
    check = next((one for one in build_checks(policy) if isinstance(one, ErrorLinesCheck)), None)
    if check is None or not past:
        return None
    earlier = [(day.window, _finding(day, check.name)) for day in past]
    try:
        yesterday: Window | None = shifted(window, 1)
    except WindowError:
        yesterday = None  # the zone skipped the day before: there is no yesterday to compare with
    if yesterday is not None and (past[0].window.start, past[0].window.end) != (yesterday.start, yesterday.end):
        yesterday = None
    shapes = history.shapes if history is not None else ShapeHistory()
    bounded = replace(sources, deadline=asyncio.get_running_loop().time() + deadline)
    return await judge(check, bounded, window, _finding(digest, check.name), earlier, shapes, yesterday)


def _finding(digest: Digest, name: str) -> Finding | None:
    return next((finding for finding in digest.findings if finding.name == name), None)


async def _graded(today: Awaitable[Collected], policy: Policy) -> Collected:
    return graded_only(await today, policy)


async def make_chart(
    config: Config,
    window: Window,
    path: Path,
    headline: str,
    sources: Sources | None = None,
    unseen: Sequence[tuple[float, float, str]] = (),
    said: str = "",
) -> str:
    """Draw the day's chart to ``path`` (PNG) and return its caption; the drawing runs off the event loop.

    ``unseen``: the digest's unseen spans (`digest.output.render.unseen_spans`), shaded on every panel; ``said``:
    what the worst workload's errors said (`digest.output.render.most_said`), under the error panel's title and in
    the caption.
    """
    # Pillow and the fonts cost every `digest run` their import and load time: only a chart pays it.
    from digest.output.chart import chart_caption, render_chart
    from digest.output.chart_data import collect_chart_data

    if sources is None:
        async with open_sources(config.settings, config.policy) as own:
            data = await collect_chart_data(own, window, config.policy)
    else:
        data = await collect_chart_data(sources, window, config.policy)
    await asyncio.to_thread(render_chart, data, path, headline, unseen, said)
    return chart_caption(headline, data, said)

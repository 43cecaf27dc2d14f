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
from pathlib import Path

from checks.contract import Sources, Window
from digest.app.settings import ConfigError, LogBackend, Settings, load_settings
from digest.backends.http import tls_context
from digest.backends.loki import LokiSource
from digest.backends.prometheus import PrometheusSource
from digest.backends.victorialogs import VictoriaLogsSource
from digest.pipeline.collect import Collected, build_checks, collect
from digest.pipeline.policy import Policy, PolicyError, load_policy
from digest.pipeline.score import Digest, grade
from digest.pipeline.state import HistoryStore, StateError
from digest.pipeline.trends import History, graded_only, previous_digests, trend_lines

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
    return History(store=store, cluster=config.settings.cluster, policy=config.policy)


@asynccontextmanager
async def open_sources(settings: Settings, policy: Policy | None = None) -> AsyncIterator[Sources]:
    """HTTP clients of both backends, closed on exit. Share one pair to share the concurrency bound.

    The log backend is the one the settings select (Loki when DIGEST_LOKI_URL is set), reading the fields the
    policy's ``logs.fields`` names over its defaults.
    """
    vm, log_endpoint = settings.vm_endpoint(), settings.logs_endpoint()
    tls = tls_context([vm.url, log_endpoint.url])
    fields = (policy or Policy()).logs.role_fields()
    metrics = PrometheusSource(vm, tls=tls)
    logs: VictoriaLogsSource | LokiSource
    if settings.log_backend is LogBackend.LOKI:
        logs = LokiSource(log_endpoint, tls=tls, fields=fields)
    else:
        logs = VictoriaLogsSource(log_endpoint, tls=tls, fields=fields)
    try:
        yield Sources(metrics=metrics, logs=logs)
    finally:
        await metrics.aclose()
        await logs.aclose()


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
    today = asyncio.ensure_future(collect(build_checks(policy), sources, window, policy, deadline))
    past: list[Digest] = []
    if policy.trends.enabled and policy.trends.days:
        if history is not None:
            history.offer(window, _graded(today, policy))
        past = await previous_digests(cluster, window, sources, policy, deadline, history)
    collected = await today
    digest = grade(cluster, window, collected.findings, collected.disabled, policy)
    return replace(digest, trends=trend_lines(digest, past, policy))


async def _graded(today: Awaitable[Collected], policy: Policy) -> Collected:
    return graded_only(await today, policy)


async def make_chart(
    config: Config,
    window: Window,
    path: Path,
    headline: str,
    sources: Sources | None = None,
    unseen: Sequence[tuple[float, float, str]] = (),
) -> str:
    """Draw the day's chart to ``path`` (PNG) and return its caption; the drawing runs off the event loop.

    ``unseen``: the digest's unseen spans (`digest.output.render.unseen_spans`), shaded on every panel.
    """
    # matplotlib costs every `digest run` its import time: only a chart pays it.
    from digest.output.chart import chart_caption, render_chart
    from digest.output.chart_data import collect_chart_data

    if sources is None:
        async with open_sources(config.settings, config.policy) as own:
            data = await collect_chart_data(own, window, config.policy)
    else:
        data = await collect_chart_data(sources, window, config.policy)
    await asyncio.to_thread(render_chart, data, path, headline, unseen)
    return chart_caption(headline, data)

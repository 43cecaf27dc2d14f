"""The engine: settings and policy read once, then one window queried, checked and graded.

`make_digest` is the one function behind `digest run`, `digest demo`, the bot's `/digest` and its noon post, so a
replayed day runs exactly the code of today's digest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from checks.contract import Sources, Window
from digest.collect import build_checks, collect
from digest.policy import Policy, PolicyError, load_policy
from digest.score import Digest, grade
from digest.settings import ConfigError, Settings, load_settings
from digest.sources import PrometheusSource, VictoriaLogsSource


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


@asynccontextmanager
async def open_sources(settings: Settings) -> AsyncIterator[Sources]:
    """HTTP clients of both backends, closed on exit. Share one pair to share the concurrency bound."""
    metrics = PrometheusSource(settings.vm_endpoint())
    logs = VictoriaLogsSource(settings.vl_endpoint())
    try:
        yield Sources(metrics=metrics, logs=logs)
    finally:
        await metrics.aclose()
        await logs.aclose()


async def make_digest(
    config: Config, window: Window, deadline_seconds: float | None = None, sources: Sources | None = None
) -> Digest:
    """Query the backends for ``window`` and grade it. Never raises for a backend failure.

    Each check gets ``deadline_seconds`` (default: four query timeouts, room for its few sequential queries);
    a check that overruns it is UNKNOWN, so the digest comes back in bounded time even from a hung backend.
    ``sources`` lets several digests (a replay) share clients and so one bound on queries in flight.
    """
    settings = config.settings
    deadline = deadline_seconds if deadline_seconds is not None else settings.query_timeout * 4
    if sources is None:
        async with open_sources(settings) as own:
            collected = await collect(build_checks(config.policy), own, window, config.policy, deadline)
    else:
        collected = await collect(build_checks(config.policy), sources, window, config.policy, deadline)
    return grade(settings.cluster, window, collected.findings, collected.disabled, config.policy)

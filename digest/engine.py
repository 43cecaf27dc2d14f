"""The engine: settings and policy read once, then one window queried, checked and graded.

`make_digest` is the one function behind `digest run`, `digest demo`, the bot's `/digest` and its noon post, so a
replayed day runs exactly the code of today's digest.
"""

from __future__ import annotations

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


async def make_digest(config: Config, window: Window, deadline_seconds: float | None = None) -> Digest:
    """Query the backends for ``window`` and grade it. Never raises for a backend failure.

    Each check gets ``deadline_seconds`` (default: four query timeouts, room for its few sequential queries);
    a check that overruns it is UNKNOWN, so the digest comes back in bounded time even from a hung backend.
    """
    settings = config.settings
    metrics = PrometheusSource(settings.vm_endpoint())
    logs = VictoriaLogsSource(settings.vl_endpoint())
    try:
        sources = Sources(metrics=metrics, logs=logs)
        deadline = deadline_seconds if deadline_seconds is not None else settings.query_timeout * 4
        collected = await collect(build_checks(config.policy), sources, window, config.policy, deadline)
    finally:
        await metrics.aclose()
        await logs.aclose()
    return grade(settings.cluster, window, collected.findings, collected.disabled, config.policy)

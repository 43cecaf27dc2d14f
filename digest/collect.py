"""Running the enabled checks of a policy concurrently over one window.

No check may crash the digest: a check that raises or overruns its deadline becomes an UNKNOWN finding that
carries the reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from checks.alerts import AlertsCheck
from checks.conntrack import ConntrackCheck
from checks.contract import Check, Finding, Sources, Window, unknown
from checks.cpu_throttling import CpuThrottlingCheck
from checks.empty_endpoints import EmptyEndpointsCheck
from checks.envoy_flags import EnvoyFlagsCheck
from checks.error_lines import ErrorLinesCheck
from checks.log_storms import LogStormsCheck
from checks.memory_pressure import MemoryPressureCheck
from checks.oom_kills import OomKillsCheck
from checks.restarts import RestartsCheck
from checks.rollouts import RolloutsCheck
from digest.policy import Policy

log = logging.getLogger(__name__)

# The order checks appear in the digest and its JSON.
CHECK_ORDER = (
    "oom_kills",
    "error_lines",
    "conntrack",
    "envoy_flags",
    "memory_pressure",
    "cpu_throttling",
    "restarts",
    "empty_endpoints",
    "rollouts",
    "log_storms",
    "alerts",
)


@dataclass(frozen=True)
class Collected:
    """The findings of the enabled checks, in display order, and the names of the disabled ones."""

    findings: tuple[Finding, ...]
    disabled: tuple[str, ...]


def build_checks(policy: Policy) -> list[Check]:
    """The enabled checks, configured by the policy."""
    every: dict[str, Check] = {
        "oom_kills": OomKillsCheck(policy.oom_kills),
        "error_lines": ErrorLinesCheck(policy.error_lines),
        "conntrack": ConntrackCheck(policy.conntrack),
        "envoy_flags": EnvoyFlagsCheck(policy.envoy_flags),
        "memory_pressure": MemoryPressureCheck(policy.memory_pressure),
        "cpu_throttling": CpuThrottlingCheck(policy.cpu_throttling),
        "restarts": RestartsCheck(policy.restarts),
        "empty_endpoints": EmptyEndpointsCheck(policy.empty_endpoints),
        "rollouts": RolloutsCheck(policy.rollouts),
        "log_storms": LogStormsCheck(policy.log_storms),
        "alerts": AlertsCheck(policy.alerts),
    }
    return [every[name] for name in CHECK_ORDER if policy.enabled(name)]


async def _guarded(check: Check, sources: Sources, window: Window, deadline_seconds: float) -> Finding:
    try:
        async with asyncio.timeout(deadline_seconds):
            return await check(sources, window)
    except TimeoutError:
        return unknown(
            check.name,
            f"{check.name} not checked: no answer within {deadline_seconds:g} s",
            f"timeout: no complete answer within the check deadline of {deadline_seconds:g} s",
        )
    except Exception as exc:  # a bug in one check must not take the whole digest down
        log.exception("check %s failed", check.name)
        return unknown(check.name, f"{check.name} not checked: internal error", f"internal error: {type(exc).__name__}")


async def collect(
    checks: Sequence[Check], sources: Sources, window: Window, policy: Policy, deadline_seconds: float
) -> Collected:
    """Run ``checks`` concurrently (the sources bound the number of queries in flight)."""
    findings = await asyncio.gather(*(_guarded(check, sources, window, deadline_seconds) for check in checks))
    disabled = tuple(name for name in CHECK_ORDER if not policy.enabled(name))
    return Collected(findings=tuple(findings), disabled=disabled)

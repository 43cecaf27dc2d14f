"""The one list of checks: each one's name, policy type, place in the digest, default grading, and questions.

Adding a check is one module in `checks/` plus one `Entry` here (and its typed section in
`digest.pipeline.policy.Policy`, which a test keeps in step with this list). The engine builds the enabled checks from
it, the policy loader reads each check's section with its policy type, and the benchmark's floor asks each check's
questions from ``asks`` instead of guessing them from method names.

``asks`` gives a check's fixed questions for a window by purpose: PromQL text for the metrics backend, or a
`LineCount` / `PeakCount` for the log backend. Questions a check derives from an earlier answer (the narrowed
queries of the restarted containers, conntrack's worst node) are not fixed, and not listed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from checks.alerts import AlertsCheck, AlertsPolicy
from checks.conntrack import ConntrackCheck, ConntrackPolicy
from checks.contract import Check, Window
from checks.cpu_throttling import CpuThrottlingCheck, CpuThrottlingPolicy
from checks.deployments import DeploymentsCheck, DeploymentsPolicy
from checks.empty_endpoints import EmptyEndpointsCheck, EmptyEndpointsPolicy
from checks.envoy_flags import EnvoyFlagsCheck, EnvoyFlagsPolicy
from checks.error_lines import ErrorLinesCheck, ErrorLinesPolicy
from checks.log_questions import LineCount, PeakCount
from checks.log_storms import LogStormsCheck, LogStormsPolicy
from checks.memory_pressure import MemoryPressureCheck, MemoryPressurePolicy
from checks.oom_kills import OomKillsCheck, OomKillsPolicy
from checks.readiness import ReadinessCheck, ReadinessPolicy
from checks.restarts import RestartsCheck, RestartsPolicy

Question = str | LineCount | PeakCount


@dataclass(frozen=True)
class Entry:
    """One check as the rest of the program knows it."""

    name: str
    policy_type: type[Any]
    build: Callable[[Any], Check]  # the check, configured by its policy section
    graded: bool  # costs points with the default policy (the seed rule's four); the policy may change that
    asks: Callable[[Any, Window], Mapping[str, Question]]  # the built check's fixed questions, by purpose


def _queries(check: Any, window: Window) -> Mapping[str, Question]:
    return dict(check.queries(window))


def _question(check: Any, window: Window) -> Mapping[str, Question]:
    return {"lines": check.question(window)}


# In the order the digest shows them.
CHECKS: tuple[Entry, ...] = (
    Entry("oom_kills", OomKillsPolicy, OomKillsCheck, True, _queries),
    Entry(
        "error_lines", ErrorLinesPolicy, ErrorLinesCheck, True, lambda check, window: {"lines": check.question(window)}
    ),
    Entry("conntrack", ConntrackPolicy, ConntrackCheck, True, _queries),
    Entry(
        "envoy_flags",
        EnvoyFlagsPolicy,
        EnvoyFlagsCheck,
        True,
        lambda check, window: {"access_log": check.log_question(window), "istio": check.istio_query(window)},
    ),
    Entry("memory_pressure", MemoryPressurePolicy, MemoryPressureCheck, False, _queries),
    Entry("cpu_throttling", CpuThrottlingPolicy, CpuThrottlingCheck, False, _queries),
    Entry("restarts", RestartsPolicy, RestartsCheck, False, _queries),
    Entry("readiness", ReadinessPolicy, ReadinessCheck, False, _queries),
    Entry("empty_endpoints", EmptyEndpointsPolicy, EmptyEndpointsCheck, False, _queries),
    Entry("deployments", DeploymentsPolicy, DeploymentsCheck, False, _queries),
    Entry("log_storms", LogStormsPolicy, LogStormsCheck, False, _question),
    Entry("alerts", AlertsPolicy, AlertsCheck, False, _queries),
)

BY_NAME: Mapping[str, Entry] = {entry.name: entry for entry in CHECKS}
ORDER: tuple[str, ...] = tuple(entry.name for entry in CHECKS)

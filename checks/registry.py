"""The one list of checks: each one's name, policy type, place in the digest, default grading, and questions.

Adding a check is one module in `checks/` plus one `Entry` here (and its typed section in
`digest.pipeline.policy.Policy`, which a test keeps in step with this list). The engine builds the enabled checks from
it, the policy loader reads each check's section with its policy type, and the benchmark's floor asks each check's
questions from ``asks`` instead of guessing them from method names.

``asks`` gives a check's fixed questions for a window by purpose: PromQL text for the metrics backend, or a
`LineCount` / `PeakCount` for the log backend. Questions a check derives from an earlier answer (the narrowed
queries of the restarted containers, conntrack's worst node) are not fixed, and not listed.

``inputs`` is what a check reads (its module's ``INPUTS``: metric families, log lines, log fields, JSON keys), which
`digest doctor` looks for in the backends; ``lines`` gives, for a check with log inputs, the lines whose fields it
reads (the doctor counts each field among them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import (
    alerts,
    conntrack,
    cpu_throttling,
    deployments,
    empty_endpoints,
    envoy_flags,
    error_lines,
    log_storms,
    memory_pressure,
    oom_kills,
    readiness,
    restarts,
    workloads,
)
from .alerts import AlertsCheck, AlertsPolicy
from .conntrack import ConntrackCheck, ConntrackPolicy
from .contract import Check, Input, Window
from .cpu_throttling import CpuThrottlingCheck, CpuThrottlingPolicy
from .deployments import DeploymentsCheck, DeploymentsPolicy
from .empty_endpoints import EmptyEndpointsCheck, EmptyEndpointsPolicy
from .envoy_flags import EnvoyFlagsCheck, EnvoyFlagsPolicy
from .error_lines import ErrorLinesCheck, ErrorLinesPolicy
from .log_questions import Filter, LineCount, PeakCount, native
from .log_storms import LogStormsCheck, LogStormsPolicy
from .memory_pressure import MemoryPressureCheck, MemoryPressurePolicy
from .oom_kills import OomKillsCheck, OomKillsPolicy
from .readiness import ReadinessCheck, ReadinessPolicy
from .restarts import RestartsCheck, RestartsPolicy
from .workloads import WorkloadsCheck, WorkloadsPolicy

Question = str | LineCount | PeakCount


@dataclass(frozen=True)
class Entry:
    """One check as the rest of the program knows it."""

    name: str
    policy_type: type[Any]
    build: Callable[[Any], Check]  # the check, configured by its policy section
    graded: bool  # costs points with the default policy (the seed rule's four); the policy may change that
    asks: Callable[[Any, Window], Mapping[str, Question]]  # the built check's fixed questions, by purpose
    inputs: tuple[Input, ...]  # what it reads: its module's INPUTS
    lines: Callable[[Any], Filter] | None = None  # the built check's lines, whose log fields it reads


def _queries(check: Any, window: Window) -> Mapping[str, Question]:
    return dict(check.queries(window))


def _question(check: Any, window: Window) -> Mapping[str, Question]:
    return {"lines": check.question(window)}


# In the order the digest shows them.
CHECKS: tuple[Entry, ...] = (
    Entry("oom_kills", OomKillsPolicy, OomKillsCheck, True, _queries, oom_kills.INPUTS),
    Entry(
        "error_lines",
        ErrorLinesPolicy,
        ErrorLinesCheck,
        True,
        lambda check, window: {"lines": check.question(window)},
        error_lines.INPUTS,
        lambda check: check.scope(),
    ),
    Entry("conntrack", ConntrackPolicy, ConntrackCheck, True, _queries, conntrack.INPUTS),
    Entry(
        "envoy_flags",
        EnvoyFlagsPolicy,
        EnvoyFlagsCheck,
        True,
        lambda check, window: {"access_log": check.log_question(window), "istio": check.istio_query(window)},
        envoy_flags.INPUTS,
        lambda check: check.scope(),
    ),
    Entry("memory_pressure", MemoryPressurePolicy, MemoryPressureCheck, False, _queries, memory_pressure.INPUTS),
    Entry("cpu_throttling", CpuThrottlingPolicy, CpuThrottlingCheck, False, _queries, cpu_throttling.INPUTS),
    Entry("restarts", RestartsPolicy, RestartsCheck, False, _queries, restarts.INPUTS),
    Entry("readiness", ReadinessPolicy, ReadinessCheck, False, _queries, readiness.INPUTS),
    Entry("empty_endpoints", EmptyEndpointsPolicy, EmptyEndpointsCheck, False, _queries, empty_endpoints.INPUTS),
    Entry("deployments", DeploymentsPolicy, DeploymentsCheck, False, _queries, deployments.INPUTS),
    Entry("workloads", WorkloadsPolicy, WorkloadsCheck, False, _queries, workloads.INPUTS),
    # Its fields are counted over its scope before it leaves the access logs out: the lines error_lines reads by
    # default, so that the doctor counts them once.
    Entry(
        "log_storms",
        LogStormsPolicy,
        LogStormsCheck,
        False,
        _question,
        log_storms.INPUTS,
        lambda check: native(check.policy.scope_filter),
    ),
    Entry("alerts", AlertsPolicy, AlertsCheck, False, _queries, alerts.INPUTS),
)

BY_NAME: Mapping[str, Entry] = {entry.name: entry for entry in CHECKS}
ORDER: tuple[str, ...] = tuple(entry.name for entry in CHECKS)

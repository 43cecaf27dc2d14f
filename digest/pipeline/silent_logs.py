"""Logs that are gone for one entity: a namespace, or a gateway route, that logged every earlier day and not today.

Coverage measures the logs per node (a stuck shipper), not per namespace or route: a shipper that drops one
namespace (an exclusion filter, a changed annotation, a tenant routed elsewhere) leaves every node shipping, and
error_lines grades what arrived as if it were the whole — 60,000 error lines a day of ``payments`` gone and the day
"OK 10/10". The same holds for the gateway's access log: a route whose records stop (a listener moved to another
log format, an access-log filter, a route renamed) leaves the gateway logging, and envoy_flags grades the other
routes as if they were all.

The entities are namespaces (input: their lines, `Finding.namespace_lines` from error_lines) and routes (input: their
access-log records, `Finding.route_lines` from envoy_flags); the earlier days the trends already compare hold the same
counts. An entity that wrote at least ``coverage.silence_lines`` lines an hour on average on every earlier day and
none today, while kube-state-metrics saw a pod of its namespace ready, is unseen for the whole window: the checks
that read those lines are partial and name it ("logs of namespace payments (24 h)", "access log of route
httproute/shop/api/rule/0 (24 h)"). One that never logs is never expected to, one scaled to zero is quiet, and
without earlier days (trends off, a first day) nothing is expected.

One metrics query, asked only when something fell silent: whether the pods of those namespaces ran. If that query
fails, the silence is named all the same (unseen is the safe side of not knowing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from checks import coverage
from checks.contract import Backend, Check, Finding, GapKind, SourceError, Sources, Status, Window
from checks.envoy_flags import upstream_namespace
from checks.promql import any_of
from digest.pipeline.collect import Collected
from digest.pipeline.policy import Policy
from digest.pipeline.score import Digest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Entities:
    """One kind of entity whose lines a check counts: which check, which counts, which namespace each runs in."""

    kind: GapKind
    counter: str  # the check whose finding holds the counts
    lines: Callable[[Finding], Mapping[str, float]]
    namespace: Callable[[str], str]
    readers: Callable[[Sequence[Check]], set[str]]  # the checks that read those lines


def _log_readers(checks: Sequence[Check]) -> set[str]:
    return {
        check.name for check in checks if any(need.backend is Backend.LOGS and need.per_node for need in check.needs())
    }


KINDS = (
    _Entities(
        GapKind.NAMESPACE, "error_lines", lambda finding: finding.namespace_lines, lambda name: name, _log_readers
    ),
    _Entities(
        GapKind.ROUTE,
        "envoy_flags",
        lambda finding: finding.route_lines,
        upstream_namespace,
        lambda _checks: {"envoy_flags"},
    ),
)


def _lines(finding: Finding | None, kind: _Entities) -> Mapping[str, float] | None:
    """The lines per entity a finding counted, None when it did not count them (blind, or an old record)."""
    if finding is None or finding.status is Status.UNKNOWN:
        return None
    return kind.lines(finding) or None


def running_query(namespaces: Sequence[str], window: Window) -> str:
    """PromQL: the namespaces among ``namespaces`` that had a pod ready in the window (a ready pod ran)."""
    ready = f'kube_pod_status_ready{{condition="true", namespace=~"{any_of(namespaces)}"}}'
    return f"max by (namespace) (max_over_time({ready}[{window.promql_range()}])) >= 1"


async def judge_silent_logs(
    collected: Collected,
    past: Sequence[Digest],
    checks: Sequence[Check],
    sources: Sources,
    window: Window,
    policy: Policy,
) -> Collected:
    """``collected`` with the namespaces and routes that fell silent named as unseen by the checks that read them."""
    if not policy.coverage.enabled:
        return collected
    candidates: dict[GapKind, list[str]] = {}
    for kind in KINDS:
        today = _lines(_finding(collected.findings, kind.counter), kind)
        if today is None:
            continue
        earlier = [
            lines for digest in past if (lines := _lines(_finding(digest.findings, kind.counter), kind)) is not None
        ]
        if fell := coverage.fell_silent(today, earlier, policy.coverage):
            candidates[kind.kind] = fell
    if not candidates:
        return collected
    by_kind = {kind.kind: kind for kind in KINDS}
    namespaces = sorted({by_kind[kind].namespace(name) for kind, names in candidates.items() for name in names} - {""})
    ran: set[str] | None = set()
    try:
        if namespaces:
            samples = await sources.metrics.instant(running_query(namespaces, window), window.end)
            ran = {s.labels.get("namespace", "") for s in samples if s.value >= 1}
    except SourceError as exc:
        log.warning("whether the pods of %s ran could not be read: %s", ", ".join(namespaces), exc)
        ran = None  # unknown: every candidate is named
    findings = tuple(collected.findings)
    named = False
    for kind_name, names in candidates.items():
        kind = by_kind[kind_name]
        # A route whose namespace its name does not tell cannot be proven idle: it is named.
        silent = [name for name in names if ran is None or kind.namespace(name) in ran or not kind.namespace(name)]
        if not silent:
            continue
        named = True
        readers = kind.readers(checks)
        findings = tuple(
            coverage.with_silent(finding, kind.kind, silent, window) if finding.name in readers else finding
            for finding in findings
        )
    if not named:
        return collected
    return replace(collected, findings=findings, complete=False)


def _finding(findings: Sequence[Finding], name: str) -> Finding | None:
    return next((finding for finding in findings if finding.name == name), None)

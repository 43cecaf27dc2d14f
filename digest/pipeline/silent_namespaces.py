"""Namespaces whose logs are gone: a namespace that logged every earlier day and wrote nothing today, its pods running.

Coverage measures the logs per node (a stuck shipper), not per namespace: a shipper that drops one namespace (an
exclusion filter, a changed annotation, a tenant routed elsewhere) leaves every node shipping, and error_lines grades
what arrived as if it were the whole — 60,000 error lines a day of ``payments`` gone and the day "OK 10/10". The
entities here are namespaces, the input their lines: error_lines counts every line per namespace
(`Finding.namespace_lines`), and the earlier days the trends already compare hold the same count. A namespace that
wrote at least ``coverage.silence_lines`` lines an hour on average on every earlier day and none today, while
kube-state-metrics saw a pod of it ready, is unseen for the whole window: every check that reads the pods' logs is
partial and names it ("logs of namespace payments (24 h)"). One that never logs is never expected to, one scaled to
zero is quiet, and without earlier days (trends off, a first day) nothing is expected.

One metrics query, asked only when a namespace fell silent: whether its pods ran. If that query fails, the silence
is named all the same (unseen is the safe side of not knowing).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from checks import coverage
from checks.contract import Backend, Check, Finding, SourceError, Sources, Status, Window
from checks.promql import any_of
from digest.pipeline.collect import Collected
from digest.pipeline.policy import Policy
from digest.pipeline.score import Digest

log = logging.getLogger(__name__)

# The check that counts every line per namespace.
_COUNTER = "error_lines"


def _lines(finding: Finding | None) -> dict[str, float] | None:
    """The lines per namespace a finding counted, None when it did not count them (blind, or an old record)."""
    if finding is None or finding.status is Status.UNKNOWN or not finding.namespace_lines:
        return None
    return dict(finding.namespace_lines)


def running_query(namespaces: Sequence[str], window: Window) -> str:
    """PromQL: the namespaces among ``namespaces`` that had a pod ready in the window (a ready pod ran)."""
    ready = f'kube_pod_status_ready{{condition="true", namespace=~"{any_of(namespaces)}"}}'
    return f"max by (namespace) (max_over_time({ready}[{window.promql_range()}])) >= 1"


async def judge_silent_namespaces(
    collected: Collected,
    past: Sequence[Digest],
    checks: Sequence[Check],
    sources: Sources,
    window: Window,
    policy: Policy,
) -> Collected:
    """``collected`` with the namespaces that fell silent named as unseen by every check that reads the pods' logs."""
    if not policy.coverage.enabled:
        return collected
    today = _lines(next((f for f in collected.findings if f.name == _COUNTER), None))
    if today is None:
        return collected
    earlier = [lines for digest in past if (lines := _lines(_finding(digest, _COUNTER))) is not None]
    candidates = coverage.silent_namespaces(today, earlier, policy.coverage)
    if not candidates:
        return collected
    try:
        samples = await sources.metrics.instant(running_query(candidates, window), window.end)
        silent = sorted({s.labels.get("namespace", "") for s in samples if s.value >= 1} & set(candidates))
    except SourceError as exc:
        log.warning("whether the pods of %s ran could not be read: %s", ", ".join(candidates), exc)
        silent = candidates
    if not silent:
        return collected
    readers = {
        check.name for check in checks if any(need.backend is Backend.LOGS and need.per_node for need in check.needs())
    }
    findings = tuple(
        coverage.with_silent_namespaces(finding, silent, window) if finding.name in readers else finding
        for finding in collected.findings
    )
    return replace(collected, findings=findings, complete=False)


def _finding(digest: Digest, name: str) -> Finding | None:
    return next((finding for finding in digest.findings if finding.name == name), None)

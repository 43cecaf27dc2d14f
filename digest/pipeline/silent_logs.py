"""Logs that are gone for one entity: a namespace, a workload or a route, that logged every earlier day and not today.

Coverage measures the logs per node (a stuck shipper), not per namespace or route: a shipper that drops one
namespace (an exclusion filter, a changed annotation, a tenant routed elsewhere) leaves every node shipping, and
error_lines grades what arrived as if it were the whole — 60,000 error lines a day of ``payments`` gone and the day
"OK 10/10". The same holds for the gateway's access log: a route whose records stop (a listener moved to another
log format, an access-log filter, a route renamed) leaves the gateway logging, and envoy_flags grades the other
routes as if they were all.

The entities are namespaces (input: their lines, `Finding.namespace_lines` from error_lines), workloads (their lines,
`Finding.workload_lines`: one workload's pods excluded by the shipper while the rest of its namespace logs) and routes
(input: their access-log records, `Finding.route_lines` from envoy_flags); the earlier days the trends already compare
hold the same counts. A workload of a namespace named silent is said once, as its namespace.

An entity that wrote at least ``coverage.silence_lines`` lines an hour on average on every earlier day and
none today, while what runs it ran (a namespace: a pod of it ready; a route: its Service, named like it, with a
ready endpoint — see `backend_query`), is unseen for the whole window: the checks
that read those lines are partial and name it ("logs of namespace payments (24 h)", "access log of route
httproute/shop/api/rule/0 (24 h)"). One that never logs is never expected to, one scaled to zero is quiet, and
without earlier days (trends off, a first day) nothing is expected.

One metrics query per kind, asked only when something of that kind fell silent: whether what runs it ran. If that
query fails, the silence is named all the same (unseen is the safe side of not knowing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from digest.checks import coverage
from digest.checks.contract import Backend, Check, Finding, GapKind, SourceError, Sources, Status, Window
from digest.checks.envoy_flags import upstream_namespace, upstream_route
from digest.checks.error_lines import workload_pods
from digest.checks.promql import any_of, quote, regex_literal
from digest.pipeline.collect import Collected
from digest.pipeline.policy import Policy
from digest.pipeline.score import Digest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Entities:
    """One kind of entity whose lines a check counts: which check holds the counts, who runs each, who reads them."""

    kind: GapKind
    counter: str  # the check whose finding holds the counts
    lines: Callable[[Finding], Mapping[str, float]]
    owner: Callable[[str], str]  # what must have run for the entity to be expected to log ("" unknown)
    running: Callable[[Sequence[str], Window], str]  # PromQL: the owners among these that ran, as label "owner"
    readers: Callable[[Sequence[Check]], set[str]]  # the checks that read those lines


def _log_readers(checks: Sequence[Check]) -> set[str]:
    return {
        check.name for check in checks if any(need.backend is Backend.LOGS and need.per_node for need in check.needs())
    }


def running_query(namespaces: Sequence[str], window: Window) -> str:
    """PromQL: the namespaces among ``namespaces`` that had a pod ready in the window (a ready pod ran)."""
    ready = f'kube_pod_status_ready{{condition="true", namespace=~"{any_of(namespaces)}"}}'
    ran = f"max by (namespace) (max_over_time({ready}[{window.promql_range()}])) >= 1"
    return f'label_replace({ran}, "owner", "$1", "namespace", "(.+)")'


# At most this many fallen-silent workloads are asked about at once (a shipper that lost a whole cluster's logs is
# a node or namespace gap already, named there).
_MOST_WORKLOADS = 50


def workload_running_query(workloads: Sequence[str], window: Window) -> str:
    """PromQL: the ``namespace/workload`` among ``workloads`` that had a pod ready in the window, as label "owner".

    A workload's pods are found by their names' pattern (`checks.error_lines.workload_pods`), as its lines are.
    """
    legs = []
    for owner in sorted(workloads)[:_MOST_WORKLOADS]:
        namespace, workload = owner.split("/", 1)
        ready = (
            f'kube_pod_status_ready{{condition="true", namespace="{quote(namespace)}", '
            f'pod=~"{quote(workload_pods(workload))}"}}'
        )
        ran = f"max(max_over_time({ready}[{window.promql_range()}])) >= 1"
        legs.append(f'label_replace({ran}, "owner", "{quote(owner)}", "", "")')
    return " or ".join(legs)


def backend_query(owners: Sequence[str], window: Window) -> str:
    """PromQL: the ``namespace/name`` owners whose Service of that name had a ready endpoint in the window.

    A route is expected to log only when its backend served: the Service named like the route (Envoy Gateway names
    no Service in its upstream, and a route and its Service usually share the name) had a ready address in an
    EndpointSlice (``<service>-xxxxx``), or, without EndpointSlice metrics, a pod named ``<name>-…`` was ready.
    A route whose Service is named otherwise is never expected: missed, rather than a false blind spot.
    """
    pairs = [owner.split("/", 1) for owner in owners if "/" in owner]
    namespaces = any_of(namespace for namespace, _ in pairs)
    names = "|".join(regex_literal(name) for name in sorted({name for _, name in pairs}))
    slice_name = quote(f"({names})-[a-z0-9]{{5}}")
    pod_name = quote(f"({names})-[a-z0-9]+(-[a-z0-9]+)?")
    look = window.promql_range()
    slices = (
        f'max by (namespace, endpointslice) (max_over_time(kube_endpointslice_endpoints{{ready="true", '
        f'namespace=~"{namespaces}", endpointslice=~"{slice_name}"}}[{look}])) >= 1'
    )
    pods = (
        f'max by (namespace, pod) (max_over_time(kube_pod_status_ready{{condition="true", '
        f'namespace=~"{namespaces}", pod=~"{pod_name}"}}[{look}])) >= 1'
    )
    by_slice = f'label_replace({slices}, "name", "$1", "endpointslice", "{slice_name}")'
    by_pod = f'label_replace({pods}, "name", "$1", "pod", "{pod_name}")'
    ran = f"max by (namespace, name) ({by_slice} or {by_pod})"
    return f'label_join({ran}, "owner", "/", "namespace", "name")'


def _route_owner(upstream: str) -> str:
    namespace = upstream_namespace(upstream)
    return f"{namespace}/{upstream_route(upstream)}" if namespace else ""


KINDS = (
    _Entities(
        GapKind.NAMESPACE,
        "error_lines",
        lambda finding: finding.namespace_lines,
        lambda name: name,
        running_query,
        _log_readers,
    ),
    _Entities(
        GapKind.WORKLOAD,
        "error_lines",
        lambda finding: finding.workload_lines,
        lambda name: name,
        workload_running_query,
        _log_readers,
    ),
    _Entities(
        GapKind.ROUTE,
        "envoy_flags",
        lambda finding: finding.route_lines,
        _route_owner,
        backend_query,
        lambda _checks: {"envoy_flags"},
    ),
)


def _lines(finding: Finding | None, kind: _Entities) -> Mapping[str, float] | None:
    """The lines per entity a finding counted, None when it did not count them (blind, or an old record)."""
    if finding is None or finding.status is Status.UNKNOWN:
        return None
    return kind.lines(finding) or None


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
    findings = tuple(collected.findings)
    named = False
    silent_namespaces: set[str] = set()
    for kind in KINDS:
        today = _lines(_finding(collected.findings, kind.counter), kind)
        if today is None:
            continue
        earlier = [
            lines for digest in past if (lines := _lines(_finding(digest.findings, kind.counter), kind)) is not None
        ]
        candidates = coverage.fell_silent(today, earlier, policy.coverage)
        if kind.kind is GapKind.WORKLOAD:
            # A workload of a namespace named silent already is said once, as its namespace.
            candidates = [name for name in candidates if name.split("/", 1)[0] not in silent_namespaces]
        owners = sorted({kind.owner(name) for name in candidates} - {""})
        if not owners:
            continue
        try:
            samples = await sources.metrics.instant(kind.running(owners, window), window.end)
            ran = {sample.labels.get("owner", "") for sample in samples if sample.value >= 1}
        except SourceError as exc:
            log.warning("whether %s ran could not be read: %s", ", ".join(owners), exc)
            ran = set(owners)  # unknown: unseen is the safe side of not knowing
        silent = [name for name in candidates if kind.owner(name) in ran]
        if not silent:
            continue
        if kind.kind is GapKind.NAMESPACE:
            silent_namespaces.update(silent)
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

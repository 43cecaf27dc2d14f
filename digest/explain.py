"""Cross-signal explanations: one line naming the likely cause of a bad day, with its evidence.

Counting errors is what every dashboard does; the post-mortems behind this project (`shared/seeds/`) each ended by
tying two or three signals together. Each rule below is one of those conclusions, written as a pure function of the
day's findings (no query of its own), so it fires on exactly the evidence the digest shows:

- ``uh_empty_endpoints`` (seed 003): UH answers while the service had no ready endpoint — for how long, and which
  Deployment was rolling out (strategy Recreate?).
- ``readiness_spiral`` (seed 000, 08-12): UH with CPU throttling and failed readiness probes in the same namespace.
- ``idle_timeout`` (seeds 000 and 004): UC — the upstream closes idle keep-alive connections before the proxy does;
  named with the inversion when the failure ratio is higher in quiet hours than in busy ones (seed 004).
- ``log_storm`` (seed 001): an error flood with restarts but no OOM kill — a crash loop or a retry storm.
- ``blind_spot`` (seed 001: zero alerts in 19 hours): CRITICAL findings but no alert fired.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from checks.contract import Finding, Offender, Status, fmt_int


@dataclass(frozen=True)
class Explanation:
    """One likely cause: the rule that found it and the sentence that says it."""

    rule: str
    text: str


Findings = dict[str, Finding]


def _bad(finding: Finding | None) -> bool:
    return finding is not None and finding.status in (Status.WARN, Status.CRIT)


def _offenders(finding: Finding | None) -> Sequence[Offender]:
    return finding.offenders if finding is not None else ()


def _number(offender: Offender, label: str) -> float:
    try:
        return float(offender.labels.get(label, "0") or 0)
    except ValueError:
        return 0.0


def _upstream_namespace(upstream: str) -> str:
    """``httproute/shop/api/rule/0`` → ``shop``; ``istio:pricing/quote`` → ``pricing``."""
    if upstream.startswith("istio:"):
        return upstream.removeprefix("istio:").split("/", 1)[0]
    parts = upstream.split("/")
    return parts[1] if len(parts) > 2 else ""


def _upstream_name(upstream: str) -> str:
    if upstream.startswith("istio:"):
        return upstream.rsplit("/", 1)[-1]
    parts = upstream.split("/")
    return parts[2] if len(parts) > 2 else upstream


def _flagged(findings: Findings, flag: str) -> list[Offender]:
    return [o for o in _offenders(findings.get("envoy_flags")) if flag in o.labels.get("flag", "").split(",")]


def uh_empty_endpoints(findings: Findings) -> Explanation | None:
    """UH while the matching service had no ready endpoint."""
    uh = _flagged(findings, "UH")
    empty = [o for o in _offenders(findings.get("empty_endpoints")) if _number(o, "empty_seconds") > 0]
    for answer in uh:
        namespace, route = _upstream_namespace(answer.labels["upstream"]), _upstream_name(answer.labels["upstream"])
        same = [o for o in empty if o.labels.get("namespace") == namespace]
        match = next((o for o in same if o.labels.get("service") == route), same[0] if len(same) == 1 else None)
        if match is None:
            continue
        service = f"{namespace}/{match.labels.get('service', '?')}"
        episodes = int(_number(match, "episodes"))
        longest = int(_number(match, "longest_seconds"))
        shape = f" in {episodes} episodes (longest {longest} s)" if episodes > 1 else ""
        # Pods that failed readiness explain the emptiness on their own (see readiness_spiral); without them, a
        # Deployment that lost all its replicas at once is the signature of a Recreate rollout.
        probing = any(
            o.labels.get("namespace") == namespace and _number(o, "readiness_failures") > 0
            for o in _offenders(findings.get("restarts"))
        )
        rollouts = [o for o in _offenders(findings.get("rollouts")) if o.labels.get("namespace") == namespace]
        rolling = ""
        if rollouts and not probing:
            deployment = f"{namespace}/{rollouts[0].labels.get('deployment')}"
            unavailable = rollouts[0].labels.get("max_unavailable", "its")
            rolling = (
                f"; {deployment} had {unavailable} replica(s) unavailable meanwhile: a rollout with strategy Recreate?"
            )
        return Explanation(
            "uh_empty_endpoints",
            f"No healthy upstream: {fmt_int(answer.value)} × UH while {service} had no ready endpoint for "
            f"{fmt_int(_number(match, 'empty_seconds'))} s{shape}{rolling}"
            + (" Overlap old and new pods (RollingUpdate maxUnavailable 0, maxSurge 1)." if rolling else "."),
        )
    return None


def readiness_spiral(findings: Findings) -> Explanation | None:
    """UH with CPU throttling and readiness failures in the same namespace."""
    uh = _flagged(findings, "UH")
    if not uh:
        return None
    throttled = [o for o in _offenders(findings.get("cpu_throttling")) if _bad(findings.get("cpu_throttling"))]
    failing = [o for o in _offenders(findings.get("restarts")) if _number(o, "readiness_failures") > 0]
    for answer in uh:
        namespace = _upstream_namespace(answer.labels["upstream"])
        hot = [o for o in throttled if o.labels.get("namespace") == namespace]
        probes = [o for o in failing if o.labels.get("namespace") == namespace]
        if not hot or not probes:
            continue
        worst = max(hot, key=lambda o: _number(o, "throttled_percent"))
        failures = sum(_number(o, "readiness_failures") for o in probes)
        pods = len({o.labels.get("pod") for o in probes})
        return Explanation(
            "readiness_spiral",
            f"Readiness spiral: {namespace} pods were CPU-throttled ({worst.labels.get('pod', '?')} "
            f"{worst.labels.get('throttled_percent', '?')} % of periods), {fmt_int(failures)} readiness probes "
            f"failed on {pods} pods, they left the endpoints and Envoy answered "
            f"{fmt_int(answer.value)} × UH. Remove the CPU limit (keep the request) and give probes a timeout above "
            "the worst latency.",
        )
    return None


def idle_timeout(findings: Findings) -> Explanation | None:
    """UC: the upstream closed kept-alive connections under the proxy — with the quiet-vs-busy numbers when known."""
    for answer in _flagged(findings, "UC"):
        upstream = answer.labels["upstream"]
        fix = "Set the proxy's idle timeout below the upstream's keep-alive."
        if "quiet_hours_percent" not in answer.labels:
            return Explanation(
                "idle_timeout",
                f"Idle-timeout ordering: {fmt_int(answer.value)} × UC on {upstream} — the upstream closed "
                f"kept-alive connections the proxy still used. {fix}",
            )
        quiet = _number(answer, "quiet_hours_percent")
        busy = _number(answer, "busy_hours_percent")
        worst = answer.labels.get("worst_hour", "")
        if quiet > 2 * busy and quiet > 0:
            at = f", worst at {worst}" if worst else ""
            return Explanation(
                "idle_timeout",
                f"Idle-timeout ordering: UC on {upstream} fails {quiet:.3g} % of requests in quiet hours vs "
                f"{busy:.3g} % in busy ones{at} — the less traffic, the more idle connections the upstream closes "
                f"under the proxy. {fix}",
            )
        return Explanation(
            "idle_timeout",
            f"Idle-timeout ordering: {fmt_int(answer.value)} × UC on {upstream}, {busy:.3g} % of requests in busy "
            f"hours vs {quiet:.3g} % in quiet ones (worst at {worst}) — connections the upstream closed while the "
            f"proxy still pooled them, here under load. {fix}",
        )
    return None


def log_storm(findings: Findings) -> Explanation | None:
    """An error flood with restarts but no OOM kill."""
    errors = findings.get("error_lines")
    oom = findings.get("oom_kills")
    if not _bad(errors) or errors is None or not errors.offenders or oom is None or oom.status is not Status.OK:
        return None
    flood = errors.offenders[0]
    namespace, workload = flood.labels.get("namespace", ""), flood.labels.get("workload", "")
    restarts = [
        o
        for o in _offenders(findings.get("restarts"))
        if o.labels.get("namespace") == namespace and o.labels.get("pod", "").startswith(workload)
    ]
    count = sum(_number(o, "restarts") for o in restarts)
    if not count:
        return None
    return Explanation(
        "log_storm",
        f"Log storm or crash loop: {namespace}/{workload} wrote {fmt_int(flood.value)} error lines and restarted "
        f"{fmt_int(count)} times without an OOM kill — read the first error after each restart; a retry loop "
        "without backoff repeats itself in the logs.",
    )


def blind_spot(findings: Findings) -> Explanation | None:
    """CRITICAL findings and no alert fired."""
    critical = [name for name, finding in findings.items() if finding.status is Status.CRIT and name != "alerts"]
    alerts = findings.get("alerts")
    if not critical or alerts is None:
        return None
    names = ", ".join(critical)
    if alerts.status is Status.OK and not alerts.value:
        return Explanation(
            "blind_spot",
            f"Blind spot: {names} went critical and no alert fired in the window — nobody was paged. Add alert "
            "rules for these signals.",
        )
    if alerts.status is Status.UNKNOWN:
        return Explanation(
            "blind_spot",
            f"Possible blind spot: {names} went critical and whether an alert fired could not be seen "
            f"({alerts.error or 'alerting not observable'}).",
        )
    return None


RULES: tuple[Callable[[Findings], Explanation | None], ...] = (
    uh_empty_endpoints,
    readiness_spiral,
    idle_timeout,
    log_storm,
    blind_spot,
)


def explain(findings: Sequence[Finding]) -> tuple[Explanation, ...]:
    """Every rule that fires on the day's findings, in the order above."""
    by_name = {finding.name: finding for finding in findings}
    found = (rule(by_name) for rule in RULES)
    return tuple(explanation for explanation in found if explanation is not None)

"""Cross-signal explanations: one sentence naming the cause of a bad day, with its evidence — or saying it cannot tell.

Counting errors is what every dashboard does; the post-mortems behind this project (`shared/seeds/`) each ended by
tying two or three signals together. Each rule below is one of those conclusions, written as a pure function of the
day's findings (no query of its own), so it fires on exactly the evidence the digest shows. A rule reads numbers
from the findings' typed facts and spans (`checks.contract.Quantity`, `Span`), so "not measured" is never read as 0,
and from the sources each finding says it read (``observed``) or could not (``unobserved``).

**No cause without its evidence.** Every cause a rule may name requires the evidence listed with it below. When that
evidence was not observable (an exporter absent), the sentence says what cannot be told instead of falling through
to the next cause. A cause is never chosen because the others were not seen.

Rules, in this order (the order of the explanations in the digest):

- ``no_healthy_upstream`` (seeds 000 and 003): UH answers while the route's own Service (named like the route) had
  no ready endpoint. Another Service of the namespace that was empty meanwhile is not borrowed as the cause: the
  sentence says the data cannot tell, and names it as untied. The cause of the emptiness is the first of these whose
  evidence overlaps the empty episodes in time (one scrape of slack either side), in this precedence:

  1. ``node_not_ready`` — a node the Service's pods ran on was NotReady (``kube_node_status_condition``) and those
     pods went unready with it (readiness). A node failure explains its pods' unreadiness, not the reverse.
  2. ``rollout`` — a rollout of the Service's Deployment (a ReplicaSet created in the window, or a generation
     change: deployments), with its strategy from kube-state-metrics (Recreate, or RollingUpdate with its
     parameters). A rollout explains new pods that are not ready yet; it is named before readiness for that reason.
  3. ``readiness`` — the Service's pods went unready without a restart and no rollout overlapped (readiness), with
     CPU throttling of those pods when cpu_throttling saw it (the readiness spiral of seed 000), or saying that
     throttling was not seen or not observable. Without node conditions, a node that stopped reporting would look the
     same: readiness is named only when the pods' nodes' kubelet answered through the episodes
     (readiness' ``node_reported_seconds``); otherwise the sentence says it cannot tell which.
  4. ``crash_loop`` — the Service's pods restarted (restarts) meanwhile.
  5. none of them: the sentence names the evidence that was missing ("rollout state not observable", "pods'
     readiness not observable") and the alternatives it cannot tell apart.

- ``stuck_rollout``: a rollout whose new ReplicaSet never became ready (deployments), with its pods' restarts and
  their reasons (restarts) or "never ready" (readiness).
- ``node_not_ready``: a node NotReady with pods that went unready with it, when no UH sentence already said it.
- ``idle_timeout`` (seeds 000 and 004): UC — the upstream closes idle keep-alive connections before the proxy does;
  named with the inversion when the failure ratio is higher in quiet hours than in busy ones (seed 004).
- ``log_storm`` (seed 001): an error flood with restarts but no OOM kill — a crash loop or a retry storm.
- ``crash_loop``: a container restarting in a loop (restarts CRIT) on its own evidence — its exit reasons, failed
  liveness probes, error lines — when neither the flood nor a stuck rollout said it already.
- ``blind_spot`` (seed 001: zero alerts in 19 hours): CRITICAL findings but no alert fired.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from digest.checks.contract import Event, Finding, Offender, Span, Status, fmt_duration, fmt_int, fmt_percent
from digest.checks.envoy_flags import route_name, upstream_namespace, upstream_route
from digest.checks.error_lines import workload_of


@dataclass(frozen=True)
class Explanation:
    """One likely cause: the rule that found it, the cause it names ("" when it cannot tell), and the sentence.

    ``short`` says it in one phone line (the first screen), ``fix`` is the sentence's action alone ("" when the data
    gives none): the first screen's "where to look". ``text`` keeps every figure.
    """

    rule: str
    text: str
    cause: str = ""
    short: str = ""
    fix: str = ""


Findings = dict[str, Finding]


def _bad(finding: Finding | None) -> bool:
    return finding is not None and finding.status in (Status.WARN, Status.CRIT)


def _offenders(finding: Finding | None) -> Sequence[Offender]:
    return finding.offenders if finding is not None else ()


def _events(finding: Finding | None, kind: str) -> list[Event]:
    return [event for event in (finding.events if finding is not None else ()) if event.kind == kind]


def _observes(finding: Finding | None, family: str) -> bool:
    """Whether the check ran and read ``family`` (an UNKNOWN finding observed nothing)."""
    return finding is not None and finding.status is not Status.UNKNOWN and family in finding.observed


def _flagged(findings: Findings, flag: str) -> list[Offender]:
    return [o for o in _offenders(findings.get("envoy_flags")) if flag in o.labels.get("flag", "").split(",")]


def _slack(offender: Offender) -> float:
    """One scrape either side: a duration read from scrapes is known to one scrape."""
    return offender.fact("resolution_seconds") or 30.0


def _overlaps(spans: Sequence[Span], other: Sequence[Span], slack: float) -> bool:
    return any(a.overlaps(b, slack) for a in spans for b in other)


def _member(pod: Offender, namespace: str, service: str) -> bool:
    """Whether a readiness offender is one of the Service's pods (by its EndpointSlice, else by name)."""
    if pod.labels.get("namespace") != namespace:
        return False
    services = pod.labels.get("service", "")
    if services:
        return service in services.split(",")
    return pod.labels.get("pod", "").startswith(f"{service}-")


def _owned(pod_name: str, event: Event) -> bool:
    """Whether a pod belongs to the rollout's ReplicaSet, or to its Deployment (pods are <deployment>-<hash>-<id>)."""
    replicaset = event.labels.get("replicaset", "")
    deployment = event.labels.get("deployment", "")
    if replicaset and pod_name.startswith(f"{replicaset}-"):
        return True
    # <deployment>-<10-character ReplicaSet hash>-<5 characters>: the hash part keeps "api" from owning "api-gw-…".
    rest = pod_name.removeprefix(f"{deployment}-") if deployment else pod_name
    parts = rest.split("-")
    return rest != pod_name and len(parts) == 2 and len(parts[1]) == 5


def _strategy(event: Event) -> str:
    kind = event.labels.get("strategy", "")
    if kind == "Recreate":
        return "strategy Recreate: the old pods stop before the new ones are ready"
    if kind == "RollingUpdate":
        unavailable = event.facts.get("max_unavailable_setting")
        surge = event.facts.get("max_surge_setting")
        return (
            f"strategy RollingUpdate maxUnavailable {fmt_int(unavailable.value) if unavailable else '?'}, "
            f"maxSurge {fmt_int(surge.value) if surge else '?'}"
        )
    return "its strategy not observable"


def _empty_cause(findings: Findings, namespace: str, service: str, empty: Offender) -> tuple[str, str, str, str]:
    """The cause of one Service's empty episodes, the words that say it, the fix and the cause in a few words.

    By the module doc's precedence.
    """
    readiness = findings.get("readiness")
    deployments = findings.get("deployments")
    spans, slack = empty.spans, 2 * _slack(empty)
    pods = [pod for pod in _offenders(readiness) if _member(pod, namespace, service)]
    # 1. A node NotReady under the Service's pods, in the episodes.
    for event in _events(readiness, "node_not_ready"):
        node = event.labels.get("node", "")
        on_node = [p for p in pods if p.labels.get("node") == node and (p.fact("with_node_not_ready_seconds") or 0) > 0]
        if on_node and _overlaps(spans, [event.span], slack):
            return (
                "node_not_ready",
                f"node {node} was NotReady for {fmt_duration(event.span.seconds)} and {len(on_node)} of the Service's "
                "pods went unready with it (no restart needed: the node stopped reporting)",
                _FIXES["node_not_ready"].format(node=node),
                f"node {node} NotReady",
            )
    # 2. A rollout of the Service's Deployment in the episodes.
    rollouts = [
        event
        for event in _events(deployments, "rollout")
        if event.labels.get("namespace") == namespace and _overlaps(spans, [event.span], slack)
    ]
    # Only a rollout of the Service's own Deployment: named like it, or owning one of its pods. Another Deployment's
    # rollout at the same time is a coincidence until the data ties the two.
    listed = [name for name in empty.labels.get("pods", "").split(",") if name]
    own = [
        event
        for event in rollouts
        if event.labels.get("deployment") == service
        or any(_owned(p.labels.get("pod", ""), event) for p in pods)
        or any(_owned(name, event) for name in listed)
    ]
    if own:
        event = own[0]
        deployment = f"{namespace}/{event.labels.get('deployment', '?')}"
        state = event.labels.get("state", "")
        words = f"a rollout of {deployment} ({_strategy(event)})"
        if state == "stuck":
            words += ", whose new ReplicaSet never became ready"
        fix = (
            " Use RollingUpdate with maxUnavailable 0 / maxSurge 1."
            if event.labels.get("strategy") in ("Recreate", "")
            else ""
        )
        short = "a stuck rollout" if state == "stuck" else f"a rollout ({event.labels.get('strategy') or 'strategy ?'})"
        return "rollout", words, fix, short
    rollouts_seen = _observes(deployments, "kube_replicaset_created") or _observes(
        deployments, "kube_deployment_metadata_generation"
    )
    # 3. Pods unready without a restart, no rollout.
    unready = [p for p in pods if p.labels.get("state") == "not ready" and p.spans and _overlaps(spans, p.spans, slack)]
    if unready and all(p.fact("restarts") == 0 for p in unready):
        if not rollouts_seen:
            no_rollout = "rollouts not observable"
        elif _events(deployments, "rollout"):
            no_rollout = "no rollout of its Deployment"  # others rolled out: "that day" would contradict them
        else:
            no_rollout = "no rollout that day"
        node_words = ""
        if not _observes(readiness, "kube_node_status_condition"):
            # A node that stops reporting makes its pods unready too. Without the nodes' condition, the nodes' own
            # kubelet answering through every episode is the evidence that they did not (node_exporter is not: it
            # answers while a hung kubelet leaves the node NotReady).
            if not all(_node_kept_reporting(p) for p in unready):
                return (
                    "",
                    f"{len(unready)} of its pods went unready without a restart — failing readiness probes or their "
                    "node stopping to report, the data cannot tell which (nodes' condition not observable, and "
                    f"their kubelet not seen answering through the episodes; {no_rollout})",
                    "",
                    "pods unready, probes or nodes: the data cannot tell",
                )
            node_words = "; their nodes' kubelet answered throughout (no node condition series)"
        throttled, words = _throttling(findings, namespace, {p.labels.get("pod", "") for p in unready})
        fix = _FIXES["readiness"] if throttled else _FIXES["probes"]
        return (
            "readiness",
            f"{len(unready)} of its pods went unready without a restart{words}{_probes(unready)}{node_words}; "
            f"{no_rollout}",
            fix,
            "pods unready under CPU throttling" if throttled else "pods unready, probes failing",
        )
    # 4. Pods that restarted.
    listed_pods = set(listed)
    restarted = [
        o
        for o in _offenders(findings.get("restarts"))
        if o.labels.get("namespace") == namespace
        and (o.labels.get("pod", "") in listed_pods or o.labels.get("pod", "").startswith(f"{service}-"))
    ]
    if restarted:
        count = sum(o.fact("restarts") or 0 for o in restarted)
        reasons = restarted[0].labels.get("reasons", "?")
        return (
            "crash_loop",
            f"its pods restarted {fmt_int(count)} times meanwhile ({reasons})",
            _FIXES["crash_loop"],
            "its pods restarting",
        )
    # 5. What cannot be told.
    missing = []
    if rollouts:
        others = ", ".join(sorted({f"{namespace}/{e.labels.get('deployment', '?')}" for e in rollouts}))
        missing.append(f"a rollout of {others} overlapped, but nothing in the data ties it to this Service")
    if not rollouts_seen:
        missing.append("rollout state not observable")
    if not _observes(readiness, "kube_pod_status_ready"):
        missing.append("pods' readiness not observable")
    if missing:
        # Only what could have happened unseen is offered as a possibility: a rollout when rollouts were not
        # observable (an observed day without one had none), failing readiness when readiness was not.
        possible = [
            words
            for words, unseen in (
                ("a rollout", not rollouts_seen),
                ("failing readiness", not _observes(readiness, "kube_pod_status_ready")),
            )
            if unseen
        ]
        if len(possible) == 2:
            opening = "either a rollout or failing readiness"
        elif possible:
            opening = f"possibly {possible[0]}, the data cannot tell"
        else:
            opening = "the data cannot tell why"
        return "", f"{opening} — {'; '.join(missing)}", "", "the data cannot tell why"
    return (
        "",
        "no rollout, no pod seen unready or restarting: the data does not say why",
        "",
        "the data cannot tell why",
    )


def _node_kept_reporting(pod: Offender) -> bool:
    """Whether the pod's node's kubelet answered through (95 % of) its unready time."""
    reported, unready = pod.fact("node_reported_seconds"), pod.fact("not_ready_seconds")
    return reported is not None and unready is not None and unready > 0 and reported >= 0.95 * unready


def _throttling(findings: Findings, namespace: str, pods: set[str]) -> tuple[bool, str]:
    """Whether these pods' containers were throttled, and the words that say it (or that it was not seen)."""
    throttling = findings.get("cpu_throttling")
    if throttling is None or throttling.status is Status.UNKNOWN:
        return False, " (CPU throttling not observable)"
    bad = throttling.offenders if _bad(throttling) else ()
    hot = [o for o in bad if o.labels.get("namespace") == namespace and o.labels.get("pod") in pods]
    if not hot:
        if len(bad) < (throttling.value or 0):
            # Only the worst containers are listed: these pods may be throttled below them.
            return False, " (CPU throttling of these pods not among the containers listed)"
        return False, " with no CPU throttling seen on them (the probes' cause is not in these metrics)"
    worst = max(hot, key=lambda o: o.fact("worst_5m_ratio") or o.fact("throttled_ratio") or 0.0)
    day, peak = worst.fact("throttled_ratio"), worst.fact("worst_5m_ratio")
    # The worst 5 minutes say what the probes lived through; the day's ratio averages the quiet hours in.
    share = ", ".join(
        text
        for text in (
            f"{fmt_percent(peak)} of periods in its worst 5 minutes" if peak is not None else "",
            f"{fmt_percent(day)} over the day" if day is not None else "",
        )
        if text
    )
    return (
        True,
        f" under CPU throttling ({worst.labels.get('pod', '?')}: {share})" if share else " under CPU throttling",
    )


def _probes(pods: Sequence[Offender]) -> str:
    failures = [p.fact("readiness_failures") for p in pods]
    if any(value is None for value in failures):
        return ""
    return f", {fmt_int(sum(v or 0 for v in failures))} readiness probes failed"


_ROLL_BACK = "Read the new pods' logs (kubectl logs --previous) and roll back (kubectl rollout undo) or fix forward."
_FIXES = {
    "readiness": " Remove the CPU limit (keep the request) and give probes a timeout above the worst latency.",
    "probes": " Give the probes a timeout above the worst latency and check what they depend on.",
    # {node}: filled in where the node is known.
    "node_not_ready": " Read {node}'s kubelet log (journalctl -u kubelet) from when it went NotReady.",
    "crash_loop": " Read the first error after each restart (kubectl logs --previous).",
}


def no_healthy_upstream(findings: Findings) -> Explanation | None:
    """UH while the matching Service had no ready endpoint, with the cause of the emptiness or what cannot tell it."""
    empty = [o for o in _offenders(findings.get("empty_endpoints")) if (o.fact("empty_seconds") or 0) > 0]
    untied: list[tuple[Offender, str, list[Offender]]] = []
    for answer in _flagged(findings, "UH"):
        namespace, route = upstream_namespace(answer.labels["upstream"]), upstream_route(answer.labels["upstream"])
        same = [o for o in empty if o.labels.get("namespace") == namespace]
        # Only the route's own backend: another Service of the namespace that was empty meanwhile (a Recreate
        # rollout of shop/cart beside UH on shop/api) is a coincidence until the data ties the two.
        match = next((o for o in same if o.labels.get("service") == route), None)
        # The answers' hours (from the access log) must meet the empty episodes: emptiness at another time of the day
        # explains nothing about these answers.
        if (
            match is not None
            and answer.spans
            and match.spans
            and not _overlaps(answer.spans, match.spans, 2 * _slack(match))
        ):
            untied.append((answer, route, [match]))
            continue
        if match is None:
            if same:
                untied.append((answer, route, same))
            continue
        service = match.labels.get("service", "?")
        episodes = match.fact("episodes")
        shape = ""
        if episodes is not None and episodes > 1:
            shape = f" in {fmt_int(episodes)} episodes (longest {fmt_duration(match.fact('longest_seconds') or 0)})"
        cause, words, fix, short = _empty_cause(findings, namespace, service, match)
        return Explanation(
            "no_healthy_upstream",
            f"No healthy upstream: {fmt_int(answer.value)} × UH while {namespace}/{service} had no ready endpoint "
            f"for {fmt_duration(match.fact('empty_seconds') or 0)}{shape}: {words}.{fix}",
            cause,
            short=f"No ready endpoint on {namespace}/{service} for {fmt_duration(match.fact('empty_seconds') or 0)}: "
            f"{short}",
            fix=fix.strip(),
        )
    if untied:
        answer, route, same = untied[0]
        namespace = upstream_namespace(answer.labels["upstream"])
        if [o.labels.get("service") for o in same] == [route]:
            return Explanation(
                "no_healthy_upstream",
                f"No healthy upstream: {fmt_int(answer.value)} × UH on {answer.labels['upstream']}; the data cannot "
                f"tell why — {namespace}/{route} had no ready endpoint only at other times of the day.",
                "",
                short=f"No healthy upstream on {namespace}/{route}: the data cannot tell why",
            )
        others = ", ".join(sorted(f"{namespace}/{o.labels.get('service', '?')}" for o in same))
        return Explanation(
            "no_healthy_upstream",
            f"No healthy upstream: {fmt_int(answer.value)} × UH on {answer.labels['upstream']}; the data cannot tell "
            f"why — no Service {namespace}/{route} was seen without a ready endpoint, and nothing in the data ties "
            f"the route to {others}, which had none that day.",
            "",
            short=f"No healthy upstream on {namespace}/{route}: the data cannot tell why",
        )
    return None


def stuck_rollout(findings: Findings) -> Explanation | None:
    """A rollout whose new ReplicaSet never became ready, with what its pods did."""
    for event in _events(findings.get("deployments"), "rollout"):
        state = event.labels.get("state")
        if state not in ("stuck", "progress not observable"):
            continue
        namespace = event.labels.get("namespace", "")
        replicaset = event.labels.get("replicaset", "")
        restarted = [
            o
            for o in _offenders(findings.get("restarts"))
            if o.labels.get("namespace") == namespace and o.labels.get("pod", "").startswith(f"{replicaset}-")
        ]
        never = [
            o
            for o in _offenders(findings.get("readiness"))
            if o.labels.get("namespace") == namespace
            and o.labels.get("pod", "").startswith(f"{replicaset}-")
            and o.labels.get("state") == "never ready"
        ]
        if state != "stuck" and not never:
            continue  # ReplicaSet progress not exported and no pod of it seen never ready: nothing says it is stuck
        if restarted:
            count = sum(o.fact("restarts") or 0 for o in restarted)
            pods = f"its pods crash-loop ({fmt_int(count)} restarts: {restarted[0].labels.get('reasons', '?')})"
        elif never:
            quiet = all(o.fact("restarts") == 0 for o in never)
            pods = f"{len(never)} of its pods never became ready" + (", without restarting" if quiet else "")
        else:
            pods = "its pods are not ready (why is not in the data: no restart or readiness seen for them)"
        return Explanation(
            "stuck_rollout",
            f"Stuck rollout: {namespace}/{event.labels.get('deployment', '?')}'s new ReplicaSet {replicaset} "
            f"({_strategy(event)}) never became ready — {pods}. {_ROLL_BACK}",
            "stuck_rollout",
            short=f"Stuck rollout of {namespace}/{event.labels.get('deployment', '?')}: {pods.split(' (')[0]}",
            fix=_ROLL_BACK,
        )
    return None


def node_not_ready(findings: Findings) -> Explanation | None:
    """A node NotReady whose pods went unready with it."""
    readiness = findings.get("readiness")
    for event in _events(readiness, "node_not_ready"):
        node = event.labels.get("node", "")
        pods = [
            o
            for o in _offenders(readiness)
            if o.labels.get("node") == node and (o.fact("with_node_not_ready_seconds") or 0) > 0
        ]
        if not pods:
            continue
        return Explanation(
            "node_not_ready",
            f"Node {node} was NotReady for {fmt_duration(event.span.seconds)}: {len(pods)} of its pods went unready "
            "with it, without a restart." + _FIXES["node_not_ready"].format(node=node),
            "node_not_ready",
            short=f"Node {node} NotReady for {fmt_duration(event.span.seconds)}: {len(pods)} of its pods unready",
            fix=_FIXES["node_not_ready"].format(node=node).strip(),
        )
    return None


def idle_timeout(findings: Findings) -> Explanation | None:
    """UC: the upstream closed kept-alive connections under the proxy — with the quiet-vs-busy numbers when known."""
    for answer in _flagged(findings, "UC"):
        upstream = answer.labels["upstream"]
        fix = "Set the proxy's idle timeout below the upstream's keep-alive."
        short = f"Idle timeouts on {route_name(upstream)}: the upstream closes connections the proxy still uses"
        quiet_ratio, busy_ratio = answer.fact("quiet_hours_ratio"), answer.fact("busy_hours_ratio")
        if quiet_ratio is None or busy_ratio is None:
            return Explanation(
                "idle_timeout",
                f"Idle-timeout ordering: {fmt_int(answer.value)} × UC on {upstream} — the upstream closed "
                f"kept-alive connections the proxy still used. {fix}",
                "idle_timeout",
                short=short,
                fix=fix,
            )
        quiet, busy = quiet_ratio * 100, busy_ratio * 100
        worst = answer.labels.get("worst_hour", "")
        if quiet > 2 * busy and quiet > 0:
            at = f", worst at {worst}" if worst else ""
            return Explanation(
                "idle_timeout",
                f"Idle-timeout ordering: UC on {upstream} fails {quiet:.3g} % of requests in quiet hours vs "
                f"{busy:.3g} % in busy ones{at} — the less traffic, the more idle connections the upstream closes "
                f"under the proxy. {fix}",
                "idle_timeout",
                short=short,
                fix=fix,
            )
        return Explanation(
            "idle_timeout",
            f"Idle-timeout ordering: {fmt_int(answer.value)} × UC on {upstream}, {busy:.3g} % of requests in busy "
            f"hours vs {quiet:.3g} % in quiet ones (worst at {worst}) — connections the upstream closed while the "
            f"proxy still pooled them, here under load. {fix}",
            "idle_timeout",
            short=short,
            fix=fix,
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
    count = sum(o.fact("restarts") or 0 for o in restarts)
    if not count:
        return None
    return Explanation(
        "log_storm",
        f"Log storm or crash loop: {namespace}/{workload} wrote {fmt_int(flood.value)} error lines and restarted "
        f"{fmt_int(count)} times without an OOM kill — read the first error after each restart; a retry loop "
        "without backoff repeats itself in the logs.",
        "crash_loop",
        short=f"Log storm or crash loop: {namespace}/{workload} restarted {fmt_int(count)} times, no OOM kill",
        fix="Read the first error after each restart: a retry loop without backoff repeats itself in the logs.",
    )


def crash_loop(findings: Findings) -> Explanation | None:
    """A crash loop on its own evidence: restarts (CRIT), their exit reasons, failed liveness probes, error lines.

    Not only when the error lines flood (log_storm): a container can crash-loop quietly (192 restarts, a few lines
    each). The cause is named only from the reasons kube-state-metrics gave: OOMKilled is memory, a liveness kill
    with failed probes is the probe, Error/Completed is the program's own exit; without reasons, it says so.
    """
    restarts = findings.get("restarts")
    if restarts is None or restarts.status is not Status.CRIT or not restarts.offenders:
        return None
    worst = restarts.offenders[0]
    namespace, pod = worst.labels.get("namespace", ""), worst.labels.get("pod", "")
    container = worst.labels.get("container", "")
    count = worst.fact("restarts") or worst.value
    reasons = [reason for reason in worst.labels.get("reasons", "").split(", ") if reason]
    liveness = worst.fact("liveness_failures")
    known = [reason for reason in reasons if reason != "reason unknown"]
    evidence = [f"{fmt_int(count)} restarts"]
    if known:
        evidence.append(f"exit reasons: {', '.join(reasons)}")
    if liveness:
        evidence.append(f"{fmt_int(liveness)} failed liveness probes")
    errors = [
        o
        for o in _offenders(findings.get("error_lines"))
        if o.labels.get("namespace") == namespace and pod.startswith(f"{o.labels.get('workload', '')}-")
    ]
    if errors:
        evidence.append(f"{fmt_int(errors[0].value)} error lines from {namespace}/{errors[0].labels.get('workload')}")
    if known and known[0] == "OOMKilled":
        cause, words = "oom", "the kernel killed it for memory: raise its limit or find what grows"
        short, fix = "killed for memory", "Raise its memory limit or find what grows."
    elif liveness and (not known or known[0] not in ("Error", "Completed")):
        cause, words = "liveness", "the kubelet killed it on failed liveness probes: the probe, or what makes it slow"
        short, fix = "killed on failed liveness probes", "Look at its liveness probe, or what makes it slow."
    elif known:
        cause, words = (
            "crash_loop",
            "it exits on its own: read the last lines of its previous run (kubectl logs --previous)",
        )
        short, fix = "it exits on its own", "Read the last lines of its previous run (kubectl logs --previous)."
    else:
        cause, words = "", "why is not in the data (no exit reason, no probe failure seen): kubectl logs --previous"
        short, fix = "why is not in the data", "Read its previous run's logs (kubectl logs --previous)."
    return Explanation(
        "crash_loop",
        f"Crash loop: {namespace}/{pod}/{container} restarted {fmt_int(count)} times ({'; '.join(evidence)}) "
        f"— {words}.",
        cause,
        short=f"Crash loop: {namespace}/{workload_of(pod)} restarted {fmt_int(count)} times, {short}",
        fix=fix,
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
            short=f"No alert fired for {names}: nobody was paged",
            fix="Add alert rules for these signals.",
        )
    if alerts.status is Status.UNKNOWN:
        return Explanation(
            "blind_spot",
            f"Possible blind spot: {names} went critical and whether an alert fired could not be seen "
            f"({alerts.error or 'alerting not observable'}).",
            short=f"Whether an alert fired for {names} could not be seen",
        )
    return None


RULES: tuple[Callable[[Findings], Explanation | None], ...] = (
    no_healthy_upstream,
    stuck_rollout,
    node_not_ready,
    idle_timeout,
    log_storm,
    crash_loop,
    blind_spot,
)


def explain(findings: Sequence[Finding]) -> tuple[Explanation, ...]:
    """Every rule that fires on the day's findings, in the order above; a cause said once is not repeated."""
    by_name = {finding.name: finding for finding in findings}
    said: set[str] = set()
    out: list[Explanation] = []
    for rule in RULES:
        explanation = rule(by_name)
        if explanation is None:
            continue
        # The UH sentence already named the node or the stuck rollout: the standalone rule would repeat it.
        if explanation.rule in ("node_not_ready", "stuck_rollout") and explanation.cause in said:
            continue
        # A crash loop already said by the error flood (log_storm) or the stuck rollout (its new pods crash-loop).
        if explanation.rule == "crash_loop" and ({"crash_loop", "stuck_rollout"} & said or "oom" in said):
            continue
        said.add(explanation.cause)
        out.append(explanation)
    return tuple(out)

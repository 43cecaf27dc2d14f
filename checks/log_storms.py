"""log_storms: pods that wrote more log lines per minute than the pipeline's per-pod budget.

Signal: every log line, counted per pod and per minute by the backend (no line is downloaded), then the peak minute
and the total per pod — one `PeakCount` question. On VictoriaLogs it is one LogsQL query::

    _time:[start, end) <optional scope filter> -(<access log>)
      | stats by (_time:60s, kubernetes.pod_namespace, kubernetes.pod_name) count() as per_bucket
      | stats by (kubernetes.pod_namespace, kubernetes.pod_name) max(per_bucket) as peak, sum(per_bucket) as lines

on Loki one range query of ``sum by (namespace, pod) (count_over_time(…[60s]))`` every minute, whose per-minute
numbers (never lines) are reduced to the peak and the sum by the client.

Pods are grouped into workloads with ``checks.error_lines.workload_of`` (a Deployment's pods lose their ReplicaSet
hash and suffix), so the explanation names what to fix, not a pod that no longer exists.

Access logs are left out by default (``exclude``: Envoy Gateway's proxy on stdout, where its access log goes;
Envoy's own diagnostics on stderr still count). An access log writes one line per request: its volume is traffic,
not a fault, and ``envoy_flags`` reads it. The calm 2026-08-17 replay sent 70,000 requests in 120 s, 35,000
access-log lines a minute, and must not read as a storm.

Thresholds (seed 001, the 07-20 reconnect storm): the per-pod budget is 1,000 lines a minute, the Vector throttle
added after that day; a normal pod of the homelab writes about 50 a minute at most. Above the budget (WARN) lines
are being dropped by the shipper, or would be, and the node pays for them; ten times the budget (CRIT) is a storm:
the feed aggregator wrote 1.9 M lines in the hour 20:00-21:00 (over 30,000 a minute), loaded the log pipeline and,
with its reconnect loops, filled the node's conntrack table to 72 %. Peak per minute, not the daily total, because a
storm of one hour is as harmful as a steady flood and a busy gateway writing 40 lines a minute all day is not one.

Default penalties are 0: the seed rule grades (error lines cost their points in ``error_lines``); this check
explains the volume, errors or not. No log line at all in the window: UNKNOWN (the pipeline or its field names).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from . import coverage
from .contract import (
    Finding,
    Input,
    Look,
    Need,
    Offender,
    Quantity,
    SourceError,
    Sources,
    Unit,
    Window,
    fmt_int,
    grade,
    unknown,
)
from .error_lines import workload_of
from .log_questions import EVERY_LINE, CountRow, Filter, Is, Not, PeakCount, every, native, roles_equal

NAME = "log_storms"

# What this check reads, for `digest doctor`: its lines' namespace and pod, and the roles that leave access logs out.
INPUTS: tuple[Input, ...] = (
    Input("lines", "pod logs", "every line in scope", policy_key="log_storms.scope_filter"),
    Input("log_field", "namespace", "whose lines", policy_key="logs.fields.namespace"),
    Input("log_field", "pod", "which pod", policy_key="logs.fields.pod"),
    Input("log_field", "container", "access logs left out", required=False, policy_key="logs.fields.container"),
    Input("log_field", "stream", "access logs left out", required=False, policy_key="logs.fields.stream"),
)


@dataclass(frozen=True)
class LogStormsPolicy:
    """The per-pod budget, the storm factor, the log field names, and the cost (nothing by default)."""

    enabled: bool = True
    budget_per_minute: int = 1_000
    crit_factor: float = 10.0
    warn_penalty: int = 0
    crit_penalty: int = 0
    # An extra filter in the log backend's language applied to every line; empty means all logs.
    scope_filter: str = ""
    # Lines that are traffic rather than chatter (access logs), as role: value pairs that must all match; empty
    # counts everything. ``exclude_filter`` (the backend's language) is for what pairs cannot say.
    exclude: dict[str, str] = field(
        default_factory=lambda: {"namespace": "envoy-gateway-system", "container": "envoy", "stream": "stdout"}
    )
    exclude_filter: str = ""
    top: int = 5


@dataclass(frozen=True)
class _Pod:
    namespace: str
    pod: str
    peak_per_minute: float
    lines: float

    @property
    def workload(self) -> str:
        return workload_of(self.pod)


@dataclass(frozen=True)
class LogStormsCheck:
    """Peak lines per minute and total lines per pod, against a per-pod budget."""

    policy: LogStormsPolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        # The shipper's coverage is about every line in scope, access logs included (the same need as error_lines').
        return (coverage.pod_logs(native(self.policy.scope_filter)),)

    def scope(self) -> Filter:
        """The lines this check counts: the scope, without the access logs."""
        policy = self.policy
        excluded = every(roles_equal(policy.exclude), native(policy.exclude_filter))
        return every(native(policy.scope_filter), Not(excluded) if excluded != EVERY_LINE else None)

    def question(self, window: Window) -> PeakCount:
        """The one question this check asks."""
        return PeakCount(window=window, by=("namespace", "pod"), bucket_seconds=60, scope=self.scope())

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        try:
            rows = await sources.logs.peak(self.question(window))
        except SourceError as exc:
            return unknown(NAME, "log volume not checked: the log backend did not answer", str(exc))
        pods = self._pods(rows)
        all_lines = sum(pod.lines for pod in pods)
        if all_lines == 0:
            return unknown(
                NAME,
                "no log line at all in the window: the log pipeline or its field names are not what the policy says",
                "no log lines in the window",
                hint="Check that the log shipper runs and that the policy's logs.fields name where it writes each "
                "line's namespace and pod.",
            )
        if not any(pod.pod for pod in pods):
            # Lines are there but none names its pod: no pod can be found over budget, which is not "none is".
            return unknown(
                NAME,
                "log volume not checked: no log line names its pod",
                f"{fmt_int(all_lines)} lines in the window, none with a pod",
                hint="Set logs.fields.pod (and namespace) in the policy to the fields or labels your shipper writes.",
            )
        return self._finding(sources, window, pods, all_lines)

    def _pods(self, rows: Sequence[CountRow]) -> list[_Pod]:
        peaks: dict[tuple[str, str], float] = defaultdict(float)
        lines: dict[tuple[str, str], float] = defaultdict(float)
        for row in rows:
            key = (row.group.get("namespace", ""), row.group.get("pod", ""))
            peaks[key] = max(peaks[key], row.counts.get("peak", 0.0))
            lines[key] += row.counts.get("lines", 0.0)
        return [
            _Pod(namespace=namespace, pod=pod, peak_per_minute=peaks[(namespace, pod)], lines=count)
            for (namespace, pod), count in lines.items()
        ]

    def _finding(self, sources: Sources, window: Window, pods: list[_Pod], all_lines: float) -> Finding:
        policy = self.policy
        budget = policy.budget_per_minute
        # Lines without pod fields (node or host logs) count as seen but cannot be blamed on a pod.
        named = [pod for pod in pods if pod.pod]
        by_peak = sorted(named, key=lambda pod: (-pod.peak_per_minute, -pod.lines, pod.namespace, pod.pod))
        over = [pod for pod in by_peak if pod.peak_per_minute > budget]
        worst = by_peak[0].peak_per_minute if by_peak else 0.0
        level = 2 if worst > budget * policy.crit_factor else 1 if over else 0
        status, penalty = grade(level, policy.warn_penalty, policy.crit_penalty)
        offenders = [
            Offender(
                labels={"namespace": pod.namespace, "workload": pod.workload, "pod": pod.pod},
                value=pod.peak_per_minute,
                # One stats row yields both numbers of a pod, so both are always measured together.
                facts={
                    "peak_per_minute": Quantity(round(pod.peak_per_minute), Unit.PER_MINUTE),
                    "lines": Quantity(round(pod.lines), Unit.COUNT),
                },
                look=Look(
                    logs=sources.logs.reading_query(
                        window,
                        every(native(policy.scope_filter), Is("namespace", pod.namespace), Is("pod", pod.pod)),
                    )
                ),
            )
            for pod in over[: policy.top]
        ]
        workloads: dict[tuple[str, str], float] = defaultdict(float)
        for pod in named:
            workloads[(pod.namespace, pod.workload)] += pod.lines
        talkers = sorted(workloads.items(), key=lambda item: (-item[1], item[0]))[:3]
        evidence = [
            f"then {pod.namespace}/{pod.pod}: peak {fmt_int(pod.peak_per_minute)} lines/min, {fmt_int(pod.lines)} lines"
            for pod in over[1 : policy.top]
        ]
        evidence.append(
            "most lines: "
            + ", ".join(
                f"{namespace}/{workload} {fmt_int(count)} ({_share(count, all_lines)})"
                for (namespace, workload), count in talkers
            )
        )
        if over:
            first = over[0]
            summary = (
                f"{first.namespace}/{first.workload} (pod {first.pod}) peaked at {fmt_int(first.peak_per_minute)} "
                f"lines/min, {first.peak_per_minute / budget:.0f}× the {fmt_int(budget)}/min budget; "
                f"{fmt_int(first.lines)} lines in the window"
            )
            if len(over) > 1:
                summary += f"; {len(over)} pods over budget"
            reading = sources.logs.reading_query(window, Is("pod", first.pod), most_repeated=True)
            hint = (
                f"Look at what {first.namespace}/{first.workload} repeats ({sources.logs.language}: {reading}) — "
                "usually a retry loop without backoff — "
                "and cap per-pod volume in the shipper (Vector's throttle transform) so one pod cannot flood the rest."
            )
        else:
            summary = f"no pod above {fmt_int(budget)} lines/min"
            if by_peak:
                top = by_peak[0]
                summary += f" (highest {fmt_int(top.peak_per_minute)}/min: {top.namespace}/{top.workload})"
            summary += f"; {fmt_int(all_lines)} lines in the window"
            hint = ""
        return Finding(
            name=NAME,
            status=status,
            penalty=penalty,
            value=worst,
            summary=summary,
            offenders=offenders,
            hint=hint,
            evidence=evidence,
        )


def _share(part: float, whole: float) -> str:
    percent = 100 * part / whole if whole else 0.0
    return f"{percent:.0f} %" if percent >= 1 else "< 1 %"

"""cpu_throttling: containers the kernel held back at their CPU limit.

Signal (cAdvisor CFS counters, queries.md §3): the share of CFS periods in which a container was throttled, over the
window and in its worst 5 minutes. The counters exist only for containers with a CPU limit (a CFS quota), so "no
series" means "no limit", reported as n/a, never as 0 %::

    throttled = container_cpu_cfs_throttled_periods_total{container!=""}
    periods   = container_cpu_cfs_periods_total{container!=""}
    window: sum by (namespace, pod, container) (increase(throttled[<window>]))
            / (sum by (namespace, pod, container) (increase(periods[<window>])) >= 1000)
    worst:  max_over_time((sum by (…) (increase(throttled[5m])) / (sum by (…) (increase(periods[5m])) >= 300))
                          [<window>:5m])
            and on (namespace, pod, container) (sum by (…) (increase(periods[<window>])) >= 1000)

Thresholds (seed 000, the 08-12 readiness spiral): the four shop/api pods under a 500m limit were throttled in 60 %
of their periods during the load test and 42 % over the day; their readiness probe (``SELECT 1``, 3 s timeout)
stretched past its timeout and the pods left the EndpointSlice. 25 % over the window (WARN) is where latency-bound
work starts missing deadlines on most periods; 50 % over the window (CRIT) means the container spends half its life
waiting for quota. A worst 5 minutes at ≥ 50 % is a WARN even when the day's average is low: the spiral happened
under load, not on average. A near-idle container's ratio is noise (3 throttled periods of 5 is 60 %), so fewer than
1,000 CFS periods in the window (100 s of CPU activity) or 300 in a 5-minute slice are ignored (``min_periods``).

Default penalties are 0: the seed rule grades (the UH that throttling caused costs its points in ``envoy_flags``);
this check explains it. No cAdvisor series at all: UNKNOWN. cAdvisor present but no CFS series: OK, "no container
has a CPU limit". CFS series come from cAdvisor, so the cAdvisor presence query is asked only when there are none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from . import coverage
from .contract import (
    Finding,
    Input,
    Need,
    Offender,
    Quantity,
    Sample,
    SourceError,
    Sources,
    Status,
    Unit,
    Window,
    fmt_int,
    fmt_percent,
    grade,
    metrics_look,
    unknown,
)
from .presence import cadvisor_present_query
from .promql import CONTAINER_LABELS, ContainerKey, container_key

NAME = "cpu_throttling"
# Where a reader sees one offender: its own series over the window (`checks.contract.Look`).
_LOOK = "max by (namespace, pod, container) (rate(container_cpu_cfs_throttled_periods_total{}[5m]))"
_LOOK_KEYS = ("namespace", "pod", "container")

# What this check reads, for `digest doctor` (the queries below are what it sends).
INPUTS: tuple[Input, ...] = (
    Input("series", "container_cpu_cfs_periods_total", "CPU periods", fix="the kubelets' /metrics/cadvisor scraped"),
    Input(
        "series",
        "container_cpu_cfs_throttled_periods_total",
        "throttled periods",
        fix="the kubelets' /metrics/cadvisor scraped",
    ),
    Input(
        "series",
        "container_memory_working_set_bytes",
        "cAdvisor there, without CFS series",
        required=False,
        fix="the kubelets' /metrics/cadvisor scraped",
    ),
    Input(
        "series",
        "kube_pod_container_resource_limits",
        "the CPU limit shown",
        required=False,
        fix="kube-state-metrics' pod metrics",
    ),
)
_BY = "sum by (namespace, pod, container)"


@dataclass(frozen=True)
class CpuThrottlingPolicy:
    """Throttled-period ratios, the activity below which a ratio is noise, and what it costs (nothing by default)."""

    enabled: bool = True
    warn_ratio: float = 0.25
    crit_ratio: float = 0.50
    warn_worst_5m_ratio: float = 0.50
    min_periods: int = 1_000
    min_periods_5m: int = 300
    warn_penalty: int = 0
    crit_penalty: int = 0
    top: int = 5


@dataclass(frozen=True)
class CpuThrottlingCheck:
    """Throttled CFS periods per container, over the window and in the worst 5 minutes."""

    policy: CpuThrottlingPolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        return (coverage.cadvisor(),)

    def queries(self, window: Window) -> dict[str, str]:
        """The PromQL this check sends, by purpose."""
        rng = window.promql_range()
        periods = 'container_cpu_cfs_periods_total{container!=""}'
        throttled = 'container_cpu_cfs_throttled_periods_total{container!=""}'
        active = f"({_BY} (increase({periods}[{rng}])) >= {self.policy.min_periods})"
        return {
            # Containers, not series: a restarted container has one CFS series per cgroup id.
            "limited": f"count(count by (namespace, pod, container) (count_over_time({periods}[{rng}])))",
            # Asked only when no container has CFS counters, to tell "no CPU limit" from "no cAdvisor".
            "cadvisor": cadvisor_present_query(window),
            "ratio": f"{_BY} (increase({throttled}[{rng}])) / {active}",
            "periods": active,
            # Optional: the limit the throttling is measured against reads better than a bare ratio ("500m").
            "limits": (
                "max by (namespace, pod, container) (max_over_time("
                f'kube_pod_container_resource_limits{{resource="cpu", unit="core"}}[{rng}]))'
            ),
            "worst_5m": (
                f"max_over_time(({_BY} (increase({throttled}[5m])) / "
                f"({_BY} (increase({periods}[5m])) >= {self.policy.min_periods_5m}))[{rng}:5m]) "
                f"and on (namespace, pod, container) {active}"
            ),
        }

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        queries = self.queries(window)
        try:
            limited = await sources.metrics.instant(queries["limited"], window.end)
            cadvisor = [] if limited else await sources.metrics.instant(queries["cadvisor"], window.end)
        except SourceError as exc:
            return unknown(NAME, "CPU throttling not checked: the metrics backend did not answer", str(exc))
        # CFS counters come from cAdvisor: when there are some, cAdvisor was there.
        if not limited and not cadvisor:
            return unknown(
                NAME,
                "CPU throttling not checked: no cAdvisor series in the window",
                "no container_memory_working_set_bytes (cAdvisor) in the window",
                hint="Is the kubelet's /metrics/cadvisor endpoint scraped?",
            )
        if not limited:
            return Finding(
                name=NAME,
                status=Status.OK,
                penalty=0,
                value=None,
                summary="no container has a CPU limit: throttling n/a",
            )
        try:
            ratio = await sources.metrics.instant(queries["ratio"], window.end)
            periods = await sources.metrics.instant(queries["periods"], window.end)
            worst = await sources.metrics.instant(queries["worst_5m"], window.end)
        except SourceError as exc:
            return unknown(NAME, "CPU throttling not checked: the metrics backend did not answer", str(exc))
        limits: Sequence[Sample] = ()
        policy = self.policy
        if any(sample.value >= policy.warn_ratio for sample in ratio) or any(
            sample.value >= policy.warn_worst_5m_ratio for sample in worst
        ):
            try:
                limits = await sources.metrics.instant(queries["limits"], window.end)
            except SourceError:
                limits = ()  # the limit only decorates the summary; the ratios are known
        return self._finding(ratio, periods, worst, limits, round(limited[0].value))

    def _finding(
        self,
        ratio: Sequence[Sample],
        periods: Sequence[Sample],
        worst: Sequence[Sample],
        limits: Sequence[Sample],
        limited: int,
    ) -> Finding:
        policy = self.policy
        limit_by = {container_key(sample.labels): sample.value for sample in limits}
        ratio_by = {container_key(sample.labels): sample.value for sample in ratio}
        worst_by = {container_key(sample.labels): sample.value for sample in worst}
        periods_by = {container_key(sample.labels): sample.value for sample in periods}

        def level_of(key: tuple[str, str, str]) -> int:
            over_window = ratio_by.get(key, 0.0)
            if over_window >= policy.crit_ratio:
                return 2
            if over_window >= policy.warn_ratio or worst_by.get(key, 0.0) >= policy.warn_worst_5m_ratio:
                return 1
            return 0

        keys = set(ratio_by) | set(worst_by)
        ranked = sorted(keys, key=lambda key: (-level_of(key), -ratio_by.get(key, 0.0), -worst_by.get(key, 0.0), key))
        flagged = [key for key in ranked if level_of(key) > 0]
        level = level_of(ranked[0]) if ranked else 0
        status, penalty = grade(level, policy.warn_penalty, policy.crit_penalty)
        offenders = [
            Offender(
                labels=dict(zip(CONTAINER_LABELS, key, strict=True)),
                value=round(ratio_by.get(key, 0.0), 4),
                facts=_facts(key, ratio_by, worst_by, limit_by),
            )
            for key in flagged[: policy.top]
        ]
        quiet = limited - len(periods_by)
        evidence: list[str] = []
        if offenders:
            namespace, pod, container = flagged[0]
            under = f" under a {_cores(limit_by[flagged[0]])} limit" if flagged[0] in limit_by else ""
            summary = (
                f"{namespace}/{pod}/{container} throttled in {fmt_percent(ratio_by.get(flagged[0], 0.0))} of its CPU "
                f"periods{under} (worst 5 min {fmt_percent(worst_by.get(flagged[0], 0.0))})"
            )
            if len(flagged) > 1:
                summary += f"; {len(flagged)} containers over the thresholds"
            # The summary names the first container; the evidence lines name the others.
            evidence = [
                f"then {'/'.join(key)}: {_percent(ratio_by.get(key, 0.0))} % over the window, worst 5 min "
                f"{_percent(worst_by.get(key, 0.0))} %"
                for key in flagged[1 : policy.top]
            ]
            hint = (
                "Throttled containers answer slowly even when the node is idle: check whether readiness probes time "
                "out under load (the 08-12 spiral), then raise or remove the CPU limit (keep the request) or add "
                "replicas on other nodes."
            )
        else:
            summary = f"no container throttled ≥ {fmt_percent(policy.warn_ratio)} over the window"
            if ranked:
                namespace, pod, container = max(ranked, key=lambda key: ratio_by.get(key, 0.0))
                summary += (
                    f" (highest {fmt_percent(ratio_by.get((namespace, pod, container), 0.0))}: "
                    f"{namespace}/{pod}/{container})"
                )
            hint = ""
        if quiet > 0:
            evidence.append(
                f"{fmt_int(quiet)} CPU-limited container(s) with fewer than {fmt_int(policy.min_periods)} CFS periods "
                "ignored (near idle: their ratio is noise)"
            )
        return Finding(
            name=NAME,
            status=status,
            penalty=penalty,
            value=round(max(ratio_by.values(), default=0.0), 4),
            summary=summary,
            offenders=[replace(one, look=metrics_look(_LOOK, one.labels, _LOOK_KEYS)) for one in offenders],
            hint=hint,
            evidence=evidence,
        )


def _facts(
    key: ContainerKey,
    ratio_by: Mapping[ContainerKey, float],
    worst_by: Mapping[ContainerKey, float],
    limit_by: Mapping[ContainerKey, float],
) -> dict[str, Quantity]:
    """What was measured about one container; a query that did not answer for it leaves its fact out, not 0.

    The window's ratio and the worst 5 minutes are asked separately, and the limit only when something crossed a
    threshold (kube-state-metrics may not have it): any of them can be missing for a container.
    """
    facts: dict[str, Quantity] = {}
    if key in ratio_by:
        facts["throttled_ratio"] = Quantity(ratio_by[key], Unit.RATIO)
    if key in worst_by:
        facts["worst_5m_ratio"] = Quantity(worst_by[key], Unit.RATIO)
    if key in limit_by:
        facts["cpu_limit"] = Quantity(limit_by[key], Unit.CORES)
    return facts


def _percent(ratio: float) -> str:
    return f"{ratio * 100:.1f}"


def _cores(cores: float) -> str:
    """A CPU limit as Kubernetes writes it: 500m, 2."""
    return f"{cores:g}" if cores >= 1 and float(cores).is_integer() else f"{round(cores * 1000)}m"

"""Is the exporter a check needs there at all? Shared gates, so that "no series" is never mistaken for "healthy".

Each gate is one query text shared by the checks that need it, so that the sources send it once when they ask at
the same time.

kube-state-metrics emits an OOMKilled reason, a restart or an unavailable replica only when one happened: silence is
good news only if kube-state-metrics itself was scraped in the window (its ``up`` reached 1).
"""

from __future__ import annotations

from .contract import Finding, SourceError, Sources, Window, unknown


def cadvisor_present_query(window: Window) -> str:
    """Whether the kubelets' cAdvisor was scraped in the window (any container working set); empty when not."""
    return f'count(count_over_time(container_memory_working_set_bytes{{container!=""}}[{window.promql_range()}]))'


def kube_state_metrics_up_query(job: str, window: Window) -> str:
    """Whether kube-state-metrics was scraped at some point of the window."""
    return f'max by (job) (max_over_time(up{{job=~"{job.replace(chr(34), "")}"}}[{window.promql_range()}]))'


async def kube_state_metrics_missing(
    sources: Sources, window: Window, check: str, subject: str, job: str
) -> Finding | None:
    """An UNKNOWN finding when kube-state-metrics cannot vouch for the silence of ``subject``; None when it can."""
    try:
        ksm_up = await sources.metrics.instant(kube_state_metrics_up_query(job, window), window.end)
    except SourceError as exc:
        return unknown(check, f"{subject} not checked: the metrics backend did not answer", str(exc))
    if not ksm_up or max(sample.value for sample in ksm_up) < 1:
        return unknown(
            check,
            f"{subject} not checked: kube-state-metrics was not scraped in the window",
            f'no up{{job=~"{job}"}} = 1 in the window',
            hint=f"Is kube-state-metrics running and scraped? Set {check}.ksm_job in the policy if its job has "
            "another name.",
        )
    return None


def family_present_query(metric: str, window: Window) -> str:
    """How many series of ``metric`` had samples in the window; empty when none."""
    return f"count(count_over_time({metric}[{window.promql_range()}]))"


async def family_missing(sources: Sources, window: Window, check: str, subject: str, metric: str) -> Finding | None:
    """An UNKNOWN finding when kube-state-metrics was scraped but wrote no ``metric`` at all; None when it did.

    Asked only when a check found nothing to report: a metric family filtered out of kube-state-metrics
    (``--resources``, ``--metric-allowlist``) is silent in exactly the way a healthy cluster is.
    """
    try:
        rows = await sources.metrics.instant(family_present_query(metric, window), window.end)
    except SourceError as exc:
        return unknown(check, f"{subject} not checked: the metrics backend did not answer", str(exc))
    if rows and max(sample.value for sample in rows) > 0:
        return None
    return unknown(
        check,
        f"{subject} not checked: kube-state-metrics was scraped but wrote no {metric}",
        f"no {metric} series in the window",
        hint="Is that metric family enabled in kube-state-metrics (--resources, --metric-allowlist)?",
    )

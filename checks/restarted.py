"""Which containers restarted in the window: the cheap question asked before the per-minute restart subqueries.

Signal: ``kube_pod_container_status_restarts_total`` (kube-state-metrics). ``oom_kills`` and ``restarts`` count a
restart as a positive one-minute step of that counter, a subquery at one-minute steps over every container — on a
2,000-pod cluster the most expensive thing either check asks, for the dozen containers that restart on a normal
day. A container whose counter never changed has no positive step, so the subqueries only need the containers this
raw rollup names::

    max by (namespace, pod, container) (changes(restarts_total[<window + 15m>])) > 0

The range reaches 15 minutes before the window: a step at the window's first minute compares with the sample a
minute earlier, found up to the backend's look-back before that; more containers than needed is harmless, fewer
would lose a restart. Both checks send the same text, so the sources' coalescing sends it once.
"""

from __future__ import annotations

from collections.abc import Sequence

from .contract import Sources, Window
from .promql import MAX_NARROWED, ContainerKey, container_key, container_matchers

RESTARTS_TOTAL = "kube_pod_container_status_restarts_total"
# Init containers have a counter of their own: a pod stuck in Init:CrashLoopBackOff never moves the one above.
INIT_RESTARTS_TOTAL = "kube_pod_init_container_status_restarts_total"
_MARGIN_SECONDS = 15 * 60


def restarted_query(window: Window, counter: str = RESTARTS_TOTAL) -> str:
    """Containers whose restart ``counter`` changed in (or just before) the window."""
    return f"max by (namespace, pod, container) (changes({counter}[{window.seconds + _MARGIN_SECONDS}s])) > 0"


async def restarted_containers(sources: Sources, window: Window, counter: str = RESTARTS_TOTAL) -> list[ContainerKey]:
    """The containers to narrow the restart subqueries to; raises `SourceError` like any query."""
    rows = await sources.metrics.instant(restarted_query(window, counter), window.end)
    return sorted({container_key(sample.labels) for sample in rows})


def narrowing(containers: Sequence[ContainerKey]) -> str | None:
    """Matchers for ``containers``; None when there are too many to be worth narrowing (send un-narrowed)."""
    if len(containers) > MAX_NARROWED:
        return None
    return container_matchers(containers)

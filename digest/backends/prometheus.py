"""VictoriaMetrics, vmselect or Prometheus, through the Prometheus query API.

``/api/v1/query`` at ``time=`` and ``/api/v1/query_range``.

The checks' PromQL is written to answer the same on both engines (see ``checks/promql.py``: ranges open on the
left, one-scrape reads, counted increases), so one client serves both, with no dialect switch: a vmselect path
prefix (``/select/<tenant>/prometheus``) is part of the base URL.
"""

from __future__ import annotations

from datetime import datetime

from checks.contract import RangeSeries, Sample, rfc3339
from digest.backends.http import HttpSource


class PrometheusSource(HttpSource):
    """VictoriaMetrics, vmselect or Prometheus through the Prometheus query API."""

    async def instant(self, query: str, at: datetime) -> list[Sample]:
        data = await self._post_json("/api/v1/query", {"query": query, "time": rfc3339(at)})
        return self._vector(data)

    async def range(self, query: str, start: datetime, end: datetime, step_seconds: int) -> list[RangeSeries]:
        form = {"query": query, "start": rfc3339(start), "end": rfc3339(end), "step": f"{step_seconds}s"}
        return self._matrix(await self._post_json("/api/v1/query_range", form))

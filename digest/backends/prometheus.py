"""VictoriaMetrics, vmselect or Prometheus, through the Prometheus query API.

``/api/v1/query`` at ``time=`` and ``/api/v1/query_range``.

The checks' PromQL is written to answer the same on both engines (see ``checks/promql.py``: ranges open on the
left, one-scrape reads, counted increases), so one client serves both, with no dialect switch: a vmselect path
prefix (``/select/<tenant>/prometheus``) is part of the base URL.

On a shared store the cluster's matchers (`digest.backends.scope`) are added here to every selector of every query,
so that no check, coverage question or doctor probe can read another cluster's series.

An answer missing part of its data is refused, so that its check is UNKNOWN rather than short: vmselect's
``isPartial``, and the warnings with which Prometheus reports a failed remote read and Thanos a store that did not
answer (`digest.backends.http.partial_warning`).
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from datetime import datetime

import httpx

from digest.backends.http import Endpoint, HttpSource
from digest.backends.scope import Matcher, ScopeError, scoped_promql
from digest.checks.contract import RangeSeries, Sample, SourceErrorKind, rfc3339


def _moment(at: datetime) -> str:
    """``at`` as RFC 3339 in whole seconds, or as Unix seconds to the millisecond where it has them.

    A rule evaluator stamps its samples to the millisecond. Not RFC 3339 with a fraction: VictoriaMetrics reads
    ``…:26.490Z`` through a float and lands on .489.
    """
    if at.microsecond:
        whole = int(at.replace(microsecond=0).timestamp())
        return f"{whole}.{at.microsecond // 1000:03d}"
    return rfc3339(at)


class PrometheusSource(HttpSource):
    """VictoriaMetrics, vmselect or Prometheus through the Prometheus query API, scoped to one cluster if asked."""

    # A remote read or a store that failed leaves the answer short, said only in its warnings (`partial_warning`).
    refuses_warnings = True

    def __init__(
        self,
        endpoint: Endpoint,
        transport: httpx.AsyncBaseTransport | None = None,
        tls: ssl.SSLContext | None = None,
        scope: Sequence[Matcher] = (),
    ) -> None:
        super().__init__(endpoint, transport, tls)
        self.scope = tuple(scope)

    async def instant(self, query: str, at: datetime, cache: bool = True) -> list[Sample]:
        """Evaluate ``query`` at ``at``; ``cache=False`` for series written after the fact (see `_form`)."""
        form = self._form({"query": self._scoped(query), "time": _moment(at)}, cache)
        return self._vector(await self._post_json("/api/v1/query", form))

    async def range(
        self, query: str, start: datetime, end: datetime, step_seconds: int, cache: bool = True
    ) -> list[RangeSeries]:
        """Evaluate ``query`` over [start, end] every ``step_seconds``; ``cache`` as for `instant`."""
        form = {"query": self._scoped(query), "start": _moment(start), "end": _moment(end), "step": f"{step_seconds}s"}
        return self._matrix(await self._post_json("/api/v1/query_range", self._form(form, cache)))

    async def samples(self, selector: str, at: datetime, milliseconds: int) -> list[RangeSeries]:
        """The raw samples of ``selector`` in (at - milliseconds, at], as stored (never cached)."""
        form = self._form({"query": self._scoped(f"{selector}[{milliseconds}ms]"), "time": _moment(at)}, False)
        return self._matrix(await self._post_json("/api/v1/query", form))

    @staticmethod
    def _form(form: dict[str, str], cache: bool) -> dict[str, str]:
        # VictoriaMetrics caches answers about the past (older than -search.cacheTimestampOffset): series written
        # into the past later (a replayed recording rule) would stay unseen behind the cache. Prometheus has no
        # such cache and ignores the parameter.
        return form if cache else {**form, "nocache": "1"}

    def _scoped(self, query: str) -> str:
        try:
            return scoped_promql(query, self.scope)
        except ScopeError as exc:  # a query the backend would refuse too: the same error, said before sending it
            raise self._error(SourceErrorKind.QUERY, f"cannot scope the query to the cluster: {exc}") from None

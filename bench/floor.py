"""The floor: the digest's queries sent directly and concurrently, with nothing else around them.

What it measures and why: ``digest run`` cannot be faster than the backends answering its queries. Two floors:

* the **checks floor** — the queries extracted from the check classes that ``digest.collect.build_checks`` builds
  with the default policy (``digest.policy.Policy()``), for the window of ``digest.window.day_window``: every
  ``queries(window)`` (PromQL instant queries at the window's end), ``query(window)`` / ``log_query(window)``
  (LogsQL stats when pinned with ``_time:``, PromQL otherwise) and ``istio_query(window)``, plus conntrack's
  peak-minute range query for the worst node, which depends on an answer and is resolved beforehand, outside the
  timing;
* the **recorded floor** — the exact requests one ``digest run`` sent, captured by ``bench.proxy`` (path and body),
  replayed as they were. It covers whatever the digest asks that the checks floor does not (trends over previous
  days, a check's data-dependent follow-ups such as Envoy's hour-by-hour query of an Istio service) and omits what
  the digest skipped (a check's later queries when its first one finds no data).

Both are sent with httpx, all at once, at most ``DIGEST_MAX_CONCURRENCY`` (default 4) in flight per backend, like
the digest's sources, from an already-started Python process. The time from the first request to the last answer
is the floor; ``digest run``'s wall time divided by it is the overhead ratio (goal ≤ 1.2× on the checks floor).
The floors are optimistic on purpose: dependent queries are not made to wait for what they depend on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from checks.contract import Window
from digest.collect import build_checks
from digest.policy import Policy
from digest.window import day_window

METRICS = "metrics"
LOGS = "logs"
QUERY_METHODS = ("query", "log_query", "istio_query")


@dataclass(frozen=True)
class Query:
    """One HTTP request of the digest: which backend, which endpoint, its form (or raw body), and its purpose."""

    backend: str  # METRICS or LOGS
    path: str
    form: dict[str, str]
    purpose: str
    body: bytes | None = None  # a recorded request is replayed byte for byte
    content_type: str | None = None


@dataclass(frozen=True)
class FloorResult:
    """Wall time of the whole batch and of each query."""

    seconds: float
    per_query: dict[str, float]


def rfc3339(moment: datetime) -> str:
    """``2026-07-21T00:00:00Z`` — how the digest writes times in its forms."""
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def window_of(day: date, zone: str = "UTC") -> Window:
    """The digest's window for ``digest run --date day`` with ``DIGEST_TIMEZONE=zone``."""
    return day_window(day, ZoneInfo(zone))


def is_logsql(query: str) -> bool:
    """Every LogsQL query of the digest is pinned with an absolute ``_time:[start, end)`` filter first."""
    return query.lstrip().startswith("_time:")


def _instant(query: str, window: Window, purpose: str) -> Query:
    if is_logsql(query):
        return Query(LOGS, "/select/logsql/stats_query", {"query": query, "time": rfc3339(window.end)}, purpose)
    return Query(METRICS, "/api/v1/query", {"query": query, "time": rfc3339(window.end)}, purpose)


def _range(query: str, start: datetime, end: datetime, step_seconds: int, purpose: str) -> Query:
    form = {"query": query, "start": rfc3339(start), "end": rfc3339(end), "step": f"{step_seconds}s"}
    if is_logsql(query):
        return Query(LOGS, "/select/logsql/stats_query_range", form, purpose)
    return Query(METRICS, "/api/v1/query_range", form, purpose)


def conntrack_peak_query(instance: str) -> str:
    """The range query ``ConntrackCheck._peak_time`` sends for the worst node (same quoting)."""
    selector = instance.replace("\\", "\\\\").replace('"', '\\"')
    return (
        f'node_nf_conntrack_entries{{instance="{selector}"}} / node_nf_conntrack_entries_limit{{instance="{selector}"}}'
    )


@dataclass(frozen=True)
class Dependencies:
    """Answers some queries depend on, looked up before the timing."""

    conntrack_instance: str | None = None


def checks_queries(window: Window, dependencies: Dependencies, policy: Policy | None = None) -> list[Query]:
    """The queries of every enabled check for ``window``, extracted from the check classes."""
    policy = policy or Policy()
    queries: list[Query] = []
    for check in build_checks(policy):
        name = check.name
        method: Any = getattr(check, "queries", None)
        if callable(method):
            for purpose, text in method(window).items():
                queries.append(_instant(text, window, f"{name}.{purpose}"))
        for attribute in QUERY_METHODS:
            method = getattr(check, attribute, None)
            if callable(method):
                queries.append(_instant(method(window), window, f"{name}.{attribute}"))
        if name == "conntrack" and dependencies.conntrack_instance is not None:
            text = conntrack_peak_query(dependencies.conntrack_instance)
            queries.append(_range(text, window.start, window.end, 60, "conntrack.peak_time"))
    return queries


def resolve_dependencies(vm_url: str, window: Window, policy: Policy | None = None) -> Dependencies:
    """The worst conntrack node of the window, as ``ConntrackCheck`` finds it."""
    policy = policy or Policy()
    for check in build_checks(policy):
        method: Any = getattr(check, "queries", None)
        if check.name == "conntrack" and callable(method):
            rows = _post(f"{vm_url}/api/v1/query", {"query": method(window)["peak"], "time": rfc3339(window.end)})
            if rows:
                best = max(rows, key=lambda item: float(item["value"][1]))
                return Dependencies(conntrack_instance=str(best["metric"].get("instance", "")))
    return Dependencies()


def _post(url: str, form: dict[str, str]) -> list[dict[str, Any]]:
    response = httpx.post(url, data=form, timeout=300)
    response.raise_for_status()
    result: list[dict[str, Any]] = response.json()["data"]["result"]
    return result


async def _send(
    client: httpx.AsyncClient, gate: asyncio.Semaphore, base: str, query: Query, timings: dict[str, float]
) -> None:
    async with gate:
        started = time.perf_counter()
        if query.body is not None:
            headers = {"Content-Type": query.content_type} if query.content_type else {}
            response = await client.post(base + query.path, content=query.body, headers=headers)
        else:
            response = await client.post(base + query.path, data=query.form)
        timings[query.purpose] = time.perf_counter() - started
    response.raise_for_status()
    payload = response.json()
    if payload.get("status") != "success":
        raise RuntimeError(f"{query.purpose}: {payload.get('error', 'query failed')}")


async def run_floor(
    queries: Sequence[Query], vm_url: str, vl_url: str, concurrency: int = 4, timeout_seconds: float = 300.0
) -> FloorResult:
    """Send ``queries`` concurrently, at most ``concurrency`` in flight per backend, and time the batch."""
    bases = {METRICS: vm_url.rstrip("/"), LOGS: vl_url.rstrip("/")}
    gates = {METRICS: asyncio.Semaphore(concurrency), LOGS: asyncio.Semaphore(concurrency)}
    timings: dict[str, float] = {}
    limits = httpx.Limits(max_connections=2 * concurrency)
    async with httpx.AsyncClient(timeout=timeout_seconds, limits=limits) as client:
        started = time.perf_counter()
        await asyncio.gather(
            *(_send(client, gates[query.backend], bases[query.backend], query, timings) for query in queries)
        )
        elapsed = time.perf_counter() - started
    return FloorResult(seconds=elapsed, per_query=timings)

"""The floor: the digest's queries sent directly and concurrently, with nothing else around them.

What it measures and why: ``digest run`` cannot be faster than the backends answering its queries. Two floors:

* the **checks floor** — the queries extracted from the check classes that
  ``digest.pipeline.collect.build_checks`` builds with the default policy (``digest.pipeline.policy.Policy()``), for
  the window of ``digest.pipeline.window.day_window``: every
  fixed question the registry lists (``checks.registry``: PromQL instant queries at the window's end, and log
  questions written as the log backend's requests by its writer — LogsQL for VictoriaLogs, LogQL for Loki:
  `LogWriter`), plus conntrack's
  peak-minute range query for the worst node, which depends on an answer and is resolved beforehand, outside the
  timing, and the coverage queries (``checks.coverage``: one per source the checks depend on, and the fleet's),
  which every digest must ask;
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit
from zoneinfo import ZoneInfo

import httpx

from digest.backends.http import Endpoint
from digest.backends.loki import LogqlWriter
from digest.backends.passes import pass_question, shared_match
from digest.backends.victorialogs import LogsqlWriter, VictoriaLogsSource
from digest.checks import coverage, registry
from digest.checks.conntrack import ConntrackCheck
from digest.checks.contract import Backend, Window, rfc3339
from digest.checks.error_lines import ErrorLinesCheck
from digest.checks.log_questions import LineCount, PeakCount, ShapeCount
from digest.checks.promql import ContainerKey
from digest.checks.registry import Question
from digest.checks.restarted import narrowing
from digest.pipeline.collect import build_checks
from digest.pipeline.policy import Policy
from digest.pipeline.recording import SHARED_FAMILIES, recording_plan
from digest.pipeline.window import day_window

METRICS = "metrics"
LOGS = "logs"


class LogWriter(Protocol):
    """What the floor needs of a log backend's writer: the HTTP requests that answer a question."""

    def requests(self, question: LineCount | PeakCount) -> list[tuple[str, dict[str, str]]]:
        """The (path, form) pairs the source sends for ``question``."""
        ...


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


def window_of(day: date, zone: str = "UTC") -> Window:
    """The digest's window for ``digest run --date day`` with ``DIGEST_TIMEZONE=zone``."""
    return day_window(day, ZoneInfo(zone))


def _instant(query: str, window: Window, purpose: str) -> Query:
    return Query(METRICS, "/api/v1/query", {"query": query, "time": rfc3339(window.end)}, purpose)


def _range(query: str, start: datetime, end: datetime, step_seconds: int, purpose: str) -> Query:
    form = {"query": query, "start": rfc3339(start), "end": rfc3339(end), "step": f"{step_seconds}s"}
    return Query(METRICS, "/api/v1/query_range", form, purpose)


def _asked_logs(question: LineCount | PeakCount, writer: LogWriter, purpose: str, policy: Policy) -> list[Query]:
    if isinstance(writer, LogqlWriter):
        # On Loki, the questions of a shared family are answered by one pass of their window (`SharedPasses`): the
        # floor asks that pass, once (`checks_queries` sends a request asked twice once).
        found = shared_match(recording_plan(policy), SHARED_FAMILIES, question)
        if found is not None:
            question, purpose = pass_question(found.family, question.window), f"pass.{found.family.name}"
    requests = writer.requests(question)
    return [
        Query(LOGS, path, form, purpose if len(requests) == 1 else f"{purpose}#{index}")
        for index, (path, form) in enumerate(requests, start=1)
    ]


@dataclass(frozen=True)
class Dependencies:
    """Answers some queries depend on, looked up before the timing.

    ``None`` means "not looked up": the floor then sends the check's full, un-narrowed queries, a pessimistic floor.
    """

    conntrack_instance: str | None = None
    restarted: tuple[ContainerKey, ...] | None = None  # the containers whose restart counter changed
    memory_candidates: tuple[ContainerKey, ...] | None = None  # working set over the lowest limit ≥ warn
    memory_peak_seen: bool | None = None  # the peak query had rows: the presence fallback is not asked
    cpu_limited: bool | None = None  # some container has CFS counters: no cAdvisor fallback, the ratios are asked
    # error_lines' shapes questions ("what the errors said"), chosen from its count's answer; None: not looked up
    # (the floor then leaves them out: an optimistic floor, as for any follow-up it cannot know).
    shape_questions: tuple[ShapeCount, ...] | None = None


# Purposes a check asks only in one case: (check, purpose) → the dependency value under which it is asked.
def _asked(name: str, purpose: str, dependencies: Dependencies) -> bool:
    if name == "memory_pressure" and purpose == "presence":
        return dependencies.memory_peak_seen is not True
    if name == "cpu_throttling" and purpose == "cadvisor":
        return dependencies.cpu_limited is not True
    if name == "cpu_throttling" and purpose in ("ratio", "periods", "worst_5m", "limits"):
        return dependencies.cpu_limited is not False
    return True


_NARROWED = {
    "memory_pressure": ("memory_candidates", ("sustained", "minutes", "since")),
    "restarts": ("restarted", ("restarts", "reasons")),
    "oom_kills": ("restarted", ("kills", "kill_times")),
}


def _check_queries(check: Any, window: Window, dependencies: Dependencies) -> dict[str, Question]:
    """A check's questions by purpose (the registry's ``asks``), narrowed or left out as the digest would."""
    asked = registry.BY_NAME[check.name].asks(check, window)
    queries = {purpose: text for purpose, text in asked.items() if _asked(check.name, purpose, dependencies)}
    if check.name in _NARROWED:
        attribute, purposes = _NARROWED[check.name]
        containers = getattr(dependencies, attribute)
        if containers is not None:
            matchers = narrowing(containers) if containers else None
            narrowed: dict[str, str] = check.queries(window, matchers)
            for purpose in purposes:
                if containers:
                    queries[purpose] = narrowed[purpose]
                else:
                    queries.pop(purpose, None)  # nothing to narrow to: the digest does not ask
    return queries


def checks_queries(
    window: Window,
    dependencies: Dependencies,
    policy: Policy | None = None,
    writer: LogWriter | None = None,
    graded_only: bool = False,
) -> list[Query]:
    """The queries of every enabled check for ``window``, extracted from the check classes, each sent once.

    Checks share some queries (kube-state-metrics' ``up``, the restarted containers) and the digest's sources send
    a query asked twice at once only once: so does the floor. ``graded_only``: the graded checks only, as the
    trends ask them of a previous day.
    """
    policy = policy or Policy()
    writer = writer or LogsqlWriter()
    chosen = [check for check in build_checks(policy) if not graded_only or policy.graded(check.name)]
    queries: list[Query] = []
    seen: set[tuple[str, ...]] = set()

    def add(query: Query) -> None:
        key = (query.backend, query.path, *(f"{name}={value}" for name, value in sorted(query.form.items())))
        if key not in seen:
            seen.add(key)
            queries.append(query)

    for check in chosen:
        name = check.name
        for purpose, question in _check_queries(check, window, dependencies).items():
            if isinstance(question, str):
                add(_instant(question, window, f"{name}.{purpose}"))
            else:
                for query in _asked_logs(question, writer, f"{name}.{purpose}", policy):
                    add(query)
        if name == "error_lines" and dependencies.shape_questions:
            shape_request = getattr(writer, "shape_request", None)  # a backend without shapes (Loki) asks none
            for index, shape in enumerate(dependencies.shape_questions, start=1):
                if shape_request is not None:
                    path, form = shape_request(shape)
                    add(Query(LOGS, path, form, f"error_lines.shapes#{index}"))
        if name == "conntrack" and dependencies.conntrack_instance is not None:
            text = ConntrackCheck.peak_time_query(dependencies.conntrack_instance)
            add(_range(text, window.start, window.end, 60, "conntrack.peak_time"))
    for query in coverage_queries(window, policy, writer, chosen):
        add(query)
    return queries


def coverage_queries(
    window: Window, policy: Policy, writer: LogWriter | None = None, checks: Sequence[Any] | None = None
) -> list[Query]:
    """What `checks.coverage` asks for the enabled checks (or ``checks``): one query per source, and the fleet's."""
    if not policy.coverage.enabled:
        return []
    grid = coverage.Grid.of(window)
    chosen = build_checks(policy) if checks is None else checks
    needs = list(dict.fromkeys(need for check in chosen for need in check.needs()))
    out: list[Query] = []
    for need in needs:
        purpose = f"coverage.{need.label}"
        if need.backend is Backend.LOGS:
            out.extend(_asked_logs(coverage.logs_question(need, grid), writer or LogsqlWriter(), purpose, policy))
        else:
            text = coverage.queries(need, grid, policy.coverage)
            out.append(_range(text, grid.range_start, grid.range_end, grid.step, purpose))
    if any(need.per_node for need in needs):
        for purpose, text in coverage.fleet_queries(grid, policy.coverage).items():
            if purpose == "before":
                form = {"query": text, "time": rfc3339(window.start)}
                out.append(Query(METRICS, "/api/v1/query", form, f"coverage.fleet.{purpose}"))
            else:
                out.append(_range(text, grid.range_start, grid.range_end, grid.step, f"coverage.fleet.{purpose}"))
    return out


def replay_queries(
    days: Sequence[date],
    metrics_url: str,
    writer: LogWriter | None = None,
    policy: Policy | None = None,
    logs_url: str | None = None,
) -> tuple[list[Query], int]:
    """The floor of ``digest replay`` over ``days``, and how many windows it covers.

    Every replayed day's checks-floor queries (dependencies looked up per day), plus the graded checks of the days
    before the first that the trends compare with (the replayed days serve as each other's history). Queries are
    named ``<day> <check>.<purpose>``. With ``logs_url`` (a VictoriaLogs), each window's error_lines shapes
    questions are looked up and sent too, as in the day's checks floor (`resolve_dependencies`).
    """
    policy = policy or Policy()
    ordered = sorted(days)
    trend_days = policy.trends.days if policy.trends.enabled else 0
    earlier = [ordered[0] - timedelta(days=back) for back in range(trend_days, 0, -1)]
    queries: list[Query] = []
    for day, graded_only in [*((day, True) for day in earlier), *((day, False) for day in ordered)]:
        window = window_of(day)
        dependencies = resolve_dependencies(metrics_url, window, policy, logs_url)
        for query in checks_queries(window, dependencies, policy, writer, graded_only=graded_only):
            queries.append(replace(query, purpose=f"{day} {query.purpose}"))
    return queries, len(earlier) + len(ordered)


def resolve_dependencies(
    vm_url: str, window: Window, policy: Policy | None = None, logs_url: str | None = None
) -> Dependencies:
    """What the checks' data-dependent queries depend on, looked up as the checks do.

    With ``logs_url`` (a VictoriaLogs), error_lines' count is asked too, for the shapes questions it leads to.
    """
    policy = policy or Policy()
    checks: dict[str, Any] = {check.name: check for check in build_checks(policy)}
    at = rfc3339(window.end)

    def ask(check: str, purpose: str) -> list[dict[str, Any]]:
        return _post(f"{vm_url}/api/v1/query", {"query": checks[check].queries(window)[purpose], "time": at})

    def keys(rows: list[dict[str, Any]]) -> tuple[ContainerKey, ...]:
        found = {
            (row["metric"].get("namespace", ""), row["metric"].get("pod", ""), row["metric"].get("container", ""))
            for row in rows
        }
        return tuple(sorted(found))

    instance = None
    if "conntrack" in checks:
        rows = ask("conntrack", "peak")
        if rows:
            instance = str(max(rows, key=lambda item: float(item["value"][1]))["metric"].get("instance", ""))
    return Dependencies(
        conntrack_instance=instance,
        restarted=keys(ask("restarts", "restarted")) if "restarts" in checks else None,
        memory_candidates=keys(ask("memory_pressure", "candidates")) if "memory_pressure" in checks else None,
        memory_peak_seen=bool(ask("memory_pressure", "peak")) if "memory_pressure" in checks else None,
        cpu_limited=bool(ask("cpu_throttling", "limited")) if "cpu_throttling" in checks else None,
        shape_questions=_shape_questions(checks.get("error_lines"), window, logs_url),
    )


def _shape_questions(check: Any, window: Window, logs_url: str | None) -> tuple[ShapeCount, ...] | None:
    if not isinstance(check, ErrorLinesCheck) or logs_url is None:
        return None

    async def ask() -> tuple[ShapeCount, ...]:
        source = VictoriaLogsSource(Endpoint(name="VictoriaLogs", url=logs_url, timeout_seconds=300))
        try:
            return tuple(check.shape_questions(window, await source.count(check.question(window))))
        finally:
            await source.aclose()

    return asyncio.run(ask())


def _post(url: str, form: dict[str, str]) -> list[dict[str, Any]]:
    response = httpx.post(url, data=form, timeout=300)
    response.raise_for_status()
    result: list[dict[str, Any]] = response.json()["data"]["result"]
    return result


def _sent_as(query: Query) -> dict[str, Any]:
    """How a query's request carries it: its recorded body byte for byte, else its form."""
    if query.body is not None:
        return {"content": query.body, "headers": {"Content-Type": query.content_type} if query.content_type else {}}
    return {"data": query.form}


async def _send(
    client: httpx.AsyncClient, gate: asyncio.Semaphore, base: str, query: Query, timings: dict[str, float]
) -> None:
    async with gate:
        started = time.perf_counter()
        response = await client.post(base + query.path, **_sent_as(query))
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


def sent_fields(query: Query) -> dict[str, str]:
    """Every field a query sends: its form, its body's and its path's query string."""
    form = dict(query.form)
    if query.body is not None:
        form.update(parse_qsl(query.body.decode("utf-8", errors="replace")))
    form.update(parse_qsl(urlsplit(query.path).query))
    return form


def query_text(query: Query) -> str:
    """What a query asks, for a report: its ``query`` field (PromQL, LogsQL or LogQL), else its path."""
    return sent_fields(query).get("query", urlsplit(query.path).path)


def cost_alone(
    queries: Sequence[Query],
    vm_url: str,
    vl_url: str,
    pids: Mapping[str, int],
    cpu: Callable[[int], float],
    repeats: int = 3,
) -> list[tuple[float, float, Query]]:
    """What each query costs sent alone: its backend's CPU seconds and its wall seconds, after one unmeasured send.

    Each the mean of ``repeats``. ``pids`` maps METRICS and LOGS to the backends' processes, ``cpu`` reads a
    process's CPU seconds. What a digest's requests cost each backend once nothing else runs: where a flood's extra
    time goes, and (wall beside CPU) where a backend waits rather than works.
    """
    bases = {METRICS: vm_url.rstrip("/"), LOGS: vl_url.rstrip("/")}
    costs: list[tuple[float, float, Query]] = []
    with httpx.Client(timeout=300.0) as client:
        for query in queries:
            url, sent = bases[query.backend] + query.path, _sent_as(query)
            client.post(url, **sent)
            before, started = cpu(pids[query.backend]), time.perf_counter()
            for _ in range(repeats):
                client.post(url, **sent)
            wall = (time.perf_counter() - started) / repeats
            costs.append(((cpu(pids[query.backend]) - before) / repeats, wall, query))
    return costs

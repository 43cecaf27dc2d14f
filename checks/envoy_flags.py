"""envoy_flags: 5xx answers that Envoy itself flagged, by response flag and upstream.

Signal: Envoy Gateway's default JSON access log in the log backend (queries.md §6.4) and, when present, Istio's
``istio_requests_total{response_flags}`` (§6.1). A response flag says *why* the proxy answered badly — UH: no
healthy upstream, UC: the upstream closed a kept-alive connection, UF: connect failure… — which is what a reader
needs to know where to look (§6.3). The denominator is every request of that upstream.

Questions: a `LineCount` of the access log by hour, upstream and flags, with two columns (every request, the 5xx
answers); on VictoriaLogs::

    _time:[start, end) kubernetes.pod_namespace:="envoy-gateway-system" kubernetes.container_name:="envoy"
      | unpack_json from _msg fields (response_code, response_flags, upstream_cluster) keep_original_fields
      | stats by (_time:3600s, upstream_cluster, response_flags) count() as requests,
                                                 count() if (response_code:~"^(?:5[0-9][0-9])$") as errors

(on Loki: ``sum by (…) (count_over_time({namespace="envoy-gateway-system", container="envoy"} | json … [1h]))`` every
hour, one range query per column), and Istio's counter::

    sum by (reporter, destination_service_namespace, destination_service_name, response_code, response_flags)
      (increase(istio_requests_total[<window>]))

The hour buckets cost a few dozen rows and let UC be compared between quiet and busy hours (an idle-timeout race
fails more when traffic is low) without a second scan. ``unpack_json … keep_original_fields`` reads the JSON
message when the shipper kept it as text and leaves fields alone when the shipper already parsed them; Loki's
``| json`` reads the message (a line that is not JSON still counts, with empty fields). For Istio
both reporters are read and, per service, the larger count of each (flag, code) is kept so that a request seen by
both sidecars is counted once.

Thresholds (seed 000): any UH costs two points — every such request found no endpoint at all, the service was down
for those users (08-12 readiness spiral, the Recreate rollout). Other flagged 5xx cost one point from 0.01 % of an
upstream's requests and two from 1 %: 08-16's 35 UC out of 200,580 (0.017 %) is the one-point day — rare enough to
be a race, frequent enough to be a real misconfiguration (proxy idle timeout longer than the upstream keep-alive).

No access-log line and no Istio series in the window: UNKNOWN (the gateway's logs are not where the policy says, or
no longer shipped). A cluster that had neither in the window nor in the 30 days before (``coverage.deployed_days``)
has no Envoy or mesh to watch (ingress-nginx, or no ingress at all): the check is *not watched*, named once in a
footer line and by ``digest doctor``, and costs nothing (`checks.coverage.unwatched`); ``enabled: false`` drops it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta

from . import coverage
from .contract import (
    Finding,
    Input,
    Look,
    Need,
    Offender,
    Quantity,
    Sample,
    SourceError,
    Sources,
    Span,
    Status,
    Unit,
    Window,
    fmt_int,
    fmt_percent,
    grade,
    local_time,
    unknown,
)
from .log_questions import (
    EVERY_LINE,
    CountRow,
    Empty,
    Filter,
    Is,
    Json,
    LineCount,
    Matches,
    every,
    native,
    roles_equal,
)
from .promql import quote

NAME = "envoy_flags"

# What this check reads, for `digest doctor`: the access log's JSON keys (as the policy names them), or Istio's counter.
INPUTS: tuple[Input, ...] = (
    Input("lines", "access log", "the gateway's requests", required=False, policy_key="envoy_flags.scope"),
    Input("json_key", "response_code", "5xx answers", policy_key="envoy_flags.code_field"),
    Input("json_key", "response_flags", "why the proxy answered", policy_key="envoy_flags.flags_field"),
    Input("json_key", "upstream_cluster", "which route", required=False, policy_key="envoy_flags.upstream_field"),
    Input(
        "series",
        "istio_requests_total",
        "Istio's requests",
        required=False,
        policy_key="envoy_flags.use_istio_metrics",
        fix="Istio's telemetry",
    ),
)

# What each response flag means and where to look (Envoy docs, substitution_formatter.rst; queries.md §6.3).
FLAG_MEANINGS: dict[str, tuple[str, str]] = {
    "UH": (
        "no healthy upstream: the service had no ready endpoint",
        "why the service had no ready endpoint is in the explanation when the data shows it; else compare its "
        "empty episodes (empty_endpoints) with its pods' readiness, its Deployment's rollouts and its nodes",
    ),
    "UF": (
        "upstream connection failure",
        "the pods refused or did not accept connections: crash loop, wrong port, network policy",
    ),
    "UO": ("upstream overflow: circuit breaker open", "raise the cluster's circuit-breaker limits or add replicas"),
    "NR": ("no route configured", "the HTTPRoute/VirtualService does not match this host or path"),
    "URX": ("upstream retry limit exceeded", "every retry failed: look at the upstream's own errors"),
    "NC": ("upstream cluster not found", "a route points at a backend that does not exist"),
    "DT": ("max connection or stream duration reached", "check max_connection_duration settings"),
    "DC": ("downstream connection terminated", "the client went away before the answer (timeouts on the client side)"),
    "LH": ("local service failed its health check", "the sidecar's own application is unhealthy"),
    "UT": (
        "upstream request timeout",
        "the upstream answered slower than the route timeout: its latency or the timeout",
    ),
    "LR": ("connection reset by the proxy itself", "look at the proxy's own resource limits and overload"),
    "UR": ("upstream remote reset", "the upstream reset the stream: crash or abort in the application"),
    "UC": (
        "upstream connection terminated: the upstream closed a kept-alive connection",
        "idle-timeout ordering: the proxy's idle timeout must be shorter than the upstream's keep-alive "
        "(e.g. BackendTrafficPolicy connectionIdleTimeout below uvicorn's 5 s, or Istio idleTimeout below the "
        "server's IdleTimeout)",
    ),
    "DI": ("fault-injection delay", "a fault-injection policy is active"),
    "FI": ("fault-injection abort", "a fault-injection policy is active"),
    "RL": ("rate limited", "the rate-limit policy rejected the request"),
    "UAEX": ("denied by external authorization", "the ext_authz service refused"),
    "RLSE": ("rate-limit service error", "the rate-limit service is failing"),
    "IH": ("invalid x-envoy header", "a client sent an invalid strictly-checked x-envoy-* header"),
    "SI": ("stream idle timeout", "the stream was idle longer than the idle timeout"),
    "DPE": ("downstream protocol error", "a client sent malformed HTTP"),
    "UPE": ("upstream protocol error", "the upstream answered malformed HTTP (wrong protocol or port?)"),
    "UMSDR": ("upstream max stream duration reached", "the upstream stream exceeded max_stream_duration"),
    "OM": ("overload manager terminated the request", "the proxy is out of resources"),
    "DF": ("DNS resolution failed", "the dynamic forward proxy could not resolve the host"),
    "DO": ("dropped by EDS drop_overload", "the control plane asked to shed load"),
    "UDO": ("unconditional drop_overload", "the control plane drops all traffic to this cluster"),
    "DR": ("downstream remote reset", "the client reset the stream"),
    "NFCF": ("no filter config found", "a filter's configuration never arrived from the control plane"),
    "RFCF": ("served from the cache filter", "not an error"),
}


@dataclass(frozen=True)
class EnvoyFlagsPolicy:
    """Where the access log is, its field names, and what flagged 5xx cost."""

    enabled: bool = True
    # Where the access log is: role: value pairs that must all match, and/or a filter in the backend's language.
    scope: dict[str, str] = field(default_factory=lambda: {"namespace": "envoy-gateway-system", "container": "envoy"})
    scope_filter: str = ""
    # Keys of the JSON access-log line (Envoy Gateway's default format).
    code_field: str = "response_code"
    flags_field: str = "response_flags"
    upstream_field: str = "upstream_cluster"
    use_istio_metrics: bool = True
    uh_penalty: int = 2
    warn_ratio: float = 0.0001
    crit_ratio: float = 0.01
    warn_penalty: int = 1
    crit_penalty: int = 2
    top: int = 5


@dataclass
class _Upstream:
    requests: float = 0.0
    # Of them, the access log's lines (Istio's counter adds to ``requests`` only).
    logged: float = 0.0
    server_errors: float = 0.0
    # 5xx records without the flag field (absent or null, not Envoy's "-"): neither flagged nor the application's.
    unclassifiable: float = 0.0
    flagged: dict[str, float] | None = None
    # The hours (start, unix seconds) each flag's 5xx fell in, from the access log: when, for a cross-check in time.
    hours: dict[str, set[float]] | None = None

    def add_flagged(self, flag: str, count: float) -> None:
        if self.flagged is None:
            self.flagged = {}
        self.flagged[flag] = self.flagged.get(flag, 0.0) + count


@dataclass(frozen=True)
class EnvoyFlagsCheck:
    """Flagged 5xx per upstream from the gateway's access log and Istio metrics."""

    policy: EnvoyFlagsPolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        istio = (coverage.istio_requests(),) if self.policy.use_istio_metrics else ()
        return (coverage.access_logs(self.scope()), *istio)

    def scope(self) -> Filter:
        """Where the gateway's access log is."""
        policy = self.policy
        return every(roles_equal(policy.scope), native(policy.scope_filter))

    def log_question(self, window: Window) -> LineCount:
        """The access log's requests and 5xx answers per hour, upstream and flags."""
        policy = self.policy
        # Hour buckets ride along (a few dozen rows more): the quiet-vs-busy comparison of UC needs them, and this
        # way it costs no second scan of the access log.
        return LineCount(
            window=window,
            scope=self.scope(),
            columns=(("requests", EVERY_LINE), ("errors", Matches(Json(policy.code_field), "5[0-9][0-9]"))),
            by=(Json(policy.upstream_field), Json(policy.flags_field)),
            bucket_seconds=3600,
        )

    def istio_query(self, window: Window) -> str:
        """The PromQL over Istio's request counter."""
        return (
            "sum by (reporter, destination_service_namespace, destination_service_name, response_code, "
            f"response_flags) (increase(istio_requests_total[{window.promql_range()}]))"
        )

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        errors: list[str] = []
        upstreams: dict[str, _Upstream] = defaultdict(_Upstream)
        log_rows, istio_rows = await asyncio.gather(
            self._log_rows(sources, window, errors), self._istio_rows(sources, window, errors)
        )
        self._add_log_rows(upstreams, log_rows)
        self._add_istio_rows(upstreams, istio_rows)

        total_requests = sum(upstream.requests for upstream in upstreams.values())
        if total_requests == 0:
            if errors:
                return unknown(NAME, "proxy answers not checked: the backends did not answer", "; ".join(errors))
            return unknown(
                NAME,
                "proxy answers not checked: no Envoy access log and no istio_requests_total in the window",
                "no access-log lines or Istio series in the window",
                # A cluster that never had either is not here: its check is not watched (checks.coverage.unwatched).
                hint="The gateway logged on earlier days: is its access log still shipped (the shipper's filters, "
                "the gateway's access-log settings)? If it moved, set envoy_flags.scope (or scope_filter) in the "
                "policy to where it is now.",
            )
        uc_upstreams = [
            name for name, upstream in upstreams.items() if any("UC" in _split(f) for f in upstream.flagged or {})
        ]
        shapes = {name: await self._hourly_shape(sources, window, name, log_rows) for name in uc_upstreams[:2]}
        return self._looked(self._finding(upstreams, total_requests, errors, shapes), sources, window, upstreams)

    def _looked(
        self, finding: Finding, sources: Sources, window: Window, upstreams: Mapping[str, _Upstream]
    ) -> Finding:
        """The finding with where to read its 5xx: the access log's, and each offender's (when the log had it)."""
        policy = self.policy
        server_errors = Matches(Json(policy.code_field), "5[0-9][0-9]")
        offenders = []
        for offender in finding.offenders:
            name, flags = offender.labels["upstream"], offender.labels["flag"]
            if not upstreams[name].logged:  # counted from Istio's metrics alone: no line to read
                offenders.append(offender)
                continue
            upstream = Empty(Json(policy.upstream_field)) if name == "-" else Is(Json(policy.upstream_field), name)
            lines = every(self.scope(), server_errors, upstream, Is(Json(policy.flags_field), flags))
            offenders.append(replace(offender, look=Look(logs=sources.logs.reading_query(window, lines))))
        # The 5xx when some were flagged; on a day without, the access log itself (a link to nothing helps no one).
        whole = every(self.scope(), server_errors) if finding.offenders else self.scope()
        return replace(finding, offenders=tuple(offenders), look=Look(logs=sources.logs.reading_query(window, whole)))

    async def _log_rows(self, sources: Sources, window: Window, errors: list[str]) -> Sequence[CountRow]:
        try:
            return await sources.logs.count(self.log_question(window))
        except SourceError as exc:
            errors.append(str(exc))
            return ()

    async def _istio_rows(self, sources: Sources, window: Window, errors: list[str]) -> Sequence[Sample]:
        if not self.policy.use_istio_metrics:
            return ()
        try:
            return await sources.metrics.instant(self.istio_query(window), window.end)
        except SourceError as exc:
            errors.append(str(exc))
            return ()

    def hourly_queries(self, upstream: str) -> dict[str, str]:
        """Per-hour requests and UC answers of one Istio service (the access log has its hours already)."""
        namespace, service = upstream.removeprefix("istio:").split("/", 1)
        selector = (
            f'reporter="destination", destination_service_namespace="{quote(namespace)}", '
            f'destination_service_name="{quote(service)}"'
        )
        return {
            "requests": f"sum(increase(istio_requests_total{{{selector}}}[1h]))",
            "uc": f'sum(increase(istio_requests_total{{{selector}, response_flags=~"(.*,)?UC(,.*)?"}}[1h]))',
        }

    async def _hourly_shape(
        self, sources: Sources, window: Window, upstream: str, log_rows: Sequence[CountRow]
    ) -> _HourlyShape | None:
        """Quiet-hours vs busy-hours UC ratio of ``upstream``.

        None when the hourly query fails: the finding stands without the comparison, which only sharpens it.
        """
        requests: dict[float, float] = defaultdict(float)
        resets: dict[float, float] = defaultdict(float)
        if not upstream.startswith("istio:"):
            policy = self.policy
            for row in log_rows:
                count = row.counts.get("requests", 0.0)
                if row.bucket is None or _clean(row.group.get(policy.upstream_field, "")) != upstream:
                    continue
                requests[row.bucket] += count
                if "UC" in _split(_clean(row.group.get(policy.flags_field, ""))):
                    resets[row.bucket] += count
            return _quiet_vs_busy(requests, resets, window)
        queries = self.hourly_queries(upstream)
        first = window.start + timedelta(hours=1)
        try:
            for name, target in (("requests", requests), ("uc", resets)):
                for series in await sources.metrics.range(queries[name], first, window.end, 3600):
                    for moment, value in series.points:
                        target[moment - 3600] += value
        except SourceError:
            return None
        return _quiet_vs_busy(requests, resets, window)

    def _add_log_rows(self, upstreams: dict[str, _Upstream], rows: Sequence[CountRow]) -> None:
        policy = self.policy
        for row in rows:
            upstream = upstreams[_clean(row.group.get(policy.upstream_field, ""))]
            raw_flags = row.group.get(policy.flags_field, "")
            upstream.requests += row.counts.get("requests", 0.0)
            upstream.logged += row.counts.get("requests", 0.0)
            server_errors = row.counts.get("errors", 0.0)
            if server_errors > 0:
                upstream.server_errors += server_errors
                # Envoy writes "-" when it set no flag; a record without the field at all says nothing either way.
                if raw_flags in ("", "null"):
                    upstream.unclassifiable += server_errors
                elif raw_flags != "-":
                    upstream.add_flagged(raw_flags, server_errors)
                    if row.bucket is not None:
                        upstream.hours = upstream.hours or {}
                        upstream.hours.setdefault(raw_flags, set()).add(row.bucket)

    def _add_istio_rows(self, upstreams: dict[str, _Upstream], rows: Sequence[Sample]) -> None:
        # Keep, per service and (code, flags), the larger of the two reporters' counts: counted once, seen by either.
        best: dict[tuple[str, str, str], float] = defaultdict(float)
        for row in rows:
            labels = row.labels
            namespace = labels.get("destination_service_namespace", "?")
            service = f"istio:{namespace}/{labels.get('destination_service_name', '?')}"
            key = (service, labels.get("response_code", ""), labels.get("response_flags", "-") or "-")
            best[key] = max(best[key], round(row.value))
        for (service, code, flags), count in best.items():
            upstream = upstreams[service]
            upstream.requests += count
            if code.startswith("5") and len(code) == 3:
                upstream.server_errors += count
                if flags != "-":
                    upstream.add_flagged(flags, count)

    def _finding(
        self,
        upstreams: dict[str, _Upstream],
        total_requests: float,
        errors: list[str],
        shapes: dict[str, _HourlyShape | None],
    ) -> Finding:
        policy = self.policy
        rows: list[tuple[float, str, str, float, float]] = []  # (count, flag, upstream, ratio, requests)
        for name, upstream in upstreams.items():
            for flags, count in (upstream.flagged or {}).items():
                ratio = count / upstream.requests if upstream.requests else 1.0
                rows.append((count, flags, name, ratio, upstream.requests))
        rows.sort(key=lambda row: (-("UH" in _split(row[1])), -row[3], -row[0]))

        has_uh = any("UH" in _split(flags) for _, flags, _, _, _ in rows)
        worst_other = max((ratio for _, flags, _, ratio, _ in rows if "UH" not in _split(flags)), default=0.0)
        level = 2 if worst_other >= policy.crit_ratio else 1 if worst_other >= policy.warn_ratio else 0
        status, penalty = grade(level, policy.warn_penalty, policy.crit_penalty)
        if has_uh and policy.uh_penalty >= penalty:
            status, penalty = Status.CRIT, policy.uh_penalty

        flagged_total = sum(row[0] for row in rows)
        offenders: list[Offender] = []
        for count, flags, name, _, requests in rows[: policy.top]:
            labels = {"upstream": name, "flag": flags}
            facts = {"requests": Quantity(round(requests), Unit.COUNT)}
            # The hourly shape is about UC only: on another flag of the same upstream it would explain nothing.
            shape = shapes.get(name) if "UC" in _split(flags) else None
            if shape is not None:
                labels["worst_hour"] = shape.worst_hour
                facts.update(shape.facts())
            # The hours the answers fell in (access log only): an explanation ties them to a cause only in time.
            hours = (upstreams[name].hours or {}).get(flags, set())
            spans = tuple(Span(hour, hour + 3600) for hour in sorted(hours))
            offenders.append(Offender(labels=labels, value=count, facts=facts, spans=spans))
        # The summary explains the worst flag; the evidence lines list the next ones.
        evidence = [
            f"then {fmt_int(count)} × {flags} on {name} ({fmt_percent(ratio)} of {fmt_int(requests)}): "
            f"{_meaning(flags)}"
            for count, flags, name, ratio, requests in rows[1 : policy.top]
        ]
        unclassifiable = {name: up.unclassifiable for name, up in upstreams.items() if up.unclassifiable > 0}
        unclassified_total = sum(unclassifiable.values())
        unflagged = sum(upstream.server_errors for upstream in upstreams.values()) - flagged_total - unclassified_total
        if unflagged > 0:
            evidence.append(f"{fmt_int(unflagged)} other 5xx came from the applications themselves (no proxy flag)")
        if unclassifiable:
            worst = sorted(unclassifiable.items(), key=lambda item: -item[1])
            named = ", ".join(f"{fmt_int(count)} on {name}" for name, count in worst[: policy.top])
            more = f" and {len(worst) - policy.top} more upstreams" if len(worst) > policy.top else ""
            evidence.append(
                f"{fmt_int(unclassified_total)} 5xx cannot be classified: their records have no "
                f"{policy.flags_field} field ({named}{more}); whether the proxy or the application answered is unknown"
            )
        if errors:
            evidence.append("partly blind: " + "; ".join(errors))
        if rows:
            count, flags, name, ratio, requests = rows[0]
            summary = (
                f"{fmt_int(count)} × {flags} ({_meaning(flags)}) on {name}: {fmt_percent(ratio)} of "
                f"{fmt_int(requests)} requests"
                + (f"; {fmt_int(flagged_total)} flagged 5xx in all" if flagged_total > count else "")
            )
            hint_flags = []
            for _, row_flags, _, _, _ in rows[: policy.top]:
                for flag in _split(row_flags):
                    if flag not in hint_flags:
                        hint_flags.append(flag)
            hint = " ".join(f"{flag}: {FLAG_MEANINGS[flag][1]}." for flag in hint_flags if flag in FLAG_MEANINGS)
        elif unclassifiable:
            summary = (
                f"{fmt_int(unclassified_total)} 5xx not classifiable (no {policy.flags_field} field) in "
                f"{fmt_int(total_requests)} requests; no flagged 5xx among the rest"
            )
            hint = (
                f"Add %RESPONSE_FLAGS% as {policy.flags_field} to the gateway's access-log format (Envoy Gateway's "
                "default JSON has it), or set envoy_flags.flags_field in the policy to the key your format uses."
            )
        else:
            summary = f"no flagged 5xx in {fmt_int(total_requests)} requests"
            hint = ""
        if (errors or unclassifiable) and status is Status.OK:
            status = Status.UNKNOWN
        unseen = [f"{fmt_int(unclassified_total)} 5xx without a {policy.flags_field} field"] if unclassifiable else []
        return Finding(
            name=NAME,
            status=status,
            penalty=penalty,
            value=flagged_total,
            summary=summary,
            offenders=offenders,
            hint=hint,
            error="; ".join([*errors, *unseen]) or None,
            evidence=evidence,
            route_lines={name: upstream.logged for name, upstream in upstreams.items() if upstream.logged > 0},
        )


@dataclass(frozen=True)
class _HourlyShape:
    """How an upstream's UC share differs between its quiet and busy hours, and which hour was worst."""

    quiet_hours_ratio: float  # 0..1, UC answers over requests in the quieter half of the hours
    busy_hours_ratio: float
    worst_hour_start: float  # unix seconds
    worst_hour: str  # the same hour as the reader reads it (local HH:MM)

    def facts(self) -> dict[str, Quantity]:
        return {
            "quiet_hours_ratio": Quantity(self.quiet_hours_ratio, Unit.RATIO),
            "busy_hours_ratio": Quantity(self.busy_hours_ratio, Unit.RATIO),
            "worst_hour_start": Quantity(self.worst_hour_start, Unit.TIMESTAMP),
        }


def _quiet_vs_busy(requests: dict[float, float], resets: dict[float, float], window: Window) -> _HourlyShape | None:
    """UC ratio in the quieter half of the hours vs the busier half, and the worst hour; None under four hours."""
    hours = sorted((count, moment) for moment, count in requests.items() if count > 0)
    if len(hours) < 4:
        return None
    half = len(hours) // 2
    quiet, busy = hours[:half], hours[-half:]

    def ratio(group: list[tuple[float, float]]) -> float:
        total = sum(count for count, _ in group)
        return sum(resets.get(moment, 0.0) for _, moment in group) / total if total else 0.0

    worst = max(hours, key=lambda item: resets.get(item[1], 0.0) / item[0])
    return _HourlyShape(
        quiet_hours_ratio=ratio(quiet),
        busy_hours_ratio=ratio(busy),
        worst_hour_start=worst[1],
        worst_hour=local_time(worst[1], window),
    )


def upstream_namespace(upstream: str) -> str:
    """``httproute/shop/api/rule/0`` → ``shop``; ``istio:pricing/quote`` → ``pricing``; else ``""``."""
    if upstream.startswith("istio:"):
        return upstream.removeprefix("istio:").split("/", 1)[0]
    parts = upstream.split("/")
    return parts[1] if len(parts) > 2 else ""


def upstream_route(upstream: str) -> str:
    """``httproute/shop/api/rule/0`` → ``api``; ``istio:pricing/quote`` → ``quote``; else the upstream itself."""
    if upstream.startswith("istio:"):
        return upstream.rsplit("/", 1)[-1]
    parts = upstream.split("/")
    return parts[2] if len(parts) > 2 else upstream


def route_name(upstream: str) -> str:
    """``httproute/shop/api/rule/0`` → ``shop/api``, as a reader names it; an upstream without a namespace as it is."""
    namespace = upstream_namespace(upstream)
    return f"{namespace}/{upstream_route(upstream)}" if namespace else upstream


def _clean(value: str) -> str:
    """Access logs print unset values as ``-`` or null; both mean "none"."""
    return value if value not in ("", "null") else "-"


def _split(flags: str) -> list[str]:
    """Envoy joins several flags with commas (``UF,URX``): compare whole flags, never substrings."""
    return [flag for flag in flags.split(",") if flag]


def _meaning(flags: str) -> str:
    return "; ".join(FLAG_MEANINGS.get(flag, (f"flag {flag}", ""))[0] for flag in _split(flags))

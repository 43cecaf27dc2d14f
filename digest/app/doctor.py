"""`digest doctor`: what answers at each URL, the usual mistakes with their fix, and what each check will find.

The first thing to run after pointing the digest at a cluster. For the metrics and the log backend: what kind of
server answers at the configured URL (VictoriaMetrics or Prometheus, VictoriaLogs, Loki, something else or nothing),
and the usual mistakes named with their fix (an API path copied into the base URL: ``/api/v1``, ``/loki/api/v1``,
``/select/logsql``; a multi-tenant Loki asked without a tenant). On a shared store, the scope
(`digest.backends.scope`): what the metrics and logs selectors find, the clusters the store holds, and a store holding
several clusters read unscoped, which would count them all as one. Then the digest of the last 24 hours, read check
by check: which checks can run and what they read, which cannot and why, with the hint that names the policy key or
setting to change, and the sources never seen.

Exit 0 when both URLs are right and every graded check could run; 2 otherwise (someone must change a setting or the
policy first), like every other configuration problem.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TextIO

from checks.contract import Finding, SourceError, Status
from checks.coverage import PARTIAL
from checks.log_questions import LineCount
from digest import __version__
from digest.app.engine import Config, make_digest, open_sources
from digest.app.exit_codes import EXIT_OK, EXIT_USAGE
from digest.app.settings import LogBackend
from digest.backends.http import Endpoint, HttpSource, tls_context, url_fix
from digest.backends.prometheus import PrometheusSource
from digest.backends.scope import render
from digest.pipeline.score import Digest
from digest.pipeline.window import last_window

# What may answer at each kind of URL for the digest to work.
_EXPECTED = {
    "VictoriaMetrics": ("a VictoriaMetrics", "a Prometheus"),
    "VictoriaLogs": ("a VictoriaLogs",),
    "Loki": ("a Loki",),
}


@dataclass(frozen=True)
class UrlReport:
    """One configured URL: the kind of backend it must be, the setting, what answers there, the fix when wrong."""

    kind: str
    setting: str
    url: str
    answers: str | None
    fix: str | None

    def line(self) -> str:
        """The report's line for this URL, marked ✓ when the expected kind answers at a base URL."""
        what = self.answers or "nothing known (no Prometheus, VictoriaMetrics, VictoriaLogs or Loki API)"
        fix = f" → {self.fix}" if self.fix else ""
        wrong = "" if self.answers in _EXPECTED[self.kind] else f", but {self.kind} was expected"
        return f"{'✓' if self.fine() else '✗'} {self.setting} {self.url}: {what} answers{wrong}{fix}"

    def fine(self) -> bool:
        """Whether the expected kind of backend answers here and the URL carries no API path."""
        return self.answers in _EXPECTED[self.kind] and self.fix is None


async def _probe(source: HttpSource, endpoint: Endpoint) -> UrlReport:
    fix = url_fix(endpoint.name, endpoint.url)
    try:
        answers = await source.what_answers()
        if answers == "a Loki" and fix is None:
            # A multi-tenant Loki answers its build info to anyone and every query with 401 "no org id".
            status, text = await source.probe("/loki/api/v1/labels")
            if status == 401 and "no org id" in text.lower():
                fix = "Loki is multi-tenant: set DIGEST_LOKI_TENANT (sent as X-Scope-OrgID)"
    finally:
        await source.aclose()
    return UrlReport(endpoint.name, endpoint.setting, endpoint.display_url, answers, fix)


# Labels that tell clusters apart on a shared store, by convention (kube-prometheus-stack's and Thanos' external
# label, VictoriaMetrics k8s-stack's remote-write label), looked for when no scope is set.
CLUSTER_LABELS = ("cluster", "cluster_name", "k8s_cluster")


@dataclass(frozen=True)
class ScopeReport:
    """Which part of a shared store the digest reads: the scope, what it finds, and what else the store holds."""

    what: str  # "metrics" or "logs"
    setting: str
    scope: str  # the matchers as written, "" when the digest reads everything
    found: float | None  # up series (metrics) or lines (logs) in scope over the 24 h; None when not asked
    others: dict[str, list[str]]  # cluster label → the values the store holds (metrics only)
    problem: str | None
    note: str | None = None

    def line(self) -> str:
        """The report's line, ✗ when the scope reads nothing or the store mixes clusters unscoped."""
        if self.problem:
            return f"✗ {self.what}: {self.problem}"
        if not self.scope:
            return f"– {self.what}: not scoped{f' ({self.note})' if self.note else ''}"
        found = "" if self.found is None else f": {_count(self.found)} {_UNIT[self.what]} in the 24 h"
        held = "; ".join(f"{label} here: {', '.join(values)}" for label, values in self.others.items())
        return f"✓ {self.what} scoped to {{{self.scope}}} ({self.setting}){found}{f' ({held})' if held else ''}"

    def fine(self) -> bool:
        return self.problem is None


_UNIT = {"metrics": "up series", "logs": "lines"}


def _count(value: float) -> str:
    return f"{value:,.0f}"


async def _metrics_scope(config: Config, tls: ssl.SSLContext, now: datetime) -> ScopeReport | None:
    """The metrics scope's report; None when the URL itself is wrong (said above)."""
    settings = config.settings
    scope = settings.metrics_scope
    setting = "DIGEST_METRICS_SELECTOR / DIGEST_VM_URL"
    plain = PrometheusSource(settings.vm_endpoint(), tls=tls)
    scoped = PrometheusSource(settings.vm_endpoint(), tls=tls, scope=scope)
    try:
        others: dict[str, list[str]] = {}
        for label in sorted({matcher.name for matcher in scope}) or CLUSTER_LABELS:
            rows = await plain.instant(f"count by ({label}) (last_over_time(up[1d]))", now)
            values = sorted(row.labels[label] for row in rows if row.labels.get(label))
            if values:
                others[label] = values
        found = None
        if scope:
            rows = await scoped.instant("count(last_over_time(up[1d]))", now)
            found = rows[0].value if rows else 0.0
    except SourceError:
        return None
    finally:
        await plain.aclose()
        await scoped.aclose()
    written = render(scope)
    problem = None
    if scope and not found:
        held = "; ".join(f"{label} here: {', '.join(values)}" for label, values in others.items())
        problem = f"{{{written}}} ({setting}) matches no up series in the 24 h{f' ({held})' if held else ''}"
    elif not scope:
        mixed = {label: values for label, values in others.items() if len(values) > 1}
        if mixed:
            label, values = next(iter(mixed.items()))
            problem = (
                f"this store holds several clusters ({label}: {', '.join(values)}) and the digest would count them "
                f'all as one: set DIGEST_METRICS_SELECTOR, e.g. {label}="{values[0]}"'
            )
    return ScopeReport("metrics", setting, written, found, others, problem)


async def _logs_scope(config: Config, now: datetime, metrics_scoped: bool) -> ScopeReport | None:
    """The logs scope's report; None when the URL itself is wrong (said above)."""
    settings = config.settings
    scope = settings.logs_scope
    setting = "DIGEST_LOGS_SELECTOR"
    if not scope:
        note = "the metrics are: set DIGEST_LOGS_SELECTOR too if the log store is shared" if metrics_scoped else None
        return ScopeReport("logs", setting, "", None, {}, None, note)
    window = last_window(timedelta(hours=24), now, settings.zone)
    async with open_sources(settings, config.policy) as sources:
        try:
            rows = await sources.logs.count(LineCount(window))
        except SourceError:
            return None
    found = sum(row.counts.get("lines", 0.0) for row in rows)
    problem = None
    if not found:
        where = (
            "a stream label (Loki)" if settings.log_backend is LogBackend.LOKI else "a stream field (_stream_fields)"
        )
        problem = f"{{{render(scope)}}} ({setting}) matches no line in the 24 h: is its label {where}?"
    return ScopeReport("logs", setting, render(scope), found, {}, problem)


async def doctor(config: Config, now: datetime, out: TextIO, fmt: str = "text") -> int:
    """Check the URLs and what every check finds over the 24 h before ``now``; write the report to ``out``."""
    settings = config.settings
    metrics_endpoint, logs_endpoint = settings.vm_endpoint(), settings.logs_endpoint()
    tls = tls_context([metrics_endpoint.url, logs_endpoint.url])
    # The probes are the same requests for every kind of URL: the plain HTTP source asks them.
    urls = [await _probe(HttpSource(endpoint, tls=tls), endpoint) for endpoint in (metrics_endpoint, logs_endpoint)]
    scopes = [
        report
        for report in (
            await _metrics_scope(config, tls, now) if urls[0].fine() else None,
            await _logs_scope(config, now, bool(settings.metrics_scope)) if urls[1].fine() else None,
        )
        if report is not None
    ]
    window = last_window(timedelta(hours=24), now, settings.zone)
    digest = await make_digest(config, window)
    checks = [_check_report(digest, finding) for finding in digest.findings]
    # A wrong URL is said once, above: the checks it blinds point at it instead of repeating its error.
    wrong = [report for report in urls if not report.fine()]
    for check in checks:
        blamed = [report.setting for report in wrong if f"{report.url} " in check["said"]]
        if not check["runs"] and blamed:
            check["said"] = f"cannot run: {' and '.join(blamed)} is wrong (see above)"
            check["hint"] = ""
    never_seen = sorted(
        {seen for finding in digest.findings if finding.coverage for seen in finding.coverage.never_seen}
    )
    graded_blind = [check for check in checks if check["graded"] and not check["runs"]]
    healthy = all(report.fine() for report in urls) and all(r.fine() for r in scopes) and not graded_blind
    if fmt == "json":
        payload = {
            "version": __version__,
            "cluster": settings.cluster,
            "window": {"start": window.start.isoformat(), "end": window.end.isoformat()},
            "urls": [
                {
                    "kind": r.kind,
                    "setting": r.setting,
                    "url": r.url,
                    "answers": r.answers,
                    "fix": r.fix,
                    "ok": r.fine(),
                }
                for r in urls
            ],
            "scopes": [
                {
                    "what": r.what,
                    "scope": r.scope,
                    "found": r.found,
                    "clusters_in_store": r.others,
                    "problem": r.problem,
                    "ok": r.fine(),
                }
                for r in scopes
            ],
            "checks": checks,
            "disabled": list(digest.disabled),
            "never_seen": never_seen,
            "ok": healthy,
        }
        out.write(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
        return EXIT_OK if healthy else EXIT_USAGE
    lines = [f"digest doctor · {settings.cluster} · digest {__version__}", "", "Backends:"]
    lines.extend(f"  {report.line()}" for report in urls)
    if scopes:
        lines.extend(["", "Scope on a shared store:"])
        lines.extend(f"  {report.line()}" for report in scopes)
    lines.extend(["", f"Checks, on the 24 h to {window.label.split(' to ', 1)[-1]} ({settings.timezone}):"])
    for check in checks:
        mark = "✓" if check["runs"] else "✗" if check["graded"] else "–"
        role = "graded" if check["graded"] else "diagnostic"
        lines.append(f"  {mark} {check['name']} ({role}): {check['said']}")
        if not check["runs"] and check["hint"]:
            lines.append(f"      → {check['hint']}")
    if digest.disabled:
        lines.append(f"  – disabled in the policy: {', '.join(digest.disabled)}")
    if never_seen:
        lines.extend(["", f"Never seen in the last 30 days: {'; '.join(never_seen)}"])
    lines.extend(
        [
            "",
            "Ready: every graded check can run."
            if healthy
            else "Not ready: fix what is marked ✗ above"
            + (" (a graded check that cannot run makes every digest UNKNOWN)." if graded_blind else "."),
        ]
    )
    out.write("\n".join(lines) + "\n")
    return EXIT_OK if healthy else EXIT_USAGE


def _check_report(digest: Digest, finding: Finding) -> dict[str, Any]:
    # UNKNOWN for a part unseen (a node, hours) still ran; UNKNOWN for its own reason (no source, no series) did not.
    runs = finding.status is not Status.UNKNOWN or (finding.error or "").startswith(PARTIAL)
    if runs:
        read = ", ".join(finding.observed) if finding.observed else "its sources"
        missing = f"; without {', '.join(finding.unobserved)}" if finding.unobserved else ""
        said = f"runs, reads {read}{missing}"
    else:
        said = finding.error or finding.summary
    return {
        "name": finding.name,
        "graded": digest.is_graded(finding),
        "runs": runs,
        "said": said,
        "hint": finding.hint or "",
        "observed": list(finding.observed),
        "unobserved": list(finding.unobserved),
    }

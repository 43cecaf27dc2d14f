"""`digest doctor`: what answers at each URL, the usual mistakes with their fix, and what each check will find.

The first thing to run after pointing the digest at a cluster. For the metrics and the log backend: what kind of
server answers at the configured URL (VictoriaMetrics, a VictoriaMetrics cluster's vmselect, vminsert or vmstorage,
Prometheus, VictoriaLogs, Loki, something else or nothing), and the usual mistakes named with their fix (an API path
copied into the base URL: ``/api/v1``, ``/loki/api/v1``, ``/select/logsql``; a multi-tenant Loki asked without a
tenant; a vmselect asked without a tenant, or with one that holds no data, named with the tenants that do). On a
shared store, the scope (`digest.backends.scope`): what the metrics and logs selectors find, the clusters the store
holds, and a store holding several clusters read unscoped, which would count them all as one. Then the digest of the
last 24 hours, read check by check: which checks can run and what they read, which cannot and why, with the hint
that names the policy key or setting to change, and the sources never seen. Under each check, what it reads
(`checks.registry`'s ``inputs``), looked for in the same 24 h: per metric family how many series and which ``job``
values carry them (one PromQL query per family, shared by the checks that read it), per log field how many lines of
the check's scope carry a value (one count per scope, a column per field), and for each input not found the policy
key or setting to change.

Then delivery, when a Telegram token is set: the token (``getMe``) and each configured chat (``getChat``: the bot is
in it, and a chat written with a forum topic is a forum), nothing posted (`digest.channels.telegram.check`).

Exit 0 when both URLs are right, every graded check could run and the configured delivery can post; 2 otherwise
(someone must change a setting or the policy first), like every other configuration problem.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TextIO

import httpx

from digest import __version__
from digest.app.channels import chat_topics
from digest.app.engine import Config, make_digest, open_sources
from digest.app.exit_codes import EXIT_OK, EXIT_USAGE
from digest.app.settings import LogBackend
from digest.backends.http import Endpoint, HttpSource, tls_context, url_fix
from digest.backends.loki import DEFAULT_LABELS
from digest.backends.prometheus import PrometheusSource
from digest.backends.scope import render
from digest.backends.victorialogs import DEFAULT_FIELDS
from digest.channels.mattermost.check import MattermostCheck, check_mattermost
from digest.channels.slack.api import SlackApi
from digest.channels.slack.check import DOCTOR_RETRY as SLACK_DOCTOR_RETRY
from digest.channels.slack.check import SlackCheck, check_slack
from digest.channels.telegram.check import TelegramCheck, check_telegram
from digest.checks import registry
from digest.checks.contract import Finding, Input, SourceError, Sources, Status, Unwatched, Window, fmt_duration
from digest.checks.coverage import PARTIAL
from digest.checks.log_questions import EVERY_LINE, ROLES, Empty, Filter, Json, LineCount, LogField, Not
from digest.pipeline.policy import Policy
from digest.pipeline.recording import recording_plan
from digest.pipeline.score import Digest
from digest.pipeline.window import last_window

# What may answer at each kind of URL for the digest to work.
_EXPECTED = {
    "VictoriaMetrics": ("a VictoriaMetrics", "a vmselect", "a Prometheus"),
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
    # Why nothing known answered: nothing at all (`digest.backends.http.why_unreachable`: DNS, refused, timeout, TLS),
    # or a server that refuses or fails every request (`digest.backends.http.status_words`: 401, 403, 5xx…).
    failure: str | None = None

    def line(self) -> str:
        """The report's line for this URL, marked ✓ when the expected kind answers at a base URL."""
        fix = f" → {self.fix}" if self.fix else ""
        if self.failure:
            return f"✗ {self.setting} {self.url}: {self.failure}{fix}"
        what = self.answers or "nothing known (no Prometheus, VictoriaMetrics, VictoriaLogs or Loki API)"
        wrong = "" if self.answers in _EXPECTED[self.kind] else f", but {self.kind} was expected"
        return f"{'✓' if self.fine() else '✗'} {self.setting} {self.url}: {what} answers{wrong}{fix}"

    def fine(self) -> bool:
        """Whether the expected kind of backend answers here and the URL carries no API path."""
        return self.answers in _EXPECTED[self.kind] and self.fix is None


async def _probe(source: HttpSource, endpoint: Endpoint, now: datetime) -> UrlReport:
    fix = url_fix(endpoint.name, endpoint.url)
    failure: str | None = None
    try:
        answers = await source.what_answers()
        if answers is None:
            # Nothing known answers: no server at all (DNS, refused, timeout, TLS), one that refuses or fails every
            # request (401, 403, 502…), or one of another kind.
            failure = await source.reach()
        if answers == "a Loki" and fix is None:
            # A multi-tenant Loki answers its build info to anyone and every query with 401 "no org id".
            status, text = await source.probe("/loki/api/v1/labels")
            if status == 401 and "no org id" in text.lower():
                fix = "Loki is multi-tenant: set DIGEST_LOKI_TENANT (sent as X-Scope-OrgID)"
        if fix is None:
            fix = await source.cluster_fix(answers, (now - timedelta(days=1)).timestamp(), now.timestamp())
    finally:
        await source.aclose()
    return UrlReport(endpoint.name, endpoint.setting, endpoint.display_url, answers, fix, failure)


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
    urls = [
        await _probe(HttpSource(endpoint, tls=tls), endpoint, now) for endpoint in (metrics_endpoint, logs_endpoint)
    ]
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
    # A check with nothing to watch on this cluster (no Envoy, no rule evaluator) is not blind: it is said, with the
    # key that drops the line, and does not make the doctor fail.
    checks.extend(_unwatched_report(config.policy, one) for one in digest.unwatched)
    inputs = await _inputs(config, window, [check["name"] for check in checks], urls[0].fine(), urls[1].fine())
    for check in checks:
        check["inputs"] = inputs.get(check["name"], [])
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
    records = await _records(config, tls, window, digest) if urls[0].fine() else None
    telegram = await _telegram(config)
    slack = await _slack(config)
    mattermost = await _mattermost(config)
    graded_blind = [check for check in checks if check["graded"] and not check["runs"] and check["watched"]]
    healthy = all(report.fine() for report in urls) and all(r.fine() for r in scopes) and not graded_blind
    healthy = healthy and all(one is None or one.ok for one in (telegram, slack, mattermost))
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
                    "failure": r.failure,
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
            "recorded_counts": records,
            "disabled": list(digest.disabled),
            "never_seen": never_seen,
            "delivery": {
                "telegram": None if telegram is None else _telegram_report(telegram),
                "slack": None if slack is None else _slack_report(slack),
                "mattermost": None if mattermost is None else _mattermost_report(mattermost),
                "webhook": sorted(settings.webhook_endpoints()) if "webhook" in settings.channels else None,
            },
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
        mark = "✓" if check["runs"] else "○" if not check["watched"] else "✗" if check["graded"] else "–"
        role = "graded" if check["graded"] else "diagnostic"
        lines.append(f"  {mark} {check['name']} ({role}): {check['said']}")
        if not check["runs"] and check["watched"] and check["hint"]:
            lines.append(f"      → {check['hint']}")
        lines.extend(f"      {_input_line(one)}" for one in check["inputs"])
    if digest.disabled:
        lines.append(f"  – disabled in the policy: {', '.join(digest.disabled)}")
    if records is not None:
        lines.extend(["", "Recorded counts (docs/recording.md):", *(f"  {line}" for line in records["said"])])
    if never_seen:
        lines.extend(["", f"Never seen in the last 30 days: {'; '.join(never_seen)}"])
    lines.extend(["", *_telegram_lines(telegram)])
    if slack is not None:
        lines.extend(_slack_lines(slack))
    if "slack" in settings.channels and settings.slack_webhook_endpoints():
        names = ", ".join(settings.slack_webhook_endpoints())
        lines.append(f"Delivery (Slack incoming webhooks {names}): not checked — a webhook is tested only by posting;")
        lines.append("  text only: a webhook cannot post the chart (a bot token can: DIGEST_SLACK_TOKEN).")
    if mattermost is not None:
        lines.extend(_mattermost_lines(mattermost))
    if "mattermost" in settings.channels and settings.mattermost_webhook_endpoints():
        names = ", ".join(settings.mattermost_webhook_endpoints())
        lines.append(
            f"Delivery (Mattermost incoming webhooks {names}): not checked — tested only by posting; text only."
        )
    if "webhook" in settings.channels:
        names = ", ".join(settings.webhook_endpoints()) or "none configured (DIGEST_WEBHOOK_URLS)"
        lines.append(f"Delivery (webhook {names}): not checked — a webhook is tested only by posting.")
    lines.extend(
        [
            "",
            "Ready: every graded check can run" + (", and every chat can be posted to." if telegram else ".")
            if healthy
            else "Not ready: fix what is marked ✗ above"
            + (" (a graded check that cannot run makes every digest UNKNOWN)." if graded_blind else "."),
        ]
    )
    out.write("\n".join(lines) + "\n")
    return EXIT_OK if healthy else EXIT_USAGE


async def _records(config: Config, tls: ssl.SSLContext, window: Window, digest: Digest) -> dict[str, Any]:
    """Where the log checks' counts came from, and the recording rules' series found in the store (any version).

    Information, never a failure: without records the checks scan the logs, as they always could.
    """
    settings = config.settings
    plan = recording_plan(config.policy, settings.logs_scope)
    endpoint = settings.records_endpoint() or settings.vm_endpoint()
    source = PrometheusSource(endpoint, tls=tls, scope=settings.metrics_scope)
    found: list[str] = []
    try:
        answer = await source.instant(
            'count by (__name__) (last_over_time({__name__=~"digest:.+:v[0-9a-f]{8}"}[1d]))', window.end, cache=False
        )
        found = sorted(sample.labels.get("__name__", "") for sample in answer)
    except SourceError as exc:
        found = [f"? ({exc})"]
    finally:
        await source.aclose()
    expected = [plan.record(family) for family in plan.families] + [plan.heartbeat]
    counted = {finding.name: finding.counted_from for finding in digest.findings if finding.counted_from is not None}
    said = [
        f"{name}: {origin.source}"
        + (
            f" ({fmt_duration(origin.recorded_seconds)} recorded, {fmt_duration(origin.scanned_seconds)} scanned)"
            if origin.source == "both"
            else ""
        )
        + (f"; {origin.note}" if origin.note else "")
        for name, origin in counted.items()
    ]
    others = [name for name in found if name not in expected]
    if plan.heartbeat not in found:
        if others:
            said.append(
                f"no {plan.heartbeat} in the store, but {', '.join(others)}: rules written for another policy or log "
                "scope — write them again with `digest rules` and deploy them"
            )
        else:
            said.append(
                "no recording rules' series in the store: the log checks scan the logs (on a busy cluster, deploy "
                "`digest rules --for vmalert` or `--for loki`)"
            )
    return {
        "expected": expected,
        "found": found,
        "checks": {
            name: {"source": origin.source, "recorded_seconds": origin.recorded_seconds, "note": origin.note or None}
            for name, origin in counted.items()
        },
        "said": said,
    }


def _check_report(digest: Digest, finding: Finding) -> dict[str, Any]:
    # UNKNOWN for a part unseen (a node, hours) still ran; UNKNOWN for its own reason (no source, no series) did not.
    runs = finding.status is not Status.UNKNOWN or (finding.error or "").startswith(PARTIAL)
    if runs:
        read = ", ".join(finding.observed) if finding.observed else "its sources"
        missing = f"; without {', '.join(finding.unobserved)}" if finding.unobserved else ""
        said = f"runs, reads {read}{missing}"
        lacking = finding.coverage.lacking if finding.coverage is not None else ()
        if lacking:
            nodes = ", ".join(lack.node for lack in lacking)
            said += f"; not watched on {nodes} (no {lacking[0].lacks} in the last {lacking[0].days} days)"
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
        "watched": True,
    }


def _unwatched_report(policy: Policy, one: Unwatched) -> dict[str, Any]:
    """A check this cluster gives nothing to watch, as the doctor lists it."""
    return {
        "name": one.name,
        "graded": policy.graded(one.name),
        "runs": False,
        "said": f"not watched: no {' or '.join(one.sources)} in the last {one.days} days; "
        f"{one.name}.enabled: false in the policy drops this line",
        "hint": "",
        "observed": [],
        "unobserved": list(one.sources),
        "watched": False,
    }


# What each check reads, looked for in the backends --------------------------------------------------------------

_SHOWN_JOBS = 3  # jobs named per family; more are counted


async def _inputs(
    config: Config, window: Window, names: list[str], metrics_fine: bool, logs_fine: bool
) -> dict[str, list[dict[str, Any]]]:
    """Per check (of ``names``), its inputs with what the backends hold of each over ``window``.

    One query per metric family, whichever checks read it; one `LineCount` per distinct scope of lines, with a
    column per field the checks reading those lines use. A backend whose URL is wrong (said above) is not asked.
    """
    policy = config.policy
    entries = [registry.BY_NAME[name] for name in names if name in registry.BY_NAME]
    read = {
        entry.name: [one for one in entry.inputs if _policy_value(policy, one.policy_key) is not False]
        for entry in entries
    }
    families = sorted({one.name for inputs in read.values() for one in inputs if one.kind == "series"})
    scopes: dict[Filter, list[LogField]] = {}
    scope_of: dict[str, Filter] = {}
    for entry in entries:
        if entry.lines is None or not any(one.kind != "series" for one in read[entry.name]):
            continue
        scope = entry.lines(entry.build(getattr(policy, entry.name)))
        scope_of[entry.name] = scope
        fields = scopes.setdefault(scope, [])
        for one in read[entry.name]:
            target = _log_field(policy, one)
            if target is not None and target not in fields:
                fields.append(target)
    async with open_sources(config.settings, policy) as sources:
        series, counts = await asyncio.gather(
            _family_jobs(sources, window, families) if metrics_fine else _nothing(),
            _field_counts(sources, window, scopes) if logs_fine else _nothing(),
        )
    defaults = DEFAULT_LABELS if config.settings.log_backend is LogBackend.LOKI else DEFAULT_FIELDS
    fields_named: dict[str, str] = {
        role: name for role, name in (*defaults.items(), *policy.logs.role_fields().items())
    }
    reports: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        reports[entry.name] = _reports(
            entry.name, read[entry.name], policy, series, counts.get(scope_of.get(entry.name, EVERY_LINE)), fields_named
        )
    return reports


async def _nothing() -> dict[Any, Any]:
    return {}


async def _family_jobs(sources: Sources, window: Window, families: list[str]) -> dict[str, dict[str, float] | str]:
    """Per family, the series of the window by ``job`` ("" for none), or the backend's error; asked together."""

    async def one(family: str) -> dict[str, float] | str:
        query = f"count by (job) (last_over_time({family}[{window.promql_range()}]))"
        try:
            rows = await sources.metrics.instant(query, window.end)
        except SourceError as exc:
            return str(exc)
        return {row.labels.get("job", ""): row.value for row in rows}

    answers = await asyncio.gather(*(one(family) for family in families))
    return dict(zip(families, answers, strict=True))


async def _field_counts(
    sources: Sources, window: Window, scopes: dict[Filter, list[LogField]]
) -> dict[Filter, dict[str, float] | str]:
    """Per scope, its lines (``lines``) and how many of them carry each field (by label), or the backend's error."""

    async def one(scope: Filter, fields: list[LogField]) -> dict[str, float] | str:
        columns = (("lines", EVERY_LINE), *((f"f{index}", Not(Empty(target))) for index, target in enumerate(fields)))
        try:
            rows = await sources.logs.count(LineCount(window, scope=scope, columns=columns))
        except SourceError as exc:
            return str(exc)
        totals = {name: sum(row.counts.get(name, 0.0) for row in rows) for name, _ in columns}
        return {"lines": totals["lines"], **{_field_key(target): totals[f"f{i}"] for i, target in enumerate(fields)}}

    answers = await asyncio.gather(*(one(scope, fields) for scope, fields in scopes.items()))
    return dict(zip(scopes, answers, strict=True))


def _field_key(target: LogField) -> str:
    return f"json:{target.key}" if isinstance(target, Json) else target


def _log_field(policy: Policy, one: Input) -> LogField | None:
    """The field a log input reads: its role, or the JSON key the policy names (its default when it names none)."""
    if one.kind == "log_field":
        return next((role for role in ROLES if role == one.name), None)
    if one.kind == "json_key":
        key = _policy_value(policy, one.policy_key)
        return Json(key if isinstance(key, str) and key else one.name)
    return None


def _policy_value(policy: Policy, key: str | None) -> object:
    """The value at a dotted policy key (``oom_kills.ksm_job``, ``logs.fields.pod``); None when it has none."""
    if not key:
        return None
    value: object = policy
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
        if value is None:
            return None
    return value


def _job_regex(policy: Policy, one: Input) -> str | None:
    value = _policy_value(policy, one.policy_key) if one.by_job else None
    return value.replace('"', "") if isinstance(value, str) else None


def _matches(regex: str, job: str) -> bool:
    try:
        return re.fullmatch(regex, job) is not None
    except re.error:  # RE2 syntax Python does not read: the backend judges it, not the doctor
        return True


def _jobs(jobs: list[str]) -> str:
    named = [job or "(none)" for job in sorted(jobs)]
    more = f" and {len(named) - _SHOWN_JOBS} more" if len(named) > _SHOWN_JOBS else ""
    return f"job{'s' if len(named) > 1 else ''} {', '.join(named[:_SHOWN_JOBS])}{more}"


def _reports(
    check: str,
    inputs: list[Input],
    policy: Policy,
    series: dict[str, dict[str, float] | str],
    counts: dict[str, float] | str | None,
    fields_named: dict[str, str],
) -> list[dict[str, Any]]:
    reports = [_report(one, policy, series, counts, fields_named) for one in inputs]
    found = {report["name"] for report in reports if report["found"]}
    kept: list[dict[str, Any]] = []
    for one, report in zip(inputs, reports, strict=True):
        if one.instead_of and one.instead_of in found:
            continue  # a stand-in for a family that is there: not read
        stand_in = next((o.name for o in inputs if o.instead_of == one.name and o.name in found), None)
        if report["found"] is False and stand_in:
            report.update(required=False, fix=f"{stand_in} read instead", policy_key=None)
        kept.append(report)
    return kept


def _report(
    one: Input,
    policy: Policy,
    series: dict[str, dict[str, float] | str],
    counts: dict[str, float] | str | None,
    fields_named: dict[str, str],
) -> dict[str, Any]:
    report: dict[str, Any] = {
        "kind": one.kind,
        "name": one.name,
        "what": one.what,
        "required": one.required,
        "found": None,
        "policy_key": one.policy_key,
        "fix": one.fix,
        "error": None,
    }
    if one.kind == "series":
        regex = _job_regex(policy, one)
        if regex is not None:
            report["job"] = regex
        if _policy_value(policy, one.policy_key) is True:
            report["switch"] = True
        answer = series.get(one.name)
        if answer is None:
            return report  # not asked: the metrics URL is wrong
        if isinstance(answer, str):
            report["error"] = answer
            return report
        jobs = {job: count for job, count in answer.items() if regex is None or _matches(regex, job)}
        others = sorted(job for job in answer if job not in jobs)
        report.update(found=bool(jobs), series=sum(jobs.values()), jobs=sorted(jobs), other_jobs=others)
        return report
    if counts is None:
        return report
    if isinstance(counts, str):
        report["error"] = counts
        return report
    lines = counts.get("lines", 0.0)
    if one.kind == "lines":
        report.update(found=lines > 0, lines=lines, scope=_scope_words(_policy_value(policy, one.policy_key)))
        return report
    target = _log_field(policy, one)
    if target is None or not lines:
        return report  # no line to count it in: the lines' own input says so
    if isinstance(target, Json):
        report["field"] = target.key
    else:
        report["field"] = fields_named.get(target, target)
    carried = counts.get(_field_key(target), 0.0)
    report.update(found=carried > 0, lines=carried, of_lines=lines)
    return report


def _scope_words(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{key}={item}" for key, item in value.items())
    return value if isinstance(value, str) else ""


def _input_line(report: dict[str, Any]) -> str:
    """One input's line under its check: found with how much and where, or not found with what to change."""
    name = report["name"]
    if report["kind"] == "series" and name == "up" and "job" in report:
        name = f'up{{job=~"{report["job"]}"}}'
    elif report.get("field") and report["field"] != name:
        name = f"{name} ({report['field']})"
    if report["error"]:
        return f"? {name}: not asked ({report['error']})"
    if report["found"] is None:
        return f"? {name}: not asked"
    if report["found"]:
        if report["kind"] == "series":
            return f"found {name}: {_count(report['series'])} series ({_jobs(report['jobs'])})"
        if report["kind"] == "lines":
            return f"found {name}: {_count(report['lines'])} lines"
        return f"found {name}: in {_count(report['lines'])} of {_count(report['of_lines'])} lines"
    mark = "✗" if report["required"] else "–"
    fix = report["fix"]
    why = ""
    if report["kind"] == "series":
        if "job" in report and report["other_jobs"]:
            why = f": {_jobs(report['other_jobs'])} here"
            fix = report["policy_key"]
        elif report["policy_key"] and "job" not in report:
            # A switch (use_istio_metrics): turned off, the check stops looking for it.
            key = f"{report['policy_key']}: false" if report.get("switch") else report["policy_key"]
            fix = f"{fix}, or {key}" if fix else key
    elif report["kind"] == "lines":
        why = ": no line in the 24 h"
        scope = f" ({report['scope']})" if report["scope"] else ""
        fix = f"{report['policy_key']}{scope}"
    else:
        why = f": in none of {_count(report['of_lines'])} lines"
        fix = report["policy_key"]
    what = "" if why.endswith(" here") else f" ({report['what']})"  # a job's name says enough
    return f"{mark} not found {name}{why}{what}" + (f" → {fix}" if fix else "")


async def _telegram(config: Config) -> TelegramCheck | None:
    """The bot's token and chats, asked without posting; None when no token is set (digests are printed only)."""
    settings = config.settings
    token = settings.telegram_token.get_secret_value() if settings.telegram_token is not None else ""
    if not token:
        return None
    if not settings.telegram_chat_ids:
        return TelegramCheck(bot=None, problem="DIGEST_TELEGRAM_CHAT_IDS is not set: no chat to post to")
    return await check_telegram(token, settings.telegram_api_url, settings.telegram_chat_ids, chat_topics(settings))


async def _slack(config: Config) -> SlackCheck | None:
    """The Slack token and channels, asked without posting; None when Slack is not a channel or uses webhooks."""
    settings = config.settings
    token = settings.slack_token.get_secret_value() if settings.slack_token is not None else ""
    if "slack" not in settings.channels or not token:
        return None
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=5.0)) as client:
        api = SlackApi(client, token, settings.slack_api_url, retry=SLACK_DOCTOR_RETRY)
        return await check_slack(api, settings.slack_channel_ids)


def _slack_report(slack: SlackCheck) -> dict[str, Any]:
    return {
        "who": slack.who,
        "problem": slack.problem,
        "channels": [{"channel": one.channel, "ok": one.ok, "said": one.said} for one in slack.channels],
        "ok": slack.ok,
    }


def _slack_lines(slack: SlackCheck) -> list[str]:
    lines = ["Delivery (Slack, asked without posting):"]
    if slack.problem is not None:
        return [*lines, f"  ✗ {slack.problem}"]
    lines.append(f"  ✓ {slack.who}: the token is accepted")
    lines.extend(f"  {'✓' if one.ok else '✗'} {one.channel}: {one.said}" for one in slack.channels)
    return lines


async def _mattermost(config: Config) -> MattermostCheck | None:
    """The Mattermost bot's token and channels, asked without posting; None unless posting with a token."""
    settings = config.settings
    token = settings.mattermost_token.get_secret_value() if settings.mattermost_token is not None else ""
    if "mattermost" not in settings.channels or not token or settings.mattermost_url is None:
        return None
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=5.0)) as client:
        return await check_mattermost(client, settings.mattermost_url, token, settings.mattermost_channel_ids)


def _mattermost_report(found: MattermostCheck) -> dict[str, Any]:
    return {
        "who": found.who,
        "problem": found.problem,
        "channels": [{"channel": one.channel, "ok": one.ok, "said": one.said} for one in found.channels],
        "ok": found.ok,
    }


def _mattermost_lines(found: MattermostCheck) -> list[str]:
    lines = ["Delivery (Mattermost, asked without posting):"]
    if found.problem is not None:
        return [*lines, f"  ✗ {found.problem}"]
    lines.append(f"  ✓ {found.who}: the token is accepted")
    lines.extend(f"  {'✓' if one.ok else '✗'} channel {one.channel}: {one.said}" for one in found.channels)
    return lines


def _telegram_report(telegram: TelegramCheck) -> dict[str, Any]:
    return {
        "bot": telegram.bot,
        "problem": telegram.problem,
        "chats": [{"chat": chat.chat, "ok": chat.ok, "said": chat.said} for chat in telegram.chats],
        "ok": telegram.ok,
    }


def _telegram_lines(telegram: TelegramCheck | None) -> list[str]:
    if telegram is None:
        return ["Delivery: no Telegram token set (DIGEST_TELEGRAM_TOKEN_FILE): digests are printed, not posted."]
    lines = ["Delivery (Telegram, asked without posting):"]
    if telegram.problem is not None:
        return [*lines, f"  ✗ {telegram.problem}"]
    lines.append(f"  ✓ {telegram.bot}: the token is accepted")
    lines.extend(f"  {'✓' if chat.ok else '✗'} chat {chat.chat}: {chat.said}" for chat in telegram.chats)
    return lines

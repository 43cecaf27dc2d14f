"""`digest doctor`: what answers at each URL, the usual mistakes with their fix, and what each check will find.

The first thing to run after pointing the digest at a cluster. For the metrics and the log backend: what kind of
server answers at the configured URL (VictoriaMetrics or Prometheus, VictoriaLogs, Loki, something else or nothing),
and the usual mistakes named with their fix (an API path copied into the base URL: ``/api/v1``, ``/loki/api/v1``,
``/select/logsql``). Then the digest of the last 24 hours, read check by check: which checks can run and what they
read, which cannot and why, with the hint that names the policy key or setting to change, and the sources never seen.

Exit 0 when both URLs are right and every graded check could run; 2 otherwise (someone must change a setting or the
policy first), like every other configuration problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TextIO

from checks.contract import Finding, Status
from checks.coverage import PARTIAL
from digest import __version__
from digest.app.engine import Config, make_digest
from digest.app.exit_codes import EXIT_OK, EXIT_USAGE
from digest.backends.http import Endpoint, HttpSource, tls_context, url_fix
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
    try:
        answers = await source.what_answers()
    finally:
        await source.aclose()
    return UrlReport(
        endpoint.name, endpoint.setting, endpoint.display_url, answers, url_fix(endpoint.name, endpoint.url)
    )


async def doctor(config: Config, now: datetime, out: TextIO, fmt: str = "text") -> int:
    """Check the URLs and what every check finds over the 24 h before ``now``; write the report to ``out``."""
    settings = config.settings
    metrics_endpoint, logs_endpoint = settings.vm_endpoint(), settings.logs_endpoint()
    tls = tls_context([metrics_endpoint.url, logs_endpoint.url])
    # The probes are the same requests for every kind of URL: the plain HTTP source asks them.
    urls = [await _probe(HttpSource(endpoint, tls=tls), endpoint) for endpoint in (metrics_endpoint, logs_endpoint)]
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
    healthy = all(report.fine() for report in urls) and not graded_blind
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
            "checks": checks,
            "disabled": list(digest.disabled),
            "never_seen": never_seen,
            "ok": healthy,
        }
        out.write(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
        return EXIT_OK if healthy else EXIT_USAGE
    lines = [f"digest doctor · {settings.cluster} · digest {__version__}", "", "Backends:"]
    lines.extend(f"  {report.line()}" for report in urls)
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
            else "Not ready: fix what is marked ✗ above (a graded check that cannot run makes every digest UNKNOWN).",
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

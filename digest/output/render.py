r"""Rendering a `Digest` for people (plain text, Telegram HTML) and for programs (JSON).

Text and HTML come from Jinja2 templates in ``templates/``; the HTML environment autoescapes, so pod names and log
text such as ``<script>`` or ``&`` arrive as ``&lt;script&gt;`` and ``&amp;``, and the templates use only tags that
Telegram's HTML parse mode accepts (``b``, ``i``, ``code``). The headline comes first because the message is read
on a phone: status, score, cluster, window — then what could not be checked, then one line per deduction with its
evidence, then the healthy checks, then the hints.

Hostile characters: both environments pass every ``{{ … }}`` value through `digest.output.safe_text.finalize` before any
HTML escaping, so a NUL, a newline or a bidi override in a label or a log field is shown as a visible escape
(``\u202e``) in the text and the HTML, whichever template line prints it; the JSON keeps exact values with those
characters written as ``\uXXXX`` escapes (`digest.output.safe_text.escape_json`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, date, datetime
from importlib import resources
from typing import TYPE_CHECKING, Any

from digest import SCHEMA_VERSION, __version__
from digest.checks.contract import (
    CountedFrom,
    Coverage,
    Finding,
    NodeLacks,
    Status,
    Window,
    fmt_int,
    fmt_percent,
    rfc3339,
)
from digest.checks.coverage import PARTIAL, phrases
from digest.checks.error_lines import SAID_KINDS
from digest.output.brief import briefs, causes, look_at_line, next_step, zone_name
from digest.output.links import Link, LinkMaker
from digest.output.safe_text import escape_json, finalize
from digest.pipeline.acks import AckOutcome, subject_of
from digest.pipeline.score import Digest, DigestStatus
from digest.pipeline.week import DayResult, Week, format_value, series_line

if TYPE_CHECKING:
    import jinja2

FORMATS = ("text", "html", "json")
_MARKS = {Status.OK: "✓", Status.WARN: "▲", Status.CRIT: "✖", Status.UNKNOWN: "?"}


def _environment(autoescape: bool) -> jinja2.Environment:
    # Imported on first use: JSON output and start-up do not need Jinja2.
    import jinja2

    folder = resources.files("digest.templates")
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        autoescape=autoescape,  # noqa: S701  # on for HTML; the plain-text output is not markup
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        undefined=jinja2.StrictUndefined,
        # Every printed value, label- or log-derived or not: no template line can forget it (before HTML escaping).
        finalize=finalize,
    )


class Renderer:
    """Holds the template of each format, compiled on first use; build once, render many digests."""

    def __init__(self, links: LinkMaker | None = None) -> None:
        self._templates: dict[str, jinja2.Template] = {}
        # The UIs the HTML digest links to (digest.output.links); none configured, no link.
        self._links = links if links is not None and links.enabled else None

    def render(self, digest: Digest, fmt: str) -> str:
        """The digest in ``fmt`` (text, html or json)."""
        if fmt == "json":
            # Readable UTF-8, except the characters that could deceive a reader or a terminal: \uXXXX escapes.
            return escape_json(json.dumps(to_json(digest), ensure_ascii=False, indent=2))
        links = self._links if fmt == "html" else None
        text = self._template(fmt).render(**_context(digest, links)).strip() + "\n"
        # A section's quote closes on its last line: a line of its own would show as an empty line inside it.
        return text.replace("\n</blockquote>", "</blockquote>") if fmt == "html" else text

    def render_week(self, week: Week, fmt: str) -> str:
        """The week at a glance in ``fmt`` (text, html or json)."""
        if fmt == "json":
            return escape_json(json.dumps(week_json(week), ensure_ascii=False, indent=2))
        key = f"week-{fmt}"
        if key not in self._templates:
            html = fmt == "html"
            self._templates[key] = _environment(autoescape=html).get_template("week.html.j2" if html else "week.txt.j2")
        return self._templates[key].render(**_week_context(week)).strip() + "\n"

    def preload(self, *formats: str) -> Renderer:
        """Compile the templates of ``formats`` now, so that a long-running service fails at start, not at noon."""
        for fmt in formats:
            self._template(fmt)
        return self

    def _template(self, fmt: str) -> jinja2.Template:
        """The compiled template of ``fmt``: HTML autoescaped, text not."""
        if fmt not in self._templates:
            html = fmt == "html"
            name = "digest.html.j2" if html else "digest.txt.j2"
            self._templates[fmt] = _environment(autoescape=html).get_template(name)
        return self._templates[fmt]


# More unseen parts than this and the headline counts the rest: it must stay readable on a phone.
_HEADLINE_PARTS = 3


def headline(digest: Digest) -> str:
    """``CRITICAL 8/10 · homelab · 2026-07-20``, then what was not seen; UNKNOWN carries no score."""
    if digest.status is DigestStatus.UNKNOWN:
        line = f"UNKNOWN · {digest.cluster} · {digest.window.label}"
    else:
        line = f"{digest.status.value} {digest.score}/{digest.max_score} · {digest.cluster} · {digest.window.label}"
    if digest.acked_count:
        line += f" · {digest.acked_count} acked"
    parts = not_seen(digest)
    if parts:
        shown = parts[:_HEADLINE_PARTS]
        more = len(parts) - len(shown)
        line += " · not seen: " + "; ".join(shown) + (f"; {more} more" if more else "")
    # Blind for its own reason, not for a part of the window or fleet already named (a partial note).
    blind = [finding.name for finding in digest.unknown if not (finding.error or "").startswith(PARTIAL)]
    if blind:
        # A graded check blind for its own reason (its query failed, its records lack a field): what could not be
        # checked is said where the reader stops, not only further down — on a CRITICAL day too.
        line += " · not checked: " + ", ".join(blind)
    for scope in digest.empty_scopes:
        # The setting, not the checks, is what is wrong: named where the reader stops.
        line += f" · {scope} matches nothing"
    if digest.log_clusters:
        # Said where the reader stops: the log checks are not graded because the logs are several clusters'.
        line += f" · logs not scoped to {digest.cluster}: they hold {', '.join(digest.log_clusters)}"
    elif digest.foreign_log_nodes:
        line += f" · logs not scoped to {digest.cluster}: they hold another cluster's"
    if digest.metrics_clusters:
        line += f" · metrics not scoped to {digest.cluster}: they hold {', '.join(digest.metrics_clusters)}"
    if digest.status in (DigestStatus.OK, DigestStatus.UNKNOWN):
        # No point lost, but a diagnostic found something: a reader who stops at the headline must not read "all
        # fine" over a crash loop. (WARNING and CRITICAL send the reader down already.)
        things = to_look_at(digest)
        if things:
            shown = things[:_HEADLINE_PARTS]
            more = len(things) - len(shown)
            line += f" · {len(things)} to look at: " + "; ".join(shown) + (f"; {more} more" if more else "")
    return line


# What a diagnostic's finding is called in the headline, by check (the check's name otherwise).
_LOOK_AT_NOUNS = {
    "restarts": "restarts",
    "readiness": "not ready",
    "deployments": "unavailable replicas",
    "workloads": "StatefulSet, DaemonSet or Job",
    "memory_pressure": "memory pressure",
    "cpu_throttling": "CPU throttling",
    "empty_endpoints": "no ready endpoint",
    "log_storms": "log storm",
    "alerts": "alert",
}


def to_look_at(digest: Digest) -> list[str]:
    """What the diagnostic checks found, by workload: ``shop/api (crash loop: 242 restarts, not ready)``.

    One entry per thing to look at (a workload, a Service, an alert), the worst diagnosis first, each with what the
    checks said about it; only offenders a check flagged.
    """
    said: dict[str, list[str]] = {}
    kinds: dict[str, str] = {}
    for finding in digest.diagnoses:
        if digest.acked(finding):
            continue  # seen and owned: on its line, not among the things to look at
        by_subject: dict[str, float] = {}
        troubles: dict[str, list[str]] = {}
        for offender in finding.offenders:
            subject = subject_of(offender.labels)
            by_subject[subject] = by_subject.get(subject, 0.0) + offender.value
            if offender.labels.get("trouble"):  # said by the offender itself ("StatefulSet rollout not complete")
                troubles.setdefault(subject, []).append(offender.labels["trouble"])
            kind = SAID_KINDS.get(offender.labels.get("kind", ""))
            if kind:  # a kind its name does not tell: "default/debug-shell (crash loop: 40 restarts, a bare pod)"
                kinds.setdefault(subject, kind)
        for subject, value in by_subject.items():
            for noun in troubles.get(subject) or [_look_at_noun(finding, value)]:
                if noun not in said.setdefault(subject, []):
                    said[subject].append(noun)
    for subject, kind in kinds.items():
        if subject in said and kind not in said[subject]:
            said[subject].append(kind)
    return [f"{subject} ({', '.join(nouns)})" if subject else ", ".join(nouns) for subject, nouns in said.items()]


def _look_at_noun(finding: Finding, value: float) -> str:
    if finding.name == "restarts":
        # A CRIT restarts finding is a crash loop by the check's own threshold; fewer restarts are just restarts.
        restarts = f"{fmt_int(value)} restarts"
        return f"crash loop: {restarts}" if finding.status is Status.CRIT else restarts
    if finding.name == "deployments" and "stuck" in finding.summary:
        return "stuck rollout"
    return _LOOK_AT_NOUNS.get(finding.name, finding.name)


def not_seen(digest: Digest) -> list[str]:
    """The unseen parts of the checks that saw only part of the window or the fleet, in words."""
    # A check whose coverage could not be measured is named where it is not checked, with why; here, the gaps.
    return phrases((gap for finding in digest.partial for gap in _coverage(finding).missing), digest.window)


def unseen_spans(digest: Digest) -> list[tuple[float, float, str]]:
    """The spans (unix seconds) a partial check did not see, with the source that missed them, for the chart."""
    spans = {
        (gap.start.timestamp(), gap.end.timestamp(), gap.source)
        for finding in digest.partial
        for gap in _coverage(finding).missing
    }
    return sorted(spans)


def _coverage(finding: Finding) -> Coverage:
    return finding.coverage if finding.coverage is not None else Coverage(fraction=1.0)


def excused(digest: Digest) -> list[tuple[str, str]]:
    """Nodes whose silence was expected (drained, not ready, declared absent), once each."""
    return sorted({pair for finding in digest.findings for pair in _coverage(finding).excused})


def _said_once(rows: list[tuple[str, str, str]], first: dict[str, str]) -> list[tuple[str, str, str]]:
    """``rows`` with a reason already given for an earlier check replaced by "as <that check>".

    A wrong URL blinds a dozen checks with one error: it is read once, not twelve times on a phone.
    """
    out: list[tuple[str, str, str]] = []
    for name, verb, reason in rows:
        if reason in first:
            out.append((name, verb, f"as {first[reason]}"))
        else:
            first[reason] = name
            out.append((name, verb, reason))
    return out


def _by_reason(rows: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """``rows`` with one reason joined into one row: "error_lines, oom_kills not checked · VictoriaMetrics down"."""
    names: dict[tuple[str, str], list[str]] = {}
    for name, verb, reason in rows:
        # What a partly seen check found, and for how long, differs check by check: one line, the rest below (the
        # headline names what was not seen).
        names.setdefault((verb, "what each saw is below" if verb == "partly seen" else reason), []).append(name)
    return [(", ".join(together), verb, reason) for (verb, reason), together in names.items()]


def _context(digest: Digest, links: LinkMaker | None = None) -> dict[str, Any]:
    deductions = digest.deductions
    first: dict[str, str] = {}
    blind = [_blind(finding, "not checked") for finding in digest.unknown]
    not_checked = _said_once(blind, first)
    unexplained = _said_once([_blind(finding, "could not be checked") for finding in digest.unexplained], first)
    context: dict[str, Any] = {
        "headline": headline(digest),
        "digest": digest,
        "not_checked": not_checked,
        "not_checked_together": _by_reason(blind),
        "deductions": [_line(finding, digest, links) for finding in deductions],
        "caps": [
            {"checks": " + ".join(cap.checks), "max": cap.max_penalty, "raw": cap.raw_penalty} for cap in digest.caps
        ],
        "healthy": [_line(finding, digest, links) for finding in digest.healthy],
        "unknown": [_line(finding, digest) for finding in digest.unknown],
        "disabled": list(digest.disabled),
        "unwatched": unwatched_line(digest),
        "hints": [
            (finding.name, finding.hint)
            for finding in (*deductions, *digest.unknown)
            if finding.hint and not digest.acked(finding)
        ],
        "explanations": [explanation.text for explanation in digest.explanations],
        "trends": list(digest.trends),
        "diagnoses": [_line(finding, digest, links) for finding in digest.diagnoses],
        "unexplained": unexplained,
        "quiet": [finding.name for finding in digest.quiet],
        "score_note": _score_note(digest),
        "excused": excused(digest),
        "said": _said(digest),
        "said_notes": [finding.signatures_note for finding in digest.findings if finding.signatures_note]
        + list(digest.novelty.notes if digest.novelty else ()),
        "gone": _gone(digest),
        "compared": _compared(digest),
        # The first screen (digest.output.brief): in a person's words, every figure kept in the sections below.
        "briefs": briefs(digest, {name: ack_line(outcome, digest.window) for name, outcome in digest.acks.items()}),
        "causes": causes(digest),
        # On an OK or UNKNOWN day the headline names them already.
        "look_at": look_at_line(to_look_at(digest))
        if digest.status in (DigestStatus.WARNING, DigestStatus.CRITICAL)
        else "",
        "next_step": next_step(digest),
        "zone": zone_name(digest.window),
    }
    context["points"] = bool(
        context["not_checked"]
        or context["excused"]
        or deductions
        or context["healthy"]
        or context["trends"]
        or context["disabled"]
    )
    context["folded"] = bool(
        context["points"]
        or context["explanations"]
        or context["said"]
        or context["said_notes"]
        or context["gone"]
        or context["diagnoses"]
        or context["unexplained"]
        or context["hints"]
    )
    return context


def unwatched_line(digest: Digest) -> str:
    """The one quiet line on what this cluster gives nothing to watch, with the key that drops it; "" when nothing.

    ``Not watched here: envoy_flags (no access logs or Istio metrics in 30 days), alerts (no rule evaluator in 30
    days) · envoy_flags.enabled: false in the policy drops it``
    """
    named = [f"{one.name} (no {' or '.join(one.sources)} in {one.days} days)" for one in digest.unwatched]
    # A node that lacks what the fleet has (no conntrack table there): not watched on that node, no key to turn.
    on_nodes: dict[tuple[str, str, int], list[str]] = {}
    for name, lack in lacking(digest):
        on_nodes.setdefault((name, lack.lacks, lack.days), []).append(lack.node)
    for (name, lacks, days), nodes in on_nodes.items():
        which = f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {', '.join(nodes)}"
        named.append(f"{name} on {which} (no {lacks} in {days} days)")
    if not named:
        return ""
    keys = ", ".join(f"{one.name}.enabled: false" for one in digest.unwatched)
    drops = f" · {keys} in the policy drops it" if keys else ""
    return f"Not watched here: {', '.join(named)}{drops}"


def lacking(digest: Digest) -> list[tuple[str, NodeLacks]]:
    """The nodes that lack an input the rest of the fleet has, with the check that reads it (once per check)."""
    return sorted(
        {(finding.name, lack) for finding in digest.findings for lack in _coverage(finding).lacking},
        key=lambda pair: (pair[0], pair[1].node, pair[1].lacks),
    )


def _compared(digest: Digest) -> str:
    """What "new today" was compared with, said once under the signatures when one of them is marked."""
    novelty = digest.novelty
    if novelty is None or not novelty.new:
        return ""
    days = "the previous day" if novelty.compared == 1 else f"the {novelty.compared} previous days"
    return f"new today: not written on {days} whose logs were seen whole"


def _gone(digest: Digest) -> list[dict[str, str]]:
    """Yesterday's dominant signatures that today's logs no longer hold."""
    if digest.novelty is None:
        return []
    return [
        {
            "workload": f"{one.labels.get('namespace', '')}/{one.labels.get('workload', '')}",
            "numbers": f"{fmt_int(one.lines)} ({fmt_percent(one.share)}) yesterday",
            "text": one.text,
        }
        for one in digest.novelty.gone
    ]


def most_said(digest: Digest) -> str:
    """The top signature of the worst workload, in one line for the chart ("" when no signature was shown).

    "Most said: feeds/feed-aggregator · 92 % of its errors · new today · ERROR feeds.ws relay: connect …".
    """
    for finding in digest.findings:
        for workload in finding.signatures:
            if not workload.signatures:
                continue
            top = workload.signatures[0]
            name = f"{workload.labels.get('namespace', '')}/{workload.labels.get('workload', '')}"
            new = " · new today" if new_today(digest, top.key) else ""
            return f"Most said: {name} · {fmt_percent(top.share)} of its errors{new} · {top.text}"
    return ""


def new_today(digest: Digest, key: str) -> bool | None:
    """Whether a shown signature is new today: True, False (written on an earlier day), None (could not tell)."""
    novelty = digest.novelty
    if novelty is None or not key:
        return None
    if key in novelty.new:
        return True
    return False if key in novelty.seen else None


def _about(estimate: float) -> str:
    """An estimate to three significant digits (4,170,000), so that it does not pass for a count."""
    if estimate < 1000:
        return fmt_int(estimate)
    digits = len(str(int(estimate))) - 3
    return fmt_int(round(estimate, -digits))


def _said(digest: Digest) -> list[dict[str, Any]]:
    """What the errors said, per workload: a heading and one line per signature (with its example if it differs)."""
    window = digest.window
    multi_day = window.seconds > 86_400

    def when(seconds: float) -> str:
        moment = datetime.fromtimestamp(seconds, tz=window.zone)
        return f"{moment:%m-%d %H:%M}" if multi_day else f"{moment:%H:%M}"

    said = []
    for finding in digest.findings:
        for workload in finding.signatures:
            shown = len(workload.signatures)
            every_one = shown == workload.distinct and not workload.capped
            if every_one:
                count = f"{shown} error signature{'' if shown == 1 else 's'}"
            else:
                count = f"{shown} of its {fmt_int(workload.distinct)}{'+' if workload.capped else ''} error signatures"
            sampled = workload.sampled_every > 1
            if sampled:
                count += ", sampled: the counts are estimates"
            said.append(
                {
                    "workload": f"{workload.labels.get('namespace', '')}/{workload.labels.get('workload', '')}",
                    "count": count,
                    "lines": [
                        {
                            "numbers": f"{'≈' + _about(one.lines) if sampled else fmt_int(one.lines)} "
                            f"({fmt_percent(one.share)}) {'≈' if sampled else ''}{when(one.first)}–{when(one.last)}",
                            "new": new_today(digest, one.key) is True,
                            "text": one.text,
                            "example": one.example if one.example is not None and one.example != one.text else None,
                        }
                        for one in workload.signatures
                    ],
                }
            )
    return said


def novelty_json(digest: Digest) -> dict[str, Any] | None:
    """New today and gone since yesterday, for machines: null when there were no signatures to judge."""
    novelty = digest.novelty
    if novelty is None:
        return None
    return {
        "compared_days": novelty.compared,
        "new_today": sorted(novelty.new),
        "gone_since_yesterday": [
            {"labels": dict(one.labels), "text": one.text, "lines": one.lines, "share": one.share}
            for one in novelty.gone
        ],
        "notes": list(novelty.notes),
    }


def _blind(finding: Finding, verb: str) -> tuple[str, str, str]:
    """(name, verb, reason) of an UNKNOWN finding: "partly seen" with what was found, when coverage made it so."""
    partial = finding.coverage is not None and finding.coverage.partial
    never = finding.coverage.never_seen if finding.coverage is not None else ()
    if never and not partial:
        # A source this cluster never had (no data today nor in the days before): said once, with the key that
        # leaves the check out, rather than as a blind spot every day.
        return (
            finding.name,
            "not checked",
            f"never seen: {', '.join(never)} (no data today nor in the days before); "
            f"{finding.name}.enabled: false in the policy leaves it out",
        )
    if partial and finding.error and finding.error.startswith(PARTIAL):
        return finding.name, "partly seen", f"{finding.summary} — {finding.error.removeprefix(PARTIAL)}"
    return finding.name, verb, finding.error or finding.summary


def _graded_seen(digest: Digest) -> tuple[int, int]:
    """How many graded checks could run, of how many."""
    graded = [finding for finding in digest.findings if digest.is_graded(finding)]
    return len(graded) - sum(1 for finding in graded if finding.status is Status.UNKNOWN), len(graded)


def _score_note(digest: Digest) -> str:
    if digest.status is not DigestStatus.UNKNOWN:
        return ""
    seen, graded = _graded_seen(digest)
    # Graded checks that ran but saw only part (a check blind for its own reason is counted as not run). Before
    # "nothing could be checked": checks that each saw part of the day (today, asked before it is over) did run.
    partial = [
        finding
        for finding in digest.partial
        if digest.is_graded(finding)
        and (finding.status is not Status.UNKNOWN or (finding.error or "").startswith(PARTIAL))
    ]
    if partial:
        whole = sum(
            1
            for finding in digest.findings
            if digest.is_graded(finding) and finding.status is not Status.UNKNOWN and finding not in partial
        )
        so_far = " so far," if digest.window.asked_at is not None else ""
        return (
            f"score {digest.score}/{digest.max_score}{so_far} on what could be seen: {whole} of {graded} graded "
            "checks saw the whole window and every node"
        )
    if seen == 0:
        return "nothing that grades the day could be checked"
    if seen == graded:
        return f"score {digest.score}/{digest.max_score} on what could be seen"
    return f"score {digest.score}/{digest.max_score} on the {seen} of {graded} graded checks that could run"


# Offenders linked under a line: the top ones, as many as a phone's line holds.
_LINKED_OFFENDERS = 3


def _line(finding: Finding, digest: Digest, links: LinkMaker | None = None) -> dict[str, Any]:
    return {
        "links": _links(finding, digest, links),
        "name": finding.name,
        "mark": _MARKS[finding.status],
        "status": finding.status.value,
        "penalty": finding.penalty,
        "applied": digest.applied.get(finding.name, 0),
        "summary": finding.summary,
        "evidence": list(finding.evidence),
        "error": finding.error,
        "ack": ack_line(digest.acks.get(finding.name), digest.window),
        "acked": digest.acked(finding) is not None,
    }


def _links(finding: Finding, digest: Digest, links: LinkMaker | None) -> list[Link]:
    """The check's own link, then its top offenders', each named by what it is about."""
    if links is None:
        return []
    found = links.links(finding.look, digest.window, "graph" if finding.look and finding.look.metrics else "lines")
    for offender in finding.offenders[:_LINKED_OFFENDERS]:
        found.extend(links.links(offender.look, digest.window, _link_label(offender.labels)))
    return found


def _link_label(labels: Mapping[str, str]) -> str:
    """An offender's link text: what it is about (``shop/api``, a node, an alert), or its flag and upstream."""
    if labels.get("container") and labels.get("pod"):
        return f"{subject_of(labels)}/{labels['container']}"
    subject = subject_of(labels)
    if labels.get("flag"):
        return f"{labels['flag']} {labels.get('upstream', '')}".strip()
    return subject or "offender"


def ack_json(outcome: AckOutcome | None) -> dict[str, Any] | None:
    """A finding's ack for machines: who, why, until when, and whether it held (or why it was lifted)."""
    if outcome is None:
        return None
    ack = outcome.ack
    return {
        "target": ack.target,
        "by": ack.by,
        "reason": ack.reason,
        "since": rfc3339(ack.since) if ack.origin != "policy" else None,
        "until": rfc3339(ack.until) if ack.until is not None else None,
        "at_most": ack.at_most,
        "origin": ack.origin,
        "held": outcome.held,
        "lifted_because": outcome.lifted_because or None,
    }


def ack_line(outcome: AckOutcome | None, window: Window) -> str:
    """``acked by @anna until 12-13: known flood`` (held) or ``ack lifted: worse than acked (…)``; "" without."""
    if outcome is None:
        return ""
    ack = outcome.ack
    if not outcome.held:
        return f"ack by {ack.by} lifted: {outcome.lifted_because}"
    until = ""
    if ack.until is not None:
        until = f" until {ack.until.astimezone(window.zone):%m-%d}"
        if ack.until.astimezone(window.zone).timetz().replace(tzinfo=None) != datetime.min.time():
            until = f" until {ack.until.astimezone(window.zone):%m-%d %H:%M}"
    who = "acked in the policy" if ack.origin == "policy" else f"acked by {ack.by}"
    return f"{who}{until}: {ack.reason}"


def coverage_json(coverage: Coverage | None) -> dict[str, Any] | None:
    """A check's coverage in the JSON contract; None when it was not measured (coverage off in the policy)."""
    if coverage is None:
        return None
    return {
        "fraction": coverage.fraction,
        "partial": coverage.partial,
        "missing": [
            {
                "kind": gap.kind.value,
                "name": gap.name,
                "source": gap.source,
                "from": rfc3339(gap.start),
                "to": rfc3339(gap.end),
            }
            for gap in coverage.missing
        ],
        "excused": [{"node": node, "why": why} for node, why in coverage.excused],
        "never_seen": list(coverage.never_seen),
        "lacking": [{"node": lack.node, "lacks": lack.lacks, "days": lack.days} for lack in coverage.lacking],
        "error": coverage.error,
    }


def counted_json(counted: CountedFrom | None) -> dict[str, Any] | None:
    """Where a log check's counts came from; None for a check that counted no log lines."""
    if counted is None:
        return None
    return {
        "source": counted.source,
        "recorded_seconds": counted.recorded_seconds,
        "scanned_seconds": counted.scanned_seconds,
        "note": counted.note or None,
    }


def to_json(digest: Digest) -> dict[str, Any]:
    """The JSON contract: one object per digest."""
    return {
        "schema_version": SCHEMA_VERSION,
        "version": __version__,
        "cluster": digest.cluster,
        "window": {"start": rfc3339(digest.window.start), "end": rfc3339(digest.window.end)},
        "timezone": str(digest.window.zone),
        # No number at all when no graded check could run: a bare 10 would read as a perfect day.
        "score": digest.score if _graded_seen(digest)[0] else None,
        "max_score": digest.max_score,
        "status": digest.status.value,
        "score_note": _score_note(digest),
        "headline": headline(digest),
        "checks": [
            {
                "name": finding.name,
                "graded": digest.is_graded(finding),
                "status": finding.status.value,
                "penalty": finding.penalty,
                "penalty_applied": digest.applied.get(finding.name, 0),
                "value": finding.value,
                "summary": finding.summary,
                "offenders": [
                    {
                        "labels": dict(offender.labels),
                        "value": offender.value,
                        "facts": {
                            key: {"value": quantity.value, "unit": quantity.unit.value}
                            for key, quantity in offender.facts.items()
                        },
                    }
                    for offender in finding.offenders
                ],
                "hint": finding.hint,
                "error": finding.error,
                "evidence": list(finding.evidence),
                "observed": list(finding.observed),
                "unobserved": list(finding.unobserved),
                "coverage": coverage_json(finding.coverage),
                "signatures": [
                    {
                        "labels": dict(workload.labels),
                        "distinct": workload.distinct,
                        "capped": workload.capped,
                        "sampled_every": workload.sampled_every,
                        "top": [
                            {
                                "text": one.text,
                                "lines": one.lines,
                                "share": one.share,
                                "first": rfc3339(datetime.fromtimestamp(one.first, tz=UTC)),
                                "last": rfc3339(datetime.fromtimestamp(one.last, tz=UTC)),
                                "example": one.example,
                                "key": one.key or None,
                                "new_today": new_today(digest, one.key),
                            }
                            for one in workload.signatures
                        ],
                    }
                    for workload in finding.signatures
                ],
                "signatures_note": finding.signatures_note or None,
                "counted_from": counted_json(finding.counted_from),
                "ack": ack_json(digest.acks.get(finding.name)),
            }
            for finding in digest.findings
        ],
        "acked": digest.acked_count,
        "coverage": {
            # null when coverage is off in the policy: nothing was measured, so nothing is vouched for.
            "complete": (not digest.partial) if any(f.coverage is not None for f in digest.findings) else None,
            "partial": [finding.name for finding in digest.partial],
            "not_seen": not_seen(digest),
            "excused": [{"node": node, "why": why} for node, why in excused(digest)],
            # Sources never deployed (no data today nor in the days before): not blind spots, the checks say so.
            "never_seen": sorted({label for f in digest.findings for label in _coverage(f).never_seen}),
            # Nodes whose exporter answered and never had an input the rest of the fleet has: not watched there.
            "lacking": [
                {"check": name, "node": lack.node, "lacks": lack.lacks, "days": lack.days}
                for name, lack in lacking(digest)
            ],
        },
        "not_checked": [finding.name for finding in (*digest.unknown, *digest.unexplained)],
        "explanations": [
            {"rule": e.rule, "cause": e.cause, "text": e.text, "short": e.short, "fix": e.fix}
            for e in digest.explanations
        ],
        "trends": list(digest.trends),
        "novelty": novelty_json(digest),
        "disabled": list(digest.disabled),
        # Nodes heard in logs not scoped to the cluster (the metrics are) that the cluster does not have.
        "foreign_log_nodes": list(digest.foreign_log_nodes),
        # The clusters an unscoped metrics store holds (by the logs' scope label), when it holds several.
        "metrics_clusters": list(digest.metrics_clusters),
        # The values of the metrics' cluster label in logs not scoped to the cluster, when one is another cluster's.
        "log_clusters": list(digest.log_clusters),
        # Cluster selectors that matched nothing in the window ("DIGEST_METRICS_SELECTOR {cluster=\"prd\"}").
        "empty_scopes": list(digest.empty_scopes),
        # Checks this cluster gives nothing to watch: every source a component never seen (not graded, not blind).
        "unwatched": [
            {"name": one.name, "never_seen": list(one.sources), "days": one.days, "silence": f"{one.name}.enabled"}
            for one in digest.unwatched
        ],
        "caps": [
            {"checks": list(cap.checks), "max_penalty": cap.max_penalty, "raw_penalty": cap.raw_penalty}
            for cap in digest.caps
        ],
    }


# The week at a glance ------------------------------------------------------------------------------------------------


def _weekday(day: DayResult | date) -> str:
    moment = day.day if isinstance(day, DayResult) else day
    return f"{moment:%a}"


def _grade(day: DayResult) -> str:
    return f"{day.status.value} {day.score}/{day.max_score}" if day.scored else "UNKNOWN"


def week_headline(week: Week) -> str:
    """``CRITICAL · homelab · week 2026-W33 (08-10 – 08-16) · worst 8/10 on Sun``, then the days not graded."""
    first, last = week.days[0].day, week.days[-1].day
    line = f"{week.status.value} · {week.cluster} · week {week.label} ({first:%m-%d} – {last:%m-%d})"
    worst = week.worst
    if worst is not None:
        line += f" · worst {worst.score}/{worst.max_score} on {_weekday(worst)}"
    blind = [day for day in week.days if not day.scored]
    if blind:
        line += f" · {len(blind)} day{'' if len(blind) == 1 else 's'} not graded"
    return line


def _days_list(days: tuple[date, ...]) -> str:
    return ", ".join(_weekday(day) for day in days)


def _week_context(week: Week) -> dict[str, Any]:
    worst = week.worst
    unseen: dict[tuple[str, tuple[date, ...]], list[str]] = {}
    for name, kind, days in week.unseen:
        unseen.setdefault((kind, days), []).append(name)
    return {
        "headline": week_headline(week),
        "sparkline": week.sparkline,
        "scores": " · ".join(f"{_weekday(day)} {day.score if day.scored else '?'}" for day in week.days),
        "worst": None
        if worst is None
        else {"day": f"{_weekday(worst)} {worst.day:%m-%d}", "grade": _grade(worst), "why": worst.why},
        "series": [
            {
                "name": name,
                "line": series_line(values),
                "days": " · ".join(
                    f"{_weekday(day)} {format_value(key, value)}"
                    for day, value in zip(week.days, values, strict=True)
                    if value is not None
                ),
            }
            for name, key, values in (
                ("Error lines of the worst workload", "error_lines", [day.error_lines for day in week.days]),
                ("Conntrack peak", "conntrack", [day.conntrack for day in week.days]),
            )
        ],
        "blind": _days_list(week.blind_days),
        "unseen": [
            {"kind": kind, "days": _days_list(days), "checks": ", ".join(names)}
            for (kind, days), names in unseen.items()
        ],
        "recurring": [
            {
                "workload": one.workload,
                "text": one.text,
                "days": f"{len(one.days)} days ({_days_list(one.days)})",
                "lines": fmt_int(one.lines),
            }
            for one in week.recurring
        ],
        "stored": week.stored,
    }


def week_json(week: Week) -> dict[str, Any]:
    """The week for machines: each day as its digest graded it, and what the week says about them."""
    worst = week.worst
    return {
        "schema_version": SCHEMA_VERSION,
        "version": __version__,
        "cluster": week.cluster,
        "week": week.label,
        "status": week.status.value,
        "headline": week_headline(week),
        "sparkline": week.sparkline,
        "worst_day": None if worst is None else worst.day.isoformat(),
        "days": [
            {
                "date": day.day.isoformat(),
                "status": day.status.value,
                "score": day.score if day.scored else None,
                "max_score": day.max_score,
                "why": day.why,
                "unseen": [{"check": name, "how": kind} for name, kind in day.unseen],
                "error_lines": day.error_lines,
                "conntrack": day.conntrack,
                "blind": day.blind,
                "signatures": [
                    {"key": one.key, "workload": one.workload, "text": one.text, "lines": one.lines}
                    for one in day.signatures
                ],
            }
            for day in week.days
        ],
        "blind_days": [day.isoformat() for day in week.blind_days],
        "unseen": [
            {"check": name, "how": kind, "days": [day.isoformat() for day in days]} for name, kind, days in week.unseen
        ],
        "recurring": [
            {
                "workload": one.workload,
                "text": one.text,
                "days": [day.isoformat() for day in one.days],
                "lines": one.lines,
            }
            for one in week.recurring
        ],
        "stored_days": week.stored,
    }

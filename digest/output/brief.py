"""The digest's first screen: what a reader sees on a phone at noon before tapping anything.

The headline, one line per check that cost points (the workload, not the pod hash; the number a person would say:
"4.5 M error lines"), the likely cause in one line, what else to look at, and the one thing to do. Everything else
(evidence, what the errors said, the diagnosis, every hint and link) is a tap away in the sections below it
(`templates/digest.html.j2`); the JSON keeps every figure.

Wording only: what each line says was decided by the checks, the score and the explanations; this module picks the
figure a person would say out of what they measured and never judges anything itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from digest.checks.contract import Finding, Offender, Window, fmt_int, fmt_percent
from digest.checks.envoy_flags import FLAG_MEANINGS
from digest.pipeline.acks import subject_of
from digest.pipeline.score import Digest

# A first screen is about a dozen lines on a phone: more offenders than this are counted, not named.
_NAMED = 2
# A query written out in a hint is for the details; the first screen says what to do.
# A query's own brackets need not balance (LogsQL's half-open "_time:[a, b)"): the aside ends at the ")" that a
# sentence goes on after.
_QUERY_ASIDE = re.compile(r"\s*\((?:LogsQL|LogQL|PromQL|MetricsQL): .*?\)(?=\s(?:and|then|to|or)\s|[;,.:](?:\s|$)|$)")


@dataclass(frozen=True)
class Brief:
    """One check's cost on the first screen: the points it took (after caps), its points before them, the line."""

    name: str
    applied: int
    penalty: int
    line: str
    ack: str = ""  # "acked by @anna until 12-13: known" or "ack by @anna lifted: …" (`digest.output.render.ack_line`)
    acked: bool = False  # an ack holds: the line costs nothing


def spoken(value: float) -> str:
    """A count as a person says it: 7,477 as it is, 60,003 as 60 k, 4,539,734 as 4.5 M."""
    if value < 10_000:
        return fmt_int(value)
    if value < 1_000_000:
        return f"{value / 1000:.0f} k"
    millions = value / 1_000_000
    return f"{millions:.1f} M" if millions < 100 else f"{millions:.0f} M"


def briefs(digest: Digest, acks: Mapping[str, str]) -> list[Brief]:
    """One line per check that cost points (or would, unacked), largest first, in a person's words.

    ``acks``: each check's ack line, as the details write it.
    """
    return [
        Brief(
            name=finding.name,
            applied=digest.applied.get(finding.name, 0),
            penalty=finding.penalty,
            line=brief_line(finding, digest),
            ack=acks.get(finding.name, ""),
            acked=digest.acked(finding) is not None,
        )
        for finding in digest.deductions
    ]


def brief_line(finding: Finding, digest: Digest) -> str:
    """The finding in one line, led by what it is about; its summary when no shorter wording is known for it."""
    speak = _WORDING.get(finding.name)
    line = speak(finding, digest) if speak is not None and finding.offenders else ""
    return line or finding.summary


def _error_lines(finding: Finding, digest: Digest) -> str:
    top = finding.offenders[0]
    new = ", new today" if _mostly_new(finding, digest, top.labels) else ""
    # Its share of the workload's lines and the next workloads' few lines are in the details.
    return f"{subject_of(top.labels)}: {spoken(top.value)} error lines{new}"


def _mostly_new(finding: Finding, digest: Digest, labels: Mapping[str, str]) -> bool:
    """Whether most of the workload's shown error lines are of shapes not written on the previous days."""
    novelty = digest.novelty
    if novelty is None or not novelty.new:
        return False
    for workload in finding.signatures:
        if all(workload.labels.get(key) == labels.get(key) for key in ("namespace", "workload")):
            new = sum(one.share for one in workload.signatures if one.key in novelty.new)
            return new > 0.5
    return False


def _oom_kills(finding: Finding, digest: Digest) -> str:
    by_workload: dict[str, list[str]] = {}
    for offender in finding.offenders:
        by_workload.setdefault(subject_of(offender.labels), []).append(offender.labels.get("time", ""))
    if len(by_workload) == 1:
        subject, times = next(iter(by_workload.items()))
        known = [time for time in times if time]
        when = f" at {', '.join(known[:3])}" + (" …" if len(known) > 3 else "") if known else ""
        count = f" {len(times)} times" if len(times) > 1 else ""
        return f"{subject}: OOM-killed{count}{when}"
    named = ", ".join(f"{subject} ×{len(times)}" for subject, times in list(by_workload.items())[:_NAMED])
    rest = len(by_workload) - _NAMED
    kills = fmt_int(finding.value or len(finding.offenders))
    return f"{kills} OOM kills: {named}" + (f" and {rest} more" if rest > 0 else "")


def _conntrack(finding: Finding, digest: Digest) -> str:
    top = finding.offenders[0]
    entries, limit = top.fact("entries"), top.fact("limit")
    # The same figure as the details' "(126,484 / 131,072)": the ratio of the two counts shown there.
    fill = entries / limit if entries is not None and limit else top.value
    drops = sum(offender.fact("drops") or 0 for offender in finding.offenders)
    dropped = f", {spoken(drops)} connections dropped" if drops else ""
    return f"node {top.labels.get('node', '?')}: conntrack table {fmt_percent(fill)} full{dropped}"


def _envoy_flags(finding: Finding, digest: Digest) -> str:
    top = finding.offenders[0]
    route, flag = subject_of(top.labels), top.labels.get("flag", "")
    meaning = FLAG_MEANINGS[flag][0].split(":")[0] if flag in FLAG_MEANINGS else f"flag {flag}"
    # The share of its requests is in the details.
    return f"{route}: {spoken(top.value)} requests failed: {meaning} ({flag}){_more(finding.offenders, 'route')}"


_WORDING = {
    "error_lines": _error_lines,
    "oom_kills": _oom_kills,
    "conntrack": _conntrack,
    "envoy_flags": _envoy_flags,
}


def _more(offenders: Sequence[Offender], noun: str) -> str:
    rest = len(offenders) - 1
    return f" (+{rest} more {noun}{'' if rest == 1 else 's'})" if rest > 0 else ""


def next_step(digest: Digest) -> str:
    """The one thing to do first: the likely cause's fix, else the costliest check's hint (its query left out).

    A hint's first clause only ("…; cap per-pod log volume in the shipper" is in the details).
    """
    for explanation in digest.explanations:
        if explanation.fix and explanation.cause:
            return explanation.fix
    for finding in (*digest.deductions, *digest.diagnoses):
        if finding.hint and not digest.acked(finding):
            first = _QUERY_ASIDE.sub("", finding.hint).split("; ")[0].rstrip(".")
            return f"{first}."
    for explanation in digest.explanations:
        if explanation.fix:
            return explanation.fix
    return ""


def zone_name(window: Window) -> str:
    """The reader's zone as the digest's times are written in it: ``Europe/Paris``, ``UTC`` (a fixed offset's name)."""
    key = getattr(window.zone, "key", None)
    return key if isinstance(key, str) else window.zone.tzname(window.start) or "UTC"


def causes(digest: Digest) -> list[str]:
    """The explanations in one line each (the whole sentences, and which checks went unalerted, in the details)."""
    return [
        "No alert fired: nobody was paged"
        if explanation.rule == "blind_spot" and explanation.fix
        else explanation.short or explanation.text
        for explanation in digest.explanations
    ]


# Subjects named on the first screen's "to look at" line, and what the checks said of a single one.
_LOOK_AT_SUBJECTS = 3
_LOOK_AT_NOUNS = 2


def look_at_line(things: Sequence[str]) -> str:
    """``1 to look at: shop/api (not ready, no ready endpoint, …)``, or several subjects by name only."""
    if not things:
        return ""
    if len(things) == 1:
        subject, _, nouns = things[0].partition(" (")
        said = [noun for noun in nouns.removesuffix(")").split(", ") if noun]
        shown = ", ".join(said[:_LOOK_AT_NOUNS]) + (", …" if len(said) > _LOOK_AT_NOUNS else "")
        return f"1 to look at: {subject}" + (f" ({shown})" if shown else "")
    names = [thing.partition(" (")[0] for thing in things[:_LOOK_AT_SUBJECTS]]
    rest = len(things) - len(names)
    return f"{len(things)} to look at: {', '.join(names)}" + (f" and {rest} more" if rest else "")

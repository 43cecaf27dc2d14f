"""Acknowledgements: a known finding, owned by someone, shown on one line and not graded until it expires or worsens.

A team that has seen the same throttled pod for a week stops reading a digest that repeats it at full length; a team
that silences it for good misses the day it doubles. An ack is the middle way Alertmanager and Grafana take (a
silence with an expiry), held to the first law: it never hides what it did not see.

* **What it covers.** ``check`` (``cpu_throttling``) or ``check:subject`` (``error_lines:feeds/feed-aggregator``,
  ``conntrack:pi5-3``, ``envoy_flags:shop/api``): the subject is what a reader names — a workload, a node, a route,
  an alert. An ack from the chat or the CLI remembers the finding as it was acked: its value (``at_most``) and its
  significant subjects (``subjects``). One from the policy (a known, permanent exception) names its subject and may
  bound the value.
* **While it holds**, the finding still shows, on one line ("acked by @anna until 12-13: known flood"); a graded
  check costs no point, a diagnosis is not among "to look at", and the headline counts it ("OK 10/10 · 1 acked").
* **It is lifted by itself** — the finding is graded and said in full again, with why — as soon as the finding is
  worse than when acked: a higher value, or a significant subject the ack does not cover. A subject is significant
  when its own value is at least a tenth of the largest offender's (`SIGNIFICANT`): the 36 error lines of a logging
  agent beside a 4.5 M-line flood do not lift an ack, a second node's table at 85 % beside the acked 96 % does.
* **It expires by itself**: an ack holds for windows that end between the start of the 24 h it was taken against
  (`TAKEN_AGAINST`: the noon post acked at 13:00 is acked) and its ``until``; a replay of the days before shows no
  ack, a digest after its end the finding in full again. Never on the clock: on the window.
* **Blindness is never acked**: an UNKNOWN or partly seen check keeps the digest from OK whatever the acks say.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from digest.checks.contract import Finding, Status, Window, fmt_int, fmt_percent
from digest.checks.envoy_flags import route_name
from digest.checks.error_lines import workload_of

# An offender whose value is at least this share of the largest one's is one the ack must cover (module doc).
SIGNIFICANT = 0.1
# The longest an ack from the chat or the CLI may run: an ack forgotten for a year is a silence, not an ack.
MAX_DURATION = timedelta(days=90)
DEFAULT_DURATION = timedelta(days=7)
# An ack is taken against the digest of the 24 h before it: the windows that end in them are the ones it was made for
# (the noon post acked at 13:00, a `/digest` asked a minute later, a replay of that day).
TAKEN_AGAINST = timedelta(hours=24)
_DURATION = re.compile(r"^(\d{1,4})([hdw])$")
_UNITS = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}
# What a target may be written with: a check's name, then a subject as the digest writes it.
_TARGET = re.compile(r"^(?P<check>[a-z_]+)(?::(?P<subject>[^\s:]{1,200}))?$")


class AckError(ValueError):
    """An ack that cannot be made, in a sentence for the person who asked."""


@dataclass(frozen=True)
class Ack:
    """One acknowledgement: what it covers, who made it and why, and for which windows it holds."""

    check: str
    subject: str  # "" for the whole check
    reason: str
    by: str
    since: datetime
    until: datetime | None  # None: a policy exception without an end
    at_most: float | None = None  # the finding's value when acked: a higher one lifts it
    subjects: frozenset[str] | None = None  # significant subjects when acked; None: ``subject`` alone (or any)
    origin: str = "chat"  # chat, cli or policy

    @property
    def target(self) -> str:
        """How it is written in commands and in the digest: ``check`` or ``check:subject``."""
        return target_of(self.check, self.subject)

    def holds_for(self, window: Window) -> bool:
        """Whether the window ends within the ack: after the start of the 24 h it was taken against, by its end."""
        return self.since - TAKEN_AGAINST < window.end and (self.until is None or window.end <= self.until)

    def covered(self) -> frozenset[str] | None:
        """The subjects it covers; None for any."""
        if self.subjects is not None:
            return self.subjects
        return frozenset({self.subject}) if self.subject else None


@dataclass(frozen=True)
class AckOutcome:
    """What an ack did to one day's finding: held (the finding acked), or lifted with the reason in words."""

    ack: Ack
    held: bool
    lifted_because: str = ""


def target_of(check: str, subject: str) -> str:
    """``check`` or ``check:subject``: an ack's target as commands and the digest write it."""
    return f"{check}:{subject}" if subject else check


def parse_target(text: str, checks: Iterable[str]) -> tuple[str, str]:
    """``check`` or ``check:subject`` → (check, subject); `AckError` naming the known checks otherwise."""
    match = _TARGET.match(text.strip())
    known = sorted(checks)
    if match is None or match.group("check") not in known:
        raise AckError(f"{text.strip()[:60]!r} is not a check; one of {', '.join(known)}, optionally :subject")
    return match.group("check"), match.group("subject") or ""


def looks_like_duration(text: str) -> bool:
    """Whether ``text`` is written as a duration (``7d``), so that a reason starting with a number stays a reason."""
    return re.match(r"^\d+[a-z]$", text.strip()) is not None


def parse_duration(text: str) -> timedelta:
    """``12h``, ``7d``, ``2w`` → the duration; `AckError` when it is not one or is longer than `MAX_DURATION`."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise AckError(f"{text.strip()[:20]!r} is not a duration like 12h, 7d or 2w")
    duration = int(match.group(1)) * _UNITS[match.group(2)]
    if not timedelta(0) < duration <= MAX_DURATION:
        raise AckError(f"an ack runs for more than 0 and at most {MAX_DURATION.days} days")
    return duration


def subject_of(labels: Mapping[str, str]) -> str:
    """The thing an offender is about, as a reader names it: a workload, a route, an alert, a node.

    ``shop/api`` for a pod of Deployment api (a pod's node is where it ran, not what it is); an alert by its name (its
    namespace is where its rule lives, not what it is about).
    """
    if labels.get("alertname"):
        return labels["alertname"]
    if labels.get("upstream"):
        return route_name(labels["upstream"])
    namespace = labels.get("namespace", "")
    name = next((labels[key] for key in ("deployment", "workload", "service") if labels.get(key)), "")
    if not name and labels.get("pod"):
        name = workload_of(labels["pod"])
    if not name:
        name = labels.get("node", "")
    if not namespace:
        return name
    return f"{namespace}/{name}" if name else namespace


def is_bad(finding: Finding) -> bool:
    """Whether the finding is one to ack: it found something (WARN or CRIT)."""
    return finding.status in (Status.WARN, Status.CRIT)


def significant(finding: Finding) -> dict[str, float]:
    """The finding's significant subjects with their largest value (module doc: a tenth of the largest offender's)."""
    values: dict[str, float] = {}
    for offender in finding.offenders:
        subject = subject_of(offender.labels)
        values[subject] = max(values.get(subject, 0.0), offender.value)
    if not values:
        return {}
    largest = max(values.values())
    return {subject: value for subject, value in values.items() if value >= SIGNIFICANT * largest}


def acked_now(
    finding: Finding, subject: str, reason: str, by: str, since: datetime, until: datetime, origin: str
) -> Ack:
    """An ack of ``finding`` as it is now: its value and significant subjects are what a worse day is measured by.

    `AckError` when there is nothing to ack (the finding is fine, or ``subject`` is not among its offenders).
    """
    if not is_bad(finding):
        raise AckError(f"{finding.name} found nothing to ack in the last digest ({finding.status.value})")
    subjects = significant(finding)
    if subject:
        named = {subject_of(offender.labels) for offender in finding.offenders}
        if subject not in named:
            listed = ", ".join(sorted(subjects)) or "none"
            raise AckError(f"{subject} is not among {finding.name}'s offenders ({listed})")
        subjects = {subject: subjects.get(subject, 0.0)}
    return Ack(
        check=finding.name,
        subject=subject,
        reason=reason,
        by=by,
        since=since,
        until=until,
        at_most=finding.value,
        subjects=frozenset(subjects),
        origin=origin,
    )


def from_policy(check: str, subject: str, reason: str, until: date | None, at_most: float | None) -> Ack:
    """A policy's exception as an ack: held from always, through ``until``'s end (UTC) or for good."""
    end = datetime.combine(until + timedelta(days=1), time.min, UTC) if until is not None else None
    since = datetime(1970, 1, 1, tzinfo=UTC)
    return Ack(check, subject, reason, "policy", since, end, at_most=at_most, origin="policy")


def judge(findings: Sequence[Finding], acks: Sequence[Ack], window: Window) -> dict[str, AckOutcome]:
    """Each bad finding's ack outcome, by check name: held, or lifted with why (the first ack that holds wins)."""
    outcomes: dict[str, AckOutcome] = {}
    for finding in findings:
        if not is_bad(finding):
            continue
        candidates = [ack for ack in acks if ack.check == finding.name and ack.holds_for(window)]
        for ack in candidates:
            why = _worse(finding, ack)
            outcome = AckOutcome(ack=ack, held=not why, lifted_because=why)
            if outcome.held:
                outcomes[finding.name] = outcome
                break
            outcomes.setdefault(finding.name, outcome)
    return outcomes


def _worse(finding: Finding, ack: Ack) -> str:
    """Why ``finding`` is worse than ``ack`` allows, in words; "" when it is not."""
    if ack.at_most is not None and finding.value is not None and finding.value > ack.at_most:
        return f"worse than acked ({_shown(finding, finding.value)} > {_shown(finding, ack.at_most)})"
    covered = ack.covered()
    if covered is not None:
        new = sorted(subject for subject in significant(finding) if subject not in covered)
        if new:
            return f"not acked: {', '.join(new[:3])}" + (f" and {len(new) - 3} more" if len(new) > 3 else "")
    return ""


def _shown(finding: Finding, value: float) -> str:
    # Ratios (conntrack's fill) read as percentages, everything else as a count.
    return fmt_percent(value) if finding.name == "conntrack" else fmt_int(value)

"""From findings to a grade: penalties, caps, the 10-point score and the digest's status.

The status follows the score (10 OK, 9 WARNING, 8 and below CRITICAL by default), with one law on top: when any
graded check is UNKNOWN, or any check (graded or diagnostic) saw only part of the window or of the fleet, the digest
is never OK — it says UNKNOWN when nothing else is wrong, and the headline names what could not be checked or seen.
A disabled check is listed as disabled, never counted as OK. A check with nothing to watch on this cluster (its every
source a component never seen here: no Envoy, no rule evaluator) is *not watched*: neither graded nor UNKNOWN, named
once in a footer line.

An ack that holds (`digest.pipeline.acks`) takes its finding's points off the score and its WARN/CRIT out of the
status; it never takes UNKNOWN or a partial view away.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from digest.checks.contract import Finding, Status, Unwatched, Window
from digest.pipeline.acks import Ack, AckOutcome, judge
from digest.pipeline.explain import Explanation, explain
from digest.pipeline.novelty import Novelty
from digest.pipeline.policy import Policy


class DigestStatus(enum.StrEnum):
    """The digest's headline status."""

    OK = "OK"
    WARNING = "WARNING"
    CRITICAL = "CRITICAL"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class CapApplied:
    """A cap that lowered the sum of its checks' penalties."""

    checks: tuple[str, ...]
    max_penalty: int
    raw_penalty: int


@dataclass(frozen=True)
class Digest:
    """Everything a renderer needs: the judged window and each check's finding with the points it cost."""

    cluster: str
    window: Window
    findings: tuple[Finding, ...]
    applied: dict[str, int]  # check name → points actually deducted after caps
    disabled: tuple[str, ...]
    caps: tuple[CapApplied, ...]
    score: int
    max_score: int
    status: DigestStatus
    graded_names: frozenset[str] = frozenset()
    explanations: tuple[Explanation, ...] = ()
    trends: tuple[str, ...] = ()
    novelty: Novelty | None = None  # which error signatures are new today, which are gone since yesterday
    # Every query answered, every check finished and saw the whole window and fleet (`Collected.complete`): the
    # digest may be kept as the window's final word (the week's day results).
    complete: bool = False
    # Checks this cluster gives nothing to watch (`checks.coverage.unwatched`): not graded, not blind, said once.
    unwatched: tuple[Unwatched, ...] = ()
    # The logs are not scoped to the cluster and hold lines of these nodes, which it does not have (`Collected`).
    foreign_log_nodes: tuple[str, ...] = ()
    # The metrics are not scoped to the cluster and hold these clusters (`Collected.metrics_clusters`).
    metrics_clusters: tuple[str, ...] = ()
    # The logs are not scoped to the cluster and their lines carry these values of its label (`Collected.log_clusters`).
    log_clusters: tuple[str, ...] = ()
    # Cluster selectors that matched nothing in the window, as setting and matchers (`Collected.empty_scopes`).
    empty_scopes: tuple[str, ...] = ()
    # Each acked finding's ack, by check name: held (not graded, said on one line) or lifted (worse than acked).
    acks: Mapping[str, AckOutcome] = field(default_factory=dict)

    def acked(self, finding: Finding) -> AckOutcome | None:
        """The ack that holds for ``finding`` this window, or None."""
        outcome = self.acks.get(finding.name)
        return outcome if outcome is not None and outcome.held else None

    @property
    def acked_count(self) -> int:
        """How many findings an ack holds: the headline says it beside the grade."""
        return sum(outcome.held for outcome in self.acks.values())

    def is_graded(self, finding: Finding) -> bool:
        """Whether ``finding`` comes from a check that can cost points (and so gates the grade)."""
        return finding.name in self.graded_names

    @property
    def partial(self) -> tuple[Finding, ...]:
        """Checks that saw only part of the window or of the fleet: their unseen parts are named in the headline."""
        return tuple(f for f in self.findings if f.coverage is not None and f.coverage.partial)

    @property
    def unknown(self) -> tuple[Finding, ...]:
        """Graded checks that could not see: named in the headline, they keep the digest from OK."""
        return tuple(f for f in self.findings if f.status is Status.UNKNOWN and self.is_graded(f))

    @property
    def unexplained(self) -> tuple[Finding, ...]:
        """Diagnostic checks that could not see: said, but they do not gate a grade they do not feed."""
        return tuple(f for f in self.findings if f.status is Status.UNKNOWN and not self.is_graded(f))

    @property
    def diagnoses(self) -> tuple[Finding, ...]:
        """Diagnostic checks that found something, worst first."""
        order = {Status.CRIT: 0, Status.WARN: 1}
        found = [f for f in self.findings if not self.is_graded(f) and f.status in order and f.penalty == 0]
        return tuple(sorted(found, key=lambda finding: order[finding.status]))

    @property
    def quiet(self) -> tuple[Finding, ...]:
        """Diagnostic checks that found nothing."""
        return tuple(f for f in self.findings if not self.is_graded(f) and f.status is Status.OK)

    @property
    def deductions(self) -> tuple[Finding, ...]:
        """Findings that cost points, largest first (the order a reader needs them)."""
        costly = [finding for finding in self.findings if finding.penalty > 0]
        return tuple(sorted(costly, key=lambda finding: -finding.penalty))

    @property
    def healthy(self) -> tuple[Finding, ...]:
        """Graded checks that cost nothing."""
        return tuple(
            f for f in self.findings if f.penalty == 0 and f.status is not Status.UNKNOWN and self.is_graded(f)
        )


def apply_caps(findings: Sequence[Finding], policy: Policy) -> tuple[dict[str, int], tuple[CapApplied, ...]]:
    """Points deducted per check after the caps; the larger penalties keep their points first."""
    applied = {finding.name: finding.penalty for finding in findings}
    caps: list[CapApplied] = []
    for cap in policy.caps:
        members = sorted((name for name in cap.checks if name in applied), key=lambda name: -applied[name])
        raw = sum(applied[name] for name in members)
        if raw <= cap.max_penalty:
            continue
        budget = cap.max_penalty
        for name in members:
            applied[name] = min(applied[name], budget)
            budget -= applied[name]
        caps.append(CapApplied(checks=tuple(members), max_penalty=cap.max_penalty, raw_penalty=raw))
    return applied, tuple(caps)


def grade(
    cluster: str,
    window: Window,
    findings: Sequence[Finding],
    disabled: Sequence[str],
    policy: Policy,
    unwatched: Sequence[Unwatched] = (),
    acks: Sequence[Ack] = (),
) -> Digest:
    """Score the findings under the policy (the checks in ``unwatched`` are not among them: nothing to grade).

    ``acks`` that hold for the window waive their findings' points (module doc).
    """
    outcomes = judge(findings, acks, window)
    held = {name for name, outcome in outcomes.items() if outcome.held}
    applied, caps = apply_caps([replace(f, penalty=0) if f.name in held else f for f in findings], policy)
    rules = policy.grade
    score = max(0, rules.max_score - sum(applied.values()))
    if score >= rules.ok_at:
        status = DigestStatus.OK
    elif score >= rules.warning_at:
        status = DigestStatus.WARNING
    else:
        status = DigestStatus.CRITICAL
    graded = [finding for finding in findings if policy.graded(finding.name)]
    if status is DigestStatus.OK and (not graded or any(finding.status is Status.UNKNOWN for finding in graded)):
        # Nothing graded, or a graded check blind: "OK" would be about something nobody saw.
        status = DigestStatus.UNKNOWN
    if status is DigestStatus.OK and any(f.coverage is not None and f.coverage.partial for f in findings):
        # Part of the day or of the fleet unseen, even by a diagnostic check: the day cannot be vouched for.
        status = DigestStatus.UNKNOWN
    if status is DigestStatus.OK and any(
        finding.status is not Status.OK and finding.penalty == 0 and finding.name not in held for finding in graded
    ):
        # A graded check's WARN/CRIT whose penalty is configured to 0 still keeps the digest from a clean OK; one that
        # costs points is in the score already, which `ok_at` judges.
        status = DigestStatus.WARNING
    return Digest(
        cluster=cluster,
        window=window,
        findings=tuple(findings),
        applied=applied,
        disabled=tuple(disabled),
        caps=caps,
        score=score,
        max_score=rules.max_score,
        status=status,
        graded_names=frozenset(finding.name for finding in graded),
        explanations=explain(findings),
        unwatched=tuple(unwatched),
        acks=outcomes,
    )

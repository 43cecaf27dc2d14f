"""alerts: what the cluster's own alerting fired in the window, and for how long.

Signal (queries.md §8): the ``ALERTS`` series that vmalert (with ``-remoteWrite.url``) or Prometheus (via
remote_write) stores, one sample per rule evaluation while an alert is pending or firing::

    fired:    max by (alertname, alertgroup, namespace, severity) (max_over_time(ALERTS{alertstate="firing"}[<window>]))
    samples:  sum by (alertname, alertgroup, namespace, severity)
                (count_over_time(ALERTS{alertstate="firing"}[<window>]))
    minutes:  sum by (alertname, alertgroup, namespace, severity)
                (count_over_time(max_over_time(ALERTS{alertstate="firing"}[1m])[<window>:1m]))
    first:    min by (alertname, alertgroup, namespace, severity)
                (min_over_time(timestamp(ALERTS{alertstate="firing"})[<window>:1m]))

Firing minutes are the firing evaluations times the evaluation interval. The interval is the policy's
``evaluation_interval_seconds`` when set; otherwise it is read from the data: firing evaluations per minute in which
the alert fired, rounded (2 → 30 s, 1 → 1 min), exact for any interval that divides a minute. The 10-05
``ConntrackNearFull`` fired 63 evaluations 30 s apart: 31 minutes. Alertmanager cannot say what fired yesterday (its
API drops resolved alerts); the TSDB can.

Status: a firing alert is itself evidence. ``critical`` (or ``page``) is CRIT, ``info``/``none`` are shown but not
graded, any other severity (``warning``, or none at all) is WARN. Always-firing dead-man's switches (``Watchdog``,
``InfoInhibitor`` in kube-prometheus) are not incidents: they are ignored, and prove that alerting works.

Presence (seed 001): on 2026-07-20 zero alerts fired in 19 hours of incident, and an empty ``ALERTS`` answer must not
read as "no alert fired" when alerting is simply not visible. Alerting is observable only when some ``ALERTS`` or
``ALERTS_FOR_STATE`` series exists in the 30 days before the window end, or when the evaluator's own ``up`` (job
matching ``alerting_job``) is in the window; otherwise UNKNOWN. An evaluator whose ``up`` never reached 1 in the
window was down: UNKNOWN too, even when another matched job was up. Alertmanager is not an evaluator and is not in
the default ``alerting_job``.

Default penalties are 0: the seed rule grades; the alerts say what the cluster already knew.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from . import coverage
from .contract import (
    Finding,
    Input,
    Need,
    Offender,
    Quantity,
    Sample,
    SourceError,
    Sources,
    Status,
    Unit,
    Window,
    fmt_int,
    grade,
    local_time,
    metrics_look,
    unknown,
)
from .promql import open_range

NAME = "alerts"
# Where a reader sees one offender: its own series over the window (`checks.contract.Look`).
_LOOK = "max by (alertname, namespace, alertstate) (ALERTS{})"
_LOOK_KEYS = ("alertname", "namespace")

# What this check reads, for `digest doctor` (the queries below are what it sends).
INPUTS: tuple[Input, ...] = (
    Input("series", "up", "the rule evaluator scraped", policy_key="alerts.alerting_job", by_job=True),
    Input("series", "ALERTS", "what fired", required=False, fix="vmalert's -remoteWrite.url"),
    Input(
        "series",
        "ALERTS_FOR_STATE",
        "alerting seen before",
        required=False,
        fix="vmalert's -remoteWrite.url",
    ),
)
_GROUP = ("alertname", "alertgroup", "namespace", "severity")
_BY = f"sum by ({', '.join(_GROUP)})"


@dataclass(frozen=True)
class AlertsPolicy:
    """Which job evaluates the rules, how far back alerting counts as present, severities, and the cost."""

    enabled: bool = True
    # Rule evaluators only: Alertmanager routes alerts but evaluates none, so its `up` proves nothing here.
    alerting_job: str = ".*(vmalert|prometheus).*"
    presence_days: int = 30
    # 0: read the evaluation interval from the data.
    evaluation_interval_seconds: int = 0
    crit_severities: tuple[str, ...] = ("critical", "page")
    info_severities: tuple[str, ...] = ("info", "none")
    ignore_alertnames: tuple[str, ...] = ("Watchdog", "InfoInhibitor")
    warn_penalty: int = 0
    crit_penalty: int = 0
    top: int = 5


@dataclass(frozen=True)
class AlertsCheck:
    """Alerts that fired in the window, with their severity and firing minutes."""

    policy: AlertsPolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        return (coverage.rule_evaluator(self.policy.alerting_job),)

    def queries(self, window: Window) -> dict[str, str]:
        """The PromQL this check sends, by purpose."""
        rng = window.promql_range()
        steps = open_range(window.seconds)
        firing = 'ALERTS{alertstate="firing"}'
        job = self.policy.alerting_job.replace('"', "")
        return {
            "fired": f"max by ({', '.join(_GROUP)}) (max_over_time({firing}[{rng}]))",
            "samples": f"{_BY} (count_over_time({firing}[{rng}]))",
            # Subquery ranges open on the left (`open_range`): Prometheus 2 would add the previous day's last minute.
            "minutes": f"{_BY} (count_over_time(max_over_time({firing}[{open_range(60)}])[{steps}:1m]))",
            "first": f"min by ({', '.join(_GROUP)}) (min_over_time(timestamp({firing})[{steps}:1m]))",
            "history": (
                f'count(count_over_time({{__name__=~"ALERTS|ALERTS_FOR_STATE"}}[{self.policy.presence_days}d]))'
            ),
            "evaluator_up": f'max by (job) (max_over_time(up{{job=~"{job}"}}[{rng}]))',
        }

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        queries = self.queries(window)
        try:
            fired = await sources.metrics.instant(queries["fired"], window.end)
            evaluator_up = await sources.metrics.instant(queries["evaluator_up"], window.end)
        except SourceError as exc:
            return unknown(NAME, "alerts not checked: the metrics backend did not answer", str(exc))
        # Every evaluator the policy names must have run: one up beside one down is not "alerting works".
        down_jobs = sorted(sample.labels.get("job", "?") for sample in evaluator_up if sample.value < 1)
        if not fired:
            try:
                history = await sources.metrics.instant(queries["history"], window.end)
            except SourceError as exc:
                return unknown(NAME, "alerts not checked: the metrics backend did not answer", str(exc))
            if down_jobs:
                jobs = ", ".join(down_jobs)
                return unknown(
                    NAME,
                    f"alerts not checked: the rule evaluator ({jobs}) was down the whole window",
                    f'up{{job=~"{self.policy.alerting_job}"}} never 1 in the window',
                    hint="Is vmalert (or Prometheus) running? Nothing could have fired while it was down.",
                )
            if not history and not evaluator_up:
                return unknown(
                    NAME,
                    "alerts not checked: no ALERTS series and no rule evaluator seen — "
                    '"no alert fired" would be a guess',
                    "alerting not observable: no ALERTS series and no vmalert/Prometheus up series",
                    hint="Does vmalert write its ALERTS series to this backend (-remoteWrite.url), and is it scraped? "
                    "Set alerts.alerting_job in the policy if its job has another name.",
                )
            if evaluator_up:
                seen = f"{', '.join(sorted(sample.labels.get('job', '?') for sample in evaluator_up))} up in the window"
            else:
                seen = f"ALERTS series in the last {self.policy.presence_days} days"
            return Finding(name=NAME, status=Status.OK, penalty=0, value=0, summary=f"no alert fired ({seen})")
        try:
            samples = await sources.metrics.instant(queries["samples"], window.end)
            minutes = await sources.metrics.instant(queries["minutes"], window.end)
            first = await sources.metrics.instant(queries["first"], window.end)
        except SourceError as exc:
            return unknown(NAME, "alerts not checked: the metrics backend did not answer", str(exc))
        return self._finding(window, fired, samples, minutes, first)

    def _finding(
        self,
        window: Window,
        fired: Sequence[Sample],
        samples: Sequence[Sample],
        minutes: Sequence[Sample],
        first: Sequence[Sample],
    ) -> Finding:
        policy = self.policy
        samples_by = {_key(sample): sample.value for sample in samples}
        minutes_by = {_key(sample): sample.value for sample in minutes}
        # An alert already firing when the window opened is shown from the window's start.
        first_by = {_key(sample): local_time(max(sample.value, window.start.timestamp()), window) for sample in first}
        ignored = sorted({sample.labels.get("alertname", "") for sample in fired} & set(policy.ignore_alertnames))
        alerts = [
            (key, self._firing_minutes(samples_by.get(key, 0.0), minutes_by.get(key, 0.0)))
            for key in sorted({_key(sample) for sample in fired})
            if key[0] not in policy.ignore_alertnames
        ]
        severity_rank = {"crit": 2, "warn": 1, "info": 0}
        alerts.sort(key=lambda item: (-severity_rank[self._class(item[0][3])], -item[1], item[0]))
        level = max((severity_rank[self._class(key[3])] for key, _ in alerts), default=0)
        status, penalty = grade(level, policy.warn_penalty, policy.crit_penalty)
        evidence = []
        if ignored:
            evidence.append(f"always-firing {', '.join(ignored)} ignored (it shows that alerting works)")
        if not alerts:
            return Finding(
                name=NAME, status=status, penalty=penalty, value=0, summary="no alert fired", evidence=evidence
            )
        top = alerts[: policy.top]
        offenders = [
            Offender(
                labels={
                    "alertname": key[0],
                    "severity": key[3] or "none",
                    "namespace": key[2],
                    "alertgroup": key[1],
                    "first_firing": first_by.get(key, ""),
                },
                value=firing_minutes,
                # Without its evaluation count the duration is not measured: no fact rather than a false 0 min.
                facts={"firing_minutes": Quantity(firing_minutes, Unit.MINUTES)} if key in samples_by else {},
            )
            for key, firing_minutes in top
        ]
        evidence[:0] = [
            f"then {_describe(offender, minutes)}"
            for offender, (_, minutes) in zip(offenders[1:], top[1:], strict=True)
        ]
        summary = _describe(offenders[0], top[0][1])
        if len(alerts) > 1:
            summary += f"; {len(alerts)} alerts fired"
        return Finding(
            name=NAME,
            status=status,
            penalty=penalty,
            value=len(alerts),
            summary=summary,
            offenders=[replace(one, look=metrics_look(_LOOK, one.labels, _LOOK_KEYS)) for one in offenders],
            hint="Each alert's rule and runbook say what it watches; an alert that fired without anyone acting is "
            "worth a route to a receiver (Alertmanager) or a lower severity.",
            evidence=evidence,
        )

    def _firing_minutes(self, samples: float, minutes: float) -> int:
        """Firing evaluations times the evaluation interval, in whole minutes."""
        interval = self.policy.evaluation_interval_seconds
        if interval <= 0:
            per_minute = max(1, round(samples / minutes)) if minutes else 1
            interval = 60 // per_minute
        return int(samples * interval // 60)

    def _class(self, severity: str) -> str:
        if severity.lower() in self.policy.crit_severities:
            return "crit"
        if severity.lower() in self.policy.info_severities:
            return "info"
        return "warn"


def _key(sample: Sample) -> tuple[str, str, str, str]:
    labels = sample.labels
    return (
        labels.get("alertname", ""),
        labels.get("alertgroup", ""),
        labels.get("namespace", ""),
        labels.get("severity", ""),
    )


def _describe(offender: Offender, minutes: int) -> str:
    labels = offender.labels
    where = ", ".join(part for part in (labels["alertgroup"], labels["namespace"]) if part)
    at = f" from {labels['first_firing']}" if labels["first_firing"] else ""
    return (
        f"{labels['alertname']} ({labels['severity']}{', ' + where if where else ''}) fired for "
        f"{fmt_int(minutes)} min{at}"
    )

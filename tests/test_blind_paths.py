"""Silence that is not health: each path where a check used to say OK about something it could not see.

The backends are replaced by answers keyed on query text, at the checks' Sources boundary: these tests pin how a
check reads an answer (an absent family, a down evaluator, a field that is not there), not how backends compute.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from digest.checks.alerts import AlertsCheck, AlertsPolicy
from digest.checks.conntrack import ConntrackCheck, ConntrackPolicy
from digest.checks.contract import RangeSeries, Sample, Sources, Status, Window
from digest.checks.deployments import DeploymentsCheck, DeploymentsPolicy
from digest.checks.log_questions import CountRow, Filter, LineCount, LineSeries, PeakCount
from digest.checks.log_storms import LogStormsCheck, LogStormsPolicy
from digest.checks.oom_kills import OomKillsCheck, OomKillsPolicy
from digest.checks.readiness import ReadinessCheck, ReadinessPolicy
from digest.checks.restarts import RestartsCheck, RestartsPolicy

WINDOW = Window(
    start=datetime(2026, 7, 20, tzinfo=UTC),
    end=datetime(2026, 7, 20, tzinfo=UTC) + timedelta(days=1),
    zone=ZoneInfo("UTC"),
    label="2026-07-20",
)
KSM_UP = ('up{job=~".*kube-state-metrics.*"}', [Sample(labels={"job": "kube-state-metrics"}, value=1.0)])


class _Answers:
    """Answers the first rule whose text is in the query; anything else has no series."""

    def __init__(self, *rules: tuple[str, Sequence[Sample]], peaks: Sequence[CountRow] = ()) -> None:
        self.rules = rules
        self.peaks = peaks
        self.asked: list[str] = []

    def _answer(self, query: str) -> list[Sample]:
        self.asked.append(query)
        return next((list(rows) for text, rows in self.rules if text in query), [])

    async def instant(self, query: str, at: datetime) -> list[Sample]:
        return self._answer(query)

    async def range(self, query: str, start: datetime, end: datetime, step_seconds: int) -> list[RangeSeries]:
        self.asked.append(query)
        return []

    name = "VictoriaLogs"
    language = "LogsQL"

    async def count(self, question: LineCount) -> list[CountRow]:
        self.asked.append(repr(question))
        return []

    async def peak(self, question: PeakCount) -> list[CountRow]:
        self.asked.append(repr(question))
        return list(self.peaks)

    async def series(self, question: LineCount) -> list[LineSeries]:
        self.asked.append(repr(question))
        return []

    def reading_query(self, window: Window, lines: Filter, most_repeated: bool = False) -> str:
        return ""


def _sources(metrics: _Answers, logs: _Answers | None = None) -> Sources:
    return Sources(metrics=metrics, logs=logs or _Answers())


async def test_log_lines_without_a_pod_field_are_not_a_quiet_cluster() -> None:
    """50,000 lines a minute that name no pod (a wrong logs.fields.pod) are UNKNOWN, not "no pod above budget"."""
    rows = [CountRow(group={"namespace": "", "pod": ""}, counts={"peak": 50_000.0, "lines": 3_000_000.0})]
    finding = await LogStormsCheck(LogStormsPolicy())(_sources(_Answers(), _Answers(peaks=rows)), WINDOW)
    assert finding.status is Status.UNKNOWN
    assert finding.summary == "log volume not checked: no log line names its pod"
    assert finding.error == "3,000,000 lines in the window, none with a pod"


async def test_one_evaluator_down_is_not_alerting_works() -> None:
    """With vmalert never up while a Prometheus was, UNKNOWN names vmalert instead of "no alert fired"."""
    evaluators = [Sample(labels={"job": "vmalert"}, value=0.0), Sample(labels={"job": "prometheus"}, value=1.0)]
    metrics = _Answers(("up{job=~", evaluators))
    finding = await AlertsCheck(AlertsPolicy())(_sources(metrics), WINDOW)
    assert finding.status is Status.UNKNOWN
    assert finding.summary == "alerts not checked: the rule evaluator (vmalert) was down the whole window"


async def test_alertmanager_up_is_no_evidence_that_rules_ran() -> None:
    """The default evaluator pattern leaves Alertmanager out: its up alone, with no ALERTS ever, is UNKNOWN."""
    assert "alertmanager" not in AlertsPolicy().alerting_job
    metrics = _Answers(("up{job=~", []))
    finding = await AlertsCheck(AlertsPolicy())(_sources(metrics), WINDOW)
    assert finding.status is Status.UNKNOWN
    assert finding.error == "alerting not observable: no ALERTS series and no vmalert/Prometheus up series"


async def test_conntrack_without_drop_counters_does_not_claim_no_drops() -> None:
    """A node_exporter without the conntrack stat collector: the fill is graded, the drops are said to be unseen."""
    node = {"instance": "node-1:9100"}
    metrics = _Answers(
        ("node_nf_conntrack_entries / node_nf_conntrack_entries_limit)", [Sample(labels=node, value=0.42)]),
        ("max_over_time(node_nf_conntrack_entries[", [Sample(labels=node, value=1_000.0)]),
        ("max_over_time(node_nf_conntrack_entries_limit[", [Sample(labels=node, value=2_380.0)]),
    )
    finding = await ConntrackCheck(ConntrackPolicy())(_sources(metrics), WINDOW)
    assert finding.status is Status.OK
    assert "no drops" not in finding.summary
    assert finding.summary.endswith("; drops not visible (no node_nf_conntrack_stat_* series)")


async def test_kube_state_metrics_up_without_the_family_is_not_a_calm_day() -> None:
    """kube-state-metrics scraped but no restart, readiness or Deployment family: those checks are UNKNOWN."""
    metrics = _Answers(KSM_UP)
    oom = await OomKillsCheck(OomKillsPolicy())(_sources(metrics), WINDOW)
    restarts = await RestartsCheck(RestartsPolicy())(_sources(metrics), WINDOW)
    deployments = await DeploymentsCheck(DeploymentsPolicy())(_sources(metrics), WINDOW)
    readiness = await ReadinessCheck(ReadinessPolicy())(_sources(metrics), WINDOW)
    for finding, metric in (
        (oom, "kube_pod_container_status_restarts_total"),
        (restarts, "kube_pod_container_status_restarts_total"),
        (deployments, "kube_deployment_status_replicas_unavailable"),
        (readiness, "kube_pod_status_ready"),
    ):
        assert finding.status is Status.UNKNOWN, finding.name
        assert finding.error == f"no {metric} series in the window"


async def test_families_present_and_quiet_are_a_calm_day() -> None:
    """The same checks with their families present and nothing in them say OK: the new gate is no false alarm."""
    families = ("count(count_over_time(", [Sample(labels={}, value=2_000.0)])
    metrics = _Answers(KSM_UP, families)
    checks = (
        OomKillsCheck(OomKillsPolicy()),
        RestartsCheck(RestartsPolicy()),
        DeploymentsCheck(DeploymentsPolicy()),
        ReadinessCheck(ReadinessPolicy()),
    )
    for check in checks:
        finding = await check(_sources(metrics), WINDOW)
        assert finding.status is Status.OK, (finding.name, finding.summary)

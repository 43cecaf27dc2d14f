"""New today and gone since yesterday, judged against a real VictoriaLogs holding a workload's earlier days.

Five days are ingested: the 10th has no log at all (its logs are gone), the 11th holds another workload's lines
only, the 12th the relay's certificate error and a few connect timeouts, the 13th (yesterday) the certificate error
alone, the 14th (today) the connect timeouts and a new disk error. Today's disk error is new, the connect timeout
is not (written on the 12th) and the certificate error is gone since yesterday; the day without logs is never read
as "no such error", and a history without any day seen whole marks nothing.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from digest.backends.http import Endpoint
from digest.backends.prometheus import PrometheusSource
from digest.backends.victorialogs import VictoriaLogsSource
from digest.checks.contract import Finding, Offender, SourceErrorKind, Sources, Status
from digest.checks.error_lines import ErrorLinesCheck, ErrorLinesPolicy
from digest.checks.log_questions import ShapeCount, Shapes
from digest.pipeline.novelty import Novelty, ShapeHistory, error_lines_of, judge
from digest.pipeline.state import HistoryStore
from digest.pipeline.trends import earlier_windows
from digest.pipeline.window import day_window
from digest.testbed.embedded import EmbeddedBackends
from tests.test_error_signatures import RealLogs, ShapelessLogs  # the real source; every shapes question refused

UTC_ZONE = ZoneInfo("UTC")
TODAY = date(2026, 3, 14)
NAMESPACE = "feeds"
POD = "relay-6c8d9f7b5-q2w4x"
CERT = "ERROR relay: certificate has expired"
TIMEOUT = "ERROR relay: connect ETIMEDOUT 203.0.113.{i}:443"
DISK = "ERROR relay: disk full on /var/spool/{i}"
# day → (message template, lines, pod); every day but the 10th also gets an info line per hour from a quiet pod.
DAYS: dict[date, tuple[tuple[str, int, str], ...]] = {
    date(2026, 3, 11): (),
    date(2026, 3, 12): ((CERT, 50, POD), (TIMEOUT, 5, POD)),
    date(2026, 3, 13): ((CERT, 300, POD),),
    TODAY: ((TIMEOUT, 500, POD), (DISK, 100, POD)),
}
POLICY = ErrorLinesPolicy(signature_min_lines=10)


def _record(moment: datetime, message: str, pod: str, level: str) -> bytes:
    record = {
        "timestamp": moment.isoformat().replace("+00:00", "Z"),
        "message": message,
        "level": level,
        "kubernetes.pod_namespace": NAMESPACE,
        "kubernetes.pod_name": pod,
        "kubernetes.container_name": "app",
        "stream": "stderr",
    }
    return (json.dumps(record) + "\n").encode()


def _records() -> Iterator[bytes]:
    for day, shapes in DAYS.items():
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        for hour in range(24):
            yield _record(start + timedelta(hours=hour), "GET /healthz 200", "quiet-0", "info")
        for template, lines, pod in shapes:
            for index in range(lines):
                moment = start + timedelta(seconds=3_600 + index * 60)
                yield _record(moment, template.format(i=index % 200), pod, "error")


def _count() -> int:
    return sum(24 + sum(lines for _, lines, _ in shapes) for shapes in DAYS.values())


@pytest.fixture(scope="module")
def history_backends() -> Iterator[EmbeddedBackends]:
    """A private VictoriaMetrics + VictoriaLogs pair holding the relay's days."""
    with EmbeddedBackends() as backends:
        backends.ingest_logs(_records())
        first = datetime(2026, 3, 11, tzinfo=UTC)
        backends.wait_for_logs(first, first + timedelta(days=4), _count())
        yield backends


@pytest.fixture
async def sources(history_backends: EmbeddedBackends) -> AsyncIterator[Sources]:
    metrics = PrometheusSource(Endpoint(name="VictoriaMetrics", url=history_backends.metrics.url, timeout_seconds=20))
    logs = VictoriaLogsSource(Endpoint(name="VictoriaLogs", url=history_backends.logs.url, timeout_seconds=20))
    try:
        yield Sources(metrics=metrics, logs=logs)
    finally:
        await metrics.aclose()
        await logs.aclose()


async def _judge(sources: Sources, history: ShapeHistory, days: int = 4) -> tuple[Finding, Novelty | None]:
    check = ErrorLinesCheck(POLICY)
    window = day_window(TODAY, UTC_ZONE)
    today = await check(sources, window)
    earlier = [(past, await check(sources, past)) for past in earlier_windows(window, days)]
    return today, await judge(check, sources, window, today, earlier, history, earlier[0][0])


def _texts(finding: Finding, keys: frozenset[str]) -> set[str]:
    return {one.text for workload in finding.signatures for one in workload.signatures if one.key in keys}


async def test_a_signature_not_written_on_the_earlier_days_is_new(sources: Sources) -> None:
    """The disk error is new today; the connect timeout, written two days ago, is not; days without logs don't count."""
    today, novelty = await _judge(sources, ShapeHistory())
    assert novelty is not None
    assert _texts(today, novelty.new) == {"ERROR relay: disk full on /var/spool/<N>"}
    assert _texts(today, novelty.seen) == {"ERROR relay: connect ETIMEDOUT <IP4>:<N>"}
    assert novelty.compared == 3  # the 13th, 12th and 11th; the 10th held no log line
    assert novelty.notes == ()


async def test_yesterdays_dominant_signature_is_gone(sources: Sources) -> None:
    """The certificate error, all of yesterday's 300 relay errors, is not among today's shapes: gone since yesterday."""
    _, novelty = await _judge(sources, ShapeHistory())
    assert novelty is not None
    [gone] = novelty.gone
    assert (dict(gone.labels), gone.text, gone.lines, gone.share) == (
        {"namespace": NAMESPACE, "workload": "relay"},
        CERT,
        300,
        1.0,
    )


async def test_no_history_marks_nothing_new(sources: Sources) -> None:
    """With no earlier day whose logs were seen (only the 10th, which holds none), nothing is new: "no history yet"."""
    check = ErrorLinesCheck(POLICY)
    window = day_window(TODAY, UTC_ZONE)
    today = await check(sources, window)
    lost = day_window(date(2026, 3, 10), UTC_ZONE)
    novelty = await judge(check, sources, window, today, [(lost, await check(sources, lost))], ShapeHistory())
    assert novelty is not None
    assert novelty.new == frozenset()
    assert novelty.seen == frozenset()
    assert novelty.compared == 0
    assert novelty.notes == ("new today: no history yet (no earlier day's logs were seen whole)",)


async def test_an_unseen_today_judges_nothing(sources: Sources) -> None:
    """A today whose error count is UNKNOWN has no signatures to judge and no evidence of anything gone."""
    check = ErrorLinesCheck(POLICY)
    window = day_window(TODAY, UTC_ZONE)
    unknown = Finding(name="error_lines", status=Status.UNKNOWN, penalty=0, value=None, summary="", error="down")
    earlier = [(past, await check(sources, past)) for past in earlier_windows(window, 2)]
    assert await judge(check, sources, window, unknown, earlier, ShapeHistory(), earlier[0][0]) is None


async def test_the_state_file_keeps_the_history_as_hashes(sources: Sources, tmp_path: Path) -> None:
    """A second digest reads the earlier days' keys from the state file (no shapes asked), which holds no log text."""
    store = HistoryStore(tmp_path / "state.sqlite")
    try:
        first_today, first = await _judge(sources, ShapeHistory(store, "c", "p"))
        assert isinstance(sources.logs, VictoriaLogsSource)
        offline = Sources(metrics=sources.metrics, logs=ShapelessLogs(sources.logs, SourceErrorKind.UNREACHABLE))
        check = ErrorLinesCheck(POLICY)
        window = day_window(TODAY, UTC_ZONE)
        earlier = [(past, await check(sources, past)) for past in earlier_windows(window, 4)]
        again = await judge(check, offline, window, first_today, earlier, ShapeHistory(store, "c", "p"), None)
    finally:
        store.close()
    assert first is not None
    assert again is not None
    assert (again.new, again.seen, again.notes) == (first.new, first.seen, ())
    files = await asyncio.to_thread(lambda: list(tmp_path.iterdir()))  # the file and its write-ahead log
    raw = b"".join([await asyncio.to_thread(path.read_bytes) for path in files])
    assert b"ETIMEDOUT" not in raw
    assert b"certificate" not in raw
    assert b"203.0.113" not in raw


class ThreadNoted(HistoryStore):
    """The state file, noting the thread that reads or writes each workload's signature keys."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.threads: list[tuple[str, int]] = []

    def load_shapes(self, *key: Any) -> str | None:
        self.threads.append(("load", threading.get_ident()))
        return super().load_shapes(*key)

    def save_shapes(self, *key: Any, **when: Any) -> None:
        self.threads.append(("save", threading.get_ident()))
        super().save_shapes(*key, **when)


async def test_the_state_file_is_read_and_written_off_the_event_loop(sources: Sources, tmp_path: Path) -> None:
    """Every signature row is read and written in a worker thread: a locked state file never stalls the event loop."""
    store = ThreadNoted(tmp_path / "state.sqlite")
    check = ErrorLinesCheck(POLICY)
    window = day_window(TODAY, UTC_ZONE)
    try:
        today, first = await _judge(sources, ShapeHistory(store, "c", "p"))  # the answers in hand, saved
        earlier = [(past, _keyless(await check(sources, past))) for past in earlier_windows(window, 4)]
        again = await judge(check, sources, window, today, earlier, ShapeHistory(store, "c", "p"), None)  # loaded
    finally:
        store.close()
    assert first is not None
    assert again is not None
    assert again.new == first.new
    assert {kind for kind, _ in store.threads} == {"load", "save"}
    assert threading.get_ident() not in {thread for _, thread in store.threads}


def test_stored_findings_keep_the_top_signatures_without_examples() -> None:
    """A day stored by the trends keeps its signatures' keys, shapes and shares (for "gone"), but no example line."""
    from digest.checks.contract import Signature, WorkloadSignatures
    from digest.pipeline.collect import Collected
    from digest.pipeline.trends import _decode, _encode

    said = WorkloadSignatures(
        {"namespace": NAMESPACE, "workload": "relay"},
        (Signature(CERT, 300, 1.0, 10.0, 20.0, example="ERROR relay: certificate has expired", key="abc"),),
        distinct=1,
    )
    finding = Finding(name="error_lines", status=Status.WARN, penalty=1, value=300, summary="", signatures=(said,))
    [back] = _decode(_encode(Collected(findings=(finding,), disabled=()))).findings
    [workload] = back.signatures
    assert dict(workload.labels) == dict(said.labels)
    assert workload.distinct == 1
    [one] = workload.signatures
    assert (one.key, one.text, one.lines, one.share, one.example) == ("abc", CERT, 300, 1.0, None)


async def test_earlier_days_not_asked_by_the_deadline_mark_nothing(sources: Sources) -> None:
    """A judge whose deadline came before any earlier day was asked says so and marks nothing new or gone."""
    check = ErrorLinesCheck(POLICY)
    window = day_window(TODAY, UTC_ZONE)
    today = await check(sources, window)
    earlier = [(past, await check(sources, past)) for past in earlier_windows(window, 4)]
    late = Sources(metrics=sources.metrics, logs=sources.logs, deadline=asyncio.get_running_loop().time())
    novelty = await judge(check, late, window, today, earlier, ShapeHistory(), earlier[0][0])
    assert novelty is not None
    assert (novelty.new, novelty.seen, novelty.gone) == (frozenset(), frozenset(), ())
    assert novelty.notes == (
        "new today: the earlier days' signatures were not asked before the deadline (the log backend's query slots "
        "stayed busy)",
    )


@dataclass
class ShapesCounted(RealLogs):
    """The real VictoriaLogs, noting the window of every shapes question asked."""

    asked: list[str] = field(default_factory=list)
    sampled: dict[str, int] = field(default_factory=dict)  # window → one minute in how many

    async def shapes(self, question: ShapeCount) -> Shapes:
        self.asked.append(question.window.label)
        self.sampled[question.window.label] = question.sample_every
        return await self.inner.shapes(question)


def _keyless(finding: Finding | None) -> Finding | None:
    """The finding as the trends' store gives it back: its signatures without the keys of every shape answered."""
    if finding is None:
        return None
    return replace(finding, signatures=tuple(replace(one, keys=frozenset()) for one in finding.signatures))


async def test_earlier_days_whose_digest_read_every_shape_are_not_asked_again(sources: Sources) -> None:
    """The earlier days' own shapes answers stand for their history; keyless (stored) ones are asked, same verdict."""
    check = ErrorLinesCheck(POLICY)
    window = day_window(TODAY, UTC_ZONE)
    today = await check(sources, window)
    earlier = [(past, await check(sources, past)) for past in earlier_windows(window, 4)]
    assert isinstance(sources.logs, VictoriaLogsSource)
    reused = ShapesCounted(sources.logs)
    novelty = await judge(check, replace(sources, logs=reused), window, today, earlier, ShapeHistory(), earlier[0][0])
    asked = ShapesCounted(sources.logs)
    stored = [(past, _keyless(finding)) for past, finding in earlier]
    again = await judge(check, replace(sources, logs=asked), window, today, stored, ShapeHistory(), earlier[0][0])
    assert novelty is not None
    assert again is not None
    assert (novelty.new, novelty.seen, novelty.compared, novelty.gone) == (again.new, again.seen, 3, again.gone)
    # The 12th and 13th held the relay's errors (their digests asked for its shapes); the 11th held no error line.
    assert reused.asked == []
    assert sorted(asked.asked) == ["2026-03-12", "2026-03-13"]


async def test_the_history_of_a_flood_is_read_from_a_sample_and_proves_nothing_new(sources: Sources) -> None:
    """Above the sample budget an earlier day's shapes are sampled too: what they show is seen, nothing is "new"."""
    check = ErrorLinesCheck(replace(POLICY, signature_sample_lines=100))
    window = day_window(TODAY, UTC_ZONE)
    today = await check(sources, window)
    earlier = [(past, await check(sources, past)) for past in earlier_windows(window, 4)]
    assert isinstance(sources.logs, VictoriaLogsSource)
    counted = ShapesCounted(sources.logs)
    novelty = await judge(check, replace(sources, logs=counted), window, today, earlier, ShapeHistory(), None)
    assert novelty is not None
    # The 13th's 300 certificate errors: 1 minute in 3 (its own digest's answer, sampled, does not stand for it);
    # the 12th's 55 lines were read whole by its digest, which stands for its history.
    assert counted.sampled == {"2026-03-13": 3}
    assert novelty.new == frozenset()  # the disk error may hide in the 13th's unread minutes
    assert _texts(today, novelty.seen) == {"ERROR relay: connect ETIMEDOUT <IP4>:<N>"}


def test_a_workloads_error_lines_are_bounded_by_what_its_days_finding_says() -> None:
    """Its own count if listed; the last listed one's if the list is full; none if it is not; else the day's total."""
    relay, other = {"namespace": NAMESPACE, "workload": "relay"}, {"namespace": NAMESPACE, "workload": "other"}

    def finding(value: float | None, *counts: float) -> Finding:
        offenders = tuple(
            Offender({"namespace": NAMESPACE, "workload": f"w{i}"}, count) for i, count in enumerate(counts)
        )
        return Finding(name="error_lines", status=Status.WARN, penalty=1, value=value, summary="", offenders=offenders)

    listed = replace(finding(900.0, 500.0), offenders=(Offender(relay, 400.0), Offender(other, 500.0)))
    assert error_lines_of(listed, relay, top=5) == 400.0
    assert error_lines_of(finding(900.0, 500.0, 300.0), relay, top=2) == 300.0  # full: at most the last one's
    assert error_lines_of(finding(900.0, 500.0), relay, top=2) == 0.0  # not full: every workload with errors listed
    assert error_lines_of(finding(900.0), relay, top=2) == 900.0  # a stored finding: the day's total
    assert error_lines_of(finding(None), relay, top=2) is None
    assert error_lines_of(None, relay, top=2) is None

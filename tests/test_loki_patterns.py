"""What the errors said on Loki: its patterns API (pattern ingester on) names the shapes, metric LogQL counts them.

A real Loki is started with ``-pattern-ingester.enabled=true``. Its pattern ingester mines only what it ingests live
and keeps about the last 3 hours, so these records are stamped "now" (the corpus days, backfilled with their own
dates, can never show a pattern, which `test_backend_parity` pins with the ingester off). Five workloads, and one
of them the day before:

* ``feeds/relay``: a connect-timeout storm (400 lines), a disk error (60), a login error carrying a password and an
  e-mail address (50), five lines of a rare error, and info lines;
* ``batch/sweeper``: ten error shapes of ten different lengths, 130 down to 40 lines: more than the 8 patterns counted;
* ``shop/cart``: ten info shapes of 100 lines each and one error shape of 40, which must still be counted;
* ``shop/till``: nine info shapes of 100 lines each and, at level error, one of 40 that says no error word (as klog's
  ``E1202 …`` does not): not among the 8 counted, which the note says;
* ``trace/deep``: errors longer than the 3,000 characters the ingester mines: no pattern at all;
* ``feeds/relay``'s storm the day before, from another of its pods: its lines are in Loki, its patterns are
  not (the ingester mines them as they arrive and prunes samples older than 3 hours; a short flush-check period
  makes that happen within seconds).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from digest.backends.http import Endpoint
from digest.backends.loki import PATTERN_CANDIDATES, LokiSource, usable_pattern
from digest.backends.prometheus import PrometheusSource
from digest.checks.contract import Finding, Sources, Window, WorkloadSignatures
from digest.checks.error_lines import ErrorLinesCheck, ErrorLinesPolicy
from digest.checks.log_questions import sampled_minutes
from digest.pipeline.novelty import ShapeHistory, judge
from digest.pipeline.trends import earlier_windows
from tests.test_loki_source import _need_loki

try:
    from digest.testbed.loki_server import LokiServer
except ImportError:  # pragma: no cover  # the testbed is part of the repository; this only guards a partial checkout
    LokiServer = None  # type: ignore[assignment,misc]

PATTERN_FLAGS = (
    "-pattern-ingester.enabled=true",
    "-pattern-ingester.min-ready-duration=0s",
    "-pattern-ingester.flush-check-period=2s",
)
RELAY = "relay-6c8d9f7b5-q2w4x"
YESTERDAYS_RELAY = "relay-6c8d9f7b5-h8j9k"
STORM = "ERROR feeds.ws relay: connect ETIMEDOUT 203.0.113.{i}:443 after {ms}ms"
DISK = "ERROR relay: disk full on /var/spool/{i}"
LOGIN = "ERROR relay: login failed password=hunter2-{i} for bob{i}@example.com"
RARE = "ERROR relay: cosmic ray flipped bit {i}"
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima")
# Every workload's errors cost a point, so that all five have their shapes asked.
POLICY = ErrorLinesPolicy(signature_workloads=5, warn_lines=20, crit_lines=500_000)
# Minutes before "now" that the records span: well inside the ingester's 3 hours.
SPAN_MINUTES = 20


def _record(moment: datetime, namespace: str, pod: str, message: str, level: str) -> dict[str, Any]:
    return {
        "kubernetes": {"container_name": "app", "pod_name": pod, "pod_namespace": namespace, "pod_node_name": "n1"},
        "message": message,
        "level": level,
        "stream": "stderr",
        "timestamp": moment.isoformat(timespec="microseconds").replace("+00:00", "Z"),
    }


def _spread(start: datetime, count: int, offset_us: int) -> list[datetime]:
    step = timedelta(minutes=SPAN_MINUTES) / count
    return [start + step * index + timedelta(microseconds=offset_us) for index in range(count)]


def _sweeper_message(family: int, index: int) -> str:
    return "ERROR " + " ".join(WORDS[family : family + 3 + family]) + f" failed {index}"


def _yesterday(start: datetime) -> list[dict[str, Any]]:
    return [
        _record(moment, "feeds", YESTERDAYS_RELAY, STORM.format(i=index, ms=index), "error")
        for index, moment in enumerate(_spread(start - timedelta(days=1), 100, 1))
    ]


def _records(start: datetime) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for index, moment in enumerate(_spread(start, 400, 1)):
        out.append(_record(moment, "feeds", RELAY, STORM.format(i=index % 250, ms=index * 7 % 999), "error"))
    for index, moment in enumerate(_spread(start, 60, 2)):
        out.append(_record(moment, "feeds", RELAY, DISK.format(i=index), "error"))
    for index, moment in enumerate(_spread(start, 50, 3)):
        out.append(_record(moment, "feeds", RELAY, LOGIN.format(i=index), "error"))
    for index, moment in enumerate(_spread(start, 5, 4)):
        out.append(_record(moment, "feeds", RELAY, RARE.format(i=index), "error"))
    for index, moment in enumerate(_spread(start, 300, 5)):
        out.append(_record(moment, "feeds", RELAY, f"GET /healthz 200 in {index % 90}ms", "info"))
    for family in range(10):
        for index, moment in enumerate(_spread(start, 130 - 10 * family, 10 + family)):
            out.append(_record(moment, "batch", "sweeper-0", _sweeper_message(family, index), "error"))
    for family in range(10):
        for index, moment in enumerate(_spread(start, 100, 40 + family)):
            words = " ".join(reversed(WORDS[family : family + 3 + family]))
            out.append(_record(moment, "shop", "cart-0", f"INFO {words} served {index}", "info"))
    for index, moment in enumerate(_spread(start, 40, 50)):
        out.append(_record(moment, "shop", "cart-0", f"ERROR cart: payment declined for order {index}", "error"))
    for family in range(9):
        for index, moment in enumerate(_spread(start, 100, 60 + family)):
            words = " ".join(WORDS[family : family + 2 + family])
            out.append(_record(moment, "shop", "till-0", f"INFO till {words} counted {index}", "info"))
    for index, moment in enumerate(_spread(start, 40, 70)):
        out.append(_record(moment, "shop", "till-0", f"E1202 till drawer jammed at slot {index}", "error"))
    for index, moment in enumerate(_spread(start, 30, 30)):
        out.append(_record(moment, "trace", "deep-0", "ERROR stack overflow " + "frame " * 600 + str(index), "error"))
    return sorted(out, key=lambda record: str(record["timestamp"]))


def _ndjson(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(record) + "\n" for record in records).encode()


def _mined(url: str, selector: str, start: datetime, end: datetime) -> int:
    form = {"query": selector, "start": start.isoformat(), "end": end.isoformat(), "step": "60s"}
    answer = httpx.post(f"{url}/loki/api/v1/patterns", data=form, timeout=10).json()
    return len(answer.get("data") or [])


class Pushed:
    """The Loki holding the records, and the window that holds them all (the last hour, to a minute past now)."""

    def __init__(self, server: Any, window: Window, start: datetime) -> None:
        self.server = server
        self.window = window
        self.start = start


@pytest.fixture(scope="module")
def pushed() -> Iterator[Pushed]:
    """A Loki with its pattern ingester on, the records pushed and their patterns mined (bounded poll)."""
    _need_loki()
    with LokiServer(extra_args=PATTERN_FLAGS) as server:
        now = datetime.now(UTC).replace(microsecond=0)
        start = now - timedelta(minutes=SPAN_MINUTES + 1)
        yesterday, records = _yesterday(start), _records(start)
        assert server.push_records([_ndjson(yesterday)]).lines == len(yesterday)
        assert server.push_records([_ndjson(records)]).lines == len(records)
        server.wait_for_lines(start - timedelta(minutes=1), now + timedelta(minutes=1), len(records))
        server.wait_for_lines(start - timedelta(days=1, minutes=1), start - timedelta(hours=23), len(yesterday))
        end = now + timedelta(minutes=2)
        window = Window(start=end - timedelta(hours=1), end=end, zone=UTC, label="the last hour")
        before = window.start - timedelta(days=1), end - timedelta(days=1)
        # The ingester mines in batches (its tee flushes every second) and prunes on its flush checks: wait until
        # today's shapes are there and yesterday's are gone.
        deadline = time.monotonic() + 90
        while (
            _mined(server.url, '{namespace="batch"}', window.start, end) < PATTERN_CANDIDATES + 2
            or _mined(server.url, '{namespace="feeds"}', window.start, end) < 4
            or _mined(server.url, '{namespace="shop"}', window.start, end) < 21
            or _mined(server.url, '{namespace="feeds"}', *before) > 0
        ):
            assert time.monotonic() < deadline, "the pattern ingester did not mine and prune within 90 s"
            time.sleep(0.5)
        yield Pushed(server, window, start)


@pytest.fixture
async def sources(pushed: Pushed) -> AsyncIterator[Sources]:
    # The check asks only the log backend; the metrics source is never sent a query.
    metrics = PrometheusSource(Endpoint(name="VictoriaMetrics", url="http://127.0.0.1:9"))
    logs = LokiSource(Endpoint(name="Loki", url=pushed.server.url, timeout_seconds=60))
    try:
        yield Sources(metrics=metrics, logs=logs)
    finally:
        await metrics.aclose()
        await logs.aclose()


def _workload(finding: Finding, namespace: str, workload: str) -> WorkloadSignatures:
    [found] = [one for one in finding.signatures if dict(one.labels) == {"namespace": namespace, "workload": workload}]
    return found


async def test_the_storm_is_named_and_counted_exactly(pushed: Pushed, sources: Sources) -> None:
    """The relay's storm is its top signature: Loki's pattern, its exact count, share, first and last time, example."""
    finding = await ErrorLinesCheck(POLICY)(sources, pushed.window)
    relay = _workload(finding, "feeds", "relay")
    storm, disk, login = relay.signatures
    assert (storm.text, storm.lines, storm.share) == (
        "ERROR feeds.ws relay: connect ETIMEDOUT <_> after <_>",
        400,
        400 / 515,
    )
    first, last = _spread(pushed.start, 400, 1)[0], _spread(pushed.start, 400, 1)[-1]
    assert storm.first == pytest.approx(first.timestamp(), abs=1e-6)
    assert storm.last == pytest.approx(last.timestamp(), abs=1e-6)
    assert storm.example == STORM.format(i=0, ms=0)
    assert (disk.lines, login.lines) == (60, 50)
    assert "healthz" not in " ".join(one.text for one in relay.signatures)  # info lines are not errors


async def test_secrets_in_the_patterns_and_examples_are_masked(pushed: Pushed, sources: Sources) -> None:
    """The login error's password and e-mail address appear in no signature text, example or note."""
    finding = await ErrorLinesCheck(POLICY)(sources, pushed.window)
    login = _workload(finding, "feeds", "relay").signatures[2]
    shown = " ".join([login.text, login.example or "", finding.signatures_note])
    assert "hunter2" not in shown
    assert "example.com" not in shown
    assert "password=<secret>" in (login.example or "")


async def test_lines_of_no_named_shape_are_counted_not_hidden(pushed: Pushed, sources: Sources) -> None:
    """The relay's five rare lines have no pattern: the shapes are "at least", and a note counts the lines left over."""
    finding = await ErrorLinesCheck(POLICY)(sources, pushed.window)
    relay = _workload(finding, "feeds", "relay")
    assert (relay.distinct, relay.capped) == (3, True)
    assert (
        "what the errors said: 5 of feeds/relay's 515 error lines are of no shape named here (Loki's pattern "
        "ingester names only the frequent shapes it mined in about the last 3 hours)"
    ) in finding.signatures_note


async def test_only_the_largest_patterns_are_counted(pushed: Pushed, sources: Sources) -> None:
    """The sweeper's ten shapes: 8 counted, the largest first (requests stay bounded); the other two (90 lines) not."""
    finding = await ErrorLinesCheck(POLICY)(sources, pushed.window)
    sweeper = _workload(finding, "batch", "sweeper")
    assert [one.lines for one in sweeper.signatures] == [130, 120, 110]
    assert (sweeper.distinct, sweeper.capped) == (PATTERN_CANDIDATES, True)
    assert (
        "90 of batch/sweeper's 850 error lines are of no shape named here (Loki's pattern ingester names only the "
        "frequent shapes it mined in about the last 3 hours, and 8 of its 10 patterns here were counted (those "
        "saying an error word first, then the largest))"
    ) in finding.signatures_note


async def test_patterns_that_say_an_error_word_are_counted_first(pushed: Pushed, sources: Sources) -> None:
    """The cart's error shape is the smallest of its 11 patterns, yet counted: the ones saying "error" go first."""
    finding = await ErrorLinesCheck(POLICY)(sources, pushed.window)
    cart = _workload(finding, "shop", "cart")
    [declined] = cart.signatures
    assert (declined.text, declined.lines, declined.share) == ("ERROR cart: payment declined for order <_>", 40, 1.0)
    assert (cart.distinct, cart.capped) == (1, False)
    assert "shop/cart" not in finding.signatures_note


async def test_an_error_shape_outside_the_counted_patterns_is_said(pushed: Pushed, sources: Sources) -> None:
    """The till's errors say no error word and are its smallest pattern: not counted, and the note says so."""
    finding = await ErrorLinesCheck(POLICY)(sources, pushed.window)
    assert not [one for one in finding.signatures if dict(one.labels).get("workload") == "till"]
    assert (
        "what the errors said: none of the 8 patterns counted (of 10 Loki's pattern ingester holds for these streams) "
        "is of these lines"
    ) in finding.signatures_note


async def test_requests_do_not_grow_with_the_lines(pushed: Pushed, sources: Sources) -> None:
    """One workload's shapes cost a bound that does not depend on its lines.

    At most: the patterns (two selectors), each counted pattern and the rest per error-rule term, and the first and
    last line of each shown shape.
    """
    check = ErrorLinesCheck(POLICY)
    logs = sources.logs
    assert isinstance(logs, LokiSource)
    before = logs.queries_sent
    answer = await logs.shapes(check.shape_question(pushed.window, "batch", {"sweeper-0"}))
    terms = 2  # the error rule's inclusion–exclusion terms that are asked (the contradictory one is not)
    assert logs.queries_sent - before <= 2 + (PATTERN_CANDIDATES + 1) * terms + 2 * len(answer.top)


def _sampled(moments: list[datetime], minutes: list[tuple[int, int]]) -> list[int]:
    """The indexes of the lines stamped in the sampled minutes."""
    return [index for index, moment in enumerate(moments) if any(a <= moment.timestamp() < b for a, b in minutes)]


def _in_sample(moments: list[datetime], minutes: list[tuple[int, int]]) -> int:
    return len(_sampled(moments, minutes))


def _day_with_a_sampled_minute_in(pushed: Pushed, every: int) -> Window:
    """A day ending at or after the hour's end, moved by whole minutes until a sampled minute holds relay lines."""
    for shift in range(every):
        end = pushed.window.end + timedelta(minutes=shift)
        day = Window(start=end - timedelta(days=1), end=end, zone=UTC, label="the last day")
        if _in_sample(_spread(pushed.start, 400, 1), sampled_minutes(day, every)) >= 10:
            return day
    raise AssertionError("no shift puts a sampled minute among the relay's lines")  # pragma: no cover


@pytest.mark.parametrize(("span", "asked", "every"), [("hour", 3, 3), ("day", 23, 23), ("day", 11, 23)])
async def test_a_sample_s_shapes_are_the_lines_of_its_minutes_exactly(
    pushed: Pushed, sources: Sources, span: str, asked: int, every: int
) -> None:
    """Shapes of 1 minute in N: said so; each shape's lines, first, last and example, and the unshaped, the sample's.

    A day in 23 is error_lines' sample of the 07-20 flood: 63 minutes or one fewer, one query per count. A day in 11
    would be 131 minutes: Loki reads at most 64, 1 in 23, and says so.
    """
    logs = sources.logs
    assert isinstance(logs, LokiSource)
    window = pushed.window if span == "hour" else _day_with_a_sampled_minute_in(pushed, every)
    question = replace(ErrorLinesCheck(POLICY).shape_question(window, "feeds", {RELAY}), sample_every=asked)
    minutes = sampled_minutes(window, every)
    assert logs.writer.sampled_query(window, question.lines, every).count("count_over_time") == len(minutes)
    answer = await logs.shapes(question)
    assert answer.sampled_every == every
    storm, disk, login = (_spread(pushed.start, count, offset) for count, offset in ((400, 1), (60, 2), (50, 3)))
    in_storm, in_disk, in_login = _sampled(storm, minutes), _sampled(disk, minutes), _sampled(login, minutes)
    by_example = {one.example: (one.lines, one.first, one.last) for one in answer.top}
    assert by_example == {
        STORM.format(i=in_storm[0] % 250, ms=in_storm[0] * 7 % 999): (
            len(in_storm),
            pytest.approx(storm[in_storm[0]].timestamp(), abs=1e-6),
            pytest.approx(storm[in_storm[-1]].timestamp(), abs=1e-6),
        ),
        DISK.format(i=in_disk[0]): (
            len(in_disk),
            pytest.approx(disk[in_disk[0]].timestamp(), abs=1e-6),
            pytest.approx(disk[in_disk[-1]].timestamp(), abs=1e-6),
        ),
        LOGIN.format(i=in_login[0]): (
            len(in_login),
            pytest.approx(login[in_login[0]].timestamp(), abs=1e-6),
            pytest.approx(login[in_login[-1]].timestamp(), abs=1e-6),
        ),
    }
    assert answer.unshaped == _in_sample(_spread(pushed.start, 5, 4), minutes)


async def test_a_flood_s_signatures_on_loki_are_estimates_from_the_sample(pushed: Pushed, sources: Sources) -> None:
    """Over the sample budget, the check's relay signatures are N × the sample's lines, and its unshaped lines said."""
    finding = await ErrorLinesCheck(replace(POLICY, signature_sample_lines=200))(sources, pushed.window)
    relay = _workload(finding, "feeds", "relay")
    minutes = sampled_minutes(pushed.window, 3)  # 515 error lines over 200: 1 minute in 3
    assert (relay.sampled_every, relay.capped) == (3, True)
    assert [one.lines for one in relay.signatures] == [
        3 * _in_sample(_spread(pushed.start, count, offset), minutes) for count, offset in ((400, 1), (60, 2), (50, 3))
    ]
    rare = _in_sample(_spread(pushed.start, 5, 4), minutes)
    said = f"what the errors said: ≈{3 * rare} of feeds/relay's 515 error lines (sampled) are of no shape named here"
    assert (said in finding.signatures_note) == (rare > 0)


async def test_errors_the_ingester_never_mined_have_no_shape(pushed: Pushed, sources: Sources) -> None:
    """The trace workload's lines are too long to mine: no signature, a note that says Loki holds no pattern."""
    finding = await ErrorLinesCheck(POLICY)(sources, pushed.window)
    assert not [one for one in finding.signatures if one.labels.get("namespace") == "trace"]
    assert (
        "what the errors said: Loki's pattern ingester holds no pattern of these lines in this window (it keeps "
        "what it mined in about the last 3 hours)"
    ) in finding.signatures_note


async def test_an_earlier_day_loki_forgot_marks_nothing_new(pushed: Pushed, sources: Sources) -> None:
    """Loki forgot yesterday's relay patterns: the relay's signatures are not marked new; the others' are.

    Yesterday's relay errors are counted (the day was seen whole) but their patterns are gone, so a note says why
    nothing is marked; the sweeper and the cart wrote no line yesterday, so their shapes are new for sure.
    """
    check = ErrorLinesCheck(POLICY)
    today = await check(sources, pushed.window)
    earlier = [(past, await check(sources, past)) for past in earlier_windows(pushed.window, 2)]
    novelty = await judge(check, sources, pushed.window, today, earlier, ShapeHistory(), earlier[0][0])
    assert novelty is not None
    relay = {one.key for one in _workload(today, "feeds", "relay").signatures}
    sweeper = {one.key for one in _workload(today, "batch", "sweeper").signatures}
    cart = {one.key for one in _workload(today, "shop", "cart").signatures}
    assert novelty.new == sweeper | cart
    assert not relay & (novelty.new | novelty.seen)
    assert novelty.compared == 1  # the day before yesterday holds no line at all: not read as "no error"
    assert novelty.notes == (
        "new today: feeds/relay's earlier days could not be read (Loki unsupported: Loki's pattern ingester holds no "
        "pattern of these lines in this window (it keeps what it mined in about the last 3 hours))",
    )


@pytest.mark.parametrize(
    ("pattern", "usable"),
    [
        ("ERROR relay: <_> after <_>", "ERROR relay: <_> after <_>"),
        ("<_><_> reset <_>", "<_> reset <_>"),  # two captures side by side are one
        ("<_> <_>", None),  # nothing literal to match
        ("got <nil> from <_>", None),  # a line's own "<nil>" would be read as a named capture
    ],
)
def test_patterns_are_made_usable_as_line_filters(pattern: str, usable: str | None) -> None:
    """A pattern becomes a ``|>`` filter only when Loki reads it as the ingester meant it."""
    assert usable_pattern(pattern) == usable


def test_the_loki_patterns_benchmark_runs_and_names_its_storm() -> None:
    """`bench.loki_patterns` (the docs' Loki cost figures) loads, measures and prints the storm it pushed."""
    _need_loki()
    result = subprocess.run(  # our own module, fixed arguments
        # One round: the programme's plumbing and its answers, not medians worth publishing (3 rounds cost 20 s more).
        [sys.executable, "-m", "bench.loki_patterns", "--lines", "4000", "--tail", "5", "--rounds", "1"],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2_000:]
    assert "| count |" in result.stdout
    assert "4,000 error lines |" in result.stdout
    assert "6 shapes, top 3,600 (ERROR feeds.ws relay: connect ETIMEDOUT <_> after …), 0 unshaped" in result.stdout
    assert "| shapes sampled |" in result.stdout
    assert "1 minute in 3: " in result.stdout  # 1 in 2 asked: Loki reads at most 64 of the 3 hours' minutes

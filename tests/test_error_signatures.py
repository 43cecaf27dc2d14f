"""What the errors said: message shapes counted in a real VictoriaLogs, redacted before anything shows them.

One hour of a workload's error lines — three shapes that carry a token, an e-mail address, a bearer JWT, a password
and a URL with credentials, plus rarer shapes — is ingested into a private VictoriaLogs. The error_lines check asks
the backend for the shapes (never the lines): counts, shares, first and last times and the number of distinct shapes
must be exact, and no planted secret may reach the text, the HTML, the JSON or the logs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import httpx
import pytest

from digest.backends.http import Endpoint
from digest.backends.prometheus import PrometheusSource
from digest.backends.victorialogs import VictoriaLogsSource, readable_shape
from digest.checks.contract import Finding, SourceError, SourceErrorKind, Sources, Status, Window
from digest.checks.error_lines import ErrorLinesCheck, ErrorLinesPolicy
from digest.checks.log_questions import (
    EVERY_LINE,
    AnswerClock,
    CountRow,
    Filter,
    Is,
    LineCount,
    LineSeries,
    PeakCount,
    ShapeCount,
    Shapes,
    every,
    sampled_minutes,
)
from digest.checks.redaction import redact, shorten
from digest.output.render import Renderer
from digest.pipeline.policy import Policy
from digest.pipeline.score import grade
from digest.testbed.embedded import EmbeddedBackends

START = datetime(2026, 3, 2, 10, tzinfo=UTC)
END = START + timedelta(hours=1)
WINDOW = Window(START, END, ZoneInfo("UTC"), "2026-03-02 10:00–11:00")
NAMESPACE = "payments"
POD = "checkout-7d9f8c6b4d-xk2lp"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZUBleGFtcGxlLmNvbSJ9.c2lnbmF0dXJlLW9mLXRoZS10b2tlbg"
SECRETS = (
    "tok_live_SECRET",
    "alice@example.com",
    JWT,
    "eyJhbGciOiJIUzI1NiJ9",
    "hunter2pass",
    "dbadmin:s3cr3tpw",
    "s3cr3tpw",
)
# (message template, lines): 2,000 + 800 + 300 error lines, then four rare shapes of 10 each.
SHAPES = (
    ("payment {i} failed after {ms}ms token=tok_live_SECRET{i} user=alice@example.com", 2_000),
    ("upstream 10.1.{b}.{c}:8443 reset; Authorization: Bearer " + JWT, 800),
    ("db connect postgres://dbadmin:s3cr3tpw@db-{i}.internal:5432/pay password=hunter2pass refused", 300),
    *((f"rare failure kind {kind} code {{i}}", 10) for kind in ("alpha", "beta", "gamma", "delta")),
)
ERROR_LINES = sum(lines for _, lines in SHAPES)
# An hour later, outside WINDOW: shapes longer than the 160 characters a shape is cut to, in bytes or characters.
LONG_START = START + timedelta(hours=2)
LONG_WINDOW = Window(LONG_START, LONG_START + timedelta(hours=1), ZoneInfo("UTC"), "2026-03-02 12:00–13:00")
# Words without the letters a-f, which `collapse_nums` would take for hex numbers: the shapes read as written.
LONG_HEAD = "timing out on mirror sink, worst run in pool " * 4  # 180 characters, one byte each
CYRILLIC = "ошибка платежа повторите позже "  # 31 characters, 58 bytes
LONG_SHAPES = (
    (LONG_HEAD + "quux", 30),  # cut to its first 160 characters: the two are one shape
    (LONG_HEAD + "xyzzy", 20),
    (CYRILLIC * 4 + "один", 12),  # 128 characters in 240 bytes: whole
    (CYRILLIC * 4 + "два", 8),
    (CYRILLIC * 6, 5),  # 186 characters: cut to 160
    ("short timing out", 3),
)


def _records() -> Iterator[bytes]:
    offset = 0
    for template, lines in SHAPES:
        for index in range(lines):
            moment = START + timedelta(seconds=60 + (offset % 3_000))
            offset += 1
            message = template.format(i=index, ms=index % 997, b=index % 200, c=index % 250)
            record = {
                "timestamp": moment.isoformat().replace("+00:00", "Z"),
                "message": message,
                "level": "error",
                "kubernetes.pod_namespace": NAMESPACE,
                "kubernetes.pod_name": POD,
                "kubernetes.container_name": "app",
                "stream": "stderr",
            }
            yield (json.dumps(record) + "\n").encode()


def _long_records() -> Iterator[bytes]:
    offset = 0
    for message, lines in LONG_SHAPES:
        for _ in range(lines):
            offset += 1
            record = {
                "timestamp": (LONG_START + timedelta(seconds=offset)).isoformat().replace("+00:00", "Z"),
                "message": message,
                "level": "error",
                "kubernetes.pod_namespace": NAMESPACE,
                "kubernetes.pod_name": POD,
                "kubernetes.container_name": "app",
            }
            yield (json.dumps(record, ensure_ascii=False) + "\n").encode()


@pytest.fixture(scope="module")
def secret_backends() -> Iterator[EmbeddedBackends]:
    """A private VictoriaMetrics + VictoriaLogs pair holding the secret-bearing hour and, later, the long shapes."""
    with EmbeddedBackends() as backends:
        backends.ingest_logs(_records())
        backends.ingest_logs(_long_records())
        backends.wait_for_logs(START, END, ERROR_LINES)
        backends.wait_for_logs(LONG_WINDOW.start, LONG_WINDOW.end, sum(lines for _, lines in LONG_SHAPES))
        yield backends


@pytest.fixture
async def sources(secret_backends: EmbeddedBackends) -> AsyncIterator[Sources]:
    metrics = PrometheusSource(Endpoint(name="VictoriaMetrics", url=secret_backends.metrics.url, timeout_seconds=20))
    logs = VictoriaLogsSource(Endpoint(name="VictoriaLogs", url=secret_backends.logs.url, timeout_seconds=20))
    try:
        yield Sources(metrics=metrics, logs=logs)
    finally:
        await metrics.aclose()
        await logs.aclose()


async def _finding(sources: Sources, **policy: object) -> Finding:
    return await ErrorLinesCheck(ErrorLinesPolicy(**policy))(sources, WINDOW)  # type: ignore[arg-type]  # test overrides


async def test_the_top_shapes_are_counted_in_the_backend_with_their_times(sources: Sources) -> None:
    """The three largest shapes, their exact counts and shares, first/last times, and 7 distinct shapes in all."""
    finding = await _finding(sources)
    assert finding.status is Status.WARN  # 3,140 error lines in an hour: over the scaled 50,000 a day
    [workload] = finding.signatures
    assert dict(workload.labels) == {"namespace": NAMESPACE, "workload": "checkout"}
    assert (workload.distinct, workload.capped) == (7, False)
    assert [one.lines for one in workload.signatures] == [2_000, 800, 300]
    assert [round(one.share, 3) for one in workload.signatures] == [
        round(n / ERROR_LINES, 3) for n in (2_000, 800, 300)
    ]
    assert workload.signatures[0].text == "payment <N> failed after <N>ms token=<secret> user=<email>"
    assert workload.signatures[1].text == "upstream <IP4>:<N> reset; Authorization: Bearer <jwt>"
    assert workload.signatures[2].text.startswith(
        "db connect postgres://<secret>@db-<N>.internal:<N>/pay password=<secret>"
    )
    first = workload.signatures[0]
    assert datetime.fromtimestamp(first.first, UTC) == START + timedelta(seconds=60)
    assert datetime.fromtimestamp(first.last, UTC) == START + timedelta(seconds=60 + 1_999)
    assert first.example is not None
    assert first.example.startswith("payment 0 failed after 0ms token=<secret>")
    assert all(len(one.example or "") <= 120 for one in workload.signatures)


async def test_a_shape_is_cut_to_its_first_160_characters_however_its_bytes_fall(sources: Sources) -> None:
    """Shapes over 160 characters are cut and grouped by their cut; multi-byte ones within 160 characters stay whole."""
    lines = every(Is("namespace", NAMESPACE), Is("pod", POD))
    answer = await sources.logs.shapes(ShapeCount(window=LONG_WINDOW, lines=lines, top=10))
    by_lines = {shape.lines: shape.key for shape in answer.top}
    assert sorted(by_lines) == [3, 5, 8, 12, 50]
    assert by_lines[50] == LONG_HEAD[:160]
    assert by_lines[12] == CYRILLIC * 4 + "один"
    assert by_lines[8] == CYRILLIC * 4 + "два"
    assert by_lines[5] == (CYRILLIC * 6)[:160]
    assert by_lines[3] == "short timing out"
    assert answer.distinct == 5


async def test_a_flood_s_shapes_are_read_from_a_sample_of_its_minutes(sources: Sources) -> None:
    """Over the sample budget: the shapes of 1 minute in N, the sample's lines exactly, estimates of N × them, said."""
    finding = await _finding(sources, signature_sample_lines=500)  # 3,140 lines: 1 minute in 7
    [workload] = finding.signatures
    assert workload.sampled_every == 7
    assert workload.capped  # a sample's distinct shapes are "at least"
    minutes = sampled_minutes(WINDOW, 7)
    assert [start for start, _ in minutes][:2] == [int(START.timestamp()) + 180, int(START.timestamp()) + 600]
    # What the sample holds, counted directly per minute in the backend: each shape's lines are 7 × its share of it.
    rows = await sources.logs.count(
        LineCount(window=WINDOW, scope=Is("pod", POD), columns=(("lines", EVERY_LINE),), by=(), bucket_seconds=60)
    )
    in_sample = sum(row.counts.get("lines", 0.0) for row in rows if (row.bucket, row.bucket + 60) in minutes)
    assert sum(one.lines for one in workload.signatures) <= 7 * in_sample
    assert workload.signatures[0].text == "payment <N> failed after <N>ms token=<secret> user=<email>"
    # 2,000 of the hour's 3,140 error lines: the estimate from 1 minute in 7 is within 15 %.
    assert abs(workload.signatures[0].lines - 2_000) <= 300
    digest = grade("c", WINDOW, [finding], (), Policy())
    text = Renderer().render(digest, "text")
    assert "sampled: the counts are estimates" in text
    assert "• ≈" in text


async def test_no_planted_secret_reaches_text_html_json_or_logs(
    sources: Sources, caplog: pytest.LogCaptureFixture
) -> None:
    """Tokens, a JWT, an e-mail address, a password and URL credentials appear in no output, chart or log record."""
    from digest.output.chart import chart_caption, chart_drawing
    from digest.output.chart_data import collect_chart_data
    from digest.output.render import most_said

    caplog.set_level(logging.DEBUG)
    digest = grade("prod", WINDOW, [await _finding(sources)], [], Policy())
    renderer = Renderer()
    outputs = {fmt: renderer.render(digest, fmt) for fmt in ("text", "html", "json")}
    said = most_said(digest)
    assert said == (
        "Most said: payments/checkout · 64 % of its errors · payment <N> failed after <N>ms token=<secret> user=<email>"
    )
    data = await collect_chart_data(sources, WINDOW, Policy())
    outputs["caption"] = chart_caption("WARNING 9/10 · prod", data, said)
    assert outputs["caption"].split("\n")[2] == said  # the photo's caption gains the line under its panels
    drawing = chart_drawing(data, "WARNING 9/10 · prod", (), said)
    outputs["chart"] = "\n".join(text.text for text in drawing.texts)
    assert "payment <N> failed" in outputs["chart"]
    assert "What the errors said" in outputs["text"]
    assert "payments/checkout · 3 of its 7 error signatures" in outputs["text"]
    assert "• 2,000 (64 %) 10:01–10:34 · <code>payment &lt;N&gt; failed" in outputs["html"]
    for fmt, output in (*outputs.items(), ("logs", caplog.text)):
        for secret in SECRETS:
            assert secret not in output, (fmt, secret)


async def test_show_log_examples_false_keeps_only_the_shapes(sources: Sources) -> None:
    """With show_log_examples off, no signature carries an example and the text shows no line as written."""
    finding = await _finding(sources, show_log_examples=False)
    assert all(one.example is None for workload in finding.signatures for one in workload.signatures)
    text = Renderer().render(grade("prod", WINDOW, [finding], [], Policy()), "text")
    assert "e.g." not in text
    assert "payment 0 failed" not in text


async def test_a_distinct_count_at_its_bound_says_at_least(sources: Sources) -> None:
    """An answer cut at the question's group limit says its number of shapes is a lower bound."""
    lines = Is("namespace", NAMESPACE)
    shapes = await sources.logs.shapes(ShapeCount(window=WINDOW, lines=lines, top=2, group_limit=3))
    assert (shapes.distinct, shapes.capped) == (3, True)
    assert [shape.lines for shape in shapes.top] == [2_000, 800]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("login failed user=bob@example.com password=hunter2", "login failed user=<email> password=<secret>"),
        (
            '{"password": "p@ss w", "api_key":"k-1", "msg":"x"}',
            '{"password": "<secret>", "api_key":"<secret>", "msg":"x"}',
        ),
        ("GET https://admin:pw@db:5432/x", "GET https://<secret>@db:5432/x"),
        ("Authorization: Bearer abcdefgh.ijklmnop", "Authorization: Bearer <secret>"),
        (f"session {JWT} expired", "session <jwt> expired"),
        ("sha deadbeefdeadbeefdeadbeefdeadbeef01 ok", "sha <hex> ok"),
        ("blob dGhpcyBpcyBhIHNlY3JldCBrZXkgd2l0aCAxMjM0NTY3ODk= end", "blob <base64> end"),
        ('secret="two words" left', "secret=<secret> left"),
        ("ERROR auth: connection refused", "ERROR auth: connection refused"),
        ("/var/lib/kubelet/pods/0f3c8a8e-2b6f-4e1b-9a3c-7d2f1e5b6a90/volumes", None),
        ("connect ETIMEDOUT 203.0.113.7:443", None),
        # Shapes: a placeholder for part of an address (Loki's patterns) leaves the rest to mask.
        ("login failed for <_>@example.com", "login failed for <email>"),
        ("mail to bob@<_> bounced", "mail to <email> bounced"),
        ("wait <_> @ <N> ms", None),
    ],
)
def test_redaction_masks_each_kind_and_leaves_plain_text(line: str, expected: str | None) -> None:
    """Each kind of secret becomes its marker; a path, a UUID, an address and a plain message stay as written."""
    assert redact(line) == (line if expected is None else expected)


def test_a_cut_line_ends_with_an_ellipsis_on_one_line() -> None:
    """Examples are cut to 120 characters on one line, after redaction, so a cut cannot reveal half a secret."""
    assert shorten("a\nb  c") == "a b c"
    cut = shorten("x" * 200)
    assert len(cut) == 120
    assert cut.endswith("…")


def test_words_collapse_nums_took_for_hex_are_put_back() -> None:
    """collapse_nums turns "feeds" into "<N>s"; the example restores letter-only runs, never digits."""
    shape = "ERROR <N>s.ws relay: connect ETIMEDOUT <IP4>:<N>"
    example = "ERROR feeds.ws relay: connect ETIMEDOUT 203.0.113.7:443"
    assert readable_shape(shape, example) == "ERROR feeds.ws relay: connect ETIMEDOUT <IP4>:<N>"
    assert readable_shape("code <N>", "code 42") == "code <N>"
    assert readable_shape("cut <IP", "cut 10.0.0.1") == "cut <IP"


@dataclass
class RealLogs:
    """The real VictoriaLogs, every question passed on: a base for sources that change one answer."""

    inner: VictoriaLogsSource

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def language(self) -> str:
        return self.inner.language

    async def count(self, question: LineCount) -> list[CountRow]:
        return await self.inner.count(question)

    async def peak(self, question: PeakCount) -> list[CountRow]:
        return await self.inner.peak(question)

    async def series(self, question: LineCount) -> list[LineSeries]:
        return await self.inner.series(question)

    async def shapes(self, question: ShapeCount) -> Shapes:
        return await self.inner.shapes(question)

    async def values(self, name: str, window: Window) -> list[str]:
        return await self.inner.values(name, window)

    def reading_query(self, window: Window, lines: Filter, most_repeated: bool = False) -> str:
        return self.inner.reading_query(window, lines, most_repeated)


@dataclass
class ShapelessLogs(RealLogs):
    """The real VictoriaLogs for counts, and a shapes question that fails as ``kind`` says."""

    kind: SourceErrorKind

    async def shapes(self, question: ShapeCount) -> Shapes:
        raise SourceError("VictoriaLogs", self.kind, "shapes refused for the test")


@pytest.mark.parametrize(
    ("kind", "note"),
    [
        (SourceErrorKind.UNSUPPORTED, "what the errors said: shapes refused for the test"),
        (SourceErrorKind.TIMEOUT, "what the errors said: the log backend did not answer (VictoriaLogs timeout: "),
    ],
)
async def test_shapes_that_fail_leave_a_note_and_the_grade(sources: Sources, kind: SourceErrorKind, note: str) -> None:
    """A backend that cannot or does not answer the shapes: same status, penalty and count, and a note saying why."""
    assert isinstance(sources.logs, VictoriaLogsSource)
    failing = Sources(metrics=sources.metrics, logs=ShapelessLogs(sources.logs, kind))
    finding = await ErrorLinesCheck(ErrorLinesPolicy())(failing, WINDOW)
    reference = await _finding(sources)
    assert (finding.status, finding.penalty, finding.value) == (reference.status, reference.penalty, reference.value)
    assert finding.signatures == ()
    assert finding.signatures_note.startswith(note)
    text = Renderer().render(grade("prod", WINDOW, [finding], [], Policy()), "text")
    assert f"? {finding.signatures_note}" in text


class UnshapedLogs(ShapelessLogs):
    """The real VictoriaLogs, whose shapes answer also counts 7 lines of no shape (as Loki's patterns leave some)."""

    async def shapes(self, question: ShapeCount) -> Shapes:
        answer = await self.inner.shapes(question)
        return replace(answer, unshaped=7.0, unshaped_why="the test's backend names only some")


async def test_a_sample_s_lines_of_no_shape_are_said_as_an_estimate(sources: Sources) -> None:
    """A sampled answer's unshaped lines are said too: N × the sample's, with the sample named, not hidden."""
    assert isinstance(sources.logs, VictoriaLogsSource)
    unshaped = Sources(metrics=sources.metrics, logs=UnshapedLogs(sources.logs, SourceErrorKind.UNSUPPORTED))
    finding = await _finding(unshaped, signature_sample_lines=500)  # 3,140 lines: 1 minute in 7
    assert (
        f"what the errors said: ≈49 of {NAMESPACE}/checkout's 3,140 error lines (sampled) are of no "
        "shape named here (the test's backend names only some)"
    ) in finding.signatures_note


class HoldingTransport(httpx.AsyncBaseTransport):
    """The real transport, where chosen requests take longer: another check's slow counts, or a slow shapes answer.

    ``hold`` delays every request whose body says ``marker``; ``crowd`` makes each count request of the check (not
    a shapes one, not a marked one) start a marked count of ``crowd_source`` at once, which queues for the slot
    before the check's next request does.
    """

    def __init__(self, hold: float, marker: bytes) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.hold = hold
        self.marker = marker
        self.crowd_source: VictoriaLogsSource | None = None
        self.crowd: list[asyncio.Task[list[CountRow]]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = request.content
        if self.marker in body:
            await asyncio.sleep(self.hold)
        elif self.crowd_source is not None and b"collapse_nums" not in body:
            self.crowd.append(asyncio.ensure_future(self.crowd_source.count(MARKED_LINES)))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await asyncio.gather(*self.crowd, return_exceptions=True)
        await self.inner.aclose()


# A count no check asks (the error lines of a made-up pod): what "another check's query" is in these tests.
MARKED_POD = "another-check-holds-the-slot"
MARKED_LINES = LineCount(window=WINDOW, scope=Is("pod", MARKED_POD))


@pytest.fixture
async def one_slot(secret_backends: EmbeddedBackends) -> AsyncIterator[tuple[Sources, HoldingTransport]]:
    """Sources whose log backend takes one query at a time, through a transport that holds the marked ones."""
    transport = HoldingTransport(hold=1.5, marker=MARKED_POD.encode())
    endpoint = Endpoint(name="VictoriaLogs", url=secret_backends.logs.url, timeout_seconds=20, max_concurrency=1)
    logs = VictoriaLogsSource(endpoint, transport=transport)
    metrics = PrometheusSource(Endpoint(name="VictoriaMetrics", url=secret_backends.metrics.url, timeout_seconds=20))
    try:
        yield Sources(metrics=metrics, logs=logs), transport
    finally:
        await logs.aclose()
        await metrics.aclose()
        await transport.aclose()


async def test_the_shapes_seconds_start_when_the_backend_is_asked(one_slot: tuple[Sources, HoldingTransport]) -> None:
    """Shapes that wait 1.5 s for the one slot behind another count still get their whole 1 s once sent."""
    sources, _ = one_slot
    assert isinstance(sources.logs, VictoriaLogsSource)
    clock = AnswerClock(1.0)
    loop = asyncio.get_running_loop()
    holder = asyncio.ensure_future(sources.logs.count(MARKED_LINES))
    await asyncio.sleep(0)  # the marked count takes the slot first
    asked = loop.time()
    shapes = await sources.logs.shapes(ShapeCount(window=WINDOW, lines=Is("namespace", NAMESPACE), clock=clock))
    waited = loop.time() - asked
    await holder
    assert [shape.lines for shape in shapes.top] == [2_000, 800, 300]
    assert clock.started
    assert waited > clock.seconds  # a timeout around the question would have given up


async def test_the_check_waits_for_a_slot_and_still_says_what_the_errors_said(
    one_slot: tuple[Sources, HoldingTransport],
) -> None:
    """With other checks' counts queued ahead for seconds, a 1 s shapes allowance still shows the shapes, no note."""
    sources, transport = one_slot
    assert isinstance(sources.logs, VictoriaLogsSource)
    transport.crowd_source = sources.logs
    finding = await _finding(sources, signature_timeout_seconds=1.0)
    assert transport.crowd, "no other query was queued ahead of the shapes: the test proves nothing"
    assert finding.signatures_note == ""
    [workload] = finding.signatures
    assert [one.lines for one in workload.signatures] == [2_000, 800, 300]


async def test_a_backend_slower_than_the_allowance_leaves_one_note_and_the_grade(
    secret_backends: EmbeddedBackends, sources: Sources
) -> None:
    """Shapes that take 1.5 s against a 0.5 s allowance: "no answer within 0.5 s of asking", the count unchanged."""
    transport = HoldingTransport(hold=1.5, marker=b"collapse_nums")
    endpoint = Endpoint(name="VictoriaLogs", url=secret_backends.logs.url, timeout_seconds=20)
    slow = VictoriaLogsSource(endpoint, transport=transport)
    try:
        finding = await _finding(Sources(metrics=sources.metrics, logs=slow), signature_timeout_seconds=0.5)
    finally:
        await slow.aclose()
        await transport.aclose()
    reference = await _finding(sources)
    assert (finding.status, finding.penalty, finding.value) == (reference.status, reference.penalty, reference.value)
    assert finding.signatures == ()
    assert finding.signatures_note == "what the errors said: no answer within 0.5 s of asking"


async def test_shapes_not_asked_by_the_deadline_say_so_and_keep_the_grade(sources: Sources) -> None:
    """A check whose deadline has come when it gets to the shapes gives them up with a note; the count stands."""
    late = Sources(metrics=sources.metrics, logs=sources.logs, deadline=asyncio.get_running_loop().time())
    finding = await _finding(late)
    reference = await _finding(sources)
    assert (finding.status, finding.penalty, finding.value) == (reference.status, reference.penalty, reference.value)
    assert finding.signatures == ()
    assert finding.signatures_note.startswith("what the errors said: not asked before the check's deadline")


async def test_a_request_sent_after_its_clock_ran_out_is_not_sent(sources: Sources) -> None:
    """A shapes question whose seconds are spent fails at once with a TIMEOUT that names its allowance."""
    assert isinstance(sources.logs, VictoriaLogsSource)
    clock = AnswerClock(0.5)
    clock.start(asyncio.get_running_loop().time() - 1.0)
    sent = sources.logs.queries_sent
    with pytest.raises(SourceError) as raised:
        await sources.logs.shapes(ShapeCount(window=WINDOW, lines=Is("namespace", NAMESPACE), clock=clock))
    assert raised.value.kind is SourceErrorKind.TIMEOUT
    assert "no answer within the 0.5 s its question allows" in str(raised.value)
    assert sources.logs.queries_sent == sent

"""Hostile labels and log lines, through real backends: nothing raw reaches a reader, and shown queries still run.

A namespace, a pod and a node carry NUL, bidi overrides (U+202E, U+2066), C1 and DEL controls, newlines, quotes,
backslashes, ``|``, ``)``, ``$`` and non-Latin text, and the pod name is 300 characters long. They are ingested into a
real VictoriaLogs and VictoriaMetrics, checked, graded and rendered: the text, the HTML (checked with the fake
Telegram's parser) and the chart carry visible escapes only; the JSON is valid with exact values written as escapes;
the LogsQL of "Where to look", copied from the rendered digest, parses and finds the planted lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest

from digest.backends.http import Endpoint
from digest.backends.prometheus import PrometheusSource
from digest.backends.victorialogs import VictoriaLogsSource
from digest.channels.telegram.text import MAX_TEXT, split_html, visible_length
from digest.checks.conntrack import ConntrackCheck, ConntrackPolicy
from digest.checks.contract import Finding, Sources, Status, Window
from digest.checks.error_lines import ErrorLinesCheck, ErrorLinesPolicy
from digest.checks.log_storms import LogStormsCheck, LogStormsPolicy
from digest.checks.logsql import quoted
from digest.output.chart import LEGEND_LABEL_LIMIT, chart_caption, chart_drawing, legend_label, render_chart
from digest.output.chart_data import ChartData, Counts, HourlyPanel, collect_chart_data
from digest.output.render import Renderer, headline, unseen_spans
from digest.output.safe_text import escape_json, for_drawing, visible
from digest.pipeline.explain import Explanation
from digest.pipeline.policy import Policy
from digest.pipeline.score import Digest, grade
from digest.testbed.embedded import EmbeddedBackends
from tests.telegram_html import parse_html

START = datetime(2026, 3, 1, 10, tzinfo=UTC)
END = START + timedelta(hours=1)
WINDOW = Window(START, END, ZoneInfo("UTC"), "2026-03-01 10:00–11:00")
NAMESPACE = 'pay "ns" \\ |) (x $a$ \u202eevil\u2066\x00\x85\x7f ünï 🚀\nforged'
POD = "payments-api-" + "a" * 250 + '"|)\u202e\x00\n$x$-z' + "-7d9f8c6b4d-xk2lp"
INSTANCE = 'node-"2" \\ |) \u202e\x00\u2069x\n$y$ sh\u200bop\ufeff\U000e0041:9100'
ERROR_LINES = 2_500  # over the 1-hour error threshold (50,000 a day) and the 1,000 lines/min budget
# Every character that must never reach a reader raw: C0 but tab and the template's newlines, DEL, C1, bidi, separators,
# invisible characters (zero width space/joiners, word joiner, invisible operators, BOM, U+180E, tags).
FORBIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
    "\u200b-\u200d\u2060-\u2064\ufeff\u180e\U000e0000-\U000e007f]"
)
# The invisible characters, each with its visible escape: ``sh\u200bop`` must not pass for ``shop``.
INVISIBLE = [
    ("\u200b", "\\u200b"),
    ("\u200c", "\\u200c"),
    ("\u200d", "\\u200d"),
    ("\u2060", "\\u2060"),
    ("\u2061", "\\u2061"),
    ("\u2062", "\\u2062"),
    ("\u2063", "\\u2063"),
    ("\u2064", "\\u2064"),
    ("\ufeff", "\\ufeff"),
    ("\u180e", "\\u180e"),
    ("\U000e0000", "\\U000e0000"),
    ("\U000e0001", "\\U000e0001"),
    ("\U000e0041", "\\U000e0041"),
    ("\U000e007f", "\\U000e007f"),
]


def _log_lines() -> Iterator[bytes]:
    minute = START + timedelta(minutes=5)
    for index in range(ERROR_LINES):
        record = {
            "timestamp": (minute + timedelta(milliseconds=20 * index)).isoformat().replace("+00:00", "Z"),
            "message": f'boom {index} \u202e\x00 "quoted" | (x)',
            "level": "error",
            "kubernetes.pod_namespace": NAMESPACE,
            "kubernetes.pod_name": POD,
            "kubernetes.container_name": "api",
            "stream": "stderr",
        }
        yield (json.dumps(record) + "\n").encode()
    for index in range(10):
        record = {
            "timestamp": (START + timedelta(minutes=3 * index + 1)).isoformat().replace("+00:00", "Z"),
            "message": "calm",
            "level": "info",
            "kubernetes.pod_namespace": "calm",
            "kubernetes.pod_name": "quiet-0",
            "kubernetes.container_name": "quiet",
            "stream": "stdout",
        }
        yield (json.dumps(record) + "\n").encode()


def _conntrack_series() -> Iterator[bytes]:
    stamps = [int((START + timedelta(minutes=minute)).timestamp() * 1000) for minute in range(61)]
    entries = [500.0 + 7 * minute for minute in range(61)]  # climbs to 920 of 1,000: 92 %, WARN
    for name, values in (
        ("node_nf_conntrack_entries", entries),
        ("node_nf_conntrack_entries_limit", [1000.0] * len(stamps)),
    ):
        line = {
            "metric": {"__name__": name, "instance": INSTANCE, "job": "node"},
            "values": values,
            "timestamps": stamps,
        }
        yield (json.dumps(line) + "\n").encode()


@pytest.fixture(scope="module")
def hostile_backends() -> Iterator[EmbeddedBackends]:
    """A private VictoriaMetrics + VictoriaLogs pair holding only the hostile hour."""
    with EmbeddedBackends() as backends:
        backends.import_series(_conntrack_series())
        backends.ingest_logs(_log_lines())
        backends.wait_for_series("node_nf_conntrack_entries", END, 1)
        backends.wait_for_logs(START, END, ERROR_LINES + 10)
        yield backends


@pytest.fixture
async def sources(hostile_backends: EmbeddedBackends) -> AsyncIterator[Sources]:
    metrics = PrometheusSource(Endpoint(name="VictoriaMetrics", url=hostile_backends.metrics.url, timeout_seconds=20))
    logs = VictoriaLogsSource(Endpoint(name="VictoriaLogs", url=hostile_backends.logs.url, timeout_seconds=20))
    try:
        yield Sources(metrics=metrics, logs=logs)
    finally:
        await metrics.aclose()
        await logs.aclose()


async def _digest(sources: Sources) -> Digest:
    findings = [
        await ErrorLinesCheck(ErrorLinesPolicy())(sources, WINDOW),
        await LogStormsCheck(LogStormsPolicy())(sources, WINDOW),
        await ConntrackCheck(ConntrackPolicy())(sources, WINDOW),
    ]
    return grade("prod", WINDOW, findings, [], Policy())


def _logsql(text: str, after: str, before: str) -> str:
    """The LogsQL of a "Where to look" line of the text digest: between ``after`` and ``before``."""
    return text.split(after, 1)[1].split(before, 1)[0]


def _query_lines(backends: EmbeddedBackends, query: str) -> list[dict[str, str]]:
    """The rows of a LogsQL query; asserts that VictoriaLogs parsed and ran it."""
    response = httpx.post(f"{backends.logs.url}/select/logsql/query", data={"query": query}, timeout=30.0)
    assert response.status_code == 200, response.text
    # Split on "\n" only: str.splitlines would also cut at U+0085 and U+2028 inside a hostile value.
    return [json.loads(line) for line in response.text.split("\n") if line.strip()]


# The VictoriaLogs that scripts/install-backends builds writes no raw row that still carries its _stream fields (the
# query answers 200 and an empty body); dropping them after the copied query leaves what the query selects unchanged.
_WITHOUT_STREAM = " | delete _stream, _stream_id"


async def test_hostile_labels_reach_text_and_html_only_as_visible_escapes(sources: Sources) -> None:
    """NUL, U+202E, C1, DEL and newlines from labels appear escaped in text and HTML; Telegram's parser accepts it."""
    digest = await _digest(sources)
    assert {finding.name: finding.status for finding in digest.findings} == {
        "error_lines": Status.WARN,
        "log_storms": Status.WARN,
        "conntrack": Status.WARN,
    }
    renderer = Renderer()
    for fmt in ("text", "html"):
        output = renderer.render(digest, fmt)
        assert FORBIDDEN.search(output) is None, (fmt, FORBIDDEN.findall(output))
        assert "\\u202eevil\\u2066\\u0000\\u0085\\u007f ünï 🚀\\nforged" in output  # visible, not dropped
    html = renderer.render(digest, "html")
    for part in split_html(html):
        parse_html(part, strict=True)
        assert visible_length(part) <= MAX_TEXT


async def test_json_keeps_exact_labels_as_escapes(sources: Sources) -> None:
    """The JSON is valid, has no raw control or bidi character, and parses back to the exact label values."""
    document = Renderer().render(await _digest(sources), "json")
    assert FORBIDDEN.search(document) is None
    assert "\\u202e" in document
    checks = {check["name"]: check for check in json.loads(document)["checks"]}
    assert checks["error_lines"]["offenders"][0]["labels"]["namespace"] == NAMESPACE
    assert checks["log_storms"]["offenders"][0]["labels"]["pod"] == POD
    assert checks["conntrack"]["offenders"][0]["labels"]["node"] == INSTANCE.removesuffix(":9100")


async def test_logsql_copied_from_where_to_look_runs_and_finds_the_planted_lines(
    sources: Sources, hostile_backends: EmbeddedBackends
) -> None:
    """The hints' LogsQL, copied from the rendered digest, parse in VictoriaLogs and match the hostile namespace/pod."""
    digest = await _digest(sources)
    text = Renderer().render(digest, "text")
    errors_query = _logsql(text, "(LogsQL: ", ") and look for a")
    _query_lines(hostile_backends, errors_query)  # runs exactly as shown
    first_errors = _query_lines(hostile_backends, errors_query + _WITHOUT_STREAM)
    assert len(first_errors) == 20
    assert {line["kubernetes.pod_namespace"] for line in first_errors} == {NAMESPACE}
    # log_storms costs nothing by default, so its hint is in the JSON, not under "Where to look".
    checks = {check["name"]: check for check in json.loads(Renderer().render(digest, "json"))["checks"]}
    storm_query = _logsql(checks["log_storms"]["hint"], "(LogsQL: ", ") — usually a retry loop")
    repeated = _query_lines(hostile_backends, storm_query)
    assert sum(int(row["hits"]) for row in repeated) == ERROR_LINES


def test_logsql_quoting_is_go_syntax() -> None:
    """Quotes, backslashes and controls are escaped, printable text (emoji included) is kept as it is."""
    assert quoted('a"b\\c\nd\te') == '"a\\"b\\\\c\\nd\\te"'
    assert quoted("x\u202ey\x00z\U000e0001") == '"x\\u202ey\\u0000z\\U000e0001"'
    assert quoted("ünï 🚀 |) (") == '"ünï 🚀 |) ("'


async def test_chart_of_hostile_labels_is_escaped_and_its_legend_fits(sources: Sources, tmp_path: Path) -> None:
    """Legend, titles and caption carry no raw control or bidi character, and the 300-char pod's legend fits."""
    digest = await _digest(sources)
    data = await collect_chart_data(sources, WINDOW, Policy())
    assert data.errors is not None
    assert data.conntrack is not None
    drawing = chart_drawing(data, headline(digest) + f" · {NAMESPACE}", unseen_spans(digest))
    width, height = drawing.image.size
    shown = [text.text for text in drawing.texts]
    assert drawing.legends, "the error panel has a legend"
    legends: list[str] = []
    for left, top, right, bottom in drawing.legends:
        assert left >= 0, "the legend runs off the figure"
        assert right <= width, "the legend runs off the figure"
        legends += [
            text.text
            for text in drawing.texts
            if left <= text.box[0] and text.box[2] <= right and top <= text.box[1] and text.box[3] <= bottom
        ]
    assert [text for text in shown if FORBIDDEN.search(text)] == []
    assert any("\\u202e" in text for text in shown)
    assert any(text.startswith("pay ") and "…" in text for text in legends)
    assert all(
        text.box[0] >= 0 and text.box[2] <= width and text.box[1] >= 0 and text.box[3] <= height
        for text in drawing.texts
    )
    render_chart(data, tmp_path / "hostile.png", headline(digest), unseen_spans(digest))
    assert (tmp_path / "hostile.png").stat().st_size > 0
    caption = chart_caption(headline(digest), data)
    assert FORBIDDEN.search(caption.replace("\n", "", 1)) is None


def test_legend_label_keeps_start_and_end_of_a_long_pod_name() -> None:
    """A 300-character label becomes its first and last characters around "…", within the legend limit."""
    label = "payments-api-" + "x" * 280 + "-7d9f8"
    shown = legend_label(Counts(label, (3,)))
    name, _, total = shown.rpartition(" · ")
    assert total == "3"
    assert len(name) == LEGEND_LABEL_LIMIT
    assert name.startswith("payments-api-")
    assert name.endswith("-7d9f8")
    assert "…" in name


def test_dollar_signs_in_a_label_are_drawn_as_they_are() -> None:
    """``$x$`` in a workload name is drawn literally: Pillow has no math mode, so nothing is escaped or parsed."""
    assert legend_label(Counts("ns/$\\frac{1}{$", (1,))) == "ns/$\\frac{1}{$ · 1"


def test_a_newline_in_a_label_never_splits_a_tag_across_lines() -> None:
    """An explanation naming a pod with newlines stays on one line, so every split part of the HTML is valid."""
    finding = Finding(
        name="error_lines",
        status=Status.CRIT,
        penalty=2,
        value=1.0,
        summary="x",
        evidence=[f"then {POD}: {index}" for index in range(40)],
    )
    digest = grade("prod", WINDOW, [finding], [], Policy())
    pod_lines = "\n".join(f"{POD} never ready" for _ in range(20))
    digest = replace(digest, explanations=(Explanation(rule="r", text=pod_lines),))
    html = Renderer().render(digest, "html")
    parts = split_html(html)
    assert len(parts) > 1
    for part in parts:
        parse_html(part, strict=True)
        assert visible_length(part) <= MAX_TEXT
    assert visible(POD) in Renderer().render(digest, "text")


def test_caption_of_a_hostile_panel_is_visible_text() -> None:
    """The photo caption (plain text) shows a hostile workload and backend error escaped."""
    data = ChartData(
        window=WINDOW,
        bucket_seconds=3600,
        buckets=(START.timestamp(),),
        errors=HourlyPanel(series=(Counts(f"{NAMESPACE}/api", (5,)),), blind=(False,), total=5),
        errors_reason="",
        flags=None,
        flags_reason="HTTP 400: bad \u202e\x00 query",
        conntrack=None,
        conntrack_reason="down",
    )
    caption = chart_caption("OK 10/10 · prod\u202e", data)
    head, _, rest = caption.partition("\n")
    assert FORBIDDEN.search(head + rest) is None
    assert "\n" not in rest
    assert "\\u202e" in head
    assert "\\u202e" in rest


@pytest.mark.parametrize(("char", "escape"), INVISIBLE)
def test_an_invisible_character_is_shown_as_an_escape(char: str, escape: str) -> None:
    """``visible`` writes each zero-width, BOM, U+180E and tag character as its escape, so "shop" has no twin."""
    assert visible(f"sh{char}op") == f"sh{escape}op"
    assert visible(f"sh{char}op") != visible("shop")
    assert FORBIDDEN.search(for_drawing(f"sh{char}op $x$")) is None


@pytest.mark.parametrize(("char", "escape"), INVISIBLE)
def test_an_invisible_character_is_escaped_in_json_and_parses_back(char: str, escape: str) -> None:
    r"""``escape_json`` writes each invisible character as ``\uXXXX`` (a surrogate pair beyond U+FFFF), value exact."""
    document = escape_json(json.dumps({"pod": f"sh{char}op"}, ensure_ascii=False))
    assert FORBIDDEN.search(document) is None
    assert json.loads(document) == {"pod": f"sh{char}op"}
    # Exactly what json.dumps writes with ensure_ascii: \\uXXXX, or the UTF-16 surrogate pair of a tag character.
    assert document == json.dumps({"pod": f"sh{char}op"})


def test_wrapped_chart_text_breaks_lines_only_where_it_wraps() -> None:
    r"""``for_drawing`` wraps after escaping: a label's newline stays ``\n``, its ``$`` are kept as they are."""
    shown = for_drawing("pod\nforged $a$ " + "$" * 30 + " tail", width=12)
    lines = shown.split("\n")
    assert lines[0] == "pod\\nforged"
    assert "\\$" not in shown
    assert shown.count("$") == 32
    assert "tail" in lines[-1]

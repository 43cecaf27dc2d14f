"""The first screen: what a phone shows of a digest before any tap, and the folded sections behind it.

Read at phone width (`tests.phone`, 40 characters): the grade, one line per point lost in a person's words, the
likely cause, what to look at and the one thing to do, in at most 12 lines; the evidence, what the errors said, the
diagnosis and every hint in expandable blockquotes that Telegram accepts, kept whole across a split message.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from digest.channels.telegram.text import MAX_TEXT, split_html, visible_length
from digest.checks.contract import Finding, Offender, Quantity, Status, Window
from digest.output.brief import look_at_line, next_step, spoken
from digest.output.render import Renderer
from digest.pipeline.policy import Policy
from digest.pipeline.score import grade
from tests.phone import first_screen, screen
from tests.telegram_html import parse_html

GOLDEN = Path(__file__).parent / "golden"
DAYS = sorted(path.stem for path in GOLDEN.glob("*.html"))
# A pod's generated name (ReplicaSet hash and suffix): the first screen names workloads.
POD_HASH = re.compile(r"-[bcdfghjklmnpqrstvwxz2456789]{6,10}-[bcdfghjklmnpqrstvwxz2456789]{5}\b")
PARIS = Window(
    datetime(2026, 7, 19, 22, tzinfo=UTC), datetime(2026, 7, 20, 22, tzinfo=UTC), ZoneInfo("Europe/Paris"), "2026-07-20"
)


@pytest.mark.parametrize("day", DAYS)
def test_first_screen_of_every_corpus_day_fits_a_phone(day: str) -> None:
    """Each corpus day's first screen is at most 12 lines at phone width, with no pod hash and the zone said once."""
    html = (GOLDEN / f"{day}.html").read_text()
    lines = first_screen(html)
    assert len(lines) <= 12, "\n".join(lines)
    text = "\n".join(lines)
    assert not POD_HASH.search(text), text
    assert text.count("Times in UTC") == 1
    assert lines[0].startswith(("OK", "WARNING", "CRITICAL", "UNKNOWN"))


@pytest.mark.parametrize("day", DAYS)
def test_every_section_of_every_corpus_day_is_one_tap_away(day: str) -> None:
    """Telegram parses each day's message; every check's summary is in it, each section a closed expandable quote."""
    html = (GOLDEN / f"{day}.html").read_text()
    visible, entities = parse_html(html)
    digest = json.loads((GOLDEN / f"{day}.json").read_text())
    for check in digest["checks"]:
        assert check["summary"] in visible or (check["status"] == "OK" and not check["graded"]), check["name"]
    folds = [entity for entity in entities if entity["type"] == "expandable_blockquote"]
    assert folds, "no folded section"
    for explanation in digest["explanations"]:
        assert explanation["text"] in visible
        assert explanation["short"], explanation["rule"]
    assert visible_length(html) <= MAX_TEXT  # one message: the corpus days fit with their sections


def test_the_flood_day_reads_as_a_person_says_it() -> None:
    """07-20: "4.5 M error lines, new today" by workload, the OOM kill by workload, and the fix of the flood first."""
    lines = first_screen((GOLDEN / "2026-07-20.html").read_text())
    text = " ".join(lines)
    assert "−2 feeds/feed-aggregator: 4.5 M error lines, new today" in text
    assert "−1 feeds/feed-aggregator: OOM-killed at 06:15 (capped)" in text
    assert "No alert fired: nobody was paged" in text
    assert "1 to look at: feeds/feed-aggregator" in text
    assert "Read the first errors of feeds/feed-aggregator and look for a retry loop without backoff." in text
    assert "LogsQL" not in text  # the query is in the details, not on the first screen
    assert "median" not in (GOLDEN / "2026-07-20.html").read_text()
    assert "1 minute in" not in (GOLDEN / "2026-07-20.html").read_text()


def test_a_cause_leads_with_its_fix() -> None:
    """08-12: the first screen names the empty Service's cause in a line and gives its fix as the thing to do."""
    text = " ".join(first_screen((GOLDEN / "2026-08-12.html").read_text()))
    assert "No ready endpoint on shop/api for 30 min: pods unready under CPU throttling" in text
    assert "➡️ Remove the CPU limit (keep the request)" in text


def test_times_carry_the_readers_zone() -> None:
    """A reader in Paris is told the times are Paris times, once."""
    finding = Finding(
        name="oom_kills",
        status=Status.WARN,
        penalty=1,
        value=1,
        summary="shop/api-5d8f7c9b6d-x2x4z/api OOM-killed at 08:15",
        offenders=[
            Offender({"namespace": "shop", "pod": "api-5d8f7c9b6d-x2x4z", "container": "api", "time": "08:15"}, 1)
        ],
    )
    html = Renderer().render(grade("prod", PARIS, [finding], [], Policy()), "html")
    lines = first_screen(html)
    assert "−1 shop/api: OOM-killed at 08:15" in " ".join(lines)
    assert sum("Times in Europe/Paris" in line for line in screen(html)) == 1


def test_a_blind_day_names_what_was_not_checked_on_the_first_screen() -> None:
    """Graded checks blind: UNKNOWN, one reason said once for the checks it blinded, within 12 lines at any count."""
    names = ["error_lines", "oom_kills", "conntrack", "envoy_flags", "memory_pressure", "restarts"]
    down = "VictoriaMetrics unreachable at http://vm:8428"
    findings = [
        Finding(name=name, status=Status.UNKNOWN, penalty=0, value=None, summary="s", error=down) for name in names
    ]
    html = Renderer().render(grade("prod", PARIS, findings, [], Policy()), "html")
    lines = first_screen(html)
    assert lines[0].startswith("UNKNOWN")
    text = " ".join(lines)
    assert f"❓ error_lines, oom_kills, conntrack, envoy_flags not checked · {down}" in text
    assert len(lines) <= 12, "\n".join(lines)
    visible, _ = parse_html(html)
    for name in names:
        assert f"{name} " in visible
    # Each check blind for its own reason: two said, the rest named.
    alone = [replace(finding, error=f"{finding.name}: its own trouble") for finding in findings]
    lines = first_screen(Renderer().render(grade("prod", PARIS, alone, [], Policy()), "html"))
    assert "❓ and conntrack, envoy_flags, each for its own reason (below)" in " ".join(lines)
    assert len(lines) <= 12, "\n".join(lines)


def test_a_folded_section_moves_whole_to_the_next_message() -> None:
    """A section that does not fit what is left of a message opens the next one, whole and still folded."""
    head = "<b>CRITICAL 4/10 · prod</b>\n" + "\n".join(f"line {index} " + "x" * 60 for index in range(40))
    section = "<blockquote expandable><b>Diagnosis</b>\n" + "\n".join("y" * 70 for _ in range(30)) + "</blockquote>"
    parts = split_html(f"{head}\n\n{section}")
    assert len(parts) == 2
    assert parts[1].startswith("<blockquote expandable><b>Diagnosis</b>")
    for part in parts:
        assert visible_length(part) <= MAX_TEXT
        parse_html(part)  # Telegram accepts it: tags balanced


def test_a_section_longer_than_a_message_is_unfolded_into_lines() -> None:
    """One section longer than a whole message is sent unfolded (its lines in order), never cut inside a quote."""
    section = (
        "<blockquote expandable><b>Diagnosis</b>\n"
        + "\n".join(f"<code>row {index}</code> " + "z" * 70 for index in range(80))
        + "</blockquote>"
    )
    parts = split_html(f"<b>CRITICAL</b>\n\n{section}")
    assert len(parts) >= 2
    assert not any("blockquote" in part for part in parts)
    rows = [line for part in parts for line in parse_html(part)[0].split("\n") if line.startswith("row ")]
    assert [row.split()[1] for row in rows] == [str(index) for index in range(80)]


def test_counts_are_said_as_a_person_says_them() -> None:
    """Small counts as they are, tens of thousands in k, millions with one decimal."""
    assert spoken(7477) == "7,477"
    assert spoken(60_003) == "60 k"
    assert spoken(4_539_734) == "4.5 M"
    assert spoken(250_000_000) == "250 M"


def test_the_thing_to_do_leaves_the_query_for_the_details() -> None:
    """A hint's LogsQL aside (a half-open time range inside) is left out of the first screen, and its second clause."""
    finding = Finding(
        name="error_lines",
        status=Status.CRIT,
        penalty=2,
        value=10,
        summary="s",
        offenders=[Offender({"namespace": "feeds", "workload": "agg"}, 10, {"total_lines": Quantity(20, "count")})],
        hint="Read the first errors of feeds/agg (LogsQL: _time:[2026-07-20T00:00:00Z, 2026-07-21T00:00:00Z) "
        'namespace:="feeds" | sort by (_time) | limit 20) and look for a retry loop; cap the volume.',
    )
    digest = grade("prod", PARIS, [finding], [], Policy())
    assert next_step(digest) == "Read the first errors of feeds/agg and look for a retry loop."


def test_what_to_look_at_names_one_subject_with_what_was_seen_or_several_by_name() -> None:
    """One subject keeps two of its troubles; several are named, the rest counted."""
    assert look_at_line(["shop/api (not ready, no ready endpoint, CPU throttling)"]) == (
        "1 to look at: shop/api (not ready, no ready endpoint, …)"
    )
    assert look_at_line(["a/x (not ready)", "b/y (restarts)", "c/z (log storm)", "d/w (alert)"]) == (
        "4 to look at: a/x, b/y, c/z and 1 more"
    )
    assert look_at_line([]) == ""

"""Rendering: headline first, Telegram-safe HTML with hostile strings escaped, and the JSON contract."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from html.parser import HTMLParser
from zoneinfo import ZoneInfo

from digest.checks.contract import Finding, Offender, Status, Window
from digest.output.render import Renderer, to_json
from digest.pipeline.policy import Policy
from digest.pipeline.score import grade

WINDOW = Window(datetime(2026, 7, 20, tzinfo=UTC), datetime(2026, 7, 21, tzinfo=UTC), ZoneInfo("UTC"), "2026-07-20")
HOSTILE = '<script>alert("x")</script> & a_b *c*'
TELEGRAM_TAGS = {
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "a",
    "code",
    "pre",
    "blockquote",
    "tg-spoiler",
    "span",
}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.tags: list[str] = []
        self.open: list[str] = []
        self.entities: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open, f"unbalanced </{tag}>"
        assert self.open[-1] == tag, f"unbalanced </{tag}>"
        self.open.pop()

    def handle_entityref(self, name: str) -> None:
        self.entities.append(name)


def _hostile_digest():
    findings = [
        Finding(
            name="error_lines",
            status=Status.CRIT,
            penalty=2,
            value=600_000,
            summary=f"{HOSTILE} wrote 600,000 error lines",
            offenders=[Offender(labels={"namespace": HOSTILE, "workload": "w"}, value=600_000)],
            hint=f"look at {HOSTILE}",
            evidence=[f"{HOSTILE}: 600,000"],
        ),
        Finding(name="conntrack", status=Status.UNKNOWN, penalty=0, value=None, summary="no series", error=HOSTILE),
    ]
    return grade("prod <&>", WINDOW, findings, ["envoy_flags"], Policy())


def test_html_uses_only_telegram_tags_and_escapes_hostile_text() -> None:
    """Pod names and log text with <script>, & and quotes are escaped; only Telegram's tags remain, balanced."""
    html = Renderer().render(_hostile_digest(), "html")
    parser = _Tags()
    parser.feed(html)
    parser.close()
    assert set(parser.tags) <= TELEGRAM_TAGS
    assert not parser.open
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
    assert set(parser.entities) <= {"lt", "gt", "amp", "quot"}


def test_headline_comes_first_and_names_what_was_not_checked() -> None:
    """The first line is the grade; the next lines say what could not be checked and why."""
    text = Renderer().render(_hostile_digest(), "text")
    lines = text.splitlines()
    assert lines[0] == "CRITICAL 8/10 · prod <&> · 2026-07-20 · not checked: conntrack"
    assert lines[1].startswith("? conntrack not checked · ")
    assert "– envoy_flags · disabled by policy" in text


def test_unknown_headline_carries_no_clean_score() -> None:
    """When nothing is wrong but a check was blind, the headline says UNKNOWN, not 10/10."""
    digest = grade(
        "prod",
        WINDOW,
        [
            Finding(
                name="conntrack",
                status=Status.UNKNOWN,
                penalty=0,
                value=None,
                summary="s",
                error="VictoriaMetrics unreachable",
            )
        ],
        [],
        Policy(),
    )
    text = Renderer().render(digest, "text")
    assert text.splitlines()[0] == "UNKNOWN · prod · 2026-07-20 · not checked: conntrack"
    assert "10/10 ·" not in text


def _calm_day_with_diagnoses():
    graded = [
        Finding(name=name, status=Status.OK, penalty=0, value=0, summary="fine")
        for name in ("oom_kills", "error_lines", "conntrack", "envoy_flags")
    ]
    restarts = Finding(
        name="restarts",
        status=Status.CRIT,
        penalty=0,
        value=192,
        summary="shop/x-7d9c8b6f5d-r8kzq/x: 120 restarts",
        offenders=[
            Offender(labels={"namespace": "shop", "pod": "x-7d9c8b6f5d-r8kzq", "container": "x"}, value=120),
            Offender(labels={"namespace": "shop", "pod": "x-7d9c8b6f5d-w2lmn", "container": "x"}, value=72),
        ],
    )
    rollout = Finding(
        name="deployments",
        status=Status.CRIT,
        penalty=0,
        value=1,
        summary="shop/web: rollout stuck",
        offenders=[Offender(labels={"namespace": "shop", "deployment": f"web{HOSTILE}"}, value=1)],
    )
    return grade("prod", WINDOW, [*graded, restarts, rollout], [], Policy())


def test_calm_day_with_diagnoses_says_what_to_look_at_in_the_headline() -> None:
    """A 10/10 day whose diagnostics found a crash loop and a stuck rollout names both in the headline, by workload."""
    digest = _calm_day_with_diagnoses()
    text = Renderer().render(digest, "text")
    assert text.splitlines()[0] == (
        f"OK 10/10 · prod · 2026-07-20 · 2 to look at: shop/x (crash loop: 192 restarts); shop/web{HOSTILE} "
        "(stuck rollout)"
    )
    html = Renderer().render(digest, "html")
    assert "&lt;script&gt;" in html.splitlines()[0]
    assert "<script>" not in html


def test_json_contract() -> None:
    """The JSON object carries the contract's fields with the right types."""
    payload = json.loads(Renderer().render(_hostile_digest(), "json"))
    assert payload == to_json(_hostile_digest())
    assert set(payload) >= {"cluster", "window", "score", "max_score", "status", "checks"}
    assert payload["window"] == {"start": "2026-07-20T00:00:00Z", "end": "2026-07-21T00:00:00Z"}
    assert payload["max_score"] == 10
    check = payload["checks"][0]
    assert set(check) >= {"name", "status", "penalty", "value", "summary", "offenders", "hint", "error"}
    assert check["offenders"][0] == {"labels": {"namespace": HOSTILE, "workload": "w"}, "value": 600_000, "facts": {}}
    assert payload["disabled"] == ["envoy_flags"]

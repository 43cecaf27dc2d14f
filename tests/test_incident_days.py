"""The incident corpus on real VictoriaMetrics + VictoriaLogs: every day's digest matches its golden and its facts.

Goldens live in tests/golden/<date>.json and <date>.txt; they were reviewed by hand. After an intended change of
wording, regenerate them with DIGEST_UPDATE_GOLDENS=1 and review the diff before committing.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from digest import __version__
from digest.app.engine import Config, make_digest
from digest.app.settings import load_settings
from digest.output.render import Renderer, to_json
from digest.pipeline.policy import Policy
from digest.pipeline.score import Digest
from digest.pipeline.window import day_window
from digest.testbed.corpus import DAYS
from digest.testbed.embedded import EmbeddedBackends
from tests.telegram_html import parse_html

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("DIGEST_UPDATE_GOLDENS") == "1"


def _config(backends: EmbeddedBackends, policy: Policy | None = None, **overrides: Any) -> Config:
    settings = load_settings(
        vm_url=backends.metrics.url,
        vl_url=backends.logs.url,
        cluster="homelab",
        timezone="UTC",
        policy_file=None,
        query_timeout=overrides.pop("query_timeout", 20.0),
        **overrides,
    )
    return Config(settings=settings, policy=policy or Policy())


async def digest_of(backends: EmbeddedBackends, day: date, policy: Policy | None = None) -> Digest:
    return await make_digest(_config(backends, policy), day_window(day, load_settings(timezone="UTC").zone))


STORM_SHAPES = [
    "ERROR feeds.ws relay: connect ETIMEDOUT <IP4>:<N>",
    "ERROR feeds.ws relay: certificate has expired",
    "ERROR feeds.ws relay: connect EADDRNOTAVAIL <IP4>:<N> - Local (<IP4>:<N>)",
]
STORM_SHAPE_LINES = [4_174_072, 318_553, 47_100]


def check(payload: dict[str, Any], name: str) -> dict[str, Any]:
    return next(item for item in payload["checks"] if item["name"] == name)


@pytest.mark.parametrize("day", sorted(DAYS), ids=str)
async def test_day_matches_golden(corpus_backends: EmbeddedBackends, day: date) -> None:
    """Each corpus day's JSON and text digests equal their reviewed goldens, and the grade is the expected one."""
    digest = await digest_of(corpus_backends, day)
    payload = to_json(digest)
    # The tool's version is in every JSON digest but not in the goldens: a release does not rewrite them.
    assert payload.pop("version") == __version__
    text = Renderer().render(digest, "text")
    html = Renderer().render(digest, "html")
    json_path, text_path, html_path = (GOLDEN / f"{day}.{suffix}" for suffix in ("json", "txt", "html"))
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        json_path.write_text(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
        text_path.write_text(text)
        html_path.write_text(html)
    expected = DAYS[day].expected
    assert (payload["status"], payload["score"]) == (expected.status, expected.score)
    assert payload == json.loads(json_path.read_text())
    assert text == text_path.read_text()
    assert html == html_path.read_text()
    # The message Telegram would receive parses under its HTML rules and keeps the headline first.
    visible_text, _ = parse_html(html, strict=True)
    assert visible_text.splitlines()[0] == payload["headline"]


async def test_reconnect_storm_reads_critical_8(corpus_backends: EmbeddedBackends) -> None:
    """07-20: CRITICAL 8/10, the flooding workload with its exact error count, one OOM at 06:15, conntrack 72 % free."""
    payload = to_json(await digest_of(corpus_backends, date(2026, 7, 20)))
    assert payload["headline"] == "CRITICAL 8/10 · homelab · 2026-07-20"
    errors = check(payload, "error_lines")
    assert errors["status"] == "CRIT"
    assert errors["offenders"][0]["labels"]["namespace"] == "feeds"
    assert errors["offenders"][0]["labels"]["workload"] == "feed-aggregator"
    assert errors["offenders"][0]["value"] == 4_539_734
    oom = check(payload, "oom_kills")
    assert oom["value"] == 1
    assert [offender["labels"].get("time") for offender in oom["offenders"]] == ["06:15"]
    conntrack = check(payload, "conntrack")
    assert conntrack["status"] == "OK"
    assert conntrack["penalty"] == 0
    assert "72 %" in conntrack["summary"]
    assert "94,083 / 131,072" in conntrack["summary"]


async def test_reconnect_storm_names_what_the_errors_said(corpus_backends: EmbeddedBackends) -> None:
    """07-20, every minute read: the relay's errors are three signatures, ETIMEDOUT first with its count, new today."""
    exact = Policy(error_lines=replace(Policy().error_lines, signature_sample_lines=0))
    digest = await digest_of(corpus_backends, date(2026, 7, 20), exact)
    [workload] = check(to_json(digest), "error_lines")["signatures"]
    assert workload["labels"] == {"namespace": "feeds", "workload": "feed-aggregator"}
    assert workload["sampled_every"] == 1
    top = workload["top"]
    assert [one["text"] for one in top] == STORM_SHAPES
    assert [one["lines"] for one in top] == STORM_SHAPE_LINES
    assert sum(one["lines"] for one in top) <= 4_539_734  # of the workload's error lines, never more
    assert (top[1]["first"], top[1]["last"]) == ("2026-07-20T00:00:00Z", "2026-07-20T05:09:59Z")
    text = Renderer().render(digest, "text")
    assert "• 4,174,072 (92 %) 04:50–21:33 · new today · ERROR feeds.ws relay: connect ETIMEDOUT <IP4>:<N>" in text
    # New against 07-19, the one earlier day the corpus holds (07-13..07-18 have no log line: not "no error").
    assert "(new today: not written on the previous day whose logs were seen whole)" in text
    assert top[0]["new_today"] is True
    assert top[0]["key"] in to_json(digest)["novelty"]["new_today"]
    assert "   e.g. ERROR feeds.ws relay: connect ETIMEDOUT 203.0.113.7:443" in text


async def test_reconnect_storm_shapes_come_from_a_bounded_sample(corpus_backends: EmbeddedBackends) -> None:
    """07-20 by default: 4.5 M error lines shaped from 1 minute in 23, said so, the counts estimates near the truth."""
    digest = await digest_of(corpus_backends, date(2026, 7, 20))
    [workload] = check(to_json(digest), "error_lines")["signatures"]
    assert workload["sampled_every"] == 23  # ceil(4,539,734 / 200,000)
    top = workload["top"]
    assert [one["text"] for one in top] == STORM_SHAPES
    # The two shapes written for hours are within 5 % of their exact counts; the third, an hour-long burst that
    # 3 of the 63 sampled minutes fall into, within 25 %.
    for one, exact, tolerance in zip(top, STORM_SHAPE_LINES, (0.05, 0.05, 0.25), strict=True):
        assert abs(one["lines"] - exact) <= tolerance * exact, (one["text"], one["lines"], exact)
    assert top[0]["new_today"] is True
    text = Renderer().render(digest, "text")
    assert "feeds/feed-aggregator · 3 of its 4+ error signatures, sampled: the counts are estimates" in text
    assert "• ≈4,060,000 (89 %) ≈05:10–21:16 · new today · ERROR feeds.ws relay: connect ETIMEDOUT <IP4>:<N>" in text


async def test_keepalive_race_reads_warning_9(corpus_backends: EmbeddedBackends) -> None:
    """08-16: WARNING 9/10 from 35 UC, with the idle-timeout ordering in the hint."""
    payload = to_json(await digest_of(corpus_backends, date(2026, 8, 16)))
    assert (payload["status"], payload["score"]) == ("WARNING", 9)
    envoy = check(payload, "envoy_flags")
    assert envoy["penalty"] == 1
    assert envoy["offenders"][0]["labels"]["flag"] == "UC"
    assert envoy["offenders"][0]["value"] == 35
    assert "idle timeout" in envoy["hint"]


async def test_keepalive_fixed_reads_ok_10(corpus_backends: EmbeddedBackends) -> None:
    """08-17, after the fix: OK 10/10 with every check seen."""
    payload = to_json(await digest_of(corpus_backends, date(2026, 8, 17)))
    assert (payload["status"], payload["score"]) == ("OK", 10)
    assert all(item["status"] == "OK" for item in payload["checks"])


async def test_uh_days_read_critical(corpus_backends: EmbeddedBackends) -> None:
    """The readiness spiral and the Recreate rollout are CRITICAL through UH."""
    for day in (date(2026, 8, 12), date(2026, 9, 8)):
        payload = to_json(await digest_of(corpus_backends, day))
        assert payload["status"] == "CRITICAL", day
        envoy = check(payload, "envoy_flags")
        assert envoy["offenders"][0]["labels"]["flag"] == "UH", day
        assert "no ready endpoint" in envoy["summary"], day


async def test_recreate_day_counts_840_uh(corpus_backends: EmbeddedBackends) -> None:
    """The Recreate rollout: 840 UH out of 2,595 probes."""
    envoy = check(to_json(await digest_of(corpus_backends, date(2026, 9, 8))), "envoy_flags")
    uh = next(offender for offender in envoy["offenders"] if offender["labels"]["flag"] == "UH")
    assert uh["value"] == 840
    assert uh["facts"]["requests"] == {"value": 2595, "unit": "count"}


async def test_day_without_any_data_is_unknown(corpus_backends: EmbeddedBackends) -> None:
    """A day the backends hold nothing for is UNKNOWN on every check, never OK."""
    payload = to_json(await digest_of(corpus_backends, date(2026, 6, 1)))
    assert payload["status"] == "UNKNOWN"
    assert {item["status"] for item in payload["checks"]} == {"UNKNOWN"}
    assert all(item["error"] for item in payload["checks"])


async def test_last_24h_window_equals_the_day(corpus_backends: EmbeddedBackends) -> None:
    """--last 24h ending at the day's end grades like --date: replay is the same code as today."""
    from zoneinfo import ZoneInfo

    from digest.pipeline.window import last_window, parse_duration, parse_moment

    window = last_window(parse_duration("24h"), parse_moment("2026-07-21T00:00:00Z"), ZoneInfo("UTC"))
    digest = await make_digest(_config(corpus_backends), window)
    by_day = await digest_of(corpus_backends, date(2026, 7, 20))
    assert (digest.status, digest.score) == (by_day.status, by_day.score)
    assert [finding.value for finding in digest.findings] == [finding.value for finding in by_day.findings]

"""Cross-signal explanations on the corpus: each fires on its incident day and on no other day."""

from __future__ import annotations

from datetime import date

import pytest

from checks.contract import Finding, Offender, Status
from digest.corpus import DAYS
from digest.embedded import EmbeddedBackends
from digest.explain import explain
from tests.test_incident_days import digest_of

EXPECTED: dict[date, set[str]] = {
    date(2026, 7, 19): set(),
    date(2026, 7, 20): {"blind_spot"},
    date(2026, 8, 12): {"readiness_spiral", "uh_empty_endpoints", "blind_spot"},
    date(2026, 8, 16): {"idle_timeout"},
    date(2026, 8, 17): set(),
    date(2026, 9, 8): {"uh_empty_endpoints", "blind_spot"},
    date(2026, 9, 15): {"idle_timeout"},
    date(2026, 10, 5): set(),
}


@pytest.mark.parametrize("day", sorted(DAYS), ids=str)
async def test_each_explanation_fires_on_its_day_only(corpus_backends: EmbeddedBackends, day: date) -> None:
    """The rules that fire on a corpus day are exactly those of its post-mortem; calm days stay quiet."""
    digest = await digest_of(corpus_backends, day)
    assert {explanation.rule for explanation in digest.explanations} == EXPECTED[day]


async def test_quiet_endpoints_inversion_names_the_numbers(corpus_backends: EmbeddedBackends) -> None:
    """09-15: the UC ratio of quiet hours is several times the busy hours', with the worst hour named."""
    digest = await digest_of(corpus_backends, date(2026, 9, 15))
    [inversion] = [e for e in digest.explanations if e.rule == "idle_timeout"]
    assert "istio:pricing/quote" in inversion.text
    assert "in quiet hours vs" in inversion.text
    assert "worst at 04:00" in inversion.text


async def test_keepalive_race_names_the_idle_timeout_under_load(corpus_backends: EmbeddedBackends) -> None:
    """08-16: the 35 UC came in bursts under load; the explanation names the ordering without claiming an inversion."""
    digest = await digest_of(corpus_backends, date(2026, 8, 16))
    [explanation] = [e for e in digest.explanations if e.rule == "idle_timeout"]
    assert "35 × UC on httproute/shop/api/rule/0" in explanation.text
    assert "under load" in explanation.text


def test_log_storm_rule_needs_restarts_and_no_oom() -> None:
    """An error flood with restarts and no OOM is a log storm; with an OOM kill it is not."""
    errors = Finding(
        name="error_lines",
        status=Status.CRIT,
        penalty=2,
        value=900_000,
        summary="s",
        offenders=[Offender(labels={"namespace": "shop", "workload": "web"}, value=900_000)],
    )
    restarts = Finding(
        name="restarts",
        status=Status.WARN,
        penalty=0,
        value=7,
        summary="s",
        offenders=[Offender(labels={"namespace": "shop", "pod": "web-7c9d8f6b5d-x2x4k", "restarts": "7"}, value=7)],
    )
    no_oom = Finding(name="oom_kills", status=Status.OK, penalty=0, value=0, summary="s")
    oom = Finding(name="oom_kills", status=Status.WARN, penalty=1, value=1, summary="s")
    assert [e.rule for e in explain([errors, restarts, no_oom])] == ["log_storm"]
    assert explain([errors, restarts, oom]) == ()

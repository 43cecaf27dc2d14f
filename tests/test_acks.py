"""Acks: a finding owned by someone shows on one line and costs no point until it expires or gets worse.

The judgement (`digest.pipeline.acks`) on findings, the grade it changes and the one it never changes (UNKNOWN, a
partial view), the state file that keeps acks across restarts, the policy's exceptions, and `/ack`, `/acks`,
`/unack` against the Bot-API-shaped server with the 07-20 flood computed on real VictoriaMetrics + VictoriaLogs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from digest.app.acks import AckDesk
from digest.app.engine import Config, load_acks
from digest.app.settings import load_settings
from digest.checks.contract import Coverage, Finding, Offender, Status, Window
from digest.output.render import Renderer, to_json
from digest.pipeline.ack_store import AckStore
from digest.pipeline.acks import Ack, AckError, acked_now, from_policy, judge, parse_duration, parse_target
from digest.pipeline.policy import Policy, PolicyError, policy_from_mapping
from digest.pipeline.score import Digest, DigestStatus, grade
from digest.pipeline.window import day_window
from digest.testbed.embedded import EmbeddedBackends, free_port
from tests.command import clean_env, run_digest
from tests.fake_telegram import FakeTelegram
from tests.phone import first_screen
from tests.telegram_html import parse_html
from tests.test_bot import ALLOWED, TOKEN, Clock, make_config, running, visible

UTC_ZONE = ZoneInfo("UTC")
ACKED_AT = datetime(2026, 12, 6, 13, 0, tzinfo=UTC)
CHECKS = ("error_lines", "oom_kills", "conntrack", "envoy_flags", "cpu_throttling")


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    """A Telegram lookalike that knows the allowed chat and reports no bug of its own."""
    with FakeTelegram(TOKEN, known_chats={ALLOWED}) as server:
        yield server
        assert server.internal_errors == []


def _first_line(html: str) -> str:
    return parse_html(html)[0].split("\n")[0]


def _day(day: int) -> Window:
    return day_window(date(2026, 12, day), UTC_ZONE)


def _flood(lines: float, others: Sequence[tuple[str, float]] = ()) -> Finding:
    offenders = [Offender({"namespace": "feeds", "workload": "agg"}, lines)]
    offenders += [Offender({"namespace": namespace, "workload": "w"}, value) for namespace, value in others]
    return Finding(
        name="error_lines",
        status=Status.CRIT,
        penalty=2,
        value=lines,
        summary=f"feeds/agg wrote {lines:,.0f} error lines",
        offenders=offenders,
        hint="Read the first errors of feeds/agg.",
    )


def _calm() -> list[Finding]:
    return [Finding(name=name, status=Status.OK, penalty=0, value=0, summary="fine") for name in CHECKS[1:4]]


def _ack(reason: str = "retry storm, fix in PR 12", days: int = 7) -> Ack:
    return acked_now(_flood(4_500_000), "", reason, "@anna", ACKED_AT, ACKED_AT + timedelta(days=days), "chat")


def _graded(findings: Sequence[Finding], acks: Sequence[Ack], day: int = 7) -> Digest:
    return grade("homelab", _day(day), findings, [], Policy(), acks=acks)


def test_an_acked_flood_shows_on_one_line_and_costs_no_point() -> None:
    """The acked finding is graded OK 10/10 · 1 acked, and its line says who, until when and why."""
    digest = _graded([_flood(4_500_000), *_calm()], [_ack()])
    assert digest.status is DigestStatus.OK
    assert digest.score == 10
    html = Renderer().render(digest, "html")
    lines = first_screen(html)
    assert _first_line(html) == "OK 10/10 · homelab · 2026-12-07 · 1 acked"
    assert "🔕 feeds/agg: 4.5 M error lines · acked by @anna until 12-13 13:00: retry storm, fix in PR 12" in " ".join(
        lines
    )
    assert "Read the first errors" not in html  # its hint is not the thing to do while it is acked
    ack = next(check for check in to_json(digest)["checks"] if check["name"] == "error_lines")["ack"]
    assert ack["held"] is True
    assert ack["by"] == "@anna"
    assert ack["at_most"] == 4_500_000
    assert to_json(digest)["acked"] == 1


def test_a_higher_count_lifts_the_ack_and_says_why() -> None:
    """More error lines than acked: graded again (CRITICAL 8/10), with the ack named as lifted and the two counts."""
    digest = _graded([_flood(6_100_000), *_calm()], [_ack()])
    assert digest.status is DigestStatus.CRITICAL
    assert digest.acked_count == 0
    text = " ".join(first_screen(Renderer().render(digest, "html")))
    assert "−2 feeds/agg: 6.1 M error lines · ack by @anna lifted: worse than acked (6,100,000 > 4,500,000)" in text


def test_a_new_workload_lifts_the_ack_but_a_few_lines_of_another_do_not() -> None:
    """A second workload with a tenth of the flood's lines or more lifts the ack; a logging agent's 36 lines do not."""
    noise = _graded([_flood(4_000_000, [("logging", 36)]), *_calm()], [_ack()])
    assert noise.acked_count == 1
    new = _graded([_flood(4_000_000, [("shop", 900_000)]), *_calm()], [_ack()])
    assert new.acked_count == 0
    assert new.acks["error_lines"].lifted_because == "not acked: shop/w"


def test_an_ack_holds_only_for_windows_that_end_within_it() -> None:
    """A day before the ack and a day after its end are graded as if there were none: it expires by itself."""
    ack = _ack(days=3)  # 12-06 13:00 to 12-09 13:00, taken against the 24 h from 12-05 13:00
    assert _graded([_flood(100), *_calm()], [ack], day=4).acked_count == 0  # the replay of a day before it
    assert _graded([_flood(100), *_calm()], [ack], day=5).acked_count == 1  # ends 12-06 00:00, in what was acked
    assert _graded([_flood(100), *_calm()], [ack], day=6).acked_count == 1  # its own day (ends 12-07 00:00)
    assert _graded([_flood(100), *_calm()], [ack], day=8).acked_count == 1  # ends 12-09 00:00
    assert _graded([_flood(100), *_calm()], [ack], day=9).acked_count == 0  # ends 12-10 00:00: expired


def test_a_week_with_an_acked_finding_that_gets_worse_on_day_five() -> None:
    """Days 1-4 say "1 acked" and grade OK; day 5 (more lines) is CRITICAL and names the lifted ack; day 6 is acked."""
    counts = {7: 4_200_000, 8: 4_500_000, 9: 3_900_000, 10: 4_400_000, 11: 5_200_000, 12: 4_100_000}
    ack = _ack()
    headlines = {}
    for day, lines in counts.items():
        digest = _graded([_flood(lines), *_calm()], [ack], day=day)
        headlines[day] = _first_line(Renderer().render(digest, "html"))
    assert headlines[7] == "OK 10/10 · homelab · 2026-12-07 · 1 acked"
    assert headlines[10] == "OK 10/10 · homelab · 2026-12-10 · 1 acked"
    assert headlines[11] == "CRITICAL 8/10 · homelab · 2026-12-11"
    assert headlines[12] == "OK 10/10 · homelab · 2026-12-12 · 1 acked"


def test_an_ack_never_hides_what_was_not_seen() -> None:
    """A blind graded check keeps UNKNOWN, a partly seen one keeps the day from OK, whatever is acked."""
    blind = Finding(name="conntrack", status=Status.UNKNOWN, penalty=0, value=None, summary="s", error="down")
    digest = _graded([_flood(4_500_000), blind, *_calm()[:1]], [_ack()])
    assert digest.status is DigestStatus.UNKNOWN
    partial = Finding(
        name="memory_pressure",
        status=Status.WARN,
        penalty=0,
        value=1,
        summary="s",
        coverage=Coverage(fraction=0.5, partial=True),
    )
    digest = _graded([_flood(4_500_000), partial, *_calm()], [_ack()])
    assert digest.status is DigestStatus.UNKNOWN


def test_a_fine_finding_or_a_stranger_subject_cannot_be_acked() -> None:
    """Nothing found, or a subject that is not an offender: refused in a sentence; bad targets and durations too."""
    with pytest.raises(AckError, match="found nothing to ack"):
        acked_now(_calm()[0], "", "", "@anna", ACKED_AT, ACKED_AT, "chat")
    with pytest.raises(AckError, match="shop/api is not among error_lines's offenders"):
        acked_now(_flood(10), "shop/api", "", "@anna", ACKED_AT, ACKED_AT, "chat")
    with pytest.raises(AckError, match="is not a check"):
        parse_target("nonsense", CHECKS)
    assert parse_target("error_lines:feeds/agg", CHECKS) == ("error_lines", "feeds/agg")
    assert parse_duration("2w") == timedelta(weeks=2)
    with pytest.raises(AckError, match="at most 90 days"):
        parse_duration("400d")
    with pytest.raises(AckError, match="not a duration"):
        parse_duration("soon")


def test_a_subject_ack_covers_that_subject_only() -> None:
    """Acking conntrack on one node: that node's table stays acked, another node's crossing lifts it."""

    def table(*nodes: tuple[str, float]) -> Finding:
        return Finding(
            name="conntrack",
            status=Status.CRIT,
            penalty=2,
            value=max(value for _, value in nodes),
            summary="s",
            offenders=[Offender({"node": node}, value) for node, value in nodes],
        )

    week = ACKED_AT + timedelta(days=7)
    ack = acked_now(table(("pi5-3", 0.96), ("pi5-1", 0.03)), "pi5-3", "", "@ops", ACKED_AT, week, "cli")
    assert judge([table(("pi5-3", 0.95), ("pi5-1", 0.04))], [ack], _day(7))["conntrack"].held
    lifted = judge([table(("pi5-3", 0.95), ("pi5-2", 0.85))], [ack], _day(7))["conntrack"]
    assert not lifted.held
    assert lifted.lifted_because == "not acked: pi5-2"


def test_acks_survive_a_restart_and_the_same_target_is_replaced(tmp_path: Path) -> None:
    """The state file keeps acks; acking a target again replaces it; an ended ack is kept for its past days."""
    path = tmp_path / "state.sqlite"
    store = AckStore(path)
    store.put("homelab", _ack())
    store.put("homelab", _ack(reason="still the storm"))
    store.put("other", _ack())
    store.close()
    reopened = AckStore(path)
    [ack] = reopened.all("homelab")
    assert ack.reason == "still the storm"
    assert ack.subjects == frozenset({"feeds/agg"})
    assert reopened.end("homelab", "error_lines", ACKED_AT + timedelta(days=1))
    assert not reopened.end("homelab", "error_lines", ACKED_AT + timedelta(days=2))  # already ended
    [ended] = reopened.all("homelab")
    assert ended.until == ACKED_AT + timedelta(days=1)
    reopened.close()


def test_the_policy_holds_known_exceptions_and_refuses_bad_ones_by_their_field() -> None:
    """acks: in the policy file: a check or a subject, a reason, an optional end and bound; each mistake named."""
    policy = policy_from_mapping(
        {
            "acks": [
                {"finding": "cpu_throttling:shop/batch", "reason": "a batch job, throttled by design"},
                {"finding": "error_lines", "reason": "known", "until": "2026-12-31", "at_most": 1000},
            ]
        }
    )
    assert [(ack.check, ack.subject, ack.until) for ack in policy.acks] == [
        ("cpu_throttling", "shop/batch", None),
        ("error_lines", "", date(2026, 12, 31)),
    ]
    bounded = [from_policy(a.check, a.subject, a.reason, a.until, a.at_most) for a in policy.acks][1]
    assert judge([_flood(900)], [bounded], _day(7))["error_lines"].held
    assert not judge([_flood(1200)], [bounded], _day(7))["error_lines"].held
    assert bounded.holds_for(_day(31))
    assert not bounded.holds_for(day_window(date(2027, 1, 1), UTC_ZONE))
    for bad, field in (
        ({"finding": "nonsense", "reason": "x"}, "acks[0].finding"),
        ({"finding": "error_lines"}, "acks[0].reason"),
        ({"finding": "error_lines", "reason": "x", "until": "soon"}, "acks[0].until"),
        ({"finding": "error_lines", "reason": "x", "at_most": True}, "acks[0].at_most"),
        ({"finding": "error_lines", "reason": "x", "silence": 1}, "acks[0]."),
    ):
        with pytest.raises(PolicyError, match=field.replace("[", r"\[").replace("]", r"\]")):
            policy_from_mapping({"acks": [bad]})


async def test_the_desk_acks_lists_and_ends_against_the_last_day(tmp_path: Path) -> None:
    """`digest ack`'s desk: acked against the last 24 h's digest, listed, read back by the engine, ended."""
    settings = load_settings(vm_url="http://127.0.0.1:9", cluster="homelab", state_path=tmp_path / "s.sqlite")
    config = Config(settings=settings, policy=Policy())
    now = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)

    async def digest_of(window: Window) -> Digest:
        assert window.end == now
        assert window.start == now - timedelta(hours=24)
        return grade("homelab", window, [_flood(4_500_000), *_calm()], [], Policy())

    desk = AckDesk(config, digest_of)
    answer = await desk.ack(["error_lines:feeds/agg", "3d", "2", "pods", "known"], "@anna", now)
    assert answer.startswith("Acked error_lines:feeds/agg until Thu 10 Dec 12:00 UTC")
    [ack] = load_acks(config)
    assert (ack.reason, ack.subjects, ack.at_most) == ("2 pods known", frozenset({"feeds/agg"}), 4_500_000)
    assert "• error_lines:feeds/agg by @anna until Thu 10 Dec 12:00: 2 pods known" in await desk.listing(now)
    assert "is not a check" in await desk.ack(["nonsense"], "@anna", now)
    assert "found nothing to ack" in await desk.ack(["conntrack"], "@anna", now)
    assert await desk.unack(["error_lines:feeds/agg"], now) == "error_lines:feeds/agg: ack ended."
    assert (await desk.listing(now)).startswith("No acks.")


async def test_ack_in_the_chat_then_the_digest_says_it_and_a_restart_keeps_it(
    corpus_backends: EmbeddedBackends, tg: FakeTelegram, tmp_path: Path
) -> None:
    """/ack on the 07-20 flood: the day's digest says "1 acked" with who and why; /acks after a restart; /unack."""
    config = make_config(corpus_backends, tg, tmp_path / "state.sqlite")
    clock = Clock(datetime(2026, 7, 21, 0, 0, 30, tzinfo=UTC))
    async with running(config, clock):
        before = len(tg.sent_to(ALLOWED))
        tg.push_message(ALLOWED, "/ack error_lines:feeds/feed-aggregator 7d retry storm, PR 12", username="anna")
        [acked] = (await tg.wait_for_sent_async(before + 1, timeout=60))[before:]
        assert visible(acked).startswith("Acked error_lines:feeds/feed-aggregator until Tue 28 Jul 00:00 UTC")
        tg.push_message(ALLOWED, "/digest 2026-07-20")
        digest = (await tg.wait_for_sent_async(before + 2, timeout=60))[before + 1]
        lines = first_screen(digest.text or "")
        assert _first_line(digest.text or "") == "WARNING 9/10 · homelab · 2026-07-20 · 1 acked"  # the OOM kill's point
        text = " ".join(lines)
        assert "🔕 feeds/feed-aggregator: 4.5 M error lines, new today · acked by @anna until 07-28 00:00" in text
        tg.push_message(ALLOWED, "/ack nonsense")
        usage = (await tg.wait_for_sent_async(before + 3, timeout=10))[before + 2]
        assert "is not a check" in visible(usage)
        assert "Usage: /ack" in visible(usage)
    async with running(config, clock):
        count = len(tg.sent_to(ALLOWED))
        tg.push_message(ALLOWED, "/acks")
        listing = (await tg.wait_for_sent_async(count + 1, timeout=10))[count]
        assert "• error_lines:feeds/feed-aggregator by @anna until Tue 28 Jul 00:00: retry storm, PR 12" in visible(
            listing
        )
        tg.push_message(ALLOWED, "/unack error_lines:feeds/feed-aggregator")
        ended = (await tg.wait_for_sent_async(count + 2, timeout=10))[count + 1]
        assert visible(ended) == "error_lines:feeds/feed-aggregator: ack ended."
    state = json.dumps([ack.target for ack in load_acks(config)])
    assert state == '["error_lines:feeds/feed-aggregator"]'  # kept, ended: a replay of 07-20 still shows it


def test_the_cli_acks_lists_and_ends_with_the_bot_s_words(tmp_path: Path) -> None:
    """`digest ack` refuses a bad target or nothing to ack (exit 2, one line), lists and ends what the file holds."""
    state = tmp_path / "state.sqlite"
    env = clean_env(
        DIGEST_VM_URL=f"http://127.0.0.1:{free_port()}",  # nothing listens: every check is blind, nothing to ack
        DIGEST_CLUSTER="homelab",
        DIGEST_STATE_PATH=str(state),
    )
    refused = run_digest("ack", "nonsense", env=env)
    assert refused.returncode == 2
    assert "'nonsense' is not a check" in refused.stdout
    blind = run_digest("ack", "error_lines", "--for", "3d", env=env)
    assert blind.returncode == 2
    assert "error_lines found nothing to ack in the last digest (UNKNOWN)" in blind.stdout
    assert run_digest("ack", "--list", env=env).stdout.startswith("No acks.")
    store = AckStore(state)
    now = datetime.now(UTC)
    store.put("homelab", replace(_ack(), since=now, until=now + timedelta(days=2)))
    store.close()
    listed = run_digest("ack", "--list", env=env)
    assert listed.returncode == 0
    assert "• error_lines by @anna until" in listed.stdout
    ended = run_digest("unack", "error_lines", env=env)
    assert ended.stdout.strip() == "error_lines: ack ended."


def test_a_hostile_reason_or_name_is_printed_never_read_as_markup() -> None:
    """An ack's reason and author with tags, & and a mention arrive escaped: Telegram parses the message as text."""
    ack = replace(_ack(reason='<script>alert("x")</script> & <!channel>'), by="<b>eve</b>")
    html = Renderer().render(_graded([_flood(4_500_000), *_calm()], [ack]), "html")
    assert "<script>" not in html
    visible_text, _ = parse_html(html)
    assert 'acked by <b>eve</b> until 12-13 13:00: <script>alert("x")</script> & <!channel>' in visible_text

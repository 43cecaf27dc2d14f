"""The Slack channel against a Slack Web API lookalike on loopback (tests/fake_slack.py).

What it promises (digest/channels/slack/): Telegram's sections as Block Kit mrkdwn within Slack's limits, hostile
names escaped; the chart by the files upload API; 429 waited out by its Retry-After; permanent errors
(channel_not_found, not_in_channel, invalid_auth) named per channel while the others get the post; Slack's own
troubles retried; a lost answer repeated once at most; incoming webhooks as the text-only alternative; the doctor's
auth.test; and a day posted to Telegram, Slack and a webhook at once, once each, across a restart.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from digest.app.serve import ChannelPoster
from digest.app.settings import ConfigError, load_settings
from digest.channels.channel import Outcome, Photo
from digest.channels.once import ExactlyOnce, PartsChannel
from digest.channels.retry import RetryPolicy
from digest.channels.slack.api import SlackApi
from digest.channels.slack.channel import slack_channel, slack_webhook_channel, ts_id
from digest.channels.slack.check import check_slack
from digest.channels.slack.mrkdwn import MAX_SECTION, blocks_of, fallback, from_html, parts_of
from digest.channels.state import DeliveryState
from digest.checks.contract import Finding, Offender, Status
from digest.output.render import Renderer
from digest.pipeline.policy import Policy
from digest.pipeline.score import grade
from digest.testbed.embedded import EmbeddedBackends, free_port
from tests.command import DIGEST, backend_env, run_digest, stop_process
from tests.fake_slack import TOKEN, FakeSlack, Fault, fake_slack
from tests.fake_telegram import FakeTelegram
from tests.fake_webhook import Answer, fake_webhook
from tests.test_bot import ALLOWED, make_config, running, wait_until
from tests.test_bot import TOKEN as TELEGRAM_TOKEN
from tests.test_render import WINDOW, _hostile_digest

KEY = "daily:2026-07-20"
OPS, PLATFORM = "C0OPS0001", "C0PLAT002"
HTML = (
    "<b>OK 10/10</b> · homelab · 24h to 2026-07-20 12:00 UTC\n\n"
    '<i>Nothing to look at.</i> <a href="https://g.example/x?a=1|2">Grafana</a>'
)


class Sleeps:
    """The API's sleep, recorded and instant."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)


@asynccontextmanager
async def slack_posting(
    slack: FakeSlack, path: Path, *channels: str, sleeps: Sleeps | None = None, answer_within: float = 5.0
) -> AsyncIterator[PartsChannel]:
    """A bot-token Slack channel posting to ``channels`` of the fake, with instant recorded backoff."""
    state = DeliveryState(path, "test", channel="slack")
    async with httpx.AsyncClient(timeout=answer_within) as client:
        api = SlackApi(client, TOKEN, slack.api_url, RetryPolicy(total_seconds=120), sleep=sleeps or Sleeps())
        try:
            yield slack_channel(ExactlyOnce(state), api, channels or (OPS,))
        finally:
            state.close()


def workspace(slack: FakeSlack) -> None:
    """#ops and #platform with the bot in both, #quiet without it."""
    slack.add_channel(OPS, "ops")
    slack.add_channel(PLATFORM, "platform")
    slack.add_channel("C0QUIET03", "quiet", member=False)


async def _html() -> str:
    return HTML


# mrkdwn ---------------------------------------------------------------------------------------------------------------


def test_the_html_digest_becomes_mrkdwn_with_its_marks_and_links() -> None:
    """<b>, <i>, <code> and <a> become *, _, ` and <url|label>; a URL's | is encoded, & < > escaped."""
    converted = from_html(
        '<b>OK</b> <i>it</i> <code>a`b</code> <a href="https://g.example/?q=a|b">Grafana &amp; co</a>'
    )
    assert converted == "*OK* _it_ `a'b` <https://g.example/?q=a%7Cb|Grafana &amp; co>"


def test_hostile_names_never_become_mentions_or_links() -> None:
    """A workload or a log line saying <!channel> or <https://evil|x> is printed escaped, never read as control."""
    hostile = "<!channel> <@U0ADMIN> <https://evil.example|click> *bold* & more"
    findings = [
        Finding(
            name="error_lines",
            status=Status.CRIT,
            penalty=2,
            value=600_000,
            summary=f"{hostile} wrote 600,000 error lines",
            offenders=[Offender(labels={"namespace": hostile, "workload": "w"}, value=600_000)],
            evidence=[f"{hostile}: 600,000"],
        )
    ]
    digest = grade(f"prod {hostile}", WINDOW, findings, (), Policy())
    converted = from_html(Renderer().render(digest, "html"))
    assert "<!" not in converted
    assert "<@" not in converted
    assert "<https://evil" not in converted
    assert "&lt;!channel&gt;" in converted
    assert "&amp; more" in converted


def test_sections_fit_blocks_and_a_part_repacks_into_the_same_blocks() -> None:
    """A long digest is cut into ≤3,000-character sections at blank lines, ≤10 per message, the same on every retry."""
    sections = [f"*section {index}*\n" + "line of evidence · " * 60 for index in range(40)]
    text = "\n\n".join(sections)
    parts = parts_of(text)
    assert len(parts) > 1
    for part in parts:
        blocks = blocks_of(part)
        assert len(blocks) <= 10
        assert all(0 < len(block) <= MAX_SECTION for block in blocks)
    assert [block for part in parts for block in blocks_of(part)] == blocks_of(text)


def test_a_line_longer_than_a_section_is_cut_at_a_word_never_inside_an_escape() -> None:
    """One 7,000-character line is cut into pieces that fit, none ending inside "&amp;"."""
    line = ("a&amp;b " * 1000).strip()
    blocks = blocks_of(line)
    assert all(len(block) <= MAX_SECTION for block in blocks)
    assert all(not block.rstrip().endswith(("&", "&a", "&am", "&amp")) for block in blocks)
    assert "".join(blocks).replace(" ", "") == line.replace(" ", "")


def test_the_notification_text_is_the_headline_without_marks() -> None:
    """What a phone's banner shows: the first line, plain."""
    assert fallback(from_html(HTML)) == "OK 10/10 · homelab · 24h to 2026-07-20 12:00 UTC"


def test_a_message_ts_is_kept_as_its_digits() -> None:
    """1784548801.000001 is recorded as 1784548801000001; anything else as 0."""
    assert ts_id("1784548801.000001") == 1_784_548_801_000_001
    assert ts_id("") == 0


# Posting --------------------------------------------------------------------------------------------------------------


async def test_a_digest_is_posted_once_as_sections_without_unfurls(tmp_path: Path) -> None:
    """chat.postMessage with mrkdwn sections and the headline as its text; a second post is none."""
    with fake_slack() as slack:
        workspace(slack)
        async with slack_posting(slack, tmp_path / "state.sqlite") as channel:
            first = await channel.post_once(OPS, KEY, _html)
            second = await channel.post_once(OPS, KEY, _html)
        [posted] = slack.posted_to(OPS)
    assert first.outcome is Outcome.SENT
    assert first.message_ids == (ts_id(posted.ts),)
    assert second.outcome is Outcome.ALREADY_SENT
    assert posted.text == "OK 10/10 · homelab · 24h to 2026-07-20 12:00 UTC"
    assert posted.blocks is not None
    assert posted.blocks[0]["text"]["text"].startswith("*OK 10/10*")
    assert "<https://g.example/x?a=1%7C2|Grafana>" in posted.blocks[-1]["text"]["text"]


async def test_the_chart_follows_by_the_files_upload_api_also_for_a_channel_named_by_hash(tmp_path: Path) -> None:
    """The PNG is uploaded whole and completed in the channel with its caption; "#ops" learns its id from the text."""
    png = b"\x89PNG\r\n" + b"0" * 5000

    async def chart() -> Photo:
        return Photo(png=png, caption="error lines per 10 minutes")

    with fake_slack() as slack:
        workspace(slack)
        async with slack_posting(slack, tmp_path / "state.sqlite", OPS, "#platform") as channel:
            by_id = await channel.post_once(OPS, KEY, _html, photo=chart)
            by_name = await channel.post_once("#platform", KEY, _html, photo=chart)
        files = list(slack.files)
    assert by_id.outcome is Outcome.SENT
    assert by_name.outcome is Outcome.SENT
    assert [(one["channel"], one["comment"]) for one in files] == [
        (OPS, "error lines per 10 minutes"),
        (PLATFORM, "error lines per 10 minutes"),
    ]


async def test_429_waits_exactly_its_retry_after(tmp_path: Path) -> None:
    """Two 429s with Retry-After: 7 then 2: waited exactly, then one message."""
    sleeps = Sleeps()
    with fake_slack() as slack:
        workspace(slack)
        slack.faults = [Fault(429, retry_after=7), Fault(429, retry_after=2)]
        async with slack_posting(slack, tmp_path / "state.sqlite", sleeps=sleeps) as channel:
            result = await channel.post_once(OPS, KEY, _html)
        messages = slack.posted_to(OPS)
    assert result.outcome is Outcome.SENT
    assert sleeps.asked == [7.0, 2.0]
    assert len(messages) == 1


@pytest.mark.parametrize(
    "fault", [Fault(500), Fault(502), Fault(error="internal_error"), Fault(error="ratelimited")], ids=str
)
async def test_slacks_own_troubles_are_retried_with_backoff(tmp_path: Path, fault: Fault) -> None:
    """A 5xx or an {"ok": false} that is Slack's trouble (internal_error…) is retried, then posted once."""
    sleeps = Sleeps()
    with fake_slack() as slack:
        workspace(slack)
        slack.faults = [fault, fault]
        async with slack_posting(slack, tmp_path / "state.sqlite", sleeps=sleeps) as channel:
            result = await channel.post_once(OPS, KEY, _html)
        messages = slack.posted_to(OPS)
    assert result.outcome is Outcome.SENT
    assert len(sleeps.asked) == 2
    assert len(messages) == 1


async def test_permanent_errors_are_named_per_channel_while_the_others_get_the_post(tmp_path: Path) -> None:
    """A channel not found and one without the bot fail for good, once each; #ops and #platform get the day."""
    digest = _hostile_digest()
    with fake_slack() as slack:
        workspace(slack)
        async with slack_posting(slack, tmp_path / "state.sqlite", OPS, "C0MISSING", "C0QUIET03", PLATFORM) as channel:
            poster = ChannelPoster((channel,), Renderer())
            account = await poster(digest, key=KEY)
            again = await poster(digest, key=KEY)
        posts = [len(slack.posted_to(one)) for one in (OPS, PLATFORM)]
        asked = len(slack.calls("chat.postMessage"))
    assert "slack C0MISSING: failed_permanent (the message: refused by Slack: channel_not_found)" in account
    assert "slack C0QUIET03: failed_permanent (the message: refused by Slack: not_in_channel)" in account
    assert f"slack {OPS}: sent" in account
    assert f"slack {PLATFORM}: sent" in account
    assert "slack C0MISSING: failed_permanent" in again
    assert posts == [1, 1]
    assert asked == 4  # the permanent failures were not asked again
    assert poster.permanent_failures == 4
    assert poster.failures == 0


async def test_a_wrong_token_is_permanent(tmp_path: Path) -> None:
    """invalid_auth is not retried: the token is wrong until someone changes it."""
    with fake_slack() as slack:
        workspace(slack)
        state = DeliveryState(tmp_path / "state.sqlite", "test", channel="slack")
        async with httpx.AsyncClient() as client:
            api = SlackApi(client, "xoxb-wrong", slack.api_url, sleep=Sleeps())
            result = await slack_channel(ExactlyOnce(state), api, (OPS,)).post_once(OPS, KEY, _html)
        state.close()
    assert result.outcome is Outcome.FAILED_PERMANENT
    assert "invalid_auth" in (result.error or "")


async def test_a_lost_answer_repeats_a_message_once_at_most(tmp_path: Path) -> None:
    """Answers lost three times: the message goes twice at most, then "not confirmed"; no third copy."""
    with fake_slack() as slack:
        workspace(slack)
        slack.faults = [Fault(lost=True)] * 3
        async with slack_posting(slack, tmp_path / "state.sqlite") as channel:
            result = await channel.post_once(OPS, KEY, _html)
        messages = slack.posted_to(OPS)
    assert result.outcome is Outcome.SENT
    assert "not confirmed" in (result.error or "")
    assert len(messages) == 2


async def test_blocks_slack_refuses_are_sent_again_as_plain_text(tmp_path: Path) -> None:
    """invalid_blocks: the part is resent as mrkdwn text rather than lost."""
    with fake_slack() as slack:
        workspace(slack)
        slack.faults = [Fault(error="invalid_blocks")]
        async with slack_posting(slack, tmp_path / "state.sqlite") as channel:
            result = await channel.post_once(OPS, KEY, _html)
        [posted] = slack.posted_to(OPS)
    assert result.outcome is Outcome.SENT
    assert posted.blocks is None
    assert posted.text.startswith("*OK 10/10*")


async def test_a_long_digest_is_several_messages_each_within_slacks_limits(tmp_path: Path) -> None:
    """A 60,000-character digest: several messages, every section ≤3,000 (the fake refuses more), in order."""
    html = "\n\n".join(f"<b>section {index}</b>\n" + "evidence line · " * 120 for index in range(30))

    async def long_html() -> str:
        return html

    with fake_slack() as slack:
        workspace(slack)
        async with slack_posting(slack, tmp_path / "state.sqlite") as channel:
            result = await channel.post_once(OPS, KEY, long_html)
        messages = slack.posted_to(OPS)
    assert result.outcome is Outcome.SENT
    assert len(messages) == len(result.message_ids) > 1
    texts = [block["text"]["text"] for message in messages for block in message.blocks or []]
    assert [text.split("*")[1] for text in texts if text.startswith("*section")] == [
        f"section {index}" for index in range(30)
    ]


async def test_incoming_webhooks_post_the_sections_never_a_chart(tmp_path: Path) -> None:
    """DIGEST_SLACK_WEBHOOK_URLS: each named hook posts to its channel, no chart; a removed hook fails for good."""

    async def chart() -> Photo:
        return Photo(png=b"png", caption="chart")

    with fake_slack() as slack:
        workspace(slack)
        slack.hooks["ops"] = OPS
        state = DeliveryState(tmp_path / "state.sqlite", "test", channel="slack")
        async with httpx.AsyncClient() as client:
            api = SlackApi(client, "", slack.api_url, sleep=Sleeps())
            endpoints = {"ops": slack.hook_url("ops"), "gone": slack.hook_url("gone")}
            channel = slack_webhook_channel(ExactlyOnce(state), api, endpoints)
            posted = await channel.post_once("ops", KEY, _html, photo=chart)
            gone = await channel.post_once("gone", KEY, _html, photo=chart)
        state.close()
        [message] = slack.posted_to(OPS)
    assert posted.outcome is Outcome.SENT
    assert message.blocks is not None
    assert slack.files == []
    assert gone.outcome is Outcome.FAILED_PERMANENT
    assert "HTTP 404: no_service" in (gone.error or "")


# Settings and the doctor --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        ({"slack_channel_ids": "ops room"}, "DIGEST_SLACK_CHANNEL_IDS: 'ops room' is not a Slack channel"),
        ({"slack_webhook_urls": "ops=ftp://hooks.slack.test/x"}, "DIGEST_SLACK_WEBHOOK_URLS: the URL of 'ops'"),
        ({"slack_token": "xoxb-a b"}, "DIGEST_SLACK_TOKEN: must be one line without spaces"),
    ],
    ids=["channel", "webhook-url", "token"],
)
def test_bad_slack_settings_are_one_line_naming_the_variable(overrides: dict[str, object], said: str) -> None:
    """A bad channel id, webhook URL or token is refused at start, naming the variable."""
    with pytest.raises(ConfigError) as refused:
        load_settings(policy_file=None, **overrides)
    assert said in str(refused.value)
    assert "hooks.slack.test" not in str(refused.value)


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({}, "DIGEST_SLACK_TOKEN: not set"),
        ({"DIGEST_SLACK_TOKEN": TOKEN}, "DIGEST_SLACK_CHANNEL_IDS: not set"),
        (
            {"DIGEST_SLACK_TOKEN": TOKEN, "DIGEST_SLACK_WEBHOOK_URLS": "ops=https://hooks.slack.test/x"},
            "DIGEST_SLACK_TOKEN and DIGEST_SLACK_WEBHOOK_URLS are both set",
        ),
    ],
    ids=["nothing", "no-channels", "both"],
)
def test_run_post_to_slack_without_what_it_needs_exits_2_naming_it(
    tmp_path: Path, env: dict[str, str], said: str
) -> None:
    """`digest run --post` with DIGEST_CHANNELS=slack and a missing or doubled setting: one line, exit 2."""
    base = {"DIGEST_CHANNELS": "slack", "DIGEST_STATE_PATH": str(tmp_path / "state.sqlite")}
    result = run_digest("run", "--post", env={**base, **env})
    assert result.returncode == 2
    assert result.stderr.strip().startswith(f"digest: {said}")
    assert TOKEN not in result.stderr


async def test_the_doctor_asks_auth_test_and_each_channel_without_posting() -> None:
    """auth.test names the bot; a missing channel, one without the bot and an archived one are each named."""
    with fake_slack() as slack:
        workspace(slack)
        slack.add_channel("C0ARCH004", "old")
        slack.archived.add("C0ARCH004")
        async with httpx.AsyncClient() as client:
            api = SlackApi(client, TOKEN, slack.api_url, sleep=Sleeps())
            found = await check_slack(api, [OPS, "C0MISSING", "C0QUIET03", "C0ARCH004", "#platform"])
            wrong = await check_slack(SlackApi(client, "xoxb-wrong", slack.api_url, sleep=Sleeps()), [OPS])
        assert slack.messages == []
    assert found.who == "bot digest in lab"
    said = {one.channel: (one.ok, one.said) for one in found.channels}
    assert said[OPS] == (True, "#ops")
    assert said["C0MISSING"][0] is False
    assert "the bot is not a member" in said["C0QUIET03"][1]
    assert "archived" in said["C0ARCH004"][1]
    assert said["#platform"][0] is True
    assert not found.ok
    assert wrong.problem == "refused by Slack: invalid_auth"


# One day, three channels --------------------------------------------------------------------------------------------


async def test_one_day_reaches_telegram_slack_and_a_webhook_once_each_across_a_restart(
    corpus_backends: EmbeddedBackends, tmp_path: Path
) -> None:
    """The bot's noon round to three channels; Slack answers 429 and the webhook hangs; a restart doubles nothing."""
    noon, key = datetime(2026, 7, 20, 12, 0, 5, tzinfo=UTC), KEY
    with (
        FakeTelegram(TELEGRAM_TOKEN, known_chats={ALLOWED}) as tg,
        fake_slack() as slack,
        fake_webhook(b"hook-secret", [Answer(delay=3.0)]) as receiver,
    ):
        workspace(slack)
        slack.faults = [Fault(429, retry_after=1)]
        config = make_config(
            corpus_backends,
            tg,
            tmp_path / "state.sqlite",
            channels="telegram,slack,webhook",
            slack_token=TOKEN,
            slack_channel_ids=f"{OPS},C0MISSING",
            slack_api_url=slack.api_url,
            webhook_urls=f"ops={receiver.url}/ops",
            webhook_secret="hook-secret",  # noqa: S106  # the loopback receiver's test key
        )
        async with running(config, lambda: noon, owner="first") as bot:
            await wait_until(lambda: len(receiver.to("/ops")) == 1, within=120)
            bot.dispatch.stop()  # SIGTERM while the webhook's answer is pending
        async with running(config, lambda: noon, owner="restarted") as bot:
            await wait_until(lambda: ("webhook", "ops") in bot.dispatch.last_results, within=60)
            await wait_until(lambda: ("slack", OPS) in bot.dispatch.last_results, within=60)
            status = await bot.status_text(None)
        telegram_posts = tg.sent_to(ALLOWED)
        slack_posts = slack.posted_to(OPS)
        taken = receiver.taken["/ops"]
    assert len(telegram_posts) == 1
    assert len(slack_posts) == 1
    assert len(taken) == 1
    assert json.loads(taken[0])["window"]["end"].startswith("2026-07-20T12:00")
    assert slack_posts[0].text.startswith(("OK", "WARNING", "CRITICAL", "UNKNOWN"))
    assert f"Chat {ALLOWED}: {key} sent" in status
    assert f"Slack {OPS}: {key} sent" in status
    # One attempt, or two when the stop interrupted the first while it waited out the 429.
    missing = rf"Slack C0MISSING: {key} failed for good after [12] attempt\(s\): the message: refused by Slack"
    assert re.search(f"{missing}: channel_not_found", status), status
    assert f"Webhook ops: {key} sent" in status


# `digest serve` without Telegram --------------------------------------------------------------------------------------


def _wait_for(predicate: Callable[[], bool], within: float, process: subprocess.Popen[bytes]) -> None:
    """Poll ``predicate`` every 0.2 s for at most ``within`` seconds; fail early if the process died."""
    deadline = time.monotonic() + within
    while not predicate():
        assert process.poll() is None, f"digest serve exited with {process.returncode}"
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.2)


def test_serve_without_telegram_posts_the_due_day_once_and_stops_in_one_line(
    corpus_backends: EmbeddedBackends, tmp_path: Path
) -> None:
    """`digest serve` with DIGEST_CHANNELS=slack,webhook: the day due goes out at start, once, through a restart."""
    port = free_port()
    post_at = (datetime.now(UTC) - timedelta(minutes=10)).strftime("%H:%M")  # due, well inside the grace
    with fake_slack() as slack, fake_webhook(b"hook-secret") as receiver:
        workspace(slack)
        env = backend_env(
            corpus_backends,
            DIGEST_CHANNELS="slack,webhook",
            DIGEST_SLACK_TOKEN=TOKEN,
            DIGEST_SLACK_CHANNEL_IDS=OPS,
            DIGEST_SLACK_API_URL=slack.api_url,
            DIGEST_WEBHOOK_URLS=f"ops={receiver.url}/ops",
            DIGEST_WEBHOOK_SECRET="hook-secret",  # noqa: S106  # the loopback receiver's test key
            DIGEST_STATE_PATH=str(tmp_path / "state.sqlite"),
            DIGEST_POST_AT=post_at,
            DIGEST_WEEKLY_POST="off",
            DIGEST_HEALTH_PORT=str(port),
        )
        logs = []
        for run in ("first", "restarted"):
            log_path = tmp_path / f"{run}.log"
            with log_path.open("w") as log_file:
                process = subprocess.Popen([*DIGEST, "serve"], env=env, stdout=log_file, stderr=subprocess.STDOUT)
                try:
                    if run == "first":
                        # Both posts recorded as sent (not only arrived: a stop in between is another test's case).
                        _wait_for(lambda: _SENT_TWICE in _metrics(port), 120, process)
                        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
                    else:
                        _wait_for(lambda: _ALREADY_SENT_TWICE in _metrics(port), 120, process)
                    process.send_signal(signal.SIGTERM)
                    returncode = process.wait(timeout=30)
                finally:
                    stop_process(process)
            logs.append(log_path.read_text())
            assert returncode == 0, logs[-1]
        messages = slack.posted_to(OPS)
        taken = receiver.taken["/ops"]
    assert health.status_code == 200
    assert len(messages) == 1
    assert len(taken) == 1
    assert len(slack.files) == 1
    for text in logs:
        assert "Traceback" not in text
        assert TOKEN not in text
        assert receiver.url not in text
    assert "scheduler ready; posting at" in logs[0]


# The first run's round posted to both recipients (Slack's and the webhook's) and recorded it.
_SENT_TWICE = 'digest_deliveries_total{outcome="sent"} 2.0'
# The restart's first round found both recipients' posts already made.
_ALREADY_SENT_TWICE = 'digest_deliveries_total{outcome="already_sent"} 2.0'


def _metrics(port: int) -> str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return ""

"""`digest replay`: one digest per day over a range, concurrently, as summaries or JSON lines; posted once each."""

from __future__ import annotations

import json
import subprocess
from datetime import date
from pathlib import Path

import pytest

from digest.app.replay import days_between
from digest.pipeline.window import WindowError
from digest.testbed.embedded import EmbeddedBackends
from tests.command import backend_env, run_digest
from tests.fake_telegram import FakeTelegram

TOKEN = "123456:AAE-replay-token"  # noqa: S105  # a test token
CHAT = -1005550001


def _env(backends: EmbeddedBackends, tmp_path: Path) -> dict[str, str]:
    return backend_env(backends, DIGEST_STATE_PATH=str(tmp_path / "state.sqlite"))


def _replay(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_digest("replay", *args, env=env, timeout=300)


def test_three_days_as_json_lines(corpus_backends: EmbeddedBackends, tmp_path: Path) -> None:
    """07-19..07-21 gives three JSON lines in date order; 07-20 is CRITICAL 8/10; summaries go to stderr."""
    result = _replay(_env(corpus_backends, tmp_path), "--from", "2026-07-19", "--to", "2026-07-21", "--format", "json")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["window"]["start"][:10] for line in lines] == ["2026-07-19", "2026-07-20", "2026-07-21"]
    assert (lines[0]["status"], lines[0]["score"]) == ("OK", 10)
    assert (lines[1]["status"], lines[1]["score"]) == ("CRITICAL", 8)
    # The day after the corpus: logs absent, so never OK.
    assert lines[2]["status"] != "OK"
    assert "2026-07-20 CRITICAL 8/10 · error_lines −2 · oom_kills −1 (capped)" in result.stderr.splitlines()
    # Not a terminal: plain progress lines, no bar.
    assert "replayed 3/3" in result.stderr
    assert "\r" not in result.stderr


def test_summary_lines_by_default(corpus_backends: EmbeddedBackends, tmp_path: Path) -> None:
    """Without --format, each day is one line on stdout."""
    result = _replay(_env(corpus_backends, tmp_path), "--from", "2026-08-16", "--to", "2026-08-17")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "2026-08-16 WARNING 9/10 · envoy_flags −1",
        "2026-08-17 OK 10/10",
    ]


def test_replay_posts_each_day_once(corpus_backends: EmbeddedBackends, tmp_path: Path) -> None:
    """--post sends each day's digest once per chat; running the same replay again sends nothing."""
    with FakeTelegram(TOKEN, known_chats={CHAT}) as tg:
        env = {
            **_env(corpus_backends, tmp_path),
            "DIGEST_TELEGRAM_API_URL": tg.root,
            "DIGEST_TELEGRAM_TOKEN": TOKEN,
            "DIGEST_TELEGRAM_CHAT_IDS": str(CHAT),
        }
        first = _replay(env, "--from", "2026-08-16", "--to", "2026-08-17", "--post")
        second = _replay(env, "--from", "2026-08-16", "--to", "2026-08-17", "--post")
        sent = [call.visible.splitlines()[0] for call in tg.sent_to(CHAT)]
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert sorted(sent) == ["OK 10/10 · homelab · 2026-08-17", "WARNING 9/10 · homelab · 2026-08-16"]
    assert "already_sent" in second.stdout
    assert TOKEN not in first.stderr + second.stderr


def test_bad_ranges_are_usage_errors(tmp_path: Path) -> None:
    """A reversed range exits 2 with one line; ranges are validated before any query."""
    result = run_digest("replay", "--from", "2026-07-21", "--to", "2026-07-19", cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "digest: --to 2026-07-19 is before --from 2026-07-21"
    with pytest.raises(WindowError, match="more than 366"):
        days_between(date(2020, 1, 1), date(2026, 1, 1))


async def test_replay_shares_history_between_days(
    corpus_backends: EmbeddedBackends, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replaying consecutive days computes each previous day's graded checks once, and marks the storm new today."""
    import io

    from digest.app.engine import Config
    from digest.app.replay import replay
    from digest.app.settings import load_settings
    from digest.pipeline.policy import Policy

    settings = load_settings(
        vm_url=corpus_backends.metrics.url,
        vl_url=corpus_backends.logs.url,
        cluster="homelab",
        timezone="UTC",
        policy_file=None,
    )
    calls: list[str] = []
    import digest.pipeline.trends as trends

    original = trends.collect

    async def counting(checks, sources, window, policy, deadline, look_back=True):  # type: ignore[no-untyped-def]
        calls.append(window.label)
        return await original(checks, sources, window, policy, deadline, look_back)

    trends.collect = counting  # type: ignore[assignment]
    try:
        digests = await replay(
            Config(settings, Policy()),
            [date(2026, 7, 19), date(2026, 7, 20)],
            "summary",
            2,
            io.StringIO(),
            io.StringIO(),
        )
    finally:
        trends.collect = original  # type: ignore[assignment]
    assert [d.score for d in digests] == [10, 8]
    # 07-19 looks back at 07-12..07-18, 07-20 at 07-13..07-19: 07-19 comes from its own digest, the rest once.
    assert sorted(calls) == sorted({label for label in calls})
    assert "2026-07-19" not in calls
    assert "score 10 → 8 since yesterday" in digests[1].trends
    # The shared history serves "new today" too: the storm's signatures were not written on 07-19.
    storm = digests[1].novelty
    assert storm is not None
    assert storm.compared == 1
    [said] = next(f for f in digests[1].findings if f.name == "error_lines").signatures
    assert storm.new == {one.key for one in said.signatures}


def test_progress_bar_on_a_terminal() -> None:
    """On a terminal the progress is one redrawn bar ending in a newline; elsewhere plain lines (tested above)."""
    import io

    from digest.app.replay import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    progress = Progress(3, screen)
    for day in ("2026-07-19", "2026-07-20", "2026-07-21"):
        progress.advance(day)
    frames = screen.getvalue().split("\r")[1:]
    assert len(frames) == 3
    assert frames[0].startswith("[" + "█" * 10 + "·" * 20 + "] 1/3 2026-07-19")
    assert frames[-1] == "[" + "█" * 30 + "] 3/3 2026-07-21\n"

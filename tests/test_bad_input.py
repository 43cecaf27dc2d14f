"""Bad input of every kind — policy values, URLs, tokens, secret files, dates, digits, state files — is one line.

Each case runs the real `digest` command as a user would and checks the exit code of the README's "Exit codes"
table, that stderr is exactly one line without a traceback, and that the line names the key or variable at fault
(and never the secret). None of them needs a backend: all are refused before the first query.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from digest.app.engine import Config
from digest.app.settings import load_settings
from digest.backends.http import Endpoint
from digest.backends.prometheus import PrometheusSource
from digest.channels.telegram.bot import parse_digest_arguments
from digest.checks.contract import SourceError, SourceErrorKind
from digest.pipeline.policy import Policy
from digest.pipeline.window import WindowError
from tests.command import clean_env, run_digest

TOKEN = "123456:AAE-bad-input-token"  # noqa: S105  # a well-formed fake token; the tests check it is never printed
CHAT = "42"


def one_line(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The single stderr line of ``result``, after checking its exit code and that nothing else was printed."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]


# --- policy values ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "checks:\n  conntrack: {warn_ratio: .nan}\n",
            "checks.conntrack.warn_ratio: must be a finite number between 0 and 1",
        ),
        ("checks:\n  readiness: {crit_minutes: .inf}\n", "checks.readiness.crit_minutes: must be a finite number"),
        ("checks:\n  error_lines: {warn_lines: -5}\n", "checks.error_lines.warn_lines: must be a finite number, 0 or"),
        ("checks:\n  envoy_flags: {crit_ratio: 1.5}\n", "checks.envoy_flags.crit_ratio: must be a finite number betwe"),
        ("checks:\n  conntrack: {warn_ratio: 0.97}\n", "checks.conntrack.warn_ratio: must be at most crit_ratio"),
        (
            "checks:\n  error_lines: {warn_lines: 600000, crit_lines: 500000}\n",
            "checks.error_lines.warn_lines: must be at most crit_lines",
        ),
        ("checks:\n  conntrack: {warn_penalty: 3}\n", "checks.conntrack.warn_penalty: must be at most crit_penalty"),
        ("checks:\n  log_storms: {crit_factor: 0.5}\n", "checks.log_storms.crit_factor: must be a finite number of at"),
        ("trends: {min_factor: .nan}\n", "trends.min_factor: must be a finite number of at least 1"),
        ("caps:\n  - {checks: [oom_kills], max_penalty: -1}\n", "caps[0].max_penalty: must be a finite number"),
        ("- conntrack\n- error_lines\n", "policy.yaml must be a mapping with keys"),
        ("0\n", "policy.yaml must be a mapping with keys"),
    ],
    ids=[
        "nan-ratio",
        "inf-minutes",
        "negative-lines",
        "ratio-above-1",
        "warn-above-crit-ratio",
        "warn-above-crit-lines",
        "warn-above-crit-penalty",
        "factor-below-1",
        "nan-trend-factor",
        "negative-cap",
        "yaml-list",
        "yaml-number",
    ],
)
def test_senseless_policy_value_is_one_line_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    """A policy value that makes no sense stops `digest run` with exit 2 and one line naming its key."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(text)
    result = run_digest("run", "--date", "2026-07-20", env=clean_env(DIGEST_POLICY_FILE=str(policy)), cwd=tmp_path)
    assert one_line(result).startswith(f"digest: DIGEST_POLICY_FILE: {message}")


def test_binary_policy_file_is_one_line_naming_the_file(tmp_path: Path) -> None:
    """A policy file that is not UTF-8 text is one line naming the variable and the file, not a traceback."""
    policy = tmp_path / "policy.yaml"
    policy.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\x80\x81")
    result = run_digest("run", "--date", "2026-07-20", env=clean_env(DIGEST_POLICY_FILE=str(policy)), cwd=tmp_path)
    assert one_line(result) == f"digest: DIGEST_POLICY_FILE: cannot read {policy} (not UTF-8 text)"


def test_toml_nan_is_refused_too(tmp_path: Path) -> None:
    """TOML's `nan` is refused like YAML's `.nan`: the check it would silently turn off is named."""
    policy = tmp_path / "policy.toml"
    policy.write_text("[checks.memory_pressure]\ncrit_ratio = nan\n")
    result = run_digest("run", "--date", "2026-07-20", env=clean_env(DIGEST_POLICY_FILE=str(policy)), cwd=tmp_path)
    assert "checks.memory_pressure.crit_ratio: must be a finite number between 0 and 1" in one_line(result)


@pytest.mark.parametrize(
    "command", [("serve",), ("replay", "--from", "2026-07-19", "--to", "2026-07-20")], ids=["serve", "replay"]
)
def test_every_command_validates_the_policy(tmp_path: Path, command: tuple[str, ...]) -> None:
    """`serve` and `replay` load the policy through the same validation as `run`: exit 2 before anything starts."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("checks:\n  conntrack: {warn_ratio: .nan}\n")
    env = clean_env(
        DIGEST_POLICY_FILE=str(policy),
        DIGEST_TELEGRAM_TOKEN=TOKEN,
        DIGEST_TELEGRAM_CHAT_IDS=CHAT,
        DIGEST_STATE_PATH=str(tmp_path / "state.sqlite"),
    )
    result = run_digest(*command, env=env, cwd=tmp_path, timeout=60)
    assert one_line(result).startswith("digest: DIGEST_POLICY_FILE: checks.conntrack.warn_ratio: must be a finite")


# --- URLs, tokens and secret files -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DIGEST_VM_URL", "http://127.0.0.1:99999"),
        ("DIGEST_VL_URL", "http://127.0.0.1:0"),
        ("DIGEST_TELEGRAM_API_URL", "https://api.telegram.org:abc"),
        ("DIGEST_TELEGRAM_WEBHOOK_URL", "https://bot.example:70000/telegram"),
        ("DIGEST_HEARTBEAT_URL", "https://hc.example/ping/secret uuid"),
    ],
)
def test_unusable_url_is_one_line_naming_the_variable(tmp_path: Path, variable: str, value: str) -> None:
    """A URL httpx could not send to (port out of range, broken host, a space) is refused at start, by name."""
    result = run_digest("run", "--date", "2026-07-20", env=clean_env(**{variable: value}), cwd=tmp_path, timeout=60)
    line = one_line(result)
    assert line.startswith(f"digest: {variable}: "), line
    assert value not in line  # a URL may carry a secret (the heartbeat's path, user info)


async def test_connect_failure_in_a_task_group_is_unreachable_not_internal_error() -> None:
    """A source asked to connect to port 99999 reports it unreachable instead of leaking anyio's ExceptionGroup."""
    source = PrometheusSource(Endpoint(name="VictoriaMetrics", url="http://127.0.0.1:99999"))
    try:
        with pytest.raises(SourceError) as caught:
            await source.instant("up", datetime(2026, 7, 20, tzinfo=UTC))
    finally:
        await source.aclose()
    assert caught.value.kind is SourceErrorKind.UNREACHABLE


def test_token_with_a_newline_is_one_line_without_the_token(tmp_path: Path) -> None:
    """A bot token with a newline in it is refused at start with one line that names the variable, not the token."""
    broken = "123:abc\nx"  # the malformed token of the issue, a fake one
    env = clean_env(DIGEST_TELEGRAM_TOKEN=broken, DIGEST_TELEGRAM_CHAT_IDS=CHAT)
    line = one_line(run_digest("serve", env=env, cwd=tmp_path, timeout=60))
    assert line.startswith("digest: DIGEST_TELEGRAM_TOKEN: not a bot token")
    assert "abc" not in line


@pytest.mark.parametrize(
    "variable",
    [
        "DIGEST_TELEGRAM_TOKEN_FILE",
        "DIGEST_VM_BEARER_TOKEN_FILE",
        "DIGEST_VM_PASSWORD_FILE",
        "DIGEST_VL_BEARER_TOKEN_FILE",
        "DIGEST_VL_PASSWORD_FILE",
    ],
)
def test_binary_secret_file_is_one_line_naming_its_variable(tmp_path: Path, variable: str) -> None:
    """A `_FILE` secret that is not UTF-8 text is refused naming that `_FILE` variable."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"\xff\xfe\x00\x81\x9f")
    env = clean_env(**{variable: str(secret)}, DIGEST_VM_USERNAME="reader", DIGEST_VL_USERNAME="reader")
    line = one_line(run_digest("run", "--date", "2026-07-20", env=env, cwd=tmp_path, timeout=60))
    assert line == f"digest: {variable}: cannot read {secret} (not UTF-8 text)"


def test_bearer_token_file_of_two_lines_is_refused(tmp_path: Path) -> None:
    """A bearer token file whose token spans two lines is named at start instead of breaking every request."""
    secret = tmp_path / "token"
    secret.write_text("first-half\nsecond-half\n")
    env = clean_env(DIGEST_VM_BEARER_TOKEN_FILE=str(secret))
    line = one_line(run_digest("run", "--date", "2026-07-20", env=env, cwd=tmp_path, timeout=60))
    assert line.startswith("digest: DIGEST_VM_BEARER_TOKEN_FILE: must be one line")
    assert "half" not in line


# --- dates, zones and digits -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        ("run", "--date", "0001-01-01"),
        ("run", "--date", "9999-12-31"),
        ("run", "--last", "1h", "--at", "0001-01-01T00:30:00+01:00"),
        ("run", "--last", "1h", "--at", "9999-12-31T23:30:00-12:00"),
        ("replay", "--from", "0001-01-01", "--to", "0001-01-03"),
        ("replay", "--from", "9999-12-30", "--to", "9999-12-31"),
    ],
)
def test_date_out_of_range_is_a_usage_error(tmp_path: Path, arguments: tuple[str, ...]) -> None:
    """A day whose neighbours or UTC conversion overflow `datetime` is a one-line usage error, not OverflowError."""
    line = one_line(run_digest(*arguments, cwd=tmp_path, timeout=60))
    assert "is out of range: a digest covers days from 1970-01-01 to 9998-12-31" in line


def test_a_day_the_clocks_skipped_is_named(tmp_path: Path) -> None:
    """Samoa skipped 30 December 2011: `--date` that day says so, in one line, exit 2."""
    env = clean_env(DIGEST_TIMEZONE="Pacific/Apia")
    line = one_line(run_digest("run", "--date", "2011-12-30", env=env, cwd=tmp_path, timeout=60))
    assert line == "digest: 2011-12-30 did not exist in Pacific/Apia (the clocks skipped it)"


def test_replay_over_a_skipped_day_is_refused_before_any_query(tmp_path: Path) -> None:
    """A replay range that holds a day the zone skipped names it, instead of failing mid-replay."""
    env = clean_env(DIGEST_TIMEZONE="Pacific/Apia")
    result = run_digest("replay", "--from", "2011-12-29", "--to", "2011-12-31", env=env, cwd=tmp_path, timeout=60)
    assert one_line(result) == "digest: 2011-12-30 did not exist in Pacific/Apia (the clocks skipped it)"


@pytest.mark.parametrize(
    "arguments",
    [
        ("--last", "\u0663h"),  # ARABIC-INDIC DIGIT THREE
        ("--last", "1\u09e6m"),  # BENGALI DIGIT ZERO
    ],
)
def test_only_ascii_digits_are_numbers(tmp_path: Path, arguments: tuple[str, ...]) -> None:
    """`--last` takes ASCII digits only, though Python's int() and regex digits take every script's digits."""
    line = one_line(run_digest("run", *arguments, cwd=tmp_path, timeout=60))
    assert line.startswith("digest: '")
    assert " is not a duration" in line


@pytest.mark.parametrize(
    ("argument", "zone"),
    [
        ("\u0663h", "UTC"),
        ("0001-01-01", "UTC"),
        ("2011-12-30", "Pacific/Apia"),
    ],
)
def test_bot_digest_arguments_are_checked_alike(argument: str, zone: str) -> None:
    """The bot's `/digest ARG` refuses non-ASCII digits, days out of range and skipped days (a usage reply)."""
    config = Config(settings=load_settings(timezone=zone, policy_file=None), policy=Policy())
    with pytest.raises(WindowError):
        parse_digest_arguments([argument], datetime(2026, 7, 21, 12, tzinfo=UTC), config.settings.zone)


# --- the state file and the exit-code table ------------------------------------------------------------------------


def _unusable_state(tmp_path: Path, kind: str) -> Path:
    if kind == "corrupt":
        path = tmp_path / "state.sqlite"
        path.write_bytes(b"not a database " * 200)
        return path
    # A state file under a regular file: its directory can never be created (as a read-only volume, even for root).
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    return blocker / "state.sqlite"


@pytest.mark.parametrize("kind", ["corrupt", "unwritable"])
@pytest.mark.parametrize(
    "command",
    [
        ("run", "--date", "2026-07-20", "--post"),
        ("replay", "--from", "2026-07-19", "--to", "2026-07-20", "--post"),
    ],
    ids=["run-post", "replay-post"],
)
def test_unusable_state_file_exits_2_like_serve(tmp_path: Path, command: tuple[str, ...], kind: str) -> None:
    """`run --post` and `replay --post` refuse a bad state file as `serve` does (test_faults): exit 2, one line."""
    path = _unusable_state(tmp_path, kind)
    env = clean_env(
        DIGEST_TELEGRAM_TOKEN=TOKEN,
        DIGEST_TELEGRAM_CHAT_IDS=CHAT,
        DIGEST_STATE_PATH=str(path),
        # Nothing listens there: the refusal must come before any query or post.
        DIGEST_VM_URL="http://127.0.0.1:9",
        DIGEST_VL_URL="http://127.0.0.1:9",
        DIGEST_TELEGRAM_API_URL="http://127.0.0.1:9",
    )
    line = one_line(run_digest(*command, env=env, cwd=tmp_path, timeout=60))
    assert line.startswith(f"digest: DIGEST_STATE_PATH: state file {path}")
    assert TOKEN not in line


def test_a_locked_state_file_is_worth_retrying_and_a_corrupt_one_is_not(tmp_path: Path) -> None:
    """A state file held by another writer maps to exit 1 (retry as is); a corrupt one to exit 2 (needs a person)."""
    import sqlite3

    from digest.app.exit_codes import EXIT_FAILED, EXIT_USAGE, for_state_error
    from digest.channels.state import DeliveryState
    from digest.pipeline.state import StateError

    locked = tmp_path / "locked.sqlite"
    state = DeliveryState(locked, owner="test", busy_timeout_seconds=0.05)
    holder = sqlite3.connect(locked, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StateError) as busy:
            state.claim(1, "2026-07-20", lease_seconds=60)
    finally:
        state.close()
        holder.execute("ROLLBACK")
        holder.close()
    assert for_state_error(busy.value) == EXIT_FAILED

    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"not a database, " * 512)
    with pytest.raises(StateError) as broken:
        DeliveryState(corrupt, owner="test", busy_timeout_seconds=0.05)
    assert for_state_error(broken.value) == EXIT_USAGE


@pytest.mark.parametrize(("last", "at"), [("", None), ("6h", "")], ids=["empty-last", "empty-at"])
def test_an_empty_duration_or_moment_is_refused_not_defaulted(last: str, at: str | None) -> None:
    """`--last ''` is not a silent 24 h, nor `--at ''` a silent now: both are usage errors."""
    import argparse
    from datetime import UTC, datetime

    from digest.app.cli import window_from_args
    from digest.app.settings import Settings
    from digest.pipeline.window import WindowError

    args = argparse.Namespace(date=None, last=last, at=at)
    with pytest.raises(WindowError):
        window_from_args(args, Settings(), datetime(2026, 7, 21, tzinfo=UTC))

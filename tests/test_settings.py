"""Settings: defaults, secrets from files, and one-line errors naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from digest.app.settings import ConfigError, load_settings
from tests.command import clean_env, run_digest


def test_defaults_are_utc_and_local_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without any variable the digest targets local backends in UTC."""
    for name in ("DIGEST_VM_URL", "DIGEST_VL_URL", "DIGEST_TIMEZONE", "DIGEST_POLICY_FILE"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings()
    assert settings.timezone == "UTC"
    assert settings.vm_endpoint().url.startswith("http://127.0.0.1")


def test_bad_timezone_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown IANA zone fails with a message naming DIGEST_TIMEZONE."""
    monkeypatch.setenv("DIGEST_TIMEZONE", "Mars/Olympus_Mons")
    with pytest.raises(ConfigError, match=r"^DIGEST_TIMEZONE: unknown IANA time zone"):
        load_settings()


def test_bad_url_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A URL without scheme fails naming DIGEST_VM_URL."""
    monkeypatch.setenv("DIGEST_VM_URL", "victoria:8428")
    with pytest.raises(ConfigError, match=r"^DIGEST_VM_URL: "):
        load_settings()


def test_bad_number_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-numeric timeout fails naming DIGEST_QUERY_TIMEOUT."""
    monkeypatch.setenv("DIGEST_QUERY_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match=r"^DIGEST_QUERY_TIMEOUT: "):
        load_settings()


def test_headers_must_be_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """Extra headers that are not a JSON object fail naming DIGEST_VL_HEADERS."""
    monkeypatch.setenv("DIGEST_VL_HEADERS", "X-Scope: 1")
    with pytest.raises(ConfigError, match=r"^DIGEST_VL_HEADERS: "):
        load_settings()


def test_secret_file_is_read_and_never_printed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A bearer token from a _FILE variable reaches the header, not the settings' repr."""
    token_file = tmp_path / "token"
    token_file.write_text("s3cr3t-token\n")
    monkeypatch.setenv("DIGEST_VM_BEARER_TOKEN_FILE", str(token_file))
    settings = load_settings()
    assert settings.vm_endpoint().headers["Authorization"] == "Bearer s3cr3t-token"
    assert "s3cr3t-token" not in repr(settings)


def test_missing_secret_file_names_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An unreadable secret file fails naming the _FILE variable."""
    monkeypatch.setenv("DIGEST_VL_PASSWORD_FILE", str(tmp_path / "absent"))
    monkeypatch.setenv("DIGEST_VL_USERNAME", "reader")
    with pytest.raises(ConfigError, match=r"DIGEST_VL_PASSWORD_FILE: cannot read"):
        load_settings()


def test_tenant_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    """VictoriaLogs tenants become AccountID/ProjectID headers."""
    monkeypatch.setenv("DIGEST_VL_ACCOUNT_ID", "12")
    monkeypatch.setenv("DIGEST_VL_PROJECT_ID", "3")
    headers = load_settings().vl_endpoint().headers
    assert headers["AccountID"] == "12"
    assert headers["ProjectID"] == "3"


def test_cli_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    """`digest run` with a bad variable prints one line naming it and exits 2, without a traceback."""
    result = run_digest("run", "--date", "2026-07-20", env=clean_env(DIGEST_TIMEZONE="Nowhere/Land"), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("digest: DIGEST_TIMEZONE: ")


def test_a_forum_topic_follows_its_chat_after_a_colon(monkeypatch: pytest.MonkeyPatch) -> None:
    """`-100…:77` in DIGEST_TELEGRAM_CHAT_IDS is the chat and its topic; a malformed one names the variable."""
    monkeypatch.setenv("DIGEST_TELEGRAM_CHAT_IDS", "-1001234567890:77, 42")
    settings = load_settings()
    assert settings.telegram_chat_ids == (-1001234567890, 42)
    assert settings.telegram_chat_topics == {-1001234567890: 77}
    for malformed in ("-1001234567890:general", "-1001234567890:", ":77"):
        monkeypatch.setenv("DIGEST_TELEGRAM_CHAT_IDS", malformed)
        with pytest.raises(ConfigError, match=r"^DIGEST_TELEGRAM_CHAT_IDS: .*a forum topic: -100123:77"):
            load_settings()
    monkeypatch.setenv("DIGEST_TELEGRAM_CHAT_IDS", "42")
    monkeypatch.setenv("DIGEST_TELEGRAM_CHAT_TOPICS", "42:1")
    with pytest.raises(ConfigError, match="DIGEST_TELEGRAM_CHAT_TOPICS is not a setting"):
        load_settings()

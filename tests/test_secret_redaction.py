"""No credential reaches the output, in any form: logs, printed digests, /status, error texts.

`DIGEST_VM_URL=http://user:pass@host/` with `-v` once printed ``user:pass`` on 82 lines: httpx logs every request
URL, user info included. The sources now take credentials out of the URL and send them as basic auth, and the log
formatter masks every secret as written and percent-encoded. These tests set every secret the settings know, run the
real command verbosely against real backends and the fake Telegram, and look for each one in everything it printed.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import re
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from digest.app.engine import Config
from digest.app.logs import RedactingFormatter
from digest.app.service import source_status
from digest.app.settings import load_settings
from digest.backends.http import Endpoint
from digest.backends.prometheus import PrometheusSource
from digest.pipeline.policy import Policy
from digest.testbed.embedded import EmbeddedBackends, free_port
from tests.command import clean_env, run_digest
from tests.fake_telegram import FakeTelegram
from tests.misbehaving_server import Behaviour, recording_server

CHAT = -1001234567890
# Each secret is distinctive, and has characters that percent-encoding changes (":", "@", "/", "+", " ").
TOKEN = "987654321:AAHsecret-token-for-redaction_test"  # noqa: S105  # a test token for the fake Telegram
VM_USER, VM_PASSWORD = "vm-url-user", "vm-p@ss/w0rd:x+y"
VL_USER, VL_PASSWORD = "vl-url-user", "vl url p@ss"
TELEGRAM_USER, TELEGRAM_PASSWORD = "tg-proxy-user", "tg-proxy/p@ss"
VM_BEARER = "vm-bearer-secret-0a1b2c"
VL_BEARER = "vl-bearer-secret-3d4e5f"
VL_BASIC_PASSWORD = "vl-basic-p@ssword"  # noqa: S105  # a test credential, ignored by the test backends
VM_HEADER = "vm-header-api-key:77"
VL_HEADER = "vl-header-api-key/88"
HEARTBEAT_PATH = "/ping/heartbeat-secret-4e1c9a"
WEBHOOK_SECRET = "webhook-secret-7f3a9b"  # noqa: S105  # a test credential

SECRETS = [
    TOKEN,
    VM_USER,
    VM_PASSWORD,
    VL_USER,
    VL_PASSWORD,
    TELEGRAM_USER,
    TELEGRAM_PASSWORD,
    VM_BEARER,
    VL_BEARER,
    VL_BASIC_PASSWORD,
    VM_HEADER,
    VL_HEADER,
    HEARTBEAT_PATH,
    WEBHOOK_SECRET,
]


def with_userinfo(url: str, user: str, password: str) -> str:
    """``url`` with ``user:password@`` written into it, percent-encoded as a URL needs."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{quote(user, safe='')}:{quote(password, safe='')}@{rest}"


def leaks(text: str, secrets: list[str]) -> list[str]:
    """Every form (as written, percent-encoded with and without "/" kept, form-encoded) of a secret in ``text``."""
    forms = {form for secret in secrets for form in (secret, quote(secret, safe=""), quote(secret), quote_plus(secret))}
    return sorted(form for form in forms if form in text)


def test_verbose_runs_print_no_secret(corpus_backends: EmbeddedBackends, tmp_path: Path) -> None:
    """`-v run --post` and `-v run --format json` with every secret set, a backend down too: none is printed."""
    bearer_file = tmp_path / "vl-bearer"
    bearer_file.write_text(VL_BEARER + "\n")
    closed = f"http://127.0.0.1:{free_port()}"
    with FakeTelegram(TOKEN, known_chats={CHAT}) as telegram:
        env = clean_env(
            DIGEST_CLUSTER="homelab",
            DIGEST_TIMEZONE="UTC",
            DIGEST_VM_URL=with_userinfo(corpus_backends.metrics.url, VM_USER, VM_PASSWORD),
            DIGEST_VL_URL=with_userinfo(corpus_backends.logs.url, VL_USER, VL_PASSWORD),
            DIGEST_VM_BEARER_TOKEN=VM_BEARER,
            DIGEST_VM_HEADERS=json.dumps({"X-Api-Key": VM_HEADER}),
            DIGEST_VL_BEARER_TOKEN_FILE=str(bearer_file),
            DIGEST_VL_USERNAME="vl-basic-user",
            DIGEST_VL_PASSWORD=VL_BASIC_PASSWORD,
            DIGEST_VL_HEADERS=json.dumps({"X-Api-Key": VL_HEADER}),
            DIGEST_TELEGRAM_TOKEN=TOKEN,
            DIGEST_TELEGRAM_API_URL=with_userinfo(telegram.root, TELEGRAM_USER, TELEGRAM_PASSWORD),
            DIGEST_TELEGRAM_CHAT_IDS=str(CHAT),
            DIGEST_TELEGRAM_WEBHOOK_SECRET=WEBHOOK_SECRET,
            DIGEST_HEARTBEAT_URL=f"{closed}{HEARTBEAT_PATH}",
            DIGEST_STATE_PATH=str(tmp_path / "state.sqlite"),
        )
        posted = run_digest("-v", "run", "--date", "2026-07-20", "--post", env=env, cwd=tmp_path)
        # The same, as JSON, with VictoriaLogs' URL (credentials and all) pointing at a closed port: the error path.
        env["DIGEST_VL_URL"] = with_userinfo(closed, VL_USER, VL_PASSWORD)
        failed = run_digest("-v", "run", "--date", "2026-07-20", "--format", "json", env=env, cwd=tmp_path)
        assert [call.method for call in telegram.sent_to(CHAT)] == ["sendMessage", "sendPhoto"]
    assert posted.returncode == 0, posted.stderr
    assert failed.returncode == 0, failed.stderr
    output = "\n".join((posted.stdout, posted.stderr, failed.stdout, failed.stderr))
    assert leaks(output, SECRETS) == []
    # -v: one line per backend query (its backend, path, time, status, duration, size and the query), not httpx's.
    queried = [line for line in posted.stderr.splitlines() if " digest.queries: " in line]
    assert any(" digest.queries: VictoriaMetrics /api/v1/query at 2026-07-2" in line for line in queried), queried[:3]
    assert any(" digest.queries: VictoriaLogs /select/logsql/stats_query " in line for line in queried)
    assert all(re.search(r": HTTP \d{3} in \d+\.\d{3} s, [\d,]+ bytes: \S", line) for line in queried)
    requests = [line for line in posted.stderr.splitlines() if "HTTP Request: " in line]
    assert not [line for line in requests if "/api/v1/" in line or "/select/logsql/" in line]  # said by digest.queries
    assert any("/bot[redacted]/sendMessage" in line for line in requests)  # the chat's calls keep httpx's line
    errors = {check["name"]: check["error"] for check in json.loads(failed.stdout)["checks"]}
    assert f"cannot reach {closed}: connection refused: nothing listens on {closed[7:]}" in errors["error_lines"]


async def test_status_names_an_unreachable_backend_without_its_credentials() -> None:
    """/status's line for a backend down, whose URL carries credentials, shows the host but not them."""
    closed = f"http://127.0.0.1:{free_port()}"
    settings = load_settings(
        vm_url=with_userinfo(closed, VM_USER, VM_PASSWORD),
        vl_url=with_userinfo(closed, VL_USER, VL_PASSWORD),
        policy_file=None,
    )
    lines = await source_status(Config(settings=settings, policy=Policy()), datetime(2026, 7, 20, tzinfo=UTC))
    assert lines[0].startswith(f"VictoriaMetrics: UNREACHABLE (cannot reach {closed}: connection refused: nothing")
    assert leaks("\n".join(lines), SECRETS) == []


async def test_url_credentials_go_as_basic_auth_and_not_into_httpx_logs(caplog: pytest.LogCaptureFixture) -> None:
    """Credentials in a backend URL still open it (decoded, as basic auth); httpx's request log never sees them."""
    body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    with recording_server(Behaviour(body=body)) as served:
        source = PrometheusSource(Endpoint("VictoriaMetrics", with_userinfo(served.url, VM_USER, VM_PASSWORD)))
        try:
            with caplog.at_level(logging.INFO, logger="httpx"):
                await source.instant("up", datetime(2026, 7, 20, tzinfo=UTC))
        finally:
            await source.aclose()
    expected = base64.b64encode(f"{VM_USER}:{VM_PASSWORD}".encode()).decode()
    assert served.requests[0].headers["Authorization"] == f"Basic {expected}"
    assert f"POST {served.url}/api/v1/query" in caplog.text
    assert leaks(caplog.text, SECRETS) == []


def test_formatter_masks_secrets_percent_encoded() -> None:
    """The redacting formatter masks a token quoted in a URL (``123%3AABC``, either hex case) as well as raw."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter("%(message)s", [TOKEN, VM_PASSWORD]))
    logger = logging.getLogger("percent-redaction-test")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("GET https://api.example/bot%s/getMe", quote(TOKEN, safe=""))
        logger.warning("GET https://api.example/bot%s/getMe", quote(TOKEN, safe="").replace("%3A", "%3a"))
        logger.warning("GET https://user:%s@host/ and %s", quote(VM_PASSWORD, safe=""), quote_plus(VM_PASSWORD))
        logger.warning("form password=%s", quote(VM_PASSWORD))
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert leaks(text, [TOKEN, VM_PASSWORD]) == []
    assert "%3a" not in text.lower()
    assert text.count("[redacted]") == 5

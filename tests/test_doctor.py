"""`digest doctor` against real backends: right URLs pass, the usual mistakes are named with their fix, exit 2."""

from __future__ import annotations

import errno
import json
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from digest.backends.http import status_words, why_unreachable
from digest.testbed.embedded import EmbeddedBackends, free_port
from tests.command import backend_env, run_digest
from tests.fake_telegram import FakeTelegram

AT = "2026-07-21T00:00:00Z"  # the 24 h of the corpus day 2026-07-20


def test_right_urls_and_a_full_day_are_ready(corpus_backends: EmbeddedBackends) -> None:
    """Both backends identified, every check reads what it needs on 07-20: "Ready", exit 0."""
    result = run_digest("doctor", "--at", AT, env=backend_env(corpus_backends))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"✓ DIGEST_VM_URL {corpus_backends.metrics.url}: a VictoriaMetrics answers" in out
    assert f"✓ DIGEST_VL_URL {corpus_backends.logs.url}: a VictoriaLogs answers" in out
    assert "✓ oom_kills (graded): runs, reads" in out
    assert out.rstrip().endswith("Ready: every graded check can run.")


def test_an_api_path_in_the_url_and_a_swapped_url_are_named_with_their_fix(corpus_backends: EmbeddedBackends) -> None:
    """DIGEST_VM_URL ending in /api/v1 and DIGEST_VL_URL pointing at VictoriaMetrics: each named, fixed, exit 2."""
    env = backend_env(corpus_backends)
    env["DIGEST_VM_URL"] = corpus_backends.metrics.url + "/api/v1"
    env["DIGEST_VL_URL"] = corpus_backends.metrics.url
    result = run_digest("doctor", "--at", AT, "--format", "json", env=env, timeout=300)
    assert result.returncode == 2, result.stderr
    payload = json.loads(result.stdout)
    metrics, logs = payload["urls"]
    assert metrics["fix"] == f"drop the /api/v1 suffix: the base URL is {corpus_backends.metrics.url}"
    assert not metrics["ok"]
    assert logs["answers"] == "a VictoriaMetrics"
    assert not logs["ok"]
    assert payload["ok"] is False
    oom = next(check for check in payload["checks"] if check["name"] == "oom_kills")
    assert oom["said"] == "cannot run: DIGEST_VM_URL is wrong (see above)"  # said once, at the URL, not per check


def test_a_wrong_url_in_a_digest_is_said_once_with_its_fix(corpus_backends: EmbeddedBackends) -> None:
    """`digest run` with DIGEST_VM_URL ending in /api/v1: the fix once, the other blind checks "as oom_kills"."""
    env = backend_env(corpus_backends)
    env["DIGEST_VM_URL"] = corpus_backends.metrics.url + "/api/v1"
    result = run_digest("run", "--date", "2026-07-20", env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    first_line = result.stdout.splitlines()[0]
    # The flood still costs its points; what could not be checked is in the headline all the same.
    assert first_line.startswith("CRITICAL 8/10 · homelab · 2026-07-20")
    assert first_line.endswith("not checked: oom_kills, conntrack, envoy_flags")
    blind = [line for line in result.stdout.splitlines() if line.startswith("? ")]
    assert sum("drop the /api/v1 suffix" in line for line in blind) == 1
    assert "? conntrack not checked · as oom_kills" in result.stdout


def _plain_http_server() -> tuple[ThreadingHTTPServer, str]:
    """A loopback server that answers plain HTTP 404 to everything: asked over https://, its TLS handshake fails."""

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the standard library's name
            self.send_error(404)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"127.0.0.1:{server.server_address[1]}"


def test_an_unreachable_url_says_why_dns_refused_or_tls(corpus_backends: EmbeddedBackends) -> None:
    """A name that does not resolve, a closed port and https:// to a plain-HTTP port: each told apart, exit 2."""
    closed = f"127.0.0.1:{free_port()}"
    server, plain = _plain_http_server()
    try:
        for url, said in (
            ("http://digest-test.invalid:8428", "the name digest-test.invalid does not resolve (DNS"),
            (f"http://{closed}", f"connection refused: nothing listens on {closed}"),
            (f"https://{plain}", f"TLS handshake failed: {plain} speaks plain HTTP (write http://, not https://)"),
        ):
            env = backend_env(corpus_backends)
            env["DIGEST_VM_URL"] = url
            result = run_digest("doctor", "--at", AT, env=env, timeout=300)
            assert result.returncode == 2, result.stdout + result.stderr
            line = next(line for line in result.stdout.splitlines() if "DIGEST_VM_URL" in line)
            assert line.strip() == f"✗ DIGEST_VM_URL {url}: {line.split(': ', 1)[1]}"
            assert said in line, line
            assert "nothing known" not in line
    finally:
        server.shutdown()
        server.server_close()


def test_a_run_says_why_each_backend_is_unreachable(corpus_backends: EmbeddedBackends, tmp_path: Path) -> None:
    """`digest run` tells a name that does not resolve, a closed port and https:// to plain HTTP apart, per check."""
    closed = f"127.0.0.1:{free_port()}"
    policy = tmp_path / "policy.toml"
    policy.write_text("[trends]\ndays = 0\n")  # the day alone: what is asked of the unreachable store is the point
    server, plain = _plain_http_server()
    try:
        for metrics, logs, said_metrics, said_logs in (
            (
                "http://digest-test.invalid:8428",
                f"http://{closed}",
                "the name digest-test.invalid does not resolve (DNS",
                f"connection refused: nothing listens on {closed}",
            ),
            (
                f"https://{plain}",
                corpus_backends.logs.url,
                f"TLS handshake failed: {plain} speaks plain HTTP (write http://, not https://)",
                None,
            ),
        ):
            env = backend_env(corpus_backends)
            env |= {"DIGEST_VM_URL": metrics, "DIGEST_VL_URL": logs, "DIGEST_POLICY_FILE": str(policy)}
            result = run_digest("run", "--date", "2026-07-20", "--format", "json", env=env, timeout=300)
            payload = json.loads(result.stdout)
            errors = {check["name"]: check["error"] or "" for check in payload["checks"]}
            assert said_metrics in errors["oom_kills"], errors["oom_kills"]
            if said_logs is not None:
                assert said_logs in errors["error_lines"], errors["error_lines"]
            assert "nothing known" not in result.stdout
    finally:
        server.shutdown()
        server.server_close()


def _answering(status: int) -> tuple[ThreadingHTTPServer, str]:
    """A loopback server that answers ``status`` to every request, as an authenticating proxy or a gateway does."""

    class Refusing(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"go away")

        do_GET = do_POST = _answer  # noqa: N815  # http.server's handler names

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (401, "HTTP 401 Unauthorized: it wants credentials (DIGEST_VM_BEARER_TOKEN_FILE, or DIGEST_VM_USERNAME"),
        (403, "HTTP 403 Forbidden: the credentials sent may not read it"),
        # Not retried, unlike 502-504 (their words: the test below): the store's refusal is the whole test.
        (500, "HTTP 500 Internal Server Error: the server failed on its side"),
    ],
)
def test_a_refusing_server_is_named_by_its_status_in_doctor_and_run(
    corpus_backends: EmbeddedBackends, tmp_path: Path, status: int, said: str
) -> None:
    """An authenticating proxy's 401 or 403, a failing server's 500: doctor and run say so in plain words."""
    server, url = _answering(status)
    policy = tmp_path / "policy.toml"
    policy.write_text("[trends]\ndays = 0\n")
    try:
        env = backend_env(corpus_backends) | {"DIGEST_VM_URL": url, "DIGEST_POLICY_FILE": str(policy)}
        doctor = run_digest("doctor", "--at", AT, env=env, timeout=300)
        assert doctor.returncode == 2, doctor.stdout + doctor.stderr
        line = next(line for line in doctor.stdout.splitlines() if "DIGEST_VM_URL" in line)
        assert said in line, line
        assert "nothing known" not in line
        run = run_digest("run", "--date", "2026-07-20", "--format", "json", env=env, timeout=300)
        errors = {check["name"]: check["error"] or "" for check in json.loads(run.stdout)["checks"]}
        assert said in errors["oom_kills"], errors["oom_kills"]
    finally:
        server.shutdown()
        server.server_close()


def test_status_words_name_what_each_refusal_means() -> None:
    """A multi-tenant Loki's 401 names its tenant; statuses that refuse nothing in particular get no words."""
    assert status_words(401, "DIGEST_LOKI_URL", "no org id\n") == (
        "HTTP 401 Unauthorized: a multi-tenant Loki wants its tenant (DIGEST_LOKI_TENANT, sent as X-Scope-OrgID)"
    )
    assert "DIGEST_VL_BEARER_TOKEN_FILE" in (status_words(401, "DIGEST_VL_URL") or "")
    assert status_words(503) == (
        "HTTP 503 Service Unavailable: the store is starting or overloaded, or a proxy in front of it has no healthy"
        " backend"
    )
    assert status_words(502) == "HTTP 502 Bad Gateway: a proxy in front of the store could not reach it"
    assert status_words(200) is None
    assert status_words(418) is None


def _verify_error() -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    error.verify_message = "self-signed certificate"
    return error


def _wrapped(cause: BaseException) -> httpx.ConnectError:
    """``cause`` as httpx hands it over: an httpx error raised from httpcore's, raised from the socket's."""
    try:
        try:
            raise cause
        except BaseException as inner:
            raise httpx.ConnectError(str(inner)) from inner
    except httpx.ConnectError as outer:
        return outer


@pytest.mark.parametrize(
    ("cause", "said"),
    [
        (socket.gaierror(-2, "Name or service not known"), "the name vm.example does not resolve (DNS"),
        (ConnectionRefusedError(111, "refused"), "connection refused: nothing listens on vm.example:8428"),
        (httpx.ConnectTimeout("timed out"), "no answer from vm.example:8428 (timed out"),
        (OSError(errno.EHOSTUNREACH, "No route to host"), "vm.example is unreachable from here (no route"),
        (_verify_error(), "TLS: the certificate of vm.example is not trusted (self-signed certificate; SSL_CERT_FILE"),
        (ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"), "vm.example:8428 speaks plain HTTP"),
        (RuntimeError("something else"), "cannot connect (ConnectError)"),
    ],
)
def test_each_way_of_not_reaching_a_backend_is_told_apart(cause: BaseException, said: str) -> None:
    """The socket's or TLS' own error under httpx's says what to fix; an unknown one its type, as before."""
    assert said in why_unreachable(_wrapped(cause), "http://vm.example:8428")


def test_the_bot_token_and_each_chat_are_checked_without_posting(
    corpus_backends: EmbeddedBackends, tmp_path: Path
) -> None:
    """A known chat ✓, a chat the bot is not in ✗, a topic in a chat that is no forum ✗: exit 2, nothing posted."""
    token = "123456:AAE-doctor-token"  # noqa: S105  # a fake token for the loopback Bot API
    forum, plain, stranger = -1001111111111, -1002222222222, -1003333333333
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    with FakeTelegram(token, known_chats={forum, plain}) as tg:
        tg.add_topic(forum, 77)
        env = backend_env(
            corpus_backends,
            DIGEST_TELEGRAM_API_URL=tg.root,
            DIGEST_TELEGRAM_TOKEN_FILE=str(token_file),
            DIGEST_TELEGRAM_CHAT_IDS=f"{forum}:77,{plain}:5,{stranger}",
        )
        result = run_digest("doctor", "--at", AT, env=env, timeout=300)
        good = run_digest("doctor", "--at", AT, env={**env, "DIGEST_TELEGRAM_CHAT_IDS": f"{forum}:77,{plain}"})
        assert tg.sent == []
        assert not [call for call in tg.calls if call.method.startswith("send")]
    assert result.returncode == 2, result.stdout + result.stderr
    out = result.stdout
    assert "Delivery (Telegram, asked without posting):" in out
    assert "✓ @digest_test_bot: the token is accepted" in out
    assert f"✓ chat {forum}:77: supergroup “Chat {forum}”, a forum: posts go to topic 77" in out
    assert f"✗ chat {plain}:5: supergroup “Chat {plain}” is no forum: topic 5 cannot be posted to" in out
    assert f"✗ chat {stranger}: chat not found: the bot was never added to it" in out
    assert token not in out + result.stderr
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.rstrip().endswith("Ready: every graded check can run, and every chat can be posted to.")


def test_a_refused_token_is_named_and_no_token_is_said_quietly(
    corpus_backends: EmbeddedBackends, tmp_path: Path
) -> None:
    """A token Telegram refuses: ✗ and exit 2; no token at all: one quiet line (digests printed), exit 0."""
    token_file = tmp_path / "token"
    token_file.write_text("999:not-the-bots-token\n")
    with FakeTelegram("123456:AAE-the-real-one", known_chats={-100}) as tg:
        env = backend_env(
            corpus_backends,
            DIGEST_TELEGRAM_API_URL=tg.root,
            DIGEST_TELEGRAM_TOKEN_FILE=str(token_file),
            DIGEST_TELEGRAM_CHAT_IDS="-100",
        )
        refused = run_digest("doctor", "--at", AT, env=env, timeout=300)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "✗ the Telegram API refused the bot token" in refused.stdout
    quiet = run_digest("doctor", "--at", AT, env=backend_env(corpus_backends), timeout=300)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert (
        "Delivery: no Telegram token set (DIGEST_TELEGRAM_TOKEN_FILE): digests are printed, not posted." in quiet.stdout
    )

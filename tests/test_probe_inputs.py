"""Inputs an outside probe found still broken: compression bombs, re-encoded URLs, unsendable settings, huge numbers.

Each was a traceback (or gigabytes of memory) before; now each is a `SourceError` the check reports as UNKNOWN, a
masked log line, or one line naming the variable or key with exit 2.
"""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from digest.app.logs import RedactingFormatter
from digest.app.settings import load_settings
from digest.backends.http import MIB, BoundedInflater, Endpoint
from digest.backends.prometheus import PrometheusSource
from digest.checks.contract import SourceError, SourceErrorKind
from tests.command import clean_env, run_digest
from tests.misbehaving_server import Behaviour, misbehaving_server
from tests.test_bad_input import one_line

AT = datetime(2026, 7, 20, tzinfo=UTC)
ANSWER = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()


async def _ask(behaviour: Behaviour) -> SourceError | None:
    """Query a server behaving so, with a 1 MiB cap; the error raised, or None if the query succeeded."""
    with misbehaving_server(behaviour) as url:
        source = PrometheusSource(Endpoint("VictoriaMetrics", url, max_response_bytes=MIB, timeout_seconds=10))
        try:
            await source.instant("up", AT)
        except SourceError as error:
            return error
        finally:
            await source.aclose()
    return None


# --- 1. compressed answers ---------------------------------------------------------------------------------------


async def test_stacked_content_encodings_are_refused() -> None:
    """`Content-Encoding: gzip, gzip` (a nested bomb) is a BAD_RESPONSE naming the stacked encodings."""
    bomb = gzip.compress(gzip.compress(bytes(8 * MIB)))
    error = await _ask(Behaviour(body=bomb, content_encoding="gzip, gzip"))
    assert error is not None
    assert error.kind is SourceErrorKind.BAD_RESPONSE
    assert "response with stacked encodings (gzip, gzip)" in str(error)


async def test_unknown_content_encoding_is_refused() -> None:
    """A coding the digest did not ask for is refused by name instead of being parsed as JSON."""
    error = await _ask(Behaviour(body=ANSWER, content_encoding="compress"))
    assert error is not None
    assert error.kind is SourceErrorKind.BAD_RESPONSE
    assert "unsupported encoding 'compress'" in str(error)


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate"])
async def test_single_compressed_answer_still_reads(coding: str) -> None:
    """An ordinary gzip, zlib-deflate or raw-deflate answer is inflated and parsed as before."""
    if coding == "gzip":
        body = gzip.compress(ANSWER)
    elif coding == "deflate":
        body = zlib.compress(ANSWER)
    else:
        squeezer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        body = squeezer.compress(ANSWER) + squeezer.flush()
    header = "deflate" if coding == "raw-deflate" else coding
    assert await _ask(Behaviour(body=body, content_encoding=header)) is None


async def test_single_layer_bomb_is_too_large() -> None:
    """A gzip answer inflating past the cap is refused as too large, as an uncompressed one would be."""
    error = await _ask(Behaviour(body=gzip.compress(bytes(8 * MIB)), content_encoding="gzip"))
    assert error is not None
    assert "response larger than 1 MiB" in str(error)


def test_inflating_one_chunk_never_overshoots_the_room() -> None:
    """One 64 KiB chunk of a gzip bomb (~64 MiB inflated) yields nothing past the room left, not the whole chunk."""
    chunk = gzip.compress(bytes(200 * MIB))[: 64 * 1024]
    inflater = BoundedInflater("gzip")
    assert inflater.inflate(chunk, MIB) is None
    small = BoundedInflater("gzip").inflate(gzip.compress(b"x" * 1000), MIB)
    assert small == b"x" * 1000


# --- 2. the heartbeat URL as httpx logs it ------------------------------------------------------------------------


def test_heartbeat_secret_is_masked_as_httpx_prints_it() -> None:
    """The request log writes `{` as `%7B`: the heartbeat's secret path and query are masked in that form too."""
    url = "http://127.0.0.1:9/ping/hb{SECRETf}|x^y?k=qsSECRETg"
    settings = load_settings(heartbeat_url=url, policy_file=None)
    formatter = RedactingFormatter("%(message)s", settings.secrets())
    record = logging.LogRecord("httpx", logging.INFO, __file__, 1, "HTTP Request: GET %s", (httpx.URL(url),), None)
    text = formatter.format(record)
    assert "SECRET" not in text, text


# --- 3. settings that would fail at the first request ------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("DIGEST_VM_BEARER_TOKEN", "sëcret-zq7", "must be ASCII"),
        ("DIGEST_VL_BEARER_TOKEN", "sëcret-zq7", "must be ASCII"),
        ("DIGEST_VM_HEADERS", '{"X-K":"välue-zq7"}', "the value of header 'X-K' must be printable ASCII"),
        ("DIGEST_VL_HEADERS", '{"X-K":"va\\nlue-zq7"}', "the value of header 'X-K' must be printable ASCII"),
        ("DIGEST_VM_HEADERS", '{"Content-Length":"39"}', "header 'Content-Length' is set by the HTTP client"),
        ("DIGEST_VL_HEADERS", '{"transfer-encoding":"chunked"}', "header 'transfer-encoding' is set by the HTTP"),
        ("DIGEST_VM_HEADERS", '{"X K":"v"}', "a header name is not an HTTP token"),
        ("DIGEST_VM_URL", "http://xn--zz:8428", "has a host name that is not valid IDNA"),
        ("DIGEST_VL_URL", "http://xn--:9428", "has a host name that is not valid IDNA"),
        ("DIGEST_TELEGRAM_API_URL", "http://xn--zz", "has a host name that is not valid IDNA"),
        ("DIGEST_HEARTBEAT_URL", "http://xn--zz/ping/zq7", "has a host name that is not valid IDNA"),
    ],
)
def test_unsendable_setting_is_one_line_naming_the_variable(
    tmp_path: Path, variable: str, value: str, message: str
) -> None:
    """A header, token or host that httpx cannot put on the wire is refused at start: exit 2, one line, no secret."""
    env = clean_env(DIGEST_VM_URL="http://127.0.0.1:9", DIGEST_VL_URL="http://127.0.0.1:9")
    env[variable] = value
    line = one_line(run_digest("run", "--date", "2026-07-20", env=env, cwd=tmp_path, timeout=60))
    assert line.startswith(f"digest: {variable}: {message}"), line
    assert "zq7" not in line  # the marker every secret-bearing value above carries


# --- 4. policy numbers ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("checks:\n  error_lines: {warn_lines: 1" + "0" * 330 + "}\n", "checks.error_lines.warn_lines: too large"),
        ("checks:\n  error_lines: {warn_lines: true}\n", "checks.error_lines.warn_lines: must be a number, not a bool"),
        (
            'checks:\n  error_lines: {warn_lines: "50000"}\n',
            "checks.error_lines.warn_lines: must be a number, not text",
        ),
    ],
    ids=["huge-int", "boolean", "quoted"],
)
def test_policy_number_of_the_wrong_kind_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    """A threshold too large for a float, a boolean or a quoted number is one line naming its key, exit 2."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(text)
    result = run_digest("run", "--date", "2026-07-20", env=clean_env(DIGEST_POLICY_FILE=str(policy)), cwd=tmp_path)
    assert one_line(result).startswith(f"digest: DIGEST_POLICY_FILE: {message}")

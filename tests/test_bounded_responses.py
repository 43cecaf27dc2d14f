"""A backend answering hundreds of megabytes costs the digest a bounded read, not its memory.

A 300 MB answer once took `digest run` to 10.6 GiB and 55 s: the body was held whole, then decoded. The sources now
stream each answer and stop at DIGEST_MAX_RESPONSE_MIB (32 by default); the check is UNKNOWN with "response larger
than N MiB". The runs here are real `digest run` processes against a loopback server that makes its body up while
sending it, and the peak memory is the one each process reports for its own address space.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from digest.app.settings import load_settings
from digest.backends.http import MIB, Endpoint
from digest.backends.prometheus import PrometheusSource
from digest.checks.contract import SourceError, SourceErrorKind
from digest.testbed.embedded import free_port
from tests.command import clean_env, run_digest
from tests.misbehaving_server import Behaviour, misbehaving_server

BODY_BYTES = 300_000_000  # the size of the answer that was observed
# Far below the body, far above what a bounded run needs (about 80 MiB with one 32 MiB answer in flight).
MAX_RSS = 200 * MIB


# `digest` run as `python -m digest.app.cli` does, reporting at exit the peak resident memory of its own address space
# (VmHWM). Not `wait4`'s ru_maxrss: Linux carries the parent's memory into a child's ru_maxrss across fork and exec,
# so the test session's own size (the corpus it loaded) would be counted as the child's.
_REPORT_PEAK = """
import atexit, runpy, sys
def report(path=sys.argv.pop(1)):
    with open("/proc/self/status") as status:
        peak = next(line for line in status if line.startswith("VmHWM:"))
    with open(path, "w") as out:
        out.write(peak.split()[1])
atexit.register(report)
runpy.run_module("digest.app.cli", run_name="__main__", alter_sys=True)
"""


@dataclass(frozen=True)
class Measured:
    """A finished `digest` process: its exit code, output, and the most memory it ever held."""

    returncode: int
    stdout: str
    stderr: str
    max_rss_bytes: int


def run_measured(*args: str, env: dict[str, str], directory: Path, timeout: float = 90.0) -> Measured:
    """Run ``digest ARGS`` to completion; its peak resident memory is the one it reports for itself."""
    peak_path = directory / "peak-kib"
    result = subprocess.run(
        [sys.executable, "-c", _REPORT_PEAK, str(peak_path), *args],
        env=env,
        cwd=directory,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    return Measured(result.returncode, result.stdout, result.stderr, int(peak_path.read_text()) * 1024)


def _errors(stdout: str) -> dict[str, str]:
    payload = json.loads(stdout)
    assert {check["status"] for check in payload["checks"]} == {"UNKNOWN"}
    return {check["name"]: check["error"] for check in payload["checks"]}


def test_default_cap_is_32_mib_and_bounds_a_300_mb_answer(tmp_path: Path) -> None:
    """With no setting, a 300 MB answer is cut at 32 MiB: its checks UNKNOWN, the process far below the body in RSS."""
    assert load_settings(policy_file=None).max_response_mib == 32
    assert load_settings(policy_file=None).vm_endpoint().max_response_bytes == 32 * MIB
    # One query in flight and no trends: the bound under test is per answer, and fewer answers keep the test short.
    policy = tmp_path / "policy.toml"
    policy.write_text("[trends]\ndays = 0\n")
    with misbehaving_server(Behaviour(stream_bytes=BODY_BYTES)) as huge:
        env = clean_env(
            DIGEST_VM_URL=huge,
            DIGEST_VL_URL=f"http://127.0.0.1:{free_port()}",
            DIGEST_TIMEZONE="UTC",
            DIGEST_POLICY_FILE=str(policy),
            DIGEST_MAX_CONCURRENCY="1",
        )
        result = run_measured("run", "--date", "2026-07-20", "--format", "json", env=env, directory=tmp_path)
    assert result.returncode == 0, result.stderr
    errors = _errors(result.stdout)
    assert "VictoriaMetrics bad_response: response larger than 32 MiB" in errors["oom_kills"]
    assert result.max_rss_bytes < MAX_RSS, f"peak RSS {result.max_rss_bytes / MIB:.0f} MiB"


def test_configured_cap_applies_to_both_backends(tmp_path: Path) -> None:
    """DIGEST_MAX_RESPONSE_MIB=1: every check of a full run (trends too) is UNKNOWN at 1 MiB, RSS stays flat."""
    with misbehaving_server(Behaviour(stream_bytes=BODY_BYTES)) as huge:
        env = clean_env(DIGEST_VM_URL=huge, DIGEST_VL_URL=huge, DIGEST_TIMEZONE="UTC", DIGEST_MAX_RESPONSE_MIB="1")
        result = run_measured("run", "--date", "2026-07-20", "--format", "json", env=env, directory=tmp_path)
    assert result.returncode == 0, result.stderr
    errors = _errors(result.stdout)
    assert "VictoriaMetrics bad_response: response larger than 1 MiB" in errors["conntrack"]
    assert "VictoriaLogs bad_response: response larger than 1 MiB" in errors["error_lines"]
    assert result.max_rss_bytes < MAX_RSS, f"peak RSS {result.max_rss_bytes / MIB:.0f} MiB"


async def test_declared_length_above_the_cap_is_refused_unread() -> None:
    """A Content-Length above the cap is refused from the headers alone (the body actually sent is tiny)."""
    small = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    with misbehaving_server(Behaviour(body=small, declared_length=BODY_BYTES)) as url:
        source = PrometheusSource(Endpoint("VictoriaMetrics", url, max_response_bytes=MIB, timeout_seconds=10))
        try:
            with pytest.raises(SourceError) as raised:
                await source.instant("up", datetime(2026, 7, 20, tzinfo=UTC))
        finally:
            await source.aclose()
    assert (raised.value.kind, raised.value.message) == (SourceErrorKind.BAD_RESPONSE, "response larger than 1 MiB")


async def test_answer_under_the_cap_is_read_whole() -> None:
    """An answer just under the cap is read and decoded as before: the cap cuts only what is above it."""
    series = ",".join(f'{{"metric":{{"pod":"p{index}"}},"value":[1,"{index}"]}}' for index in range(15000))
    body = ('{"status":"success","data":{"resultType":"vector","result":[' + series + "]}}").encode()
    assert 0.5 * MIB < len(body) < MIB
    with misbehaving_server(Behaviour(stream_bytes=0, body=body)) as url:
        source = PrometheusSource(Endpoint("VictoriaMetrics", url, max_response_bytes=MIB, timeout_seconds=10))
        try:
            samples = await source.instant("up", datetime(2026, 7, 20, tzinfo=UTC))
        finally:
            await source.aclose()
    assert len(samples) == 15000


def test_cap_must_be_positive(tmp_path: Path) -> None:
    """DIGEST_MAX_RESPONSE_MIB=0 stops `digest run` with one line naming the variable, exit 2."""
    result = run_digest("run", "--date", "2026-07-20", env=clean_env(DIGEST_MAX_RESPONSE_MIB="0"), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == "digest: DIGEST_MAX_RESPONSE_MIB: Input should be greater than 0"

"""`digest doctor` against real backends: right URLs pass, the usual mistakes are named with their fix, exit 2."""

from __future__ import annotations

import json

from testbed.embedded import EmbeddedBackends
from tests.command import backend_env, run_digest

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

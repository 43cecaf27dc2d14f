"""A digest never says OK about what it could not see: real backends stopped, slowed, or replaced by bad ones."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path

from digest.app.engine import Config, make_digest
from digest.app.settings import load_settings
from digest.backends.http import Endpoint
from digest.backends.prometheus import PrometheusSource
from digest.checks.contract import SourceError
from digest.output.render import Renderer, to_json
from digest.pipeline.policy import Policy
from digest.pipeline.window import day_window
from digest.testbed.corpus import DAYS
from digest.testbed.corpus.model import Series
from digest.testbed.embedded import EmbeddedBackends, free_port, load_corpus_day
from digest.testbed.prometheus_server import PrometheusServer
from tests.command import backend_env, clean_env, run_digest
from tests.conftest import corpus_prometheus_snapshot
from tests.misbehaving_server import Behaviour, misbehaving_server

CALM_FIXED_DAY = date(2026, 8, 17)


def _config(vm_url: str, vl_url: str, timeout: float = 5.0) -> Config:
    settings = load_settings(
        vm_url=vm_url, vl_url=vl_url, cluster="homelab", timezone="UTC", policy_file=None, query_timeout=timeout
    )
    return Config(settings=settings, policy=Policy())


async def test_logs_down_then_metrics_down(own_backends: EmbeddedBackends) -> None:
    """VictoriaLogs stopped: log checks UNKNOWN with their error; then VictoriaMetrics too: every check UNKNOWN."""
    load_corpus_day(own_backends, DAYS[CALM_FIXED_DAY])
    config = _config(own_backends.metrics.url, own_backends.logs.url)
    window = day_window(CALM_FIXED_DAY, config.settings.zone)
    healthy = to_json(await make_digest(config, window))
    assert (healthy["status"], healthy["score"]) == ("OK", 10)

    own_backends.logs.stop()
    payload = to_json(await make_digest(config, window))
    assert payload["status"] == "UNKNOWN"
    graded = {item["name"]: item["status"] for item in payload["checks"] if item["graded"]}
    assert graded == {"oom_kills": "OK", "error_lines": "UNKNOWN", "conntrack": "OK", "envoy_flags": "UNKNOWN"}
    # The diagnostic check that reads logs is blind too, and says so.
    assert {item["name"]: item["status"] for item in payload["checks"]}["log_storms"] == "UNKNOWN"
    errors = {item["name"]: item["error"] for item in payload["checks"]}
    assert "VictoriaLogs unreachable" in errors["error_lines"]
    text = Renderer().render(await make_digest(config, window), "text")
    assert text.splitlines()[0] == "UNKNOWN · homelab · 2026-08-17 · not checked: error_lines, envoy_flags"
    assert text.splitlines()[1] == "score 10/10 on the 2 of 4 graded checks that could run"
    assert "error_lines not checked" in text

    own_backends.metrics.stop()
    payload = to_json(await make_digest(config, window))
    assert payload["status"] == "UNKNOWN"
    assert {item["status"] for item in payload["checks"]} == {"UNKNOWN"}
    assert all("unreachable" in item["error"] for item in payload["checks"])


async def test_log_outage_does_not_hide_a_metrics_problem(corpus_backends: EmbeddedBackends) -> None:
    """07-20 with VictoriaLogs unreachable: the OOM still costs its point (WARNING 9/10), the log checks are named."""
    config = _config(corpus_backends.metrics.url, f"http://127.0.0.1:{free_port()}")
    payload = to_json(await make_digest(config, day_window(date(2026, 7, 20), config.settings.zone)))
    assert payload["status"] == "WARNING"
    assert payload["score"] == 9
    assert payload["not_checked"] == ["error_lines", "envoy_flags", "log_storms"]


async def test_a_prometheus_whose_remote_read_fails_is_not_trusted(corpus_backends: EmbeddedBackends) -> None:
    """A real Prometheus answers with its local data and a remote read's failure as a warning: UNKNOWN, never OK."""
    # read_recent: the remote store is asked for every range, as where it holds what the local disk no longer does.
    unreachable = f"http://127.0.0.1:{free_port()}/api/v1/read"
    remote_read = f"remote_read:\n  - url: {unreachable}\n    read_recent: true\n"
    # The corpus' blocks, as the suite's own Prometheus holds them (restored, not backfilled again).
    snapshot = corpus_prometheus_snapshot()
    with PrometheusServer(DAYS.values(), snapshot=snapshot, extra_config=remote_read) as prometheus:
        config = _config(prometheus.url, corpus_backends.logs.url)
        digest = await make_digest(config, day_window(CALM_FIXED_DAY, config.settings.zone))
    payload, text = to_json(digest), Renderer().render(digest, "text")
    checks = {item["name"]: item for item in payload["checks"]}
    assert payload["status"] == "UNKNOWN"
    assert text.splitlines()[0] == "UNKNOWN · homelab · 2026-08-17 · not checked: oom_kills, conntrack, envoy_flags"
    for name in ("oom_kills", "conntrack"):
        assert checks[name]["status"] == "UNKNOWN"
        assert "partial response (remote_read: error sending request" in checks[name]["error"]


async def test_backends_answering_html_or_garbage() -> None:
    """A proxy's HTML error page and malformed JSON in place of both backends: every check UNKNOWN, no crash."""
    page = Behaviour(status=200, content_type="text/html", body=b"<html>login</html>")
    garbage = Behaviour(body=b'{"status":"success","data":{')
    with misbehaving_server(page) as vm_url, misbehaving_server(garbage) as vl_url:
        config = _config(vm_url, vl_url)
        payload = to_json(await make_digest(config, day_window(CALM_FIXED_DAY, config.settings.zone)))
    assert payload["status"] == "UNKNOWN"
    assert {item["status"] for item in payload["checks"]} == {"UNKNOWN"}


async def test_slow_backends_give_unknown_within_the_timeout() -> None:
    """Backends slower than the query timeout yield UNKNOWN checks, not silence."""
    slow = Behaviour(delay_seconds=5.0, body=b"{}")
    with misbehaving_server(slow) as vm_url, misbehaving_server(slow) as vl_url:
        config = _config(vm_url, vl_url, timeout=0.5)
        payload = to_json(await make_digest(config, day_window(CALM_FIXED_DAY, config.settings.zone)))
    assert payload["status"] == "UNKNOWN"
    assert all("timeout" in item["error"] for item in payload["checks"])


def test_cli_run_prints_json_and_exits_0(corpus_backends: EmbeddedBackends, tmp_path: Path) -> None:
    """`digest run --date 2026-07-20 --format json` against real backends prints the contract and exits 0."""
    result = run_digest(
        "run", "--date", "2026-07-20", "--format", "json", env=backend_env(corpus_backends), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert (payload["status"], payload["score"]) == ("CRITICAL", 8)


def test_cli_run_draws_the_chart(corpus_backends: EmbeddedBackends, tmp_path: Path) -> None:
    """`digest run --chart FILE.png` writes the day's chart as a PNG next to the digest."""
    chart = tmp_path / "day.png"
    result = run_digest("run", "--date", "2026-07-20", "--chart", str(chart), env=backend_env(corpus_backends))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("CRITICAL 8/10 · homelab · 2026-07-20")
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert chart.stat().st_size > 10_000


def test_cli_bad_arguments_exit_2(tmp_path: Path) -> None:
    """A malformed date gets a one-line usage error and exit 2."""
    result = run_digest("run", "--date", "20-07-2026", cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "digest: '20-07-2026' is not a date like 2026-07-20"


def test_policy_file_disables_a_check(corpus_backends: EmbeddedBackends, tmp_path: Path) -> None:
    """A cluster without Envoy disables envoy_flags in its policy file: listed as disabled, never as OK."""
    policy = tmp_path / "policy.toml"
    policy.write_text("[checks.envoy_flags]\nenabled = false\n")
    env = backend_env(corpus_backends, DIGEST_POLICY_FILE=str(policy))
    result = run_digest("run", "--date", "2026-08-17", "--format", "json", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["disabled"] == ["envoy_flags"]
    assert "envoy_flags" not in [check["name"] for check in payload["checks"]]
    text = run_digest("run", "--date", "2026-08-17", env=env, cwd=tmp_path).stdout
    assert "– envoy_flags · disabled by policy" in text


def test_bad_policy_file_exits_2_naming_the_key(tmp_path: Path) -> None:
    """A policy file with a wrong key stops `digest run` with one line naming the file variable and the key."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("checks:\n  conntrack: {warn_ratoi: 0.5}\n")
    result = run_digest("run", "--date", "2026-08-17", env=clean_env(DIGEST_POLICY_FILE=str(policy)), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "digest: DIGEST_POLICY_FILE: checks.conntrack.warn_ratoi: unknown key "
        "(known: crit_penalty, crit_ratio, enabled, top, warn_penalty, warn_ratio)"
    ]


async def test_a_rejected_query_keeps_its_whole_reason(own_backends: EmbeddedBackends) -> None:
    """VictoriaMetrics' reason for rejecting a long query survives whole, without the query it echoes back."""
    at = datetime(2023, 5, 1, 12, tzinfo=UTC)
    moments = [int(at.timestamp() * 1000) - 60_000 * minute for minute in range(5)]
    own_backends.import_series(
        Series({"__name__": name, "pod": "api", "replica": replica}, moments, [1.0] * 5).to_import_line()
        for name in ("left_side", "right_side")
        for replica in ("prom-0", "prom-1")
    )
    own_backends.wait_for_series("left_side", at, 2)
    source = PrometheusSource(Endpoint(name="VictoriaMetrics", url=own_backends.metrics.url))
    padding = " + 0" * 120  # a query longer than any short error text
    try:
        await source.instant(f"(left_side{padding}) >= on (pod) (right_side{padding})", at)
    except SourceError as exc:
        message = str(exc)
    else:
        raise AssertionError("a many-to-many join was accepted")
    finally:
        await source.aclose()
    assert "duplicate" in message, message
    assert "+ 0 + 0" not in message

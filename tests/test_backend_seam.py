"""The backend seam: which log backend the settings select, how it is reached, and what a wrong URL reads as."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from digest.app.settings import LogBackend, load_settings
from digest.pipeline.policy import PolicyError, load_policy
from digest.testbed.embedded import EmbeddedBackends
from digest.testbed.loki_server import LokiServer, loki_binary_or_skip
from tests.command import backend_env, clean_env, run_digest
from tests.misbehaving_server import Behaviour, recording_server

EMPTY_VECTOR = b'{"status":"success","data":{"resultType":"vector","result":[]}}'


def test_loki_url_selects_loki_with_its_tenant_and_auth() -> None:
    """DIGEST_LOKI_URL selects Loki; DIGEST_LOKI_TENANT travels as X-Scope-OrgID, its token as a bearer header."""
    token = "s3cret"  # noqa: S105  # a test token, the one the redactor must list
    settings = load_settings(loki_url="http://loki:3100", loki_tenant="team-a", loki_bearer_token=token)
    endpoint = settings.logs_endpoint()
    assert settings.log_backend is LogBackend.LOKI
    assert (endpoint.name, endpoint.url, endpoint.setting) == ("Loki", "http://loki:3100", "DIGEST_LOKI_URL")
    assert endpoint.headers["X-Scope-OrgID"] == "team-a"
    assert endpoint.headers["Authorization"] == f"Bearer {token}"
    assert token in settings.secrets()
    assert load_settings().log_backend is LogBackend.VICTORIALOGS


def test_both_log_backends_set_is_one_line_and_exit_2() -> None:
    """DIGEST_LOKI_URL beside DIGEST_VL_URL: one line naming both, exit 2, before any query."""
    env = clean_env(DIGEST_LOKI_URL="http://127.0.0.1:9", DIGEST_VL_URL="http://127.0.0.1:9")
    result = run_digest("run", "--date", "2026-07-20", env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "DIGEST_LOKI_URL and DIGEST_VL_URL are both set" in lines[0]


def test_loki_tenant_must_be_one_printable_word() -> None:
    """A tenant with a space or a newline would break the header: refused at start, naming the variable."""
    result = run_digest("run", env=clean_env(DIGEST_LOKI_URL="http://127.0.0.1:9", DIGEST_LOKI_TENANT="a b"))
    assert result.returncode == 2
    assert result.stderr.strip().startswith("digest: DIGEST_LOKI_TENANT:") or "DIGEST_LOKI_TENANT" in result.stderr


POLICY_MISTAKES = {
    "logs:\n  fields: {host: kubernetes.host}\n": "logs.fields.host: unknown role",
    "checks:\n  error_lines: {level_field: severity}\n": "checks.error_lines.level_field: moved to logs.fields.level",
    "coverage:\n  log_node_field: host\n": "coverage.log_node_field: moved to logs.fields.node",
    "checks:\n  envoy_flags: {scope: {cluster: x}}\n": "checks.envoy_flags.scope.cluster: unknown role",
}


@pytest.mark.parametrize(("text", "message"), POLICY_MISTAKES.items())
def test_policy_log_fields_are_checked_and_old_keys_point_to_them(tmp_path: Path, text: str, message: str) -> None:
    """logs.fields takes only the six roles; the per-check field names of old policy files say where they went."""
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert message in str(caught.value)


def test_victorialogs_url_pointing_at_victoriametrics_names_it(own_backends: EmbeddedBackends) -> None:
    """DIGEST_VL_URL at a VictoriaMetrics: the log checks are UNKNOWN saying what answered and which variable to fix."""
    env = {**backend_env(own_backends), "DIGEST_VL_URL": own_backends.metrics.url}
    result = run_digest("run", "--date", date(2026, 7, 20).isoformat(), "--format", "json", env=env)
    named = f"{own_backends.metrics.url} is a VictoriaMetrics, not the VictoriaLogs API (check DIGEST_VL_URL)"
    payload = json.loads(result.stdout)
    log_checks = [check for check in payload["checks"] if check["name"] in ("error_lines", "envoy_flags", "log_storms")]
    assert len(log_checks) == 3
    for check in log_checks:
        assert check["status"] == "UNKNOWN"
        assert named in check["error"], check


def test_metrics_url_pointing_at_victorialogs_names_it(own_backends: EmbeddedBackends) -> None:
    """DIGEST_VM_URL at a VictoriaLogs: the metric checks are UNKNOWN saying a VictoriaLogs answered."""
    env = {**backend_env(own_backends), "DIGEST_VM_URL": own_backends.logs.url}
    result = run_digest("run", "--date", "2026-07-20", "--format", "json", env=env)
    assert f"{own_backends.logs.url} is a VictoriaLogs, not the VictoriaMetrics API (check DIGEST_VM_URL)" in (
        result.stdout
    ), result.stdout[:2000]


def test_an_unknown_server_answering_404_is_said_plainly() -> None:
    """A server that answers 404 everywhere is named as not serving the API, probed once, not per query."""
    with recording_server(Behaviour(status=404, content_type="text/plain", body=b"404 page not found")) as served:
        env = clean_env(DIGEST_VM_URL=served.url, DIGEST_VL_URL=served.url, DIGEST_TIMEZONE="UTC")
        result = run_digest("run", "--date", "2026-07-20", "--format", "json", env=env)
        probes = [request for request in served.requests if "buildinfo" in request.path]
    assert f"{served.url} does not serve the VictoriaLogs API" in result.stdout
    assert f"{served.url} does not serve the VictoriaMetrics API" in result.stdout
    # One identification per source (two sources), each at most the other kinds' probes.
    assert len(probes) <= 4


def test_victorialogs_url_pointing_at_loki_names_it() -> None:
    """DIGEST_VL_URL at a Loki: the log checks are UNKNOWN saying a Loki answered and DIGEST_VL_URL is to fix."""
    binary = loki_binary_or_skip()
    with LokiServer(binary=binary) as loki:
        env = clean_env(DIGEST_VM_URL="http://127.0.0.1:9", DIGEST_VL_URL=loki.url, DIGEST_TIMEZONE="UTC")
        result = run_digest("run", "--date", "2026-07-20", "--format", "json", env=env)
    payload = json.loads(result.stdout)
    error_lines = next(check for check in payload["checks"] if check["name"] == "error_lines")
    assert error_lines["status"] == "UNKNOWN"
    assert f"{loki.url} is a Loki, not the VictoriaLogs API (check DIGEST_VL_URL)" in error_lines["error"]

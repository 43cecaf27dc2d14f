"""The command line as users expect it: --version, -v on either side of the subcommand, a versioned JSON contract."""

from __future__ import annotations

import json
from importlib import metadata

from digest import SCHEMA_VERSION, __version__
from digest.testbed.embedded import EmbeddedBackends
from tests.command import backend_env, clean_env, run_digest


def test_version_is_printed_and_exits_0() -> None:
    """`digest --version` prints the installed version, like every other tool."""
    result = run_digest("--version", env=clean_env())
    assert result.returncode == 0
    assert result.stdout.strip() == f"digest {__version__}"
    assert __version__ == metadata.version("digest")  # pyproject reads it from the package: the same everywhere


def test_verbose_after_the_subcommand_and_a_versioned_json(corpus_backends: EmbeddedBackends) -> None:
    """`digest run … -v` logs like `digest -v run …`; the JSON names its schema version and the tool's version."""
    env = backend_env(corpus_backends)
    after = run_digest("run", "--date", "2026-07-19", "--format", "json", "-v", env=env)
    before = run_digest("-v", "run", "--date", "2026-07-19", "--format", "json", env=env)
    quiet = run_digest("run", "--date", "2026-07-19", "--format", "json", env=env)
    assert after.returncode == before.returncode == quiet.returncode == 0, after.stderr
    # -v: each backend query on a line of its own (httpx's bare request line left out), nothing without it.
    assert " digest.queries: VictoriaMetrics /api/v1/query at " in after.stderr
    assert " digest.queries: VictoriaLogs /select/logsql/" in before.stderr
    assert "HTTP Request" not in after.stderr + before.stderr
    assert "digest.queries" not in quiet.stderr
    payload = json.loads(after.stdout)
    assert payload["schema_version"] == SCHEMA_VERSION
    assert payload["version"] == __version__

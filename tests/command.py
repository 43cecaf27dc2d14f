"""Running `digest` as a user would: a subprocess whose environment holds the DIGEST_ variables of the test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from digest.testbed.embedded import EmbeddedBackends

DIGEST = [sys.executable, "-m", "digest.app.cli"]


def clean_env(**variables: str) -> dict[str, str]:
    """The current environment without any DIGEST_ variable, plus ``variables``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DIGEST_")}
    env.update(variables)
    return env


def backend_env(backends: EmbeddedBackends, **variables: str) -> dict[str, str]:
    """An environment pointing at ``backends``, cluster "homelab" in UTC, plus ``variables``."""
    return clean_env(
        DIGEST_VM_URL=backends.metrics.url,
        DIGEST_VL_URL=backends.logs.url,
        DIGEST_CLUSTER="homelab",
        DIGEST_TIMEZONE="UTC",
        **variables,
    )


def run_digest(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``digest ARGS`` to completion, capturing its output."""
    return subprocess.run(
        [*DIGEST, *args],
        env=env if env is not None else clean_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def stop_process(process: subprocess.Popen[Any], grace_seconds: float = 10.0) -> None:
    """Stop a process a test started, by its PID: SIGTERM, then SIGKILL if it has not exited within the grace."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)

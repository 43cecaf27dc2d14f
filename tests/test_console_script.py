"""The `digest` console script ends a run without the interpreter's teardown, its output and exit status whole.

`digest.app.console_script.exit_now` flushes the logs and standard streams, then leaves with `os._exit`: exit
handlers do not run. What a user sees must not change: the whole digest on standard output, the exit code, and
the interpreter's own status (120) when the reader of standard output went away.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from digest.testbed.embedded import EmbeddedBackends
from tests.command import backend_env, clean_env, run_digest

# The console script's entry, with an exit handler that says whether the interpreter's teardown ran.
_ENTRY = """
import atexit, sys
atexit.register(lambda: print("teardown ran", file=sys.stderr))
from digest.app.console_script import main
sys.argv = ["digest", *sys.argv[1:]]
sys.exit(main())
"""


def _buffered(env: dict[str, str]) -> dict[str, str]:
    """``env`` without PYTHONUNBUFFERED: standard output buffered, as a user's `digest` has it."""
    return {key: value for key, value in env.items() if key != "PYTHONUNBUFFERED"}


def _console_script(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _ENTRY, *args],
        env=_buffered(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_run_ends_without_teardown_and_prints_the_whole_digest(
    corpus_backends: EmbeddedBackends, tmp_path: Path
) -> None:
    """`digest run` through the console script prints the digest `python -m` prints, exits 0, skips exit handlers."""
    env = backend_env(corpus_backends)
    result = _console_script("run", "--date", "2026-07-20", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "teardown ran" not in result.stderr
    # The text digest is shorter than stdout's buffer: all of it was still buffered when the run ended.
    assert len(result.stdout.encode()) < 8192
    reference = run_digest("run", "--date", "2026-07-20", env=_buffered(env), cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr
    assert result.stdout == reference.stdout
    assert result.stdout.startswith("CRITICAL 8/10 · homelab · 2026-07-20")


def test_other_commands_keep_the_interpreter_teardown(tmp_path: Path) -> None:
    """Only a run that wrote its digest exits early: a usage error leaves through the usual teardown."""
    result = _console_script("run", "--at", "12:00", "--date", "2026-07-20", env=clean_env(), cwd=tmp_path)
    assert result.returncode == 2
    assert "teardown ran" in result.stderr


def test_exit_now_reports_a_reader_gone_as_the_interpreter_does() -> None:
    """Standard output whose reader closed: `exit_now` exits 120 (CPython's status for it), with no traceback."""
    probe = (
        "import sys\n"
        "from digest.app.console_script import exit_now\n"
        "sys.stdin.readline()\n"  # the parent has closed its end of stdout by now
        "sys.stdout.write('CRITICAL 8/10')\n"  # buffered: the flush is the first write
        "exit_now(0)\n"
    )
    child = subprocess.Popen(  # this interpreter, our probe
        [sys.executable, "-c", probe],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_buffered(dict(os.environ)),
    )
    assert child.stdout is not None
    assert child.stdin is not None
    child.stdout.close()
    _, errors = child.communicate("go\n", timeout=60)
    assert child.returncode == 120
    assert "Traceback" not in errors

"""The client's per-request overhead: no module search per request, a garbage collector tuned for big answers.

httpcore's `import sniffio` failed and searched `sys.path` at every request; the `digest` process tunes CPython's
cyclic collector at its entry.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

import httpx

REPO = Path(__file__).resolve().parent.parent


class _CountingFinder:
    """A meta-path finder that finds nothing and counts how often Python searched for a module."""

    def __init__(self) -> None:
        self.searches: list[str] = []

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        self.searches.append(name)
        return None


async def test_requests_do_not_search_for_modules() -> None:
    """A hundred requests to a loopback server import nothing: httpcore's `import sniffio` is a cache hit."""
    import asyncio

    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionResetError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/api/v1/query"
    try:
        async with httpx.AsyncClient() as client:
            await client.get(url)  # the first request may import what httpx loads lazily
            finder = _CountingFinder()
            sys.meta_path.insert(0, finder)
            try:
                for _ in range(100):
                    await client.get(url)
            finally:
                sys.meta_path.remove(finder)
    finally:
        server.close()
        await server.wait_closed()
    assert finder.searches == []


def test_digest_process_collects_young_garbage_rarely_and_freezes_its_imports() -> None:
    """`digest`'s entry tunes the cyclic collector before any work: young generation at 100,000, imports frozen."""
    probe = (
        "import gc, sys\n"
        "from digest.app.cli import main\n"
        "from digest.app.console_script import GC_YOUNG_THRESHOLD\n"
        "assert gc.get_threshold()[0] == 700 and gc.get_freeze_count() == 0\n"
        "code = main(['run', '--at', '12:00', '--date', '2026-07-20'])\n"  # a usage error: no config, no backend
        "print(code, gc.get_threshold()[0] == GC_YOUNG_THRESHOLD, gc.get_freeze_count() > 1000)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.split() == ["2", "True", "True"], done.stderr


def test_console_script_raises_the_young_threshold_before_the_cli_is_imported() -> None:
    """The `digest` script's entry imports nothing of the CLI before the collector's setting, which its imports see."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts["digest"] == "digest.app.console_script:main"
    probe = (
        "import gc, sys\n"
        "from digest.app.console_script import GC_YOUNG_THRESHOLD, main\n"
        "assert 'digest.app.cli' not in sys.modules and 'digest.app.engine' not in sys.modules\n"
        "seen = []\n"
        "class Watch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'digest.app.engine':\n"
        "            seen.append(gc.get_threshold()[0])\n"
        "sys.meta_path.insert(0, Watch())\n"
        "sys.argv = ['digest', '--version']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(seen == [GC_YOUNG_THRESHOLD], gc.get_freeze_count() > 1000)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.split()[-2:] == ["True", "True"], done.stderr


def test_cli_imports_loki_only_for_a_loki_digest() -> None:
    """Starting `digest` does not import Loki's source; opening the sources of a Loki digest does."""
    probe = (
        "import sys\n"
        "import digest.app.cli\n"
        "print('digest.backends.loki' in sys.modules)\n"
        "import asyncio\n"
        "from digest.app.engine import open_sources\n"
        "from digest.app.settings import load_settings\n"
        "async def opened():\n"
        "    async with open_sources(load_settings(loki_url='http://127.0.0.1:9')):\n"
        "        pass\n"
        "asyncio.run(opened())\n"
        "print('digest.backends.loki' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.split() == ["False", "True"], done.stderr

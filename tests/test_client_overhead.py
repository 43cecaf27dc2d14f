"""The HTTP client's per-request overhead: no module search per request (httpcore's failed `import sniffio`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

import httpx


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

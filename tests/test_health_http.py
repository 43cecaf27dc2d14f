"""`/healthz` and `/metrics` over real HTTP on loopback: the probes' semantics, and bad clients that cannot upset it.

The server is `digest.app.health.HealthServer` on port 0; malformed and stalled requests are written on raw sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from digest.app.health import DigestMetrics, HealthServer


class Readiness:
    """What the bot would report: polling and scheduling, or not."""

    def __init__(self) -> None:
        self.ready = False

    def __call__(self) -> bool:
        return self.ready


@pytest.fixture
def readiness() -> Readiness:
    """Not ready until a test says so."""
    return Readiness()


@pytest.fixture
async def server(readiness: Readiness) -> AsyncIterator[HealthServer]:
    """A started health server on a free loopback port, stopped at the end."""
    health = HealthServer(DigestMetrics(), readiness, port=0, host="127.0.0.1")
    await health.start()
    try:
        yield health
    finally:
        await health.stop()


def client(server: HealthServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=10)


async def raw_exchange(port: int, request: bytes) -> bytes:
    """Write ``request`` as is and read the whole answer (the server closes the connection after it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()


async def port_is_closed(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


async def test_healthz_follows_readiness(server: HealthServer, readiness: Readiness) -> None:
    """/healthz is 503 while not ready, 200 once ready, 503 again when readiness is lost."""
    async with client(server) as http:
        before = await http.get("/healthz")
        readiness.ready = True
        during = await http.get("/healthz")
        readiness.ready = False
        after = await http.get("/healthz")
    assert [before.status_code, during.status_code, after.status_code] == [503, 200, 503]
    assert during.text == "ok\n"


async def test_metrics_content_type_and_names(server: HealthServer) -> None:
    """/metrics answers in the Prometheus text format and carries the digest's own metrics."""
    async with client(server) as http:
        response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    assert "# TYPE digest_computation_seconds histogram" in response.text
    assert "# TYPE digest_deliveries_total counter" in response.text


async def test_unknown_path_is_404_and_other_methods_405(server: HealthServer) -> None:
    """An unknown path is 404; POST to a known one is 405."""
    async with client(server) as http:
        missing = await http.get("/admin")
        posted = await http.post("/healthz", content=b"x")
    assert missing.status_code == 404
    assert posted.status_code == 405


async def test_malformed_request_line_gets_400_and_server_keeps_serving(
    server: HealthServer, readiness: Readiness
) -> None:
    """A request line that is not HTTP gets a 400, and the next client is served normally."""
    readiness.ready = True
    answer = await raw_exchange(server.port, b"NOT AN HTTP REQUEST LINE AT ALL\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ")
    async with client(server) as http:
        assert (await http.get("/healthz")).status_code == 200


async def test_stalled_client_does_not_block_others_and_stop_closes_the_port(
    server: HealthServer, readiness: Readiness
) -> None:
    """A client stuck mid-headers does not hold up others; after stop the port refuses connections."""
    readiness.ready = True
    port = server.port
    stalled_reader, stalled_writer = await asyncio.open_connection("127.0.0.1", port)
    stalled_writer.write(b"GET /healthz HTTP/1.1\r\nHost: probe\r\nX-Slow: ")
    await stalled_writer.drain()
    try:
        async with client(server) as http:
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/metrics")).status_code == 200
        await server.stop()
        # Stopping closes the stalled connection too; it never got an answer.
        assert await asyncio.wait_for(stalled_reader.read(), timeout=10) == b""
    finally:
        stalled_writer.close()
    deadline = asyncio.get_running_loop().time() + 10
    while not await port_is_closed(port):
        assert asyncio.get_running_loop().time() < deadline, "the port still accepts connections after stop"
        await asyncio.sleep(0.05)


async def test_restart_on_the_same_port(readiness: Readiness) -> None:
    """A stopped server leaves its port free: a new one binds the same port at once and serves."""
    first = HealthServer(DigestMetrics(), readiness, port=0, host="127.0.0.1")
    await first.start()
    port = first.port
    await first.stop()
    second = HealthServer(DigestMetrics(), readiness, port=port, host="127.0.0.1")
    await second.start()
    try:
        async with client(second) as http:
            assert (await http.get("/healthz")).status_code == 503
    finally:
        await second.stop()


async def test_a_large_chunked_body_is_refused_before_it_is_buffered(
    server: HealthServer, readiness: Readiness
) -> None:
    """A whole 1 MiB chunked body is not read into memory and answered: the connection is dropped; probes go on."""
    readiness.ready = True
    size = 1024 * 1024
    request = (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        + f"{size:x}\r\n".encode()
        + b"a" * size
        + b"\r\n0\r\n\r\n"
    )
    try:
        answer = await raw_exchange(server.port, request)
    except (ConnectionResetError, BrokenPipeError):
        answer = b""
    assert b"200 OK" not in answer
    async with client(server) as http:
        assert (await http.get("/healthz")).status_code == 200

"""The digest's client CPU per request, on a trivial query: what the HTTP stack costs before any answer is parsed.

``python -m bench.request_cpu`` starts an embedded VictoriaMetrics (empty), sends 1,000 ``vector(i)`` instant
queries through the product's `PrometheusSource` (at most 4 in flight, its bound) and prints the wall and CPU time per
request; stops the server by its PID. It is how the cost of httpcore's failed `import sniffio` was measured
(docs/benchmarks-history.md, "Replay client CPU"): run it with and without sniffio installed.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from digest.backends.http import Endpoint
from digest.backends.prometheus import PrometheusSource
from digest.testbed.embedded import EmbeddedBackends

REQUESTS = 1000


async def per_request(url: str) -> tuple[float, float]:
    """Milliseconds of wall time and of this process's CPU per request."""
    source = PrometheusSource(Endpoint("VictoriaMetrics", url))
    at = datetime(2026, 7, 20, tzinfo=UTC)
    try:
        await source.instant("vector(0)", at)  # the connection and lazy imports, outside the measure
        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(source.instant(f"vector({index})", at) for index in range(1, REQUESTS + 1)))
        return (time.perf_counter() - wall) / REQUESTS * 1000, (time.process_time() - cpu) / REQUESTS * 1000
    finally:
        await source.aclose()


def main() -> None:
    """Measure once and print one line."""
    try:
        import sniffio  # noqa: F401  # only to say which case was measured

        installed = "installed"
    except ImportError:
        installed = "not installed"
    with EmbeddedBackends() as backends:
        wall, cpu = asyncio.run(per_request(backends.metrics.url))
    print(f"{REQUESTS} requests, sniffio {installed}: {wall:.2f} ms wall, {cpu:.2f} ms CPU per request")


if __name__ == "__main__":
    main()

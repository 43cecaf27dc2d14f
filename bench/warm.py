"""A digest computed inside a running process, start-up paid once as in ``digest serve`` (without its state file).

``python -m bench.warm --date D --repeats N`` reads the same ``DIGEST_*`` settings as ``digest run``, computes one
digest to warm up, then times ``N`` more with ``make_digest`` (fresh clients each time, as the bot's service opens
them) and prints ``{"seconds": [...]}``. Against the checks floor, it separates what the digest adds to its queries
from what the interpreter and its imports cost a one-shot ``digest run``. The collector is tuned as the `digest`
entry point tunes it for every command, ``digest serve`` included: with CPython's default thresholds the same digest
took 0.8 s instead of 0.6 s on the benchmark's quiet day (full collections walking every answer still alive).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import time
from collections.abc import Sequence

from digest.app.cli import tune_garbage_collection
from digest.app.engine import load_config, make_digest
from digest.pipeline.window import day_window


def main(argv: Sequence[str] | None = None) -> int:
    """Time ``--repeats`` warm digests of ``--date`` and print their wall times as JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.warm", description=__doc__)
    parser.add_argument("--date", required=True, help="the day to digest, YYYY-MM-DD in DIGEST_TIMEZONE")
    parser.add_argument("--repeats", type=int, default=5, help="timed digests after the warm-up one")
    args = parser.parse_args(argv)
    tune_garbage_collection()
    config = load_config()
    window = day_window(dt.date.fromisoformat(args.date), config.settings.zone)

    async def timed() -> list[float]:
        await make_digest(config, window)  # warm-up: imports on first use, connection set-up paths
        seconds = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            await make_digest(config, window)
            seconds.append(time.perf_counter() - started)
        return seconds

    print(json.dumps({"seconds": asyncio.run(timed())}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

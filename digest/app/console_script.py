"""The `digest` console script: the cyclic collector tuned before the imports, then the CLI.

Importing the CLI builds some 200 classes and dataclasses and compiles their regular expressions: about 100
young collections and 9 older ones with CPython's thresholds, 15-25 ms of a `digest run` that takes 0.7 s on a quiet
day (measured with `python -X importtime` and by timing the import with the collector off). Raising the young
threshold first lets that garbage die by reference counting; `digest.app.cli.main` then freezes what the imports
made. This module imports nothing of the project at its top, so that the setting comes first.

A `digest run` also ends without the interpreter's teardown (`exit_now`): once its digest is written and every
client, store and worker thread is closed, freeing each of its objects one by one and running the exit handlers
take 10-15 ms of a quiet day's run and change nothing the run leaves behind.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
from typing import NoReturn

# The collector's first generation is collected after this many allocations (CPython's default: 700); the reason
# is `digest.app.cli.tune_garbage_collection`'s.
GC_YOUNG_THRESHOLD = 100_000


def raise_young_threshold() -> None:
    """Collect the young generation after `GC_YOUNG_THRESHOLD` allocations; the older ones keep their thresholds."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


# What the interpreter exits with when it cannot flush standard output at its end (a reader that went away:
# `digest run | head -1`); `exit_now` keeps that status.
FLUSH_FAILED = 120


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once the logs and standard streams are flushed, skipping the teardown.

    Only for a command that has closed everything it opened: exit handlers do not run and objects are not freed one
    by one (the kernel frees the process at once). `asyncio.run` has joined the worker threads by then, and the state
    file's writes are committed when they are made, not when it is closed.
    """
    logging.shutdown()
    try:
        sys.stdout.flush()
    except OSError:
        code = FLUSH_FAILED
    with contextlib.suppress(OSError):  # nowhere left to say anything
        sys.stderr.flush()
    os._exit(code)


def main() -> int:
    """Entry point of the `digest` console script."""
    raise_young_threshold()
    from digest.app.cli import main as cli_main  # here, not at the top: after the collector's setting

    return cli_main(exit_when_done=exit_now)

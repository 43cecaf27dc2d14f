"""`digest replay --from D1 --to D2`: one digest per calendar day, computed concurrently with a bound.

Each day is a `day_window` in DIGEST_TIMEZONE graded by `make_digest` — the same code as today's digest. All days
share one pair of backend clients, so the per-backend bound on queries in flight holds for the whole replay, and at
most ``concurrency`` days are computed at once. Output: a one-line summary per day ("2026-07-20 CRITICAL 8/10 ·
error_lines −2 …"), or JSON lines (the engine's JSON contract, one object per day, in date order) with the summaries
on stderr. A progress bar is drawn on a terminal; without one, plain lines. ``--post`` posts each day's digest
through the bot's delivery code, once per chat and window.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import date, timedelta
from typing import TextIO

from digest.app.engine import Config, make_digest, open_sources
from digest.output.render import Renderer, to_json
from digest.pipeline.score import Digest, DigestStatus
from digest.pipeline.trends import History
from digest.pipeline.window import WindowError, day_window

MAX_DAYS = 366

Poster = Callable[[Digest], Awaitable[str]]


def days_between(first: date, last: date) -> list[date]:
    """Every calendar day from ``first`` to ``last`` inclusive; `WindowError` for an empty or huge range."""
    if last < first:
        raise WindowError(f"--to {last} is before --from {first}")
    count = (last - first).days + 1
    if count > MAX_DAYS:
        raise WindowError(f"{count} days is more than {MAX_DAYS}; replay a shorter range")
    return [first + timedelta(days=offset) for offset in range(count)]


def summary_line(digest: Digest) -> str:
    """``2026-07-20 CRITICAL 8/10 · error_lines −2 · oom_kills −1 (capped)`` — the day at a glance."""
    if digest.status is DigestStatus.UNKNOWN:
        head = f"{digest.window.label} UNKNOWN"
    else:
        head = f"{digest.window.label} {digest.status.value} {digest.score}/{digest.max_score}"
    parts = [head]
    for finding in digest.deductions:
        applied = digest.applied.get(finding.name, finding.penalty)
        capped = " (capped)" if applied < finding.penalty else ""
        parts.append(f"{finding.name} −{finding.penalty}{capped}")
    parts.extend(f"{finding.name} not checked" for finding in digest.unknown)
    return " · ".join(parts)


class Progress:
    """A progress bar on a terminal, plain "n/total" lines otherwise; always on stderr."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self._total = total
        self._done = 0
        self._stream = stream
        self._tty = stream.isatty()

    def advance(self, label: str) -> None:
        self._done += 1
        if self._tty:
            width = 30
            filled = round(width * self._done / self._total)
            bar = "█" * filled + "·" * (width - filled)
            self._stream.write(f"\r[{bar}] {self._done}/{self._total} {label}")
            if self._done == self._total:
                self._stream.write("\n")
        else:
            self._stream.write(f"replayed {self._done}/{self._total}: {label}\n")
        self._stream.flush()


async def replay(
    config: Config,
    days: list[date],
    fmt: str,
    concurrency: int,
    out: TextIO,
    err: TextIO,
    post: Poster | None = None,
) -> list[Digest]:
    """Grade every day (at most ``concurrency`` at once) and write them in date order."""
    zone = config.settings.zone
    gate = asyncio.Semaphore(max(1, concurrency))
    progress = Progress(len(days), err)
    delivered: dict[date, str] = {}

    history = History()
    async with open_sources(config.settings, config.policy) as sources:

        async def one(day: date) -> Digest:
            async with gate:
                digest = await make_digest(config, day_window(day, zone), sources=sources, history=history)
            if post is not None:
                delivered[day] = await post(digest)
            progress.advance(day.isoformat())
            return digest

        digests = await asyncio.gather(*(one(day) for day in days))

    renderer = Renderer(config.settings.links())
    for day, digest in zip(days, digests, strict=True):
        line = summary_line(digest) + (f" · {delivered[day]}" if day in delivered else "")
        if fmt == "json":
            out.write(json.dumps(to_json(digest), ensure_ascii=False) + "\n")
            err.write(line + "\n")
        elif fmt == "text":
            out.write(renderer.render(digest, "text") + "\n")
        else:
            out.write(line + "\n")
    out.flush()
    return list(digests)


def run_replay(config: Config, days: list[date], fmt: str, concurrency: int, post: Poster | None = None) -> int:
    """The CLI's entry: replay to stdout/stderr; 0 when every day was graded."""
    asyncio.run(replay(config, days, fmt, concurrency, sys.stdout, sys.stderr, post))
    return 0

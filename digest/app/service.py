"""Digests on demand for the bot: one computation per window however many ask, its chart, and the sources' health.

The bot (`digest.channels.telegram.bot`, whose `Digests` this is) asks this service; the service asks the engine.
Concurrent requests for one window (ten people typing `/digest` at noon, the scheduled post among them) share one
computation (single flight), and the chart is drawn once per window too.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from digest.app.engine import Config, make_chart, make_digest, make_week, open_sources, stored_history
from digest.app.health import DigestMetrics
from digest.channels.channel import Photo
from digest.checks.contract import SourceError, Window
from digest.checks.log_questions import LineCount
from digest.output.render import Renderer, headline, most_said, unseen_spans
from digest.pipeline.score import Digest
from digest.pipeline.state import HistoryStore
from digest.pipeline.week import Week

log = logging.getLogger(__name__)

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


async def _single_flight(
    in_flight: dict[K, asyncio.Task[T]],
    key: K,
    start: Callable[[], Coroutine[Any, Any, T]],
    on_start: Callable[[], None],
) -> T:
    """Join the task already computing ``key`` (a window's bounds, an ISO week), or start one; it forgets itself."""
    task = in_flight.get(key)
    if task is None:
        on_start()
        task = asyncio.create_task(start())
        in_flight[key] = task
        task.add_done_callback(lambda _: in_flight.pop(key, None))
    return await asyncio.shield(task)


# A digest's buttons are made within seconds of its text (a post, an answer); a few windows are enough.
_RECENT_SECONDS = 600.0
_RECENT_KEPT = 8


@dataclass
class DigestService:
    """Computes digests with single flight: concurrent requests for one window share one computation."""

    config: Config
    renderer: Renderer = field(default_factory=Renderer)
    metrics: DigestMetrics | None = None
    history_store: HistoryStore | None = None
    _in_flight: dict[tuple[datetime, datetime], asyncio.Task[Digest]] = field(default_factory=dict)
    _charts_in_flight: dict[tuple[datetime, datetime], asyncio.Task[Photo | None]] = field(default_factory=dict)
    computations: int = 0
    # The last few digests computed, by window, for what follows a digest within minutes (its buttons): never
    # asked again of the backends for that. `digest` itself always computes (or joins one in flight).
    _recent: dict[tuple[datetime, datetime], tuple[float, Digest]] = field(default_factory=dict)
    _weeks_in_flight: dict[tuple[int, int], asyncio.Task[Week]] = field(default_factory=dict)

    async def digest(self, window: Window) -> Digest:
        """The digest of ``window``, joining a computation already running for it."""
        return await _single_flight(
            self._in_flight, (window.start, window.end), lambda: self._compute(window), self._count
        )

    async def mute_targets(self, window: Window) -> list[str]:
        """The checks that found something in ``window`` and that no ack holds: what a mute button can ack.

        Read from the digest just computed for the text; never a computation of its own: a post resumed from its
        stored parts long after (a restart) gets its day buttons, not a second digest for its mutes.
        """
        kept = self._recent.get((window.start, window.end))
        if kept is None or time.monotonic() - kept[0] >= _RECENT_SECONDS:
            return []
        digest = kept[1]
        found = [*digest.deductions, *digest.diagnoses]
        return [finding.name for finding in found if digest.acked(finding) is None]

    async def photo(self, window: Window) -> Photo | None:
        """The window's chart as a Telegram photo, or None when charts are off or drawing failed."""
        if not self.config.settings.telegram_chart:
            return None
        return await _single_flight(
            self._charts_in_flight, (window.start, window.end), lambda: self._draw(window), lambda: None
        )

    def _count(self) -> None:
        self.computations += 1

    async def _draw(self, window: Window) -> Photo | None:
        digest = await self.digest(window)
        try:
            with tempfile.TemporaryDirectory(prefix="digest-chart-") as folder:
                path = Path(folder) / "digest.png"
                caption = await make_chart(
                    self.config, window, path, headline(digest), unseen=unseen_spans(digest), said=most_said(digest)
                )
                return Photo(png=await asyncio.to_thread(path.read_bytes), caption=caption)
        except Exception:  # a chart is a bonus: the digest goes out without it rather than not at all
            log.exception("could not draw the chart of %s", window.label)
            return None

    async def _compute(self, window: Window) -> Digest:
        started = time.monotonic()
        digest = await make_digest(
            self.config,
            window,
            self.config.settings.digest_deadline_seconds,
            history=stored_history(self.config, self.history_store),
        )
        if self.metrics is not None:
            self.metrics.observe_digest(digest, time.monotonic() - started)
        self._recent[(window.start, window.end)] = (time.monotonic(), digest)
        while len(self._recent) > _RECENT_KEPT:
            self._recent.pop(next(iter(self._recent)))
        return digest

    async def text(self, window: Window, fmt: str) -> str:
        """The digest of ``window`` in a renderer format ("html": Telegram's; "text", "json"…), computed once."""
        return self.renderer.render(await self.digest(window), fmt)

    async def week(self, year: int, week: int) -> Week:
        """The week at a glance, joining a computation already running for it (the weekly post and `/digest week`)."""
        return await _single_flight(
            self._weeks_in_flight,
            (year, week),
            lambda: make_week(self.config, year, week, self.history_store),
            lambda: None,
        )

    async def week_text(self, year: int, week: int, fmt: str) -> str:
        """The week at a glance in a renderer format, computed once."""
        return self.renderer.render_week(await self.week(year, week), fmt)

    async def week_photo(self, year: int, week: int) -> Photo | None:
        """The week's chart (scores and error lines per day) as a Telegram photo, or None when charts are off."""
        if not self.config.settings.telegram_chart:
            return None
        summary = await self.week(year, week)
        # The drawing (Pillow) is imported on first use and run off the event loop.
        from digest.output.week_chart import render_week_chart, week_caption

        try:
            with tempfile.TemporaryDirectory(prefix="digest-week-") as folder:
                path = Path(folder) / "week.png"
                await asyncio.to_thread(render_week_chart, summary, path)
                return Photo(png=await asyncio.to_thread(path.read_bytes), caption=week_caption(summary))
        except Exception:  # a chart is a bonus, as for the daily digest
            log.exception("could not draw the chart of week %s", summary.label)
            return None


async def source_status(config: Config, now: datetime) -> list[str]:
    """Whether each backend answers a trivial query, and how fast.

    Asked through the digest's own clients, so with their credentials, tenant headers and TLS.
    """

    async def probe(name: str, ask: Callable[[], Awaitable[object]]) -> str:
        started = time.monotonic()
        try:
            async with asyncio.timeout(5.0):
                await ask()
            reason = ""
        except SourceError as exc:
            reason = f" ({exc.message})"
        except TimeoutError:
            reason = " (no answer within 5 s)"
        elapsed = (time.monotonic() - started) * 1000
        return f"{name}: {'UNREACHABLE' + reason if reason else 'reachable'}, {elapsed:.0f} ms"

    async with open_sources(config.settings, config.policy) as sources:
        return list(
            await asyncio.gather(
                probe("VictoriaMetrics", lambda: sources.metrics.instant("1", now)),
                probe(sources.logs.name, lambda: sources.logs.count(_last_minute(now))),
            )
        )


def _last_minute(now: datetime) -> LineCount:
    """A question any log backend answers cheaply: the lines of the last minute."""
    return LineCount(window=Window(now - timedelta(minutes=1), now, UTC, "last minute"))

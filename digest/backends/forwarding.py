"""A log source in front of another: what it does not answer itself goes to the source behind it, unchanged.

`RecordedLogs` (records where they cover a window) and `SharedPasses` (one pass for several checks on Loki) each
answer the counts their own way and nothing else: the backend's name and language, its reading queries, the shapes
and the label values are the inner source's.
"""

from __future__ import annotations

from digest.checks.contract import Window
from digest.checks.log_questions import Filter, LogsSource, ShapeCount, Shapes


class ForwardingLogs:
    """Forwards everything but the counts to ``inner`` (a subclass answers `count`, `peak` and `series`)."""

    def __init__(self, inner: LogsSource) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def language(self) -> str:
        return self.inner.language

    def reading_query(self, window: Window, lines: Filter, most_repeated: bool = False) -> str:
        return self.inner.reading_query(window, lines, most_repeated)

    async def shapes(self, question: ShapeCount) -> Shapes:
        return await self.inner.shapes(question)

    async def values(self, name: str, window: Window) -> list[str]:
        return await self.inner.values(name, window)

"""Container logs: Vector ``kubernetes_logs`` records from planned template lines and explicit events.

A ``LogSource`` knows its exact counts before it renders anything, so ``Expected.facts`` are exact and cheap;
``stream_chunks`` renders every source 10 s block by 10 s block and yields NDJSON chunks, never holding a day of
lines in memory. The digest's error-line rule (``is_error_record``) is here because templates are checked against it.
"""

from __future__ import annotations

import abc
import json
import re
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from digest.testbed.corpus.identity import DAY_S, MINUTES, Window, salt_of
from digest.testbed.corpus.objects import Pod

CHUNK_RECORDS = 20_000
BLOCK_S = 10

ERROR_LEVELS = frozenset({"error", "err", "fatal", "critical", "panic"})
_ERROR_WORD = re.compile(r"\berror\b", re.IGNORECASE)


def is_error_record(level: str | None, message: str) -> bool:
    """Apply the digest's default error-line rule to one record.

    A record with a ``level`` field is an error when the level is error/err/fatal/critical/panic (any case);
    without one, when its message contains the word "error" (any case, word boundaries as VictoriaLogs tokenises:
    letters, digits and ``_`` are word characters, so ``errors`` and ``error_count`` are not the word).
    """
    if level is not None:
        return level.lower() in ERROR_LEVELS
    return _ERROR_WORD.search(message) is not None


TAIL = 'Z"}\n'


def json_escape(text: str) -> str:
    """Escape ``text`` for the inside of a JSON string."""
    return json.dumps(text)[1:-1]


def record_head(pod: Pod, container: str, restart: int, level: str | None) -> str:
    """Everything of a Vector ``kubernetes_logs`` record that precedes the message (keys in Vector's order)."""
    level_part = f'"level":"{level}",' if level is not None else ""
    return (
        f'{{"file":"/var/log/pods/{pod.namespace}_{pod.name}_{pod.uid}/{container}/{restart}.log",'
        f'"kubernetes":{{"container_name":"{container}","pod_name":"{pod.name}",'
        f'"pod_namespace":"{pod.namespace}","pod_node_name":"{pod.node}","pod_uid":"{pod.uid}"}},'
        f'{level_part}"message":"'
    )


def record_mid(stream: str) -> str:
    """Everything between the message and the timestamp's digits."""
    return f'","source_type":"kubernetes_logs","stream":"{stream}","timestamp":"'


class RenderContext:
    """Per-stream caches: the timestamp prefix of every second of the day and spread-out microseconds."""

    def __init__(self, w: Window) -> None:
        """Prepare the caches for one day's stream."""
        day = w.date.isoformat()
        seconds = [f":{s:02d}." for s in range(60)]
        self.ts = [hm + s for hm in (f"{day}T{h:02d}:{m:02d}" for h in range(24) for m in range(60)) for s in seconds]
        self._us: dict[int, list[str]] = {}
        self._spread: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}

    def spread(self, c: int, span: int) -> tuple[tuple[int, int], ...]:
        """``(offset, count)`` of the seconds that get items when ``c`` items spread evenly over ``span`` seconds."""
        key = (c, span)
        got = self._spread.get(key)
        if got is None:
            got = tuple((i, n) for i in range(span) if (n := (c * (i + 1)) // span - (c * i) // span))
            self._spread[key] = got
        return got

    def us(self, n: int) -> list[str]:
        """Return ``n`` increasing microsecond fields spread over one second (cached per ``n``)."""
        cached = self._us.get(n)
        if cached is None:
            # Offsets in [0.05, 0.95) of each 1/n slot keep the values strictly increasing and irregular.
            cached = [f"{int((i + 0.05 + ((i * 7_919) % 1_000) * 0.0009) * 1_000_000 / n):06d}" for i in range(n)]
            self._us[n] = cached
        return cached


class LogSource(abc.ABC):
    """A producer of log records for the window; counts are known before rendering."""

    workload_key: str

    @abc.abstractmethod
    def total(self) -> int:
        """Exact number of records this source renders."""

    @abc.abstractmethod
    def errors(self) -> int:
        """Exact number of those records that are error lines by the digest's rule."""

    @abc.abstractmethod
    def hourly(self) -> list[int]:
        """Count records per UTC hour of the window (24 values)."""

    @abc.abstractmethod
    def render(self, ctx: RenderContext, first: int, last: int, out: list[str]) -> int:
        """Append the records of window seconds ``[first, last)`` to ``out``; return how many."""

    @abc.abstractmethod
    def span_counts(self, first: int, last: int) -> tuple[int, int]:
        """Return ``(records, error records)`` planned in window seconds ``[first, last)`` (whole minutes)."""


@dataclass(frozen=True)
class Template:
    """A normal log line: ``str.format`` text with ``{0}``, ``{1}``… (ints from ``ranges``) and ``{ts}``."""

    text: str
    stream: str = "stderr"
    level: str | None = None
    weight: int = 1
    ranges: tuple[tuple[int, int], ...] = ()

    def sample(self) -> str:
        """Render with the lowest values (used to check the template is not an error line)."""
        return self.text.format(*(lo for lo, _ in self.ranges), ts="2026-01-01T00:00:00.000Z")


@dataclass(frozen=True)
class LogEvent:
    """One explicit record at a given window second."""

    second: int
    us: int
    message: str
    stream: str = "stderr"
    level: str | None = None

    @property
    def is_error(self) -> bool:
        """Whether the digest's rule counts it."""
        return is_error_record(self.level, self.message)


@dataclass(frozen=True)
class TemplateGroup:
    """Templates sharing one volume plan (records per minute of the window)."""

    templates: tuple[Template, ...]
    plan: Sequence[int]


VARIANTS = 61


class ContainerLog(LogSource):
    """The log file of one run of one container: planned template lines plus explicit events.

    Each template is pre-rendered (and JSON-escaped) in ``VARIANTS`` versions with different numbers, so a line
    costs a table look-up and one concatenation; only templates quoting their own timestamp format per line.
    """

    def __init__(
        self,
        pod: Pod,
        container: str,
        restart: int,
        lo: int,
        hi: int,
        groups: Sequence[TemplateGroup],
        events: Sequence[LogEvent] = (),
    ) -> None:
        """Pre-render the templates of one container run and sort its events."""
        self.workload_key = pod.workload_key
        self.pod = pod
        self.container = container
        self.lo = lo
        self.hi = hi
        self._salt = salt_of(pod.uid, container, str(restart))
        # Per group: its plan and a deck with one entry per unit of template weight; an entry holds the template's
        # pre-rendered records up to the timestamp (None when the message quotes its own time) and its framing.
        self._groups: list[tuple[Sequence[int], list[tuple[list[str] | None, str, str, Template]]]] = []
        for g in groups:
            if len(g.plan) != MINUTES:
                raise ValueError("a template plan has one count per minute of the day")
            deck: list[tuple[list[str] | None, str, str, Template]] = []
            for tpl in g.templates:
                sample = tpl.sample()
                if is_error_record(tpl.level, sample):
                    raise ValueError(f"background template would count as an error line: {sample!r}")
                head, mid = record_head(pod, container, restart, tpl.level), record_mid(tpl.stream)
                seed = salt_of(tpl.text)
                framed = (
                    None
                    if "{ts}" in tpl.text
                    else [
                        head + json_escape(tpl.text.format(*_template_args(tpl, seed + v * 2_654_435_761))) + mid
                        for v in range(VARIANTS)
                    ]
                )
                deck.extend([(framed, head, mid, tpl)] * tpl.weight)
            self._groups.append((g.plan, deck))
        self._events = sorted(events, key=lambda e: (e.second, e.us))
        for e in self._events:
            if not lo <= e.second < hi:
                raise ValueError(f"event outside the container run [{lo}, {hi}): {e}")
        self._event_seconds = [e.second for e in self._events]
        self._event_lines = [
            record_head(pod, container, restart, e.level) + json_escape(e.message) + record_mid(e.stream)
            for e in self._events
        ]

    def total(self) -> int:
        """Count planned template lines plus explicit events."""
        return sum(sum(plan) for plan, _ in self._groups) + len(self._events)

    def errors(self) -> int:
        """Count error lines: only explicit events can be (templates are checked at construction)."""
        return sum(1 for e in self._events if e.is_error)

    def hourly(self) -> list[int]:
        """Count records per hour."""
        out = [0] * 24
        for plan, _ in self._groups:
            for m, c in enumerate(plan):
                out[m // 60] += c
        for e in self._events:
            out[e.second // 3_600] += 1
        return out

    def span_counts(self, first: int, last: int) -> tuple[int, int]:
        """Count planned records and error records in whole minutes ``[first, last)``."""
        lines = sum(sum(plan[first // 60 : last // 60]) for plan, _ in self._groups)
        events = [e for e in self._events if first <= e.second < last]
        return lines + len(events), sum(1 for e in events if e.is_error)

    def render(self, ctx: RenderContext, first: int, last: int, out: list[str]) -> int:
        """Render the planned lines of the block (blocks never straddle a minute), then its explicit events."""
        if last <= self.lo or first >= self.hi:
            return 0
        lo = max(first, self.lo)
        hi = min(last, self.hi)
        n_out = 0
        if lo < hi:
            m = first // 60
            a = max(self.lo, m * 60)
            span = min(self.hi, m * 60 + 60) - a
            for plan, deck in self._groups:
                c = plan[m]
                if not c:
                    continue
                nd = len(deck)
                for off, n in ctx.spread(c, span):
                    s = a + off
                    if not lo <= s < hi:
                        continue
                    us = ctx.us(n)
                    prefix = ctx.ts[s]
                    for k in range(n):
                        h = (s * 2_654_435_761 + k * 40_503 + self._salt) & 0x7FFFFFFF
                        framed, head, mid, tpl = deck[h % nd]
                        u = us[k]
                        if framed is not None:
                            out.append(f"{framed[(h >> 8) % VARIANTS]}{prefix}{u}{TAIL}")
                        else:
                            msg = json_escape(tpl.text.format(*_template_args(tpl, h), ts=f"{prefix}{u[:3]}Z"))
                            out.append(f"{head}{msg}{mid}{prefix}{u}{TAIL}")
                    n_out += n
        if not self._events:
            return n_out
        i = bisect_left(self._event_seconds, first)
        j = bisect_left(self._event_seconds, last)
        for k in range(i, j):
            e = self._events[k]
            out.append(f"{self._event_lines[k]}{ctx.ts[e.second]}{e.us:06d}{TAIL}")
        return n_out + (j - i)


def _template_args(tpl: Template, seed: int) -> list[int]:
    args: list[int] = []
    x = seed & 0x7FFFFFFF
    for lo, hi in tpl.ranges:
        x = (x * 1_103_515_245 + 12_345) & 0x7FFFFFFF
        args.append(lo + x % (hi - lo + 1))
    return args


def spread_events(n: int, lo: int, hi: int, salt: int) -> list[tuple[int, int]]:
    """``n`` (second, microsecond) pairs spread over window seconds ``[lo, hi)`` with deterministic jitter."""
    out: list[tuple[int, int]] = []
    span = hi - lo
    for i in range(n):
        x = (salt + i * 2_654_435_761) & 0xFFFFFFFF
        pos = lo + (span * i) // n + (x % max(1, span // n))
        out.append((min(hi - 1, pos), x % 1_000_000))
    return out


def stream_chunks(
    w: Window, sources: Sequence[LogSource], chunk_records: int = CHUNK_RECORDS, first_s: int = 0, last_s: int = DAY_S
) -> Iterator[bytes]:
    """Render every source block by block (10 s) and yield chunks of about ``chunk_records`` records.

    ``first_s``/``last_s`` (window seconds, multiples of 10) restrict the rendering to part of the day.
    """
    if first_s % BLOCK_S or last_s % BLOCK_S or not 0 <= first_s <= last_s <= DAY_S:
        raise ValueError(f"a span is whole {BLOCK_S} s blocks of the window, got [{first_s}, {last_s})")
    ctx = RenderContext(w)
    out: list[str] = []
    pending = 0
    for first in range(first_s, last_s, BLOCK_S):
        for src in sources:
            pending += src.render(ctx, first, first + BLOCK_S, out)
        if pending >= chunk_records:
            yield "".join(out).encode("utf-8")
            out = []
            pending = 0
    if pending:
        yield "".join(out).encode("utf-8")

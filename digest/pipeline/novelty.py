"""New today, gone since yesterday: the day's error signatures against the same workloads' earlier days.

Signal: the signatures `checks.error_lines` shows (each with a stable ``key``: a hash of its workload and redacted
shape) and, for each shown workload, the keys of every shape it wrote on each of the previous days (the trends'
``days``, 7 by default), asked of the log backend with the same `ShapeCount` question (its pods found by their names'
pattern) or read back from the state file, where every answer is kept as hashes, never as log text.

- **new today**: a shown signature whose key is on none of the earlier days that can be compared. An earlier day can
  be compared when its own error_lines check saw it whole (not UNKNOWN, not partial: the trends' findings of that
  day say so); a day whose logs are gone, or whose shipper was down, is left out rather than read as "no such error".
  No comparable day at all says "no history yet" and marks nothing: a first digest must not call everything new. A
  day whose answer was cut at the backend's group limit cannot prove absence: the signature is then not marked.
- **gone since yesterday**: yesterday's dominant signature of a workload (at least half of its error lines, and at
  least ``signature_min_lines`` of them) whose key is not among today's shapes of that workload, when today was seen
  whole. Why half: a signature that was most of a flood and stops is the news ("the relay's reconnect loop is
  fixed"); the tail of a workload's errors comes and goes every day.

Novelty never changes the grade, and a failed look-up leaves a note instead of a mark.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from digest.checks.contract import Finding, SourceError, Sources, Status, Window, WorkloadSignatures, time_left
from digest.checks.error_lines import ErrorLinesCheck, ShapeKeys
from digest.checks.log_questions import AnswerClock
from digest.pipeline.state import HistoryStore, StateError

log = logging.getLogger(__name__)

# A dominant signature is at least this share of its workload's error lines.
_DOMINANT_SHARE = 0.5


@dataclass(frozen=True)
class Gone:
    """A signature that dominated a workload's errors yesterday and was not written today."""

    labels: Mapping[str, str]
    text: str
    lines: float
    share: float


@dataclass(frozen=True)
class Novelty:
    """What is new today and what is gone, for the signatures of one digest.

    ``new`` holds the keys of the shown signatures found on none of the ``compared`` earlier days, ``seen`` those
    found on one of them; a shown signature in neither could not be judged. ``notes`` say why nothing could be marked
    ("no history yet") or what could not be read.
    """

    new: frozenset[str] = frozenset()
    seen: frozenset[str] = frozenset()
    compared: int = 0
    gone: tuple[Gone, ...] = ()
    notes: tuple[str, ...] = field(default=())


ShapeKey = tuple[str, str, float, float]


class ShapeHistory:
    """Each workload's signature keys per window, each asked once: a replay's days are each other's history.

    Holds tasks, not results, so that two days judged at the same time share the look-up of a third. With a
    `HistoryStore` (the state file) the answers are kept across runs, as hashes; a window is stored only when it was
    seen whole, which the caller knows.
    """

    def __init__(self, store: HistoryStore | None = None, cluster: str = "", rule: str = "") -> None:
        self._tasks: dict[ShapeKey, asyncio.Future[ShapeKeys]] = {}
        self._store = store
        self._cluster = cluster
        self._rule = rule

    async def offer(self, window: Window, workloads: Iterable[WorkloadSignatures]) -> None:
        """Answers in hand for ``window`` (every key each workload was answered): kept for later days, and stored.

        Called only for a window seen whole (`judge`), so that what is stored is the window's final word. Kept at
        once, so that a look-up that follows finds them; stored in a worker thread, never on the event loop (the
        store is SQLite, and a locked file waits out its busy timeout).
        """
        loop = asyncio.get_running_loop()
        kept: list[tuple[ShapeKey, ShapeKeys]] = []
        for workload in workloads:
            keys = ShapeKeys(workload.keys, workload.capped)
            key = _key(workload.labels, window)
            if key not in self._tasks:
                future: asyncio.Future[ShapeKeys] = loop.create_future()
                future.set_result(keys)
                self._tasks[key] = future
            kept.append((key, keys))
        if kept and self._store is not None:
            await asyncio.to_thread(self._save_all, kept)

    async def get(
        self,
        check: ErrorLinesCheck,
        sources: Sources,
        window: Window,
        labels: Mapping[str, str],
        clock: AnswerClock | None = None,
        error_lines: float | None = None,
    ) -> ShapeKeys:
        """The keys of ``labels``' workload in ``window``: stored, being asked, or asked now (and stored).

        ``clock`` bounds the backend's answer when it is asked now; one being asked for another digest keeps its own.
        ``error_lines``: at most how many error lines the workload wrote in ``window``, when known: above the check's
        sample budget its shapes are read from a sample of the minutes (`ErrorLinesCheck.history_question`).
        """
        key = _key(labels, window)
        if key not in self._tasks:
            self._tasks[key] = asyncio.ensure_future(
                self._stored_or_asked(check, sources, window, key, clock, error_lines)
            )
        return await asyncio.shield(self._tasks[key])

    async def _stored_or_asked(
        self,
        check: ErrorLinesCheck,
        sources: Sources,
        window: Window,
        key: ShapeKey,
        clock: AnswerClock | None,
        error_lines: float | None,
    ) -> ShapeKeys:
        # The store is SQLite: read and written in a worker thread, never on the event loop.
        stored = await asyncio.to_thread(self._load, key)
        if stored is not None:
            return stored
        asked = await check.shape_keys(sources, window, key[0], key[1], clock, error_lines)
        await asyncio.to_thread(self._save, key, asked)
        return asked

    def _load(self, key: ShapeKey) -> ShapeKeys | None:
        if self._store is None:
            return None
        try:
            payload = self._store.load_shapes(self._cluster, self._rule, *key)
            if payload is None:
                return None
            raw = json.loads(payload)
            return ShapeKeys(frozenset(str(one) for one in raw["keys"]), bool(raw["capped"]))
        except (StateError, ValueError, KeyError, TypeError) as exc:
            self._give_up(exc)
            return None

    def _save_all(self, kept: Iterable[tuple[ShapeKey, ShapeKeys]]) -> None:
        for key, keys in kept:
            self._save(key, keys)

    def _save(self, key: ShapeKey, keys: ShapeKeys) -> None:
        if self._store is None:
            return
        try:
            payload = json.dumps({"keys": sorted(keys.keys), "capped": keys.capped})
            self._store.save_shapes(self._cluster, self._rule, *key, payload)
        except StateError as exc:
            self._give_up(exc)

    def _give_up(self, exc: Exception) -> None:
        log.warning("signature history store disabled for this digest, asking the log backend instead: %s", exc)
        self._store = None


def error_lines_of(finding: Finding | None, labels: Mapping[str, str], top: int) -> float | None:
    """At most how many error lines ``labels``' workload wrote in ``finding``'s window; None when it cannot be told.

    Its own count when the finding lists it; else, the finding listing its ``top`` worst workloads, at most the last
    one's, or none when it lists fewer (every workload that wrote one); else the day's total (a stored finding keeps
    no workload's count).
    """
    if finding is None or finding.value is None:
        return None
    listed = {(one.labels.get("namespace"), one.labels.get("workload")): one.value for one in finding.offenders}
    count = listed.get((labels.get("namespace"), labels.get("workload")))
    if count is not None:
        return count
    if listed:
        return min(listed.values()) if len(listed) >= top else 0.0
    return finding.value


def every_key(workload: WorkloadSignatures) -> bool:
    """Whether ``workload``'s answer holds the key of every shape its error lines had (not sampled, capped, stored)."""
    return workload.sampled_every == 1 and not workload.capped and len(workload.keys) == workload.distinct


def _key(labels: Mapping[str, str], window: Window) -> ShapeKey:
    return (
        labels.get("namespace", ""),
        labels.get("workload", ""),
        window.start.timestamp(),
        window.end.timestamp(),
    )


def seen_whole(finding: Finding | None) -> bool:
    """Whether an error_lines finding saw its whole window and fleet (so an absent signature is evidence)."""
    if finding is None or finding.status is Status.UNKNOWN or finding.error:
        return False
    return finding.coverage is None or not finding.coverage.partial


async def judge(
    check: ErrorLinesCheck,
    sources: Sources,
    window: Window,
    today: Finding | None,
    earlier: Sequence[tuple[Window, Finding | None]],
    history: ShapeHistory,
    yesterday: Window | None = None,
) -> Novelty | None:
    """New today and gone since yesterday for ``today``'s error_lines finding, or None when there is nothing to say.

    ``earlier``: the previous windows, newest first, each with its error_lines finding (None when the check did
    not run); ``yesterday`` is the window of ``earlier[0]`` when it is the day before ``window``.
    """
    if today is None or not seen_whole(today):
        return None
    await history.offer(window, today.signatures)
    # An earlier day's own digest already asked for its worst workloads' shapes: where that answer holds every key
    # of the workload's error lines, it is the history's answer too, and the log backend is not asked again (a
    # workload's pods named exactly, where the history names them by pattern: the same lines, the day's pods being
    # those its counts found). A sampled, capped or stored answer holds only some keys: the history asks for them.
    for past, finding in earlier:
        if finding is not None and seen_whole(finding):
            await history.offer(past, [workload for workload in finding.signatures if every_key(workload)])
    # The policy's seconds bound the backend's answers, from the first request sent (`AnswerClock`); the sources'
    # deadline bounds the wait for a query slot behind the counts of the days still being digested.
    clock = AnswerClock(check.policy.signature_timeout_seconds)
    not_asked = Novelty(
        notes=(
            "new today: the earlier days' signatures were not asked before the deadline (the log backend's query "
            "slots stayed busy)",
        )
    )
    left = time_left(sources)
    if left is not None and left <= 0:
        return not_asked
    try:
        async with asyncio.timeout(left):
            new, seen, compared, notes = await _new_today(check, sources, today, earlier, history, clock)
            gone = await _gone(check, sources, window, today, earlier, history, yesterday, clock)
    except TimeoutError:
        if clock.started:
            return Novelty(notes=("new today: the earlier days' signatures did not answer before the deadline",))
        return not_asked
    if not today.signatures and not gone:
        return None
    return Novelty(new=new, seen=seen, compared=compared, gone=gone, notes=notes)


async def _new_today(
    check: ErrorLinesCheck,
    sources: Sources,
    today: Finding,
    earlier: Sequence[tuple[Window, Finding | None]],
    history: ShapeHistory,
    clock: AnswerClock,
) -> tuple[frozenset[str], frozenset[str], int, tuple[str, ...]]:
    if not today.signatures:
        return frozenset(), frozenset(), 0, ()
    comparable = [(past, finding) for past, finding in earlier if seen_whole(finding)]
    if not comparable:
        return frozenset(), frozenset(), 0, ("new today: no history yet (no earlier day's logs were seen whole)",)

    async def keys_of(workload: WorkloadSignatures, past: Window, finding: Finding | None) -> ShapeKeys | SourceError:
        if finding is not None and not finding.value:
            return ShapeKeys(frozenset(), False)  # no error line in the cluster that day: no shape either
        try:
            bound = error_lines_of(finding, workload.labels, check.policy.top)
            return await history.get(check, sources, past, workload.labels, clock, bound)
        except SourceError as exc:
            return exc

    new: set[str] = set()
    before: set[str] = set()
    notes: list[str] = []
    for workload in today.signatures:
        answers = await asyncio.gather(*(keys_of(workload, past, finding) for past, finding in comparable))
        failures = [answer for answer in answers if isinstance(answer, SourceError)]
        days = [answer for answer in answers if isinstance(answer, ShapeKeys)]
        if failures:
            name = f"{workload.labels.get('namespace', '')}/{workload.labels.get('workload', '')}"
            notes.append(f"new today: {name}'s earlier days could not be read ({failures[0]})")
        for signature in workload.signatures:
            seen = any(signature.key in day.keys for day in days)
            provable = not failures and not any(day.capped for day in days)
            if signature.key and seen:
                before.add(signature.key)
            elif signature.key and provable:
                new.add(signature.key)
    return frozenset(new), frozenset(before), len(comparable), tuple(notes)


async def _gone(
    check: ErrorLinesCheck,
    sources: Sources,
    window: Window,
    today: Finding,
    earlier: Sequence[tuple[Window, Finding | None]],
    history: ShapeHistory,
    yesterday: Window | None,
    clock: AnswerClock,
) -> tuple[Gone, ...]:
    before = earlier[0][1] if earlier else None
    if yesterday is None or before is None or not seen_whole(before):
        return ()
    minimum = check.policy.signature_min_lines * yesterday.seconds / 86_400
    gone: list[Gone] = []
    for workload in before.signatures:
        top = workload.signatures[0] if workload.signatures else None
        if top is None or not top.key or top.share < _DOMINANT_SHARE or top.lines < minimum:
            continue
        try:
            # Today's shown workloads were offered by `judge`: only a workload not shown today is asked.
            now = await history.get(
                check, sources, window, workload.labels, clock, error_lines_of(today, workload.labels, check.policy.top)
            )
        except SourceError:
            continue  # no evidence either way: say nothing
        if top.key not in now.keys and not now.capped:
            gone.append(Gone(labels=workload.labels, text=top.text, lines=top.lines, share=top.share))
    return tuple(gone)

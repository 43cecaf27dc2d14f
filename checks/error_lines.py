"""error_lines: error lines per workload in the window, counted by the log backend.

Signal: log lines that are errors, grouped by namespace and workload (the pod name without its ReplicaSet hash and
pod suffix, so a crash-looping Deployment's pods add up), next to the workload's total lines.

Question (one `LineCount`, counted in the backend — no line is downloaded): lines of the window by namespace and
pod, in two columns, ``total`` and ``errors``. On VictoriaLogs that is one LogsQL query::

    _time:[start, end) <optional scope>
      | stats by (kubernetes.pod_namespace, kubernetes.pod_name)
          count() as total,
          count() if ((level:~"(?i)^(error|err|fatal|critical|panic)$") or ((level:"") (i("error")))) as errors

on Loki two metric LogQL queries (``sum by (namespace, pod) (count_over_time(…[86400s]))``, one per column).
An error line is one whose ``level`` is an error level (any case) or, for lines without a level, whose message
contains the word "error" (any case). Which field is the level is the backend's (``logs.fields`` in the policy).

Thresholds (the seed's rule, 2026-07-20 post-mortem): 50,000 error lines from one workload in 24 h cost one point,
500,000 cost two. A normal workload writes a few thousand lines a day; 50,000 errors is already an order of magnitude
beyond noise, 500,000 is a flood that loads the log pipeline and usually the node (07-20: 4.5 M lines, conntrack
at 72 %). Windows shorter or longer than 24 h scale the thresholds proportionally.

No log line at all in the window means the log pipeline (or the query) is blind: UNKNOWN, never "0 errors".

What the errors said: for each workload that costs points (or, on a day when none does, the worst one if it wrote
at least ``signature_min_lines`` a day), its top ``signatures`` message shapes — the message with numbers, hex,
UUIDs and IPs collapsed, grouped and counted in the backend (a `ShapeCount`; VictoriaLogs' ``collapse_nums``), each
with its count, its share of the workload's errors, its first and last time and one line of it, all redacted
(`checks.redaction`) before they enter the finding; ``show_log_examples: false`` keeps only the shapes. Shapes
never change the grade: a backend that cannot group by them (Loki without its pattern ingester), or that does not
answer within ``signature_timeout_seconds`` of being asked, leaves a note instead, and the count stands. Those seconds
start when the first shapes request is sent (`AnswerClock`), not when the check gets to them: the checks share a
bound on queries in flight, and a note that says "no answer" of a backend still waiting behind the other checks'
counts would be wrong. The check's own deadline still bounds the wait: shapes not asked before it are given up
with a note saying so, and the count stands.

A flood's shapes cost a bounded amount: a workload with more than ``signature_sample_lines`` error lines in the
window (200,000 by default) has its shapes read from one minute in ``ceil(lines / signature_sample_lines)`` — a
systematic sample of the window's minutes, which VictoriaLogs reads without touching the other minutes' blocks and
Loki counts with one leg per sampled minute — and each shape's count (and the lines of no shape Loki names) is the
sample's times that factor: an estimate, shown with "≈" and the sample named. On the
2026-07-20 flood (4.5 M error lines of one workload) that is one minute in 23: 63 minutes instead of 1,440.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace

from . import coverage
from .contract import (
    Finding,
    Input,
    Look,
    Need,
    Offender,
    Quantity,
    Signature,
    SourceError,
    SourceErrorKind,
    Sources,
    Status,
    Unit,
    Window,
    WorkloadSignatures,
    fmt_int,
    fmt_percent,
    grade,
    time_left,
    unknown,
)
from .log_questions import (
    EVERY_LINE,
    AnswerClock,
    AnyOf,
    CountRow,
    Empty,
    Filter,
    HasWord,
    Is,
    LineCount,
    Matches,
    Native,
    OneOf,
    ShapeCount,
    every,
    native,
)
from .redaction import redact, shorten

NAME = "error_lines"

# What this check reads, for `digest doctor`: its lines' namespace and pod, and the level that marks an error.
INPUTS: tuple[Input, ...] = (
    Input("lines", "pod logs", "every line in scope", policy_key="error_lines.scope_filter"),
    Input("log_field", "namespace", "whose lines", policy_key="logs.fields.namespace"),
    Input("log_field", "pod", "which workload", policy_key="logs.fields.pod"),
    Input("log_field", "level", "error levels, else the word", required=False, policy_key="logs.fields.level"),
)

_DAY_SECONDS = 86_400

# Kubernetes names generated suffixes with this alphabet (no vowels, no 0/1/3) — matching only it keeps a real
# name segment such as "cache" or "redis" from being taken for a hash.
_SAFE = "[bcdfghjklmnpqrstvwxz2456789]"
_DEPLOYMENT_POD = re.compile(rf"^(?P<workload>.+)-{_SAFE}{{6,10}}-{_SAFE}{{5}}$")
# A CronJob's run: its Job is named after the schedule in minutes since the epoch (8 digits until 2160), its pod after
# the Job: every run one workload, not one per minute.
_CRONJOB_POD = re.compile(rf"^(?P<workload>.+)-\d{{8,10}}-{_SAFE}{{5}}$")
_GENERATED_POD = re.compile(rf"^(?P<workload>.+)-{_SAFE}{{5}}$")
_STATEFUL_POD = re.compile(r"^(?P<workload>.+)-\d+$")


def workload_of(pod: str) -> str:
    """The workload a pod belongs to: a Deployment's pods, a CronJob's runs and the rest lose their generated parts.

    A Deployment's pod its ReplicaSet hash and suffix, a CronJob's run its schedule and suffix, others their suffix.
    """
    for pattern in (_DEPLOYMENT_POD, _CRONJOB_POD, _GENERATED_POD, _STATEFUL_POD):
        match = pattern.match(pod)
        if match:
            return match.group("workload")
    return pod


# A ReplicaSet is its Deployment's name and the pod template's hash; a Job of a CronJob its name and the minute.
_REPLICASET = re.compile(rf"^(?P<workload>.+)-{_SAFE}{{6,10}}$")
_CRONJOB_RUN = re.compile(r"^(?P<workload>.+)-\d{8,10}$")
# The kinds a reader would not guess from a pod's name, said beside it ("default/debug-shell (a bare pod)").
SAID_KINDS = {"Pod": "a bare pod", "Node": "a static pod"}


def owned_by(kind: str, owner: str, pod: str) -> tuple[str, str] | None:
    """The kind and workload of a pod, from its controller (``kube_pod_info``'s ``created_by_kind`` and ``_name``).

    A ReplicaSet's pod is its Deployment's, a CronJob's run its CronJob's (as `workload_of` names them from the pod's
    name); a pod without a controller (kube-state-metrics writes ``<none>``) is a bare pod and a kubelet's static
    pod (``Node``) is named by itself, not by what its name looks like (``toolbox-7`` is not a StatefulSet's seventh
    pod). No label at all (a relabelling dropped it): None, and the pod is named from its name (`workload_of`).
    """
    if not kind:
        return None
    if kind == "<none>":
        return "Pod", pod
    if kind == "Node":
        return "Node", pod
    if kind == "ReplicaSet":
        match = _REPLICASET.match(owner)
        return ("Deployment", match.group("workload")) if match else ("ReplicaSet", owner)
    if kind == "Job":
        match = _CRONJOB_RUN.match(owner)
        return ("CronJob", match.group("workload")) if match else ("Job", owner)
    return kind, owner or pod


def workload_pods(workload: str) -> str:
    """An RE2 regex (anchored by `Matches`) for the names of the pods `workload_of` maps to ``workload``."""
    name = re.escape(workload)
    return rf"{name}-{_SAFE}{{6,10}}-{_SAFE}{{5}}|{name}-\d{{8,10}}-{_SAFE}{{5}}|{name}-{_SAFE}{{5}}|{name}-\d+|{name}"


def signature_key(namespace: str, workload: str, shape: str) -> str:
    """A signature's stable id: its workload and redacted shape, hashed, so a history keeps no log text."""
    return hashlib.sha256(f"{namespace}\0{workload}\0{redact(shape)}".encode()).hexdigest()[:16]


Workload = tuple[str, str]  # (namespace, workload)


def tally(rows: list[CountRow]) -> tuple[dict[Workload, float], dict[Workload, float], dict[Workload, set[str]]]:
    """Lines, error lines and the pods that wrote errors, per workload, from the count question's rows."""
    totals: dict[Workload, float] = defaultdict(float)
    errors: dict[Workload, float] = defaultdict(float)
    pods: dict[Workload, set[str]] = defaultdict(set)
    for row in rows:
        pod = row.group.get("pod", "")
        key = (row.group.get("namespace", ""), workload_of(pod))
        if "total" in row.counts:
            totals[key] += row.counts["total"]
        if "errors" in row.counts:
            errors[key] += row.counts["errors"]
            if row.counts["errors"] > 0:
                pods[key].add(pod)
    return totals, errors, pods


def _ranked(errors: Mapping[Workload, float]) -> list[tuple[float, Workload]]:
    """Workloads that wrote error lines, the most first."""
    return sorted(((count, key) for key, count in errors.items() if count > 0), reverse=True)


@dataclass(frozen=True)
class ShapeKeys:
    """Every signature key one workload's error lines had in a window (``capped``: the backend answered its limit)."""

    keys: frozenset[str]
    capped: bool


@dataclass(frozen=True)
class ErrorLinesPolicy:
    """Thresholds and log field names; every value can be overridden in the policy file."""

    enabled: bool = True
    warn_lines: int = 50_000
    crit_lines: int = 500_000
    warn_penalty: int = 1
    crit_penalty: int = 2
    error_levels: tuple[str, ...] = ("error", "err", "fatal", "critical", "panic")
    message_word: str = "error"
    # A complete filter in the log backend's language (LogsQL; a LogQL pipeline for Loki) replacing the level/word
    # rule above, for pipelines with their own convention.
    error_filter: str = ""
    # An extra filter in the log backend's language applied to every line; empty means all logs.
    scope_filter: str = ""
    top: int = 5
    # What the errors said: shapes per workload (0: none asked), for at most this many workloads, and the daily
    # error lines that make a workload that costs no point worth it (scaled to the window).
    signatures: int = 3
    signature_workloads: int = 3
    signature_min_lines: int = 1_000
    signature_timeout_seconds: float = 20.0
    # A workload with more error lines than this in the window has its shapes read from a systematic sample of the
    # window's minutes (one in ceil(lines / this)), so that a flood's shapes cost what this many lines cost; 0: never.
    signature_sample_lines: int = 200_000
    # False: only the collapsed shapes are shown, never a line as it was written (it may hold what redaction misses).
    show_log_examples: bool = True


@dataclass(frozen=True)
class ErrorLinesCheck:
    """Counts error lines per workload in the log backend."""

    policy: ErrorLinesPolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        return (coverage.pod_logs(self.scope()),)

    def error_rule(self) -> Filter:
        """The filter that selects error lines."""
        policy = self.policy
        if policy.error_filter:
            return Native(policy.error_filter)
        return AnyOf((OneOf("level", policy.error_levels), every(Empty("level"), HasWord(policy.message_word))))

    def scope(self) -> Filter:
        """The lines this check looks at."""
        return native(self.policy.scope_filter)

    def question(self, window: Window) -> LineCount:
        """The one question this check asks."""
        return LineCount(
            window=window,
            scope=self.scope(),
            columns=(("total", EVERY_LINE), ("errors", self.error_rule())),
            by=("namespace", "pod"),
        )

    def thresholds(self, window: Window) -> tuple[float, float]:
        """The warn and crit thresholds scaled to the window's length."""
        scale = window.seconds / _DAY_SECONDS
        return self.policy.warn_lines * scale, self.policy.crit_lines * scale

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        try:
            rows = await sources.logs.count(self.question(window))
        except SourceError as exc:
            return unknown(NAME, "error lines not counted: the log backend did not answer", str(exc))

        policy = self.policy
        totals, errors, pods = tally(rows)
        all_lines = sum(totals.values())
        if all_lines == 0:
            return unknown(
                NAME,
                "no log line at all in the window: the log pipeline or its field names are not what the policy says",
                "no log lines in the window",
                hint="Check that the log shipper runs and that the policy's logs.fields name where it writes each "
                "line's namespace and pod.",
            )

        ranked = _ranked(errors)
        worst = ranked[0][0] if ranked else 0.0
        warn_at, crit_at = self.thresholds(window)
        status, penalty = grade(
            2 if worst >= crit_at else 1 if worst >= warn_at else 0, policy.warn_penalty, policy.crit_penalty
        )
        offenders = [
            Offender(
                labels={"namespace": key[0], "workload": key[1]},
                value=count,
                # Error lines are counted among all lines, so a workload without a total was not measured.
                facts={"total_lines": Quantity(round(totals[key]), Unit.COUNT)} if key in totals else {},
            )
            for count, key in ranked[: policy.top]
        ]
        # Where to read them: each workload's error lines, and the cluster's.
        offenders = [
            replace(
                offender,
                look=Look(
                    logs=sources.logs.reading_query(
                        window,
                        every(
                            self.scope(),
                            self.error_rule(),
                            Is("namespace", offender.labels["namespace"]),
                            Matches("pod", workload_pods(offender.labels["workload"])),
                        ),
                    )
                ),
            )
            for offender in offenders
        ]
        total_errors = sum(errors.values())
        # The summary names the worst workload; the evidence lines name the next ones.
        evidence = [
            f"then {key[0]}/{key[1]}: {fmt_int(count)} error lines of {fmt_int(totals.get(key, 0))}"
            for count, key in ranked[1 : policy.top]
        ]
        if ranked:
            count, (namespace, workload) = ranked[0]
            share = count / totals[(namespace, workload)] if totals[(namespace, workload)] else 0.0
            summary = (
                f"{namespace}/{workload} wrote {fmt_int(count)} error lines ({fmt_percent(share)} of its "
                f"{fmt_int(totals[(namespace, workload)])} lines)"
                + (f"; {fmt_int(total_errors)} in the cluster" if total_errors > count else "")
            )
        else:
            summary = f"no error lines in {fmt_int(all_lines)} log lines"
        hint = ""
        if status is not Status.OK:
            namespace, workload = ranked[0][1]
            reading = sources.logs.reading_query(window, every(self.scope(), Is("namespace", namespace)))
            hint = (
                f"Read the first errors of {namespace}/{workload} ({sources.logs.language}: {reading}) and look for a "
                "retry loop without backoff; cap per-pod log volume in the shipper."
            )
        said, note = await self._signatures(sources, window, ranked, errors, pods)
        return Finding(
            name=NAME,
            status=status,
            penalty=penalty,
            value=worst,
            summary=summary,
            offenders=offenders,
            hint=hint,
            evidence=evidence,
            signatures=said,
            # The error lines; on a day without any, the lines themselves (a link to nothing helps no one).
            look=Look(
                logs=sources.logs.reading_query(
                    window, every(self.scope(), self.error_rule()) if total_errors else self.scope()
                )
            ),
            signatures_note=note,
            namespace_lines=_by_namespace(totals),
            workload_lines={f"{namespace}/{workload}": count for (namespace, workload), count in totals.items()},
        )

    def signature_workloads(self, window: Window, ranked: list[tuple[float, tuple[str, str]]]) -> list[tuple[str, str]]:
        """The workloads whose error shapes are asked: those that cost points, else the worst if it stands out."""
        policy = self.policy
        if policy.signatures <= 0 or policy.signature_workloads <= 0:
            return []
        warn_at, _ = self.thresholds(window)
        costly = [key for count, key in ranked if count >= warn_at]
        if costly:
            return costly[: policy.signature_workloads]
        standing_out = policy.signature_min_lines * window.seconds / _DAY_SECONDS
        return [key for count, key in ranked[:1] if count >= standing_out]

    def shape_questions(self, window: Window, rows: list[CountRow]) -> list[ShapeCount]:
        """The shapes questions the check asks after ``rows`` (the answer to `question`): one per chosen workload.

        For a benchmark's floor, which sends them directly.
        """
        _, errors, pods = tally(rows)
        return [
            replace(self.shape_question(window, key[0], pods[key]), sample_every=self.sample_every(errors[key]))
            for key in self.signature_workloads(window, _ranked(errors))
        ]

    def sample_every(self, error_lines: float) -> int:
        """One minute in how many the shapes of a workload with ``error_lines`` are read from (1: every minute)."""
        budget = self.policy.signature_sample_lines
        if budget <= 0 or error_lines <= budget:
            return 1
        return math.ceil(error_lines / budget)

    def shape_question(self, window: Window, namespace: str, pods: set[str]) -> ShapeCount:
        """The shapes of one workload's error lines (its pods named exactly: a prefix would catch its neighbours)."""
        lines = every(
            self.scope(), self.error_rule(), Is("namespace", namespace), OneOf("pod", tuple(sorted(pods)), False)
        )
        return ShapeCount(window=window, lines=lines, top=self.policy.signatures)

    def history_question(
        self, window: Window, namespace: str, workload: str, error_lines: float | None = None
    ) -> ShapeCount:
        """The shapes of one workload's error lines in another window, its pods found by their names' pattern.

        The pattern, not the names: that window's pods are not known without counting it. ``error_lines``, when
        known (at most that many), samples the window's minutes as the check's own question does: the day after a
        flood, the flood's history costs what the budget allows, not a reading of every error line it wrote.
        """
        lines = every(
            self.scope(), self.error_rule(), Is("namespace", namespace), Matches("pod", workload_pods(workload))
        )
        sample = 1 if error_lines is None else self.sample_every(error_lines)
        return ShapeCount(window=window, lines=lines, top=0, sample_every=sample)

    async def shape_keys(
        self,
        sources: Sources,
        window: Window,
        namespace: str,
        workload: str,
        clock: AnswerClock | None = None,
        error_lines: float | None = None,
    ) -> ShapeKeys:
        """The keys of every signature ``workload`` wrote in ``window``; raises `SourceError` if the backend fails.

        ``clock`` bounds the backend's answer (see `AnswerClock`); the caller bounds the wait for it. A sample's keys
        are some of the window's only: said as capped, so that no shape is called new on their evidence.
        """
        question = replace(self.history_question(window, namespace, workload, error_lines), clock=clock)
        answer = await sources.logs.shapes(question)
        keys = frozenset(signature_key(namespace, workload, key) for key in answer.keys)
        return ShapeKeys(keys, answer.capped or answer.sampled_every > 1)

    async def _signatures(
        self,
        sources: Sources,
        window: Window,
        ranked: list[tuple[float, tuple[str, str]]],
        errors: Mapping[tuple[str, str], float],
        pods: Mapping[tuple[str, str], set[str]],
    ) -> tuple[tuple[WorkloadSignatures, ...], str]:
        chosen = self.signature_workloads(window, ranked)
        if not chosen:
            return (), ""
        seconds = self.policy.signature_timeout_seconds
        # One clock for every workload's question: together they get the seconds the policy allows.
        clock = AnswerClock(seconds)
        questions = [
            replace(
                self.shape_question(window, key[0], pods[key]), clock=clock, sample_every=self.sample_every(errors[key])
            )
            for key in chosen
        ]
        not_asked = (
            "what the errors said: not asked before the check's deadline (the log backend's query slots stayed busy "
            "with other checks' queries)"
        )
        left = time_left(sources)
        if left is not None and left <= 0:
            return (), not_asked
        try:
            # The check's deadline (set by whoever runs it) bounds what the clock does not: the wait for a slot.
            async with asyncio.timeout(left):
                # Every answer is awaited (none left running unobserved); one workload's failure keeps the others'.
                answers = await asyncio.gather(
                    *(sources.logs.shapes(question) for question in questions), return_exceptions=True
                )
        except TimeoutError:
            if clock.started:
                return (), "what the errors said: no answer before the check's deadline"
            return (), not_asked
        out_of_time = clock.remaining(asyncio.get_running_loop().time()) <= 0
        said: list[WorkloadSignatures] = []
        notes: list[str] = []
        for key, answer in zip(chosen, answers, strict=True):
            if isinstance(answer, SourceError):
                if answer.kind is SourceErrorKind.TIMEOUT and out_of_time:
                    # Said once, however many workloads' questions the spent clock stopped.
                    late = f"what the errors said: no answer within {seconds:g} s of asking"
                    if late not in notes:
                        notes.append(late)
                    continue
                unsupported = answer.kind is SourceErrorKind.UNSUPPORTED
                note = answer.message if unsupported else f"the log backend did not answer ({answer})"
                notes.append(f"what the errors said: {note}")
                continue
            if isinstance(answer, BaseException):
                raise answer
            # A sample's lines stand for that many times as many (an estimate, said as one).
            every = max(1, answer.sampled_every)
            signatures = tuple(
                Signature(
                    text=shorten(redact(shape.text)),
                    lines=shape.lines * every,
                    share=min(1.0, shape.lines * every / errors[key]) if errors[key] else 0.0,
                    first=shape.first,
                    last=shape.last,
                    example=shorten(redact(shape.example)) if self.policy.show_log_examples else None,
                    key=signature_key(key[0], key[1], shape.key),
                )
                for shape in answer.top
            )
            labels = {"namespace": key[0], "workload": key[1]}
            if answer.unshaped > 0:
                # A sample's unshaped lines are an estimate too, said as one (Loki samples and names only some).
                unshaped = fmt_int(answer.unshaped) if every == 1 else f"≈{fmt_int(answer.unshaped * every)}"
                sample = "" if every == 1 else " (sampled)"
                notes.append(
                    f"what the errors said: {unshaped} of {key[0]}/{key[1]}'s {fmt_int(errors[key])} error lines"
                    f"{sample} are of no shape named here ({answer.unshaped_why or 'the backend named only some'})"
                )
            keys = frozenset(signature_key(key[0], key[1], shape) for shape in answer.keys)
            said.append(
                WorkloadSignatures(
                    labels,
                    signatures,
                    distinct=answer.distinct,
                    capped=answer.capped or every > 1,
                    keys=keys,
                    sampled_every=every,
                )
            )
        return tuple(said), "; ".join(dict.fromkeys(notes))


def _by_namespace(totals: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """Lines per namespace, from the lines per (namespace, workload)."""
    lines: dict[str, float] = {}
    for (namespace, _), count in totals.items():
        lines[namespace] = lines.get(namespace, 0.0) + count
    return lines

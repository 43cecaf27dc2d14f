"""Recording rules for the log counts the digest reads (`digest.backends.recorded`), written for each evaluator.

**vmalert** (``type: vlogs`` groups, VictoriaLogs as the datasource, VictoriaMetrics as the remote write target):
one rule per family and the heartbeat, every minute. A LogsQL stats query with several results is recorded as one
series per result, told apart by the ``stats_result`` label vmalert adds; the fields the counts are grouped by are
renamed to plain label names (``kubernetes.pod_namespace`` → ``namespace``), which PromQL can select on.

* Live (``digest rules --for vmalert``): each expression starts with ``_time:1m``. vmalert evaluates it at the
  minute ``t`` (aligned, 30 s after it by default: ``-rule.evalDelay``) and VictoriaLogs reads ``_time:1m`` as the
  minute before ``t - 1 ns``: [t - 60 s, t), each line in exactly one minute. Without the filter vmalert would pass
  ``start``/``end``, which VictoriaLogs reads as the closed range [t - 60 s, t]: a line stamped on the minute would
  be counted in two (measured).
* Replay (``--replay``, for ``vmalert -replay``): vmalert refuses a range query of an expression with a time filter,
  so the expressions have none; VictoriaLogs' ``stats_query_range`` stamps each minute at its start. Its rules say so
  (``digest_stamp: start``) and the digest reads each kind where it belongs. Run the replay with
  ``-replay.maxDatapointsPerQuery=1``: the VictoriaLogs built from Debian trixie's source (1.10-era) sometimes puts
  a minute's count on its neighbour's timestamp in a range answer of many minutes (measured: 19-31 of 1,440 minutes
  a day lost to duplicates; the bug upstream fixed in 1.11), never in an answer of one.

* Every query vmalert sends says ``allow_partial_response=0`` (the group's ``params``; vmalert adds them to live and
  replayed queries alike): a VictoriaLogs cluster's vlselect run with ``-search.allowPartialResponse`` would
  otherwise answer a minute some vlstorage nodes could not serve with the others' counts, and a short count would
  be recorded as the minute's. Refused, the minute has no record, and the digest scans it as it scans any minute the
  recorder missed (`digest.backends.victorialogs`).

**Loki's ruler** (remote write to VictoriaMetrics or Prometheus): one rule per column and term of each family,
``count_over_time`` over the minute before the evaluation, with the column in ``stats_result`` and the term's sign
in ``digest_sign`` (a column LogQL cannot count in one expression is a sum of terms, some subtracted) and the term
in ``digest_term``. Each counts ``[1m] offset 1ns``: [t - 60 s, t) rather than LogQL's (t - 60 s, t], so that a line
stamped on the edge of two minutes is counted in one. Loki's ruler evaluates a group at an offset of its own within
the minute (not on the minute, as vmalert does): its minutes are read as they are for sums over the window, and the
per-minute peaks and hourly buckets, which need minutes on the clock's grid, are scanned.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import yaml

from digest.backends.loki import LogqlWriter, counted_terms
from digest.backends.recorded import (
    COLUMN_LABEL,
    MINUTE,
    SIGN_LABEL,
    STAMP_LABEL,
    TERM_LABEL,
    Family,
    RecordingPlan,
    label_of,
)
from digest.backends.victorialogs import WHOLE_ANSWERS_ONLY, LogsqlWriter
from digest.checks.log_questions import EVERY_LINE, Filter
from digest.checks.logsql import field_name

EVALUATORS = ("vmalert", "loki")


def _logsql_columns(writer: LogsqlWriter, columns: tuple[tuple[str, Filter], ...]) -> str:
    return ", ".join(
        f"count() as {field_name(name)}"
        if column == EVERY_LINE
        else f"count() if ({writer.filter(column)}) as {field_name(name)}"
        for name, column in columns
    )


def vmalert_expression(writer: LogsqlWriter, family: Family, live: bool) -> str:
    """The family's LogsQL: its lines of the minute per group, in its columns, the groups' fields renamed."""
    time = "_time:1m" if live else "*"
    head = writer.head(time, family.scope, tuple(column for _, column in family.columns), family.by)
    names = [field_name(writer.name_of(one)) for one in family.by]
    by = f"by ({', '.join(names)}) " if names else ""
    query = f"{head} | stats {by}{_logsql_columns(writer, family.columns)}"
    renames = [
        f"{name} as {label_of(one)}" for name, one in zip(names, family.by, strict=True) if name != label_of(one)
    ]
    return query + (f" | rename {', '.join(renames)}" if renames else "")


def heartbeat_expression(writer: LogsqlWriter, plan: RecordingPlan, live: bool) -> str:
    """Every family's lines of the minute in one row (a column per family): zero is a row, not a missing one."""
    time = "_time:1m" if live else "*"
    scopes = tuple(family.scope for family in plan.families)
    head = writer.head(time, EVERY_LINE, scopes)
    columns = tuple((family.name, family.scope) for family in plan.families)
    return f"{head} | stats {_logsql_columns(writer, columns)}"


def vmalert_rules(plan: RecordingPlan, writer: LogsqlWriter, replay: bool = False) -> dict[str, Any]:
    """The vmalert rule file (one group, ``type: vlogs``, every minute) as a document to dump."""
    live = not replay
    labels = {STAMP_LABEL: "start" if replay else "end"}
    rules: list[dict[str, Any]] = [
        {"record": plan.record(family), "expr": vmalert_expression(writer, family, live), "labels": labels}
        for family in plan.families
    ]
    rules.append({"record": plan.heartbeat, "expr": heartbeat_expression(writer, plan, live), "labels": labels})
    return {
        "groups": [
            {
                "name": f"digest-log-counts-{plan.heartbeat.rsplit(':', 1)[-1]}",
                "type": "vlogs",
                "interval": f"{MINUTE}s",
                "params": {name: [value] for name, value in WHOLE_ANSWERS_ONLY.items()},
                "rules": rules,
            }
        ]
    }


def _relabelled(expression: str, labels: Mapping[str, str]) -> str:
    """``expression`` with each Loki label copied to the digest's label name (``label_replace``)."""
    for source, target in labels.items():
        if source != target:
            expression = f'label_replace({expression}, "{target}", "$1", "{source}", "(.*)")'
    return expression


def loki_rules(plan: RecordingPlan, writer: LogqlWriter) -> dict[str, Any]:
    """The Loki ruler's rule file: per family, column and term, the lines of the minute before the evaluation."""
    minute = timedelta(seconds=MINUTE)
    rules: list[dict[str, Any]] = []
    for family in plan.families:
        for name, _ in family.columns:
            lines = family.lines(name)
            aliases = writer.aliases(lines, family.by)
            renamed = {writer.label_of(one, aliases): label_of(one) for one in family.by}
            for number, (sign, term) in enumerate(counted_terms(lines), start=1):
                # [t - 60 s, t) rather than LogQL's (t - 60 s, t]: a line stamped on the slot's edge counts once.
                counted = writer.count_query(term, family.by, minute, "1ns")
                targets = ", ".join(label_of(one) for one in family.by)
                expression = _relabelled(counted, renamed)
                if any(source != target for source, target in renamed.items()):
                    expression = f"sum by ({targets}) ({expression})"
                rules.append(
                    {
                        "record": plan.record(family),
                        "expr": expression,
                        "labels": {
                            COLUMN_LABEL: name,
                            SIGN_LABEL: "+" if sign > 0 else "-",
                            # Two terms of one column write two series, not two samples of one.
                            TERM_LABEL: str(number),
                            STAMP_LABEL: "end",
                        },
                    }
                )
    for family in plan.families:
        counted = writer.count_query(family.scope, (), minute, "1ns")
        rules.append(
            {
                "record": plan.heartbeat,
                # No line at all in the minute is a zero, not a missing sample (which would read as the ruler down).
                "expr": f"({counted}) or vector(0)",
                "labels": {COLUMN_LABEL: family.name, SIGN_LABEL: "+", STAMP_LABEL: "end"},
            }
        )
    return {
        "groups": [
            {"name": f"digest-log-counts-{plan.heartbeat.rsplit(':', 1)[-1]}", "interval": f"{MINUTE}s", "rules": rules}
        ]
    }


class _PlainDumper(yaml.SafeDumper):
    """A YAML dumper that writes a repeated mapping out again instead of as an anchor and ``*id001`` aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(document: Mapping[str, Any]) -> str:
    """YAML as people write rule files: keys in order, long expressions on one line, no anchors."""
    return yaml.dump(dict(document), Dumper=_PlainDumper, sort_keys=False, width=10_000, allow_unicode=True)

"""conntrack: how full each node's connection-tracking table got, and whether it dropped connections.

Signal (node_exporter, queries.md §4): peak of ``node_nf_conntrack_entries / node_nf_conntrack_entries_limit`` per
node over the window (1-minute subquery, portable PromQL), the rise of ``node_nf_conntrack_stat_drop`` and
``node_nf_conntrack_stat_early_drop`` (kernel counters exported as gauges, read with `checks.promql.counted_rise`:
their first value is everything since boot, never a drop of the day; one family at a time, told apart by a label
until the sum, since the rise drops the metric name and two results of the same labels would be one), and the
minute of the worst node's peak from a range query.

Thresholds: a peak of 80 % costs one point — the alert threshold the 07-20 post-mortem added (ConntrackNearFull),
leaving head-room before the kernel starts refusing new flows; 95 % or any drop costs two, because at that point
new connections are already being refused or evicted (and a node that loses its API-server connection takes
unrelated pods with it, as on 07-20 at 04:46). 07-20 itself peaked at 72 %: shown, not penalised.

No conntrack series at all means the module is not loaded or the collector fails — UNKNOWN, never "0 %". Nodes
whose ``node_scrape_collector_success{collector="conntrack"}`` never reached 1 are named as blind, and so is a node
with entries but no limit series (or the reverse): its fill cannot be computed, and it must not drop out of the
ranking unnoticed. Coverage needs both series on every node, for the whole window.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from . import coverage
from .contract import (
    Finding,
    Input,
    Look,
    Need,
    Offender,
    Quantity,
    SourceError,
    Sources,
    Status,
    Unit,
    Window,
    fmt_int,
    fmt_percent,
    grade,
    local_time,
    unknown,
)
from .nodes import NODE_NAMES_INPUT, node_names
from .promql import counted_rise, open_range, quote

NAME = "conntrack"

# What this check reads, for `digest doctor` (the queries below are what it sends).
INPUTS: tuple[Input, ...] = (
    Input("series", "node_nf_conntrack_entries", "entries per node", fix="node_exporter's conntrack collector"),
    Input("series", "node_nf_conntrack_entries_limit", "the table's size", fix="node_exporter's conntrack collector"),
    Input(
        "series",
        "node_nf_conntrack_stat_drop",
        "drops",
        required=False,
        fix="a node_exporter with the conntrack stat counters",
    ),
    Input(
        "series",
        "node_nf_conntrack_stat_early_drop",
        "early drops",
        required=False,
        fix="a node_exporter with the conntrack stat counters",
    ),
    Input(
        "series",
        "node_scrape_collector_success",
        "nodes where the collector fails",
        required=False,
        fix="node_exporter's own metrics",
    ),
    NODE_NAMES_INPUT,
)


def fill_query(matchers: str) -> str:
    """The conntrack table's fill per node, to graph over the window (``matchers`` narrow it to one node)."""
    selector = f"{{{matchers}}}" if matchers else ""
    return (
        f"max by (instance) (node_nf_conntrack_entries{selector})"
        f" / max by (instance) (node_nf_conntrack_entries_limit{selector})"
    )


@dataclass(frozen=True)
class ConntrackPolicy:
    """Fill ratios and penalties."""

    enabled: bool = True
    warn_ratio: float = 0.80
    crit_ratio: float = 0.95
    warn_penalty: int = 1
    crit_penalty: int = 2
    top: int = 3


@dataclass(frozen=True)
class ConntrackCheck:
    """Peak conntrack fill and drops per node."""

    policy: ConntrackPolicy
    name: str = NAME

    def needs(self) -> tuple[Need, ...]:
        """The sources whose coverage this check's verdict depends on."""
        # Entries and limit, on every node: a node with one and not the other has no fill to grade.
        return (coverage.node_exporter_conntrack(), coverage.node_exporter_conntrack_limit())

    def queries(self, window: Window) -> dict[str, str]:
        """The PromQL this check sends, by purpose."""
        rng = window.promql_range()
        return {
            "peak": (
                "max by (instance) (max_over_time((node_nf_conntrack_entries / node_nf_conntrack_entries_limit)"
                f"[{open_range(window.seconds)}:1m]))"
            ),
            "entries": f"max by (instance) (max_over_time(node_nf_conntrack_entries[{rng}]))",
            "limit": f"max by (instance) (max_over_time(node_nf_conntrack_entries_limit[{rng}]))",
            # One family at a time: a function drops the metric name in Prometheus, and the two families' results
            # would then be two series of the same labels (an error); the label keeps them apart until the sum.
            "drops": (
                f"sum by (instance) ({counted_rise('node_nf_conntrack_stat_drop', window.seconds)} or label_replace("
                f"{counted_rise('node_nf_conntrack_stat_early_drop', window.seconds)}, "
                '"counter", "early_drop", "", ""))'
            ),
            "blind": (
                f'max by (instance) (max_over_time(node_scrape_collector_success{{collector="conntrack"}}[{rng}])) == 0'
            ),
        }

    async def __call__(self, sources: Sources, window: Window) -> Finding:
        queries = self.queries(window)
        try:
            (peak, entries, limit, drops, blind), named = await asyncio.gather(
                asyncio.gather(
                    *(
                        sources.metrics.instant(queries[key], window.end)
                        for key in ("peak", "entries", "limit", "drops", "blind")
                    )
                ),
                node_names(sources, window),  # targets scraped by IP are named by their node
            )
        except SourceError as exc:
            return unknown(NAME, "conntrack not checked: the metrics backend did not answer", str(exc))

        blind_nodes = sorted(named(sample.labels.get("instance", "?")) for sample in blind)
        if not peak:
            return unknown(
                NAME,
                "conntrack not checked: no node_nf_conntrack_* series in the window",
                "no conntrack series" + (f" (collector failing on {', '.join(blind_nodes)})" if blind_nodes else ""),
                hint="Is node_exporter scraped, and is the nf_conntrack module loaded on the nodes?",
            )

        entries_by = {sample.labels.get("instance", ""): sample.value for sample in entries}
        limit_by = {sample.labels.get("instance", ""): sample.value for sample in limit}
        drops_by = {sample.labels.get("instance", ""): round(sample.value) for sample in drops}
        ranked = sorted(peak, key=lambda sample: -sample.value)
        worst = ranked[0]
        worst_instance = worst.labels.get("instance", "")
        peak_at = await self._peak_time(sources, window, worst_instance)

        dropped = {instance: count for instance, count in drops_by.items() if count > 0}
        level = 0
        if worst.value >= self.policy.crit_ratio or dropped:
            level = 2
        elif worst.value >= self.policy.warn_ratio:
            level = 1
        status, penalty = grade(level, self.policy.warn_penalty, self.policy.crit_penalty)

        shown = ranked[: self.policy.top]
        offenders = [
            Offender(
                labels={"node": named(sample.labels.get("instance", "?"))},
                value=round(sample.value, 4),
                facts=_counts(sample.labels.get("instance", ""), entries=entries_by, limit=limit_by, drops=drops_by),
                look=Look(metrics=fill_query(f'instance="{quote(sample.labels.get("instance", ""))}"')),
            )
            for sample in shown
        ]
        at = f" at {peak_at}" if peak_at else ""
        summary = (
            f"peak {fmt_percent(worst.value)} on {named(worst_instance)} "
            f"({fmt_int(entries_by.get(worst_instance, 0))} / {fmt_int(limit_by.get(worst_instance, 0))}){at}"
        )
        if dropped:
            summary += "; " + ", ".join(
                f"{fmt_int(count)} dropped on {named(instance)}" for instance, count in sorted(dropped.items())
            )
        elif drops:
            summary += ", no drops"
        else:
            # Older node_exporters have no conntrack stat collector: silence there is not "no drops".
            summary += "; drops not visible (no node_nf_conntrack_stat_* series)"
        # The summary names the worst node; other nodes are worth a line only when they crossed a threshold too.
        evidence: list[str] = []
        for sample in shown[1:]:
            instance, fill = sample.labels.get("instance", ""), round(sample.value, 4)
            if fill < self.policy.warn_ratio and instance not in dropped:
                continue
            evidence.append(
                f"then {named(sample.labels.get('instance', '?'))}: peak {fmt_percent(fill)} "
                f"({fmt_int(entries_by.get(instance, 0))} / {fmt_int(limit_by.get(instance, 0))})"
                + (f", {fmt_int(dropped[instance])} drops" if instance in dropped else "")
            )
        errors: list[str] = []
        if blind_nodes:
            evidence.append(f"conntrack not visible on {', '.join(blind_nodes)}")
            errors.append(f"conntrack collector failing on {', '.join(blind_nodes)}")
        # A node's fill needs both its entries and its limit: with one of them missing the node is not in ``peak`` at
        # all, and would drop out of the ranking silently (a full table on the one node without a limit series).
        graded = {sample.labels.get("instance", "") for sample in peak}
        halves = [
            f"{named(instance)} has no {missing} series"
            for instance, missing in sorted(
                [(instance, "limit") for instance in entries_by if instance not in limit_by]
                + [(instance, "entries") for instance in limit_by if instance not in entries_by]
            )
            if instance not in graded
        ]
        if halves:
            evidence.append(f"fill not measured: {', '.join(halves)}")
            errors.append(f"conntrack fill not measured on {len(halves)} node(s): {', '.join(halves)}")
        if errors and status is Status.OK:
            # Healthy where we can see is not healthy everywhere.
            status = Status.UNKNOWN
        error = "; ".join(errors) or None
        hint = ""
        if status in (Status.WARN, Status.CRIT):
            hint = (
                f"On {named(worst_instance)}: `conntrack -S` and `conntrack -L | sort | uniq -c` by destination "
                "show who holds the entries; a reconnect loop or a missing keep-alive usually does. Raise "
                "nf_conntrack_max only after finding it."
            )
        return Finding(
            name=NAME,
            status=status,
            penalty=penalty,
            value=round(worst.value, 4),
            summary=summary,
            offenders=offenders,
            hint=hint,
            error=error,
            evidence=evidence,
            look=Look(metrics=fill_query("")),
        )

    @staticmethod
    def peak_time_query(instance: str) -> str:
        """The fill of one node, asked minute by minute to find when it peaked."""
        selector = quote(instance)
        return (
            f'node_nf_conntrack_entries{{instance="{selector}"}} / '
            f'node_nf_conntrack_entries_limit{{instance="{selector}"}}'
        )

    async def _peak_time(self, sources: Sources, window: Window, instance: str) -> str:
        """The minute the worst node peaked; empty when the range query fails (the peak itself is known)."""
        try:
            series = await sources.metrics.range(self.peak_time_query(instance), window.start, window.end, 60)
        except SourceError:
            return ""
        best: tuple[float, float] | None = None
        for one in series:
            for moment, value in one.points:
                if best is None or value > best[1]:
                    best = (moment, value)
        return local_time(best[0], window) if best else ""


def _counts(instance: str, **by_name: Mapping[str, float]) -> dict[str, Quantity]:
    """The counts measured on ``instance``, by name; a node a query did not answer for has no fact, not a zero."""
    return {
        name: Quantity(round(by_instance[instance]), Unit.COUNT)
        for name, by_instance in by_name.items()
        if instance in by_instance
    }

"""Nodes by name, not by the IP their exporter was scraped at.

node_exporter targets are often scraped by IP (kube-prometheus relabels ``instance`` to the pod's address), and a
reader knows ``wk-3``, not ``10.1.0.13:9100``.

kube-state-metrics' ``kube_node_info`` carries each node's ``internal_ip``; one instant query over the window maps
every IP the checks name to its node::

    max by (node, internal_ip) (last_over_time(kube_node_info[<window>]))

An IP that two nodes held in the window (a node replaced by one reusing its address) is named with both ("wk-4 or
wk-5 (10.1.0.14)"): which one a count belongs to is not known from the IP alone. Without kube-state-metrics, or when
the query fails, the name is the target without its port, as before.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from .contract import Input, SourceError, Sources, Window, node_name

# What `node_names` reads, for `digest doctor`: every check that names nodes by it declares this input.
NODE_NAMES_INPUT = Input(
    "series", "kube_node_info", "nodes by name", required=False, fix="kube-state-metrics' node metrics"
)


def addresses_query(window: Window) -> str:
    """PromQL: every node's internal IP in the window."""
    return f"max by (node, internal_ip) (last_over_time(kube_node_info[{window.promql_range()}]))"


@dataclass(frozen=True)
class NodeNames:
    """Target → node name, from the nodes' internal IPs (empty: names are the targets without their port)."""

    owners: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __call__(self, instance: str) -> str:
        bare = node_name(instance)
        owners = self.owners.get(bare, ())
        if not owners:
            return bare
        if len(owners) == 1:
            return owners[0]
        return f"{' or '.join(owners)} ({bare})"


async def node_names(sources: Sources, window: Window) -> NodeNames:
    """The names of the nodes behind the IPs of ``window``; never raises (a failure keeps the targets' names)."""
    try:
        samples = await sources.metrics.instant(addresses_query(window), window.end)
    except SourceError:
        return NodeNames()
    owners: dict[str, set[str]] = defaultdict(set)
    for sample in samples:
        address, node = sample.labels.get("internal_ip", ""), sample.labels.get("node", "")
        if address and node:
            owners[address].add(node)
    return NodeNames({address: tuple(sorted(nodes)) for address, nodes in owners.items()})

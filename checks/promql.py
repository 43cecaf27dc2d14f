"""Writing label values into PromQL safely, and narrowing an expensive query to a few containers.

Label values come from the cluster (pod names, instances, services) and are hostile input like any other: they are
written into double-quoted PromQL strings with backslashes and quotes escaped, and into regular expressions with the
metacharacters escaped that Go's ``regexp.QuoteMeta`` escapes (the backends are Go; an escaped letter would be an
error there, so the set is explicit rather than borrowed from Python's ``re``).

Narrowing: a subquery evaluated at one-minute steps over every container of a cluster costs the backend
~2,000 × 1,440 evaluations a day, although on a normal day only a handful of containers restart or come near their
memory limit. The checks ask a cheap raw rollup first (which containers restarted, which peaked), then run the
subquery with ``namespace``/``pod``/``container`` matchers for just those. The matchers are a cross product (a
superset of the pairs asked for), so a narrowed query answers exactly what the un-narrowed one would for those
containers; past ``MAX_NARROWED`` containers the gain is gone and the query is sent un-narrowed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# Beyond this many containers a narrowed query is no cheaper and its body grows: send the query un-narrowed.
MAX_NARROWED = 200

_RE2_META = frozenset("\\.+*?()|[]{}^$")


def quote(value: str) -> str:
    """``value`` as the inside of a double-quoted PromQL string."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def regex_literal(value: str) -> str:
    """An RE2 pattern that matches exactly ``value`` (to be wrapped in ``quote``)."""
    return "".join("\\" + char if char in _RE2_META else char for char in value)


def any_of(values: Iterable[str]) -> str:
    """The inside of a ``=~"…"`` matcher that matches exactly the given values, sorted for a stable query."""
    return quote("|".join(regex_literal(value) for value in sorted(set(values))))


ContainerKey = tuple[str, str, str]  # (namespace, pod, container)
CONTAINER_LABELS = ("namespace", "pod", "container")


def container_key(labels: Mapping[str, str]) -> ContainerKey:
    """The (namespace, pod, container) of a series' labels; a missing label is empty."""
    return labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", "")


def container_matchers(containers: Iterable[ContainerKey]) -> str:
    """``namespace=~"…", pod=~"…", container=~"…"`` covering ``containers`` (a superset of the exact pairs)."""
    keys = list(containers)
    if not keys:
        raise ValueError("container_matchers needs at least one container")
    namespaces, pods, names = zip(*keys, strict=True)
    return f'namespace=~"{any_of(namespaces)}", pod=~"{any_of(pods)}", container=~"{any_of(names)}"'


def restart_steps(restarts: str) -> str:
    """PromQL: how much ``restarts`` (a restart counter selector) rose since a minute ago, never negative.

    A pod's first minute has no sample a minute back; its first sample of the window then stands in, so that a crash
    loop's two restarts in its first minute (back-off 10 s, 20 s) are counted, and restarts before its first scrape
    are not (as Prometheus' ``increase()`` would not).
    """
    return f"clamp_min({restarts} - ({restarts} offset 1m or min_over_time({restarts}[1m])), 0)"


def with_matchers(selector: str, matchers: str) -> str:
    """``metric{a="b"}`` plus ``matchers`` → ``metric{a="b", matchers}``; a bare metric name gets braces."""
    if not matchers:
        return selector
    if selector.endswith("}"):
        inside = selector[selector.index("{") + 1 : -1].strip()
        return f"{selector[: selector.index('{')]}{{{inside + ', ' if inside else ''}{matchers}}}"
    return f"{selector}{{{matchers}}}"

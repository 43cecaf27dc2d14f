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


def restart_steps(restarts: str, by: str = "namespace, pod, container") -> str:
    """PromQL: how much ``restarts`` (a restart counter selector) rose since a minute ago, never negative, per ``by``.

    A pod's first minute has no sample a minute back; its first sample of the window then stands in, so that a crash
    loop's two restarts in its first minute (back-off 10 s, 20 s) are counted, and restarts before its first scrape
    are not (as Prometheus' ``increase()`` would not).

    The counter is reduced to one series per ``by`` group before its rise is taken.
    An HA pair of scrapers writes every series twice, a few seconds apart: the rise of each copy, reduced after, would
    count a restart twice whenever the copies saw it in different minutes. The highest value of a counter over its
    copies rises once.
    """
    one = f"max by ({by})"
    return f"clamp_min({one} ({restarts}) - ({one} ({restarts} offset 1m) or {one} (min_over_time({restarts}[1m]))), 0)"


def entity_matchers(labels: Mapping[str, str], keys: Iterable[str]) -> str:
    """``namespace="a", pod="b"``: exact matchers on ``keys`` of an offender's labels (empty values left out).

    What a link to one offender's series is narrowed to (`checks.contract.Look`).
    """
    return ", ".join(f'{key}="{quote(labels[key])}"' for key in keys if labels.get(key))


def with_matchers(selector: str, matchers: str) -> str:
    """``metric{a="b"}`` plus ``matchers`` → ``metric{a="b", matchers}``; a bare metric name gets braces."""
    if not matchers:
        return selector
    if selector.endswith("}"):
        inside = selector[selector.index("{") + 1 : -1].strip()
        return f"{selector[: selector.index('{')]}{{{inside + ', ' if inside else ''}{matchers}}}"
    return f"{selector}{{{matchers}}}"


def open_range(seconds: int) -> str:
    """A PromQL duration that reads the range ``(t - seconds, t]`` on every backend: ``86399999ms`` for a day.

    VictoriaMetrics (and Prometheus ≥ 3) leave a range open on the left; Prometheus 2 closes it, so that a sample
    (or a subquery step) stamped exactly ``seconds`` before the evaluation is read too: one more scrape in each
    one-scrape look-back (an endpoint emptied a scrape later), one more step in each window (the previous day's last
    minute). A millisecond less makes Prometheus 2 read exactly the left-open range; elsewhere it leaves out only a
    sample stamped in the range's first millisecond. Subquery steps are multiples of their step, whole seconds, so
    none falls there.
    """
    return f"{seconds * 1000 - 1}ms"


def step_read(selector: str, seconds: int) -> str:
    """PromQL: the last sample of ``selector`` in the ``seconds`` before each evaluation, nothing older.

    A bare selector reads back as far as the engine's look-back, which differs: 5 minutes in Prometheus, about one
    step inside a VictoriaMetrics subquery. A container that was OOM-killed would keep its last working set for five
    more minutes in Prometheus only. An explicit range makes both read the same scrape.
    """
    return f"last_over_time({selector}[{open_range(seconds)}])"


# How far back the previous value of a counter is looked for: beyond it, the counter counts as a new series.
_COUNTER_LOOK_BACK = "1h"


def counted_increase(selector: str, range_seconds: int) -> str:
    """PromQL: how many events a counter of events counted in ``(t - range_seconds, t]``, an exact integer.

    Prometheus' ``increase()`` extrapolates to the range's edges (4.0068 failed probes) and does not count the first
    value of a series born in the range (a probe counter appears at its first failure, at 1); VictoriaMetrics'
    counts it. This sums, minute by minute, the counter's rise since its previous value (looked for up to an hour
    back), counting a value with no previous one (a new series) or below it (a reset) from zero — what
    VictoriaMetrics' ``increase()`` answers, on both backends. (VictoriaMetrics alone ignores the first value of a
    new series when it is ten times its next step or more; this counts it.) So only for counters that are born at
    their first event, like the kubelet's failed probes — not for a kernel counter, whose first value is everything
    since boot. One subquery step per minute: for counters with few series, not for per-container traffic.
    """
    now = step_read(selector, 60)
    before = f"last_over_time({selector}[{_COUNTER_LOOK_BACK}] offset 1m)"
    # `+ 0` drops the metric name, as the subtraction does: Prometheus keeps it on `last_over_time`, and a series
    # read with its name at one step and without it at another would be two series of the same labels.
    return f"sum_over_time(((({now} - {before}) >= 0) or {now} + 0)[{open_range(range_seconds)}:1m])"


def counted_rise(selector: str, range_seconds: int, by: str = "instance") -> str:
    """PromQL: how much a cumulative counter rose in ``(t - range_seconds, t]``, never from a series' first value.

    For counters whose first value is history, not news: a kernel counter (OOM kills, conntrack drops) is at
    "everything since boot" when its series appears, and a series appears whenever an exporter's labels change (a
    node-exporter DaemonSet rollout gives every series a new ``pod``) or monitoring starts (a fresh install at 09:00).
    VictoriaMetrics' ``increase()`` counts such a first value from zero when it is under ten times the next step (8
    OOM kills since boot, at noon, on every node), Prometheus' does not: the same day read two ways. This sums, minute
    by minute, the rise since the series' previous value (looked for as far back as the range, at least an hour: a
    rise across a gap of any length inside the window is counted); a value with no previous one adds nothing, a value
    below it (a reboot) adds itself. The same integer on both backends, no extrapolation.

    The counter is reduced to one series per ``by`` group (the node) before its rise is taken: an HA pair of
    scrapers writing every series twice, a few seconds apart, would otherwise count a kill twice whenever the copies
    saw it in different minutes, and an exporter rollout's old and new series are one counter of one node.
    """
    one = f"max by ({by})"
    now = f"{one} ({step_read(selector, 60)})"
    # The previous value is looked for as far back as the window is long, not an hour: a series missing 10:00-16:00
    # that comes back one higher rose across its gap, and that rise is a kill of the window (kernel counters are one
    # series per node, so the longer look-back costs little).
    back = max(range_seconds, 3600)
    rise = f"({now} - {one} (last_over_time({selector}[{back}s] offset 1m)))"
    return f"sum_over_time((({rise} >= 0) or ({now} and ({rise} < 0)))[{open_range(range_seconds)}:1m])"

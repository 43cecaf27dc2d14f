"""The benchmark's report: measured results turned into the Markdown block of ``docs/benchmarks.md``.

``render`` assembles the block from one function per section (context, main table, replay tables, requests by
path, where the backends' time goes, checks-floor latencies, loading, goals), so each table can be read and changed
on its own. Nothing here measures or starts anything: the runner (``bench.runner``) measures and hands its results
over, together with the concurrency it measured with, and writes the block where it belongs.
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from bench.floor import Dependencies, checks_queries, window_of
from bench.generate import DAY, Cluster
from bench.pairs import NAMES
from digest.backends.loki import LogqlWriter
from digest.backends.victorialogs import LogsqlWriter
from digest.pipeline.policy import Policy

if TYPE_CHECKING:
    from bench.pairs import ServerLoad
    from bench.proxy import Counts
    from bench.runner import DayResult, Profile, ReplayResult, Run

RATIO_GOAL = 1.2
RSS_GOAL_MB = 150.0
REPLAY_GOAL = 1.2  # digest replay of N days against the floor of the same days' queries
FLAT_TOLERANCE = 0.10
# The digest's default that the state-file figures depend on, read from the product, not restated here.
TREND_DAYS = Policy().trends.days


# --------------------------------------------------------------------------------------------------- cells


def _mark(ok: bool) -> str:
    return "✅ met" if ok else "❌ missed"


def replay_met(replay: ReplayResult) -> bool:
    """The replay goal: within its bound of the floor, and every check checked in every replay.

    A replay that gave up on a check did less work than its floor, so a good ratio would mean nothing.
    """
    return replay.complete and replay.ratio <= REPLAY_GOAL


def _replay_mark(replay: ReplayResult) -> str:
    if not replay.complete:
        return "❌ missed (checks not checked)"
    return _mark(replay_met(replay))


def _not_checked_cell(counts: dict[str, int]) -> str:
    return ", ".join(f"`{name}` {count}" for name, count in sorted(counts.items()))


def _size(count: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


def _days(count: int) -> str:
    return f"{count} day" if count == 1 else f"{count} days"


def median_of(runs: Sequence[Run], attribute: str = "seconds") -> float:
    """The median of one attribute (wall time by default) over measured runs."""
    return statistics.median(float(getattr(run, attribute)) for run in runs)


def _seconds(value: float | None) -> str:
    """A latency, or a dash for a query that run did not send."""
    return "–" if value is None else f"{value:.3f} s"


def _cpu_cells(runs: Sequence[Run], backend_cpu: Sequence[tuple[float, float]]) -> str:
    vm = statistics.median(cpu[0] for cpu in backend_cpu)
    vl = statistics.median(cpu[1] for cpu in backend_cpu)
    return f"{median_of(runs, 'cpu_seconds'):.2f} / {vm:.2f} / {vl:.2f}"


def _naive_cells(result: DayResult) -> tuple[str, str, str]:
    if result.naive is None:
        failed = f"failed: {result.naive_error}"
        return failed, "-", "-"
    out = result.naive_out
    return (
        f"{result.naive.seconds:.1f} s",
        f"{result.naive.max_rss_mib:.0f} MiB",
        f"{_size(float(str(out.get('bytes', 0))))} / {int(str(out.get('records', 0))):,}",
    )


# --------------------------------------------------------------------------------------------------- goals


def goals(
    small: DayResult,
    big: DayResult,
    replays: Sequence[ReplayResult],
    every_day: Sequence[DayResult] = (),
) -> dict[str, bool]:
    """Each goal of the brief and whether this run met it (``small``/``big``: the detailed pair's days)."""
    rss_ok = max(small.max_rss, big.max_rss) * 2**20 / 1e6 <= RSS_GOAL_MB
    flat = big.max_rss <= small.max_rss * (1 + FLAT_TOLERANCE)
    counted = [*every_day] or [small, big]
    met = {
        f"ratio ≤ {RATIO_GOAL}× (small)": small.ratio <= RATIO_GOAL,
        f"ratio ≤ {RATIO_GOAL}× (big)": big.ratio <= RATIO_GOAL,
        f"peak RSS ≤ {RSS_GOAL_MB:.0f} MB and flat": rss_ok and flat,
        "requests per digest independent of size": (small.vm_counts.by_path, small.vl_counts.by_path)
        == (big.vm_counts.by_path, big.vl_counts.by_path),
        "digest counts every error line": all(
            result.counted_errors == result.facts.flood_error_lines for result in counted
        ),
    }
    for replay in replays:
        met[f"replay ≤ {REPLAY_GOAL}× its floor ({replay.pair.short}, {_days(len(replay.days))})"] = replay_met(replay)
    return met


# --------------------------------------------------------------------------------------------------- where time goes

_MOMENT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")


_MATCHERS = re.compile(r'namespace=~"(?:[^"\\]|\\.)*", pod=~"(?:[^"\\]|\\.)*", container=~"(?:[^"\\]|\\.)*"')


def _normalized(query: str) -> str:
    """A query with its window's timestamps and narrowing matchers blanked: one check's query on any day alike."""
    return _MATCHERS.sub("…", _MOMENT.sub("…", query))


def query_labels(day: dt.date, cluster: Cluster) -> dict[str, str]:
    """Normalized query text → the check purpose that produces it (``oom_kills.kills``…).

    Conntrack's peak-minute query is labelled with what the generator knows: the flooding pod's node peaks.
    """
    instance = f"{cluster.pods[cluster.flood].node}:9100"
    some = (("n", "p", "c"),)
    labels: dict[str, str] = {}
    for writer in (LogsqlWriter(), LogqlWriter()):
        full = checks_queries(window_of(day), Dependencies(conntrack_instance=instance), writer=writer)
        narrowed = checks_queries(
            window_of(day),
            Dependencies(conntrack_instance=instance, restarted=some, memory_candidates=some),
            writer=writer,
        )
        labels.update({_normalized(query.form["query"]): query.purpose for query in (*full, *narrowed)})
    return labels


def backend_time(counts: Sequence[Counts], labels: dict[str, str]) -> list[tuple[str, int, float]]:
    """``(query, requests, summed latency)`` over recorded requests, the costliest first."""
    totals: dict[str, tuple[int, float]] = {}
    for one in counts:
        for request in one.recorded:
            text = parse_qs(request.body.decode(errors="replace")).get("query", [request.target])[0]
            key = _normalized(text)
            label = labels.get(key) or f"`{key[:60]}…`"
            number, seconds = totals.get(label, (0, 0.0))
            totals[label] = (number + 1, seconds + request.seconds)
    return sorted(((label, n, sec) for label, (n, sec) in totals.items()), key=lambda row: -row[2])


def _time_table(rows: list[tuple[str, int, float]], top: int = 8) -> list[str]:
    total = sum(seconds for _, _, seconds in rows) or 1e-9
    lines = ["| query (check.purpose) | requests | summed latency | share |", "|---|---|---|---|"]
    for label, number, seconds in rows[:top]:
        lines.append(
            f"| {label if label.startswith('`') else f'`{label}`'} | {number} | {seconds:.1f} s | "
            f"{100 * seconds / total:.0f} % |"
        )
    rest = rows[top:]
    if rest:
        lines.append(
            f"| {len(rest)} other queries | {sum(n for _, n, _ in rest)} | {sum(s for _, _, s in rest):.1f} s | "
            f"{100 * sum(s for _, _, s in rest) / total:.0f} % |"
        )
    return lines


# --------------------------------------------------------------------------------------------------- sections


def _context_lines(profile: Profile, info: dict[str, str], command: str, others: str, cluster_tail: str) -> list[str]:
    """When, on what machine and on which cluster the run measured; ``others``: the CPU other processes used."""
    return [
        f"Run of {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, profile `{profile.name}`, command `{command}` "
        f"(from the repository root), product at {info.get('revision')}.",
        "",
        f"Machine: {info.get('cores')} cores ({info.get('cpu', '?')}), {info.get('ram', '?')} RAM, "
        f"{info.get('os', '?')} (Linux {info.get('kernel')}), Python {info.get('python')}; "
        f"VictoriaMetrics {info.get('victoria-metrics')}; VictoriaLogs {info.get('victoria-logs')}; "
        f"{info.get('prometheus', 'Prometheus ?')}; {info.get('loki', 'Loki ?')}. Other processes used {others}.",
        "",
        f"Cluster: {profile.shape.pods:,} pods in {profile.shape.namespaces} namespaces on {profile.shape.nodes} nodes "
        f"(+ the flooding pod and the gateway), metrics every {profile.shape.step_s} s"
        + (" with cAdvisor memory" if profile.shape.cadvisor else "")
        + cluster_tail,
        "",
    ]


def _cell(result: DayResult | None, text: Callable[[DayResult], str]) -> str:
    return "not measured" if result is None else text(result)


def _error_question(result: DayResult) -> str:
    """The slowest request of the ``error_lines`` question inside the checks-floor batch, median."""
    medians = result.floor_query_medians()
    asked = [seconds for name, seconds in medians.items() if name.startswith("error_lines.")]
    return f"{max(asked):.2f} s" if asked else "–"


def _pair_rows(day: str, results: Sequence[DayResult | None]) -> list[str]:
    def row(title: str, text: Callable[[DayResult], str]) -> str:
        return f"| {day}: {title} | " + " | ".join(_cell(result, text) for result in results) + " |"

    return [
        row("`digest run`, median", lambda r: f"{r.digest_median:.2f} s"),
        row("checks floor (queries; time)", lambda r: f"{r.checks_query_count}; {r.floor_median:.2f} s"),
        row("**ratio digest / checks floor**", lambda r: f"**{r.ratio:.2f}×**"),
        row(
            "recorded floor; ratio", lambda r: f"{r.recorded_median:.2f} s; {r.digest_median / r.recorded_median:.2f}×"
        ),
        row("`error_lines` question in the floor (slowest request)", _error_question),
        row(
            "server CPU seconds per digest: metrics / logs",
            lambda r: (
                f"{statistics.median(c[0] for c in r.backend_cpu):.2f} / "
                f"{statistics.median(c[1] for c in r.backend_cpu):.2f}"
            ),
        ),
        row(
            "server RSS after loading: metrics / logs",
            lambda r: f"{r.backend_rss[0]:,.0f} / {r.backend_rss[1]:,.0f} MiB",
        ),
        row("`digest run` peak RSS", lambda r: f"{r.max_rss:.0f} MiB"),
        row("requests per digest (metrics + logs)", lambda r: f"{r.vm_counts.requests} + {r.vl_counts.requests}"),
        row(
            "verdict; flood error lines counted / generated",
            lambda r: f"{r.headline.split(' · ')[0]}; {r.counted_errors:,.0f} / {r.facts.flood_error_lines:,}",
        ),
    ]


def _pairs_lines(small: Sequence[DayResult], big: Sequence[DayResult], replays: Sequence[ReplayResult]) -> list[str]:
    """The backend pairs side by side: both days and the replay, one column per pair."""
    pairs = [result.pair for result in small]
    big_of = {result.pair: result for result in big}
    replay_of = {replay.pair: replay for replay in replays}
    lines = [
        "The backend pairs side by side (the same generated data in each; every digest checked against the facts):",
        "",
        "| measure | " + " | ".join(pair.label for pair in pairs) + " |",
        "|---|" + "---|" * len(pairs),
        *_pair_rows(f"small ({small[0].label.split('(')[1].rstrip(')')})", small),
        *_pair_rows(
            f"big ({big[0].label.split('(')[1].rstrip(')')})" if big else "big", [big_of.get(pair) for pair in pairs]
        ),
    ]
    if replays:

        def replay_row(title: str, text: Callable[[ReplayResult], str]) -> str:
            cells = [text(replay_of[pair]) if pair in replay_of else "not measured" for pair in pairs]
            return f"| replay: {title} | " + " | ".join(cells) + " |"

        lines += [
            replay_row("days replayed", lambda r: str(len(r.days))),
            replay_row("`digest replay`, median", lambda r: f"{r.replay_median:.2f} s"),
            replay_row("checks floor of its windows", lambda r: f"{r.floor_median:.2f} s"),
            replay_row(f"**ratio** (goal ≤ {REPLAY_GOAL}×)", lambda r: f"**{r.ratio:.2f}×** {_replay_mark(r)}"),
            replay_row(
                "recorded floor; ratio",
                lambda r: f"{r.recorded_median:.2f} s; {r.replay_median / r.recorded_median:.2f}×",
            ),
        ]
    return [*lines, ""]


def _main_table(small: DayResult, big: DayResult, met: dict[str, bool], floor_concurrency: int) -> list[str]:
    """The small and big day side by side: wall times, floors, CPU, peak RSS, the naive baseline, requests."""
    n = len(small.digest_runs)
    naive_small, naive_big = _naive_cells(small), _naive_cells(big)
    rows = [
        (
            f"`digest run` wall time, median of {n}",
            f"{small.digest_median:.2f} s",
            f"{big.digest_median:.2f} s",
            "",
            "",
        ),
        (
            f"checks floor: the checks' {small.checks_query_count} queries sent directly, concurrently "
            f"(≤ {floor_concurrency} per backend)",
            f"{small.floor_median:.2f} s",
            f"{big.floor_median:.2f} s",
            "",
            "",
        ),
        (
            "**ratio digest / checks floor**",
            f"**{small.ratio:.2f}×**",
            f"**{big.ratio:.2f}×**",
            f"≤ {RATIO_GOAL}×",
            _mark(met[f"ratio ≤ {RATIO_GOAL}× (small)"] and met[f"ratio ≤ {RATIO_GOAL}× (big)"]),
        ),
        (
            "recorded floor: the digest's own requests replayed concurrently; ratio",
            f"{small.recorded_median:.2f} s; {small.digest_median / small.recorded_median:.2f}×",
            f"{big.recorded_median:.2f} s; {big.digest_median / big.recorded_median:.2f}×",
            "",
            "",
        ),
        (
            "digest computed inside a running process (start-up paid once, as in `digest serve`; no state file), "
            "median; ratio to the checks floor",
            f"{small.warm_median:.2f} s; {small.warm_median / small.floor_median:.2f}×",
            f"{big.warm_median:.2f} s; {big.warm_median / big.floor_median:.2f}×",
            "",
            "",
        ),
        (
            "`digest run` CPU time (user + system), median",
            f"{median_of(small.digest_runs, 'cpu_seconds'):.2f} s",
            f"{median_of(big.digest_runs, 'cpu_seconds'):.2f} s",
            "",
            "",
        ),
        (
            "`digest --help`: interpreter start-up + imports, no query, median",
            f"{median_of(small.startup):.2f} s",
            f"{median_of(big.startup):.2f} s",
            "",
            "",
        ),
        (
            "**`digest run` peak RSS** (max of the runs)",
            f"**{small.max_rss:.0f} MiB**",
            f"**{big.max_rss:.0f} MiB**",
            f"≤ {RSS_GOAL_MB:.0f} MB, flat",
            _mark(met[f"peak RSS ≤ {RSS_GOAL_MB:.0f} MB and flat"]),
        ),
        ("naive: download the error lines, count in Python — wall time", naive_small[0], naive_big[0], "contrast", ""),
        ("naive: peak RSS", naive_small[1], naive_big[1], "", ""),
        ("naive: bytes downloaded / records parsed", naive_small[2], naive_big[2], "", ""),
        (
            f"**backend requests per digest** ({NAMES[small.pair.metrics]} + {NAMES[small.pair.logs]})",
            f"**{small.vm_counts.requests} + {small.vl_counts.requests}**",
            f"**{big.vm_counts.requests} + {big.vl_counts.requests}**",
            "constant",
            _mark(met["requests per digest independent of size"]),
        ),
        (
            "bytes the digest sent / received",
            f"{_size(small.vm_counts.bytes_up + small.vl_counts.bytes_up)} / "
            f"{_size(small.vm_counts.bytes_down + small.vl_counts.bytes_down)}",
            f"{_size(big.vm_counts.bytes_up + big.vl_counts.bytes_up)} / "
            f"{_size(big.vm_counts.bytes_down + big.vl_counts.bytes_down)}",
            "",
            "",
        ),
        (
            "digest's verdict; flood error lines counted / generated",
            f"{small.headline.split(' · ')[0]}; {small.counted_errors:,.0f} / {small.facts.flood_error_lines:,}",
            f"{big.headline.split(' · ')[0]}; {big.counted_errors:,.0f} / {big.facts.flood_error_lines:,}",
            "exact",
            _mark(met["digest counts every error line"]),
        ),
    ]
    head = [f"{r.label}: {r.facts.log_lines:,} records, {r.facts.error_lines:,} error lines" for r in (small, big)]
    return [
        f"| measure | {head[0]} | {head[1]} | goal | |",
        "|---|---|---|---|---|",
        *(f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows),
        "",
    ]


def _unknown_lines(small: DayResult, big: DayResult) -> list[str]:
    """The checks that answered UNKNOWN on either day, and why."""
    lines: list[str] = []
    for result in (small, big):
        if result.unknown:
            lines.append(
                f"UNKNOWN checks on the {result.label.split()[0]} day (series the generator does not write): "
                + "; ".join(f"`{name}` ({reason[:90]})" for name, reason in sorted(result.unknown.items()))
                + "."
            )
            lines.append("")
    return lines


def _replay_lines(replays: Sequence[ReplayResult], replay_concurrency: int, floor_concurrency: int) -> list[str]:
    """The replay table: per pair, the replay's wall time against the floor of the same windows' queries."""
    first = replays[0]
    per_day = first.load.facts[0]
    k = len(first.many)
    lines = [
        f"Replay dataset: {len(first.load.facts)} days {first.load.facts[0].day} … {first.load.facts[-1].day}, each "
        f"{per_day.log_lines:,} records ({per_day.error_lines:,} error lines), the same cluster and metrics; "
        "Prometheus and Loki hold its last days only (backfilling and pushing are slow), so their pairs replay those.",
        "",
        f"| pair | `digest replay --concurrency {replay_concurrency}`, median of {k} | checks floor of its windows "
        f"(≤ {floor_concurrency} per backend): queries; time | **ratio** | recorded floor; ratio | CPU seconds: "
        "digest / metrics / logs server | requests (metrics + logs) | goal | |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for replay in replays:
        days = replay.days
        lines.append(
            f"| {replay.pair.label}: `--from {days[0]} --to {days[-1]}` ({_days(len(days))}) | "
            f"{replay.replay_median:.2f} s | {replay.floor_query_count} in {replay.floor_windows} windows; "
            f"{replay.floor_median:.2f} s | **{replay.ratio:.2f}×** | {replay.recorded_median:.2f} s; "
            f"{replay.replay_median / replay.recorded_median:.2f}× | "
            f"{_cpu_cells(replay.many, replay.many_backend_cpu)} | "
            f"{replay.many_counts[0].requests} + {replay.many_counts[1].requests} | ≤ {REPLAY_GOAL}× | "
            f"{_replay_mark(replay)} |"
        )
    not_checked = {replay.pair.short: _not_checked_cell(replay.not_checked) for replay in replays if replay.not_checked}
    timed_not_checked = {
        replay.pair.short: "; ".join(
            f"run {index} {_not_checked_cell(counts)}"
            for index, counts in enumerate(replay.timed_not_checked, 1)
            if counts
        )
        for replay in replays
        if any(replay.timed_not_checked)
    }
    lines += [
        "",
        "The checks floor of a replay: each replayed day's checks-floor queries plus the graded checks of the "
        f"{TREND_DAYS} days before the first (what the trends ask), all sent at once, at most {floor_concurrency} in "
        "flight per backend — the bound the replay's shared clients hold whatever the days in progress. The recorded "
        "floor: the proxied replay's own requests, replayed the same way.",
        "",
        "Checks not checked in the proxied replays (days): "
        + ("; ".join(f"{pair}: {names}" for pair, names in not_checked.items()) or "none")
        + "; in the timed ones: "
        + (" — ".join(f"{pair}: {runs}" for pair, runs in timed_not_checked.items()) or "none")
        + ".",
        "",
    ]
    detailed = next((replay for replay in replays if replay.run_without_store), None)
    if detailed is not None:
        lines += _store_lines(detailed)
    return lines


def _store_lines(replay: ReplayResult) -> list[str]:
    """The state-file table: ``digest run`` of the last replayed day without and with its past days stored."""
    if replay.run_day is None or not replay.run_without_store:
        return []
    day, k = replay.run_day, len(replay.run_without_store)
    with_data = sum(1 for other in replay.days if 1 <= (day - other).days <= TREND_DAYS)
    without, stored = replay.run_without_store_counts, replay.run_with_store_counts
    return [
        f"The state file's trend history, on the replay dataset ({with_data} of the {TREND_DAYS} days before {day} "
        f"have data): `digest run --date {day}`, median of {k}.",
        "",
        "| `digest run` | wall time | CPU time of digest | requests (metrics + logs) |",
        "|---|---|---|---|",
        f"| without a state file: the {TREND_DAYS} past days queried again | "
        f"{median_of(replay.run_without_store):.2f} s | {median_of(replay.run_without_store, 'cpu_seconds'):.2f} s | "
        f"{without[0].requests} + {without[1].requests} |",
        "| `DIGEST_STATE_PATH` set, past days stored by an earlier digest | "
        f"{median_of(replay.run_with_store):.2f} s | "
        f"{median_of(replay.run_with_store, 'cpu_seconds'):.2f} s | {stored[0].requests} + {stored[1].requests} |",
        "",
    ]


def _path_lines(small: Sequence[DayResult], big: Sequence[DayResult]) -> list[str]:
    """Requests by backend path of one ``digest run`` per pair, small day / big day (– when not measured)."""
    lines = ["Requests by path (one `digest run`, small / big):", ""]
    big_of = {result.pair: result for result in big}
    done: set[str] = set()
    for result in small:
        other = big_of.get(result.pair)
        for name, here, there in (
            (NAMES[result.pair.metrics], result.vm_counts, other.vm_counts if other else None),
            (NAMES[result.pair.logs], result.vl_counts, other.vl_counts if other else None),
        ):
            if name in done:
                continue
            done.add(name)
            paths = sorted(set(here.by_path) | set(there.by_path if there else ()))
            lines.append(
                f"* {name}: "
                + ", ".join(f"`{p}` {here.by_path[p]} / {there.by_path[p] if there else '–'}" for p in paths)
            )
    return lines


def _backend_time_lines(cluster: Cluster, big: DayResult, replay: ReplayResult | None) -> list[str]:
    """Where the backends' time goes, by check purpose: one big-day ``digest run``, and the proxied replay."""
    labels = query_labels(DAY, cluster)
    lines = [
        "",
        f"Where the backends' time goes in one `digest run` on the big day ({big.pair.label}; sum of request latencies "
        "seen by the counting proxy; the requests overlap, so the sum exceeds the wall time):",
        "",
        *_time_table(backend_time([big.vm_counts, big.vl_counts], labels)),
    ]
    if replay is not None:
        lines += [
            "",
            f"The same for the proxied `digest replay` of {len(replay.days)} days ({replay.pair.label}):",
            "",
            *_time_table(backend_time(list(replay.many_counts), labels)),
        ]
    return lines


def _floor_latency_lines(small: DayResult, big: DayResult) -> list[str]:
    """The checks floor's slowest queries, median latency inside the concurrent batch, small / big."""
    small_q, big_q = small.floor_query_medians(), big.floor_query_medians()
    slowest = sorted(big_q, key=lambda name: -big_q[name])[:12]
    return [
        "",
        f"Checks floor, median latency of the {len(slowest)} slowest of its {len(big_q)} queries inside the "
        "concurrent batch:",
        "",
        "| query | small | big |",
        "|---|---|---|",
        *(f"| `{name}` | {_seconds(small_q.get(name))} | {_seconds(big_q.get(name))} |" for name in slowest),
        "",
    ]


def _loading_lines(small: DayResult, big: DayResult, replay: ReplayResult | None) -> list[str]:
    """How long loading each dataset took (context, not a measure)."""
    lines = ["Loading (not part of any measure):", ""]

    def others(loads: Sequence[ServerLoad]) -> str:
        return "".join(
            f"; {NAMES[load.backend]}: "
            + (f"{load.items:,} samples" if load.backend == "prometheus" else f"{load.items:,} records")
            + f" of {load.days} day(s) in {load.seconds:.0f} s"
            for load in loads
        )

    for result in (small, big):
        r = result.load
        lines.append(
            f"* {result.label}: VictoriaMetrics: {r.samples:,} samples in {r.metrics_seconds:.0f} s; VictoriaLogs: "
            f"{r.log_records:,} records ({_size(r.log_bytes)}) in {r.logs_seconds:.0f} s "
            f"({r.log_records / max(r.logs_seconds, 1e-9):,.0f}/s){others(result.server_loads)}; {result.settled}"
        )
    if replay is not None:
        r = replay.load
        lines.append(
            f"* replay: VictoriaMetrics: {r.samples:,} samples in {r.metrics_seconds:.0f} s; VictoriaLogs: "
            f"{r.log_records:,} records in {r.logs_seconds:.0f} s{others(replay.server_loads)}"
        )
    return lines


def render_replays(
    profile: Profile,
    replays: Sequence[ReplayResult],
    info: dict[str, str],
    command: str,
    *,
    floor_concurrency: int,
    replay_concurrency: int,
) -> str:
    """``bench/run --replay-only``: the replays against their floors, with the run's context and the replay goals."""
    others = f"{replays[0].other_cores:.2f} cores on average during the replays"
    lines = _context_lines(profile, info, command, others, ".")
    lines += _replay_lines(replays, replay_concurrency, floor_concurrency)
    met = {
        f"replay ≤ {REPLAY_GOAL}× its floor ({replay.pair.short}, {_days(len(replay.days))})": replay_met(replay)
        for replay in replays
    }
    lines += _goal_lines(met, info)
    return "\n".join(lines)


def _goal_lines(met: dict[str, bool], info: dict[str, str]) -> list[str]:
    """Every goal met or missed, and a warning when the product changed while the run was measuring."""
    lines = ["", "Goals: " + "; ".join(f"{name} {_mark(ok)}" for name, ok in met.items()) + ".", ""]
    if info.get("fingerprint_start") != info.get("fingerprint_end"):
        lines += [
            "**Warning:** the product's source files changed while this run was measuring (fingerprint "
            f"{info.get('fingerprint_start')} → {info.get('fingerprint_end')}); some measures straddle two versions.",
            "",
        ]
    return lines


# --------------------------------------------------------------------------------------------------- the block


def render(
    profile: Profile,
    cluster: Cluster,
    results: tuple[Sequence[DayResult], Sequence[DayResult], Sequence[ReplayResult]],
    info: dict[str, str],
    command: str,
    *,
    floor_concurrency: int,
    replay_concurrency: int,
) -> str:
    """The results as Markdown: context, the pairs side by side, the detailed pair's tables, replays, goals.

    ``results``: every pair's small-day and big-day results and replays. The detailed tables are those of the pair
    that got the warm digests and the naive baseline (the runner's reference pair). ``floor_concurrency`` and
    ``replay_concurrency`` are what the runner measured with: the tables state them.
    """
    small_all, big_all, replays = results
    big = next((result for result in big_all if result.warm_seconds), big_all[0])
    small = next(result for result in small_all if result.pair == big.pair)
    replay = next((one for one in replays if one.pair == big.pair), replays[0] if replays else None)
    met = goals(small, big, replays, [*small_all, *big_all])
    others = f"{small.other_cores:.2f} / {big.other_cores:.2f} cores on average during the small / big measurements" + (
        f" and {replay.other_cores:.2f} during the replays" if replay else ""
    )
    tail = (
        f"; day {DAY} (UTC). Median of {len(small.digest_runs)} interleaved runs each; every digest checked against "
        "the generated facts."
    )
    lines = _context_lines(profile, info, command, others, tail)
    lines += _pairs_lines(small_all, big_all, replays)
    lines += [f"The detailed measures of {big.pair.label}:", ""]
    lines += _main_table(small, big, met, floor_concurrency)
    lines += _unknown_lines(small, big)
    if replays:
        lines += _replay_lines(replays, replay_concurrency, floor_concurrency)
    lines += _path_lines(small_all, big_all)
    lines += _backend_time_lines(cluster, big, replay)
    lines += _floor_latency_lines(small, big)
    lines += _loading_lines(small, big, replay)
    lines += _goal_lines(met, info)
    return "\n".join(lines)

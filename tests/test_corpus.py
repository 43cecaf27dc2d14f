"""Pure unit tests of the incident corpus: the generated series and log records, checked against the write-ups."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pytest

from digest.testbed.corpus import DAYS, day
from digest.testbed.corpus.homelab import HomelabDay
from digest.testbed.corpus.model import CorpusDay, Expected, Series
from digest.testbed.corpus.reconnect_storm import ReconnectStorm

UTC = dt.UTC
STEP_MS = 30_000
SAFE = "bcdfghjklmnpqrstvwxz2456789"
DEPLOYMENT_POD = re.compile(rf"^(?P<workload>[a-z0-9-]+)-[{SAFE}]{{10}}-[{SAFE}]{{5}}$")
DAEMONSET_POD = re.compile(rf"^(?P<workload>vector)-[{SAFE}]{{5}}$")
STATEFULSET_POD = re.compile(r"^(?P<workload>victoria-metrics)-\d+$")

# Envoy Gateway's default JSON access-log keys: shared/fixtures/envoy_gateway_default_json_accesslog_fields.go.txt
# (envoyproxy/gateway internal/xds/translator/accesslog.go, Apache-2.0), the same 24 keys as the fixture record.
ENVOY_KEYS = frozenset(
    {
        "start_time",
        "method",
        "x-envoy-origin-path",
        "protocol",
        "response_code",
        "response_flags",
        "response_code_details",
        "connection_termination_details",
        "upstream_transport_failure_reason",
        "bytes_received",
        "bytes_sent",
        "duration",
        "x-envoy-upstream-service-time",
        "x-forwarded-for",
        "user-agent",
        "x-request-id",
        ":authority",
        "upstream_host",
        "upstream_cluster",
        "upstream_local_address",
        "downstream_local_address",
        "downstream_remote_address",
        "requested_server_name",
        "route_name",
    }
)
VECTOR_KEYS = {"file", "kubernetes", "message", "source_type", "stream", "timestamp"}
KUBERNETES_KEYS = {"pod_namespace", "pod_name", "container_name", "pod_node_name", "pod_uid"}

ERROR_LEVELS = {"error", "err", "fatal", "critical", "panic"}
ERROR_WORD = re.compile(r"\berror\b", re.IGNORECASE)
MAYBE_ERROR = re.compile(rb'"level"|\\u|error', re.IGNORECASE)

# Series that exist for the whole span, series that may have gaps (a label flips and flips back).
FULL_SPAN = {
    "up",
    "node_nf_conntrack_entries",
    "node_nf_conntrack_entries_limit",
    "node_nf_conntrack_stat_drop",
    "node_nf_conntrack_stat_early_drop",
    "node_scrape_collector_success",
    "node_vmstat_oom_kill",
    "kube_endpointslice_info",
    "kube_endpointslice_labels",
    "kube_deployment_status_replicas_unavailable",
    "istio_requests_total",
}
MAY_HAVE_GAPS = {"kube_endpointslice_endpoints", "ALERTS", "ALERTS_FOR_STATE"}
CUMULATIVE = {"node_nf_conntrack_stat_drop", "node_nf_conntrack_stat_early_drop", "node_vmstat_oom_kill"}


def is_error(record: dict[str, Any]) -> bool:
    """Apply the digest's default error-line rule, written independently of the generator."""
    if "level" in record:
        return str(record["level"]).lower() in ERROR_LEVELS
    return ERROR_WORD.search(str(record["message"])) is not None


def workload_of(pod: str) -> str:
    """Strip the controller suffixes from a pod name."""
    for pattern in (DEPLOYMENT_POD, DAEMONSET_POD, STATEFULSET_POD):
        m = pattern.match(pod)
        if m:
            return m.group("workload")
    raise AssertionError(f"pod name {pod!r} has no Deployment/DaemonSet/StatefulSet shape")


def at(d: CorpusDay, hhmmss: str) -> int:
    """Return unix seconds of a time of day on the corpus day."""
    h, m, s = (int(x) for x in hhmmss.split(":"))
    return int(dt.datetime(d.date.year, d.date.month, d.date.day, h, m, s, tzinfo=UTC).timestamp())


def window(d: CorpusDay) -> tuple[int, int]:
    """Return the day's window in unix seconds."""
    start = at(d, "00:00:00")
    return start, start + 86_400


@dataclass
class Scan:
    """What a full pass over a day's log records found, counted with the rule above."""

    records: int = 0
    chunks: list[int] = field(default_factory=list)
    lines: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    envoy: Counter[tuple[str, int, str]] = field(default_factory=Counter)
    envoy_details: Counter[tuple[str, str]] = field(default_factory=Counter)
    samples: list[dict[str, Any]] = field(default_factory=list)
    envoy_samples: list[dict[str, Any]] = field(default_factory=list)
    pods: set[str] = field(default_factory=set)


# The outcome of an access-log record, read from its escaped JSON (keys in the order Envoy Gateway writes them).
ENVOY_OUTCOME = re.compile(
    rb'\\"response_code\\":(\d+),\\"response_code_details\\":\\"([^\\"]+)\\",'
    rb'\\"response_flags\\":\\"([^\\"]+)\\"'
)
ENVOY_CLUSTER = re.compile(rb'\\"upstream_cluster\\":\\"([^\\"]+)\\"')
ENVOY_RECORD = b'"container_name":"envoy"'


def _lines_with(chunk: bytes, needle: bytes) -> Iterator[bytes]:
    """Yield each record of ``chunk`` that contains ``needle`` (once per record)."""
    pos = chunk.find(needle)
    while pos != -1:
        start = chunk.rfind(b"\n", 0, pos) + 1
        end = chunk.find(b"\n", pos)
        yield chunk[start:end]
        pos = chunk.find(needle, end)


def scan(chunks: Iterable[bytes]) -> Scan:
    """Count every record of a stream by workload, by the error rule, and by gateway outcome.

    Records are grouped by everything before ``"source_type"`` (pod, level, message); each distinct group is
    parsed once. Access-log records are all distinct: their outcome is read from the escaped JSON, every flagged
    one and every 101st are parsed in full and checked against the rule (the generator never writes "error" in
    an access log; scanning every byte of ~1.4 KB records for it would double the cost of the suite).
    """
    out = Scan()
    groups: Counter[bytes] = Counter()
    outcomes: Counter[tuple[bytes, ...]] = Counter()
    for chunk in chunks:
        lines = chunk.split(b"\n")
        assert lines[-1] == b"", "every record ends with a newline"
        n = len(lines) - 1
        out.records += n
        out.chunks.append(n)
        out.samples.extend(json.loads(lines[i]) for i in range(0, n, 997))
        envoy = chunk.count(ENVOY_RECORD)
        for line in lines[:-1]:
            if ENVOY_RECORD not in line:
                groups[line[: line.rindex(b',"source_type"')]] += 1
        found = ENVOY_OUTCOME.findall(chunk)
        clusters = ENVOY_CLUSTER.findall(chunk)
        assert len(found) == len(clusters) == envoy, "one outcome per access-log record"
        outcomes.update((*f, c) for f, c in zip(found, clusters, strict=True))
        out.lines["envoy-gateway-system/envoy-default-eg-e41e7b31"] += envoy
        if envoy:
            out.envoy_samples.extend(json.loads(x) for x in lines[:-1:101] if ENVOY_RECORD in x)
            out.envoy_samples.extend(json.loads(x) for x in _lines_with(chunk, b'response_flags\\":\\"U'))
    for (code, details, flags, cluster), count in outcomes.items():
        out.envoy[(cluster.decode(), int(code), flags.decode())] += count
        out.envoy_details[(flags.decode(), details.decode())] += count
    for key, count in groups.items():
        record = json.loads(key + b"}")
        kube = record["kubernetes"]
        wl = f"{kube['pod_namespace']}/{workload_of(kube['pod_name'])}"
        out.pods.add(kube["pod_name"])
        out.lines[wl] += count
        if MAYBE_ERROR.search(key) and is_error(record):
            out.errors[wl] += count
    return out


@cache
def scanned(d: dt.date) -> Scan:
    """Scan a (small) day once for all the tests that need it."""
    return scan(DAYS[d].log_chunks())


SMALL_DAYS = [d for d in sorted(DAYS) if d != dt.date(2026, 7, 20)]


@cache
def series_of(d: dt.date) -> tuple[Series, ...]:
    """Generate a day's series once."""
    return tuple(DAYS[d].series())


def find(series: Iterable[Series], name: str, **labels: str) -> list[Series]:
    """Select series by name and labels."""
    return [s for s in series if s.labels["__name__"] == name and all(s.labels.get(k) == v for k, v in labels.items())]


def value_at(s: Series, t: int) -> float:
    """Return the sample of ``s`` at unix second ``t``."""
    return s.values[list(s.timestamps_ms).index(t * 1_000)]


def storm_small() -> ReconnectStorm:
    """Build a storm day whose non-error lines are scaled down a thousandfold."""
    return ReconnectStorm(volume_scale=0.001)


# --------------------------------------------------------------------------------------------------- registry


def test_days_and_expected_grades() -> None:
    """The corpus has the eight incident days with the grades the write-ups require."""
    want = {
        dt.date(2026, 7, 19): ("calm-day", "OK", 10),
        dt.date(2026, 7, 20): ("reconnect-storm", "CRITICAL", 8),
        dt.date(2026, 8, 12): ("readiness-spiral", "CRITICAL", 8),
        dt.date(2026, 8, 16): ("keepalive-race", "WARNING", 9),
        dt.date(2026, 8, 17): ("keepalive-fixed", "OK", 10),
        dt.date(2026, 9, 8): ("recreate-rollout", "CRITICAL", 8),
        dt.date(2026, 9, 15): ("quiet-endpoints", "WARNING", 9),
        dt.date(2026, 10, 5): ("conntrack-near-full", "CRITICAL", 8),
        dt.date(2026, 10, 20): ("spiral-unscraped", "CRITICAL", 8),
        dt.date(2026, 10, 28): ("recreate-beside-rolling", "CRITICAL", 8),
        dt.date(2026, 11, 5): ("stuck-rollout", "OK", 10),
        dt.date(2026, 11, 12): ("node-not-ready", "CRITICAL", 8),
    }
    got = {d: (x.name, x.expected.status, x.expected.score) for d, x in DAYS.items()}
    assert got == want
    for d, x in DAYS.items():
        assert x.date == d
        assert isinstance(x.expected, Expected)
        assert x.title
        assert "\n" not in x.title


def test_day_lookup_raises_a_clear_key_error() -> None:
    """``day()`` returns a known day and names the known days when asked for another."""
    assert day(dt.date(2026, 7, 20)).name == "reconnect-storm"
    with pytest.raises(KeyError, match=r"2026-01-01.*2026-07-20 \(reconnect-storm\)"):
        day(dt.date(2026, 1, 1))


def test_error_rule_of_the_tests() -> None:
    """The tests' own rule counts ERROR and Error: but not errors, error_count or a structured warning."""
    assert is_error({"message": "ERROR feeds.ws relay: connect ETIMEDOUT 203.0.113.7:443"})
    assert is_error({"message": "x Error: read ECONNRESET"})
    assert not is_error({"message": "fetched 12 items (0 errors)"})
    assert not is_error({"message": "no_error_here error_count=0"})
    assert not is_error({"level": "warning", "message": "upstream returned an error"})
    assert is_error({"level": "ERROR", "message": "template render failed"})


def test_series_import_line_is_victoriametrics_json() -> None:
    """``Series.to_import_line`` writes one /api/v1/import JSON line with integral values as integers."""
    s = Series({"__name__": "up", "job": "x"}, [1_000, 31_000], [1.0, 0.5])
    line = s.to_import_line()
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert json.loads(line) == {
        "metric": {"__name__": "up", "job": "x"},
        "values": [1, 0.5],
        "timestamps": [1_000, 31_000],
    }
    with pytest.raises(ValueError, match="finite"):
        Series({"__name__": "up"}, [1], [math.nan]).to_import_line()


# --------------------------------------------------------------------------------------------------- the storm


@pytest.mark.parametrize("scale", [0.0, 0.001, 0.37, 1.0, 2.5])
def test_storm_error_lines_exact_at_any_scale(scale: float) -> None:
    """07-20 has exactly 4,539,734 error lines from feeds/feed-aggregator whatever the volume_scale."""
    d = ReconnectStorm(volume_scale=scale)
    assert d.expected.facts["error_lines.feeds/feed-aggregator"] == 4_539_734
    feed = [s for s in d.sources if s.workload_key == "feeds/feed-aggregator"]
    assert sum(s.errors() for s in feed) == 4_539_734
    assert d.log_line_count() == sum(s.total() for s in d.sources)


def test_storm_total_lines_and_shape() -> None:
    """At volume_scale=1 the workload writes 12.9 M lines (±1 %), 1.9 M of them in 20:00-21:00, growing over the day."""
    facts = DAYS[dt.date(2026, 7, 20)].expected.facts
    total = facts["log_lines.feeds/feed-aggregator"]
    assert isinstance(total, int)
    assert abs(total - 12_900_000) <= 129_000
    hourly = facts["log_lines_by_hour.feeds/feed-aggregator"]
    assert isinstance(hourly, list)
    assert sum(hourly) == total
    assert abs(hourly[20] - 1_900_000) <= 19_000
    assert hourly[20] == max(hourly)
    assert hourly[0] < hourly[5] < hourly[16] < hourly[20]
    # After the mitigation the new pods are back to ~3,000 lines an hour.
    assert hourly[22] < 5_000
    assert hourly[23] < 5_000


# Minute-aligned spans that cover the storm's transitions: start, cert→ETIMEDOUT, the OOM, the liveness kill,
# EADDRNOTAVAIL near the peak, and the mitigation.
STORM_SPANS = (
    ("00:00:00", "00:05:00"),
    ("04:48:00", "05:12:00"),
    ("06:14:00", "06:17:00"),
    ("17:02:00", "17:05:00"),
    ("20:40:00", "20:42:00"),
    ("21:32:00", "21:35:00"),
)


def test_storm_sampled_spans_match_the_plan_by_rule() -> None:
    """Rendered storm records, counted by the error rule, match the generator's counters span by span."""
    d = storm_small()
    kinds: Counter[str] = Counter()
    for a, b in STORM_SPANS:
        first, last = at(d, a), at(d, b)
        got = scan(d.log_span(first, last))
        planned = d.planned_span(first, last)
        assert got.records == sum(n for n, _ in planned.values())
        for wl, (n, e) in planned.items():
            assert got.lines[wl] == n, (a, wl)
            assert got.errors[wl] == e, (a, wl)
        for r in got.samples:
            kinds[str(r["message"]).split(":")[0] + ":" + str(r["stream"])] += 1
    assert kinds["ERROR feeds.ws relay:stderr"] > 0


def records_between(d: HomelabDay, a: str, b: str) -> list[dict[str, Any]]:
    """Parse every record of a (short) span."""
    return [json.loads(line) for chunk in d.log_span(at(d, a), at(d, b)) for line in chunk.splitlines()]


def feed_messages(records: Iterable[dict[str, Any]]) -> Counter[str]:
    """Count the feed aggregator's messages."""
    return Counter(str(r["message"]) for r in records if r["kubernetes"]["pod_namespace"] == "feeds")


def test_storm_messages_follow_the_incident() -> None:
    """Cert errors come first, ETIMEDOUT after 05:00, Reconnecting lines carry an attempt number on stdout."""
    d = storm_small()
    early = feed_messages(records_between(d, "01:00:00", "01:01:00"))
    late_records = records_between(d, "12:00:00", "12:01:00")
    late = feed_messages(late_records)
    assert early["ERROR feeds.ws relay: certificate has expired"] > 100
    assert late["ERROR feeds.ws relay: connect ETIMEDOUT 203.0.113.7:443"] > 1_000
    assert "ERROR feeds.ws relay: certificate has expired" not in late
    errors = [r for r in late_records if str(r["message"]).startswith("ERROR feeds.ws")]
    assert errors
    assert all(r["stream"] == "stderr" for r in errors)
    reconnect = [r for r in late_records if "Reconnecting" in str(r["message"])]
    assert reconnect
    assert all(r["stream"] == "stdout" for r in reconnect)
    assert all(
        re.fullmatch(r"WARNING feeds\.ws relay: Reconnecting in 5s \(attempt \d+\)", str(r["message"]))
        for r in reconnect
    )
    peak = feed_messages(records_between(d, "20:40:00", "20:41:00"))
    assert peak["ERROR feeds.ws relay: connect EADDRNOTAVAIL 203.0.113.7:443 - Local (0.0.0.0:0)"] > 100


def test_storm_termination_series() -> None:
    """07-20: one OOMKilled termination at 06:15Z, a liveness restart at 17:03Z with reason Error, restarts 0→1→2."""
    d = DAYS[dt.date(2026, 7, 20)]
    ss = series_of(d.date)
    restarts = [s for s in find(ss, "kube_pod_container_status_restarts_total", namespace="feeds") if s.values[-1] == 2]
    assert len(restarts) == 1
    r = restarts[0]
    assert value_at(r, at(d, "06:15:00")) == 0
    assert value_at(r, at(d, "06:15:30")) == 1
    assert value_at(r, at(d, "17:03:00")) == 1
    assert value_at(r, at(d, "17:03:30")) == 2
    pod = r.labels["pod"]
    oom = find(ss, "kube_pod_container_status_last_terminated_reason", pod=pod, reason="OOMKilled")
    err = find(ss, "kube_pod_container_status_last_terminated_reason", pod=pod, reason="Error")
    assert len(oom) == 1
    assert len(err) == 1
    assert len(find(ss, "kube_pod_container_status_last_terminated_reason", reason="OOMKilled")) == 1
    assert oom[0].timestamps_ms[0] == at(d, "06:15:30") * 1_000
    assert oom[0].timestamps_ms[-1] == at(d, "17:03:00") * 1_000
    assert err[0].timestamps_ms[0] == at(d, "17:03:30") * 1_000
    assert set(oom[0].values) == {1.0}
    assert set(err[0].values) == {1.0}
    ts = find(ss, "kube_pod_container_status_last_terminated_timestamp", pod=pod)[0]
    assert value_at(ts, at(d, "06:15:30")) == at(d, "06:15:00")
    assert value_at(ts, at(d, "17:03:30")) == at(d, "17:03:00")
    assert set(find(ss, "kube_pod_container_status_last_terminated_exitcode", pod=pod)[0].values) == {137.0}
    facts = d.expected.facts
    assert facts["oom_kills"] == 1
    assert facts["restarts"] == 2
    terminations = facts["terminations"]
    assert isinstance(terminations, list)
    assert [t["reason"] for t in terminations] == ["OOMKilled", "Error"]


def test_storm_node_and_memory_series() -> None:
    """07-20: oom_kill +1 on pi5-2 at 06:15, conntrack peaks at 94,083 at 21:10 without drops, memory nears 8 GiB."""
    d = DAYS[dt.date(2026, 7, 20)]
    ss = series_of(d.date)
    start, end = window(d)
    oom = find(ss, "node_vmstat_oom_kill", instance="pi5-2:9100")[0]
    assert value_at(oom, at(d, "06:15:30")) - value_at(oom, at(d, "06:15:00")) == 1
    assert oom.values[-1] - oom.values[0] == 1
    for node in ("pi5-1", "pi5-3"):
        o = find(ss, "node_vmstat_oom_kill", instance=f"{node}:9100")[0]
        assert o.values[-1] == o.values[0]
    ct = find(ss, "node_nf_conntrack_entries", instance="pi5-2:9100")[0]
    inside = [(v, t) for t, v in zip(ct.timestamps_ms, ct.values, strict=True) if start * 1_000 <= t <= end * 1_000]
    peak = max(inside)
    assert peak == (94_083, at(d, "21:10:00") * 1_000)
    assert sum(1 for v, _ in inside if v == 94_083) == 1
    assert round(100 * 94_083 / 131_072) == 72
    for name in ("node_nf_conntrack_stat_drop", "node_nf_conntrack_stat_early_drop"):
        assert all(len(set(s.values)) == 1 for s in find(ss, name))
    assert not find(ss, "ALERTS")
    assert not find(ss, "ALERTS_FOR_STATE")
    mem = [
        s
        for s in find(ss, "container_memory_working_set_bytes", namespace="feeds", container="backend")
        if s.timestamps_ms[-1] == at(d, "06:14:30") * 1_000
    ]
    assert len(mem) == 1
    assert mem[0].values[-1] > 0.95 * 8 * 2**30
    assert value_at(mem[0], at(d, "03:00:00")) < mem[0].values[-1]


def test_storm_log_stream_shape_at_small_scale() -> None:
    """The storm's chunks are about 20,000 records and valid Vector records (first hour, at small scale)."""
    d = storm_small()
    got = scan(d.log_span(at(d, "00:00:00"), at(d, "01:00:00")))
    assert all(15_000 <= n <= 30_000 for n in got.chunks[:-1])
    check_vector_shape(got.samples, d)


# --------------------------------------------------------------------------------------------------- small days


def check_vector_shape(records: Iterable[dict[str, Any]], d: CorpusDay) -> None:
    """Check records have Vector's kubernetes_logs shape and fall in the day's window."""
    start, end = window(d)
    n = 0
    for r in records:
        n += 1
        assert VECTOR_KEYS <= set(r) <= VECTOR_KEYS | {"level"}
        kube = r["kubernetes"]
        assert isinstance(kube, dict)
        assert set(kube) == KUBERNETES_KEYS
        assert r["source_type"] == "kubernetes_logs"
        assert r["stream"] in ("stdout", "stderr")
        assert str(r["file"]).startswith(
            f"/var/log/pods/{kube['pod_namespace']}_{kube['pod_name']}_{kube['pod_uid']}/{kube['container_name']}/"
        )
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", str(r["timestamp"]))
        t = dt.datetime.strptime(str(r["timestamp"]), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
        assert start <= t < end
        assert isinstance(r["message"], str)
        assert r["message"]
        workload_of(str(kube["pod_name"]))
    assert n > 0


@pytest.mark.parametrize("d", SMALL_DAYS, ids=str)
def test_small_day_counts_by_rule(d: dt.date) -> None:
    """Every record of the day is counted: totals, per-workload lines and error lines match the facts exactly."""
    got = scanned(d)
    x = DAYS[d]
    facts = x.expected.facts
    assert got.records == x.log_line_count() == facts["log_lines"]
    assert dict(got.lines) == {k.split(".", 1)[1]: v for k, v in facts.items() if k.startswith("log_lines.")}
    assert dict(+got.errors) == {k.split(".", 1)[1]: v for k, v in facts.items() if k.startswith("error_lines.")}
    assert sum(got.errors.values()) == facts["error_lines"]
    assert all(15_000 <= n <= 30_000 for n in got.chunks[:-1])


@pytest.mark.parametrize("d", SMALL_DAYS, ids=str)
def test_small_day_records_have_the_vector_shape(d: dt.date) -> None:
    """A sample of every day's records parses as JSON with Vector's kubernetes_logs shape."""
    check_vector_shape(scanned(d).samples, DAYS[d])


@pytest.mark.parametrize("d", SMALL_DAYS, ids=str)
def test_envoy_records_have_the_fixture_keys(d: dt.date) -> None:
    """Access-log messages are Envoy Gateway's default JSON, with the fixture's keys and typed values."""
    samples = scanned(d).envoy_samples
    assert samples
    for r in samples:
        assert r["kubernetes"]["container_name"] == "envoy"
        assert r["stream"] == "stdout"
        assert "level" not in r
        assert not is_error(r)
        m = json.loads(str(r["message"]))
        assert set(m) == ENVOY_KEYS
        assert isinstance(m["response_code"], int)
        assert isinstance(m["duration"], int)
        assert m["connection_termination_details"] is None
        assert m["upstream_transport_failure_reason"] is None
        assert m["upstream_cluster"].startswith("httproute/")
        assert m["upstream_cluster"].endswith("/rule/0")
        assert m["route_name"].startswith(m["upstream_cluster"] + "/match/0/")
        if m["response_flags"] == "UH":
            assert (m["response_code"], m["response_code_details"], m["upstream_host"]) == (
                503,
                "no_healthy_upstream",
                None,
            )
        elif m["response_flags"] == "UC":
            assert m["response_code"] == 503
            assert m["upstream_host"]
            assert m["response_code_details"] == "upstream_reset_before_response_started{connection_termination}"
        else:
            assert m["response_flags"] == "-"
            assert m["response_code"] < 500


@pytest.mark.parametrize("d", SMALL_DAYS, ids=str)
def test_gateway_outcomes_match_the_facts(d: dt.date) -> None:
    """Requests, 5xx and flags per route, counted from the access log, equal the facts."""
    got = scanned(d)
    facts = DAYS[d].expected.facts
    per_route: Counter[str] = Counter()
    fivexx: Counter[str] = Counter()
    flags: Counter[str] = Counter()
    for (cluster, code, flag), n in got.envoy.items():
        per_route[cluster] += n
        if code >= 500:
            fivexx[cluster] += n
        if flag != "-":
            flags[f"{flag}.{cluster}"] += n
    assert dict(per_route) == {k.split(".", 1)[1]: v for k, v in facts.items() if k.startswith("gateway_requests.")}
    assert {k: v for k, v in fivexx.items()} == {
        k.split(".", 1)[1]: v for k, v in facts.items() if k.startswith("gateway_5xx.") and v
    }
    assert dict(flags) == {
        k.split(".", 1)[1]: v for k, v in facts.items() if k.startswith("gateway_flags.") and k.count(".") > 1
    }


def test_keepalive_race_has_exactly_35_uc_of_200580() -> None:
    """08-16: 200,580 requests on httproute/shop/api/rule/0, exactly 35 of them 503 UC, nothing else failed."""
    got = scanned(dt.date(2026, 8, 16))
    api = {k: v for k, v in got.envoy.items() if k[0] == "httproute/shop/api/rule/0"}
    assert sum(api.values()) == 200_580
    assert api[("httproute/shop/api/rule/0", 503, "UC")] == 35
    assert sum(v for k, v in got.envoy.items() if k[1] >= 500) == 35
    assert got.envoy_details[("UC", "upstream_reset_before_response_started{connection_termination}")] == 35


def test_keepalive_fixed_has_no_5xx() -> None:
    """08-17: 87,578 requests on the API route and not a single 5xx or flag."""
    got = scanned(dt.date(2026, 8, 17))
    assert sum(v for k, v in got.envoy.items() if k[0] == "httproute/shop/api/rule/0") == 87_578
    assert all(code < 500 and flag == "-" for (_, code, flag) in got.envoy)


def test_recreate_day_has_840_uh_of_2595() -> None:
    """09-08: the prober sent 2,595 requests on the status-page route, exactly 840 got 503 UH."""
    got = scanned(dt.date(2026, 9, 8))
    sp = {k: v for k, v in got.envoy.items() if k[0] == "httproute/shop/status-page/rule/0"}
    assert sum(sp.values()) == 2_595
    assert sp[("httproute/shop/status-page/rule/0", 503, "UH")] == 840
    assert got.envoy_details[("UH", "no_healthy_upstream")] == 840


def test_readiness_spiral_has_thousands_of_uh() -> None:
    """08-12: thousands of UH out of ~150,000 requests on the API route, and nothing else failed."""
    got = scanned(dt.date(2026, 8, 12))
    api = {k: v for k, v in got.envoy.items() if k[0] == "httproute/shop/api/rule/0"}
    uh = api[("httproute/shop/api/rule/0", 503, "UH")]
    assert 140_000 <= sum(api.values()) <= 160_000
    assert 2_000 <= uh <= 20_000
    assert set(k[2] for k in got.envoy) == {"-", "UH"}


def test_calm_days_have_no_flags() -> None:
    """07-19 and 08-17 have no 5xx and no response flag on any route."""
    for d in (dt.date(2026, 7, 19), dt.date(2026, 8, 17)):
        assert {flag for (_, _, flag) in scanned(d).envoy} == {"-"}


@pytest.mark.parametrize("d", SMALL_DAYS, ids=str)
def test_pod_names_use_the_safe_alphabet(d: dt.date) -> None:
    """Pod names in logs and series are <deploy>-<10>-<5>, <ds>-<5> or <sts>-<n> with Kubernetes' safe alphabet."""
    pods = set(scanned(d).pods)
    pods |= {s.labels["pod"] for s in series_of(d) if "pod" in s.labels and s.labels.get("job") != "kubernetes-pods"}
    pods |= {s.labels["pod"] for s in series_of(d) if s.labels.get("job") == "kubernetes-pods"}
    assert pods
    known = {
        "feed-aggregator",
        "api",
        "web",
        "victoria-metrics",
        "vector",
        "envoy-default-eg-e41e7b31",
        "status-page",
        "pricing",
    }
    assert {workload_of(p) for p in pods} <= known


# --------------------------------------------------------------------------------------------------- series


def series_checks(ss: Iterable[Series], d: CorpusDay) -> Iterator[str]:
    """Yield the metric names checked; fail on grid, coverage or monotonicity problems."""
    start, _ = window(d)
    first, last = (start - 7_200) * 1_000, (start + 86_400 + 1_800) * 1_000
    n_full = (last - first) // STEP_MS + 1
    # A node whose kubelet hung: what the kubelet serves (cAdvisor, prober) has a hole there.
    kubelet_down = set(getattr(d, "kubelet_down", {}))
    for s in ss:
        name = s.labels["__name__"]
        ts = list(s.timestamps_ms)
        assert ts, s.labels
        assert all(t % STEP_MS == 0 and first <= t <= last for t in ts), s.labels
        assert all(b > a for a, b in itertools.pairwise(ts)), s.labels
        assert all(math.isfinite(v) for v in s.values), s.labels
        if name in FULL_SPAN:
            assert len(ts) == n_full, s.labels
        elif name not in MAY_HAVE_GAPS and not (
            s.labels.get("job") == "kubelet" and s.labels.get("instance") in kubelet_down
        ):
            assert ts[-1] - ts[0] == (len(ts) - 1) * STEP_MS, f"gap in {s.labels}"
        if name.endswith("_total") or name in CUMULATIVE:
            assert all(b >= a for a, b in zip(s.values, s.values[1:], strict=False)), f"{s.labels} decreases"
        yield name


@pytest.mark.parametrize("d", sorted(DAYS), ids=str)
def test_series_grid_coverage_and_counters(d: dt.date) -> None:
    """Every series sits on the 30 s grid from D-1 22:00Z to D+1 00:30Z; counters never decrease."""
    names = Counter(series_checks(series_of(d), DAYS[d]))
    prober_scraped = getattr(DAYS[d], "prober_scraped", True)
    for needed in (
        "up",
        "kube_pod_container_status_restarts_total",
        "kube_pod_status_ready",
        "container_memory_working_set_bytes",
        "kube_endpointslice_endpoints",
        "node_nf_conntrack_entries",
        "node_vmstat_oom_kill",
        "kube_pod_container_resource_limits",
        "kube_deployment_spec_replicas",
        "kube_replicaset_spec_replicas",
    ):
        assert names[needed] > 0, needed
    # Most clusters do not scrape /metrics/probes (2026-10-20): then no prober series and no target at all.
    assert (names["prober_probe_total"] > 0) == prober_scraped
    assert sum(names.values()) < 600, "keep the series count small"
    # kube-state-metrics, vmalert, and per node: node_exporter, cAdvisor, probes (when scraped)
    assert len(find(series_of(d), "up")) == (11 if prober_scraped else 8)
    kubelet_down = set(getattr(DAYS[d], "kubelet_down", {}))
    for s in find(series_of(d), "up"):
        if s.labels.get("job") == "kubelet" and s.labels["instance"] in kubelet_down:
            assert set(s.values) == {0.0, 1.0}, s.labels  # a hung kubelet answers no scrape
        else:
            assert set(s.values) == {1.0}, s.labels


@pytest.mark.parametrize("d", sorted(DAYS), ids=str)
def test_import_lines_parse(d: dt.date) -> None:
    """Every series serialises to a VictoriaMetrics import line that round-trips."""
    for s in series_of(d)[:40]:
        got = json.loads(s.to_import_line())
        assert got["metric"] == dict(s.labels)
        assert len(got["values"]) == len(got["timestamps"])


@pytest.mark.parametrize(
    ("earlier", "later"), [(dt.date(2026, 7, 19), dt.date(2026, 7, 20)), (dt.date(2026, 8, 16), dt.date(2026, 8, 17))]
)
def test_adjacent_days_agree_where_they_overlap(earlier: dt.date, later: dt.date) -> None:
    """Two consecutive days write identical samples for the series and timestamps they share."""
    a = {tuple(sorted(s.labels.items())): s for s in series_of(earlier)}
    b = {tuple(sorted(s.labels.items())): s for s in series_of(later)}
    shared = set(a) & set(b)
    assert len(shared) > 50
    compared = 0
    for key in shared:
        va = dict(zip(a[key].timestamps_ms, a[key].values, strict=True))
        for t, v in zip(b[key].timestamps_ms, b[key].values, strict=True):
            if t in va:
                assert va[t] == v, (key, t)
                compared += 1
    assert compared > 10_000


def test_readiness_spiral_series() -> None:
    """08-12: throttling above 50 % under load, failed readiness probes and not-ready periods on all four pods."""
    d = DAYS[dt.date(2026, 8, 12)]
    ss = series_of(d.date)
    t0, t1 = at(d, "09:00:00"), at(d, "18:00:00")
    periods = find(ss, "container_cpu_cfs_periods_total", namespace="shop", container="api")
    throttled = find(ss, "container_cpu_cfs_throttled_periods_total", namespace="shop", container="api")
    assert len(periods) == len(throttled) == 4
    p_inc = sum(value_at(s, t1) - value_at(s, t0) for s in periods)
    t_inc = sum(value_at(s, t1) - value_at(s, t0) for s in throttled)
    assert t_inc / p_inc > 0.5
    limits = find(ss, "kube_pod_container_resource_limits", namespace="shop", container="api", resource="cpu")
    assert len(limits) == 4
    assert all(set(s.values) == {0.5} for s in limits)
    failed = find(ss, "prober_probe_total", namespace="shop", probe_type="Readiness", result="failed")
    assert len(failed) == 4
    assert all(s.values[-1] > 100 for s in failed)
    not_ready = find(ss, "kube_pod_status_ready", namespace="shop", condition="false")
    api_pods = {s.labels["pod"] for s in failed}
    assert all(max(s.values) == 1 for s in not_ready if s.labels["pod"] in api_pods)
    labels = find(ss, "kube_endpointslice_labels", label_kubernetes_io_service_name="api")
    slice_name = labels[0].labels["endpointslice"]
    assert re.fullmatch(rf"api-[{SAFE}]{{5}}", slice_name)
    ready = find(ss, "kube_endpointslice_endpoints", endpointslice=slice_name, ready="true")
    grid = range(at(d, "00:00:00") * 1_000, at(d, "23:59:30") * 1_000 + 1, STEP_MS)
    covered = set().union(*(set(s.timestamps_ms) for s in ready))
    empty = [t for t in grid if t not in covered]
    assert len(empty) == d.expected.facts["endpoints_empty_scrapes.shop/api"]
    assert len(empty) >= 7
    unavailable = find(ss, "kube_deployment_status_replicas_unavailable", deployment="api")[0]
    assert max(unavailable.values) == 4


def test_recreate_rollout_series() -> None:
    """09-08: the status-page slice has no endpoint for 1, 4 and 2 scrapes; unavailable is 1 at exactly those."""
    d = DAYS[dt.date(2026, 9, 8)]
    ss = series_of(d.date)
    slice_name = find(ss, "kube_endpointslice_labels", label_kubernetes_io_service_name="status-page")[0].labels[
        "endpointslice"
    ]
    assert re.fullmatch(rf"status-page-[{SAFE}]{{5}}", slice_name)
    endpoints = find(ss, "kube_endpointslice_endpoints", endpointslice=slice_name)
    covered = set().union(*(set(s.timestamps_ms) for s in endpoints))
    start, end = window(d)
    grid = list(range(start * 1_000, end * 1_000 + 1, STEP_MS))
    empty = [t for t in grid if t not in covered]
    runs: list[int] = []
    for i, t in enumerate(empty):
        if i and t - empty[i - 1] == STEP_MS:
            runs[-1] += 1
        else:
            runs.append(1)
    assert runs == [1, 4, 2]
    unavailable = find(ss, "kube_deployment_status_replicas_unavailable", deployment="status-page")[0]
    bad = [t for t, v in zip(unavailable.timestamps_ms, unavailable.values, strict=True) if v and t in set(grid)]
    assert bad == empty
    windows = d.expected.facts["endpoints_empty_windows.shop/status-page"]
    assert isinstance(windows, list)
    assert [(w["seconds"], w["scrapes"]) for w in windows] == [(15, 1), (101, 4), (58, 2)]
    assert (
        len(
            {
                s.labels["pod"]
                for s in find(ss, "kube_pod_status_ready", namespace="shop")
                if s.labels["pod"].startswith("status-page-")
            }
        )
        == 4
    )


def test_quiet_endpoints_series() -> None:
    """09-15: quote fails 0.05 % UC, worst at 04:00 and best at peak; the busy catalog has no UC series."""
    d = DAYS[dt.date(2026, 9, 15)]
    ss = series_of(d.date)
    start, end = window(d)

    def increase(service: str, flags: str | None = None, a: int = start, b: int = end) -> float:
        sel = [
            s
            for s in find(ss, "istio_requests_total", reporter="destination", destination_service_name=service)
            if flags is None or s.labels["response_flags"] == flags
        ]
        return sum(value_at(s, b) - value_at(s, a) for s in sel)

    quote, uc = increase("quote"), increase("quote", "UC")
    assert quote == d.expected.facts["istio_requests.pricing/quote"]
    assert abs(100 * uc / quote - 0.05) < 0.001
    assert not [
        s
        for s in find(ss, "istio_requests_total", destination_service_name="catalog")
        if s.labels["response_flags"] != "-"
    ]
    assert increase("catalog") / 86_400 > 200
    night = increase("quote", "UC", start + 4 * 3_600, start + 5 * 3_600) / increase(
        "quote", None, start + 4 * 3_600, start + 5 * 3_600
    )
    peak = increase("quote", "UC", start + 18 * 3_600, start + 19 * 3_600) / increase(
        "quote", None, start + 18 * 3_600, start + 19 * 3_600
    )
    assert night > 3 * peak
    assert d.expected.facts["istio_uc_worst_hour.pricing/quote"] == 4


def test_conntrack_near_full_series() -> None:
    """10-05: pi5-3 peaks at 126,484 / 131,072 at 19:40 and early_drop rises by exactly 1,204; the alert fired."""
    d = DAYS[dt.date(2026, 10, 5)]
    ss = series_of(d.date)
    start, end = window(d)
    ct = find(ss, "node_nf_conntrack_entries", instance="pi5-3:9100")[0]
    inside = [(v, t) for t, v in zip(ct.timestamps_ms, ct.values, strict=True) if start * 1_000 <= t <= end * 1_000]
    assert max(inside) == (126_484, at(d, "19:40:00") * 1_000)
    assert round(100 * 126_484 / 131_072, 1) == 96.5
    early = find(ss, "node_nf_conntrack_stat_early_drop", instance="pi5-3:9100")[0]
    assert value_at(early, end) - value_at(early, start) == 1_204
    assert all(set(s.values) == {0.0} for s in find(ss, "node_nf_conntrack_stat_drop"))
    firing = find(ss, "ALERTS", alertname="ConntrackNearFull", alertstate="firing")
    assert len(firing) == 1
    assert firing[0].labels["instance"] == "pi5-3:9100"
    facts = d.expected.facts
    assert (facts["conntrack_peak_entries"], facts["conntrack_peak_percent"], facts["conntrack_drops"]) == (
        126_484,
        96.5,
        1_204,
    )


def test_expected_facts_carry_the_write_up_numbers() -> None:
    """The facts hold the numbers each write-up quotes."""
    f = {d: DAYS[d].expected.facts for d in DAYS}
    assert f[dt.date(2026, 7, 20)]["conntrack_peak_entries"] == 94_083
    assert f[dt.date(2026, 7, 20)]["conntrack_peak_percent"] == 71.8
    assert f[dt.date(2026, 7, 20)]["alerts_fired"] == 0
    assert f[dt.date(2026, 8, 16)]["gateway_flags.UC.httproute/shop/api/rule/0"] == 35
    assert f[dt.date(2026, 8, 16)]["gateway_requests.httproute/shop/api/rule/0"] == 200_580
    assert f[dt.date(2026, 8, 17)]["gateway_requests.httproute/shop/api/rule/0"] == 87_578
    assert f[dt.date(2026, 8, 17)]["gateway_5xx"] == 0
    assert f[dt.date(2026, 9, 8)]["gateway_flags.UH.httproute/shop/status-page/rule/0"] == 840
    assert f[dt.date(2026, 9, 8)]["gateway_requests.httproute/shop/status-page/rule/0"] == 2_595
    assert f[dt.date(2026, 9, 15)]["istio_uc_ratio_percent.pricing/quote"] == 0.05
    for d in (dt.date(2026, 7, 19), dt.date(2026, 8, 17)):
        assert f[d]["restarts"] == 0
        assert f[d]["oom_kills"] == 0
        assert f[d]["gateway_5xx"] == 0
    for d, facts in f.items():
        assert isinstance(DAYS[d], HomelabDay)
        assert int(str(facts["error_lines"])) < 50_000 or d == dt.date(2026, 7, 20)

"""Cluster scoping: two clusters in one store, and each digest sees only its own, on all four backend pairs.

Cluster "prod" had the 2026-11-12 incident (a node NotReady, CRITICAL 8); cluster "lab" had a calm day on the same
date, with the same node, pod and namespace names (the homelab's), so every series and stream of one has a twin in
the other that only the ``cluster`` label tells apart. They are loaded into one VictoriaMetrics and one Prometheus
(series labelled ``cluster``), one VictoriaLogs (``cluster`` a stream field) and one Loki (a stream label). The
reference for each cluster is its day alone, unlabelled, in a VictoriaMetrics + VictoriaLogs of its own: a digest
scoped to a cluster must equal it field for field — status, score, every check's value, offenders, coverage and
explanations — on every pair. Only the hints may differ (they quote the backend's language), and on Loki the error
signatures (no pattern ingester here; see test_backend_parity).
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from digest.app.engine import Config, make_digest
from digest.app.settings import ConfigError, load_settings
from digest.backends.scope import parse_matchers, render, scoped_promql
from digest.output.render import Renderer, to_json
from digest.pipeline.policy import Policy, TrendsPolicy
from digest.pipeline.window import day_window
from digest.testbed.corpus import DAYS
from digest.testbed.corpus.calm_day import CalmDay
from digest.testbed.corpus.clusters import InCluster, on_date
from digest.testbed.corpus.model import CorpusDay
from digest.testbed.embedded import LOG_STREAM_FIELDS, EmbeddedBackends, day_bounds, load_corpus_day
from digest.testbed.loki_server import LokiServer, loki_binary_or_skip
from digest.testbed.prometheus_server import PrometheusServer, missing_binaries
from digest.testbed.snapshots import binary_identity, snapshot_key
from tests.command import backend_env, clean_env, run_digest
from tests.link_queries import identity, loki_streams, metrics_series, query_of

DAY = date(2026, 11, 12)
PAIRS = ("victoriametrics+victorialogs", "prometheus+victorialogs", "victoriametrics+loki", "prometheus+loki")
# VictoriaLogs' own multi-tenancy: the lab's lines also go to tenant 7:3, alone there.
LAB_TENANT = {"AccountID": "7", "ProjectID": "3"}


@dataclass
class Stores:
    """The shared stores holding both clusters, and each cluster's reference digest."""

    victoria: EmbeddedBackends
    prometheus: PrometheusServer
    loki: LokiServer
    references: dict[str, tuple[dict[str, Any], dict[str, Any]]]


def _days() -> dict[str, CorpusDay]:
    return {"prod": DAYS[DAY], "lab": on_date(CalmDay, DAY)}


def _config(metrics_url: str, logs: dict[str, str], cluster: str, **settings: Any) -> Config:
    loaded = load_settings(
        vm_url=metrics_url, cluster=cluster, timezone="UTC", policy_file=None, query_timeout=60.0, **logs, **settings
    )
    # Without trends: the cluster's day is alone in each store, so its trend days hold nothing of either cluster.
    return Config(settings=loaded, policy=Policy(trends=TrendsPolicy(enabled=False)))


async def _graded(config: Config) -> tuple[dict[str, Any], dict[str, Any]]:
    """The payload without hints (they quote the backend's query language), and each check's signatures apart."""
    payload = to_json(await make_digest(config, day_window(DAY, config.settings.zone)))
    copied = json.loads(json.dumps(payload))
    said = {}
    for check in copied["checks"]:
        check.pop("hint", None)
        said[check["name"]] = check.pop("signatures"), check.pop("signatures_note")
    said["novelty"] = copied.pop("novelty"), None
    return copied, said


def _scoped(cluster: str) -> dict[str, str]:
    return {"metrics_selector": f'cluster="{cluster}"', "logs_selector": f'cluster="{cluster}"'}


@pytest.fixture(scope="module")
def stores() -> Iterator[Stores]:
    """Both clusters in each shared store, and the references computed on each cluster's day alone."""
    missing = missing_binaries()
    if missing:
        pytest.fail(f"{', '.join(missing)} not on PATH: run scripts/install-backends")
    binary = loki_binary_or_skip()
    days = _days()
    labelled = [InCluster(day, cluster) for cluster, day in days.items()]
    references: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for cluster, day in days.items():
        with EmbeddedBackends() as alone:
            load_corpus_day(alone, day)
            references[cluster] = asyncio.run(_graded(_config(alone.metrics.url, {"vl_url": alone.logs.url}, cluster)))
    # Prometheus' blocks kept between runs (12 s of promtool on a 2-core machine): a function of the days and this file.
    blocks = snapshot_key(
        "cluster-scope-prometheus", [Path(__file__)], binary_identity("promtool"), binary_identity("prometheus")
    )
    with (
        EmbeddedBackends() as victoria,
        PrometheusServer(labelled, snapshot=blocks) as prometheus,
        LokiServer(binary=binary) as loki,
    ):
        for day in labelled:
            victoria.import_series(series.to_import_line() for series in day.series())
            victoria.ingest_logs(day.log_chunks(), stream_fields=f"{LOG_STREAM_FIELDS},cluster")
            loki.push_day(day.day, labels={"cluster": day.cluster})
        victoria.ingest_logs(days["lab"].log_chunks(), tenant=LAB_TENANT)
        start, end = day_bounds(DAY)
        total = sum(day.log_line_count() for day in labelled)
        victoria.wait_for_logs(start - timedelta(days=1), end + timedelta(days=1), total)
        lab_lines = days["lab"].log_line_count()
        victoria.wait_for_logs(start - timedelta(days=1), end + timedelta(days=1), lab_lines, tenant=LAB_TENANT)
        victoria.wait_for_series('up{job="kube-state-metrics"}', end, 2)
        yield Stores(victoria, prometheus, loki, references)


def _urls(stores: Stores, pair: str) -> tuple[str, dict[str, str]]:
    metrics_name, logs_name = pair.split("+")
    metrics_url = stores.prometheus.url if metrics_name == "prometheus" else stores.victoria.metrics.url
    logs = {"loki_url": stores.loki.url} if logs_name == "loki" else {"vl_url": stores.victoria.logs.url}
    return metrics_url, logs


def _assert_same(graded: dict[str, Any], expected: dict[str, Any]) -> None:
    differing = [
        (mine["name"], mine["status"], mine["summary"], mine["error"], theirs["summary"])
        for mine, theirs in zip(graded["checks"], expected["checks"], strict=True)
        if mine != theirs
    ]
    assert differing == []
    assert graded == expected


@pytest.mark.parametrize("cluster", ["prod", "lab"])
@pytest.mark.parametrize("pair", PAIRS)
async def test_each_cluster_reads_as_if_alone(stores: Stores, pair: str, cluster: str) -> None:
    """A digest scoped to one cluster of a shared store equals that cluster's digest on a store of its own."""
    metrics_url, logs = _urls(stores, pair)
    graded, said = await _graded(_config(metrics_url, logs, cluster, **_scoped(cluster)))
    expected, expected_said = stores.references[cluster]
    assert (graded["status"], graded["score"]) == (expected["status"], expected["score"])
    _assert_same(graded, expected)
    if pair.endswith("victorialogs"):
        assert said == expected_said


async def test_unscoped_digest_mixes_the_clusters(stores: Stores) -> None:
    """Without a scope the shared store's digest is not prod's: the test above would catch a scope left out."""
    graded, _ = await _graded(_config(*_urls(stores, "victoriametrics+victorialogs"), "prod"))
    assert graded != stores.references["prod"][0]


_LOG_CHECKS = ("error_lines", "log_storms")


# Each half touches one backend's difference: the logs' label is asked of VictoriaLogs (a count by the field) or of Loki
# (its label-values index), the metrics' of VictoriaMetrics or Prometheus (the same PromQL). The other side is fixed.
@pytest.mark.parametrize("pair", ["victoriametrics+victorialogs", "victoriametrics+loki"])
async def test_half_scoped_logs_are_told_by_their_label_though_the_nodes_match(stores: Stores, pair: str) -> None:
    """Metrics scoped to prod, logs read whole, both clusters' nodes named alike: the logs' label names the clusters."""
    metrics_url, logs = _urls(stores, pair)
    graded, _ = await _graded(_config(metrics_url, logs, "prod", metrics_selector='cluster="prod"'))
    assert graded["log_clusters"] == ["lab", "prod"]
    assert "logs not scoped to prod: they hold lab, prod" in graded["headline"]
    for check in graded["checks"]:
        if check["name"] in _LOG_CHECKS:
            assert (check["status"], check["penalty"]) == ("UNKNOWN", 0), check
            assert "the logs hold lines of several clusters (lab, prod)" in check["error"]
    # The metrics' checks are prod's alone, as on prod's own store.
    expected = {check["name"]: check for check in stores.references["prod"][0]["checks"]}
    for check in graded["checks"]:
        if check["name"] not in (*_LOG_CHECKS, "envoy_flags"):
            assert check["status"] == expected[check["name"]]["status"], check["name"]


@pytest.mark.parametrize("pair", ["victoriametrics+victorialogs", "prometheus+victorialogs"])
async def test_half_scoped_metrics_are_told_by_the_logs_label(stores: Stores, pair: str) -> None:
    """Logs scoped to prod, metrics read whole: the metrics' cluster label names both clusters, no check graded."""
    metrics_url, logs = _urls(stores, pair)
    graded, _ = await _graded(_config(metrics_url, logs, "prod", logs_selector='cluster="prod"'))
    assert graded["metrics_clusters"] == ["lab", "prod"]
    assert graded["log_clusters"] == []
    assert "metrics not scoped to prod: they hold lab, prod" in graded["headline"]
    assert graded["status"] == "UNKNOWN"


# A typo on each store's side, on the backends whose difference it touches (the metrics' probe is PromQL on
# VictoriaMetrics and Prometheus; the logs' is a grouped count on VictoriaLogs and Loki's label index).
@pytest.mark.parametrize(
    ("pair", "store"),
    [
        ("victoriametrics+victorialogs", "metrics"),
        ("prometheus+victorialogs", "metrics"),
        ("victoriametrics+victorialogs", "logs"),
        ("victoriametrics+loki", "logs"),
    ],
)
async def test_a_selector_that_matches_nothing_names_its_setting(stores: Stores, pair: str, store: str) -> None:
    """cluster="prdo": that store's checks UNKNOWN naming the setting, not an exporter; the other store's graded."""
    metrics_url, logs = _urls(stores, pair)
    scoped = _scoped("prod") | {f"{store}_selector": 'cluster="prdo"'}
    graded, _ = await _graded(_config(metrics_url, logs, "prod", **scoped))
    setting = "DIGEST_METRICS_SELECTOR" if store == "metrics" else "DIGEST_LOGS_SELECTOR"
    assert graded["empty_scopes"] == [f'{setting} {{cluster="prdo"}}']
    assert f'{setting} {{cluster="prdo"}} matches nothing' in graded["headline"]
    blind = [check for check in graded["checks"] if setting in (check["error"] or "")]
    assert blind
    for check in blind:
        assert (check["status"], check["penalty"]) == ("UNKNOWN", 0), check
        assert "matches no" in check["error"]
    # Nothing is said to be "never had", nor left out as such: the store was not seen at all.
    assert graded["unwatched"] == []
    assert all("never seen" not in (check["error"] or "") for check in graded["checks"])
    # The other store's checks are graded as on prod's own store.
    expected = {check["name"]: check for check in stores.references["prod"][0]["checks"]}
    for check in graded["checks"]:
        if check not in blind:
            assert check["status"] == expected[check["name"]]["status"], check["name"]


async def test_extra_label_in_the_url_scopes_like_the_selector(stores: Stores) -> None:
    """VictoriaMetrics' ?extra_label=cluster=lab in DIGEST_VM_URL is honoured (on Prometheus too), never dropped."""
    for pair in ("victoriametrics+victorialogs", "prometheus+victorialogs"):
        metrics_url, logs = _urls(stores, pair)
        config = _config(f"{metrics_url}?extra_label=cluster=lab", logs, "lab", logs_selector='cluster="lab"')
        graded, _ = await _graded(config)
        _assert_same(graded, stores.references["lab"][0])


async def test_victorialogs_tenant_scopes_the_logs(stores: Stores) -> None:
    """DIGEST_VL_ACCOUNT_ID/PROJECT_ID read the lab's tenant, where its lines are alone, with no logs selector."""
    metrics_url, _ = _urls(stores, "victoriametrics+victorialogs")
    config = _config(
        metrics_url,
        {"vl_url": stores.victoria.logs.url},
        "lab",
        metrics_selector='cluster="lab"',
        vl_account_id=int(LAB_TENANT["AccountID"]),
        vl_project_id=int(LAB_TENANT["ProjectID"]),
    )
    graded, said = await _graded(config)
    _assert_same(graded, stores.references["lab"][0])
    assert said == stores.references["lab"][1]


# The rewrite and the settings, without a backend ----------------------------------------------------------------

PROD = parse_matchers('cluster="prod"')


@pytest.mark.parametrize(
    ("query", "scoped"),
    [
        ("up", 'up{cluster="prod"}'),
        ('up{job="a"}', 'up{job="a", cluster="prod"}'),
        ("x{}", 'x{cluster="prod"}'),
        ('{__name__=~"a|b"}', '{__name__=~"a|b", cluster="prod"}'),
        ("sum by (node) (rate(x[5m]))", 'sum by (node) (rate(x{cluster="prod"}[5m]))'),
        ("sum(rate(x[5m])) without (pod)", 'sum(rate(x{cluster="prod"}[5m])) without (pod)'),
        (
            "a * on (node) group_left (role) kube_node_info offset 1m",
            'a{cluster="prod"} * on (node) group_left (role) kube_node_info{cluster="prod"} offset 1m',
        ),
        ("last_over_time(x[86399999ms:1m]) @ 1234", 'last_over_time(x{cluster="prod"}[86399999ms:1m]) @ 1234'),
        ('up{a="}", b=~"{x}"} > bool 1e-3', 'up{a="}", b=~"{x}", cluster="prod"} > bool 1e-3'),
        (
            'label_replace(up, "dst", "$1 up", "src", "(.*)")',
            'label_replace(up{cluster="prod"}, "dst", "$1 up", "src", "(.*)")',
        ),
        ("vector(0) unless absent(up) or Inf and NaN", 'vector(0) unless absent(up{cluster="prod"}) or Inf and NaN'),
        ("topk(3, x) / 0x1F + 2.5e+3", 'topk(3, x{cluster="prod"}) / 0x1F + 2.5e+3'),
        ("count_values(`le`, recording:rule:ratio)", 'count_values(`le`, recording:rule:ratio{cluster="prod"})'),
    ],
)
def test_scope_reaches_every_selector_and_nothing_else(query: str, scoped: str) -> None:
    """The matchers go into every vector selector; strings, ranges, label lists, functions and keywords stay."""
    assert scoped_promql(query, PROD) == scoped


def test_an_empty_scope_leaves_the_query_untouched() -> None:
    """Without a scope the query is sent exactly as written."""
    assert scoped_promql('sum by (a) (x{b="c"}[5m])', ()) == 'sum by (a) (x{b="c"}[5m])'


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("DIGEST_METRICS_SELECTOR", "cluster=prod", "must be double-quoted"),
        ("DIGEST_METRICS_SELECTOR", 'cluster=""', "also matches series without the label"),
        ("DIGEST_LOGS_SELECTOR", 'cluster=~"prod|"', "also matches series without the label"),
        ("DIGEST_LOGS_SELECTOR", 'cluster="a" env="b"', "expected a comma"),
        ("DIGEST_VM_URL", "http://vm:8428?nocache=1", "query parameter 'nocache' is not read"),
        ("DIGEST_VM_URL", "http://vm:8428?extra_label=cluster", "extra_label must be name=value"),
        ("DIGEST_VM_URL", 'http://vm:8428?extra_filters[]={a="1"}&extra_filters[]={a="2"}', "alternatives (OR)"),
        ("DIGEST_VL_URL", "http://vl:9428?AccountID=1", "must not carry a query string"),
        ("DIGEST_VM_TENANT", "prod", "must be a VictoriaMetrics tenant"),
    ],
)
def test_a_scope_that_cannot_be_honoured_is_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, reason: str
) -> None:
    """A selector or a URL scope the digest cannot apply fails at start, naming the variable, never dropped."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=rf"^{variable}: .*{re.escape(reason)}"):
        load_settings()


def test_url_scope_and_selector_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """extra_label and extra_filters from the URL and the selector are all applied, and the base URL loses its query."""
    monkeypatch.setenv("DIGEST_VM_URL", 'http://vm:8428/?extra_label=cluster=prod&extra_filters[]={env=~"a|b"}')
    monkeypatch.setenv("DIGEST_METRICS_SELECTOR", 'team!="lab"')
    settings = load_settings()
    assert render(settings.metrics_scope) == 'cluster="prod", env=~"a|b", team!="lab"'
    assert settings.vm_endpoint().url == "http://vm:8428"


def test_vm_tenant_becomes_the_vmselect_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """DIGEST_VM_TENANT=12:34 reads /select/12:34/prometheus of vmselect; with a /select/ URL it is refused."""
    monkeypatch.setenv("DIGEST_VM_URL", "http://vmselect:8481")
    monkeypatch.setenv("DIGEST_VM_TENANT", "12:34")
    assert load_settings().vm_endpoint().url == "http://vmselect:8481/select/12:34/prometheus"
    monkeypatch.setenv("DIGEST_VM_URL", "http://vmselect:8481/select/0/prometheus")
    with pytest.raises(ConfigError, match="DIGEST_VM_TENANT: the URL has a /select/ path already"):
        load_settings()


# digest doctor on the shared store --------------------------------------------------------------------------------

DOCTOR_AT = "2026-11-13T00:00:00Z"  # the 24 h of DAY


def test_doctor_says_an_unscoped_digest_would_mix_the_clusters(stores: Stores) -> None:
    """Unscoped on a store holding prod and lab: the doctor names both clusters and the setting, exit 2."""
    result = run_digest("doctor", "--at", DOCTOR_AT, env=backend_env(stores.victoria), timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "✗ metrics: this store holds several clusters (cluster: lab, prod) and the digest would count them all as "
        'one: set DIGEST_METRICS_SELECTOR, e.g. cluster="lab"'
    ) in result.stdout


def test_doctor_reports_what_each_scope_finds(stores: Stores) -> None:
    """Scoped to prod: metrics and logs each say what they find in scope; a selector matching nothing is ✗, exit 2."""
    env = backend_env(stores.victoria, **{f"DIGEST_{k.upper()}": v for k, v in _scoped("prod").items()})
    result = run_digest("doctor", "--at", DOCTOR_AT, "--format", "json", env=env, timeout=300)
    payload = json.loads(result.stdout)
    metrics, logs = payload["scopes"]
    assert (metrics["scope"], metrics["ok"], metrics["clusters_in_store"]) == (
        'cluster="prod"',
        True,
        {"cluster": ["lab", "prod"]},
    )
    assert metrics["found"] > 0
    assert (logs["scope"], logs["ok"], logs["found"]) == ('cluster="prod"', True, DAYS[DAY].log_line_count())
    env["DIGEST_METRICS_SELECTOR"] = env["DIGEST_LOGS_SELECTOR"] = 'cluster="staging"'
    result = run_digest("doctor", "--at", DOCTOR_AT, env=env, timeout=300)
    assert result.returncode == 2
    assert (
        '✗ metrics: {cluster="staging"} (DIGEST_METRICS_SELECTOR / DIGEST_VM_URL) matches no up series in the 24 h '
        "(cluster here: lab, prod)"
    ) in result.stdout
    assert (
        '✗ logs: {cluster="staging"} (DIGEST_LOGS_SELECTOR) matches no line in the 24 h: is its label a stream field'
    ) in result.stdout


def test_doctor_names_a_missing_loki_tenant(stores: Stores) -> None:
    """A multi-tenant Loki asked without DIGEST_LOKI_TENANT: the URL line says to set it; with it, the URL is fine."""
    with LokiServer(binary=loki_binary_or_skip(), config_overrides={"auth_enabled": True}) as loki:
        env = clean_env(DIGEST_VM_URL=stores.victoria.metrics.url, DIGEST_LOKI_URL=loki.url, DIGEST_CLUSTER="lab")
        env["DIGEST_METRICS_SELECTOR"] = 'cluster="lab"'
        result = run_digest("doctor", "--at", DOCTOR_AT, "--format", "json", env=env, timeout=300)
        logs_url = json.loads(result.stdout)["urls"][1]
        assert (logs_url["answers"], logs_url["ok"]) == ("a Loki", False)
        assert logs_url["fix"] == "Loki is multi-tenant: set DIGEST_LOKI_TENANT (sent as X-Scope-OrgID)"
        env["DIGEST_LOKI_TENANT"] = "lab"
        result = run_digest("doctor", "--at", DOCTOR_AT, "--format", "json", env=env, timeout=300)
        logs_url = json.loads(result.stdout)["urls"][1]
        assert (logs_url["fix"], logs_url["ok"]) == (None, True)


# Links on a shared store ------------------------------------------------------------------------------------------


async def test_grafana_links_open_the_cluster_s_own_series_and_lines(stores: Stores) -> None:
    """Grafana Explore links on Prometheus + Loki scoped to prod: each query is scoped, runs, and finds the offender."""
    metrics_url, logs = _urls(stores, "prometheus+loki")
    config = _config(
        metrics_url,
        logs,
        "prod",
        grafana_url="https://grafana.example.org",
        grafana_metrics_datasource="prom",
        grafana_logs_datasource="loki",
        **_scoped("prod"),
    )
    digest = await make_digest(config, day_window(DAY, config.settings.zone))
    page = Renderer(config.settings.links()).render(digest, "html")
    maker = config.settings.links()
    kinds = set()
    for finding in (*digest.deductions, *digest.healthy, *digest.diagnoses):
        for offender, look in [(None, finding.look), *((one, one.look) for one in finding.offenders[:3])]:
            for link in maker.links(look, digest.window, "x"):
                assert f'href="{html.escape(link.url)}"' in page
                query = query_of(link.url, logs_datasource="loki")
                kinds.add(query.kind)
                if query.kind == "metrics":
                    # Aggregations drop the label: the scope is checked in the query, its effect by the digests above.
                    assert 'cluster="prod"' in query.query
                    series = metrics_series(stores.prometheus.url, query)
                    assert series, query.query
                    wanted = identity(offender) if offender is not None else {}
                    assert any(wanted.items() <= one.items() for one in series), (finding.name, wanted)
                else:
                    streams = loki_streams(stores.loki.url, query)
                    assert streams, query.query
                    assert {one["stream"]["cluster"] for one in streams} == {"prod"}
                    if offender is not None and offender.labels.get("namespace"):
                        assert {one["stream"]["namespace"] for one in streams} == {offender.labels["namespace"]}
    assert kinds == {"metrics", "logs"}

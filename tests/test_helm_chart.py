"""deploy/helm/digest: `helm lint`, and `helm template` of every preset validated strictly against Kubernetes' schemas.

The monitoring objects (ServiceMonitor, PrometheusRule, VMServiceScrape, VMRule) are validated strictly against their
CRDs' schemas, vendored with their attribution in tests/fixtures/crd-schemas/ (scripts/vendor-crd-schemas, from a clone
of github.com/VictoriaMetrics/operator: prometheus-operator 0.74.0's CRDs and the VictoriaMetrics operator v0.68.1's),
and their metadata against Kubernetes' ObjectMeta; they are also checked for what their operators select and load: the
release label kube-prometheus-stack selects on, and the rule groups of deploy/alerts.yaml.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from digest.app.settings import load_settings
from digest.backends.scope import render
from tests.test_deploy import KUBERNETES_VERSIONS, kubernetes_validate

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "deploy" / "helm" / "digest"
PRESETS = REPO / "deploy" / "helm" / "presets"
REQUIRED = ["--set", "telegram.chatIds=-1001234567890", "--set", "telegram.token=123:abc"]
MONITORING_KINDS = {"ServiceMonitor", "PrometheusRule", "VMServiceScrape", "VMRule"}
CRD_SCHEMAS = REPO / "tests" / "fixtures" / "crd-schemas"
# kind -> its CRD's schema (the served version's openAPIV3Schema, unknown fields refused); tests/fixtures/crd-schemas.
VENDORED_SCHEMAS = {
    "ServiceMonitor": "servicemonitor-monitoring.coreos.com-v1.json",
    "PrometheusRule": "prometheusrule-monitoring.coreos.com-v1.json",
    "VMServiceScrape": "vmservicescrape-operator.victoriametrics.com-v1beta1.json",
    "VMRule": "vmrule-operator.victoriametrics.com-v1beta1.json",
}


def _helm(*arguments: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("helm")
    if binary is None:
        pytest.fail("helm is not installed: run scripts/install-deploy-tools")
    return subprocess.run([binary, *arguments], capture_output=True, text=True, timeout=120, check=False)


def _render(*values: str) -> list[dict[str, Any]]:
    result = _helm("template", "digest", str(CHART), *REQUIRED, *values)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


CASES = {
    "defaults": (),
    "kube-prometheus-stack": ("-f", str(PRESETS / "kube-prometheus-stack.yaml")),
    "victoria-metrics-k8s-stack": ("-f", str(PRESETS / "victoria-metrics-k8s-stack.yaml")),
    "cronjob-and-replay": (
        "--set",
        "bot.enabled=false",
        "--set",
        "cronjob.enabled=true",
        "--set",
        "replay.enabled=true",
    ),
    "existing-secret-and-policy": ("--set", "telegram.existingSecret=mine", "--set", "policy.existingConfigMap=ours"),
    "defaults-with-both-monitoring-stacks": (
        "--set",
        "monitoring.prometheusOperator.enabled=true",
        "--set",
        "monitoring.victoriaMetricsOperator.enabled=true",
    ),
    "recording-rules-for-vmalert-and-loki": (
        "--set",
        "recordingRules.vmalert.enabled=true",
        "--set",
        "recordingRules.loki.enabled=true",
    ),
}
# case -> the monitoring objects it renders (kind, name); the other cases render none.
MONITORING_CASES = {
    "kube-prometheus-stack": {("ServiceMonitor", "digest"), ("PrometheusRule", "digest")},
    "victoria-metrics-k8s-stack": {("VMServiceScrape", "digest"), ("VMRule", "digest")},
    "defaults-with-both-monitoring-stacks": {
        ("ServiceMonitor", "digest"),
        ("PrometheusRule", "digest"),
        ("VMServiceScrape", "digest"),
        ("VMRule", "digest"),
    },
    "recording-rules-for-vmalert-and-loki": {("VMRule", "digest-log-counts")},  # type: vlogs groups
}


def _crd_validator(kind: str) -> Validator:
    kubernetes_validate()  # jsonschema comes with it; fails, naming the install step, when it is missing
    import jsonschema

    schema = json.loads((CRD_SCHEMAS / VENDORED_SCHEMAS[kind]).read_text())
    validator_class = jsonschema.Draft202012Validator
    validator_class.check_schema(schema)
    return validator_class(schema)


def _object_meta_validator(version: str) -> Validator:
    """Kubernetes' strict ObjectMeta schema for `version`, from kubernetes-validate's bundled schemas."""
    kubernetes_validate()  # jsonschema and referencing come with it; fails, naming the install step, when missing
    import jsonschema
    import referencing

    root = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    [folder] = [entry for entry in root.iterdir() if entry.name == f"v{version}.0-local-strict"]
    documents = [json.loads((folder / name).read_text()) for name in ("objectmeta-meta-v1.json", "_definitions.json")]
    registry: referencing.Registry = referencing.Registry().with_resources(
        (document["$id"], referencing.Resource.from_contents(document)) for document in documents
    )
    return jsonschema.Draft202012Validator(documents[0], registry=registry)


def _crd_errors(obj: dict[str, Any]) -> list[str]:
    """What the vendored CRD schema and Kubernetes' ObjectMeta refuse in `obj`, one line per error."""
    errors = [(error.path, error.message) for error in _crd_validator(obj["kind"]).iter_errors(obj)]
    for version in KUBERNETES_VERSIONS:
        meta = _object_meta_validator(version).iter_errors(obj["metadata"])
        errors += [(["metadata", *error.path], f"{error.message} (ObjectMeta, {version})") for error in meta]
    return [f"{'.'.join(str(part) for part in path)}: {message}" for path, message in errors]


def test_the_chart_lints() -> None:
    """`helm lint` passes with the required values."""
    result = _helm("lint", str(CHART), *REQUIRED)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_preset_renders_objects_that_validate_strictly(case: str) -> None:
    """Each preset's Kubernetes objects match the OpenAPI schemas (1.27 and 1.33), unknown fields refused."""
    validator = kubernetes_validate()
    objects = _render(*CASES[case])
    assert objects
    for obj in objects:
        if obj["kind"] in MONITORING_KINDS:
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                validator.validate(obj, version, strict=True)
            except validator.ValidationError as exc:
                path = ".".join(str(part) for part in exc.path)
                pytest.fail(f"{case}: {obj['kind']}/{obj['metadata']['name']} for {version}: {path}: {exc.message}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_preset_renders_monitoring_objects_that_match_their_crd_schemas(case: str) -> None:
    """Each preset's ServiceMonitor, PrometheusRule, VMServiceScrape and VMRule match their CRD schemas, strictly."""
    assert VENDORED_SCHEMAS.keys() == MONITORING_KINDS
    objects = [obj for obj in _render(*CASES[case]) if obj["kind"] in MONITORING_KINDS]
    assert {(obj["kind"], obj["metadata"]["name"]) for obj in objects} == MONITORING_CASES.get(case, set())
    for obj in objects:
        errors = _crd_errors(obj)
        assert not errors, f"{case}: {obj['kind']}/{obj['metadata']['name']}: " + "; ".join(errors)


def test_the_presets_render_every_monitoring_kind() -> None:
    """Between them, the cases render all four monitoring kinds, so each one's schema is exercised above."""
    assert {kind for objects in MONITORING_CASES.values() for kind, _ in objects} == MONITORING_KINDS


def _misspell_endpoints(spec: dict[str, Any]) -> None:
    spec["endpoint"] = spec.pop("endpoints")


def _misspell_an_endpoint_field(spec: dict[str, Any]) -> None:
    spec["endpoints"][0]["intervall"] = spec["endpoints"][0].pop("interval")


def _misspell_a_rule_field(spec: dict[str, Any]) -> None:
    spec["groups"][0]["rules"][0]["annotation"] = spec["groups"][0]["rules"][0].pop("annotations")


def _misspell_a_group_field(spec: dict[str, Any]) -> None:
    spec["groups"][0]["rule"] = spec["groups"][0].pop("rules")


def _misspell_a_group_type(spec: dict[str, Any]) -> None:
    spec["groups"][0]["typ"] = spec["groups"][0].pop("type")


# name -> (case rendered, kind, misspelling, what the error says)
TYPOS = {
    "ServiceMonitor spec.endpoint": (
        "kube-prometheus-stack",
        "ServiceMonitor",
        _misspell_endpoints,
        "'endpoint' was unexpected",
    ),
    "ServiceMonitor spec.endpoints[].intervall": (
        "kube-prometheus-stack",
        "ServiceMonitor",
        _misspell_an_endpoint_field,
        "'intervall' was unexpected",
    ),
    "PrometheusRule spec.groups[].rules[].annotation": (
        "kube-prometheus-stack",
        "PrometheusRule",
        _misspell_a_rule_field,
        "'annotation' was unexpected",
    ),
    "PrometheusRule spec.groups[].rule": (
        "kube-prometheus-stack",
        "PrometheusRule",
        _misspell_a_group_field,
        "'rule' was unexpected",
    ),
    "VMServiceScrape spec.endpoint": (
        "victoria-metrics-k8s-stack",
        "VMServiceScrape",
        _misspell_endpoints,
        "'endpoint' was unexpected",
    ),
    "VMServiceScrape spec.endpoints[].intervall": (
        "victoria-metrics-k8s-stack",
        "VMServiceScrape",
        _misspell_an_endpoint_field,
        "'intervall' was unexpected",
    ),
    "VMRule spec.groups[].rules[].annotation": (
        "victoria-metrics-k8s-stack",
        "VMRule",
        _misspell_a_rule_field,
        "'annotation' was unexpected",
    ),
    "VMRule spec.groups[].rule": (
        "victoria-metrics-k8s-stack",
        "VMRule",
        _misspell_a_group_field,
        "'rule' was unexpected",
    ),
    "VMRule (recording, vlogs) spec.groups[].typ": (
        "recording-rules-for-vmalert-and-loki",
        "VMRule",
        _misspell_a_group_type,
        "'typ' was unexpected",
    ),
}


@pytest.mark.parametrize("typo", sorted(TYPOS))
def test_a_misspelled_monitoring_field_is_refused(typo: str) -> None:
    """A misspelled field in any of the four rendered monitoring kinds fails the CRD validation, naming the field."""
    case, kind, misspell, expected = TYPOS[typo]
    [obj] = [obj for obj in _render(*CASES[case]) if obj["kind"] == kind]
    assert not _crd_errors(obj)
    broken = copy.deepcopy(obj)
    misspell(broken["spec"])
    errors = _crd_errors(broken)
    assert any(expected in error for error in errors), errors


def test_the_restricted_pod_settings_are_kept() -> None:
    """Non-root, read-only root filesystem, no privilege escalation, all capabilities dropped, no CPU limit."""
    objects = _render("--set", "cronjob.enabled=true")
    pods = [obj["spec"]["template"]["spec"] for obj in objects if obj["kind"] == "Deployment"]
    pods += [obj["spec"]["jobTemplate"]["spec"]["template"]["spec"] for obj in objects if obj["kind"] == "CronJob"]
    assert len(pods) == 2
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True
        [container] = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert "cpu" not in container["resources"]["limits"]


def test_the_monitoring_objects_carry_the_selected_labels_and_the_alert_rules() -> None:
    """Each stack's monitoring objects, with the labels their operator selects on and deploy/alerts.yaml's rules."""
    alerts = yaml.safe_load((REPO / "deploy" / "alerts.yaml").read_text())
    prometheus = {obj["kind"]: obj for obj in _render(*CASES["kube-prometheus-stack"])}
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert prometheus[kind]["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert prometheus["PrometheusRule"]["spec"] == alerts
    rendered = _render(*CASES["victoria-metrics-k8s-stack"])
    victoria = {obj["kind"]: obj for obj in rendered}
    [config] = [obj for obj in rendered if obj["metadata"]["name"] == "digest-config"]
    assert victoria["VMRule"]["spec"] == alerts
    scrape = victoria["VMServiceScrape"]["spec"]
    assert scrape["selector"]["matchLabels"]["app.kubernetes.io/component"] == "bot"
    # The operator's VMSingle on 8428 since the stack chart's 0.58.3 (August 2025), not the 8429 it served before.
    assert config["data"]["DIGEST_VM_URL"].endswith(":8428")


def test_the_chart_s_files_are_the_deploy_files() -> None:
    """The chart carries copies of deploy/alerts.yaml and deploy/policy.example.yaml: identical, one source of truth."""
    assert (CHART / "files" / "alerts.yaml").read_text() == (REPO / "deploy" / "alerts.yaml").read_text()
    assert (CHART / "files" / "policy.yaml").read_text() == (REPO / "deploy" / "policy.example.yaml").read_text()


def _without_header(text: str) -> str:
    """A generated rule file without its leading comment lines (what `digest rules` prints)."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))


def test_the_shipped_recording_rules_are_what_digest_rules_writes() -> None:
    """deploy/recording holds `digest rules` of the default policy, and the chart carries the same files."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DIGEST_")}
    for name, arguments in {
        "vmalert-rules.yaml": ["--for", "vmalert"],
        "vmalert-replay-rules.yaml": ["--for", "vmalert", "--replay"],
        "loki-rules.yaml": ["--for", "loki"],
    }.items():
        printed = subprocess.run(
            [sys.executable, "-m", "digest.app.cli", "rules", *arguments], capture_output=True, text=True, env=env
        )
        assert printed.returncode == 0, printed.stderr
        assert _without_header((REPO / "deploy" / "recording" / name).read_text()) == printed.stdout, name
    recording = REPO / "deploy" / "recording"
    assert (CHART / "files" / "recording-vmalert.yaml").read_text() == (recording / "vmalert-rules.yaml").read_text()
    assert (CHART / "files" / "recording-loki.yaml").read_text() == (recording / "loki-rules.yaml").read_text()


def test_the_recording_rules_render_for_each_evaluator() -> None:
    """The toggles render a VMRule of the vmalert rules and a ConfigMap Loki's chart loads (label loki_rule)."""
    rendered = {obj["kind"]: obj for obj in _render(*CASES["recording-rules-for-vmalert-and-loki"])}
    recording = REPO / "deploy" / "recording"
    assert rendered["VMRule"]["spec"] == yaml.safe_load((recording / "vmalert-rules.yaml").read_text())
    assert rendered["VMRule"]["spec"]["groups"][0]["type"] == "vlogs"
    [loki] = [
        obj
        for obj in _render(*CASES["recording-rules-for-vmalert-and-loki"])
        if "loki_rule" in obj["metadata"]["labels"]
    ]
    assert loki["kind"] == "ConfigMap"
    rules = yaml.safe_load(loki["data"]["digest-log-counts.yaml"])
    assert rules == yaml.safe_load((recording / "loki-rules.yaml").read_text())
    # Off by default: nothing of it in the defaults.
    assert not [obj for obj in _render() if obj["metadata"]["name"].endswith("-log-counts")]


def test_missing_required_values_are_named() -> None:
    """Without a chat id or a token, `helm template` fails naming the value to set."""
    result = _helm("template", "digest", str(CHART))
    assert result.returncode != 0
    assert "telegram.chatIds is required" in result.stderr or "telegram.token" in result.stderr


def test_the_cluster_scope_reaches_the_settings_the_digest_reads() -> None:
    """backends.clusterSelector and the tenant render to settings that load and scope every query as written."""
    rendered = _render(
        "--set-string",
        'backends.clusterSelector.metrics=cluster="prod"',
        "--set-string",
        # --set splits at commas: a selector of several matchers escapes them (or comes from a values file).
        'backends.clusterSelector.logs=cluster="prod"\\,env!="test"',
        "--set-string",
        "backends.metrics.tenant=12:34",
        "--set-string",
        "backends.metrics.url=http://vmselect.monitoring.svc:8481",
    )
    config = next(doc for doc in rendered if doc["kind"] == "ConfigMap" and "DIGEST_VM_URL" in doc["data"])
    data = config["data"]
    settings = load_settings(
        vm_url=data["DIGEST_VM_URL"],
        vm_tenant=data["DIGEST_VM_TENANT"],
        metrics_selector=data["DIGEST_METRICS_SELECTOR"],
        logs_selector=data["DIGEST_LOGS_SELECTOR"],
    )
    assert settings.vm_endpoint().url == "http://vmselect.monitoring.svc:8481/select/12:34/prometheus"
    assert render(settings.metrics_scope) == 'cluster="prod"'
    assert render(settings.logs_scope) == 'cluster="prod", env!="test"'


def test_the_links_reach_the_settings_the_digest_reads() -> None:
    """links.grafana and the UI URLs render to settings that load and make Grafana Explore links."""
    rendered = _render(
        "--set",
        "links.grafana.url=https://grafana.example.org",
        "--set",
        "links.grafana.metricsDatasource=prom",
        "--set",
        "links.grafana.logsDatasource=loki",
        "--set",
        "links.victoriaLogsUiUrl=https://logs.example.org",
    )
    data = next(doc for doc in rendered if doc["kind"] == "ConfigMap" and "DIGEST_VM_URL" in doc["data"])["data"]
    links = load_settings(
        **{
            key.removeprefix("DIGEST_").lower(): value
            for key, value in data.items()
            if "GRAFANA" in key or "UI_" in key
        }
    ).links()
    assert (links.grafana_url, links.grafana_metrics_datasource, links.grafana_logs_datasource) == (
        "https://grafana.example.org",
        "prom",
        "loki",
    )
    assert links.victorialogs_ui_url == "https://logs.example.org"

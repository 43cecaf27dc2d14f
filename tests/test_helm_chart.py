"""deploy/helm/digest: `helm lint`, and `helm template` of every preset validated strictly against Kubernetes' schemas.

The monitoring objects (ServiceMonitor, PrometheusRule, VMServiceScrape, VMRule) are validated strictly against their
CRDs' schemas, vendored with their attribution in tests/fixtures/crd-schemas/ (scripts/vendor-crd-schemas, from a clone
of github.com/VictoriaMetrics/operator: prometheus-operator 0.74.0's CRDs and the VictoriaMetrics operator v0.68.1's),
and their metadata against Kubernetes' ObjectMeta; they are also checked for what their operators select and load: the
release label kube-prometheus-stack selects on, and the rule groups of deploy/alerts.yaml.
"""

from __future__ import annotations

import copy
import functools
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
MONITORING_KINDS = {"ServiceMonitor", "PrometheusRule", "VMServiceScrape", "VMRule", "VMAlert"}
CRD_SCHEMAS = REPO / "tests" / "fixtures" / "crd-schemas"
# kind -> its CRD's schema (the served version's openAPIV3Schema, unknown fields refused); tests/fixtures/crd-schemas.
VENDORED_SCHEMAS = {
    "ServiceMonitor": "servicemonitor-monitoring.coreos.com-v1.json",
    "PrometheusRule": "prometheusrule-monitoring.coreos.com-v1.json",
    "VMServiceScrape": "vmservicescrape-operator.victoriametrics.com-v1beta1.json",
    "VMRule": "vmrule-operator.victoriametrics.com-v1beta1.json",
    "VMAlert": "vmalert-operator.victoriametrics.com-v1beta1.json",
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
        "recordingRules.vmalert.labels.evaluator=victorialogs",
        "--set",
        "recordingRules.vmalert.createVMAlert=true",
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
    # type: vlogs groups, and the VMAlert that reads VictoriaLogs to run them
    "recording-rules-for-vmalert-and-loki": {("VMRule", "digest-log-counts"), ("VMAlert", "digest-log-counts")},
}


@functools.cache
def _crd_validator(kind: str) -> Validator:
    kubernetes_validate()  # jsonschema comes with it; fails, naming the install step, when it is missing
    import jsonschema

    schema = json.loads((CRD_SCHEMAS / VENDORED_SCHEMAS[kind]).read_text())
    validator_class = jsonschema.Draft202012Validator
    validator_class.check_schema(schema)
    return validator_class(schema)


@functools.cache
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
    """Between them, the cases render all five monitoring kinds, so each one's schema is exercised above."""
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


def _misspell_the_datasource(spec: dict[str, Any]) -> None:
    spec["datasourc"] = spec.pop("datasource")


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
    "VMAlert spec.datasourc": (
        "recording-rules-for-vmalert-and-loki",
        "VMAlert",
        _misspell_the_datasource,
        "'datasourc' was unexpected",
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
    objects = _render("--set", "replay.enabled=true")
    objects += _render("--set", "bot.enabled=false", "--set", "cronjob.enabled=true")
    pods = _pods(objects)
    assert len(pods) == 3
    for pod in pods.values():
        assert pod["securityContext"]["runAsNonRoot"] is True
        [container] = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert "cpu" not in container["resources"]["limits"]


def test_the_monitoring_objects_carry_the_selected_labels_and_the_alert_rules() -> None:
    """Each stack's monitoring objects, with the labels their operator selects on and deploy/alerts.yaml's rules."""
    alerts = yaml.safe_load((REPO / "deploy" / "alerts.yaml").read_text())
    bot_alerts = [
        rule["alert"] for rule in alerts["groups"][0]["rules"] if rule["alert"] != "DigestCronJobNotSucceeded"
    ]
    prometheus = {obj["kind"]: obj for obj in _render(*CASES["kube-prometheus-stack"])}
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert prometheus[kind]["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert _alert_names(prometheus["PrometheusRule"]) == bot_alerts
    rendered = _render(*CASES["victoria-metrics-k8s-stack"])
    victoria = {obj["kind"]: obj for obj in rendered}
    [config] = [obj for obj in rendered if obj["metadata"]["name"] == "digest-config"]
    assert _alert_names(victoria["VMRule"]) == bot_alerts
    scrape = victoria["VMServiceScrape"]["spec"]
    assert scrape["selector"]["matchLabels"]["app.kubernetes.io/component"] == "bot"
    # The operator's VMSingle on 8428 since the stack chart's 0.58.3 (August 2025), not the 8429 it served before.
    assert config["data"]["DIGEST_VM_URL"].endswith(":8428")
    # The release label is a value: a kube-prometheus-stack installed under another release name.
    other = _render(*CASES["kube-prometheus-stack"], "--set", "monitoring.prometheusOperator.release=kps")
    assert {obj["metadata"]["labels"].get("release") for obj in other if obj["kind"] in MONITORING_KINDS} == {"kps"}


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
    # The VMAlert reads VictoriaLogs, writes to the metrics store, and selects the VMRule by its labels alone.
    vmalert = rendered["VMAlert"]["spec"]
    assert vmalert["datasource"]["url"] == "http://victoria-logs.logging.svc:9428"
    assert vmalert["remoteWrite"]["url"] == "http://vmsingle-vm.monitoring.svc:8428"
    assert vmalert["selectAllByDefault"] is False
    assert vmalert["ruleSelector"]["matchLabels"] == {"evaluator": "victorialogs"}
    assert rendered["VMRule"]["metadata"]["labels"]["evaluator"] == "victorialogs"
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


def _alert_names(rule_object: dict[str, Any]) -> list[str]:
    return [rule["alert"] for group in rule_object["spec"]["groups"] for rule in group["rules"]]


def _pods(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each workload's pod spec by the workload's name (Deployment, CronJob)."""
    pods = {}
    for obj in objects:
        if obj["kind"] == "Deployment":
            pods[obj["metadata"]["name"]] = obj["spec"]["template"]
        elif obj["kind"] == "CronJob":
            pods[obj["metadata"]["name"]] = obj["spec"]["jobTemplate"]["spec"]["template"]
    return {name: template["spec"] | {"metadata": template["metadata"]} for name, template in pods.items()}


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


# The modes that can run together (the bot and the CronJob post cannot: both would post the day).
MODES = {
    "bot": {"bot.enabled": "true"},
    "bot+replay": {"bot.enabled": "true", "replay.enabled": "true"},
    "cronjob": {"bot.enabled": "false", "cronjob.enabled": "true"},
    "cronjob+replay": {"bot.enabled": "false", "cronjob.enabled": "true", "replay.enabled": "true"},
    "replay": {"bot.enabled": "false", "replay.enabled": "true"},
}
OPERATORS = {
    "no-operator": {},
    "prometheus-operator": {"monitoring.prometheusOperator.enabled": "true"},
    "victoria-metrics-operator": {"monitoring.victoriaMetricsOperator.enabled": "true"},
    "both-operators": {
        "monitoring.prometheusOperator.enabled": "true",
        "monitoring.victoriaMetricsOperator.enabled": "true",
    },
}
RECORDING = {
    "no-recording": {},
    "vmalert": {"recordingRules.vmalert.enabled": "true", "recordingRules.vmalert.labels.evaluator": "victorialogs"},
    "loki-ruler": {"recordingRules.loki.enabled": "true"},
}
PRESET_FILES = {"no-preset": None, **{path.stem: path for path in sorted(PRESETS.glob("*.yaml"))}}
# Every mode with every operator and every preset; the recording toggles taken in turn (they render apart from the
# mode: a test below checks them with each).
COMBINATIONS = {
    f"{mode}/{operator}/{preset}/{recording}": (mode, operator, preset, recording)
    for index, (mode, operator, preset) in enumerate(
        (mode, operator, preset) for mode in MODES for operator in OPERATORS for preset in PRESET_FILES
    )
    for recording in [list(RECORDING)[index % len(RECORDING)]]
}
RELEASE = "team-digest"
NAMESPACE = "observability"


def _sets(values: dict[str, str]) -> list[str]:
    """--set for the booleans, --set-string for the rest (a post time, a chat id stay strings)."""
    return [
        argument
        for key, value in values.items()
        for argument in ("--set" if value in ("true", "false") else "--set-string", f"{key}={value}")
    ]


def _render_release(*values: str) -> list[dict[str, Any]]:
    """The chart rendered as release RELEASE in NAMESPACE."""
    result = _helm("template", RELEASE, str(CHART), "-n", NAMESPACE, *REQUIRED, *values)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _combination(name: str) -> list[dict[str, Any]]:
    mode, operator, preset, recording = COMBINATIONS[name]
    preset_file = PRESET_FILES[preset]
    arguments = ["-f", str(preset_file)] if preset_file else []
    # A preset turns its operator on; the combination's operator setting comes after it and wins.
    off = {"monitoring.prometheusOperator.enabled": "false", "monitoring.victoriaMetricsOperator.enabled": "false"}
    return _render_release(*arguments, *_sets(off | OPERATORS[operator] | MODES[mode] | RECORDING[recording]))


def _validate_strictly(objects: list[dict[str, Any]]) -> list[str]:
    """What the Kubernetes schemas (1.27, 1.33) and the vendored CRD schemas refuse, one line per object."""
    validator = kubernetes_validate()
    problems = []
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in MONITORING_KINDS:
            problems += [f"{where}: {error}" for error in _crd_errors(obj)]
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                validator.validate(obj, version, strict=True)
            except validator.ValidationError as exc:
                problems.append(f"{where} ({version}): {'.'.join(str(part) for part in exc.path)}: {exc.message}")
    return problems


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_every_mode_operator_and_preset_renders_objects_that_work_together(name: str) -> None:
    """Each combination validates strictly, and renders exactly the objects its modes need, named from the release."""
    mode, operator, _, recording = COMBINATIONS[name]
    objects = _combination(name)
    assert _validate_strictly(objects) == []
    bot, cronjob, replay = ("bot" in mode, "cronjob" in mode, "replay" in mode)
    kinds = [(obj["kind"], obj["metadata"]["name"]) for obj in objects]
    # Every name comes from the release.
    assert all(obj_name.startswith(RELEASE) for _, obj_name in kinds), kinds
    assert (("Deployment", RELEASE) in kinds) is bot
    assert (("CronJob", f"{RELEASE}-post") in kinds) is cronjob
    assert (("CronJob", f"{RELEASE}-replay") in kinds) is replay
    # The claim is the bot's or the CronJob post's; the replay Job keeps its state on an emptyDir.
    assert (("PersistentVolumeClaim", f"{RELEASE}-state") in kinds) is (bot or cronjob)
    pods = _pods(objects)
    for workload, pod in pods.items():
        [state] = [volume for volume in pod["volumes"] if volume["name"] == "state"]
        assert ("emptyDir" in state) is workload.endswith("-replay"), workload
    # Scraped only where there is a /metrics to scrape (the bot); the alerts follow the mode.
    operators = OPERATORS[operator]
    prometheus = "monitoring.prometheusOperator.enabled" in operators
    victoria = "monitoring.victoriaMetricsOperator.enabled" in operators
    assert (("ServiceMonitor", RELEASE) in kinds) is (prometheus and bot)
    assert (("VMServiceScrape", RELEASE) in kinds) is (victoria and bot)
    rules = [
        obj for obj in objects if obj["kind"] in {"PrometheusRule", "VMRule"} and obj["metadata"]["name"] == RELEASE
    ]
    assert len(rules) == (int(prometheus) + int(victoria)) * int(bot or cronjob)
    for rule_object in rules:
        names = _alert_names(rule_object)
        assert ("DigestNotDelivered" in names) is bot
        assert ("DigestMetricsAbsent" in names) is bot
        assert ("DigestCronJobNotSucceeded" in names) is cronjob
        if cronjob:
            text = json.dumps(rule_object["spec"])
            assert f'namespace=\\"{NAMESPACE}\\", cronjob=\\"{RELEASE}-post\\"' in text
            assert "digest-post" not in text.replace(f"{RELEASE}-post", "")
    assert (("VMRule", f"{RELEASE}-log-counts") in kinds) is (recording == "vmalert")
    assert (("ConfigMap", f"{RELEASE}-log-counts") in kinds) is (recording == "loki-ruler")


def test_the_combinations_cover_every_mode_operator_preset_and_recording() -> None:
    """The matrix above holds each mode with each operator and preset, and each recording toggle with each mode."""
    chosen = COMBINATIONS.values()
    assert {(mode, operator, preset) for mode, operator, preset, _ in chosen} == {
        (mode, operator, preset) for mode in MODES for operator in OPERATORS for preset in PRESET_FILES
    }
    assert {(mode, recording) for mode, _, _, recording in chosen} == {
        (mode, recording) for mode in MODES for recording in RECORDING
    }


# values -> the one line `helm template` fails with
REFUSED = {
    "bot and CronJob both post": (
        {"cronjob.enabled": "true"},
        "bot.enabled and cronjob.enabled both post the day to the chats",
    ),
    "nothing runs": ({"bot.enabled": "false"}, "bot.enabled, cronjob.enabled and replay.enabled are all false"),
    "a VMRule any VMAlert would load": (
        {"recordingRules.vmalert.enabled": "true"},
        "recordingRules.vmalert.labels: set the labels only the VictoriaLogs VMAlert",
    ),
    "a credentials Secret without its key": (
        {"backends.metrics.auth.existingSecret": "vm-auth"},
        "backends.metrics.auth.existingSecret needs bearerTokenKey or passwordKey",
    ),
    "a bearer token and a password": (
        {
            "backends.logs.auth.existingSecret": "vl-auth",
            "backends.logs.auth.bearerTokenKey": "token",
            "backends.logs.auth.passwordKey": "password",
        },
        "backends.logs.auth: set bearerTokenKey or passwordKey, not both",
    ),
    "a password without a user": (
        {"backends.logs.auth.existingSecret": "vl-auth", "backends.logs.auth.passwordKey": "password"},
        "backends.logs.auth.passwordKey needs backends.logs.auth.username",
    ),
    "a key without its Secret": (
        {"backends.metrics.auth.bearerTokenKey": "token"},
        "backends.metrics.auth: the keys name a Secret's keys; set backends.metrics.auth.existingSecret",
    ),
    "a time zone that does not exist": ({"timezone": "Europe/Pariss"}, 'timezone: "Europe/Pariss" is not a time zone'),
    "a VMAlert for LogsQL on Loki": (
        {
            "backends.logs.kind": "loki",
            "recordingRules.vmalert.enabled": "true",
            "recordingRules.vmalert.labels.evaluator": "victorialogs",
            "recordingRules.vmalert.createVMAlert": "true",
        },
        "recordingRules.vmalert.createVMAlert reads VictoriaLogs: backends.logs.kind is loki",
    ),
    "a VMAlert without its rules": (
        {"recordingRules.vmalert.createVMAlert": "true"},
        "recordingRules.vmalert.createVMAlert needs recordingRules.vmalert.enabled",
    ),
    "a Slack token without channels": (
        {"channels": "{telegram,slack}", "slack.token": "xoxb-1-2"},
        "slack.token needs slack.channelIds",
    ),
    "Slack by token and by webhooks at once": (
        {"channels": "{telegram,slack}", "slack.channelIds": "C0123ABCD", "slack.webhookUrls": "ops=https://h.test/x"},
        "slack.channelIds and slack.webhookUrls are both set",
    ),
    "a webhook without its URLs": (
        {"channels": "{telegram,webhook}", "webhook.secret": "k"},
        "webhook.urls (or webhook.existingSecret) is required",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_combination_that_cannot_work_is_refused_in_one_line(case: str) -> None:
    """`helm template` fails with one line naming the values, instead of rendering a release that cannot work."""
    values, message = REFUSED[case]
    result = _helm("template", "digest", str(CHART), *REQUIRED, *_sets(values))
    assert result.returncode != 0
    [line] = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert message in line, result.stderr


# --set arguments -> what the schema's refusal names
SCHEMA_REFUSES = {
    "a misspelt key": (("--set", "backend.metrics.url=http://vm:8428"), "additional properties 'backend' not allowed"),
    "a misspelt nested key": (
        ("--set", "backends.metrics.ur=http://vm:8428"),
        "additional properties 'ur' not allowed",
    ),
    "a post time past 23:59": (("--set-string", "postAt=25:00"), "at '/postAt'"),
    "a post time without minutes": (("--set-string", "postAt=12"), "at '/postAt'"),
    "a URL without its scheme": (("--set", "backends.metrics.url=vmsingle:8428"), "at '/backends/metrics/url'"),
    "a link that is no URL": (("--set", "links.vmuiUrl=vm.example.org"), "at '/links/vmuiUrl'"),
    "a log store the digest cannot read": (("--set", "backends.logs.kind=elasticsearch"), "at '/backends/logs/kind'"),
    "a weekday abbreviated": (("--set", "weeklyPost=mon"), "at '/weeklyPost'"),
    "a time zone that is no name": (("--set", "timezone=Paris time"), "at '/timezone'"),
    "a chat id that is no number": (("--set", "telegram.chatIds=ops-chat"), "at '/telegram/chatIds'"),
    "a forum topic that is no number": (("--set", "telegram.chatIds=-1001234567890:general"), "at '/telegram/chatIds'"),
    "a topic for an admin": (("--set", "telegram.adminIds=42:7"), "at '/telegram/adminIds'"),
    "a pull policy misspelt": (("--set", "image.pullPolicy=IfNotPresnt"), "at '/image/pullPolicy'"),
    "a query timeout of 0": (("--set", "backends.queryTimeoutSeconds=0"), "at '/backends/queryTimeoutSeconds'"),
    "a replay day that is no date": (("--set", "replay.from=20-07-2026"), "at '/replay/from'"),
    "a channel the digest has not": (("--set", "channels={telegram,slackk}"), "at '/channels/1'"),
    "a Slack channel that is no id": (("--set", "slack.channelIds=ops room"), "at '/slack/channelIds'"),
    "a Slack token of another kind": (("--set", "slack.token=12345:abc"), "at '/slack/token'"),
    "a webhook URL that is no URL": (("--set", "webhook.urls=ops=hooks.example"), "at '/webhook/urls'"),
}


def test_a_webhook_beside_telegram_reaches_the_settings_and_its_secret_is_mounted() -> None:
    """channels: [telegram, webhook]: DIGEST_CHANNELS, the URL and key files, and a Secret holding them, not the map."""
    objects = _render(
        "--set",
        "channels={telegram,webhook}",
        "--set",
        "webhook.urls=ops=https://hooks.example/x",
        "--set",
        "webhook.secret=signing-key",
    )
    [config] = [obj for obj in objects if obj["kind"] == "ConfigMap" and "DIGEST_CHANNELS" in obj["data"]]
    assert config["data"]["DIGEST_CHANNELS"] == "telegram,webhook"
    assert config["data"]["DIGEST_WEBHOOK_URLS_FILE"] == "/etc/digest/webhook/webhook-urls"
    key_file = "/etc/digest/webhook/webhook-secret"  # a path to the key, not a key
    assert config["data"]["DIGEST_WEBHOOK_SECRET_FILE"] == key_file
    assert "hooks.example" not in str(config)
    assert "signing-key" not in str(config)
    [secret] = [obj for obj in objects if obj["kind"] == "Secret" and obj["metadata"]["name"].endswith("-webhook")]
    assert secret["stringData"] == {"webhook-urls": "ops=https://hooks.example/x", "webhook-secret": "signing-key"}
    [deployment] = [obj for obj in objects if obj["kind"] == "Deployment"]
    volumes = {volume["name"]: volume for volume in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook"]["secret"]["secretName"] == secret["metadata"]["name"]


@pytest.mark.parametrize("mode", ["bot", "cronjob"])
def test_a_webhook_alone_renders_without_any_telegram_setting_or_secret(mode: str) -> None:
    """channels: [webhook], posted by the bot's schedule or the CronJob: no Telegram settings, Secret or volume."""
    workload = ("--set", "bot.enabled=false", "--set", "cronjob.enabled=true") if mode == "cronjob" else ()
    result = _helm(
        "template",
        "digest",
        str(CHART),
        "--set",
        "channels={webhook}",
        "--set",
        "webhook.existingSecret=hooks",
        *workload,
    )
    assert result.returncode == 0, result.stderr
    assert "TELEGRAM" not in result.stdout
    assert "telegram-token" not in result.stdout
    assert "secretName: hooks" in result.stdout


@pytest.mark.parametrize("case", sorted(SCHEMA_REFUSES))
def test_the_values_schema_refuses_typos_and_bad_values(case: str) -> None:
    """values.schema.json refuses a misspelt key or a value the digest would refuse at start, naming where."""
    arguments, expected = SCHEMA_REFUSES[case]
    result = _helm("template", "digest", str(CHART), *REQUIRED, *arguments)
    assert result.returncode != 0
    assert "don't meet the specifications of the schema" in result.stderr, result.stderr
    assert expected in result.stderr, result.stderr


def test_the_values_schema_accepts_every_preset_and_the_documented_forms() -> None:
    """What values.yaml documents passes the schema: the presets, chat ids as a number or with a forum topic."""
    _render("-f", str(PRESETS / "kube-prometheus-stack.yaml"), "--set", "telegram.chatIds=-1001234567890\\,-100987")
    _render("--set", "backends.metrics.url=https://vm.example.org:443/select/0/prometheus", "--set", "postAt=07:05")
    _render("--set", "links.grafana.url=https://grafana.example.org", "--set", "weeklyPost=off")
    rendered = _render("--set", "telegram.chatIds=-1001234567890:77\\,42")
    [configmap] = [doc for doc in rendered if doc["kind"] == "ConfigMap" and "DIGEST_TELEGRAM_CHAT_IDS" in doc["data"]]
    assert configmap["data"]["DIGEST_TELEGRAM_CHAT_IDS"] == "-1001234567890:77,42"  # a forum's topic after its chat


def test_the_time_zones_the_chart_accepts_are_the_ones_the_digest_loads() -> None:
    """files/timezones.txt: IANA names that load here, the usual ones among them; the schema's pattern takes each."""
    import re
    import zoneinfo

    zones = (CHART / "files" / "timezones.txt").read_text().split()
    assert {"UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "Australia/Sydney"} <= set(zones)
    pattern = json.loads((CHART / "values.schema.json").read_text())["properties"]["timezone"]["pattern"]
    for zone in zones:
        assert re.fullmatch(pattern.strip("^$"), zone), zone
    loadable = [zone for zone in zones if zone in zoneinfo.available_timezones()]
    assert len(loadable) >= 0.95 * len(zones)


def test_the_schema_and_the_readme_are_what_chart_files_writes() -> None:
    """values.schema.json and README.md are generated from values.yaml: `scripts/chart-files --check` passes."""
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "chart-files"), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_helm_show_readme_documents_every_value() -> None:
    """`helm show readme` prints the chart's README, with a row for every value values.yaml comments."""
    result = _helm("show", "readme", str(CHART))
    assert result.returncode == 0, result.stderr
    for key in ("image.pullSecrets", "backends.metrics.auth.existingSecret", "nodeSelector", "extraEnvFrom"):
        assert f"| `{key}` |" in result.stdout, key


NODE_TERM = (
    "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]"
)
POD_EXTRAS = {
    "image.pullSecrets[0].name": "registry-credentials",
    "nodeSelector.kubernetes\\.io/arch": "arm64",
    "tolerations[0].key": "dedicated",
    "tolerations[0].operator": "Equal",
    "tolerations[0].value": "monitoring",
    "tolerations[0].effect": "NoSchedule",
    f"{NODE_TERM}.key": "node-role",
    f"{NODE_TERM}.operator": "Exists",
    "podAnnotations.team": "platform",
    "podLabels.cost-center": "ops",
    "extraEnvFrom[0].secretRef.name": "digest-extra",
    "extraVolumes[0].name": "corporate-ca",
    "extraVolumes[0].configMap.name": "corporate-ca",
    "extraVolumeMounts[0].name": "corporate-ca",
    "extraVolumeMounts[0].mountPath": "/etc/ssl/corporate",
    "extraVolumeMounts[0].readOnly": "true",
}


def test_scheduling_pulling_and_extra_settings_reach_every_pod() -> None:
    """pullSecrets, nodeSelector, tolerations, affinity, pod labels, annotations, extra env and volumes: every pod."""
    arguments = [argument for key, value in POD_EXTRAS.items() for argument in ("--set", f"{key}={value}")]
    objects = _render(*arguments, "--set", "replay.enabled=true")
    objects += _render(*arguments, "--set", "bot.enabled=false", "--set", "cronjob.enabled=true")
    assert _validate_strictly(objects) == []
    pods = _pods(objects)
    assert set(pods) == {"digest", "digest-post", "digest-replay"}
    for name, pod in pods.items():
        assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}], name
        assert pod["nodeSelector"] == {"kubernetes.io/arch": "arm64"}, name
        assert pod["tolerations"][0]["key"] == "dedicated", name
        assert "nodeAffinity" in pod["affinity"], name
        assert pod["metadata"]["annotations"]["team"] == "platform", name
        assert pod["metadata"]["labels"]["cost-center"] == "ops", name
        # The chart's own selector labels stay.
        assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "digest", name
        [container] = pod["containers"]
        assert {"secretRef": {"name": "digest-extra"}} in container["envFrom"], name
        assert {"name": "corporate-ca", "mountPath": "/etc/ssl/corporate", "readOnly": True} in container[
            "volumeMounts"
        ], name
        assert {"name": "corporate-ca", "configMap": {"name": "corporate-ca"}} in pod["volumes"], name


def test_backend_credentials_come_from_secrets_as_files_the_digest_reads(tmp_path: Path) -> None:
    """A bearer token and a basic-auth password from existing Secrets: mounted files, no secret in any ConfigMap."""
    objects = _render(
        *_sets(
            {
                "backends.metrics.auth.existingSecret": "vm-auth",
                "backends.metrics.auth.bearerTokenKey": "token",
                "backends.logs.kind": "loki",
                "backends.logs.url": "http://loki-gateway.monitoring.svc:80",
                "backends.logs.auth.existingSecret": "loki-auth",
                "backends.logs.auth.username": "digest",
                "backends.logs.auth.passwordKey": "password",
                "replay.enabled": "true",
            }
        )
    )
    assert _validate_strictly(objects) == []
    [config] = [obj for obj in objects if obj["metadata"]["name"] == "digest-config"]
    data = config["data"]
    assert data["DIGEST_VM_BEARER_TOKEN_FILE"] == "/etc/digest/backends/metrics/bearer-token"  # noqa: S105  # a path
    assert data["DIGEST_LOKI_USERNAME"] == "digest"
    assert data["DIGEST_LOKI_PASSWORD_FILE"] == "/etc/digest/backends/logs/password"  # noqa: S105  # a path
    for name, pod in _pods(objects).items():
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        assert volumes["metrics-credentials"]["secret"]["secretName"] == "vm-auth", name
        assert volumes["metrics-credentials"]["secret"]["items"] == [{"key": "token", "path": "bearer-token"}]
        assert volumes["logs-credentials"]["secret"]["items"] == [{"key": "password", "path": "password"}]
        mounts = {mount["name"]: mount["mountPath"] for mount in pod["containers"][0]["volumeMounts"]}
        assert mounts["metrics-credentials"] == "/etc/digest/backends/metrics", name
        assert mounts["logs-credentials"] == "/etc/digest/backends/logs", name
    # The settings the ConfigMap names are the ones the digest reads: the files' contents become the credentials.
    token, password = tmp_path / "bearer-token", tmp_path / "password"
    token.write_text("vm-secret-token\n")
    password.write_text("loki-secret-password\n")
    settings = load_settings(
        vm_url=data["DIGEST_VM_URL"],
        loki_url=data["DIGEST_LOKI_URL"],
        vm_bearer_token_file=token,
        loki_username=data["DIGEST_LOKI_USERNAME"],
        loki_password_file=password,
    )
    assert settings.vm_bearer_token is not None
    assert settings.vm_bearer_token.get_secret_value() == "vm-secret-token"
    assert settings.loki_password is not None
    assert settings.loki_password.get_secret_value() == "loki-secret-password"
    assert {key.removeprefix("DIGEST_").lower() for key in data} >= {
        "vm_bearer_token_file",
        "loki_username",
        "loki_password_file",
    }
    # Only the files' paths: no credential variable of its own in the ConfigMap.
    assert not [key for key in data if key.endswith(("_TOKEN", "_PASSWORD"))]


def test_the_cronjob_posts_at_post_at_unless_told_otherwise() -> None:
    """The CronJob's schedule defaults to postAt, so the day it posts ends at its own run."""
    rendered = _render(*_sets({"bot.enabled": "false", "cronjob.enabled": "true", "postAt": "07:30"}))
    [cronjob] = [obj for obj in rendered if obj["kind"] == "CronJob"]
    assert cronjob["spec"]["schedule"] == "30 7 * * *"
    assert cronjob["spec"]["timeZone"] == "Europe/Paris"
    rendered = _render(*_sets({"bot.enabled": "false", "cronjob.enabled": "true", "cronjob.schedule": "0 9 * * 1-5"}))
    [cronjob] = [obj for obj in rendered if obj["kind"] == "CronJob"]
    assert cronjob["spec"]["schedule"] == "0 9 * * 1-5"


@pytest.mark.parametrize("mode", sorted(MODES))
def test_notes_say_what_to_do_next_in_each_mode(mode: str) -> None:
    """`helm install` prints NOTES.txt: the commands for this mode, with the release's names and namespace."""
    result = _helm("install", "--dry-run=client", RELEASE, str(CHART), "-n", NAMESPACE, *REQUIRED, *_sets(MODES[mode]))
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert f"installed as {RELEASE} in {NAMESPACE}" in notes
    if "bot" in mode:
        assert f"kubectl -n {NAMESPACE} exec deploy/{RELEASE} -- digest doctor" in notes
    if "cronjob" in mode:
        assert f"create job --from=cronjob/{RELEASE}-post" in notes
    if "replay" in mode:
        assert f"create job --from=cronjob/{RELEASE}-replay" in notes
    assert "{{" not in notes


def test_slack_by_token_reaches_the_settings_with_its_channels_and_its_secret_mounted() -> None:
    """channels: [telegram, slack] with a token: the token file, the channel ids, and the token in a Secret only."""
    objects = _render(
        "--set",
        "channels={telegram,slack}",
        "--set",
        "slack.token=xoxb-1-secret",
        "--set-string",
        "slack.channelIds=C0123ABCD",
    )
    [config] = [obj for obj in objects if obj["kind"] == "ConfigMap" and "DIGEST_CHANNELS" in obj["data"]]
    assert config["data"]["DIGEST_CHANNELS"] == "telegram,slack"
    token_file = "/etc/digest/slack/slack-token"  # noqa: S105  # the path of the mounted key, not a key
    assert config["data"]["DIGEST_SLACK_TOKEN_FILE"] == token_file
    assert config["data"]["DIGEST_SLACK_CHANNEL_IDS"] == "C0123ABCD"
    assert "xoxb-1-secret" not in str(config)
    [secret] = [obj for obj in objects if obj["kind"] == "Secret" and obj["metadata"]["name"].endswith("-slack")]
    assert secret["stringData"] == {"slack-token": "xoxb-1-secret"}

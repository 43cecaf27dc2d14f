"""What `pip install` puts in site-packages: the one package `digest`, no top-level `checks`, `testbed`, `templates`.

The repository keeps the design card's top-level folders; digest/ links to each (tests/test_architecture.py), so the
wheel holds digest.checks, digest.templates and digest.testbed (the demo's corpus and embedded backends) and nothing
that clashes with another project's top-level names. The wheel is built offline from this checkout (no build
isolation: the dev extra brings setuptools and wheel).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP_LEVEL_FOLDERS = ("checks", "templates", "testbed")


# What `pip install .` reads: the metadata and the package (its links, and the folders they name).
SOURCES = ("pyproject.toml", "README.md", "digest", *TOP_LEVEL_FOLDERS)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built once for the module from a copy of its sources.

    A copy, because setuptools builds in the source tree's build/ and never removes from it a module deleted since:
    a wheel built in the checkout could carry files the checkout no longer has.
    """
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, source / name)
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    [path] = out.glob("digest-*.whl")
    return path


def test_the_wheel_installs_digest_alone(wheel: Path) -> None:
    """Every file of the wheel is under digest/ or its .dist-info: no checks/, testbed/ or templates/ at the top."""
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"digest"}


def test_the_wheel_carries_the_checks_the_templates_and_the_demo(wheel: Path) -> None:
    """digest.checks, the Jinja2 templates, the fonts, and the demo's corpus and Loki config ship inside digest."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    expected = {
        "digest/checks/registry.py",
        "digest/templates/digest.html.j2",
        "digest/templates/week.txt.j2",
        "digest/testbed/embedded.py",
        "digest/testbed/loki-local.yaml",
        "digest/testbed/corpus/__init__.py",
    }
    assert expected <= names, expected - names
    assert any(name.startswith("digest/output/fonts/") and name.endswith(".ttf") for name in names)
    assert any(name.startswith("digest/testbed/corpus/") and name.endswith(".md") for name in names)
    checks = {path.name for path in (ROOT / "checks").glob("*.py")}
    assert checks == {name.removeprefix("digest/checks/") for name in names if name.startswith("digest/checks/")}


def test_digest_links_to_the_design_card_s_folders() -> None:
    """digest/checks, digest/templates and digest/testbed are relative links to the top-level folders, nothing else."""
    for folder in TOP_LEVEL_FOLDERS:
        link = ROOT / "digest" / folder
        assert link.is_symlink(), link
        assert str(link.readlink()) == f"../{folder}"


def test_no_code_imports_a_top_level_folder_by_its_own_name() -> None:
    """Nothing imports `checks`, `testbed` or `templates` at the top: installed, only digest.* exists."""
    offending = []
    for folder in ("digest", "checks", "testbed", "tests", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if folder == "digest" and path.relative_to(ROOT / "digest").parts[0] in TOP_LEVEL_FOLDERS:
                continue  # the links: their files are read through the top-level folders
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                offending += [
                    f"{path.relative_to(ROOT)}:{node.lineno} {name}"
                    for name in names
                    if name.split(".")[0] in TOP_LEVEL_FOLDERS
                ]
    assert offending == []

"""The layout's rules, checked on the source: data flows one way through the rooms, and the check list is one list.

Rooms, lowest first: ``digest.checks`` (the signals and their contract) → ``digest.backends`` (HTTP clients) →
``digest.pipeline`` (collect, score, explain, trends, policy, window, state) → ``digest.output`` (render, chart) →
``digest.channels`` (the Channel protocol; Telegram's sender, text and bot) → ``digest.app`` (settings, engine, cli,
serve, replay, and the bot's wiring: its settings view, digest service and hooks). A
module may import its own room and the rooms below it, never one above. ``testbed`` (embedded backends, the corpus)
is development tooling: the product imports it only in ``digest demo``, inside the command.

The repository keeps the design card's folders (``checks/``, ``templates/``, ``testbed/`` at the top); ``digest/``
links to each, so what is installed and imported is ``digest`` alone (``digest.checks``, ``digest.templates``,
``digest.testbed``) and no top-level name of a wheel clashes with another project's.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from digest.checks import registry
from digest.pipeline.policy import Policy

ROOT = Path(__file__).parent.parent
# digest/ links to these top-level folders (the design card's layout): installed, they are digest's subpackages.
LINKED = ("checks", "templates", "testbed")
ROOMS = ("digest.checks", "digest.backends", "digest.pipeline", "digest.output", "digest.channels", "digest.app")


def _room(module: str) -> str | None:
    for room in sorted(ROOMS, key=len, reverse=True):
        if module == room or module.startswith(room + "."):
            return room
    return None


def _modules() -> list[tuple[str, Path]]:
    """Every product module with its file: digest/ and checks/ (as digest.checks), not the testbed nor templates."""
    found = []
    for folder, package in ((ROOT / "checks", ("digest", "checks")), (ROOT / "digest", ("digest",))):
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[0] in LINKED:
                continue  # digest/checks, digest/testbed, digest/templates: links to the top-level folders
            found.append((".".join((*package, *parts)).removesuffix(".__init__"), path))
    return found


def _imports(path: Path) -> list[tuple[str, bool]]:
    """Every module ``path`` imports, with whether the import is at module level (not inside a function)."""
    tree = ast.parse(path.read_text())
    top_level = {id(node) for node in tree.body}
    found: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, id(node) in top_level))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, id(node) in top_level) for alias in node.names)
    return found


def test_every_product_module_lives_in_a_room() -> None:
    """No module of digest/ sits outside the rooms (a new file must choose its room)."""
    homeless = [name for name, _ in _modules() if name != "digest" and _room(name) is None]
    assert homeless == []


def test_imports_never_point_up() -> None:
    """A module imports only its own room and the rooms below it: sources → checks → score → render → deliver."""
    upward = []
    for name, path in _modules():
        mine = _room(name)
        for target, _ in _imports(path):
            theirs = _room(target)
            if mine is not None and theirs is not None and ROOMS.index(theirs) > ROOMS.index(mine):
                upward.append(f"{name} -> {target}")
    assert upward == []


def test_checks_import_nothing_from_digest() -> None:
    """checks/ is the contract the engine depends on; it never imports the engine (nor the testbed)."""
    offending = [
        f"{name} -> {target}"
        for name, path in _modules()
        if name.startswith("digest.checks")
        for target, _ in _imports(path)
        if target.startswith(("digest", "testbed"))
    ]
    assert offending == []


def test_the_product_imports_the_testbed_only_for_the_demo() -> None:
    """testbed/ is development tooling: only `digest demo` (inside the command, not at import time) reaches it."""
    offending = [
        f"{name} -> {target}"
        for name, path in _modules()
        for target, top_level in _imports(path)
        if target.startswith(("testbed", "digest.testbed")) and (top_level or name != "digest.app.cli")
    ]
    assert offending == []


@pytest.mark.parametrize("entry", registry.CHECKS, ids=lambda entry: entry.name)
def test_registry_and_policy_agree(entry: registry.Entry) -> None:
    """Each registered check has its typed policy section, whose penalties say what the registry says of grading."""
    policy = Policy()
    section = getattr(policy, entry.name)
    assert isinstance(section, entry.policy_type)
    assert policy.graded(entry.name) is entry.graded
    assert entry.build(section).name == entry.name


def test_policy_has_no_section_the_registry_does_not_know() -> None:
    """Every section of Policy named like a check is a registered check: one list, not two to keep in step."""
    not_checks = {"caps", "grade", "trends", "coverage", "logs", "acks"}
    sections = {field.name for field in dataclasses.fields(Policy)} - not_checks
    assert sections == set(registry.ORDER)

"""Loaded test backends kept between runs on the same machine: a server's data directory, taken after a full load.

Why: before its first query the test suite spends minutes loading the incident corpus — VictoriaMetrics and
VictoriaLogs ingesting twelve days (the storm day alone is 5 M log lines), promtool backfilling the same days for
Prometheus, Loki taking every line over its push API, and the ablation matrices loading a hundred altered copies.
None of that changes from one run to the next unless the corpus, the loader or the backend binary does. A snapshot is
the data directory of a server that was loaded, checked and stopped cleanly; a later run copies it into its own
temporary directory, starts the server on the copy, and checks the same counts the load waited for (bounded polls),
so a snapshot that does not hold what it should fails loudly instead of serving wrong data.

Keyed by a name and a fingerprint: the sha256 of the files that produce the data (all of ``testbed/`` and, for a
matrix built in a test module, that module), the parameters (the suite's volume scale) and each binary's identity
(resolved path, size, modification time). Any change misses and rebuilds; writing a snapshot removes the older ones
of the same name, so the store holds one per name (a few hundred MB in all).

Where: ``DIGEST_TEST_CACHE`` (a directory), else ``$XDG_CACHE_HOME/digest/test-snapshots``, else
``~/.cache/digest/test-snapshots``: outside the clone, so a fresh clone on the same machine finds them.
``DIGEST_TEST_CACHE=off`` loads everything every run.

Two pytest-xdist workers may want the same snapshot at once: an exclusive ``flock`` per name serialises them, so one
builds while the other waits and then restores. A snapshot is written to a temporary name and renamed into place, so
a run killed mid-write leaves nothing that a later run would take for whole; and it is kept only once the server,
started again on the data it was copied from, shows every count the load waited for.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CACHE_VARIABLE = "DIGEST_TEST_CACHE"
_MANIFEST = "manifest.json"
# Resolved: the testbed is imported through the link digest/testbed, and the names hashed must be relative to the
# clone's root (testbed/…), or every clone would key its snapshots by its own absolute paths and share none.
_TESTBED = Path(__file__).resolve().parent
_REPOSITORY = _TESTBED.parent


# Timings -----------------------------------------------------------------------------------------------------------
# Servers are started from many places in the suite (session fixtures, module fixtures, single tests). The pytest
# plugin in tests/conftest.py listens here to print, at the end of every run, how long starting backends and loading
# data took. Nothing in digest/ or checks/ uses this; without a listener a timing goes nowhere.


@dataclass(frozen=True)
class Timing:
    """One measured step: ``kind`` is "start" (a process until it answers ready) or "load" (data made visible)."""

    kind: str
    what: str
    seconds: float
    how: str = ""  # for a load: "built", "restored" or "uncached"


_listeners: list[Callable[[Timing], None]] = []


def listen(callback: Callable[[Timing], None]) -> Callable[[], None]:
    """Call ``callback`` with every timing from now on; returns the function that stops it."""
    _listeners.append(callback)
    return lambda: _listeners.remove(callback)


def record(kind: str, what: str, seconds: float, how: str = "") -> None:
    """Hand one timing to the listeners."""
    timing = Timing(kind, what, seconds, how)
    for callback in list(_listeners):
        callback(timing)


@contextmanager
def timed(kind: str, what: str, how: str = "") -> Iterator[None]:
    """Record how long the block took (only when it finished without an error)."""
    started = time.monotonic()
    yield
    record(kind, what, time.monotonic() - started, how)


# The store ---------------------------------------------------------------------------------------------------------


def default_root(environ: Mapping[str, str] = os.environ) -> Path | None:
    """Where snapshots live, from the environment; None when caching is off."""
    configured = environ.get(CACHE_VARIABLE, "").strip()
    if configured.lower() in {"off", "0", "no", "false"}:
        return None
    if configured:
        return Path(configured)
    base = environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "digest" / "test-snapshots"


def binary_identity(name: str) -> str:
    """A binary's resolved path, size and modification time: a rebuilt or upgraded binary reads differently."""
    found = shutil.which(name)
    if found is None:
        return f"{name}: missing"
    path = Path(found).resolve()
    stat = path.stat()
    return f"{name}: {path} {stat.st_size} {stat.st_mtime_ns}"


def _files(paths: Iterable[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from sorted(
                item
                for item in path.rglob("*")
                if item.is_file() and "__pycache__" not in item.parts and item.suffix in {".py", ".yaml", ".md"}
            )
        else:
            yield path


def fingerprint(sources: Iterable[Path], *parameters: str) -> str:
    """The sha256 of the sources' contents (files, or every file under a directory), ``testbed/`` and parameters."""
    digest = hashlib.sha256()
    for path in _files([_TESTBED, *sources]):
        # Relative to the clone, so that two clones of one revision share their snapshots.
        resolved = path.resolve()
        name = resolved.relative_to(_REPOSITORY) if resolved.is_relative_to(_REPOSITORY) else resolved
        digest.update(str(name).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    for parameter in parameters:
        digest.update(parameter.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


@dataclass(frozen=True)
class SnapshotKey:
    """Which snapshot: the store's root, a name (one snapshot kept per name) and the fingerprint of its inputs."""

    root: Path
    name: str
    fingerprint: str

    @contextmanager
    def claim(self) -> Iterator[Snapshot]:
        """Hold the name's lock for the block: the snapshot, found or to be saved."""
        folder = self.root / self.name
        folder.mkdir(parents=True, exist_ok=True)
        with (self.root / f"{self.name}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield Snapshot(self, folder / self.fingerprint)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass
class Snapshot:
    """A claimed snapshot: ``found`` when a whole one is there to restore, else the place to save one."""

    key: SnapshotKey
    path: Path
    manifest: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        manifest = self.path / _MANIFEST
        if manifest.is_file():
            self.manifest = json.loads(manifest.read_text())

    @property
    def found(self) -> bool:
        return (self.path / _MANIFEST).is_file()

    def restore(self, part: str, into: Path) -> None:
        """Copy the saved directory ``part`` to ``into`` (which must not exist yet, or be empty)."""
        if into.exists():
            into.rmdir()
        shutil.copytree(self.path / part, into, symlinks=True)

    @contextmanager
    def saving(self, parts: Mapping[str, Path], manifest: Mapping[str, Any]) -> Iterator[None]:
        """Copy each directory (its server stopped) under its part name now; keep the copy if the block succeeds.

        The block starts the servers again on the originals and checks them: a load that does not survive a restart
        is never kept. On success the copy is renamed into place and the name's older snapshots are removed.
        """
        staging = self.path.with_name(f"{self.path.name}.partial-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            for part, directory in parts.items():
                shutil.copytree(directory, staging / part, symlinks=True)
            (staging / _MANIFEST).write_text(json.dumps(dict(manifest), sort_keys=True))
            yield
            shutil.rmtree(self.path, ignore_errors=True)
            staging.rename(self.path)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self.manifest = dict(manifest)
        for other in self.path.parent.iterdir():
            if other != self.path:
                shutil.rmtree(other, ignore_errors=True)


def snapshot_key(name: str, sources: Iterable[Path], *parameters: str, root: Path | None = None) -> SnapshotKey | None:
    """The key of snapshot ``name`` in the store the environment names (None when caching is off)."""
    store = root if root is not None else default_root()
    if store is None:
        return None
    return SnapshotKey(store, name, fingerprint(sources, *parameters))

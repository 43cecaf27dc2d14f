"""The snapshot store that keeps loaded backends between runs (testbed.snapshots), and the end-of-run timings."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from digest.testbed.embedded import EmbeddedBackends, loaded_backends
from digest.testbed.snapshots import SnapshotKey, Timing, default_root, fingerprint, listen
from tests.timings import summary_lines

SERIES = (
    b'{"metric":{"__name__":"up","job":"kube-state-metrics"},'
    b'"values":[1,1],"timestamps":[1784592000000,1784592030000]}\n'
)


def _count_up(backends: EmbeddedBackends) -> int:
    answer = httpx.post(
        f"{backends.metrics.url}/api/v1/query", data={"query": "count(up)", "time": "1784592030"}, timeout=30
    ).json()
    result = answer["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def test_cache_root_follows_the_environment_and_can_be_turned_off(tmp_path: Path) -> None:
    """DIGEST_TEST_CACHE names the store; "off" turns caching off; without it, the user's cache directory."""
    assert default_root({"DIGEST_TEST_CACHE": str(tmp_path)}) == tmp_path
    assert default_root({"DIGEST_TEST_CACHE": "off"}) is None
    assert default_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "digest" / "test-snapshots"


def test_fingerprint_changes_with_a_source_or_a_parameter(tmp_path: Path) -> None:
    """A changed source file or parameter gives another key; the same inputs give the same key."""
    source = tmp_path / "loader.py"
    source.write_text("A = 1\n")
    first = fingerprint([source], "scale=0.05")
    assert fingerprint([source], "scale=0.05") == first
    assert fingerprint([source], "scale=1") != first
    source.write_text("A = 2\n")
    assert fingerprint([source], "scale=0.05") != first


def test_a_snapshot_is_kept_only_when_its_block_succeeds_and_replaces_the_older_one(tmp_path: Path) -> None:
    """A failed check keeps nothing; a good one is found by the next claim; a new key drops the name's older one."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "part").write_text("loaded")
    old = SnapshotKey(tmp_path / "store", "corpus", "old")
    with old.claim() as kept, pytest.raises(RuntimeError), kept.saving({"data": data}, {"lines": 1}):
        raise RuntimeError("the restarted server did not show the counts")
    with old.claim() as kept:
        assert not kept.found
        with kept.saving({"data": data}, {"lines": 1}):
            pass
    with old.claim() as kept:
        assert kept.found
        assert kept.manifest == {"lines": 1}
        restored = tmp_path / "restored"
        kept.restore("data", restored)
        assert (restored / "part").read_text() == "loaded"
    new = SnapshotKey(tmp_path / "store", "corpus", "new")
    with new.claim() as kept, kept.saving({"data": data}, {"lines": 2}):
        pass
    assert sorted(path.name for path in (tmp_path / "store" / "corpus").iterdir()) == ["new"]


def test_loaded_backends_build_once_then_restore_and_check_the_counts(tmp_path: Path) -> None:
    """The first pair loads and saves; the second restores the same data without loading, checked by its counts."""
    key = SnapshotKey(tmp_path, "tiny", "v1")
    timings: list[Timing] = []
    loads: list[int] = []

    def load(backends: EmbeddedBackends) -> dict[str, object]:
        loads.append(1)
        backends.import_series([SERIES])
        return {"up": _count_up(backends)}

    def verify(backends: EmbeddedBackends, manifest: dict[str, object]) -> None:
        assert _count_up(backends) == manifest["up"] == 1

    stop = listen(timings.append)
    try:
        with loaded_backends("tiny", key, load, verify) as backends:
            assert _count_up(backends) == 1
        with loaded_backends("tiny", key, load, verify) as backends:
            assert _count_up(backends) == 1
    finally:
        stop()
    assert loads == [1]
    assert [timing.how for timing in timings if timing.kind == "load"] == ["built", "restored"]
    assert json.loads((tmp_path / "tiny" / "v1" / "manifest.json").read_text()) == {"up": 1}


def test_the_summary_names_every_backend_started_and_every_load() -> None:
    """The end-of-run section counts starts per backend and lists each load with how it was made and where."""
    lines = summary_lines(
        [
            ("gw0", Timing("start", "loki", 0.5)),
            ("gw1", Timing("start", "loki", 0.7)),
            ("gw0", Timing("load", "12 days: Loki (push API)", 54.0, "built")),
            ("gw1", Timing("load", "12 days: Loki (push API)", 7.1, "restored")),
        ]
    )
    assert lines[0] == "starting backends: 1.2 s in 2 starts; loading data: 61.1 s"
    assert "  start loki: 2 starts, 1.2 s in all, slowest 0.7 s" in lines
    assert lines[-2:] == [
        "  load 12 days: Loki (push API) (built, gw0): 54.0 s",
        "  load 12 days: Loki (push API) (restored, gw1): 7.1 s",
    ]
    assert summary_lines([]) == ["no backend was started"]

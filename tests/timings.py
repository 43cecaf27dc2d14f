"""A pytest plugin: at the end of every run, the time spent starting backends and loading data, and where it went.

The servers report each start (process launched until it answers ready) and each load (data made visible: built
and saved as a snapshot, restored from one, or loaded uncached) through ``testbed.snapshots``. Under pytest-xdist
each worker sends its list to the controller when it finishes, and the controller prints one summary for the run;
without xdist the one process prints its own. The 15 slowest tests come from pytest's ``--durations`` (set in
pyproject.toml).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict

import pytest

from digest.testbed.snapshots import Timing, listen

_KEY = "digest_backend_timings"


class _Recorder:
    """The timings of this process, and those the workers sent (controller only)."""

    def __init__(self) -> None:
        self.timings: list[tuple[str, Timing]] = []
        self.stop_listening: Callable[[], None] | None = None
        self.worker = "main"

    def add(self, timing: Timing) -> None:
        self.timings.append((self.worker, timing))


_RECORDER_KEY = pytest.StashKey[_Recorder]()


def pytest_configure(config: pytest.Config) -> None:
    recorder = _Recorder()
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        recorder.worker = str(workerinput.get("workerid", "worker"))
    recorder.stop_listening = listen(recorder.add)
    config.stash[_RECORDER_KEY] = recorder
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistController(recorder), "digest-timings-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    recorder = config.stash.get(_RECORDER_KEY, None)
    if recorder is not None and recorder.stop_listening is not None:
        recorder.stop_listening()


def pytest_sessionfinish(session: pytest.Session) -> None:
    recorder = session.config.stash.get(_RECORDER_KEY, None)
    workeroutput = getattr(session.config, "workeroutput", None)
    if recorder is not None and workeroutput is not None:
        workeroutput[_KEY] = json.dumps([asdict(timing) for _, timing in recorder.timings])


class _XdistController:
    """Takes each worker's timings as it goes down (the hook exists only where pytest-xdist is installed)."""

    def __init__(self, recorder: _Recorder) -> None:
        self.recorder = recorder

    def pytest_testnodedown(self, node: object, error: object) -> None:  # xdist's hook signature
        output = getattr(node, "workeroutput", {}) or {}
        worker = str(output.get("workerid", getattr(getattr(node, "gateway", None), "id", "worker")))
        for item in json.loads(output.get(_KEY, "[]")):
            self.recorder.timings.append((worker, Timing(**item)))


def summary_lines(timings: list[tuple[str, Timing]]) -> list[str]:
    """The summary's lines: starts by backend (count, total, slowest), then each load with how it was made."""
    if not timings:
        return ["no backend was started"]
    starts: dict[str, list[float]] = defaultdict(list)
    for _, timing in timings:
        if timing.kind == "start":
            starts[timing.what].append(timing.seconds)
    loads = [(worker, timing) for worker, timing in timings if timing.kind == "load"]
    started = sum(sum(seconds) for seconds in starts.values())
    loaded = sum(timing.seconds for _, timing in loads)
    lines = [
        f"starting backends: {started:.1f} s in {sum(map(len, starts.values()))} starts; loading data: {loaded:.1f} s"
    ]
    for what, seconds in sorted(starts.items(), key=lambda item: -sum(item[1])):
        lines.append(
            f"  start {what}: {len(seconds)} starts, {sum(seconds):.1f} s in all, slowest {max(seconds):.1f} s"
        )
    for worker, timing in sorted(loads, key=lambda item: -item[1].seconds):
        lines.append(f"  load {timing.what} ({timing.how}, {worker}): {timing.seconds:.1f} s")
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is not None:
        return  # a worker's summary goes to the controller, which prints the run's
    recorder = config.stash.get(_RECORDER_KEY, None)
    if recorder is None:
        return
    terminalreporter.write_sep("=", "backends started and data loaded")
    for line in summary_lines(recorder.timings):
        terminalreporter.write_line(line)

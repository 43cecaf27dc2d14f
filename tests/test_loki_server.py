"""The real Loki test server (testbed/loki_server.py): it starts, takes corpus days exactly, and stops by PID.

Without a Loki binary (``DIGEST_LOKI_BINARY`` or ``loki`` on PATH) the tests that need one are skipped with a reason
naming the variable, or fail when ``DIGEST_REQUIRE_LOKI=1`` (CI) says Loki must be there.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterator

import pytest

from digest.testbed.corpus import DAYS
from digest.testbed.loki_server import (
    BINARY_VARIABLE,
    REQUIRE_VARIABLE,
    LokiError,
    LokiServer,
    LokiUnavailable,
    find_loki_binary,
    loki_binary_or_skip,
)

# Two light days whose pods keep their names from one day to the next (shop/api, feeds/…), given newest first:
# push_days must put them in order or Loki refuses the older day's entries as "too far behind".
NEWER, OLDER = dt.date(2026, 9, 8), dt.date(2026, 7, 19)


@pytest.fixture(scope="module")
def loaded_loki() -> Iterator[LokiServer]:
    """One Loki holding two corpus days, pushed through push_days."""
    loki_binary_or_skip()
    with LokiServer() as loki:
        loki.push_days([DAYS[NEWER], DAYS[OLDER]])
        yield loki


def _records_per_namespace(day: dt.date) -> Counter[str]:
    counts: Counter[str] = Counter()
    for chunk in DAYS[day].log_chunks():
        for line in chunk.splitlines():
            counts[json.loads(line)["kubernetes"]["pod_namespace"]] += 1
    return counts


@pytest.mark.parametrize("day", [OLDER, NEWER])
def test_a_pushed_day_counts_exactly_its_records_per_namespace(loaded_loki: LokiServer, day: dt.date) -> None:
    """Loki's count per namespace over a pushed day equals the corpus records of that namespace, line for line."""
    expected = _records_per_namespace(day)
    end = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
    response = loaded_loki.client.get(
        "/loki/api/v1/query",
        params={
            "query": 'sum by (namespace) (count_over_time({namespace=~".+"}[24h]))',
            "time": str(int(end.timestamp())),
        },
    )
    assert response.status_code == 200, response.text
    seen = {sample["metric"]["namespace"]: int(sample["value"][1]) for sample in response.json()["data"]["result"]}
    assert seen == dict(expected)
    assert sum(seen.values()) == DAYS[day].log_line_count()


def test_push_day_reports_what_it_pushed(loaded_loki: LokiServer) -> None:
    """push_days pushed the days oldest first and each report matches the corpus count."""
    assert [pushed.date for pushed in loaded_loki.pushed] == [OLDER.isoformat(), NEWER.isoformat()]
    for pushed in loaded_loki.pushed:
        assert pushed.lines == DAYS[dt.date.fromisoformat(pushed.date)].log_line_count()
        assert sum(pushed.lines_by_namespace.values()) == pushed.lines


def test_level_is_structured_metadata_not_a_label(loaded_loki: LokiServer) -> None:
    """A record's level arrives as structured metadata (filterable), and no stream has a level label."""
    start = dt.datetime.combine(OLDER, dt.time(), tzinfo=dt.UTC)
    end = start + dt.timedelta(days=1)
    labels = loaded_loki.client.get(
        "/loki/api/v1/labels", params={"start": str(int(start.timestamp())), "end": str(int(end.timestamp()))}
    ).json()["data"]
    assert {"namespace", "pod", "container", "node_name", "stream"} <= set(labels)
    assert "level" not in labels
    expected = sum(
        1
        for chunk in DAYS[OLDER].log_chunks()
        for line in chunk.splitlines()
        if json.loads(line).get("level") == "info"
    )
    assert expected > 0
    assert loaded_loki.count_lines(start, end, '{namespace=~".+"} | level="info"') == expected


def test_stop_leaves_no_process_and_no_data_directory() -> None:
    """After stop() the Loki PID no longer exists and its data directory and (clean run) log are gone."""
    loki_binary_or_skip()
    loki = LokiServer().start()
    pid, root, log_path = loki.pid, loki.root, loki.log_path
    assert root is not None
    assert root.exists()
    loki.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not root.exists()
    assert log_path is not None
    assert not log_path.exists()


def test_a_failed_start_quotes_and_keeps_the_log() -> None:
    """Loki exiting at start (a bad flag) raises an error quoting its log's tail; the log is kept, the data removed."""
    loki_binary_or_skip()
    loki = LokiServer(extra_args=("-no-such-flag=1",))
    with pytest.raises(LokiError, match="exited at start") as raised:
        loki.start()
    assert "no-such-flag" in str(raised.value)
    assert "\n" not in str(raised.value)
    assert loki.process is None
    assert loki.root is None
    assert loki.log_path is not None
    assert loki.log_path.exists()
    assert str(loki.log_path) in str(raised.value)
    loki.log_path.unlink()


def test_missing_binary_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """With no Loki anywhere, starting fails with one line naming DIGEST_LOKI_BINARY and scripts/install-backends."""
    monkeypatch.delenv(BINARY_VARIABLE, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a data directory and a log would be made
    with pytest.raises(LokiUnavailable) as raised:
        LokiServer().start()
    message = str(raised.value)
    assert "\n" not in message
    assert BINARY_VARIABLE in message
    assert "scripts/install-backends" in message
    assert not list(tmp_path.glob("digest-loki-*")), "nothing is made before the binary is found"


def test_a_variable_naming_no_file_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """DIGEST_LOKI_BINARY pointing nowhere is reported, in one line, rather than falling back to PATH."""
    monkeypatch.setenv(BINARY_VARIABLE, str(tmp_path / "no-such-loki"))
    with pytest.raises(LokiUnavailable) as raised:
        find_loki_binary()
    assert "\n" not in str(raised.value)
    assert f"{BINARY_VARIABLE}={tmp_path / 'no-such-loki'}" in str(raised.value)


def test_without_loki_the_tests_skip_naming_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """No Loki: the Loki tests are skipped with a reason naming DIGEST_LOKI_BINARY."""
    monkeypatch.delenv(BINARY_VARIABLE, raising=False)
    monkeypatch.delenv(REQUIRE_VARIABLE, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BaseException) as outcome:  # noqa: PT011  # the type is asserted just below
        loki_binary_or_skip()
    assert outcome.type is pytest.skip.Exception
    assert BINARY_VARIABLE in str(outcome.value)


def test_without_loki_the_tests_fail_when_loki_is_required(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """No Loki and DIGEST_REQUIRE_LOKI=1 (CI): the Loki tests fail instead of skipping."""
    monkeypatch.delenv(BINARY_VARIABLE, raising=False)
    monkeypatch.setenv(REQUIRE_VARIABLE, "1")
    monkeypatch.setenv("PATH", str(tmp_path))
    # A skip is an exception too, and one escaping would skip this test instead of failing it: catch any outcome.
    with pytest.raises(BaseException) as outcome:  # noqa: PT011  # the type is asserted just below
        loki_binary_or_skip()
    assert outcome.type is pytest.fail.Exception
    assert BINARY_VARIABLE in str(outcome.value)
    assert REQUIRE_VARIABLE in str(outcome.value)

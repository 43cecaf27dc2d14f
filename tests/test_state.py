"""Delivery state: one post per (chat, key) across restarts and a second instance; failures recorded."""

from __future__ import annotations

import random
import sqlite3
import threading
from pathlib import Path

import pytest

from digest.channels.state import DeliveryState, DeliveryStatus
from digest.pipeline.state import StateError


def test_sent_delivery_is_never_claimed_again(tmp_path: Path) -> None:
    """After mark_sent, neither this process nor a restarted one can claim the same delivery."""
    path = tmp_path / "state.sqlite"
    first = DeliveryState(path, "a")
    assert first.claim(1, "daily:2026-07-20", lease_seconds=60)
    first.mark_sent(1, "daily:2026-07-20", [10, 11], late=False)
    assert not first.claim(1, "daily:2026-07-20", lease_seconds=60)
    first.close()
    restarted = DeliveryState(path, "b")
    assert not restarted.claim(1, "daily:2026-07-20", lease_seconds=60)
    delivery = restarted.get(1, "daily:2026-07-20")
    assert delivery is not None
    assert delivery.status is DeliveryStatus.SENT


def test_second_instance_cannot_take_a_live_lease(tmp_path: Path) -> None:
    """A delivery being sent by one instance is not claimable by another until its lease expires."""
    path = tmp_path / "state.sqlite"
    one, two = DeliveryState(path, "one"), DeliveryState(path, "two")
    assert one.claim(5, "k", lease_seconds=60, now=1000.0)
    assert not two.claim(5, "k", lease_seconds=60, now=1010.0)
    # The holder died: after the lease, the other instance takes over.
    assert two.claim(5, "k", lease_seconds=60, now=1061.0)


def test_a_live_lease_is_refused_to_its_own_owner_too(tmp_path: Path) -> None:
    """Two tasks of one process claiming the same delivery: the second is refused until the lease runs out."""
    state = DeliveryState(tmp_path / "state.sqlite", "one")
    assert state.claim(5, "k", lease_seconds=60, now=1000.0)
    assert not state.claim(5, "k", lease_seconds=60, now=1001.0)
    state.mark_failed(5, "k", "interrupted: the process stopped", False)
    assert state.claim(5, "k", lease_seconds=60, now=1002.0)  # released: free at once
    assert state.claim(5, "k", lease_seconds=60, now=1063.0)  # a lease that ran out: free again


def test_concurrent_claims_have_one_winner(tmp_path: Path) -> None:
    """Eight instances racing for one delivery: exactly one wins."""
    path = tmp_path / "state.sqlite"
    DeliveryState(path, "init").close()
    wins: list[bool] = []
    barrier = threading.Barrier(8)

    def race(index: int) -> None:
        state = DeliveryState(path, f"owner-{index}")
        barrier.wait()
        wins.append(state.claim(7, "daily:2026-07-20", lease_seconds=60))
        state.close()

    threads = [threading.Thread(target=race, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wins.count(True) == 1


def test_transient_failure_is_retried_permanent_is_not(tmp_path: Path) -> None:
    """A transient failure can be claimed again; a permanent one cannot."""
    state = DeliveryState(tmp_path / "state.sqlite", "a")
    assert state.claim(1, "k1", lease_seconds=60)
    state.mark_failed(1, "k1", "timeout", permanent=False)
    assert state.claim(1, "k1", lease_seconds=60)
    assert state.claim(2, "k2", lease_seconds=60)
    state.mark_failed(2, "k2", "Forbidden: bot was blocked by the user", permanent=True)
    assert not state.claim(2, "k2", lease_seconds=60)
    failed = state.get(2, "k2")
    assert failed is not None
    assert failed.permanent
    assert failed.error == "Forbidden: bot was blocked by the user"


def test_chat_migration_is_followed(tmp_path: Path) -> None:
    """A recorded group → supergroup move redirects later posts to the new id."""
    state = DeliveryState(tmp_path / "state.sqlite", "a")
    state.record_move(-100, -1001234)
    assert state.current("-100") == "-1001234"
    assert state.current("42") == "42"


def test_wal_mode(tmp_path: Path) -> None:
    """The state file runs in WAL mode, so readers never block the writer."""
    path = tmp_path / "state.sqlite"
    DeliveryState(path, "a").close()
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_corrupt_state_file_is_a_clear_error(tmp_path: Path) -> None:
    """A file that is not SQLite raises StateError naming the file."""
    path = tmp_path / "state.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StateError, match=r"state\.sqlite"):
        DeliveryState(path, "a")


def _filled_state_file(path: Path) -> None:
    """A real state file a few dozen pages long, its WAL folded in."""
    state = DeliveryState(path, "filler")
    for chat in range(200):
        state.claim(chat, "2026-07-20", lease_seconds=60)
        state.mark_failed(chat, "2026-07-20", "x" * 200, permanent=False)
    state.close()
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()


def test_a_state_file_with_damaged_pages_is_refused_at_open(tmp_path: Path) -> None:
    """Valid header, random pages after it: refused when opened (exit 2), not found out after a message went out."""
    path = tmp_path / "state.sqlite"
    _filled_state_file(path)
    data = bytearray(path.read_bytes())
    data[2 * 4096 :] = random.Random(7).randbytes(len(data) - 2 * 4096)  # noqa: S311  # repeatable damage, not a secret
    path.write_bytes(bytes(data))
    with pytest.raises(StateError, match="damaged") as refused:
        DeliveryState(path, "t")
    assert not refused.value.busy


@pytest.mark.parametrize(
    "foreign",
    [
        "CREATE TABLE deliveries (chat_id INTEGER, key TEXT, status TEXT)",
        "CREATE TABLE other (x); CREATE VIEW deliveries AS SELECT x AS chat_id FROM other",
    ],
    ids=["older-columns", "a-view"],
)
def test_a_state_file_of_a_foreign_schema_is_refused_at_open(tmp_path: Path, foreign: str) -> None:
    """A deliveries table without digest's columns, or a view in its place, is refused before the bot looks ready."""
    path = tmp_path / "state.sqlite"
    connection = sqlite3.connect(path)
    connection.executescript(foreign)
    connection.close()
    with pytest.raises(StateError, match=r"not (digest.s schema|a table)"):
        DeliveryState(path, "t")


# The schema of state files written before rows were keyed by (channel, recipient): integer Telegram chat ids.
_INTEGER_ID_SCHEMA = """
CREATE TABLE deliveries (
    chat_id INTEGER NOT NULL, key TEXT NOT NULL, status TEXT NOT NULL, owner TEXT NOT NULL, lease_until REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0, updated_at REAL NOT NULL, sent_at REAL, late INTEGER NOT NULL DEFAULT 0,
    error TEXT, permanent INTEGER NOT NULL DEFAULT 0, message_ids TEXT, PRIMARY KEY (chat_id, key)
);
CREATE TABLE delivery_parts (
    chat_id INTEGER NOT NULL, key TEXT NOT NULL, part INTEGER NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL,
    data BLOB, filename TEXT, message_id INTEGER, sent_at REAL, PRIMARY KEY (chat_id, key, part)
);
CREATE TABLE chat_moves (old_chat_id INTEGER PRIMARY KEY, new_chat_id INTEGER NOT NULL, moved_at REAL NOT NULL);
INSERT INTO deliveries VALUES (-1001234, 'daily:2026-07-20', 'sent', 'old', 0, 1, 100, 100, 0, NULL, 0, '7,8');
INSERT INTO deliveries VALUES (-1001234, 'daily:2026-07-21', 'failed', 'old', 0, 1, 200, NULL, 0, 'x', 0, NULL);
INSERT INTO delivery_parts VALUES (-1001234, 'daily:2026-07-21', 1, 'text', '(1/2) first', NULL, NULL, 9, 200);
INSERT INTO delivery_parts VALUES (-1001234, 'daily:2026-07-21', 2, 'text', '(2/2) second', NULL, NULL, NULL, NULL);
INSERT INTO chat_moves VALUES (-100, -1001234, 50);
"""


def test_a_state_file_of_integer_chat_ids_is_rekeyed_in_place_and_nothing_is_sent_twice(tmp_path: Path) -> None:
    """An older file opens migrated: its sent day stays sent, a half-sent day keeps its parts, moves are followed."""
    path = tmp_path / "state.sqlite"
    connection = sqlite3.connect(path)
    connection.executescript(_INTEGER_ID_SCHEMA)
    connection.close()
    state = DeliveryState(path, "new")
    assert not state.claim("-1001234", "daily:2026-07-20", lease_seconds=60)
    sent = state.get("-1001234", "daily:2026-07-20")
    assert sent is not None
    assert (sent.status, sent.recipient) == (DeliveryStatus.SENT, "-1001234")
    assert state.claim("-1001234", "daily:2026-07-21", lease_seconds=60)
    assert [(part.text, part.message_id) for part in state.parts("-1001234", "daily:2026-07-21")] == [
        ("(1/2) first", 9),
        ("(2/2) second", None),
    ]
    assert state.current("-100") == "-1001234"
    state.close()
    tables = {row[0] for row in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"deliveries", "delivery_parts", "part_sends", "recipient_moves", "state_facts"}
    DeliveryState(path, "again").close()  # opening a migrated file again changes nothing


def test_recipients_that_are_not_integers_and_other_channels_share_the_file(tmp_path: Path) -> None:
    """A Telegram "@name" chat and another channel's recipient of the same key are separate deliveries."""
    path = tmp_path / "state.sqlite"
    telegram = DeliveryState(path, "a")
    webhook = DeliveryState(path, "a", channel="webhook")
    assert telegram.claim("@ops_digest", "daily:2026-07-20", lease_seconds=60)
    telegram.mark_sent("@ops_digest", "daily:2026-07-20", [1], late=False)
    assert webhook.claim("@ops_digest", "daily:2026-07-20", lease_seconds=60)  # same name, another channel
    assert not telegram.claim("@ops_digest", "daily:2026-07-20", lease_seconds=60)
    assert [delivery.recipient for delivery in telegram.latest("@ops_digest")] == ["@ops_digest"]


def test_the_first_use_is_stored_once_and_kept_across_reopens(tmp_path: Path) -> None:
    """first_used() records the first time it is asked and returns that time ever after, in a reopened file too."""
    path = tmp_path / "state.sqlite"
    state = DeliveryState(path, owner="a")
    assert state.first_used(1000.0) == 1000.0
    assert state.first_used(2000.0) == 1000.0
    state.close()
    again = DeliveryState(path, owner="b")
    assert again.first_used(3000.0) == 1000.0
    again.close()

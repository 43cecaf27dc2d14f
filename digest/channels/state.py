"""Delivery state in SQLite: each (channel, recipient, key) is posted once, across restarts, crashes, a 2nd instance.

Rows are keyed by the channel's name and the recipient as text: Telegram's chat ids ("-1001234", or a channel's
"@name", which the Bot API accepts too) and any later channel's addresses share one file.

Protocol: a sender first *claims* the delivery (an atomic insert-or-take-over under ``BEGIN IMMEDIATE``), then
computes and sends, then records the outcome. A claim is a lease: if its holder dies, the lease expires and another
run may take the delivery over; a delivery already ``sent`` is never claimed again.

A delivery is made of *parts*: the digest split into messages ("(1/3)", "(2/3)"…) and the chart photo last. Right
after the first claim, the parts' content is stored with it (`store_parts`), and each part is recorded with its
Telegram message id as soon as Telegram accepts it (`mark_part_sent`). A later claim of the same delivery (a retry,
a rerun of the CronJob, another instance after the lease) sends only the parts not yet accepted, *from the stored
content*, never from a recomputation: a digest recomputed later could split differently (other wording, another
number of parts), and a chat must never read "(1/2)" of one text followed by "(2/3)" of another. The parts' rows are
deleted when the whole delivery is recorded ``sent`` (its ``message_ids`` keep every part's id), so the file holds
content only for deliveries still owed.

The one window that cannot be closed without help from Telegram is a crash between Telegram accepting a part and its
write here — the lease makes that a rare duplicate *of that one part* after a crash, never a silent loss.

Schema changes are additive (``CREATE TABLE IF NOT EXISTS``), so a state file written by an older version opens
as is: its deliveries simply have no stored parts, and a claim of one of them stores its parts then. The one change
that was not additive, integer chat ids becoming (channel, recipient) text keys, is migrated in place when the file
is opened (`_migrate_integer_chat_ids`): a delivery sent before the upgrade stays sent.

SQLite runs in WAL mode (readers never block the writer) with ``synchronous=NORMAL``; each write is its own short
transaction, and no transaction is ever held across network I/O (the lesson of seed 001's lock cascade).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from digest.pipeline.state import StateError, connect, file_identity, state_error

log = logging.getLogger(__name__)


# The channel whose deliveries a state file held before rows were keyed by channel (all of them Telegram's).
TELEGRAM = "telegram"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
    channel      TEXT    NOT NULL,
    recipient    TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    owner        TEXT    NOT NULL,
    lease_until  REAL    NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    updated_at   REAL    NOT NULL,
    sent_at      REAL,
    late         INTEGER NOT NULL DEFAULT 0,
    error        TEXT,
    permanent    INTEGER NOT NULL DEFAULT 0,
    message_ids  TEXT,
    PRIMARY KEY (channel, recipient, key)
);
-- One row per part of a delivery still owed: its content (text: one message in the channel's format, photo: the
-- caption, with the PNG in data), and the message id once the channel accepted it. No semicolon in comments: the
-- migration runs this schema statement by statement, inside its transaction.
CREATE TABLE IF NOT EXISTS delivery_parts (
    channel      TEXT    NOT NULL,
    recipient    TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    part         INTEGER NOT NULL,
    kind         TEXT    NOT NULL,
    text         TEXT    NOT NULL,
    data         BLOB,
    filename     TEXT,
    message_id   INTEGER,
    sent_at      REAL,
    PRIMARY KEY (channel, recipient, key, part)
);
-- Sends of a part begun without a definite answer yet: counted up before each send, down when the channel answered
-- that it did not take it, dropped with the parts. A count left over means the part may have arrived (an answer lost,
-- a process killed while waiting): a later attempt resends a text part once at most and a chart never.
CREATE TABLE IF NOT EXISTS part_sends (
    channel      TEXT    NOT NULL,
    recipient    TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    part         INTEGER NOT NULL,
    unanswered   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (channel, recipient, key, part)
);
-- Facts about the file itself: `first_used`, the Unix time the first bot opened it (the install, for the alert on a
-- bot that never delivered: deploy/alerts.yaml).
CREATE TABLE IF NOT EXISTS state_facts (
    name   TEXT PRIMARY KEY,
    value  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS recipient_moves (
    channel        TEXT NOT NULL,
    old_recipient  TEXT NOT NULL,
    new_recipient  TEXT NOT NULL,
    moved_at       REAL NOT NULL,
    PRIMARY KEY (channel, old_recipient)
);
"""

# The tables as they were when every recipient was a Telegram chat's integer id, and how their rows are copied.
_INTEGER_ID_DELIVERIES = {
    "chat_id", "key", "status", "owner", "lease_until", "attempts", "updated_at", "sent_at", "late", "error",
    "permanent", "message_ids",
}  # fmt: skip
_COPY_INTEGER_IDS = {
    "deliveries": (
        "INSERT INTO deliveries (channel, recipient, key, status, owner, lease_until, attempts, updated_at, sent_at, "
        "late, error, permanent, message_ids) SELECT ?, CAST(chat_id AS TEXT), key, status, owner, lease_until, "
        "attempts, updated_at, sent_at, late, error, permanent, message_ids FROM deliveries_integer_ids"
    ),
    "delivery_parts": (
        "INSERT INTO delivery_parts (channel, recipient, key, part, kind, text, data, filename, message_id, sent_at) "
        "SELECT ?, CAST(chat_id AS TEXT), key, part, kind, text, data, filename, message_id, sent_at "
        "FROM delivery_parts_integer_ids"
    ),
}


def _columns(connection: sqlite3.Connection, table: str) -> set[str]:
    return {str(row[1]) for row in connection.execute(f"PRAGMA table_info({table})")}


def _migrate_integer_chat_ids(connection: sqlite3.Connection) -> None:
    """Rekey a state file written when recipients were Telegram's integer chat ids: same rows, channel "telegram".

    One transaction: a second process opening the file meanwhile waits, then finds it migrated. A ``deliveries``
    table without all the old columns is not ours and is left for `_unusable` to refuse. A file already migrated is
    only read: opening the state never takes the write lock another instance may hold.
    """
    if not _columns(connection, "deliveries") >= _INTEGER_ID_DELIVERIES:
        return
    connection.execute("BEGIN IMMEDIATE")
    try:
        if not _columns(connection, "deliveries") >= _INTEGER_ID_DELIVERIES:
            connection.execute("ROLLBACK")
            return
        for table in _COPY_INTEGER_IDS:
            if _columns(connection, table):
                connection.execute(f"ALTER TABLE {table} RENAME TO {table}_integer_ids")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                connection.execute(statement)
        for table, copy in _COPY_INTEGER_IDS.items():
            if _columns(connection, f"{table}_integer_ids"):  # a file older than the parts table has none
                connection.execute(copy, (TELEGRAM,))
                connection.execute(f"DROP TABLE {table}_integer_ids")
        if _columns(connection, "chat_moves"):
            connection.execute(
                "INSERT OR REPLACE INTO recipient_moves (channel, old_recipient, new_recipient, moved_at) "
                "SELECT ?, CAST(old_chat_id AS TEXT), CAST(new_chat_id AS TEXT), moved_at FROM chat_moves",
                (TELEGRAM,),
            )
            connection.execute("DROP TABLE chat_moves")
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


_BUSY_TIMEOUT_SECONDS = 30.0


class DeliveryStatus(StrEnum):
    """Where one delivery stands."""

    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"


class PartKind(StrEnum):
    """What one part of a delivery is."""

    TEXT = "text"  # one message of the split digest, in Telegram HTML
    PHOTO = "photo"  # the chart: ``text`` is its caption, ``data`` the PNG


@dataclass(frozen=True)
class Part:
    """One message of a delivery, numbered from 1 in sending order; ``message_id`` once Telegram accepted it."""

    index: int
    kind: PartKind
    text: str
    data: bytes | None = None
    filename: str | None = None
    message_id: int | None = None


@dataclass(frozen=True)
class Delivery:
    """One row of the delivery table."""

    recipient: str
    key: str
    status: DeliveryStatus
    attempts: int
    updated_at: float
    sent_at: float | None
    late: bool
    error: str | None
    permanent: bool
    lease_until: float = 0.0  # while ``sending``: when its holder's claim runs out unless renewed (unix seconds)


class DeliveryState:
    """One channel's deliveries in the SQLite state file; every method is a short transaction of its own.

    Rows are keyed by (channel, recipient, key): a recipient is whatever the channel addresses (a Telegram chat id
    "-1001234" or "@ops_digest", a webhook's name), so a channel whose ids are not integers fits the same file. One
    instance per process and channel.
    """

    def __init__(
        self,
        path: Path,
        owner: str,
        busy_timeout_seconds: float = _BUSY_TIMEOUT_SECONDS,
        channel: str = TELEGRAM,
    ) -> None:
        self._path = path
        self._owner = owner
        self._channel = channel
        # One connection, used from the bot's worker threads (asyncio.to_thread): one statement or transaction at a
        # time, or two threads' BEGIN … COMMIT would interleave on it.
        self._lock = threading.RLock()
        self._connection = connect(path, _SCHEMA, busy_timeout_seconds, migrate=_migrate_integer_chat_ids)
        self._busy_timeout_seconds = busy_timeout_seconds
        self._identity = file_identity(path)

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def check_identity(self) -> None:
        """Make sure the file at the path is the one opened; `StateError` if it was replaced by another.

        SQLite keeps writing to the open (perhaps deleted) inode: a bot whose state file went away under it would
        record deliveries nobody reads, and after a restart post the day again. A file deleted (a cleanup script, a
        mistaken ``rm``) is written back from the open copy, whole, and the bot goes on; a file *replaced* by another
        is someone's deliberate choice the bot cannot second-guess: nothing is written until it is restarted.
        """
        now = file_identity(self._path)
        if now is None:
            self._restore()
            return
        if now != self._identity:
            raise StateError(
                f"state file {self._path}: replaced while in use; restart to open the state again", replaced=True
            )

    def _restore(self) -> None:
        """Write the open copy of a deleted state file back to its path and use it from now on."""
        try:
            copy = sqlite3.connect(self._path)
            try:
                self._connection.backup(copy)
            finally:
                copy.close()
            # Opened again the way every state file is (WAL, busy timeout, schema checked).
            restored = connect(self._path, _SCHEMA, self._busy_timeout_seconds)
        except (sqlite3.Error, OSError, StateError) as exc:
            raise StateError(
                f"state file {self._path}: deleted while in use and could not be written back ({exc}); restart "
                "to open the state again",
                replaced=True,
            ) from None
        self._connection.close()
        self._connection = restored
        self._identity = file_identity(self._path)
        log.warning("state file %s was deleted while in use: written back from the open copy", self._path)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self.check_identity()
            with self._transaction() as connection:
                yield connection

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        try:
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                yield self._connection
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
            self._connection.execute("COMMIT")
        except sqlite3.Error as exc:
            raise state_error(self._path, exc) from None

    def claim(self, recipient: str, key: str, lease_seconds: float, now: float | None = None) -> bool:
        """Take the delivery of ``key`` to ``recipient``; False if it was sent, or any owner's live lease holds it."""
        moment = time.time() if now is None else now
        with self._write() as db:
            row = db.execute(
                "SELECT status, lease_until, permanent FROM deliveries WHERE channel = ? AND recipient = ? AND key = ?",
                (self._channel, recipient, key),
            ).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO deliveries (channel, recipient, key, status, owner, lease_until, attempts, "
                    "updated_at) VALUES (?, ?, ?, 'sending', ?, ?, 1, ?)",
                    (self._channel, recipient, key, self._owner, moment + lease_seconds, moment),
                )
                return True
            status, lease_until, permanent = row
            if status == DeliveryStatus.SENT or permanent:
                return False
            # A live lease is refused to its own owner too: two tasks of one process (the daily job and the recheck
            # waking together after a pause) would otherwise both hold it and both send.
            if status == DeliveryStatus.SENDING and lease_until > moment:
                return False
            db.execute(
                "UPDATE deliveries SET status = 'sending', owner = ?, lease_until = ?, attempts = attempts + 1, "
                "updated_at = ? WHERE channel = ? AND recipient = ? AND key = ?",
                (self._owner, moment + lease_seconds, moment, self._channel, recipient, key),
            )
            return True

    def renew(self, recipient: str, key: str, lease_seconds: float, now: float | None = None) -> None:
        """Extend this owner's claim of ``key`` to ``recipient`` (while it still holds it) by ``lease_seconds``."""
        moment = time.time() if now is None else now
        with self._write() as db:
            db.execute(
                "UPDATE deliveries SET lease_until = ? WHERE channel = ? AND recipient = ? AND key = ? "
                "AND owner = ? AND status = 'sending'",
                (moment + lease_seconds, self._channel, recipient, key, self._owner),
            )

    def store_parts(self, recipient: str, key: str, parts: list[Part]) -> list[Part]:
        """Keep the content of a claimed delivery's parts; if parts are stored already, those win and are returned.

        Called by the claim's holder before anything is sent, so that every later attempt sends the same messages.
        """
        with self._write() as db:
            stored = self._parts(db, recipient, key)
            if stored:
                return stored
            db.executemany(
                "INSERT INTO delivery_parts (channel, recipient, key, part, kind, text, data, filename) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (self._channel, recipient, key, part.index, part.kind.value, part.text, part.data, part.filename)
                    for part in parts
                ],
            )
        return parts

    def parts(self, recipient: str, key: str) -> list[Part]:
        """The stored parts of a delivery still owed, in sending order (none once it is ``sent``)."""
        try:
            with self._lock:
                return self._parts(self._connection, recipient, key)
        except sqlite3.Error as exc:
            raise state_error(self._path, exc) from None

    def _parts(self, db: sqlite3.Connection, recipient: str, key: str) -> list[Part]:
        rows = db.execute(
            "SELECT part, kind, text, data, filename, message_id FROM delivery_parts "
            "WHERE channel = ? AND recipient = ? AND key = ? ORDER BY part",
            (self._channel, recipient, key),
        ).fetchall()
        return [
            Part(
                index=int(index),
                kind=PartKind(kind),
                text=str(text),
                data=bytes(data) if data is not None else None,
                filename=str(filename) if filename is not None else None,
                message_id=int(message_id) if message_id is not None else None,
            )
            for index, kind, text, data, filename, message_id in rows
        ]

    def mark_part_sent(self, recipient: str, key: str, index: int, message_id: int, now: float | None = None) -> None:
        """Record that the channel accepted part ``index`` as ``message_id``: no later attempt sends it again."""
        moment = time.time() if now is None else now
        with self._write() as db:
            # The PNG is not needed once accepted; the text stays until the whole delivery is sent.
            db.execute(
                "UPDATE delivery_parts SET message_id = ?, sent_at = ?, data = NULL "
                "WHERE channel = ? AND recipient = ? AND key = ? AND part = ?",
                (message_id, moment, self._channel, recipient, key, index),
            )

    def mark_sent(
        self,
        recipient: str,
        key: str,
        message_ids: list[int],
        late: bool,
        now: float | None = None,
        note: str | None = None,
    ) -> None:
        """Record that the delivery is done (every part accepted, or the chart refused for good: ``note`` says so)."""
        moment = time.time() if now is None else now
        with self._write() as db:
            db.execute(
                "UPDATE deliveries SET status = 'sent', sent_at = ?, updated_at = ?, late = ?, error = ?, "
                "message_ids = ? WHERE channel = ? AND recipient = ? AND key = ?",
                (
                    moment,
                    moment,
                    int(late),
                    note[:500] if note else None,
                    ",".join(map(str, message_ids)),
                    self._channel,
                    recipient,
                    key,
                ),
            )
            db.execute(
                "DELETE FROM delivery_parts WHERE channel = ? AND recipient = ? AND key = ?",
                (self._channel, recipient, key),
            )
            db.execute(
                "DELETE FROM part_sends WHERE channel = ? AND recipient = ? AND key = ?",
                (self._channel, recipient, key),
            )

    def mark_failed(self, recipient: str, key: str, error: str, permanent: bool, now: float | None = None) -> None:
        """Record a failed delivery; a transient one is retried by a later run, a permanent one is not."""
        moment = time.time() if now is None else now
        with self._write() as db:
            db.execute(
                "UPDATE deliveries SET status = 'failed', updated_at = ?, error = ?, permanent = ?, lease_until = 0 "
                "WHERE channel = ? AND recipient = ? AND key = ?",
                (moment, error[:500], int(permanent), self._channel, recipient, key),
            )

    def record_move(self, old: str, new: str, now: float | None = None) -> None:
        """Remember that a recipient moved (a Telegram group became a supergroup), so later posts go to ``new``."""
        moment = time.time() if now is None else now
        with self._write() as db:
            db.execute(
                "INSERT INTO recipient_moves (channel, old_recipient, new_recipient, moved_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(channel, old_recipient) DO UPDATE SET new_recipient = excluded.new_recipient, "
                "moved_at = excluded.moved_at",
                (self._channel, old, new, moment),
            )

    def earlier_ids(self, recipient: str) -> list[str]:
        """The ids this recipient had before it moved (a group turned supergroup, perhaps twice), nearest first."""
        earlier: list[str] = []
        pending = [recipient]
        while pending:
            rows = self._read(
                "SELECT old_recipient FROM recipient_moves WHERE channel = ? AND new_recipient = ?",
                (self._channel, pending.pop(0)),
            )
            for (old,) in rows:
                if str(old) != recipient and str(old) not in earlier:
                    earlier.append(str(old))
                    pending.append(str(old))
        return earlier

    def adopt_parts(self, recipient: str, key: str, earlier_ids: list[str]) -> list[Part]:
        """Parts of ``key`` stored under one of ``earlier_ids`` (see `earlier_ids`), now stored under ``recipient``.

        A group that turned supergroup in the middle of a delivery: the rerun goes on where it stopped instead of
        sending the first parts again to the new id.
        """
        with self._write() as db:
            for old in earlier_ids:
                if self._parts(db, old, key):
                    db.execute(
                        "UPDATE delivery_parts SET recipient = ? WHERE channel = ? AND recipient = ? AND key = ?",
                        (recipient, self._channel, old, key),
                    )
                    break
            return self._parts(db, recipient, key)

    def current(self, recipient: str) -> str:
        """The id a recipient has now, following recorded moves."""
        seen = {recipient}
        current = recipient
        while True:
            row = self._read(
                "SELECT new_recipient FROM recipient_moves WHERE channel = ? AND old_recipient = ?",
                (self._channel, current),
            )
            if not row or str(row[0][0]) in seen:
                return current
            current = str(row[0][0])
            seen.add(current)

    def get(self, recipient: str, key: str) -> Delivery | None:
        """The delivery of ``key`` to ``recipient``, if any."""
        rows = self._read(
            f"SELECT {_DELIVERY_COLUMNS} FROM deliveries "  # noqa: S608  # the columns are ours, values bound
            "WHERE channel = ? AND recipient = ? AND key = ?",
            (self._channel, recipient, key),
        )
        return _delivery(rows[0]) if rows else None

    def first_used(self, now: float) -> float:
        """When this state file was first used: ``now`` the first time it is asked, the stored time ever after."""
        with self._write() as db:
            db.execute("INSERT OR IGNORE INTO state_facts (name, value) VALUES ('first_used', ?)", (now,))
            row = db.execute("SELECT value FROM state_facts WHERE name = 'first_used'").fetchone()
        return float(row[0])

    def latest(self, recipient: str) -> list[Delivery]:
        """The recipient's ten most recent deliveries, newest first."""
        rows = self._read(
            f"SELECT {_DELIVERY_COLUMNS} FROM deliveries "  # noqa: S608  # the columns are ours, values bound
            "WHERE channel = ? AND recipient = ? ORDER BY updated_at DESC LIMIT 10",
            (self._channel, recipient),
        )
        return [_delivery(row) for row in rows]

    def _read(self, sql: str, parameters: tuple[object, ...]) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                return list(self._connection.execute(sql, parameters).fetchall())
        except sqlite3.Error as exc:
            raise state_error(self._path, exc) from None

    def begin_part_send(self, recipient: str, key: str, index: int, most: int) -> bool:
        """Count a send of part ``index`` as begun, unless ``most`` earlier ones went unanswered (then False).

        A send counted stays so until answered: it may have arrived.
        The look and the count are one transaction: two processes cannot both take the last allowed send.
        """
        with self._write() as db:
            row = db.execute(
                "SELECT unanswered FROM part_sends WHERE channel = ? AND recipient = ? AND key = ? AND part = ?",
                (self._channel, recipient, key, index),
            ).fetchone()
            if row is not None and int(row[0]) >= most:
                return False
            db.execute(
                "INSERT INTO part_sends (channel, recipient, key, part, unanswered) VALUES (?, ?, ?, ?, 1) "
                "ON CONFLICT(channel, recipient, key, part) DO UPDATE SET unanswered = unanswered + 1",
                (self._channel, recipient, key, index),
            )
            return True

    def part_refused(self, recipient: str, key: str, index: int) -> None:
        """The channel answered that it did not take the last send of part ``index``: it did not arrive."""
        with self._write() as db:
            db.execute(
                "UPDATE part_sends SET unanswered = MAX(unanswered - 1, 0) "
                "WHERE channel = ? AND recipient = ? AND key = ? AND part = ?",
                (self._channel, recipient, key, index),
            )


# The columns `_delivery` reads, in its order.
_DELIVERY_COLUMNS = "recipient, key, status, attempts, updated_at, sent_at, late, error, permanent, lease_until"


def _delivery(row: tuple[Any, ...]) -> Delivery:
    recipient, key, status, attempts, updated_at, sent_at, late, error, permanent, lease_until = row
    return Delivery(
        recipient=str(recipient),
        key=str(key),
        status=DeliveryStatus(status),
        attempts=int(attempts),
        updated_at=float(updated_at),
        sent_at=float(sent_at) if sent_at is not None else None,
        late=bool(late),
        error=str(error) if error is not None else None,
        permanent=bool(permanent),
        lease_until=float(lease_until),
    )

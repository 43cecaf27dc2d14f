"""The state file's shared plumbing, and the trends' history store kept in it.

One SQLite file (``DIGEST_STATE_PATH``) holds two things: the deliveries (`digest.channels.state`, next to the
channels that write them) and the history of past windows the trends and "new today" read (`HistoryStore`, here).
Both open it through `connect` — WAL mode (readers never block the writer), ``synchronous=NORMAL``, their schema in
place and checked (`_unusable`: a damaged file or a foreign table is refused before anything is sent or stored) —
and translate every SQLite and file-system error once, into `StateError` (`state_error`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

# The trends' store is a cache read on the event loop: a locked file costs it the cache, not 30 s of the bot.
_HISTORY_BUSY_TIMEOUT_SECONDS = 1.0
_HISTORY_DAYS = 90


def connect(
    path: Path,
    schema: str,
    busy_timeout_seconds: float,
    migrate: Callable[[sqlite3.Connection], None] | None = None,
) -> sqlite3.Connection:
    """The state file opened in WAL mode with ``schema`` in place; `StateError` naming the file if it cannot be."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(path, timeout=busy_timeout_seconds, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        if migrate is not None:
            migrate(connection)
        connection.executescript(schema)
        problem = _unusable(connection, schema)
    except (sqlite3.Error, OSError) as exc:
        raise state_error(path, exc) from None
    if problem is not None:
        connection.close()
        raise StateError(f"state file {path}: {problem}")
    return connection


def file_identity(path: Path) -> tuple[int, int] | None:
    """The file's (device, inode), or None when there is none at ``path``."""
    try:
        status = path.stat()
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


def _unusable(connection: sqlite3.Connection, schema: str) -> str | None:
    """Why an opened file cannot hold ``schema``'s rows, or None.

    A file with a valid header but damaged pages opens, and fails only at the first write after a message went
    out ("sent but could not be recorded", then sent again); a table of an older or foreign schema, or a view in its
    place, fails at the first delivery of a bot that looked ready. Both are found here, before anything is sent.
    """
    damage = [str(row[0]) for row in connection.execute("PRAGMA quick_check(3)")]
    if damage != ["ok"]:
        return f"the database is damaged ({'; '.join(damage)})"
    expected = sqlite3.connect(":memory:")
    try:
        expected.executescript(schema)
        for (table,) in expected.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            kind = connection.execute("SELECT type FROM sqlite_master WHERE name = ?", (table,)).fetchone()
            if kind is None or kind[0] != "table":
                return f"{table} is a {kind[0] if kind else 'missing'}, not a table of digest's schema"
            want = {row[1] for row in expected.execute(f"PRAGMA table_info({table})")}
            have = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
            if not want <= have:
                return f"table {table} lacks {', '.join(sorted(want - have))}: not digest's schema"
    finally:
        expected.close()
    return None


class StateError(RuntimeError):
    """The state file cannot be opened, read or written (locked, corrupt, read-only).

    ``busy`` is true when another writer held the file past the busy timeout: worth retrying as it is, unlike a
    corrupt or unwritable file. ``replaced``: the file at the path is no longer the one opened (deleted, or swapped
    for another): only reopening it (a restart) helps.
    """

    def __init__(self, message: str, busy: bool = False, replaced: bool = False) -> None:
        super().__init__(message)
        self.busy = busy
        self.replaced = replaced


def state_error(path: Path, error: BaseException) -> StateError:
    """The one translation of SQLite and file-system errors into `StateError`, naming the file."""
    text = str(error).lower()
    busy = isinstance(error, sqlite3.OperationalError) and ("locked" in text or "busy" in text)
    return StateError(f"state file {path}: {error}", busy=busy)


_HISTORY_SCHEMA = """
CREATE TABLE IF NOT EXISTS graded_history (
    cluster       TEXT NOT NULL,
    policy        TEXT NOT NULL,
    window_start  REAL NOT NULL,
    window_end    REAL NOT NULL,
    findings      TEXT NOT NULL,
    stored_at     REAL NOT NULL,
    PRIMARY KEY (cluster, policy, window_start, window_end)
);
-- Each workload's error signatures per window, as hashes (never log text): what "new today" compares with.
CREATE TABLE IF NOT EXISTS signature_history (
    cluster       TEXT NOT NULL,
    policy        TEXT NOT NULL,
    namespace     TEXT NOT NULL,
    workload      TEXT NOT NULL,
    window_start  REAL NOT NULL,
    window_end    REAL NOT NULL,
    keys          TEXT NOT NULL,
    stored_at     REAL NOT NULL,
    PRIMARY KEY (cluster, policy, namespace, workload, window_start, window_end)
);
-- What each source held, or did not, by span (`checks.contract.Sightings`): whether a cluster ever had a component
-- is then asked of the backends only for the days no earlier digest saw.
CREATE TABLE IF NOT EXISTS source_sightings (
    cluster       TEXT NOT NULL,
    source        TEXT NOT NULL,
    span_start    REAL NOT NULL,
    span_end      REAL NOT NULL,
    held          INTEGER NOT NULL,
    stored_at     REAL NOT NULL,
    PRIMARY KEY (cluster, source, span_start, span_end)
);
-- One calendar day's digest as the week reads it (grade, why, unseen checks, values, signatures' shapes).
CREATE TABLE IF NOT EXISTS day_results (
    cluster       TEXT NOT NULL,
    policy        TEXT NOT NULL,
    window_start  REAL NOT NULL,
    window_end    REAL NOT NULL,
    result        TEXT NOT NULL,
    stored_at     REAL NOT NULL,
    PRIMARY KEY (cluster, policy, window_start, window_end)
);
"""


# The key columns of each history table, in the order its methods pass them.
_KEYS = {
    "graded_history": ("cluster", "policy", "window_start", "window_end"),
    "signature_history": ("cluster", "policy", "namespace", "workload", "window_start", "window_end"),
    "day_results": ("cluster", "policy", "window_start", "window_end"),
}


class HistoryStore:
    """Past windows' graded findings and signature keys, so a daily digest does not query its last seven days again.

    Each workload's error signatures per window are kept as hashes, for "new today"; each calendar day's digest as the
    week reads it, for the weekly digest.

    Keyed by cluster, a fingerprint of the graded checks' policy (a changed threshold or rule recomputes) and the
    window's bounds. The payload is opaque JSON written by `digest.pipeline.trends`. Every SQLite error is a
    `StateError`; the caller logs it and carries on without the store — a cache must never cost a digest. Rows are kept
    for ``_HISTORY_DAYS`` days: trends look back at most 31.
    """

    def __init__(self, path: Path, busy_timeout_seconds: float = _HISTORY_BUSY_TIMEOUT_SECONDS) -> None:
        self._path = path
        self._connection = connect(path, _HISTORY_SCHEMA, busy_timeout_seconds)
        # Read and written from worker threads (never on the event loop): one statement or transaction at a time.
        self._lock = threading.Lock()

    def close(self) -> None:
        self._connection.close()

    def load(self, cluster: str, policy: str, start: float, end: float) -> str | None:
        """The stored payload of that window, or None."""
        return self._one("graded_history", "findings", (cluster, policy, start, end))

    def save(self, cluster: str, policy: str, start: float, end: float, payload: str, now: float | None = None) -> None:
        """Store (or replace) the payload of that window."""
        self._replace("graded_history", (cluster, policy, start, end, payload), now)

    def load_shapes(
        self, cluster: str, policy: str, namespace: str, workload: str, start: float, end: float
    ) -> str | None:
        """The stored signature keys of one workload in that window (opaque JSON), or None."""
        return self._one("signature_history", "keys", (cluster, policy, namespace, workload, start, end))

    def save_shapes(
        self,
        cluster: str,
        policy: str,
        namespace: str,
        workload: str,
        start: float,
        end: float,
        payload: str,
        now: float | None = None,
    ) -> None:
        """Store (or replace) one workload's signature keys in that window."""
        self._replace("signature_history", (cluster, policy, namespace, workload, start, end, payload), now)

    def load_day(self, cluster: str, policy: str, start: float, end: float) -> str | None:
        """The stored result of one calendar day's digest (opaque JSON), or None."""
        return self._one("day_results", "result", (cluster, policy, start, end))

    def save_day(
        self, cluster: str, policy: str, start: float, end: float, result: str, now: float | None = None
    ) -> None:
        """Store (or replace) the result of one calendar day's digest."""
        self._replace("day_results", (cluster, policy, start, end, result), now)

    def load_sightings(self, cluster: str) -> list[tuple[str, float, float, bool]]:
        """Every stored span of every source of ``cluster``: (source, start, end, held)."""
        try:
            with self._lock:
                rows = self._connection.execute(
                    "SELECT source, span_start, span_end, held FROM source_sightings WHERE cluster = ?", (cluster,)
                ).fetchall()
        except sqlite3.Error as exc:
            raise state_error(self._path, exc) from None
        return [(str(source), float(start), float(end), bool(held)) for source, start, end, held in rows]

    def save_sightings(
        self, cluster: str, spans: Sequence[tuple[str, float, float, bool]], now: float | None = None
    ) -> None:
        """Store (or replace) spans of sources of ``cluster``, in one transaction; drop those past the retention."""
        if spans:
            rows = [(cluster, source, start, end, int(held)) for source, start, end, held in spans]
            self._replace_rows("source_sightings", rows, now)

    def _one(self, table: str, column: str, key: tuple[str | float, ...]) -> str | None:
        """``column`` of the row of ``table`` whose key columns (all but the last two) equal ``key``, or None."""
        names = _KEYS[table]
        where = " AND ".join(f"{name} = ?" for name in names)
        try:
            with self._lock:
                row = self._connection.execute(f"SELECT {column} FROM {table} WHERE {where}", key).fetchone()  # noqa: S608  # names are ours, values bound
        except sqlite3.Error as exc:
            raise state_error(self._path, exc) from None
        return None if row is None else str(row[0])

    def _replace(self, table: str, values: tuple[str | float, ...], now: float | None) -> None:
        """Insert or replace a row of ``table`` (its stored_at is ``now``), and drop the rows past the retention."""
        self._replace_rows(table, [values], now)

    def _replace_rows(self, table: str, rows: Sequence[tuple[str | float, ...]], now: float | None) -> None:
        """Insert or replace rows of ``table`` in one transaction (stored_at ``now``); drop those past the retention."""
        try:
            moment = time.time() if now is None else now
            marks = ", ".join("?" * (len(rows[0]) + 1))
            with self._lock, self._connection:
                self._connection.execute("BEGIN IMMEDIATE")
                self._connection.executemany(
                    f"INSERT OR REPLACE INTO {table} VALUES ({marks})",  # noqa: S608  # table is ours, values bound
                    [(*values, moment) for values in rows],
                )
                self._connection.execute(
                    f"DELETE FROM {table} WHERE stored_at < ?",  # noqa: S608  # table is ours
                    (moment - _HISTORY_DAYS * 86_400,),
                )
        except sqlite3.Error as exc:
            raise state_error(self._path, exc) from None

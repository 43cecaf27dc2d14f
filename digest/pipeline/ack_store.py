"""The acks in the state file: they survive restarts, and the bot and the CLI share them.

One row per cluster and target (``check`` or ``check:subject``): acking the same target again replaces it (a new
reason, a new end). Expired acks are kept `_KEPT_DAYS` days after their end, so that a replay of a past day still
shows the ack that held then; they are dropped when an ack is written after that. Opened through the state file's
shared plumbing (`digest.pipeline.state.connect`): every SQLite error is a `StateError`. Called from worker threads,
never on the bot's event loop.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from digest.pipeline.acks import Ack
from digest.pipeline.state import connect, state_error

_SCHEMA = """
CREATE TABLE IF NOT EXISTS acks (
    cluster   TEXT NOT NULL,
    target    TEXT NOT NULL,
    check_name TEXT NOT NULL,
    subject   TEXT NOT NULL,
    reason    TEXT NOT NULL,
    by_whom   TEXT NOT NULL,
    since     REAL NOT NULL,
    until     REAL,
    at_most   REAL,
    subjects  TEXT,
    origin    TEXT NOT NULL,
    PRIMARY KEY (cluster, target)
);
"""
_BUSY_TIMEOUT_SECONDS = 5.0
_KEPT_DAYS = 90


class AckStore:
    """Acks per cluster in the state file."""

    def __init__(self, path: Path, busy_timeout_seconds: float = _BUSY_TIMEOUT_SECONDS) -> None:
        self._path = path
        self._connection = connect(path, _SCHEMA, busy_timeout_seconds)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._connection.close()

    def put(self, cluster: str, ack: Ack) -> None:
        """Store ``ack``, replacing one of the same target; drop acks that ended long before it began."""
        subjects = json.dumps(sorted(ack.subjects)) if ack.subjects is not None else None
        row = (
            cluster,
            ack.target,
            ack.check,
            ack.subject,
            ack.reason,
            ack.by,
            ack.since.timestamp(),
            ack.until.timestamp() if ack.until is not None else None,
            ack.at_most,
            subjects,
            ack.origin,
        )
        forgotten = (ack.since - timedelta(days=_KEPT_DAYS)).timestamp()
        try:
            with self._lock, self._connection:
                self._connection.execute("BEGIN IMMEDIATE")
                self._connection.execute(f"INSERT OR REPLACE INTO acks VALUES ({', '.join('?' * len(row))})", row)  # noqa: S608  # a count of marks, values bound
                self._connection.execute("DELETE FROM acks WHERE until IS NOT NULL AND until < ?", (forgotten,))
        except sqlite3.Error as exc:
            raise state_error(self._path, exc) from None

    def end(self, cluster: str, target: str, at: datetime) -> bool:
        """End the ack of ``target`` at ``at`` (kept for replays of the days it held); False when there was none."""
        try:
            with self._lock, self._connection:
                cursor = self._connection.execute(
                    "UPDATE acks SET until = ? WHERE cluster = ? AND target = ? AND (until IS NULL OR until > ?)",
                    (at.timestamp(), cluster, target, at.timestamp()),
                )
        except sqlite3.Error as exc:
            raise state_error(self._path, exc) from None
        return cursor.rowcount > 0

    def all(self, cluster: str) -> list[Ack]:
        """Every stored ack of ``cluster``, expired ones too (a window's own end decides which hold)."""
        try:
            with self._lock:
                rows = self._connection.execute(
                    "SELECT check_name, subject, reason, by_whom, since, until, at_most, subjects, origin FROM acks "
                    "WHERE cluster = ? ORDER BY since",
                    (cluster,),
                ).fetchall()
        except sqlite3.Error as exc:
            raise state_error(self._path, exc) from None
        return [
            Ack(
                check=str(check),
                subject=str(subject),
                reason=str(reason),
                by=str(by),
                since=datetime.fromtimestamp(float(since), UTC),
                until=datetime.fromtimestamp(float(until), UTC) if until is not None else None,
                at_most=float(at_most) if at_most is not None else None,
                subjects=frozenset(json.loads(subjects)) if subjects is not None else None,
                origin=str(origin),
            )
            for check, subject, reason, by, since, until, at_most, subjects, origin in rows
        ]

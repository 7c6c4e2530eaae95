"""A State's read: one statement (``_sql.READ``) for its row, its entries from a seq on and
the schema version; on the owner loop when the history to read is short, else in a worker
thread. Decoding is left to the caller's thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from ..._core.errors import CorruptStateError
from ..._core.records import Record, decode_snapshot
from ..._runtime.batching import WouldBlock
from . import _sql as sql
from ._connections import Connections, is_busy
from ._listing import loop_reader
from ._rows import decode_entry
from ._schema import refuse_newer, refuse_newer_after

#: Entries a read on the owner loop returns at most; a longer one goes to a worker thread
#: (as a listing page of more rows does: a thread hop costs as much as reading that many).
LOOP_ENTRIES = 100

Rows = list[tuple[Any, ...]]


def read_rows(path: Path, conn: sqlite3.Connection, ns: str, sid: str, since: int, limit: int = -1) -> Rows:
    """The rows of ``_sql.READ`` (at most ``limit``; -1: all); UnsupportedFormatError if
    the file's schema is newer. SQLITE_BUSY escapes (no transaction is left open)."""
    rows = _checked(path, conn, sql.READ, (ns, sid, ns, sid, since, limit))
    refuse_newer(path, rows[0][1] or 0)
    return rows


def read_snapshot(path: Path, conn: sqlite3.Connection, ns: str, sid: str, now: str) -> dict[str, Any] | None:
    """A live State's snapshot alone (None: no State, expired at ``now``, or no snapshot)."""
    ((version, snap),) = _checked(path, conn, sql.READ_SNAPSHOT, (ns, sid, now))
    refuse_newer(path, version or 0)
    return decode_snapshot(snap, f"{path}: the snapshot of State {sid!r}")


def _checked(path: Path, conn: sqlite3.Connection, text: str, params: tuple[Any, ...]) -> Rows:
    """The rows of a statement that reads the schema version with them, which the caller
    checks; a newer schema the statement does not fit is refused here."""
    try:
        return conn.execute(text, params).fetchall()
    except sqlite3.OperationalError as exc:
        refuse_newer_after(path, conn, exc)
        raise


def read_now(path: Path, conns: Connections, ns: str, sid: str, since: int) -> Callable[[], Record] | None:
    """The read on the owner loop, with the reader that never waits: a function building
    the Record (in the caller's thread), or None if there is no such State; WouldBlock,
    having read nothing it keeps, if SQLite reports the database busy or the history to
    read is longer than :data:`LOOP_ENTRIES`."""
    try:
        rows = read_rows(path, loop_reader(path, conns), ns, sid, since, LOOP_ENTRIES + 2)
    except sqlite3.OperationalError as exc:
        if is_busy(exc):
            raise WouldBlock from None
        raise
    next_seq = rows[0][2]
    if next_seq is None:
        return None
    start = rows[1][0] if len(rows) > 1 else since  # a trimmed State's entries start at its base
    if next_seq - max(since, start) > LOOP_ENTRIES:
        raise WouldBlock
    return partial(built, path, sid, since, rows)


def built(path: Path, sid: str, since: int, rows: Rows) -> Record:
    """The Record of a State's rows (``_sql.READ``, the State there)."""
    _, _, next_seq, incarnation, snap = rows[0]
    count = len(rows) - 1
    if count and rows[1][0] > since:
        since = rows[1][0]  # a trimmed State read from below its base: from the base
    if count != max(0, next_seq - since):
        raise CorruptStateError(
            f"{path}: State {sid!r} records next seq {next_seq} but has {count} entries from seq {since}"
        )
    loads = orjson.loads
    try:
        entries = [loads(row[4]) for row in rows[1:]]
    except orjson.JSONDecodeError:  # names the bad one
        entries = [decode_entry(path, sid, row[0], row[4]) for row in rows[1:]]
    snapshot = decode_snapshot(snap, f"{path}: the snapshot of State {sid!r}")
    return Record(entries, snapshot, incarnation)

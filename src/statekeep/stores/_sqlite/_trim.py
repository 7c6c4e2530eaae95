"""SQLiteStore's trim (``store.trim``, agent memory's keys): a State's first entries
deleted and its base record written in their place, in one transaction.

The deleted rows' pages go to the file's free list, which later writes reuse: the file does
not shrink (``VACUUM`` shrinks it), but it stops growing until that space is used again.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..._core.writes import missing_error
from . import _sql as sql
from ._connections import rolled_back_on_error
from ._schema import check_version

FIRST_SEQ = "SELECT min(seq) FROM entries WHERE namespace = ? AND state_id = ?"
DELETE_BEFORE = "DELETE FROM entries WHERE namespace = ? AND state_id = ? AND seq < ?"
PUT_BASE = "UPDATE entries SET data = CAST(? AS TEXT) WHERE namespace = ? AND state_id = ? AND seq = ?"


def trim_state(path: Path, conn: sqlite3.Connection, ns: str, sid: str, before: int, base: bytes) -> None:
    """Delete the entries of ``sid`` before seq ``before - 1`` and replace the one there with
    ``base`` (an encoded line), in one transaction. SQLITE_BUSY escapes with nothing changed."""
    conn.execute(sql.BEGIN_IMMEDIATE)
    with rolled_back_on_error(conn):
        check_version(path, conn)
        row = conn.execute(sql.SOURCE, (ns, sid)).fetchone()
        if row is None:
            raise missing_error(sid)
        (first,) = conn.execute(FIRST_SEQ, (ns, sid)).fetchone()
        if first is None or not first < before <= row[0]:
            raise ValueError(f"State {sid!r} holds seqs {first} to {row[0] - 1}; nothing was trimmed")
        conn.execute(DELETE_BEFORE, (ns, sid, before - 1))
        conn.execute(PUT_BASE, (memoryview(base)[:-1] if base.endswith(b"\n") else base, ns, sid, before - 1))
        conn.execute(sql.COMMIT)

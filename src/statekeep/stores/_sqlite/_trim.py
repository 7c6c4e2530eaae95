"""SQLiteStore's trim (``store.trim``, agent memory's keys): a State's first entries
deleted and its base record written in their place, in one transaction, which also
recomputes the State's blob references from the lines it keeps (the base and the kept
entries, each read by its list ``"sk.blobs"``, which names the blobs nested inside others
too; a sealed line lists its names in clear): a blob only removed entries referred to is
then left to gc.

The deleted rows' pages go to the file's free list, which later writes reuse: the file does
not shrink (``VACUUM`` shrinks it), but it stops growing until that space is used again.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..._core.writes import missing_error, trimmed_meanwhile
from .._blob_names import LIST_MARK, MARK, referred
from . import _sql as sql
from ._connections import rolled_back_on_error
from ._schema import check_version

FIRST_SEQ = "SELECT min(seq) FROM entries WHERE namespace = ? AND state_id = ?"
DELETE_BEFORE = "DELETE FROM entries WHERE namespace = ? AND state_id = ? AND seq < ?"
PUT_BASE = "UPDATE entries SET data = CAST(? AS TEXT) WHERE namespace = ? AND state_id = ? AND seq = ?"
REFS = "SELECT name, seq FROM blob_refs WHERE namespace = ? AND state_id = ?"
# The kept lines that may refer to a blob: a list of names, or a reference in the body (SQL
# literals: neither holds a ').
REFERRING = (
    "SELECT seq, CAST(data AS BLOB) FROM entries WHERE namespace = ? AND state_id = ? "
    f"AND (instr(data, '{LIST_MARK.decode()}') OR instr(data, '{MARK.decode()}')) ORDER BY seq"
)
SNAPSHOT = "SELECT CAST(snapshot AS BLOB) FROM states WHERE namespace = ? AND id = ?"
DROP_REF = "DELETE FROM blob_refs WHERE namespace = ? AND state_id = ? AND name = ?"
MOVE_REF = "UPDATE blob_refs SET seq = ? WHERE namespace = ? AND state_id = ? AND name = ?"


def trim_state(
    path: Path, conn: sqlite3.Connection, ns: str, sid: str, before: int, base: bytes, read_first: int
) -> None:
    """Delete the entries of ``sid`` before seq ``before - 1`` and replace the one there with
    ``base`` (an encoded line), in one transaction. SQLITE_BUSY escapes with nothing changed;
    StateConflictError, nothing changed, if the State no longer starts at ``read_first`` (the
    seq the trim read it at: another process trimmed it since)."""
    conn.execute(sql.BEGIN_IMMEDIATE)
    with rolled_back_on_error(conn):
        check_version(path, conn)
        row = conn.execute(sql.SOURCE, (ns, sid)).fetchone()
        if row is None:
            raise missing_error(sid)
        (first,) = conn.execute(FIRST_SEQ, (ns, sid)).fetchone()
        if first is not None and first != read_first:
            raise trimmed_meanwhile(sid, read_first, first)
        if first is None or not first < before <= row[0]:
            raise ValueError(f"State {sid!r} holds seqs {first} to {row[0] - 1}; nothing was trimmed")
        conn.execute(DELETE_BEFORE, (ns, sid, before - 1))
        conn.execute(PUT_BASE, (memoryview(base)[:-1] if base.endswith(b"\n") else base, ns, sid, before - 1))
        recompute_refs(conn, ns, sid)
        conn.execute(sql.COMMIT)


def recompute_refs(conn: sqlite3.Connection, ns: str, sid: str) -> None:
    """Keep only the references of State ``sid`` that its stored lines make, each at the first
    seq that makes it (so a fork copies it with that entry); one the snapshot makes is kept as
    it is."""
    refs = dict(conn.execute(REFS, (ns, sid)).fetchall())
    if not refs:
        return
    found = referred((seq, bytes(data)) for seq, data in conn.execute(REFERRING, (ns, sid)))
    (snapshot,) = conn.execute(SNAPSHOT, (ns, sid)).fetchone()
    in_snapshot = referred([(-1, bytes(snapshot))] if snapshot is not None else [])
    conn.executemany(
        DROP_REF, [(ns, sid, name) for name in refs if name not in found and name not in in_snapshot]
    )
    conn.executemany(
        MOVE_REF,
        [(found[name], ns, sid, name) for name in refs if name in found and found[name] != refs[name]],
    )

"""Blobs in the SQLite file: reading them, counting them, and gc of those no State refers to.

A write stores its blobs and its references in the transaction of its entries (``_batch``);
a State's references go with its row (ON DELETE CASCADE). gc removes, a chunk per
transaction under SQLite's write lock (so no write is half-way meanwhile, in any process),
the blobs that no reference of any namespace names. It walks the blobs in rowid order with a
cursor carried from one transaction to the next, so each transaction examines at most
:data:`GC_CHUNK` rows, however many blobs are referenced (a blob stored behind the cursor
meanwhile waits for the next gc). It deletes with ``secure_delete`` on (the freed pages are
overwritten with zeros) and then checkpoints the WAL: a passive checkpoint first (it waits for
no one), then, only if no reader held it back, a truncating one that waits at most
:data:`_TRUNCATE_PATIENCE_MS` for the writers of that moment. So once gc returns, the removed
bytes have left the database file and its WAL unless a reader of another connection held the
WAL (a read transaction older than gc's last delete): then they stay in the WAL until the next
checkpoint that completes (SQLite's automatic one, a later gc, or the last connection's close),
and writers are never made to wait for that reader.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from pathlib import Path

from . import _sql as sql
from ._connections import connect, rolled_back_on_error
from ._schema import check_version

#: Names per ``IN (...)`` (SQLite allows 32,766 parameters).
NAMES_PER_QUERY = 500
#: Blobs examined (and at most removed) per transaction: bounds how long gc holds the write lock.
GC_CHUNK = 256
#: How long the truncating checkpoint after gc waits (for writers of that moment; it holds
#: off new writers meanwhile), once a passive one found no reader holding the WAL.
_TRUNCATE_PATIENCE_MS = 100


def get_blobs(conn: sqlite3.Connection, names: Collection[str]) -> dict[str, bytes]:
    """The stored bytes of ``names`` (in a read transaction on ``conn``); missing ones are absent."""
    wanted = list(dict.fromkeys(names))
    found: dict[str, bytes] = {}
    for at in range(0, len(wanted), NAMES_PER_QUERY):
        part = wanted[at : at + NAMES_PER_QUERY]
        text = sql.BLOBS_AMONG.format(marks=", ".join("?" * len(part)))
        found.update((name, bytes(data)) for name, data in conn.execute(text, part))
    return found


def usage(conn: sqlite3.Connection) -> tuple[int, int]:
    """(blobs, bytes) stored, every namespace counted."""
    count, size = conn.execute(sql.BLOB_USAGE).fetchone()
    return int(count), int(size)


def count_unreferenced(conn: sqlite3.Connection) -> tuple[int, int]:
    """(blobs, bytes) that no State refers to: what gc would remove now."""
    count, size = conn.execute(sql.COUNT_UNREFERENCED_BLOBS).fetchone()
    return int(count), int(size)


def gc_connection(path: Path) -> sqlite3.Connection:
    """A connection of its own for gc, with ``secure_delete`` on: the pages a delete frees
    are overwritten with zeros, so a removed blob's bytes do not linger on them."""
    conn = connect(path)
    conn.execute(sql.SECURE_DELETE_ON)
    return conn


def gc_chunk(path: Path, conn: sqlite3.Connection, after: int, chunk: int) -> tuple[int, int, int | None]:
    """Remove the unreferenced blobs among the ``chunk`` rows after rowid ``after``, in one
    write transaction: (blobs, bytes, the cursor for the next call or None: no rows left).
    SQLITE_BUSY escapes with nothing removed and no transaction open."""
    conn.execute(sql.BEGIN_IMMEDIATE)
    with rolled_back_on_error(conn):
        check_version(path, conn)
        end, rows = conn.execute(sql.BLOB_WINDOW_END, (after, chunk)).fetchone()
        sizes: list[int] = []
        if end is not None:
            sizes = [size for (size,) in conn.execute(sql.DELETE_UNREFERENCED_BLOBS, (after, end))]
        conn.execute(sql.COMMIT)
    return len(sizes), sum(sizes), end if rows == chunk else None


def checkpoint(conn: sqlite3.Connection) -> bool:
    """Copy the WAL into the database file and truncate it (the removed blobs' zeroed pages
    replace the old ones), without holding off writers for a reader: a passive checkpoint,
    then a truncating one only if no reader held the first back (waiting at most
    :data:`_TRUNCATE_PATIENCE_MS`). False if it did not complete (the next checkpoint does)."""
    busy, log, copied = conn.execute(sql.CHECKPOINT_PASSIVE).fetchone()
    if busy or log != copied:
        return False  # a reader holds frames back: truncating would make writers wait for it
    conn.execute(sql.BUSY_TIMEOUT.format(milliseconds=_TRUNCATE_PATIENCE_MS))
    busy, _, _ = conn.execute(sql.CHECKPOINT_TRUNCATE).fetchone()
    return not busy


RESEAL_BLOB = "UPDATE blobs SET data = ? WHERE name = ? AND data = ?"


def reseal_blobs(path: Path, conn: sqlite3.Connection, blobs: dict[str, tuple[bytes, bytes]]) -> int:
    """Replace each blob NAME -> (old, new) whose stored bytes are still ``old``, in one
    transaction, with ``secure_delete`` on (a rekey's old sealed bytes do not linger in freed
    pages); returns how many were replaced."""
    conn.execute(sql.SECURE_DELETE_ON)
    conn.execute(sql.BEGIN_IMMEDIATE)
    with rolled_back_on_error(conn):
        check_version(path, conn)
        done = sum(conn.execute(RESEAL_BLOB, (new, name, old)).rowcount for name, (old, new) in blobs.items())
        conn.execute(sql.COMMIT)
    return done

"""Blobs in the SQLite file: reading them, counting them, and gc of those no State refers to.

A write stores its blobs and its references in the transaction of its entries (``_batch``);
a State's references go with its row (ON DELETE CASCADE). gc removes, a chunk per
transaction under SQLite's write lock (so no write is half-way meanwhile, in any process),
the blobs that no reference of any namespace names. It deletes with ``secure_delete`` on (the
freed pages are overwritten with zeros) and then checkpoints the WAL and truncates it, so the
removed bytes leave the database file and its WAL; a checkpoint that readers of other
connections hold up leaves them in the WAL until the next checkpoint that completes.
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
#: Blobs removed per transaction (bounds how long gc holds the write lock).
GC_CHUNK = 256
#: How long the checkpoint after gc waits for readers (then the next one completes it).
_CHECKPOINT_PATIENCE_MS = 2000


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


def gc_chunk(path: Path, conn: sqlite3.Connection, chunk: int) -> tuple[int, int]:
    """Remove at most ``chunk`` unreferenced blobs in one write transaction; (blobs, bytes).
    SQLITE_BUSY escapes with nothing removed and no transaction open."""
    conn.execute(sql.BEGIN_IMMEDIATE)
    with rolled_back_on_error(conn):
        check_version(path, conn)
        sizes = [size for (size,) in conn.execute(sql.DELETE_UNREFERENCED_BLOBS, (chunk,)).fetchall()]
        conn.execute(sql.COMMIT)
    return len(sizes), sum(sizes)


def checkpoint(conn: sqlite3.Connection) -> bool:
    """Copy the WAL into the database file and truncate it (the removed blobs' zeroed pages
    replace the old ones); False if readers held it up (the next checkpoint completes it)."""
    conn.execute(sql.BUSY_TIMEOUT.format(milliseconds=_CHECKPOINT_PATIENCE_MS))
    busy, _, _ = conn.execute(sql.CHECKPOINT_TRUNCATE).fetchone()
    return not busy

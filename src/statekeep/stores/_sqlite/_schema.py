"""The database file and its schema: made or migrated on first use, checked in every
transaction.

The version sits in ``schema_version``. A database of a newer statekeep is refused with
UnsupportedFormatError before anything is written to it, not even its journal mode; a file
that is not a SQLite database, or (with ``create=False``) a database without statekeep's
tables, is refused with NotAStoreError, unchanged.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..._core.errors import NotAStoreError, UnsupportedFormatError
from ..._core.labels import DEFAULT_NAMESPACE
from .._fsio import OsIO, make_folders, write_file
from . import _sql as sql
from ._connections import closed_on_error, connect, is_busy, refuse_not_a_database, rolled_back_on_error
from ._rows import listing_columns

#: The schema this statekeep writes; databases with a higher version are refused.
SCHEMA_VERSION = 5
assert len(sql.MIGRATIONS) == SCHEMA_VERSION


def open_schema(path: Path, *, create: bool) -> sqlite3.Connection:
    """A connection to ``path`` once its schema is this statekeep's: made or migrated first
    if ``create``, else only checked (see :func:`inspect`)."""
    return migrate(path) if create else inspect(path)


def migrate(path: Path) -> sqlite3.Connection:
    """Make the file if missing, switch it to WAL, and create or migrate its schema."""
    make_file(path)
    conn = connect(path)
    with closed_on_error(conn):
        # The version first: a database this statekeep refuses is not written to, not
        # even to switch its journal mode.
        version = read_version(path, conn)
        mode = conn.execute(sql.JOURNAL_MODE_WAL).fetchone()[0]
        if str(mode).lower() != "wal":
            raise RuntimeError(
                f"{path}: SQLite could not switch the database to WAL mode (it reports "
                f"{mode!r}); SQLiteStore needs WAL, which needs a local file system"
            )
        # A file that is up to date (the usual case) needs no write lock.
        if version == SCHEMA_VERSION:
            return conn
        conn.execute(sql.BEGIN_IMMEDIATE)
        with rolled_back_on_error(conn):
            version = read_version(path, conn)  # again, now that no one else can migrate
            if version == 0:
                conn.execute(sql.CREATE_VERSION_TABLE)
            for done, step in enumerate(sql.MIGRATIONS[version:], start=version + 1):
                for statement in step:
                    conn.execute(statement)
                if done == 2:
                    refill(conn)
            if version == 0:
                conn.execute(sql.INSERT_VERSION, (SCHEMA_VERSION,))
            elif version < SCHEMA_VERSION:
                conn.execute(sql.UPDATE_VERSION, (SCHEMA_VERSION,))
            conn.execute(sql.COMMIT)
    return conn


def refill(conn: sqlite3.Connection) -> None:
    """Version 2: fill every State's listing columns and labels from its snapshot, with
    the code every write uses (in the migration's transaction)."""
    last = -(2**63)
    # In rowid chunks, each read whole before its rows are updated.
    while chunk := conn.execute(sql.REFILL_ROWS, (last,)).fetchall():
        last = chunk[-1][0]
        updates: list[tuple[Any, ...]] = []
        labels: list[tuple[Any, ...]] = []
        for rowid, sid, snapshot in chunk:
            columns, pairs = listing_columns(sid, snapshot)
            updates.append((*columns, rowid))
            labels.extend((DEFAULT_NAMESPACE, sid, k, v, columns[2]) for k, v in pairs.items())
        conn.executemany(sql.REFILL, updates)
        conn.executemany(sql.INSERT_LABEL, labels)


def inspect(path: Path) -> sqlite3.Connection:
    """Open an existing statekeep database without changing it (``create=False``)."""
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: no database there (this store was opened with create=False, which makes none)"
        )
    conn = connect(path)
    with closed_on_error(conn):
        version = read_version(path, conn)
        tables = {name for (name,) in conn.execute(sql.TABLES)}
        if version == 0 or not {"states", "entries"} <= tables:
            found = f"its tables: {', '.join(sorted(tables))}" if tables else "it has no tables"
            raise NotAStoreError(
                f"{path} is not a statekeep database ({found}); nothing was changed",
                "Pass the database statekeep saved to",
            )
        if version < SCHEMA_VERSION:
            raise NotAStoreError(
                f"{path} has statekeep schema version {version}, older than this "
                f"statekeep's {SCHEMA_VERSION}; open it once with SQLiteStore(path) to upgrade "
                "it; nothing was changed"
            )
    return conn


def read_version(path: Path, conn: sqlite3.Connection) -> int:
    """The file's schema version (0 if it has none yet); refuses a newer one, and a file
    that is not a SQLite database."""
    try:
        found = conn.execute(sql.HAS_VERSION_TABLE).fetchone()
    except sqlite3.DatabaseError as exc:
        refuse_not_a_database(path, exc)
        raise
    version = 0
    if found:
        version = conn.execute(sql.VERSION).fetchone()[0] or 0
    refuse_newer(path, version)
    return version


def check_version(path: Path, conn: sqlite3.Connection) -> None:
    """In a transaction: refuse the file if another process upgraded it meanwhile."""
    row = conn.execute(sql.VERSION).fetchone()
    refuse_newer(path, row[0] or 0)


@contextmanager
def read_transaction(path: Path, conn: sqlite3.Connection) -> Iterator[None]:
    """A read transaction on ``conn`` (one consistent view of the file), checked first for
    a newer schema; rolled back if the block raises."""
    conn.execute(sql.BEGIN)
    with rolled_back_on_error(conn):
        check_version(path, conn)  # another process may have upgraded the file meanwhile
        yield
        conn.execute(sql.COMMIT)


def refuse_newer_after(path: Path, conn: sqlite3.Connection, exc: sqlite3.OperationalError) -> None:
    """For a statement that reads the version with its rows and failed with ``exc``: refuse
    the file (UnsupportedFormatError) if its schema is newer, which the statement may not
    fit (a table or column gone); else return, for the caller to raise ``exc``."""
    if is_busy(exc):
        return
    try:
        version = conn.execute(sql.VERSION).fetchone()[0]
    except sqlite3.Error:
        return
    refuse_newer(path, version or 0)


def refuse_newer(path: Path, version: int) -> None:
    if version > SCHEMA_VERSION:
        raise UnsupportedFormatError(
            f"{path} was written by a newer statekeep (database schema version {version}; "
            f"this statekeep knows versions up to {SCHEMA_VERSION}). Upgrade statekeep to use "
            "this database; nothing was read or written"
        )


def make_file(path: Path, io: OsIO | None = None) -> None:
    """Create the database file (0600) and missing folders (0700), durably, through the
    same I/O seam and helpers as FileStore."""
    if path.exists():
        return
    io = io or OsIO()
    make_folders(io, path.parent)
    parent = io.open(str(path.parent), os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            # SQLite gives its -wal and -shm files the same mode; SQLite syncs the file's
            # contents, the new name in the folder is ours to sync.
            write_file(io, parent, path.name, b"", exclusive=True)
        except FileExistsError:
            return  # another process made it
        io.fsync(parent)
    finally:
        os.close(parent)

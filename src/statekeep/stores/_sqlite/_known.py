"""What a batch's writes are checked against, read in one query under the write lock: each
State's row (or its absence), its lease row, and the schema version (``_sql.KNOWN``).

The version is read by the same statement, in the same transaction, as the rows the
writes are judged by, and before anything is changed: a file upgraded by another process
is refused exactly as a separate ``SELECT`` of the version would refuse it (no process can
change it between that read and the commit: this transaction holds the write lock), and
a file whose version went back down is written again.
"""

from __future__ import annotations

import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from ..._core.leases import Lease
from . import _sql as sql
from ._leases import lease_row
from ._schema import refuse_newer, refuse_newer_after

#: A State's (namespace, id).
Key = tuple[str, str]


class Known(NamedTuple):
    """A stored State, as a write is judged against it."""

    next_seq: int
    expires_at: str | None
    incarnation: str | None
    sealed: bool
    labelled: bool  # it has label rows (replaced when its snapshot is)


def read_known(
    path: Path, conn: sqlite3.Connection, keys: list[Key]
) -> tuple[dict[Key, Known], dict[Key, Lease]]:
    """The stored States among ``keys`` (distinct) and the lease rows they have, in the
    caller's write transaction; UnsupportedFormatError if the file's schema is newer."""
    params = [part for key in keys for part in key]
    try:
        rows = conn.execute(_known_sql(len(keys)), params).fetchall()
    except sqlite3.OperationalError as exc:
        refuse_newer_after(path, conn, exc)
        raise
    refuse_newer(path, rows[0][2] or 0)
    known: dict[Key, Known] = {}
    leases: dict[Key, Lease] = {}
    for ns, sid, _, next_seq, expires, incarnation, sealed, labelled, *lease in rows:
        if next_seq is not None:
            known[ns, sid] = Known(next_seq, expires, incarnation, bool(sealed), bool(labelled))
        if lease[0] is not None:
            leases[ns, sid] = lease_row(ns, sid, lease)
    return known, leases


@lru_cache(maxsize=64)
def _known_sql(count: int) -> str:
    """``_sql.KNOWN`` for ``count`` States (the same text each time: SQLite's statement
    cache keeps it prepared)."""
    return sql.KNOWN.format(pairs=", ".join(["(?, ?)"] * count))

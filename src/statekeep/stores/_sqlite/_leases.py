"""SQLiteStore's lease rows and rekey's in-place replacement, each in one transaction.

A State's lease row ``(owner, token, expires_at, ttl_us)`` sits in ``leases`` under
``(namespace, state_id)``. Every change to it runs in ``BEGIN IMMEDIATE``: SQLite's write
lock serialises it with every write, delete and other lease change of the file, in any
process on the host, and the rule (:mod:`statekeep._leases`) is applied in Python inside
that transaction, at a time read from the store's clock once the lock is held.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import orjson

from ..._errors import CorruptStateError
from ..._labels import iso
from ..._leases import Lease
from . import _sql as sql
from ._connections import rolled_back_on_error
from ._rows import listing_columns
from ._schema import check_version

#: A lease rule: the State's lease row and the time -> the row to store (None: unchanged),
#: or an error (LeaseHeldError, StaleLeaseError) with nothing changed.
Rule = Callable[[Lease | None, datetime], Lease | None]


def lease_row(ns: str, sid: str, row: tuple[str, int, str, int]) -> Lease:
    owner, token, expires_at, ttl_us = row
    try:
        when = datetime.fromisoformat(expires_at)
    except (TypeError, ValueError):
        raise CorruptStateError(f"State {sid!r} of namespace {ns!r} has an unreadable lease expiry") from None
    return Lease(sid, owner, token, when, timedelta(microseconds=ttl_us))


def read_lease(conn: sqlite3.Connection, ns: str, sid: str) -> Lease | None:
    """The State's lease row (inside the caller's transaction), or None if it never had one."""
    row = conn.execute(sql.LEASE, (ns, sid)).fetchone()
    return None if row is None else lease_row(ns, sid, row)


def read_leases(conn: sqlite3.Connection, ns: str, ids: list[str]) -> dict[str, Lease]:
    """The lease rows of ``ids`` that have one (inside the caller's transaction)."""
    marks = ",".join("?" * len(ids))
    rows = conn.execute(sql.LEASES.format(marks=marks), (ns, *ids)).fetchall()
    return {sid: lease_row(ns, sid, rest) for sid, *rest in rows}


def change_lease(
    path: Path, conn: sqlite3.Connection, ns: str, sid: str, clock: Callable[[], datetime], rule: Rule
) -> Lease | None:
    """Apply ``rule`` to the State's lease row in one transaction; return what it stored.

    SQLITE_BUSY, and the rule's error, escape with nothing changed and no transaction open.
    """
    conn.execute(sql.BEGIN_IMMEDIATE)
    with rolled_back_on_error(conn):
        check_version(path, conn)
        new = rule(read_lease(conn, ns, sid), clock())  # the time once the write lock is held
        if new is not None:
            micros = new.ttl // timedelta(microseconds=1)
            conn.execute(sql.PUT_LEASE, (ns, sid, new.owner, new.token, iso(new.expires_at), micros))
        conn.execute(sql.COMMIT)
    return new


def reseal(
    path: Path,
    conn: sqlite3.Connection,
    ns: str,
    sid: str,
    entries: dict[int, tuple[bytes, bytes]],
    snapshot: tuple[bytes, bytes] | None,
) -> int:
    """Replace the State's records in one transaction, each only where the stored one
    still equals its ``old`` (as JSON); the snapshot's listing columns follow it. Returns
    how many were replaced. SQLITE_BUSY escapes with nothing changed."""
    replaced = 0
    conn.execute(sql.BEGIN_IMMEDIATE)
    with rolled_back_on_error(conn):
        check_version(path, conn)
        for seq, (old, new) in sorted(entries.items()):
            got = conn.execute(sql.STORED_ENTRIES, (ns, sid, seq, seq + 1)).fetchone()
            if got is not None and _same(got[0], old):
                conn.execute(sql.RESEAL_ENTRY, (new, ns, sid, seq))
                replaced += 1
        if snapshot is not None:
            old, new = snapshot
            got = conn.execute(sql.READ_STATE, (ns, sid)).fetchone()
            if got is not None and got[1] is not None and _same(got[1], old):
                columns, _ = listing_columns(sid, new)  # labels are in clear: unchanged
                conn.execute(sql.RESEAL_SNAPSHOT, (new, *columns, ns, sid))
                replaced += 1
        conn.execute(sql.COMMIT)
    return replaced


def _same(stored: bytes, old: bytes) -> bool:
    """Whether a stored record is still ``old``: the same bytes, or the same JSON value."""
    if stored == old:
        return True
    try:
        return bool(orjson.loads(stored) == orjson.loads(old))
    except orjson.JSONDecodeError:
        return False

"""SQLiteStore's leases and rekey's in-place replacement, each in one transaction.

A State's lease row ``(owner, token, expires_at, ttl_us)`` sits in ``leases`` under
``(namespace, state_id)``. Every change to it runs in ``BEGIN IMMEDIATE``: SQLite's write
lock serialises it with every write, delete and other lease change of the file, in any
process on the host, and the rule (:mod:`statekeep._core.leases`) is applied in Python inside
that transaction, at a time read from the store's clock once the lock is held.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from ..._core.errors import CorruptStateError, StatekeepError
from ..._core.labels import iso
from ..._core.leases import Lease, acquired, is_live, released, renewed
from ..._runtime.bridge import owner
from ..._runtime.slot import ProcessSlot
from . import _sql as sql
from ._connections import Connections, rolled_back_on_error
from ._rows import listing_columns
from ._schema import check_version

T = TypeVar("T")

#: A lease rule: the State's lease row and the time -> the row to store (None: unchanged),
#: or an error (LeaseHeldError, StaleLeaseError) with nothing changed.
Rule = Callable[[Lease | None, datetime], Lease | None]


def lease_row(ns: str, sid: str, row: tuple[str, int, str, int]) -> Lease:
    owner, token, expires_at, ttl_us = row
    try:
        when = datetime.fromisoformat(expires_at)
    except (TypeError, ValueError):
        raise CorruptStateError(f"State {sid!r} of namespace {ns!r} has an unreadable lease expiry") from None
    return Lease(sid, owner, token, when, timedelta(microseconds=ttl_us), ns)


def read_lease(conn: sqlite3.Connection, ns: str, sid: str) -> Lease | None:
    """The State's lease row (inside the caller's transaction), or None if it never had one."""
    row = conn.execute(sql.LEASE, (ns, sid)).fetchone()
    return None if row is None else lease_row(ns, sid, row)


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


class LeaseRows:
    """SQLiteStore's lease hooks and ``_reseal``, each change in a transaction of its own on
    a connection of its own (the batch flusher uses the writer meanwhile)."""

    if TYPE_CHECKING:
        path: Path
        namespace: str
        _slot: ProcessSlot[Connections]

        def _now(self) -> datetime: ...
        def _retry_busy(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...
        def _ensure_schema(self, conns: Connections) -> None: ...
        def _connect(self) -> sqlite3.Connection: ...
        def _absent(self, conns: Connections) -> bool: ...
        def _reading(self, conns: Connections) -> AbstractContextManager[sqlite3.Connection]: ...

    async def _acquire(self, state_id: str, owner: str, ttl: timedelta) -> Lease:
        lease = await self._change_lease(
            state_id, lambda held, now: acquired(state_id, owner, ttl, held, now, self.namespace)
        )
        assert lease is not None
        return lease

    async def _renew(self, lease: Lease, ttl: timedelta) -> Lease:
        new = await self._change_lease(lease.state_id, lambda held, now: renewed(lease, held, ttl, now))
        assert new is not None
        return new

    async def _release(self, lease: Lease) -> None:
        await self._change_lease(lease.state_id, lambda held, now: released(lease, held, now))

    async def _current_lease(self, state_id: str) -> Lease | None:
        conns = self._slot.get()
        return await owner().io.run(self._retry_busy, self._current_lease_once, conns, state_id)

    async def _reseal(
        self, state_id: str, entries: dict[int, tuple[bytes, bytes]], snapshot: tuple[bytes, bytes] | None
    ) -> int:
        conns = self._slot.get()
        args = (self.path, self.namespace, state_id, entries, snapshot)
        return await owner().io.run(self._in_transaction, conns, reseal, *args)

    async def _change_lease(self, state_id: str, rule: Rule) -> Lease | None:
        conns = self._slot.get()
        args = (self.path, self.namespace, state_id, self._now, rule)
        return await owner().io.run(self._in_transaction, conns, change_lease, *args)

    def _in_transaction(self, conns: Connections, fn: Callable[..., T], path: Path, *args: Any) -> T:
        """``fn(path, conn, *args)`` on a connection of its own (the batch flusher uses the
        writer meanwhile), retried while the database is locked; the file is made first."""
        self._ensure_schema(conns)
        conn = conns.take_reader() or self._connect()
        healthy = False
        try:
            result = self._retry_busy(fn, path, conn, *args)
            healthy = True
            return result
        except StatekeepError:  # a lease refused: the rule's error, the transaction rolled back
            healthy = not conn.in_transaction
            raise
        finally:
            conns.give_reader(conn, reuse=healthy)

    def _current_lease_once(self, conns: Connections, sid: str) -> Lease | None:
        if self._absent(conns):
            return None
        with self._reading(conns) as conn:
            held = read_lease(conn, self.namespace, sid)
        return held if is_live(held, self._now()) else None


def _same(stored: bytes, old: bytes) -> bool:
    """Whether a stored record is still ``old``: the same bytes, or the same JSON value."""
    if stored == old:
        return True
    try:
        return bool(orjson.loads(stored) == orjson.loads(old))
    except orjson.JSONDecodeError:
        return False

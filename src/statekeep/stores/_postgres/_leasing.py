"""PostgresStore's leases, client side: each operation is one call of a server function
(:mod:`._schema_leases`) that judges the lease by the server's clock; a refusal comes back
with the State's lease row and the server's time, and the error is the one the pure rule
of :mod:`statekeep._core.leases` raises for them. Also rekey's in-place reseal."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn

from ..._core.leases import Lease, acquired, check_fence, is_live, renewed
from ..._store.backend import Backend
from .._server import OK
from ._listing import listing
from ._sql import Sql


def lease_args(lease: Lease | None) -> tuple[str | None, int | None]:
    """The owner and token a write or delete sends for ``lease`` (NULL, NULL: none)."""
    return (None, None) if lease is None else (lease.owner, lease.token)


def held(
    namespace: str, state_id: str, owner: str | None, token: int | None, until: datetime | None
) -> Lease | None:
    """The lease row a function returned, as a Lease (None: the State has none)."""
    if token is None or owner is None or until is None:
        return None
    return Lease(state_id, owner, token, until, namespace=namespace)


def refused(
    namespace: str, state_id: str, holder: Sequence[Any], lease: Lease | None, doing: str
) -> NoReturn:
    """Raise the error of a write, delete or fork the server's fence refused; ``holder``
    is what it returned: (owner, token, expires_at, the server's time)."""
    owner, token, until, now = holder
    check_fence(state_id, held(namespace, state_id, owner, token, until), lease, now, doing)
    raise RuntimeError(  # the server and the rule disagree: never expected
        f"State {state_id!r}: PostgreSQL refused the lease (token {token}) at {now}, which "
        f"statekeep's rule allows; {doing}"
    )


class Leasing(Backend):
    """The lease hooks of :class:`PostgresStore` (a mixin; the store supplies ``_sql`` and
    ``_query``). Each runs with the State's lock of this process held."""

    _sql: Sql

    async def _query(self, action: str, method: str, query: str, *args: Any, local: Any = None) -> Any:
        raise NotImplementedError

    async def _acquire(self, state_id: str, owner: str, ttl: timedelta) -> Lease:
        row = await self._query("write", "fetchrow", self._sql.acquire, self.namespace, state_id, owner, ttl)
        status, got_owner, token, until, now = row
        if status == OK:
            return Lease(state_id, got_owner, token, until, ttl, self.namespace)
        got = held(self.namespace, state_id, got_owner, token, until)
        acquired(state_id, owner, ttl, got, now, self.namespace)  # raises
        raise RuntimeError(f"State {state_id!r}: PostgreSQL refused an acquire statekeep's rule allows")

    async def _renew(self, lease: Lease, ttl: timedelta) -> Lease:
        sid = lease.state_id
        row = await self._query(
            "write", "fetchrow", self._sql.renew, self.namespace, sid, lease.owner, lease.token, ttl
        )
        status, owner, token, until, now = row
        if status == OK:
            return dataclasses.replace(lease, expires_at=until, ttl=ttl)
        renewed(lease, held(self.namespace, sid, owner, token, until), ttl, now)  # raises
        raise RuntimeError(f"State {sid!r}: PostgreSQL refused a renew statekeep's rule allows")

    async def _release(self, lease: Lease) -> None:
        await self._query(
            "write", "execute", self._sql.release, self.namespace, lease.state_id, lease.owner, lease.token
        )

    async def _current_lease(self, state_id: str) -> Lease | None:
        row = await self._query("read", "fetchrow", self._sql.current_lease, self.namespace, state_id)
        if row is None:
            return None
        owner, token, until, ttl, now = row
        lease = Lease(state_id, owner, token, until, ttl, self.namespace)
        return lease if is_live(lease, now) else None

    async def _reseal(
        self, state_id: str, entries: dict[int, tuple[bytes, bytes]], snapshot: tuple[bytes, bytes] | None
    ) -> int:
        seqs = sorted(entries)
        old_snapshot, new_snapshot = (None, None) if snapshot is None else snapshot
        # The task column shows the snapshot's task as stored (sealed, unless indexed).
        task = None if new_snapshot is None else listing(state_id, new_snapshot)[0]
        count: int = await self._query(
            "write",
            "fetchval",
            self._sql.reseal,
            self.namespace,
            state_id,
            seqs,
            [entries[s][0].decode() for s in seqs],
            [entries[s][1].decode() for s in seqs],
            None if old_snapshot is None else old_snapshot.decode(),
            None if new_snapshot is None else new_snapshot.decode(),
            task,
        )
        return count

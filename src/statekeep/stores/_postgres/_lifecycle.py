"""PostgresStore's listings, expiry, gc, fork and namespaces, on the server's side.

Expiry is judged by the server's clock (``now()``), in the statements themselves: a row
whose ``expires_at`` has passed is absent for read, list, write and fork, and gc deletes
it. With ``retention``, the write function stamps ``expires_at = now() + retention`` in
the row (the snapshot is left as it was given), so every process and host agrees on it.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..._core.errors import StateConflictError
from ..._core.query import ListQuery, Page
from ..._core.records import SavedState, Snapshot, decode_snapshot
from ..._core.writes import exists_error, missing_error, prepare_write
from ..._runtime.bridge import owner, run_async
from ..._store.backend import Backend
from ..._store.saving import write_fork
from .. import _server as servercommon
from ._leasing import refused
from ._listing import listing, page_query, page_rows
from ._schema_leases import FENCED

if TYPE_CHECKING:
    from ._sql import Sql

#: States removed by one gc statement (one transaction) at most.
GC_BATCH = 1000


class Lifecycle(Backend):
    """The part of :class:`PostgresStore` that :class:`~statekeep._store.backend.Backend` lets a
    store answer itself (a mixin; the store supplies ``_sql`` and ``_query``)."""

    _sql: Sql
    _root: Lifecycle | None = None  # the store a memory sibling shares its pool with

    async def _query(self, action: str, method: str, query: str, *args: Any, local: Any = None) -> Any:
        raise NotImplementedError

    # -- expiry: the server's clock ------------------------------------------------------

    def _stamp(self, snapshot: Snapshot) -> Snapshot:
        """Left as it is: the write function stamps the row with the server's clock."""
        return snapshot

    def _expired(self, snapshot: dict[str, Any] | None) -> bool:
        """Never here: the statements leave expired rows out, by the server's clock."""
        return False

    async def _server_now(self) -> datetime:
        """The server's ``now()``, the clock every statement judges expiry by."""
        now: datetime = await self._query("read", "fetchval", "SELECT now()")
        return now

    async def _read_snapshot(self, state_id: str) -> dict[str, Any] | None:
        """The State's snapshot only (one indexed row, no entries); None if absent or
        expired by the server's clock."""
        text = await self._query("read", "fetchval", self._sql.read_snapshot, self.namespace, state_id)
        if text is None:
            return None
        return decode_snapshot(text, f"the snapshot of State {state_id!r} in {self._sql.states}")

    async def _state_ids(self) -> list[str] | None:
        rows = await self._query("read", "fetch", self._sql.state_ids, self.namespace)
        return [row[0] for row in rows]

    async def _size_bytes(self) -> int | None:
        """``pg_total_relation_size`` of the store's tables (rows, indexes, TOAST), which
        every namespace of the store shares."""
        sql = self._sql
        tables = [sql.states, sql.entries, sql.labels, sql.leases, sql.version, sql.blobs, sql.blob_refs]
        size: int = await self._query(
            "stats",
            "fetchval",
            "SELECT coalesce(sum(pg_total_relation_size(to_regclass(t))), 0)::bigint FROM unnest($1::text[]) t",
            tables,
        )
        return size

    # -- listings ----------------------------------------------------------------------

    async def _select(self, query: ListQuery) -> tuple[Page, list[str]]:
        statement, args = page_query(self._sql, self.namespace, query)
        rows = await self._query("list", "fetch", statement, *args)
        return page_rows(rows, query, first_page=query.after is None)

    async def _list(self) -> tuple[list[SavedState], list[str]]:
        return await self._select(ListQuery())

    # -- gc ----------------------------------------------------------------------------

    async def _count_expired(self) -> int:
        """What gc would remove now: one count on the expiry index, by the server's clock
        (gc deletes exactly the rows with ``expires_at <= now()`` that no live lease holds)."""
        count: int = await self._query("gc", "fetchval", self._sql.count_expired, self.namespace)
        return count

    async def _gc(self, limit: int | None) -> int:
        """Delete expired States in transactions of at most :data:`GC_BATCH`, each row
        checked again once locked, rows held by a writer skipped."""
        removed = 0
        while limit is None or removed < limit:
            want = GC_BATCH if limit is None else min(GC_BATCH, limit - removed)
            count: int = await self._query("gc", "fetchval", self._sql.gc, self.namespace, want)
            removed += count
            if count < want:
                break
        return removed

    # -- fork ----------------------------------------------------------------------------

    async def _afork_write(
        self, source_id: str, entries: list[dict[str, Any]], snapshot: dict[str, Any], new_id: str,
        incarnation: str | None,
    ) -> None:  # fmt: skip
        """Create the fork in one transaction: its row, and its entries copied on the server
        (one INSERT ... SELECT) from the source, which must still hold what was read; refused
        while another worker holds the lease of ``new_id``."""
        lines = self._stored_lines(source_id, entries)  # blob references, as stored
        write = prepare_write(new_id, [], snapshot, True)
        self._check_open(None)
        at_seq = entries[-1]["seq"] if entries else -1  # (len(entries) - 1 but for a trimmed source)
        digest = hashlib.sha256(b"".join(lines)).digest()
        columns = listing(new_id, write.snapshot)
        args = (
            source_id, at_seq, digest, self.namespace, new_id, None if write.snapshot is None
            else write.snapshot.decode(), *columns, self.retention, incarnation,
        )  # fmt: skip
        status, *holder = await self._run_fork(args, new_id)
        if status == FENCED:
            refused(self.namespace, new_id, holder, None, "nothing was forked")
        if status == servercommon.MISSING:
            raise missing_error(source_id)
        if status == servercommon.EXISTS:
            raise exists_error(new_id)
        if status == servercommon.COMPARE:  # replaced since it was read, or stored otherwise
            if not await self._fork_source_unchanged(source_id, entries):
                raise StateConflictError(
                    f"State {source_id!r} was deleted and written again while it was forked; nothing "
                    "was written. Fork it again"
                )
            await write_fork(self, entries, snapshot, new_id, incarnation)  # the entries as read

    async def _run_fork(self, args: tuple[Any, ...], new_id: str) -> tuple[Any, ...]:
        async def locked() -> tuple[Any, ...]:
            async with owner().lock((self._storage_key(), new_id)):
                return tuple(await self._query("write", "fetchrow", self._sql.fork, *args))

        return await run_async(locked())

    # -- namespaces ----------------------------------------------------------------------

    def _sibling(self, namespace: str) -> Lifecycle:
        """This store in another namespace, on the same pool (for agent memory): it opens,
        uses and closes nothing of its own, and is closed with this store."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin._join(self, namespace)
        twin._root = self._root or self
        return twin

    def _check_open(self, value: Any) -> Any:
        if self._root is not None and self._root._closed:
            raise RuntimeError(f"{self._root!r} is closed; open a new store to use it again")
        return super()._check_open(value)

    async def _close(self) -> None:
        if self._root is None:  # a sibling closes nothing: the pool is its root's
            await super()._close()

"""What the built-in stores share: checks, the hop to the owner loop, per-State locks.

A built-in store implements four coroutines that run on the owner loop: ``_write`` (with
the State's lock held), ``_read``, ``_list`` and ``_delete`` (lock held). The public
methods validate the id and encode the data in the caller's thread first, so bad input
fails before any storage is touched.
"""

from __future__ import annotations

import warnings
from abc import abstractmethod
from collections.abc import Callable, Coroutine, Hashable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from .._core.ids import validate_id
from .._core.labels import (
    DEFAULT_NAMESPACE,
    check_period,
    expired_at,
    iso,
    memory_namespace,
    validate_namespace,
)
from .._core.leases import Lease, check_fence, check_lease
from .._core.query import ListQuery, Page, make_query, select
from .._core.ranges import SNAPSHOT_ONLY, check_since
from .._core.records import Entries, Record, SavedState, Snapshot, built
from .._core.writes import PreparedWrite
from .._leases.api import Leasing
from .._protect.protection import Protection
from .._runtime.bridge import owner, run_async, run_sync
from .contract import Store
from .expect import expecting_next
from .incarnations import Incarnated

if TYPE_CHECKING:
    from .._run.state import State
    from .agentmemory import Memory

T = TypeVar("T")

#: A clock: returns the current time as an aware datetime.
Clock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(UTC)


class Backend(Leasing, Incarnated, Store):
    """The base of the built-in stores; private (third-party stores subclass :class:`Store`).

    On top of :class:`Store` it gives: ids and data validated and encoded in the caller's
    thread before any storage is touched; every call run on statekeep's owner loop; a lock
    per (storage, State id) held around ``_write`` and ``_delete``; a RuntimeError for any
    call after ``close()``; equality and hashing by the storage (``_storage_key``); and
    ``list()`` warnings for States it leaves out. A subclass implements the abstract
    coroutines below, which run on the owner loop.
    """

    _closed = False
    namespace: str = DEFAULT_NAMESPACE
    #: How long a State without an explicit ``expires_at`` lives after its last write.
    retention: timedelta | None = None
    _clock: Clock = staticmethod(system_clock)
    _protection = Protection()
    _eager = True  # operations start eagerly (statekeep._runtime.eager); not if the client needs its own Task

    def _lifecycle(
        self,
        namespace: str,
        retention: timedelta | float | None,
        clock: Clock | None = None,
        *,
        internal: bool = False,
    ) -> None:
        """Take the constructor's ``namespace``, ``retention`` and ``clock`` (checked)."""
        self.namespace = validate_namespace(namespace, internal=internal)
        self.retention = None if retention is None else check_period(retention, "retention")
        if clock is not None:
            if not callable(clock):
                raise TypeError(f"clock must be a function returning an aware datetime, got {clock!r}")
            self._clock = clock

    def _protect(self, redact: object, encrypt: object, allow_plaintext: object) -> None:
        """Take the constructor's ``redact``, ``encrypt`` and ``allow_plaintext`` (checked)."""
        self._protection = Protection(redact, encrypt, allow_plaintext)

    @property
    def _keyring(self) -> object:
        """The store's Keyring, or None: a store that copies on its side must not when set."""
        return self._protection.keyring

    def _now(self) -> datetime:
        """The time expiry is judged by (the store's clock; server stores override)."""
        return self._clock()

    # -- to implement ---------------------------------------------------------------

    @abstractmethod
    def _storage_key(self) -> Hashable:
        """Equal for two instances that stand for the same storage."""
        raise NotImplementedError

    @abstractmethod
    async def _write(self, write: PreparedWrite) -> None:
        """Store a validated write (the State's lock is held). If it goes through a
        :class:`~statekeep._runtime.batching.GroupCommit`, submitting it must be the last thing it
        does: its caller is woken once the batch is committed (see ``direct`` in
        :func:`~statekeep._runtime.bridge.run_sync`). The same holds for ``_delete``."""
        raise NotImplementedError

    @abstractmethod
    async def _read(self, state_id: str, since: int = 0) -> Record | Callable[[], Record] | None:
        """The Record with the entries of seq >= ``since`` (checked: an int >= 0), or a
        function that builds it (called in the caller's thread). Its cost should grow with
        what it returns, not with the history."""
        raise NotImplementedError

    @abstractmethod
    async def _list(self) -> tuple[list[SavedState], list[str]]:
        """The listing, and a message for each State left out because it is unreadable."""
        raise NotImplementedError

    @abstractmethod
    async def _delete(self, state_id: str, lease: Lease | None = None) -> None:
        """Remove a State whole, if there is one (the State's lock is held), applying the
        fence (:func:`~statekeep._core.leases.check_fence`) atomically with the removal."""
        raise NotImplementedError

    async def _close(self) -> None:
        """Release resources; runs on the owner loop. Nothing by default."""

    async def _select(self, query: ListQuery) -> tuple[Page, list[str]]:
        """One page of the listing: by default :meth:`_list` filtered and paged here
        (expired States left out); stores with indexes answer from them."""
        rows, skipped = await self._list()
        if not query.include_expired:
            now = self._now()
            rows = [row for row in rows if row.expires_at is None or row.expires_at > now]
        return select(rows, query), skipped

    async def _server_now(self) -> datetime:
        """The time of the clock that judges expiry (server stores ask their server)."""
        return self._now()

    async def _count_expired(self) -> int:
        """How many States gc would remove now (a dry run)."""
        page, _ = await self._select(ListQuery(include_expired=True))
        now = await self._server_now()
        expired = [row.id for row in page if row.expires_at is not None and row.expires_at <= now]
        return sum([await self._current_lease(sid) is None for sid in expired])

    async def _size_bytes(self) -> int | None:
        """The bytes the store takes where it keeps its data, every namespace counted (for
        ``statekeep stats``), or None where that is not known (this default)."""
        return None

    async def _state_ids(self) -> list[str] | None:
        """Every State id the store holds, in id order: those without a snapshot (which no
        listing shows) and expired ones too; None where the store cannot walk its ids
        (this default). ``copy --all`` and ``export --all`` walk these."""
        return None

    async def _child_ids(self, state_id: str) -> list[str]:
        """The ids of ``state_id``'s children, expired ones too (a tree delete must reach
        the live States below an expired one)."""
        page, _ = await self._select(ListQuery(parent=state_id, include_expired=True))
        return [row.id for row in page]

    async def _atree(self, root: str) -> list[str]:
        # On the owner loop: the _child_ids hooks talk to the store's connections there.
        return await run_async(super()._atree(root))

    async def _read_snapshot(self, state_id: str) -> dict[str, Any] | None:
        """A State's snapshot alone (None if absent or expired); stores that can read it
        without the history override this (agent memory reads only snapshots)."""
        record = built(await self._read(state_id))
        if record is None or self._expired(record.snapshot):
            return None
        return record.snapshot

    async def aread_snapshot(self, state_id: str) -> dict[str, Any] | None:
        """Internal: :meth:`_read_snapshot` on the owner loop, for agent memory."""
        sid = self._check_open(validate_id(state_id))
        if self._protection.keyring is not None:  # opening needs the State's incarnation: read it too
            return getattr(await self.aread(sid, since=SNAPSHOT_ONLY), "snapshot", None)
        return self._protection.snapshot(self.namespace, sid, await run_async(self._read_snapshot(sid)), None)

    async def _gc(self, limit: int | None) -> int:
        """Remove expired States; by default each one found by :meth:`_list` is read again
        under its lock and deleted only if it is still expired."""
        rows, _ = await self._list()
        removed = 0
        for row in rows:
            if limit is not None and removed >= limit:
                break
            if row.expires_at is None or row.expires_at > self._now():
                continue
            async with owner().lock((self._storage_key(), row.id)):
                record = built(await self._read(row.id))
                if record is not None and self._expired(record.snapshot):
                    if await self._current_lease(row.id) is not None:
                        continue  # a live lease keeps an expired State: its worker is at it
                    await self._delete(row.id)
                    removed += 1
        return removed

    def _sibling(self, namespace: str) -> Backend:
        """A store on the same storage in another namespace (for agent memory)."""
        raise NotImplementedError(f"{type(self).__name__} has no namespaces")

    def _expired(self, snapshot: dict[str, Any] | None) -> bool:
        """Whether a read snapshot is past its expiry (then the State reads as absent)."""
        return expired_at(snapshot, self._now())

    def _stamp(self, snapshot: Snapshot) -> Snapshot:
        """With a ``retention``, stamp a snapshot that has no expiry of its own."""
        if self.retention is None or snapshot is None or snapshot.get("expires_at") is not None:
            return snapshot
        return {**snapshot, "expires_at": iso(self._now() + self.retention), "expiry": "retention"}

    # -- the public API -------------------------------------------------------------

    async def awrite(
        self,
        state_id: str,
        entries: Entries,
        snapshot: Snapshot,
        *,
        create: bool = False,
        lease: Lease | None = None,
        incarnation: str | None = None,
        expect_next: int | None = None,
    ) -> None:
        """As :meth:`Store.awrite`; ``incarnation``: see :meth:`Incarnated._binding`."""
        binding = self._binding(state_id, create, incarnation) or (await self._alearn(state_id))
        write = self._prepared(state_id, entries, snapshot, create, lease, binding)
        write = write if expect_next is None else expecting_next(write, expect_next)
        with self._known.watching(write):
            await run_async(self._locked_write(self._check_open(write)), direct=True, eager=self._eager)

    def write(
        self,
        state_id: str,
        entries: Entries,
        snapshot: Snapshot,
        *,
        create: bool = False,
        lease: Lease | None = None,
        incarnation: str | None = None,
        expect_next: int | None = None,
    ) -> None:
        binding = self._binding(state_id, create, incarnation) or run_sync(self._alearn(state_id), "aread")
        write = self._prepared(state_id, entries, snapshot, create, lease, binding)
        write = write if expect_next is None else expecting_next(write, expect_next)
        with self._known.watching(write):
            run_sync(self._locked_write(self._check_open(write)), "awrite", direct=True, eager=self._eager)

    async def aread(self, state_id: str, *, since: int = 0) -> Record | None:
        read = self._read(self._check_open(validate_id(state_id)), check_since(since))
        return self._opened(state_id, built(await run_async(read, eager=self._eager)), since)

    def read(self, state_id: str, *, since: int = 0) -> Record | None:
        read = self._read(self._check_open(validate_id(state_id)), check_since(since))
        return self._opened(state_id, built(run_sync(read, "aread", eager=self._eager)), since)

    def _opened(self, state_id: str, record: Record | None, since: int) -> Record | None:
        if record is not None:
            self._known.put(state_id, record.incarnation)
        return self._protection.record(self.namespace, state_id, self._live(record), since)

    def _live(self, record: Record | None) -> Record | None:
        return None if record is None or self._expired(record.snapshot) else record

    async def alist(
        self,
        *,
        limit: int | None = None,
        after: str | None = None,
        agent: str | None = None,
        parent: str | None = None,
        finished: bool | None = None,
        stopped_by: str | None = None,
        status: str | None = None,
        labels: Mapping[str, str] | None = None,
        updated_after: datetime | None = None,
        updated_before: datetime | None = None,
        id_prefix: str | None = None,
    ) -> Page:
        query = make_query(
            limit=limit,
            after=after,
            agent=agent,
            parent=parent,
            finished=finished,
            stopped_by=stopped_by,
            status=status,
            labels=labels,
            updated_after=updated_after,
            updated_before=updated_before,
            id_prefix=id_prefix,
        )
        self._check_open(None)
        page = await run_async(self._select(query), eager=self._eager)
        return self._protection.rows(self.namespace, _warn_skipped(page))

    def list(
        self,
        *,
        limit: int | None = None,
        after: str | None = None,
        agent: str | None = None,
        parent: str | None = None,
        finished: bool | None = None,
        stopped_by: str | None = None,
        status: str | None = None,
        labels: Mapping[str, str] | None = None,
        updated_after: datetime | None = None,
        updated_before: datetime | None = None,
        id_prefix: str | None = None,
    ) -> Page:
        query = make_query(
            limit=limit,
            after=after,
            agent=agent,
            parent=parent,
            finished=finished,
            stopped_by=stopped_by,
            status=status,
            labels=labels,
            updated_after=updated_after,
            updated_before=updated_before,
            id_prefix=id_prefix,
        )
        self._check_open(None)
        page = run_sync(self._select(query), "alist", eager=self._eager)
        return self._protection.rows(self.namespace, _warn_skipped(page))

    async def adelete(self, state_id: str, *, children: bool = False, lease: Lease | None = None) -> None:
        if children:
            root = self._check_open(validate_id(state_id))
            await run_async(self._check_tree_leases(root, check_lease(lease, root, self.namespace)))
            await super().adelete(state_id, children=True, lease=lease)
            return
        sid = self._check_open(validate_id(state_id))
        delete = self._locked_delete(sid, check_lease(lease, sid, self.namespace))
        await run_async(delete, direct=True, eager=self._eager)

    def delete(self, state_id: str, *, children: bool = False, lease: Lease | None = None) -> None:
        if children:
            super().delete(state_id, children=True, lease=lease)
            return
        sid = self._check_open(validate_id(state_id))
        delete = self._locked_delete(sid, check_lease(lease, sid, self.namespace))
        run_sync(delete, "adelete", direct=True, eager=self._eager)

    async def afork(
        self,
        state_id: str,
        *,
        at_seq: int | None = None,
        new_id: str | None = None,
        labels: dict[str, str] | None = None,
        lease: Lease | None = None,
    ) -> State:
        # The fork reads the source: refused while another worker holds it (not atomic
        # with the read, which changes nothing).
        sid = self._check_open(validate_id(state_id))
        held = await self.acurrent_lease(sid)
        check_fence(
            sid,
            held,
            check_lease(lease, sid, self.namespace),
            await run_async(self._server_now()),
            "nothing was forked",
        )
        return await super().afork(state_id, at_seq=at_seq, new_id=new_id, labels=labels)

    def _may_copy_on_server(self) -> bool:
        return self._protection.keyring is None  # sealed records are re-sealed for their new place

    async def agc(self, *, limit: int | None = None, dry_run: bool = False) -> int:
        """Remove expired States (at most ``limit``) and return how many were removed.

        Safe to run from several processes at once: a State is removed only if it is still
        expired when its delete runs, so one a write just extended stays. Each removal is
        durable on return as the store's ``delete`` is. ``dry_run=True`` removes nothing and
        returns how many States are expired now (by the clock that judges expiry).
        """
        return await run_async(self._gc_op(limit, dry_run))

    def gc(self, *, limit: int | None = None, dry_run: bool = False) -> int:
        """Sync :meth:`agc`."""
        return run_sync(self._gc_op(limit, dry_run), "agc")

    def _gc_op(self, limit: int | None, dry_run: bool) -> Coroutine[Any, Any, int]:
        if limit is not None and (type(limit) is not int or isinstance(limit, bool) or limit < 1):
            raise ValueError(f"limit must be an int >= 1 or None, got {limit!r}")
        self._check_open(None)
        return self._count_expired() if dry_run else self._gc(limit)

    def memory(self, scope: str = "default") -> Memory:
        """Agent memory: a durable key/value store kept beside the States of this namespace,
        for what an agent keeps between runs (see :class:`~statekeep.Memory`)."""
        from .agentmemory import Memory

        self._check_open(None)
        sibling = self._sibling(memory_namespace(self.namespace, scope))
        sibling._protection = self._protection  # memory values are redacted and sealed too
        return Memory(sibling, scope)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await run_async(self._close())

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            run_sync(self._close(), "aclose")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Backend):
            return NotImplemented
        return type(self) is type(other) and self._storage_key() == other._storage_key()

    def __hash__(self) -> int:
        return hash((type(self), self._storage_key()))

    # -- plumbing -------------------------------------------------------------------

    def _check_open(self, value: Any) -> Any:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed; open a new store to use it again")
        return value

    async def _locked_write(self, write: PreparedWrite) -> None:
        await owner().locked((self._storage_key(), write.state_id), self._write(write))

    async def _locked_delete(self, state_id: str, lease: Lease | None) -> None:
        await owner().locked((self._storage_key(), state_id), self._delete(state_id, lease))

    async def _check_tree_leases(self, root: str, lease: Lease | None) -> None:
        """Refuse a tree delete before it starts when the root's lease is not ``lease`` or
        another worker holds a child (each delete checks again, atomically)."""
        now = await self._server_now()
        for sid in await self._atree(root):
            held = await self._current_lease(sid)
            check_fence(sid, held, lease if sid == root else None, now, "nothing was deleted")

    def _locked(self, state_id: str, work: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
        return owner().locked((self._storage_key(), state_id), work)


def _warn_skipped(result: tuple[Page, list[str]]) -> Page:
    rows, skipped = result
    for message in skipped:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    return rows

"""What the built-in stores share: the public methods over an :class:`~.engine.Engine`.

The public methods validate the id and encode the data in the caller's thread first, so
bad input fails before any storage is touched, then run the engine's hooks on the owner
loop (``_write`` and ``_delete`` under the State's lock). Each sync/async pair shares one
opening (``_*_call``: the checks, and the coroutine both sides run).
"""

from __future__ import annotations

import builtins
import warnings
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from .._core.labels import memory_namespace
from .._core.leases import Lease, check_fence, check_lease
from .._core.query import ListFilters, Page, make_query
from .._core.ranges import SNAPSHOT_ONLY, check_since
from .._core.records import Entries, Record, Snapshot, built
from .._core.writes import PreparedWrite
from .._leases.api import Leasing
from .._runtime import telemetry
from .._runtime.bridge import owner, run_async, run_sync
from . import trimming
from .blobs import Blobs, Collected, ReadResult, missing_blobs, with_blobs
from .capabilities import Namespaces, Trims
from .contract import Store
from .engine import Engine
from .expect import expecting_next
from .incarnations import Binding, Incarnated
from .shims import no_leases
from .trimming import check_before

if TYPE_CHECKING:
    from .._run.state import State
    from .agentmemory import Memory

T = TypeVar("T")
#: The stored bytes of the blobs a read's entries list (None: the store keeps no blobs).
Fetched = dict[str, bytes] | None


class Backend(Engine, Leasing, Incarnated, Store):
    """The base of the built-in stores and of a backend of your own
    (``statekeep.stores.engine``; a store of your own may subclass :class:`Store` instead).

    On top of :class:`Store` it gives: ids and data validated and encoded in the caller's
    thread before any storage is touched; every call run on statekeep's owner loop; a lock
    per (storage, State id) held around ``_write`` and ``_delete``; a RuntimeError for any
    call after ``close()``; equality and hashing by the storage (``_storage_key``); and
    ``list()`` warnings for States it leaves out. A subclass implements the
    :class:`~.engine.Engine` hooks, which run on the owner loop.
    """

    async def _atree(self, root: str) -> list[str]:
        # On the owner loop: the _child_ids hooks talk to the store's connections there.
        return await run_async(super()._atree(root))

    async def aread_snapshot(self, state_id: str) -> dict[str, Any] | None:
        """Internal: :meth:`_read_snapshot` on the owner loop, for agent memory."""
        sid = self._sid(state_id)
        if self._protection.keyring is not None:  # opening needs the State's incarnation: read it too
            return getattr(await self.aread(sid, since=SNAPSHOT_ONLY), "snapshot", None)
        return self._protection.snapshot(self.namespace, sid, await run_async(self._read_snapshot(sid)), None)

    # -- the public API: each pair's opening is its ``_*_call`` -------------------------

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
        op = telemetry.start(self, "write", state_id) if self._telemetry else None  # (inline: the hot path)
        try:
            binding = self._binding(state_id, create, incarnation) or (await self._alearn(state_id))
            write = self._write_call(state_id, entries, snapshot, create, lease, binding, expect_next, op)
            with self._known.watching(write):
                await run_async(self._locked_write(write), direct=True, eager=self._eager)
        except BaseException as exc:
            telemetry.end(op, exc)
            raise
        if op is not None:
            op.end(None)

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
        op = telemetry.start(self, "write", state_id) if self._telemetry else None
        try:
            binding = self._binding(state_id, create, incarnation) or run_sync(
                self._alearn(state_id), "aread"
            )
            write = self._write_call(state_id, entries, snapshot, create, lease, binding, expect_next, op)
            with self._known.watching(write):
                run_sync(self._locked_write(write), "awrite", direct=True, eager=self._eager)
        except BaseException as exc:
            telemetry.end(op, exc)
            raise
        if op is not None:
            op.end(None)

    def _write_call(
        self,
        state_id: str,
        entries: Entries,
        snapshot: Snapshot,
        create: bool,
        lease: Lease | None,
        binding: Binding,
        expect_next: int | None,
        op: telemetry.Op | None = None,
    ) -> PreparedWrite:
        if lease is not None:
            no_leases(self, lease)
        write = self._prepared(state_id, entries, snapshot, create, lease, binding)
        write = write if expect_next is None else expecting_next(write, expect_next)
        if op is not None:
            op.wrote(write.lines, write.snapshot)
        return self._check_open(write)  # type: ignore[no-any-return]

    async def aread(self, state_id: str, *, since: int = 0) -> Record | None:
        return self._opened(
            state_id, await run_async(self._read_call(state_id, since), eager=self._eager), since
        )

    def read(self, state_id: str, *, since: int = 0) -> Record | None:
        return self._opened(
            state_id, run_sync(self._read_call(state_id, since), "aread", eager=self._eager), since
        )

    def _read_call(self, state_id: str, since: int) -> Coroutine[Any, Any, tuple[ReadResult, Fetched]]:
        return self._read_with_blobs(self._sid(state_id), check_since(since))

    async def _read_with_blobs(self, state_id: str, since: int) -> tuple[ReadResult, Fetched]:
        """``_read``, and the blobs its entries list fetched in the same owner-loop call.
        Blobs gone between the two (the State deleted, trimmed or rewritten, then gc beside
        this read) mean the record read is gone too: it is read again, once."""
        read = await self._read(state_id, since)
        if not isinstance(self, Blobs):
            return read, None
        found = await with_blobs(self, read)
        if missing_blobs(found):
            found = await with_blobs(self, await self._read(state_id, since))
        return found

    def _opened(self, state_id: str, read: tuple[ReadResult, Fetched], since: int) -> Record | None:
        record = built(read[0])
        if record is not None:
            self._known.put(state_id, record.incarnation)
        live = None if record is None or self._expired(record.snapshot) else record
        return self._protection.record(self.namespace, state_id, live, since, read[1])

    async def alist(self, **filters: Unpack[ListFilters]) -> Page:
        return self._listed(await run_async(self._list_call(filters), eager=self._eager))

    def list(self, **filters: Unpack[ListFilters]) -> Page:
        return self._listed(run_sync(self._list_call(filters), "alist", eager=self._eager))

    def _list_call(self, filters: ListFilters) -> Coroutine[Any, Any, tuple[Page, builtins.list[str]]]:
        query = make_query(**filters)
        self._check_open(None)
        return self._select(query)

    def _listed(self, result: tuple[Page, builtins.list[str]]) -> Page:
        rows, skipped = result
        for message in skipped:
            # At the caller of list() (below _listed, list and its telemetry wrapper: traced).
            warnings.warn(message, RuntimeWarning, stacklevel=4)
        return self._protection.rows(self.namespace, rows)

    async def adelete(self, state_id: str, *, children: bool = False, lease: Lease | None = None) -> None:
        if children:
            no_leases(self, lease)
            root = self._sid(state_id)
            await run_async(self._check_tree_leases(root, check_lease(lease, root, self.namespace)))
            await super().adelete(state_id, children=True, lease=lease)
            return
        await run_async(self._delete_call(state_id, lease), direct=True, eager=self._eager)

    def delete(self, state_id: str, *, children: bool = False, lease: Lease | None = None) -> None:
        if children:
            super().delete(state_id, children=True, lease=lease)
            return
        run_sync(self._delete_call(state_id, lease), "adelete", direct=True, eager=self._eager)

    def _delete_call(self, state_id: str, lease: Lease | None) -> Coroutine[Any, Any, None]:
        if lease is not None:
            no_leases(self, lease)
        sid = self._sid(state_id)
        return self._locked_delete(sid, check_lease(lease, sid, self.namespace))

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
        no_leases(self, lease)
        sid = self._sid(state_id)
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

    async def _fork_source_unchanged(self, state_id: str, entries: builtins.list[dict[str, Any]]) -> bool:
        """Whether the fork source ``state_id`` still reads as ``entries`` (values whole): when
        a copy on the server's side finds its stored lines differ from :meth:`_stored_lines`,
        it is stored otherwise (another offload bound, an inline base), not replaced, and the
        fork is written whole instead of refused."""
        record = self._opened(state_id, await run_async(self._read_with_blobs(state_id, 0)), 0)
        return record is not None and record.entries[: len(entries)] == entries

    def _stored_lines(self, state_id: str, entries: builtins.list[dict[str, Any]]) -> tuple[bytes, ...]:
        """``entries`` (as read: values whole) encoded as this clear store holds them: redacted,
        large values as blob references. A store that copies a fork on its side
        (``_afork_write``) compares these with the source's stored lines."""
        return self._protection.write(
            self.namespace, state_id, entries, None, False, offload=self._offload
        ).lines

    async def agc(self, *, limit: int | None = None, dry_run: bool = False) -> Collected:
        """Remove expired States (at most ``limit``), then the blobs no State refers to
        any more, and return how many States were removed: a :class:`Collected` (an int)
        whose ``blobs`` and ``blob_bytes`` say what blobs went.

        Safe to run from several processes at once, and beside writers: a State is removed
        only if it is still expired when its delete runs, so one a write just extended
        stays, and a blob that a write in flight refers to is never removed. Each removal
        is durable on return as the store's ``delete`` is; a removed blob's bytes are gone
        from the store's files (see the docs' "Large values" page for each store).
        ``dry_run=True`` removes nothing and returns a count taken now: the States expired by
        the clock that judges expiry (a live lease's left out), and the blobs no State refers
        to at this moment. The blobs that only those expired States refer to are counted
        only where the store has dropped an expired State already (RedisStore's native expiry),
        and the ones only the entries a ``trim_compacted=True`` trim would remove refer to are
        not: the real ``gc`` removes those too, after it removes the States (or trims them), so
        its ``blobs`` may be more than the dry run's.
        """
        return await run_async(self._gc_call(limit, dry_run))

    def gc(self, *, limit: int | None = None, dry_run: bool = False) -> Collected:
        """Sync :meth:`agc`."""
        return run_sync(self._gc_call(limit, dry_run), "agc")

    def _gc_call(self, limit: int | None, dry_run: bool) -> Coroutine[Any, Any, Collected]:
        if limit is not None and (type(limit) is not int or isinstance(limit, bool) or limit < 1):
            raise ValueError(f"limit must be an int >= 1 or None, got {limit!r}")
        self._check_open(None)
        return self._collect(limit, dry_run)

    async def _collect(self, limit: int | None, dry_run: bool) -> Collected:
        if dry_run:
            states = await self._count_expired()
        else:
            states = await (trimming.gc_and_trim(self, limit) if self.trim_compacted else self._gc(limit))
        if not isinstance(self, Blobs):
            return Collected(states)
        blobs, size = await self._gc_blobs(dry_run)
        return Collected(states, blobs, size)

    async def atrim(self, state_id: str, *, before: int, lease: Lease | None = None) -> None:
        """Remove the State's entries before seq ``before``, which its latest compaction's
        summary stands for, and write in their place, at seq ``before - 1``, a ``base`` record
        holding what rebuilding the State needs of them (its task, data, turn count, last agent,
        answered and open tool calls). Every kept entry keeps its seq; their space is reclaimed.

        Afterwards ``read`` returns the base record first (``since`` below it reads from it),
        ``load`` rebuilds the same State (its ``history`` starts at the base), ``fork`` below
        the base is refused, and a write resending entries up to the base's seq skips them as
        had. ``before`` may be at most ``through + 1`` of the State's latest ``compaction``
        entry. Refused with ValueError (nothing changed) when the State has no compaction,
        ``before`` is past it, or at or below a base already there; a trim where the base
        already is changes nothing. StateNotFoundError for no State; ``lease=``: as
        :meth:`awrite`, checked under the State's lock against its current lease (within one
        process: another process's write may fall between).

        Durable on return as the store's ``write``: the base and the kept entries are the
        State, and a crash or power cut during the trim leaves it as before or as after,
        never between. Another process that trims the same State between this trim's read
        and its rewrite makes this one read it again and retry (StateConflictError, nothing
        changed by this trim, after a few such rounds). A State deleted and created again by
        another process between the trim's read and its rewrite is a race this does not
        guard against.
        """
        await run_async(self._trim_call(state_id, before, lease))

    def trim(self, state_id: str, *, before: int, lease: Lease | None = None) -> None:
        """Sync :meth:`atrim`."""
        run_sync(self._trim_call(state_id, before, lease), "atrim")

    def _trim_call(self, state_id: str, before: int, lease: Lease | None) -> Coroutine[Any, Any, None]:
        if lease is not None:
            no_leases(self, lease)
        sid = self._sid(state_id)
        check_before(before)
        if not isinstance(self, Trims):
            raise NotImplementedError(f"{type(self).__name__} does not support trim()")
        return self._locked(sid, trimming.trim(self, sid, before, check_lease(lease, sid, self.namespace)))

    async def _akeep_from(self, state_id: str, seq: int) -> None:
        """Internal, for agent memory: remove a record's entries before ``seq`` (see
        :func:`~.trimming.keep_from`), on the owner loop under its lock."""
        if isinstance(self, Trims):
            await run_async(self._locked(state_id, trimming.keep_from(self, state_id, seq)))

    def memory(self, scope: str = "default") -> Memory:
        """Agent memory: a durable key/value store kept beside the States of this namespace,
        for what an agent keeps between runs (see :class:`~statekeep.Memory`)."""
        from .agentmemory import Memory

        self._check_open(None)
        if not isinstance(self, Namespaces):
            raise NotImplementedError(f"{type(self).__name__} has no namespaces")
        # The sibling is redacted and sealed as this store is (see Engine._join).
        return Memory(self._sibling(memory_namespace(self.namespace, scope)), scope)

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


#: The operations recorded by telemetry (both twins of each; ``write``'s in its body, the hot
#: path): how each names its State, and what its result says (:mod:`statekeep._runtime.telemetry`).
_RECORDED: dict[str, tuple[telemetry.IdOf, telemetry.Measure | None]] = {
    "read": (telemetry.first_id, telemetry.read_entries),
    "list": (telemetry.no_id, telemetry.states),
    "delete": (telemetry.first_id, None),
    "fork": (telemetry.first_id, None),
    "trim": (telemetry.first_id, None),
    "gc": (telemetry.no_id, telemetry.states),
    "save": (telemetry.state_of, None),
    "load": (telemetry.first_id, None),
    "step": (telemetry.state_of, None),
}
for _name, (_id_of, _measure) in _RECORDED.items():
    for _method in (_name, "a" + _name):
        setattr(Backend, _method, telemetry.traced(_name, getattr(Backend, _method), _id_of, _measure))

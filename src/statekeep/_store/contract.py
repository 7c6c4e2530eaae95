"""The Store contract: async-first methods, with sync methods derived from them."""

from __future__ import annotations

import functools
from abc import ABC
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Unpack

from .._core.query import ListFilters, given
from .._core.records import Entries, Record, SavedState, Snapshot
from .._run.lineage import walk_tree
from .._run.resume import from_record
from .._run.state import State
from .._runtime.bridge import run_sync
from .._runtime.inthread import in_thread, to_thread
from . import saving
from .expect import runs_the_other_side
from .shims import adelete_tree, expected, fill_in, leased, no_leases
from .steps import Stepping

if TYPE_CHECKING:
    from .._core.leases import Lease
    from .agentmemory import Memory

#: How many rows each page of :meth:`Store.iter_states` asks for.
ITER_PAGE = 200


# Abstract through __new__, which needs write() or awrite(), and read() or aread():
# either side may be the implemented one, which @abstractmethod cannot say.
class Store(Stepping, ABC):
    """Where States are saved: per id, an append-only history plus one snapshot dict.

    The native methods are coroutines (``awrite``, ``aread``, ``alist``, ``adelete``).
    The sync methods (``write``, ``read``, ``list``, ``delete``) have the same contracts;
    they run the coroutines on statekeep's private event loop (one background thread per
    process) and block until done. They work in a plain script, from any thread, and
    inside a running event loop, which they block for the duration of the call: in async
    code prefer the ``a*`` methods.

    To write your own store, subclass and implement ``write``/``read`` (and ``list``,
    ``delete`` if it can), or their async versions, or both; a class with neither side of
    ``write`` or of ``read`` is a TypeError when created. What subclassing gives: the
    missing side (async defaults run a sync implementation in a worker thread; sync
    defaults run an async implementation on the private loop), ``save``/``load`` with
    their bookkeeping, repair and errors, durable steps (``step``/``astep``, built on
    them), ``with``/``async with``, and a no-op ``close``.
    What it does not give, which the built-in stores get from their base class (a backend
    of your own can too: ``statekeep.stores.engine``): it does
    not validate ids (use :func:`validate_id`), entries, seqs or snapshots, nor encode
    them (your ``write`` gets the caller's objects); it takes no lock (concurrent writes
    to one State must be serialised by the store); it does not refuse calls after
    ``close()``; and two instances are equal only if they are the same object (define
    ``__eq__``/``__hash__`` if two can name the same storage, since a State is saved in
    one store only). Raise :class:`StateExistsError`, :class:`StateNotFoundError` and
    :class:`StateConflictError` as the ``awrite`` contract says, so that ``save`` gives
    its advice.
    """

    #: Whether every listing reads all the States (a scan, whatever its limit): then
    #: :meth:`aiter_states` asks for one page of all of them.
    _lists_by_scan: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fill_in(cls)  # what a store written before a part of this contract lacks (see _shims)

    def __new__(cls, *args: Any, **kwargs: Any) -> Store:
        missing = [
            f"{name}() or a{name}()"
            for name in ("write", "read")
            if getattr(cls, name) is getattr(Store, name)
            and getattr(cls, "a" + name) is getattr(Store, "a" + name)
        ]
        if missing:
            raise TypeError(f"{cls.__name__} must implement {' and '.join(missing)} to be a Store")
        return super().__new__(cls)

    # -- async (native) -------------------------------------------------------------

    @runs_the_other_side
    async def awrite(
        self,
        state_id: str,
        entries: Entries,
        snapshot: Snapshot,
        *,
        create: bool = False,
        expect_next: int | None = None,
    ) -> None:
        """Add history ``entries`` to a State and replace its snapshot.

        Each entry is a dict with an int ``"seq"``; the entries of one write have
        consecutive seqs. An entry whose seq the store already has is skipped when it is
        equal to the stored one, so sending a batch again is harmless; a *different* entry
        for a taken seq raises :class:`StateConflictError` and nothing is written. The
        rest must continue right after what the store has, else ValueError (a gap).
        ``snapshot`` replaces the stored one (None keeps it) and is written after the
        entries. ``create=True`` is the first write of a new State: :class:`StateExistsError`
        (a ValueError) if the id exists, and all or nothing. With ``create=False`` an unknown
        id is a :class:`StateNotFoundError` (a LookupError).
        Bad data (NaN, non-str keys, sets, ...) raises TypeError before anything is
        written. What is durable on return depends on the store; see its class.

        ``lease=`` (built-in stores; see :meth:`acquire`): the write is accepted only while
        that lease is the State's current, live one, checked atomically with the write, else
        :class:`StaleLeaseError` and nothing is written. Without it, a live lease on the State
        refuses the write with :class:`LeaseHeldError`. A store opened with ``redact=`` or
        ``encrypt=`` masks and seals the entries and snapshot before they leave the process;
        one without ``encrypt=`` refuses to write to a sealed State (:class:`DecryptionError`).

        ``expect_next=N`` (built-in stores; :meth:`asave` passes it): accepted only if the
        State's next seq (after its last entry) is exactly ``N``, checked atomically with the
        write, else :class:`StateConflictError` saying what it is, and nothing is written: the
        writer's view is stale (another writer appended, or the State was deleted and made
        again, maybe shorter). Pass the next seq as you last read or wrote it.

        Cancelled (``task.cancel()``, or ``asyncio.timeout``/``wait_for``, which turn it into
        TimeoutError), it raises only once the write is settled: written whole, or never
        started. So the next ``aread`` shows which, and you continue from what it shows.
        Cancelling never cuts a write under way short; it waits for its end. (This default,
        which runs ``write`` in a worker thread, does so; a store of your own with an async
        ``awrite`` must too, which the conformance kit checks.)
        """
        extra = expected(self, expect_next, "write")
        await in_thread(functools.partial(self.write, state_id, entries, snapshot, create=create, **extra))

    async def aread(self, state_id: str, *, since: int = 0) -> Record | None:
        """What the store has for ``state_id``: the history entries with seq >= ``since``
        (all of them by default; none when ``since`` is past the end) and the snapshot, or
        None if there is no such State. ``since`` is an int >= 0, else ValueError.

        A range read costs what it returns on the built-in database stores (SQLite,
        PostgreSQL, Redis); the FileStore reads backwards from the log's end while
        ``since`` is near it. A store of your own whose ``read``/``aread`` takes no
        ``since`` gets it for free: the whole history is read and cut.
        """
        return await to_thread(functools.partial(self.read, state_id, since=since))

    async def alist(self, **filters: Unpack[ListFilters]) -> list[SavedState]:
        """States that have a snapshot, most recently updated first (ties by id), as a query.

        Keyword arguments (all optional; filters combine with AND):

        - ``limit``: rows per page (1 to 10,000). The result is a :class:`~statekeep.Page`, a
          list with ``.next``: pass it as ``after=`` for the next page; None at the end.
        - ``after``: a page's ``.next``.
        - ``agent`` (the last run's agent name), ``parent`` (the spawning State's id),
          ``finished`` (bool), ``stopped_by`` (why the last run stopped), ``status``
          (``"finished"``, ``"running"`` or a stop reason), ``labels`` (a dict: every pair
          must match), ``updated_after`` / ``updated_before`` (aware datetimes, exclusive),
          ``id_prefix``.

        A bad value is a ValueError naming the argument. Expired States are never listed.
        Paging is stable while writes go on: a walk never returns a State twice, and skips
        none except one updated during the walk (which moves to the front of the order).
        """
        if type(self).list is Store.list:
            raise NotImplementedError(f"{type(self).__name__} does not support list()")
        return await to_thread(functools.partial(self.list, **given(**filters)))

    async def aiter_states(self, **filters: Unpack[ListFilters]) -> AsyncIterator[SavedState]:
        """Every State the filters of :meth:`alist` select, page by page (``limit`` is the
        page size, 200 by default; one page of all of them on a store whose every listing
        reads all its States anyway, e.g. a FileStore, where pages would cost n² reads)."""
        filters.setdefault("limit", None if self._lists_by_scan else ITER_PAGE)
        while True:
            page = await self.alist(**filters)
            for row in page:
                yield row
            after = getattr(page, "next", None)
            if after is None:
                return
            filters["after"] = after

    async def adelete(self, state_id: str, *, children: bool = False, lease: Lease | None = None) -> None:
        """Remove a State whole; nothing happens if there is none.

        ``children=True`` also removes every State spawned from it (:meth:`State.child`),
        at any depth: the deepest first, so an interrupted delete leaves a tree whose
        remaining States still lead to their root. Each State's delete is durable on return
        as the store's ``delete`` says; the tree as a whole is not one transaction.

        Cancelled, it raises only once the delete is settled, as :meth:`awrite` does: the
        next ``aread`` shows the State whole or gone.

        ``lease=`` (built-in stores): the delete is refused with :class:`StaleLeaseError`
        unless it is the State's current, live lease; without it, a live lease on the State
        refuses it with :class:`LeaseHeldError`. With ``children=True`` the lease is the
        root's (the children are deleted without one).
        """
        if children:
            await adelete_tree(self, state_id, lease)
            return
        no_leases(self, lease)
        if type(self).delete is Store.delete:
            raise NotImplementedError(f"{type(self).__name__} does not support delete()")
        await in_thread(functools.partial(self.delete, state_id))

    async def _atree(self, root: str) -> list[str]:
        """``root`` and every descendant, deepest first."""
        return await walk_tree(root, self._child_ids)

    async def _child_ids(self, state_id: str) -> list[str]:
        """The ids of ``state_id``'s children (built-in stores include expired ones)."""
        return [row.id async for row in self.aiter_states(parent=state_id)]

    async def afork(
        self,
        state_id: str,
        *,
        at_seq: int | None = None,
        new_id: str | None = None,
        labels: dict[str, str] | None = None,
        lease: Lease | None = None,
    ) -> State:
        """A new State whose history is ``state_id``'s entries 0 to ``at_seq`` (default: all).

        It is saved whole or not at all (one create), with ``forked_from`` = ``{"id", "seq"}``
        and ``labels`` (default: the source's). The source is never changed. The new State is
        repaired as :meth:`aload` repairs (tool calls cut off at ``at_seq`` get an
        ``unknown`` result, written by its next save); those calls keep the source's
        idempotency keys (``ToolContext.idempotency_key``): they are the source's calls. :class:`StateNotFoundError` for an
        unknown (or expired) source, ValueError for an ``at_seq`` it does not hold,
        :class:`StateExistsError` if ``new_id`` is taken. Durable as the store's ``awrite``.
        :class:`StateConflictError` if the source was deleted and written again between
        the fork's read and its write (nothing is written). The fork keeps its history's times, so it lists by the time of its last entry until
        its next save; it keeps the source's ``parent`` too (a fork of a subagent's run is
        another child of the same parent, and goes with that parent's tree delete).
        """
        no_leases(self, lease)
        return await saving.fork(self, state_id, at_seq, new_id, labels)

    def _may_copy_on_server(self) -> bool:
        """Whether a fork may copy the source's stored records as they are (not when
        they are sealed for their place)."""
        return True

    async def _afork_write(
        self, source_id: str, entries: list[dict[str, Any]], snapshot: dict[str, Any], new_id: str,
        incarnation: str | None,
    ) -> None:  # fmt: skip
        """Create the fork (a new incarnation): a store may copy the entries on its side."""
        await saving.write_fork(self, entries, snapshot, new_id, incarnation)

    def memory(self, scope: str = "default") -> Memory:
        """Agent memory: a durable key/value store beside this store's States (see
        :class:`~statekeep.Memory`). The built-in stores have it; a store of your own does not."""
        raise NotImplementedError(f"{type(self).__name__} does not support memory()")

    async def agc(self, *, limit: int | None = None, dry_run: bool = False) -> int:
        """Remove expired States (at most ``limit``); return how many were removed
        (``dry_run``: how many would be)."""
        raise NotImplementedError(f"{type(self).__name__} does not support gc()")

    async def atrim(self, state_id: str, *, before: int, lease: Lease | None = None) -> None:
        """Remove the State's entries before seq ``before``, keeping a base record in their
        place, at seq ``before - 1`` (the built-in stores; see their :meth:`atrim`)."""
        raise NotImplementedError(f"{type(self).__name__} does not support trim()")

    # -- sync, derived --------------------------------------------------------------

    def write(
        self,
        state_id: str,
        entries: Entries,
        snapshot: Snapshot,
        *,
        create: bool = False,
        expect_next: int | None = None,
    ) -> None:
        """Sync :meth:`awrite`, same contract and durability."""
        extra = expected(self, expect_next, "awrite")
        run_sync(self.awrite(state_id, entries, snapshot, create=create, **extra), "awrite")

    def read(self, state_id: str, *, since: int = 0) -> Record | None:
        """Sync :meth:`aread`."""
        return run_sync(self.aread(state_id, since=since), "aread")

    def list(self, **filters: Unpack[ListFilters]) -> list[SavedState]:
        """Sync :meth:`alist`."""
        if type(self).alist is Store.alist:
            raise NotImplementedError(f"{type(self).__name__} does not support list()")
        return run_sync(self.alist(**given(**filters)), "alist")

    def iter_states(self, **filters: Unpack[ListFilters]) -> Iterator[SavedState]:
        """Sync :meth:`aiter_states`: each page is one blocking call."""
        filters.setdefault("limit", None if self._lists_by_scan else ITER_PAGE)
        while True:
            page = self.list(**filters)
            yield from page
            after = getattr(page, "next", None)
            if after is None:
                return
            filters["after"] = after

    def delete(self, state_id: str, *, children: bool = False, lease: Lease | None = None) -> None:
        """Sync :meth:`adelete`."""
        if children:
            run_sync(self.adelete(state_id, children=True, lease=lease), "adelete")
            return
        no_leases(self, lease)
        if type(self).adelete is Store.adelete:
            raise NotImplementedError(f"{type(self).__name__} does not support delete()")
        run_sync(self.adelete(state_id, **leased(lease)), "adelete")  # fenced by the lease

    def fork(
        self,
        state_id: str,
        *,
        at_seq: int | None = None,
        new_id: str | None = None,
        labels: dict[str, str] | None = None,
        lease: Lease | None = None,
    ) -> State:
        """Sync :meth:`afork`."""
        fork = self.afork(state_id, at_seq=at_seq, new_id=new_id, labels=labels, lease=lease)
        return run_sync(fork, "afork")

    def gc(self, *, limit: int | None = None, dry_run: bool = False) -> int:
        """Sync :meth:`agc`."""
        return run_sync(self.agc(limit=limit, dry_run=dry_run), "agc")

    def trim(self, state_id: str, *, before: int, lease: Lease | None = None) -> None:
        """Sync :meth:`atrim`."""
        run_sync(self.atrim(state_id, before=before, lease=lease), "atrim")

    # -- States -----------------------------------------------------------------------

    async def asave(self, state: State, *, lease: Lease | None = None) -> None:
        """Write what the store does not have of ``state`` yet, plus its snapshot.

        The first save creates the State: :class:`StateExistsError` (a ValueError) if the id
        is taken by another State.
        Durable as the store's ``awrite``. A State is saved in one store only (ValueError
        elsewhere). If the write fails, nothing is marked saved and the next save sends it
        again, whole. If another writer appended to (or re-made) the State meanwhile,
        :class:`StateConflictError` says to load it again (``expect_next``, where taken); :class:`StateNotFoundError` if it
        was deleted. Cancelled, it raises once the write is settled, as :meth:`awrite` does,
        and the State stays ready to save: the next save sends what the store lacks.

        ``lease=`` (built-in stores) fences the write as :meth:`awrite` says:
        :class:`StaleLeaseError` (nothing written) once the lease is no longer current, and
        :class:`LeaseHeldError` for a save without it while another worker holds one.
        """
        await saving.save(self, state, lease)

    async def aload(self, state_id: str) -> State:
        """The saved State ``state_id``, ready to continue.

        Tool calls left without a result get one with outcome ``unknown`` (the tool may or
        may not have run), and a request left waiting on the model gets a ``model_error``;
        these closing entries are written by the next save. :class:`StateNotFoundError` (a
        LookupError) for an unknown id; :class:`CorruptStateError` for a damaged State and
        :class:`UnsupportedFormatError` for one saved by a newer statekeep (both ValueError).
        """
        return from_record(state_id, await self.aread(state_id), self)

    def save(self, state: State, *, lease: Lease | None = None) -> None:
        """Sync :meth:`asave`."""
        run_sync(self.asave(state, lease=lease), "asave")

    def load(self, state_id: str) -> State:
        """Sync :meth:`aload`."""
        return from_record(state_id, self.read(state_id), self)  # replayed in the caller's thread

    # -- lifetime -------------------------------------------------------------------

    async def aclose(self) -> None:
        """Release what the store holds (connections, handles). Safe to call twice.

        ``with store:`` and ``async with store:`` close it at the end of the block. A
        built-in store dropped unclosed is closed when it is garbage collected, with a
        ResourceWarning.
        """
        self.close()

    def close(self) -> None:  # a store that holds nothing needs no close
        """Sync :meth:`aclose`."""

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

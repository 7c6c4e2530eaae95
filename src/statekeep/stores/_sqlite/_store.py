"""SQLiteStore: the four operations, the group-commit function and the retry on a locked
database. What it runs is in the other modules of this package (see its docstring)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable, Collection, Hashable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from ..._core.blobs import DEFAULT_OFFLOAD
from ..._core.errors import StateConflictError
from ..._core.labels import DEFAULT_NAMESPACE, iso
from ..._core.leases import Lease
from ..._core.query import ListQuery, Page
from ..._core.records import Record, SavedState
from ..._core.redactor import Redactor
from ..._core.writes import PreparedWrite, prepare_write
from ..._protect.sealing import Keyring
from ..._runtime.batching import GroupCommit, WouldBlock
from ..._runtime.bridge import owner, run_async
from ..._store.backend import Backend
from ..._store.engine import Clock
from ..._store.saving import write_fork
from .._fsio import tree_bytes
from . import _blobs as blobs
from . import _sql as sql
from ._batch import Delete, Fork, Op, commit_batch, gc_chunk
from ._changes import ChangeStamp
from ._connections import Connections, close_all, connect, connections_slot, is_busy, retry_busy
from ._leases import LeaseRows
from ._listing import read_page, read_page_now
from ._reads import built, read_now, read_rows, read_snapshot
from ._schema import open_schema, read_transaction
from ._trim import trim_state

T = TypeVar("T")

#: How long statekeep keeps retrying (with backoff) when SQLite still reports the database
#: locked, before it raises TimeoutError. Nothing was written when that happens.
BUSY_PATIENCE_SECONDS = 120.0

# Writes of one transaction at most; more wait for the next one (bounds a batch's latency).
_MAX_BATCH = 512
# States gc removes per transaction (bounds how long it holds the write lock).
_GC_CHUNK = 256
# Listing pages of at most this many rows are read on the owner loop itself.
_LOOP_PAGE = 100


class SQLiteStore(ChangeStamp, LeaseRows, Backend):
    """Saves every State in one SQLite database file at ``path``, shared by any number of
    processes.

    Durable on return: when ``write``/``awrite`` (or ``delete``) returns, its transaction
    is committed in WAL mode with ``synchronous=FULL``, so the WAL was fsync'd and the
    write survives a crash or a power cut. A write's entries and snapshot commit together
    or not at all; a write that raises stored nothing.

    Several processes may use one file: SQLite's locks serialise their writes (each in
    ``BEGIN IMMEDIATE``); a write finding the lock held retries with backoff (1 ms at
    first, at most 100 ms apart), and only after ``BUSY_PATIENCE_SECONDS`` (120) does a
    call give up with TimeoutError. Concurrent writes from one process (``asyncio.gather`` of
    ``awrite``) share one transaction and one fsync, each still failing or succeeding on
    its own.

    ``list()`` shows the States whose snapshot has the keys :class:`SavedState` needs; a
    State whose snapshot lacks one (or has none) is left out, with a RuntimeWarning naming
    the State and the key when the snapshot is there but incomplete.

    The file (0600) and missing parent folders (0700) are created on the first write (a
    read of a missing file finds nothing), when the schema is also created or migrated.
    A database written by a newer statekeep is refused with UnsupportedFormatError (a
    ValueError: upgrade statekeep to use it), and a file that is not a SQLite database
    with NotAStoreError; neither is written to.

    ``create=False`` opens an existing statekeep database only (what the command line's
    ``list``, ``show`` and ``delete`` do): the store then never creates the file or its
    tables, never switches the journal mode and never migrates; a database without
    statekeep's tables is refused with NotAStoreError, unchanged. Reads of a missing file
    still find nothing.

    Close the store to release its connections; they are also closed when the
    interpreter exits, or (with a ResourceWarning) when the store is dropped unclosed.

    ``namespace`` (default ``"default"``): States of other namespaces in the same file are
    invisible to this store (reads, listings, gc, agent memory); a database from before
    namespaces is the default namespace. ``retention``: a State saved without an explicit
    expiry expires that long after its last write. Expiry is judged by ``clock`` (default:
    this machine's UTC time; a test may pass its own) when each read, listing, write, fork
    or gc runs, inside its transaction: an expired State is absent, and a ``create=True``
    write of its id replaces it.

    ``list()`` answers every filter from an index, in listing order, a page at a time: the
    time for a page does not grow with the number of States (``id_prefix`` alone reads
    every State with that prefix).

    Leases (``acquire``, ``write(..., lease=)``): expiry is judged by the same ``clock``
    (this host's system clock by default), read inside the transaction that checks or
    changes the lease, once SQLite's write lock is held. The lease row and its check share
    that transaction with the write, so leases hold across the processes of one host;
    processes on other hosts (a network file system) are not supported by SQLite itself.
    The row stays after a release or a delete: a State's token only grows.

    Blobs (large values stored once) live in the file's ``blobs`` table, shared by its
    namespaces, and are committed in the transaction of the entries that refer to them;
    gc removes those no State refers to, and once it returns their bytes are gone from the
    database file and its WAL unless a read transaction of another connection holds the WAL
    (``secure_delete``, then a checkpoint that never makes writers wait for a reader; see
    :mod:`~statekeep.stores._sqlite._blobs`). A trim drops the references only its removed
    entries made.

    ``trim(id, before=seq)`` removes a compacted State's entries before ``seq`` for a base record
    (see :meth:`~statekeep._store.backend.Backend.trim`): this store deletes the removed rows in one transaction (their pages are reused by later writes; ``VACUUM`` shrinks the file).
    ``trim_compacted=True``: ``gc`` also trims every State up to its latest compaction.

    ``offload`` (default 32768): a value in an entry whose JSON encoding exceeds this many
    bytes is stored once, in the ``blobs`` table (named by its SHA-256; by an HMAC under the
    keyring, per namespace, and sealed, when encrypted), and the entry refers to it; None
    keeps every value inline. See the docs' "Large values" page.

    ``redact``, ``encrypt`` and ``allow_plaintext``: see the docs' "Protection" page
    (:class:`~statekeep.Redactor`, :class:`~statekeep.Keyring`).

    ``telemetry`` (default True): each operation is recorded with OpenTelemetry (a span and
    metrics) when a tracer or meter provider is set; False records nothing. ``trace_ids=True``:
    the spans carry the State id. See the docs' "Telemetry" page.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        namespace: str = DEFAULT_NAMESPACE,
        retention: timedelta | None = None,
        trim_compacted: bool = False,
        clock: Clock | None = None,
        redact: Redactor | None = None,
        encrypt: Keyring | None = None,
        allow_plaintext: bool = False,
        telemetry: bool = True,
        trace_ids: bool = False,
        offload: int | None = DEFAULT_OFFLOAD,
    ) -> None:
        self._lifecycle(namespace, retention, clock, trim_compacted=trim_compacted)
        self._protect(redact, encrypt, allow_plaintext)
        self._observe(telemetry, trace_ids)
        self._take_offload(offload)
        self.path = Path(os.path.abspath(os.fspath(path)))
        self.create = create
        self._key = os.path.realpath(self.path)
        self._root = self
        self._batches: GroupCommit[Op] = GroupCommit(
            lambda ops: self._commit(ops), max_batch=_MAX_BATCH, commit_now=lambda ops: self._commit_now(ops)
        )
        # This process's connections; a forked child makes its own.
        self._slot = connections_slot(self)

    def _sibling(self, namespace: str) -> SQLiteStore:
        """The same file in another namespace, on this store's connections and batches
        (closing this store closes it too)."""
        sibling = object.__new__(SQLiteStore)
        sibling._join(self, namespace)
        sibling.path, sibling.create, sibling._key = self.path, self.create, self._key
        sibling._root = self._root  # keeps the owner of the connections alive
        sibling._batches, sibling._slot = self._batches, self._slot
        return sibling

    def __repr__(self) -> str:
        extra = "" if self.namespace == DEFAULT_NAMESPACE else f", namespace={self.namespace!r}"
        return f"SQLiteStore({str(self.path)!r}{extra})"

    def _storage_key(self) -> Hashable:
        return ("sqlite", self._key, self.namespace)

    def _check_open(self, value: Any) -> Any:
        if self._root._closed:
            self._closed = True
        return super()._check_open(value)

    def _now_text(self) -> str:
        """The store's clock as the fixed-width UTC text expiry columns hold."""
        return iso(self._now())

    @property
    def _conns(self) -> Connections | None:
        """This process's connections, if it has made them yet."""
        return self._slot.current()

    # -- the four operations --------------------------------------------------------

    async def _write(self, write: PreparedWrite) -> None:
        self._slot.get()  # (_submit written out: one coroutine less on every write's path)
        await self._batches.submit(("write", self.namespace, write))

    async def _delete(self, state_id: str, lease: Lease | None = None) -> None:
        await self._submit(("delete", self.namespace, Delete(state_id, lease)))

    async def _read(self, state_id: str, since: int = 0) -> Record | Callable[[], Record] | None:
        conns = self._slot.get()  # made here, on the owner loop, never by two threads at once
        if conns.schema_ok:
            try:  # a short history: read on the loop (a thread hop costs as much), decoded by the caller
                return read_now(self.path, conns, self.namespace, state_id, since)
            except WouldBlock:
                pass
        return await owner().io.run(self._retry_busy, self._read_once, conns, state_id, since)

    async def _list(self) -> tuple[list[SavedState], list[str]]:
        page, skipped = await self._select(ListQuery())
        return list(page), skipped

    async def _select(self, query: ListQuery) -> tuple[Page, list[str]]:
        conns = self._slot.get()
        if conns.schema_ok and query.limit is not None and query.limit <= _LOOP_PAGE:
            try:
                return read_page_now(self.path, conns, self.namespace, query, self._now_text())
            except WouldBlock:
                pass
        return await owner().io.run(self._retry_busy, self._select_once, conns, query)

    async def _gc(self, limit: int | None) -> int:
        conns = self._slot.get()
        return await owner().io.run(self._gc_all, conns, limit)

    async def _count_expired(self) -> int:
        # gc's own condition, counted (index states_expiry): unlisted States count too.
        conns = self._slot.get()
        return await owner().io.run(self._retry_busy, self._count_expired_once, conns)

    async def _state_ids(self) -> list[str] | None:
        conns = self._slot.get()
        return await owner().io.run(self._retry_busy, self._state_ids_once, conns)

    def _state_ids_once(self, conns: Connections) -> list[str]:
        if self._absent(conns):
            return []
        with self._reading(conns) as conn:
            return [sid for (sid,) in conn.execute(sql.STATE_IDS, (self.namespace,))]

    # -- blobs (see ._blobs) ------------------------------------------------------------

    async def _get_blobs(self, names: Collection[str]) -> dict[str, bytes]:
        """The stored bytes of the blobs ``names`` that the file holds (any namespace's)."""
        if not names:
            return {}
        conns = self._slot.get()
        return await owner().io.run(self._retry_busy, self._get_blobs_once, conns, names)

    async def _reseal_blobs(self, work: dict[str, tuple[bytes, bytes]]) -> int:
        """For rekey: replace each blob NAME -> (old, new) still holding ``old``, in one
        transaction; how many were replaced."""
        conns = self._slot.get()
        return await owner().io.run(self._in_transaction, conns, blobs.reseal_blobs, self.path, work)

    async def _gc_blobs(self, dry_run: bool) -> tuple[int, int]:
        """Remove (``dry_run``: count) the blobs no State of the file refers to; (blobs, bytes)."""
        conns = self._slot.get()
        return await owner().io.run(self._gc_blobs_all, conns, dry_run)

    async def _blob_usage(self) -> tuple[int, int]:
        """(blobs, bytes) the file holds, every namespace counted."""
        conns = self._slot.get()
        return await owner().io.run(self._retry_busy, self._blob_usage_once, conns)

    def _get_blobs_once(self, conns: Connections, names: Collection[str]) -> dict[str, bytes]:
        if self._absent(conns):
            return {}
        with self._reading(conns) as conn:
            return blobs.get_blobs(conn, names)

    def _blob_usage_once(self, conns: Connections) -> tuple[int, int]:
        if self._absent(conns):
            return 0, 0
        with self._reading(conns) as conn:
            return blobs.usage(conn)

    def _gc_blobs_all(self, conns: Connections, dry_run: bool) -> tuple[int, int]:
        """gc of the blobs, a chunk per write transaction, then the WAL checkpointed and
        truncated so that the removed bytes leave the files (see ._blobs)."""
        if self._absent(conns):
            return 0, 0
        self._ensure_schema(conns)
        if dry_run:
            with self._reading(conns) as conn:
                return blobs.count_unreferenced(conn)
        conn = blobs.gc_connection(self.path)
        removed = size = 0
        cursor: int | None = 0  # the rowid walked to (see ._blobs)
        try:
            while cursor is not None:
                done, freed, cursor = self._retry_busy(
                    blobs.gc_chunk, self.path, conn, cursor, blobs.GC_CHUNK
                )
                removed, size = removed + done, size + freed
            blobs.checkpoint(conn)  # also completes one an earlier gc's reader held back
        finally:
            conn.close()
        return removed, size

    async def _size_bytes(self) -> int | None:
        """The bytes of the database file and its WAL and shared-memory files (every namespace)."""
        names = (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm"))
        return await asyncio.to_thread(tree_bytes, *names)

    async def _read_snapshot(self, state_id: str) -> dict[str, Any] | None:
        # The states row alone: agent memory reads a key without its history.
        conns = self._slot.get()
        return await owner().io.run(self._retry_busy, self._read_snapshot_once, conns, state_id)

    async def _trim(self, state_id: str, before: int, base: bytes, first: int) -> None:
        # One transaction on a connection of its own (see _leases.LeaseRows._in_transaction).
        conns = self._slot.get()
        args = (self.path, self.namespace, state_id, before, base, first)
        await owner().io.run(self._in_transaction, conns, trim_state, *args)

    async def _afork_write(
        self, source_id: str, entries: list[dict[str, Any]], snapshot: dict[str, Any], new_id: str,
        incarnation: str | None,
    ) -> None:  # fmt: skip
        # The entries are copied inside the database (INSERT ... SELECT), in the transaction
        # that creates the fork, which first checks the source still holds them: they are
        # encoded here (not sent) to compare with the source's, which may have been deleted
        # and written again since they were read (then nothing is written); stored otherwise
        # (another offload bound, an inline base), the fork is written whole.
        lines = self._stored_lines(source_id, entries)  # blob references, as stored
        write = prepare_write(new_id, [], self._stamp(snapshot), True, incarnation)
        end = entries[-1]["seq"] + 1 if entries else 0  # (len(entries) but for a trimmed source)
        op: Op = ("fork", self.namespace, Fork(write, source_id, end, lines))
        try:
            await run_async(self._locked_submit(new_id, op), direct=True)
        except StateConflictError:  # replaced since it was read, or stored otherwise
            if not await self._fork_source_unchanged(source_id, entries):
                raise
            await write_fork(self, entries, snapshot, new_id, incarnation)  # the entries as read

    async def _locked_submit(self, state_id: str, op: Op) -> None:
        async with owner().lock((self._storage_key(), state_id)):
            await self._submit(op)

    async def _close(self) -> None:
        if self._root is not self:
            return  # the connections are the root store's
        await self._batches.drain()  # let queued writes commit first
        conns = self._slot.current()
        if conns is not None:
            if conns.closer is not None:
                conns.closer.release()
            await close_all(conns)

    # -- group commit ---------------------------------------------------------------

    async def _submit(self, op: Op) -> None:
        # Writes and deletes waiting at the same moment, to any State of this store, are
        # committed in one transaction; each caller returns once that transaction is
        # committed, with its own outcome.
        self._slot.get()  # made on the owner loop, before a worker thread needs them
        await self._batches.submit(op)

    def _commit(self, ops: list[Op]) -> list[BaseException | None]:
        """Apply ``ops`` in one transaction (one fsync); return each one's error or None.

        Runs in a worker thread (or a sync caller's own), one call at a time per store and
        process (the flusher awaits each), so the writer connection is never shared. The
        writer never waits inside SQLite (busy_timeout 0): a lock held elsewhere is waited
        for here, by :meth:`_retry_busy`.
        """
        conns = self._slot.get()
        self._ensure_schema(conns)
        conn = conns.take_writer(self._connect_writer)
        try:
            return self._retry_busy(commit_batch, self.path, conn, ops, self._now)
        finally:
            conns.give_writer(conn)

    def _commit_now(self, ops: list[Op]) -> list[BaseException | None]:
        """:meth:`_commit` of one op that must not wait, on the owner loop: WouldBlock,
        with nothing committed, if another connection holds the database's write lock
        (or the schema is not checked yet in this process)."""
        conns = self._slot.get()
        if len(ops) != 1 or not conns.schema_ok or conns.writer is None:
            raise WouldBlock
        conn = conns.take_writer(self._connect_writer)
        try:
            return commit_batch(self.path, conn, ops, self._now)
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                raise WouldBlock from None  # nothing committed, no transaction open
            raise
        finally:
            conns.give_writer(conn)

    # -- read, list -----------------------------------------------------------------

    def _read_once(self, conns: Connections, sid: str, since: int) -> Record | None:
        if self._absent(conns):
            return None
        with self._reader(conns) as conn:  # one statement: one consistent read
            rows = read_rows(self.path, conn, self.namespace, sid, since)
        return None if rows[0][2] is None else built(self.path, sid, since, rows)

    def _read_snapshot_once(self, conns: Connections, sid: str) -> dict[str, Any] | None:
        if self._absent(conns):
            return None
        with self._reader(conns) as conn:
            return read_snapshot(self.path, conn, self.namespace, sid, self._now_text())

    def _count_expired_once(self, conns: Connections) -> int:
        if self._absent(conns):
            return 0
        with self._reading(conns) as conn:
            now = self._now_text()
            count: int = conn.execute(sql.COUNT_EXPIRED, (self.namespace, now, now)).fetchone()[0]
        return count

    def _select_once(self, conns: Connections, query: ListQuery) -> tuple[Page, list[str]]:
        if self._absent(conns):
            return Page(), []
        with self._reader(conns) as conn:  # one statement (two if a State is unlisted)
            return read_page(self.path, conn, self.namespace, query, self._now_text())

    def _gc_all(self, conns: Connections, limit: int | None) -> int:
        """Remove expired States, a chunk per transaction, each chunk found and removed
        under the write lock: a State a write extended meanwhile is no longer found."""
        if self._absent(conns):
            return 0
        self._ensure_schema(conns)
        removed = 0
        while limit is None or removed < limit:
            chunk = _GC_CHUNK if limit is None else min(_GC_CHUNK, limit - removed)
            # A reader connection, not the writer (which the batch flusher uses meanwhile):
            # SQLite's write lock serialises gc with every writer, in any process.
            conn = conns.take_reader() or self._connect()
            healthy = False
            try:
                done = self._retry_busy(
                    lambda c=conn, n=chunk: gc_chunk(self.path, c, self.namespace, self._now_text(), n)
                )
                healthy = True
            finally:
                conns.give_reader(conn, reuse=healthy)
            removed += done
            if done < chunk:
                break
        return removed

    def _absent(self, conns: Connections) -> bool:
        """No database file yet: reads find nothing, and create nothing."""
        return not conns.schema_ok and not os.path.exists(self.path)

    @contextmanager
    def _reader(self, conns: Connections) -> Iterator[sqlite3.Connection]:
        """A reader connection (the schema made first), given back after the block."""
        self._ensure_schema(conns)
        conn = conns.take_reader() or self._connect()
        healthy = False
        try:
            yield conn
            healthy = not conn.in_transaction
        finally:
            conns.give_reader(conn, reuse=healthy)

    @contextmanager
    def _reading(self, conns: Connections) -> Iterator[sqlite3.Connection]:
        """A reader connection inside a read transaction (one consistent view of the file)."""
        with self._reader(conns) as conn, read_transaction(self.path, conn):
            yield conn

    # -- connections, schema, locks -------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        return connect(self.path)

    def _connect_writer(self) -> sqlite3.Connection:
        return connect(self.path, waits=False)

    def _ensure_schema(self, conns: Connections) -> None:
        """Create or migrate the schema once per process (refusing a newer one)."""
        if conns.schema_ok:
            return
        with conns.schema_lock:
            if not conns.schema_ok:
                conn = self._retry_busy(open_schema, self.path, create=self.create)
                conns.schema_ok = True
                conns.give_reader(conn, reuse=True)

    def _retry_busy(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``, run again while the database is locked (:func:`retry_busy`)."""
        return retry_busy(self.path, BUSY_PATIENCE_SECONDS, fn, *args, **kwargs)

"""FileStore: the embedded default, one folder per State.

Layout under the store's folder::

    .statekeep-store        the store marker: a JSON object, {"format": 2}, naming the
                            namespaces once there are any: {"format": 2, "namespaces": [...]}
    .ns.{namespace}/        the States of a namespace other than the default (and of agent
                            memory, internal namespaces such as "default.memory.notes"),
                            laid out as the default namespace's below
    {id}/log.jsonl          the State: entry lines, each write closed by a record carrying
                            its snapshot (format: statekeep.stores._file.logformat), appended and fsync'd
    {id}/snapshot.json      a copy of the current snapshot for listings (.copies), lazily
                            refreshed by rename, never fsync'd
    {id}/snapshot.json.tmp  the next copy while it is being written
    .creating-{pid}-{rand}  a State being created (renamed to {id} when complete)
    .deleting-{pid}-{rand}  a State being deleted (renamed away first)

A ``.creating-``/``.deleting-`` folder is flock'd by the process working on it for as
long as it exists; a sweep removes only those whose lock is free (their process is gone,
whatever its pid: pids repeat after a reboot and differ between containers).

Folders are 0700 and files 0600 whatever the umask; symlinks inside the store are refused,
never followed, and so is a folder or file that another user owns or could write
(trust.check_owner). Writers in other processes are kept apart with ``fcntl.flock`` on
the State's folder.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Collection, Hashable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple, cast

from ..._core.blobs import DEFAULT_OFFLOAD
from ..._core.labels import DEFAULT_NAMESPACE
from ..._core.leases import Lease
from ..._core.query import ListQuery, Page, select
from ..._core.records import Record, SavedState
from ..._core.redactor import Redactor
from ..._core.writes import PreparedWrite
from ..._protect.sealing import Keyring
from ..._runtime.batching import GroupCommit
from ..._runtime.bridge import owner
from ..._store.backend import Backend
from ..._store.engine import Clock
from .._fsio import OsIO, tree_bytes
from .append import Appender
from .blobs import BlobFolder
from .budget import batch_cap
from .copies import INTERVAL, Copies
from .create import create, delete
from .folder import StoreFolder
from .handles import Handles
from .leases import LeaseRows
from .leasing import FileLeasing
from .reads import list_states, read_range, read_snapshot, read_state, state_ids
from .recovery import Tail
from .trimlog import trim_log
from .trust import probe_case

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class FileStore(FileLeasing, Backend):
    """Saves each State in its own folder under ``path``: ``log.jsonl`` + ``snapshot.json``.

    Durable on return: when ``write``/``awrite`` returns, its entries and its snapshot are
    on disk and survive a crash or power cut: they are in the log, which was fsync'd
    (``fdatasync``; ``F_FULLFSYNC`` on macOS) after them. So are the entries it skipped as
    already stored and the State's folder itself (another writer may have appended or
    created them and died before its fsync: the log, and the store's folder, are fsync'd
    again unless this process knows them durable). ``snapshot.json`` is only a copy for
    listings and may lag: readers check it against the log.
    If an append raises OSError (disk full, I/O error), the log is left as it was before
    it (if even that fails, this process's next write to the State cuts it back first);
    send the same write again once the cause is fixed. If a create raises OSError, the
    State may or may not exist: send the same write with ``create=False`` (it skips what
    is stored), and with ``create=True`` only if that raises LookupError (``Store.save``
    does this).

    After a crash at any point, a read sees every write that returned, and of the write
    under way either all (entries and snapshot) or nothing: an unfinished write (a torn
    last line, or pages of it lost to a power cut: zeros with whole lines after them) is
    ignored, and cut before the next append. Damage before the end of the last complete
    write raises :class:`CorruptStateError` naming the file and line, and so does a log
    shorter than its snapshot's copy says it was: a read, and a write, report it rather
    than drop acknowledged entries. Top-level entry keys starting with ``sk.`` are the
    log's own: a write carrying one raises ValueError, before anything is written.

    The first write to a State in a process reads only the log's last write (a log
    written before format 2 is read whole, once: that write goes on in format 2); the
    State's folder and log then stay open between writes (a bounded cache, forgotten by
    a forked child).

    ``delete``/``adelete`` is durable on return too: the State's folder was renamed away
    and the store's folder fsync'd before its files are removed.

    Several processes on one host may use one folder: writes to one State are serialised
    with ``fcntl.flock``. One host only: flock is not reliable over network file systems
    (NFS, SMB), so do not share a FileStore folder between machines.

    The folder is created (0700) on the first write, with a ``.statekeep-store`` marker in
    it. A folder without the marker is used only if it holds nothing but States (as
    stores of earlier versions do; it is marked on its first write), else every operation
    raises ValueError naming what is in it: a mistyped path never becomes a store whose
    ``delete`` removes your files. ``delete`` also refuses a State folder that holds
    anything but a State's own files (CorruptStateError).

    ``namespace`` (default ``"default"``): States of different namespaces never see each
    other (reads, listings, agent memory, gc). The default namespace's States are in the
    folder itself, as in stores of earlier versions; another's are in ``.ns.{namespace}``
    in it, made on its first write and named in the marker (a statekeep that predates
    namespaces still reads the default namespace and never enters those folders).

    ``list()``/``alist`` scans: it reads the snapshot copy of every State of the namespace
    (10,000 States take under a second), then filters and pages them; there are no indexes.
    Use SQLiteStore or a server store when listings must not grow with the store.
    A poller that only needs to know whether anything changed (the viewer's runs feed) asks
    the change stamp instead, one ``stat`` of the namespace's folder: every create and delete
    renames in it, and every refresh of a snapshot copy sets its time.

    Expiry (``retention``, ``state.expire_at``) is judged by ``clock`` (default: the system
    clock, UTC), so processes sharing a folder must share a clock. An expired State is
    absent to reads, listings and forks; a ``create=False`` write to it raises
    StateNotFoundError and a create replaces it. ``gc`` removes expired States; it decides
    each from the State's log with the State's flock held, as writes hold it, so it is safe
    from several processes and never removes a State another process's write just extended.

    The store folder, the State folders and files must be owned by you and not writable
    by group or others, or :class:`~statekeep.UnsafeStoreError` (a PermissionError) names
    the path and the fix; ``list`` leaves such a State out with a warning.

    On a case-insensitive file system (macOS by default, casefold ext4), ids that differ
    only in case would share one folder. The store notices this when it opens a marked
    folder or marks one (``case_insensitive``): an id then finds only a folder spelled
    exactly as the id, and creating ``Run`` beside ``run`` raises ValueError.

    Reads and listings never write anything (no folder, marker or clean-up of leftovers:
    those wait for the first write or delete). ``read_only=True`` also makes ``write`` and
    ``delete`` raise RuntimeError. An empty ``path`` is a ValueError
    (use ``"."`` for the current folder).

    Leases (``acquire``/``renew``/``release``, ``lease=``) are judged by ``clock`` too (the
    system clock of the host by default): they hold across processes on one host, not
    across hosts. Each State's lease row is a file in ``.leases/``, kept after a release
    or a delete so tokens only grow; the fence is checked under the flock the write or
    delete holds.

    ``trim(id, before=seq)`` removes a compacted State's entries before ``seq`` for a base record
    (see :meth:`~statekeep._store.backend.Backend.trim`): this store writes the State's new log beside the old one and renames it over it (fsync'd), so a crash or power cut leaves it as before or as after.
    ``trim_compacted=True``: ``gc`` also trims every State up to its latest compaction.

    ``redact``, ``encrypt`` and ``allow_plaintext``: see the docs' "Protection" page
    (:class:`~statekeep.Redactor`, :class:`~statekeep.Keyring`). What stays in
    clear in the files: ids (folder names), seqs, times and the listing fields.

    ``telemetry`` (default True): each operation is recorded with OpenTelemetry (a span and
    metrics) when a tracer or meter provider is set; False records nothing. ``trace_ids=True``:
    the spans carry the State id. See the docs' "Telemetry" page.

    ``offload`` (default 32768): a value in an entry whose JSON encoding exceeds this many
    bytes is stored once, as a file in ``.blobs/`` named by its SHA-256 (by an HMAC under
    the keyring, per namespace, and sealed, when encrypted), and the entry refers to it;
    None keeps every value inline. A write's blobs are durable (fsync'd, renamed, the
    folder fsync'd) before its log append starts. ``gc`` removes the blobs no State of any
    namespace refers to any more, beside writers in other processes (a write holds the blob
    lock shared until its append is durable, gc holds it exclusively): from then on their
    bytes are gone from the store's files. See the docs' "Large values" page.
    """

    _lists_by_scan = True  # each listing reads every State's snapshot (see _select)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        namespace: str = DEFAULT_NAMESPACE,
        retention: timedelta | None = None,
        trim_compacted: bool = False,
        clock: Clock | None = None,
        io: OsIO | None = None,
        read_only: bool = False,
        redact: Redactor | None = None,
        encrypt: Keyring | None = None,
        allow_plaintext: bool = False,
        telemetry: bool = True,
        trace_ids: bool = False,
        offload: int | None = DEFAULT_OFFLOAD,
    ) -> None:
        if not os.fspath(path):
            raise ValueError(
                "a FileStore needs a folder path, got an empty one; use '.' for the current folder"
            )
        self._lifecycle(namespace, retention, clock, trim_compacted=trim_compacted)
        self._protect(redact, encrypt, allow_plaintext)
        self._observe(telemetry, trace_ids)
        self._take_offload(offload)
        self.path = Path(os.path.abspath(os.fspath(path)))
        self._key = os.path.realpath(self.path)
        self._setup(io or OsIO(), read_only, Handles())

    def _setup(self, io: OsIO, read_only: bool, handles: Handles) -> None:
        space = None if self.namespace == DEFAULT_NAMESPACE else self.namespace
        self._io, self._read_only, self._shared = io, read_only, handles
        self._folder = StoreFolder(
            self.path, io, read_only=read_only, label=repr(self), probe_case=self._probe_case, namespace=space
        )
        self._tails: dict[str, Tail] = {}  # the tail cache, shared by appends, creates, deletes
        self._handles = handles.space(self.namespace)  # descriptors kept open between writes
        self._copies = Copies(self._folder)  # snapshot.json, refreshed lazily
        self._leases = LeaseRows(self._folder, self.namespace)  # .leases/: one row per leased State
        self._appender = Appender(
            self._folder, self._tails, self._handles, self._copies, self._now, self._leases
        )
        self._blob_folder = BlobFolder(self._folder)  # .blobs/: shared by every namespace
        self._siblings: dict[str, FileStore] = {}  # agent memory's namespaces, closed with this one
        # Late-bound (tests wrap _commit); batches capped by the descriptor limit.
        self._batches: GroupCommit[PreparedWrite] = GroupCommit(
            lambda writes: self._commit(writes),
            max_batch=batch_cap,
            commit_now=lambda writes: self._commit_now(writes),
        )

    def __repr__(self) -> str:
        if self.namespace == DEFAULT_NAMESPACE:
            return f"FileStore({str(self.path)!r})"
        return f"FileStore({str(self.path)!r}, namespace={self.namespace!r})"

    @property
    def case_insensitive(self) -> bool:
        """Does the store's folder treat ``run`` and ``RUN`` as one name? Known once opened."""
        return self._folder.case_insensitive

    def _storage_key(self) -> Hashable:
        return ("file", self._key, self.namespace)

    def _sibling(self, namespace: str) -> FileStore:
        """The store of ``namespace`` in the same folder, sharing the kept descriptors."""
        sibling = self._siblings.get(namespace)
        if sibling is None or sibling._closed:
            sibling = cast(FileStore, FileStore.__new__(FileStore))
            sibling._join(self, namespace)
            sibling.path, sibling._key = self.path, self._key
            sibling._setup(self._io, self._read_only, self._shared)
            self._siblings[namespace] = sibling
        return sibling

    def _probe_case(self, root: int) -> bool:
        """Is the opened folder ``root`` case-insensitive? (A test overrides this.)"""
        return probe_case(root)

    # -- the four operations, each run in a worker thread ---------------------------

    async def _run(self, sid: str | None, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        """``fn(*args)`` in a worker thread; an OSError names its files by full path."""
        try:
            return await owner().io.run(fn, *args)
        except OSError as exc:
            self._folder.name_paths(exc, sid)
            raise

    async def _write(self, write: PreparedWrite) -> None:
        if not write.blob_refs:
            return await self._write_lines(write)
        # The blob lock shared from placing (or finding) the blobs until the append is
        # durable: gc, which holds it exclusively, never removes a blob this write refers to.
        held = await self._run(write.state_id, self._blob_folder.place, write.blobs or {})
        try:
            await self._write_lines(write)
        finally:
            self._blob_folder.done(held)

    async def _get_blobs(self, names: Collection[str]) -> dict[str, bytes]:
        return await self._run(None, self._blob_folder.get, names)

    async def _gc_blobs(self, dry_run: bool) -> tuple[int, int]:
        # Off the I/O workers: it may wait for writers' shared locks, whose appends need them.
        if self._read_only and not dry_run:
            raise RuntimeError(f"{self!r} was opened with read_only=True; open it without to gc")
        return await asyncio.to_thread(self._blob_folder.collect, dry_run)

    async def _reseal_blobs(self, blobs: dict[str, tuple[bytes, bytes]]) -> int:
        return await self._run(None, self._blob_folder.reseal, blobs)

    async def _blob_usage(self) -> tuple[int, int]:
        return await self._run(None, self._blob_folder.usage)

    async def _write_lines(self, write: PreparedWrite) -> None:
        if write.create:
            sid = write.state_id
            if sid in self._tails:  # it may replace an expired State this process wrote
                self._handles.drop(sid)
                self._copies.forget(sid)
            fence = partial(self._fence, write.state_id, write.lease, "nothing was written")
            await self._run(sid, create, self._folder, self._tails, write, self._expired, fence)
            return
        # Group commit: appends waiting at the same moment, to any State of this store,
        # are written together and share their flushes; each caller still gets its own
        # outcome, and returns only once its own write is durable.
        await self._batches.submit(write)
        copies = self._copies
        if copies.behind and copies.timer is None:  # (a forked child forgets its parent's)
            # Copies left behind refresh once writes pause (or at close).
            copies.timer = asyncio.get_running_loop().call_later(INTERVAL, self._refresh_copies)

    def _refresh_copies(self) -> None:
        self._copies.timer = None
        if not self._closed:
            owner().io.run(self._copies.flush)

    def _commit(self, writes: list[PreparedWrite]) -> list[BaseException | None]:
        return self._appender.commit(writes)

    def _commit_now(self, writes: list[PreparedWrite]) -> list[BaseException | None]:
        return self._appender.commit_now(writes)

    async def _close(self) -> None:
        for sibling in list(self._siblings.values()):
            if not sibling._closed:
                sibling._closed = True
                await sibling._close()
        await self._batches.drain()  # writes already queued still complete
        if self._copies.timer is not None:
            self._copies.timer.cancel()
            self._copies.timer = None
        await owner().io.run(self._copies.flush)
        self._handles.close()

    async def _read(self, state_id: str, since: int = 0) -> Record | Callable[[], Record] | None:
        if since == 0:
            return await self._run(state_id, read_state, self._folder, state_id)
        return await self._run(state_id, read_range, self._folder, state_id, since)

    async def _list(self) -> tuple[list[SavedState], list[str]]:
        return await self._run(None, list_states, self._folder)

    async def _state_ids(self) -> list[str] | None:
        return await self._run(None, state_ids, self._folder)

    async def _change_stamp(self) -> Hashable | None:
        """One ``stat`` of the namespace's folder (see :meth:`StoreFolder.stamp`)."""
        return self._folder.stamp()

    async def _size_bytes(self) -> int | None:
        """The bytes of every file in the store's folder (every namespace)."""
        return await asyncio.to_thread(tree_bytes, self.path)

    async def _read_snapshot(self, state_id: str) -> dict[str, Any] | None:
        # The copy and the log's tail after it, never the whole log (agent memory).
        snapshot = await self._run(state_id, read_snapshot, self._folder, state_id)
        return None if snapshot is None or self._expired(snapshot) else snapshot

    async def _select(self, query: ListQuery) -> tuple[Page, list[str]]:
        # A scan: every State of the namespace (of an id prefix's only), then filtered here.
        rows, skipped = await self._run(None, list_states, self._folder, query.id_prefix or "")
        if not query.include_expired:
            now = self._now()
            rows = [r for r in rows if r.expires_at is None or r.expires_at > now]
        return select(rows, query), skipped

    async def _delete(self, state_id: str, lease: Lease | None = None) -> None:
        self._handles.drop(state_id)
        self._copies.forget(state_id)
        fence = partial(self._fence, state_id, lease, "nothing was deleted")
        await self._run(state_id, delete, self._folder, self._tails, state_id, None, fence)

    async def _trim(self, state_id: str, before: int, base: bytes, first: int) -> None:
        # A new log renamed over the old one, under the State's flock (see .trimlog).
        self._handles.drop(state_id)
        self._copies.forget(state_id)
        await self._run(state_id, trim_log, self._folder, self._tails, state_id, before, base, first)

    async def _gc(self, limit: int | None) -> int:
        rows, _ = await self._list()
        now = self._now()
        removed = 0
        for row in rows:
            if limit is not None and removed >= limit:
                break
            if row.expires_at is None or row.expires_at > now:
                continue
            # Decided again from the log under the State's flock: a write in another process
            # may have extended it since the listing.
            async with owner().lock((self._storage_key(), row.id)):
                self._handles.drop(row.id)
                self._copies.forget(row.id)
                leased = partial(self._leased, row.id)
                if await self._run(row.id, delete, self._folder, self._tails, row.id, self._expired, leased):
                    removed += 1
        return removed

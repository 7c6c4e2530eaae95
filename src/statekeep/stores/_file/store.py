"""FileStore: the embedded default, one folder per State.

Layout under the store's folder::

    .statekeep-store        the store marker: a JSON object, {"format": 1}
    {id}/log.jsonl          one history entry per line, appended
    {id}/snapshot.json      the snapshot, replaced whole on every write
    {id}/snapshot.json.tmp  the next snapshot while it is being written
    .creating-{pid}-{rand}  a State being created (renamed to {id} when complete)
    .deleting-{pid}-{rand}  a State being deleted (renamed away first)

A ``.creating-``/``.deleting-`` folder is flock'd by the process working on it for as
long as it exists; a sweep removes only those whose lock is free (their process is gone,
whatever its pid: pids repeat after a reboot and differ between containers).

Every write is durable when it returns: the appended lines are fsync'd, the new snapshot
is written to a temporary file that is fsync'd and renamed into place, and the folder is
fsync'd after the rename. Folders are 0700 and files 0600 whatever the umask; symlinks
inside the store are refused, never followed, and so is a folder or file that another
user owns or could write (trust.check_owner). Writers in other processes are kept apart
with ``fcntl.flock`` on the State's folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from pathlib import Path

from ..._backend import Backend
from ..._batching import GroupCommit
from ..._bridge import owner
from ..._errors import CorruptStateError
from ..._ids import validate_id
from ..._logframe import scan_log
from ..._records import Record, SavedState, decode_snapshot, left_out, listing_order
from ..._writes import PreparedWrite
from .._fsio import OsIO
from .append import Appender
from .budget import batch_cap
from .create import create, delete
from .folder import StoreFolder, still_named
from .recovery import Tail, check_snapshot_covered, read_snapshot
from .trust import DIR, LOG, SNAPSHOT, probe_case


class FileStore(Backend):
    """Saves each State in its own folder under ``path``: ``log.jsonl`` + ``snapshot.json``.

    Durable on return: when ``write``/``awrite`` returns, the new entries and the snapshot
    are on disk (file and folder fsync'd) and survive a crash or power cut, and so are
    the entries it skipped as already stored and the State's folder itself (another
    writer may have appended or created them and died before its fsync: the log, and the
    store's folder, are fsync'd again unless this process knows them durable).
    If an append raises OSError (disk full, I/O error), the log is left as it was before
    it (if even that fails, this process's next write to the State cuts it back first);
    send the same write again once the cause is fixed. If a create raises OSError, the
    State may or may not exist: send the same write with ``create=False`` (it skips what
    is stored), and with ``create=True`` only if that raises LookupError (``Store.save``
    does this).

    After a crash, a partly written last line is ignored on read and cut before the next
    append; a damaged line followed by good ones raises :class:`CorruptStateError` naming
    the file and line, and so does a log that lacks entries its State's snapshot covers
    (the snapshot's ``seq``): a read, and a write, report it rather than drop them.

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
    """

    def __init__(
        self, path: str | os.PathLike[str], *, io: OsIO | None = None, read_only: bool = False
    ) -> None:
        if not os.fspath(path):
            raise ValueError(
                "a FileStore needs a folder path, got an empty one; use '.' for the current folder"
            )
        self.path = Path(os.path.abspath(os.fspath(path)))
        self._key = os.path.realpath(self.path)
        self._folder = StoreFolder(
            self.path, io or OsIO(), read_only=read_only, label=repr(self), probe_case=self._probe_case
        )
        self._tails: dict[str, Tail] = {}  # the tail cache, shared by appends, creates, deletes
        self._appender = Appender(self._folder, self._tails)
        # Late-bound (tests wrap _commit); batches capped by the descriptor limit.
        self._batches: GroupCommit[PreparedWrite] = GroupCommit(
            lambda writes: self._commit(writes), max_batch=batch_cap
        )

    def __repr__(self) -> str:
        return f"FileStore({str(self.path)!r})"

    @property
    def case_insensitive(self) -> bool:
        """Does the store's folder treat ``run`` and ``RUN`` as one name? Known once opened."""
        return self._folder.case_insensitive

    def _storage_key(self) -> Hashable:
        return ("file", self._key)

    def _probe_case(self, root: int) -> bool:
        """Is the opened folder ``root`` case-insensitive? (A test overrides this.)"""
        return probe_case(root)

    # -- the four operations, each run in a worker thread ---------------------------

    async def _write(self, write: PreparedWrite) -> None:
        if write.create:
            await owner().io.run(create, self._folder, self._tails, write)
            return
        # Group commit: appends waiting at the same moment, to any State of this store,
        # are written together and share their flushes; each caller still gets its own
        # outcome, and returns only once its own write is durable.
        await self._batches.submit(write)

    def _commit(self, writes: list[PreparedWrite]) -> list[BaseException | None]:
        return self._appender.commit(writes)

    async def _close(self) -> None:
        await self._batches.drain()  # writes already queued still complete

    async def _read(self, state_id: str) -> Record | Callable[[], Record] | None:
        return await owner().io.run(self._read_sync, state_id)

    async def _list(self) -> tuple[list[SavedState], list[str]]:
        return await owner().io.run(self._list_sync)

    async def _delete(self, state_id: str) -> None:
        await owner().io.run(delete, self._folder, self._tails, state_id)

    # -- read, list -----------------------------------------------------------------

    def _read_sync(self, sid: str) -> Callable[[], Record] | None:
        """Read the files; the returned function parses them, in the caller's thread
        (parsing where the bytes were read costs far more in memory faults)."""
        store = self._folder
        root = store.open_root(create=False)
        if root is None:
            return None
        try:
            folder = store.open_state(root, sid)
            if folder is None:
                return None
            try:
                # Snapshot first: it is written after the entries, so it never covers
                # entries this read does not see.
                snapshot = store.read_file(folder, sid, SNAPSHOT)
                log = store.read_file(folder, sid, LOG)
                if (snapshot is None or log is None) and not still_named(root, sid, folder):
                    return None  # deleted meanwhile: renamed away, then its files removed
            finally:
                os.close(folder)
        finally:
            os.close(root)
        if log is None:
            raise CorruptStateError(f"{store.where(sid, LOG)} is missing")
        return lambda: self._parse(sid, log, snapshot)

    def _parse(self, sid: str, log: bytes, raw_snapshot: bytes | None) -> Record:
        store = self._folder
        scan = scan_log(log, name=store.where(sid, LOG))
        snapshot = decode_snapshot(raw_snapshot, store.where(sid, SNAPSHOT))
        check_snapshot_covered(store, sid, snapshot, scan.next_seq, scan.end if scan.torn else None)
        return Record(scan.entries, snapshot)

    def _list_sync(self) -> tuple[list[SavedState], list[str]]:
        store = self._folder
        root = store.open_root(create=False)
        if root is None:
            return [], []
        rows: list[SavedState] = []
        skipped: list[str] = []
        try:
            with os.scandir(root) as it:
                names = [(e.name, e.is_symlink()) for e in it if not e.name.startswith(".")]
            for name, is_link in names:
                try:
                    validate_id(name)
                except ValueError:
                    continue  # not ours
                try:
                    if is_link:
                        raise CorruptStateError(f"{store.where(name)} is a symbolic link; not followed")
                    try:  # named as scandir found it: spelled as stored
                        folder = store.open_in(root, name, name, DIR)
                    except FileNotFoundError:
                        continue  # deleted meanwhile
                    try:
                        snapshot = read_snapshot(store, folder, name)
                    finally:
                        os.close(folder)
                    if snapshot is not None:
                        rows.append(SavedState.from_snapshot(name, snapshot))
                except (OSError, ValueError) as exc:
                    skipped.append(left_out(name, exc))
        finally:
            os.close(root)
        return listing_order(rows), skipped

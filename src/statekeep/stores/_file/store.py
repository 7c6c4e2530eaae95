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
user owns or could write (fileroot.check_owner). Writers in other processes are kept apart
with ``fcntl.flock`` on the State's folder.
"""

from __future__ import annotations

import errno
import fcntl
import os
import resource
import secrets
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..._backend import Backend
from ..._batching import GroupCommit
from ..._bridge import owner
from ..._errors import CorruptStateError
from ..._ids import validate_id
from ..._logframe import LogScan, scan_log
from ..._records import Record, SavedState, check_covered, decode_snapshot, left_out, listing_order
from ..._writes import PreparedWrite, check_overlap, exists_error, missing_error, plan_append
from .fsio import OsIO
from .trust import (
    CREATING,
    DELETING,
    check_adoptable,
    check_owner,
    foreign_files,
    probe_case,
    read_marker,
    write_marker,
)

LOG = "log.jsonl"
SNAPSHOT = "snapshot.json"
SNAPSHOT_TMP = "snapshot.json.tmp"

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_READ = os.O_RDONLY | os.O_NOFOLLOW


@dataclass(frozen=True, slots=True)
class _Tail:
    """What this process last knew of a log: where it ended and the seq that comes next.

    The first ``size`` bytes are durable: this process fsync'd the log up to there (or
    found it so), so a write covering no more than them needs no fsync of the log.
    Checked before use against ``fstat`` and the log's last bytes: a log deleted and made
    again by another process can have the same inode number (ext4 reuses them) and size.
    """

    dev: int
    ino: int
    size: int
    mtime_ns: int
    next_seq: int
    check: bytes  # the log's last bytes before ``size``

    @classmethod
    def of(cls, log: int, next_seq: int) -> _Tail:
        st = os.fstat(log)
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, next_seq, _last_bytes(log, st.st_size))

    def holds_in(self, log: int, st: os.stat_result) -> bool:
        """Does ``log`` still start with what this describes (maybe with more after it)?"""
        return (
            (self.dev, self.ino) == (st.st_dev, st.st_ino)
            and st.st_size >= self.size
            and _last_bytes(log, self.size) == self.check
        )


@dataclass(slots=True)
class _Append:
    """One write of a group commit, with what it opened and how far it got."""

    write: PreparedWrite
    folder: int = -1
    log: int = -1
    tmp: int = -1
    size: int = 0  # the log's size before this write
    next_seq: int = 0  # the seq after the log's last entry once this write is in
    new: bytes = b""
    sync_log: bool = False  # the log holds bytes not known durable: fsync it
    sync_root: bool = False  # a State this process never wrote: fsync the store's folder
    appended: bool = False
    published: bool = False
    error: BaseException | None = None

    def close(self) -> None:
        for fd in (self.tmp, self.log):
            if fd >= 0:
                os.close(fd)
        if self.folder >= 0:
            _unlock(self.folder)  # last: it holds the lock
        self.tmp = self.log = self.folder = -1


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

    case_insensitive: bool = False
    """Does the store's folder treat ``run`` and ``RUN`` as one name? Known once opened."""

    def __init__(
        self, path: str | os.PathLike[str], *, io: OsIO | None = None, read_only: bool = False
    ) -> None:
        if not os.fspath(path):
            raise ValueError(
                "a FileStore needs a folder path, got an empty one; use '.' for the current folder"
            )
        self.path = Path(os.path.abspath(os.fspath(path)))
        self._key = os.path.realpath(self.path)
        self._io = io or OsIO()
        self._read_only = read_only
        self._tails: dict[str, _Tail] = {}
        self._doubts: dict[str, _Doubt] = {}
        self._swept = False
        self._checked = False  # the marker read, or the folder found to hold only States
        self._marked = False
        self._spelling: dict[str, tuple[int, int]] = {}  # case-insensitive folders: id -> folder
        # Late-bound (tests wrap _commit); batches capped by the descriptor limit.
        self._batches = GroupCommit(lambda writes: self._commit(writes), max_batch=_batch_cap)

    def __repr__(self) -> str:
        return f"FileStore({str(self.path)!r})"

    def _storage_key(self) -> Hashable:
        return ("file", self._key)

    # -- the four operations, each run in a worker thread ---------------------------

    async def _write(self, write: PreparedWrite) -> None:
        if write.create:
            await owner().io.run(self._create_sync, write)
            return
        # Group commit: appends waiting at the same moment, to any State of this store,
        # are written together and share their flushes; each caller still gets its own
        # outcome, and returns only once its own write is durable.
        await self._batches.submit(write)

    async def _close(self) -> None:
        await self._batches.drain()  # writes already queued still complete

    async def _read(self, state_id: str) -> Record | Callable[[], Record] | None:
        return await owner().io.run(self._read_sync, state_id)

    async def _list(self) -> tuple[list[SavedState], list[str]]:
        return await owner().io.run(self._list_sync)

    async def _delete(self, state_id: str) -> None:
        await owner().io.run(self._delete_sync, state_id)

    # -- append (group commit) ------------------------------------------------------

    def _commit(self, writes: list[PreparedWrite]) -> list[BaseException | None]:
        """Append a batch of writes (one per State) durably; return each one's error.

        Three phases so that the flushes are shared: stage every write (lock, check, write
        the log lines and the snapshot's temporary file), flush them all, then rename every
        snapshot into place and flush the folders. A write that fails in any phase is undone
        (log cut back, temporary file removed) and fails alone.
        """
        items = [_Append(w) for w in writes]
        # Folder locks are taken in id order, the same in every process: no deadlock.
        ordered = sorted(items, key=lambda a: a.write.state_id)
        root = self._open_root(create=False, writing=True)
        try:
            for item in ordered:
                self._attempt(item, self._stage, root)
            # Then each write finishes on a thread of its own: concurrent fsyncs share the
            # journal commit and the device flush, and no write waits for a slower one.
            live = self._sync_root(root, [a for a in ordered if a.error is None])
            aux = owner().aux
            jobs = [aux.submit(self._attempt, a, self._finish, False) for a in live[1:]]
            if live:
                self._attempt(live[0], self._finish, True)
            for job in jobs:
                job.result()
            for item in ordered:
                sid = item.write.state_id
                if item.error is None:
                    self._tails[sid] = _Tail.of(item.log, item.next_seq)
                else:
                    self._tails.pop(sid, None)  # re-read from disk next time
        finally:
            for item in items:
                item.close()
            if root is not None:
                os.close(root)
        return [a.error for a in items]

    def _sync_root(self, root: int | None, live: list[_Append]) -> list[_Append]:
        """Fsync the store's folder once if a write is to a State this process never
        wrote: its create may have died after the rename into place, before that fsync.
        Returns the writes still live."""
        if root is None or not any(a.sync_root for a in live):
            return live
        try:
            self._io.fsync(root)
        except BaseException as exc:
            for item in live:
                if item.sync_root:
                    item.error = exc
                    self._undo(item)
            return [a for a in live if a.error is None]
        return live

    def _attempt(self, item: _Append, step: Callable[..., object], *args: object) -> None:
        if item.error is not None:
            return
        try:
            step(item, *args)
        except BaseException as exc:
            item.error = exc
            self._undo(item)

    def _stage(self, item: _Append, root: int | None) -> None:
        io, write = self._io, item.write
        sid = write.state_id
        folder = None if root is None else self._open_state(root, sid)
        if folder is None:
            raise missing_error(sid)
        _lock(folder)
        item.folder = folder
        if not _still_named(root, sid, folder):  # type: ignore[arg-type]
            raise missing_error(sid)  # deleted while we waited for the lock
        item.log = self._open_in(folder, sid, LOG, os.O_RDWR | os.O_APPEND)
        item.sync_root = sid not in self._tails
        self._settle_doubt(folder, item.log, sid)
        item.size, next_seq, durable = self._tail(folder, item.log, sid)
        skip = plan_append(write, next_seq)
        item.next_seq = next_seq + len(write.lines) - skip
        if skip:
            stored = self._scan(item.log, sid).entries[write.first_seq : write.first_seq + skip]
            check_overlap(write, stored)
        item.new = b"".join(write.lines[skip:])
        # Never acknowledge bytes nobody made durable: entries skipped as stored may be
        # the append of a writer that died before its fsync.
        item.sync_log = bool(item.new) or not durable
        if item.new:
            item.appended = True
            io.write_all(item.log, item.new)
        if write.snapshot is not None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
            item.tmp = self._open_in(folder, sid, SNAPSHOT_TMP, flags)
            os.fchmod(item.tmp, 0o600)
            io.write_all(item.tmp, write.snapshot)

    def _finish(self, item: _Append, helped: bool) -> None:
        """Make a staged write durable: fsync the log and the temporary snapshot, then
        rename the snapshot into place (so it never covers entries that are not durable)
        and fsync the folder. ``helped``: may hand the snapshot's fsync to a helper thread
        (only off the helper pool itself, whose jobs must never wait on each other)."""
        io = self._io
        if helped and item.sync_log and item.tmp >= 0:
            # Both at once: concurrent fsyncs share the journal commit.
            job = owner().aux.submit(io.fsync, item.tmp)
            try:
                io.fsync(item.log)
            finally:
                job.exception()  # the file closes after this: never leave its fsync running
            job.result()
        else:
            if item.sync_log:
                io.fsync(item.log)
            if item.tmp >= 0:
                io.fsync(item.tmp)
        if item.tmp >= 0:
            io.rename(SNAPSHOT_TMP, SNAPSHOT, dir_fd=item.folder)
            item.published = True
            # From here a failed fsync leaves the snapshot maybe durable, maybe not, while
            # the entries before it are durable already.
            io.fsync(item.folder)

    def _undo(self, item: _Append) -> None:
        """Take back what a failed write did, so the State is as it was before it."""
        if item.published:
            return
        if item.tmp >= 0:
            _quietly(lambda: self._io.unlink(SNAPSHOT_TMP, dir_fd=item.folder))
        if item.appended:
            self._undo_append(item)

    def _undo_append(self, item: _Append) -> None:
        """Cut the log back to its size before a failed append; the original error follows.

        If that fails too, the log may keep (part of) the write, never made durable, and
        after a failed fsync another fsync may report success without it (fsyncgate): so
        this process's next write to the State cuts it off first (:meth:`_settle_doubt`).
        """
        io = self._io
        try:
            io.truncate(item.log, item.size)
            io.fsync(item.log)
        except OSError as exc:
            if item.error is not None:
                item.error.add_note(f"statekeep: undoing this append failed too: {exc}")
            try:
                self._doubts[item.write.state_id] = _Doubt(
                    _Tail.of(item.log, 0), _snapshot_id(item.folder), item.size
                )
            except OSError:
                pass  # the next write then scans the log whole and fsyncs it

    def _settle_doubt(self, folder: int, log: int, sid: str) -> None:
        """Finish an undo of this process that failed: cut the log back, unless someone
        wrote to the State since (then it is theirs: it is scanned whole and fsync'd)."""
        doubt = self._doubts.get(sid)
        if doubt is None:
            return
        st = os.fstat(log)
        left = doubt.left
        if left.holds_in(log, st) and st.st_size == left.size and _snapshot_id(folder) == doubt.snapshot:
            self._io.truncate(log, doubt.cut_to)
            self._io.fsync(log)
        del self._doubts[sid]

    def _tail(self, folder: int, log: int, sid: str) -> tuple[int, int, bool]:
        """(size, next seq, durable) of the log, from the cache when the file did not change.

        ``durable``: the log is known durable up to its end. A torn tail left by a crashed
        writer is cut here, before anything is appended, unless the snapshot covers it.
        """
        st = os.fstat(log)
        known = self._tails.get(sid)
        if known is not None and not known.holds_in(log, st):
            known = None  # replaced or cut by someone else: scan it whole
        if known is not None and st.st_size == known.size:
            return known.size, known.next_seq, True
        if known is not None:
            # Another process appended: read only what it added.
            data = os.pread(log, st.st_size - known.size, known.size)
            scan = scan_log(
                data, start_seq=known.next_seq, name=self._where(sid, LOG), first_line=known.next_seq + 1
            )
            end = known.size + scan.end
        else:
            scan = self._scan(log, sid)
            end = scan.end
        if end < st.st_size:
            # A crash never leaves a torn line that the snapshot covers: damage does, and
            # cutting it would drop acknowledged entries without a word.
            try:
                snapshot = self._read_snapshot(folder, sid)
            except CorruptStateError:
                snapshot = None  # damaged itself: this write may replace it
            self._check_covered(sid, snapshot, scan.next_seq, end)
            self._io.truncate(log, end)
            self._io.fsync(log)
            return end, scan.next_seq, True  # that fsync made the rest durable too
        return end, scan.next_seq, False

    def _scan(self, log: int, sid: str) -> LogScan:
        os.lseek(log, 0, os.SEEK_SET)
        return scan_log(self._io.read_all(log), name=self._where(sid, LOG))

    def _create_sync(self, write: PreparedWrite) -> None:
        root = self._open_root(create=True)
        assert root is not None
        try:
            self._create(root, write)
        finally:
            os.close(root)

    def _create(self, root: int, write: PreparedWrite) -> None:
        io, sid = self._io, write.state_id
        if _exists(root, sid):
            raise self._exists_error(root, sid)
        staging = f"{CREATING}{os.getpid()}-{secrets.token_hex(6)}"
        folder = self._make_staging(root, staging)
        try:
            try:
                pending = None
                if write.snapshot is not None:
                    pending = owner().aux.submit(self._write_file, folder, SNAPSHOT, write.snapshot)
                try:
                    log = io.open(LOG, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, dir_fd=folder)
                    try:
                        os.fchmod(log, 0o600)
                        io.write_all(log, b"".join(write.lines))
                        io.fsync(log)
                        tail = _Tail.of(log, write.end_seq)
                    finally:
                        os.close(log)
                finally:
                    if pending is not None:
                        pending.result()
                io.fsync(folder)
                try:
                    io.rename(staging, sid, dir_fd=root)
                except OSError as exc:
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        raise self._exists_error(root, sid) from None
                    raise
            except BaseException:
                _quietly(lambda: _remove_tree(io, root, staging))
                raise
        finally:
            _unlock(folder)  # only now: a staging folder whose lock is free is a leftover
        io.fsync(root)
        self._tails[sid] = tail

    def _make_staging(self, root: int, staging: str) -> int:
        """Make the staging folder and return it opened and locked.

        The store's folder is share-locked meanwhile: a sweep takes that lock exclusively,
        so it never sees a staging folder that exists but is not locked yet.
        """
        _hold(root, fcntl.LOCK_SH)
        try:
            self._io.mkdir(staging, dir_fd=root)
            try:
                folder = self._open_in(root, staging, staging, _DIR)
            except BaseException:
                _quietly(lambda: self._io.rmdir(staging, dir_fd=root))
                raise
            _lock(folder)
            return folder
        finally:
            _release(root)

    def _exists_error(self, root: int, sid: str) -> ValueError:
        if self.case_insensitive:
            twin = next((n for n in os.listdir(root) if n.lower() == sid.lower() and n != sid), None)
            if twin is not None:
                return ValueError(
                    f"State id {sid!r} differs only in case from {twin!r}, which {self.path} holds; "
                    "on this case-insensitive file system both would be one folder. Use another id"
                )
        return exists_error(sid)

    def _write_file(self, folder: int, name: str, data: bytes) -> None:
        """Write ``name`` whole (created 0600, truncated) and fsync it."""
        io = self._io
        fd = io.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, dir_fd=folder)
        try:
            os.fchmod(fd, 0o600)
            io.write_all(fd, data)
            io.fsync(fd)
        finally:
            os.close(fd)

    # -- read, list -----------------------------------------------------------------

    def _read_sync(self, sid: str) -> Callable[[], Record] | None:
        """Read the files; the returned function parses them, in the caller's thread
        (parsing where the bytes were read costs far more in memory faults)."""
        root = self._open_root(create=False)
        if root is None:
            return None
        try:
            folder = self._open_state(root, sid)
            if folder is None:
                return None
            try:
                # Snapshot first: it is written after the entries, so it never covers
                # entries this read does not see.
                snapshot = self._read_file(folder, sid, SNAPSHOT)
                log = self._read_file(folder, sid, LOG)
                if (snapshot is None or log is None) and not _still_named(root, sid, folder):
                    return None  # deleted meanwhile: renamed away, then its files removed
            finally:
                os.close(folder)
        finally:
            os.close(root)
        if log is None:
            raise CorruptStateError(f"{self._where(sid, LOG)} is missing")
        return lambda: self._parse(sid, log, snapshot)

    def _parse(self, sid: str, log: bytes, raw_snapshot: bytes | None) -> Record:
        scan = scan_log(log, name=self._where(sid, LOG))
        snapshot = decode_snapshot(raw_snapshot, self._where(sid, SNAPSHOT))
        self._check_covered(sid, snapshot, scan.next_seq, scan.end if scan.torn else None)
        return Record(scan.entries, snapshot)

    def _check_covered(
        self, sid: str, snapshot: dict[str, Any] | None, next_seq: int, torn_at: int | None
    ) -> None:
        """CorruptStateError if the snapshot covers entries the log lacks (see
        :func:`check_covered`). ``torn_at``: where the log's unreadable last line starts."""
        cut = "" if torn_at is None else f" (its last line, from byte {torn_at}, is cut short)"
        check_covered(
            snapshot,
            next_seq,
            snapshot_name=f"State {sid!r} is damaged: {self._where(sid, SNAPSHOT)}",
            history_name=f"{self._where(sid, LOG)}{cut}",
            advice="restore the log from a backup, or move the State's folder aside",
        )

    def _read_file(self, folder: int, sid: str, name: str) -> bytes | None:
        try:
            fd = self._open_in(folder, sid, name, _FILE_READ)
        except FileNotFoundError:
            return None
        try:
            return self._io.read_all(fd)
        finally:
            os.close(fd)

    def _read_snapshot(self, folder: int, sid: str) -> dict[str, Any] | None:
        return decode_snapshot(self._read_file(folder, sid, SNAPSHOT), self._where(sid, SNAPSHOT))

    def _list_sync(self) -> tuple[list[SavedState], list[str]]:
        root = self._open_root(create=False)
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
                        raise CorruptStateError(f"{self._where(name)} is a symbolic link; not followed")
                    try:  # named as scandir found it: spelled as stored
                        folder = self._open_in(root, name, name, _DIR)
                    except FileNotFoundError:
                        continue  # deleted meanwhile
                    try:
                        snapshot = self._read_snapshot(folder, name)
                    finally:
                        os.close(folder)
                    if snapshot is not None:
                        rows.append(SavedState.from_snapshot(name, snapshot))
                except (OSError, ValueError) as exc:
                    skipped.append(left_out(name, exc))
        finally:
            os.close(root)
        return listing_order(rows), skipped

    # -- delete ---------------------------------------------------------------------

    def _delete_sync(self, sid: str) -> None:
        root = self._open_root(create=False, writing=True)
        if root is None:
            return
        io = self._io
        try:
            folder = self._open_state(root, sid)
            if folder is None:
                return
            _lock(folder)  # let a writer in another process finish first
            try:
                if not _still_named(root, sid, folder):
                    return
                strangers = foreign_files(folder)
                if strangers:
                    raise CorruptStateError(
                        f"{self._where(sid)} holds {', '.join(map(repr, strangers))}, which are not a "
                        "State's files; it is not deleted. Move them out, or remove the folder yourself"
                    )
                trash = f"{DELETING}{os.getpid()}-{secrets.token_hex(6)}"
                io.rename(sid, trash, dir_fd=root)  # the atomic point: the State is gone
                self._tails.pop(sid, None)
                io.fsync(root)
                # A failure from here leaves a leftover; the lock held until it is removed
                # tells a sweep whether its deleter is still at work.
                _quietly(lambda: _remove_tree(io, root, trash))
            finally:
                _unlock(folder)
        finally:
            os.close(root)

    # -- folders --------------------------------------------------------------------

    def _open_root(self, *, create: bool, writing: bool = False) -> int | None:
        """Open the store's folder, checked; None if absent.

        ``create``: make the folder (0700, durably) if it is missing. ``create`` or
        ``writing``: mark the folder as a store if it is not yet.
        """
        writing = writing or create
        if writing and self._read_only:
            raise RuntimeError(f"{self!r} was opened with read_only=True; open it without to write")
        try:
            root = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if not create:
                return None
            self._make_root()
            root = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            check_owner(root, self.path)
            if not self._checked:
                self._check_root(root)
            if writing and not self._marked:
                write_marker(self._io, root)
                self._marked = True
                self.case_insensitive = self._probe_case(root)
        except BaseException:
            os.close(root)
            raise
        if writing and not self._swept:  # reads never write, not even to clean up
            self._swept = True
            _quietly(lambda: self._sweep(root))
        return root

    def _check_root(self, root: int) -> None:
        """Once per instance: the marker is ours, or the folder holds only States."""
        marker = read_marker(self._io, root, str(self.path))
        if marker is None:
            check_adoptable(root, str(self.path))
        else:
            self._marked = True
            self.case_insensitive = self._probe_case(root)
        self._checked = True

    def _probe_case(self, root: int) -> bool:
        return probe_case(root)

    def _make_root(self) -> None:
        missing = []
        p = self.path
        while not p.exists():
            missing.append(p)
            p = p.parent
        for folder in reversed(missing):
            try:
                os.mkdir(folder, 0o700)
                os.chmod(folder, 0o700)
            except FileExistsError:
                pass
            parent = os.open(folder.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                self._io.fsync(parent)
            finally:
                os.close(parent)

    def _sweep(self, root: int) -> None:
        """Remove what crashed creates and deletes left behind: folders whose lock is free."""
        if not _hold(root, fcntl.LOCK_EX | fcntl.LOCK_NB):
            self._swept = False  # a create is making its folder: the next operation sweeps
            return
        try:
            with os.scandir(root) as it:
                names = [e.name for e in it if e.name.startswith((CREATING, DELETING))]
            for name in names:
                try:
                    folder = os.open(name, _DIR | os.O_CLOEXEC, dir_fd=root)
                except OSError:
                    continue
                _locked.add(folder)
                try:
                    if _try_lock(folder):  # else its process is still at work
                        _quietly(lambda name=name: _remove_tree(self._io, root, name))
                finally:
                    _unlock(folder)
        finally:
            _release(root)

    def _open_state(self, root: int, sid: str) -> int | None:
        try:
            folder = self._open_in(root, sid, sid, _DIR)
        except FileNotFoundError:
            return None
        if self.case_insensitive and not self._spelled(root, sid, folder):
            os.close(folder)
            return None  # the folder of an id spelled in another case
        return folder

    def _spelled(self, root: int, sid: str, folder: int) -> bool:
        """On a case-insensitive folder: is ``folder`` named exactly ``sid``?"""
        st = os.fstat(folder)
        if self._spelling.get(sid) == (st.st_dev, st.st_ino):
            return True
        if sid not in os.listdir(root):
            return False
        self._spelling[sid] = (st.st_dev, st.st_ino)
        return True

    def _open_in(self, dir_fd: int, sid: str, name: str, flags: int) -> int:
        """Open ``name`` in ``dir_fd`` (a State's folder, or the store's for ``name == sid``),
        never through a link, and refuse it if another user could change it."""
        where = self._where(sid) if name == sid else self._where(sid, name)
        try:
            fd = self._io.open(name, flags | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise CorruptStateError(
                    f"{where} is a symbolic link or not what statekeep made; "
                    "links inside a store are never followed"
                ) from None
            raise
        try:
            check_owner(fd, where)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _where(self, sid: str, name: str | None = None) -> str:
        return str(self.path / sid / name) if name else str(self.path / sid)


# Folder descriptors that hold a State's flock right now. A child forked meanwhile gets
# copies that would keep the lock held (flock belongs to the open file, which the copies
# share), and no thread of its own to release them: it closes them at once.
_locked: set[int] = set()


def _lock(folder: int) -> None:
    """Take the State's lock (waiting for other processes); closes ``folder`` on failure."""
    _locked.add(folder)  # first: a fork from here on closes the child's copy
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
    except BaseException:
        _locked.discard(folder)
        os.close(folder)
        raise


def _try_lock(folder: int) -> bool:
    """Take the lock of a folder already listed in ``_locked`` if it is free."""
    try:
        fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _hold(fd: int, how: int) -> bool:
    """flock ``fd`` (kept open); False if ``how`` has LOCK_NB and the lock is taken."""
    _locked.add(fd)
    try:
        fcntl.flock(fd, how)
    except BlockingIOError:
        _locked.discard(fd)
        return False
    except BaseException:
        _locked.discard(fd)
        raise
    return True


def _release(fd: int) -> None:
    """Undo :func:`_hold`; the descriptor stays open."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        _locked.discard(fd)


def _unlock(folder: int) -> None:
    """Release the lock, then forget and close the descriptor (a copy made by a fork
    between these steps holds no lock, and the number is never reused while listed)."""
    try:
        fcntl.flock(folder, fcntl.LOCK_UN)
    finally:
        _locked.discard(folder)
        os.close(folder)


def _close_inherited_locks() -> None:
    for fd in list(_locked):
        try:
            os.close(fd)
        except OSError:
            pass
    _locked.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


# A staged write holds three descriptors (folder, log, snapshot's temporary file) until its
# batch is done. A batch uses at most a quarter of the process's limit: the rest stays
# free for everything else it has open (sockets, other stores, reads, creates).
_FDS_PER_WRITE = 3
_FDS_SHARE = 4


def _batch_cap() -> int:
    """Most appends one group commit stages at once, from the descriptor limit now."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft > 1 << 20:
        soft = 1 << 20
    return max(1, soft // _FDS_SHARE // _FDS_PER_WRITE)


@dataclass(frozen=True, slots=True)
class _Doubt:
    """A log whose undo failed: it may hold bytes of a failed append past ``cut_to``."""

    left: _Tail  # the log as the failed write left it
    snapshot: tuple[int, int, int] | None  # and the snapshot file (see _snapshot_id)
    cut_to: int  # the log's size before that append


def _snapshot_id(folder: int) -> tuple[int, int, int] | None:
    """The snapshot file's identity and mtime: a write replaces it with a new file."""
    try:
        st = os.stat(SNAPSHOT, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


_CHECK_BYTES = 4096


def _last_bytes(log: int, size: int) -> bytes:
    n = min(size, _CHECK_BYTES)
    return os.pread(log, n, size - n)


def _still_named(root: int, sid: str, folder: int) -> bool:
    """Is ``folder`` still the State's folder (not renamed away or replaced)?"""
    try:
        named = os.stat(sid, dir_fd=root, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(folder)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _exists(root: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=root, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _remove_tree(io: OsIO, root: int, name: str) -> None:
    """Remove a State folder (files only, no subfolders) that is no longer named as one."""
    folder = os.open(name, _DIR | os.O_CLOEXEC, dir_fd=root)
    try:
        with os.scandir(folder) as it:
            files = [e.name for e in it]
        for file in files:
            try:
                io.unlink(file, dir_fd=folder)
            except FileNotFoundError:
                pass
    finally:
        os.close(folder)
    io.rmdir(name, dir_fd=root)


def _discard(job: Future[None], cleanup: Callable[[], object]) -> None:
    """After a failure: wait for a side job to end, then undo what it wrote."""
    try:
        job.result()
    except BaseException:
        pass
    _quietly(cleanup)


def _quietly(action: Callable[[], object]) -> None:
    """Run a best-effort clean-up whose failure must not hide the error being raised."""
    try:
        action()
    except OSError:
        pass

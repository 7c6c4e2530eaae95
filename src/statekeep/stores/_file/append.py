"""FileStore's appends, as group commits: a batch of writes (one per State) is staged,
flushed together and finished, each write undone alone if it fails; and the bookkeeping
of an undo that failed, so the next write cuts off what may not be durable."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ..._bridge import owner
from ..._writes import PreparedWrite, check_overlap, missing_error, plan_append
from .._fsio import write_private
from .budget import BUDGET
from .folder import StoreFolder, quietly, still_named
from .locking import lock, unlock
from .recovery import Tail, read_tail, scan_whole
from .trust import LOG, SNAPSHOT, SNAPSHOT_TMP


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
    durable: int = 0  # how much of the log is known durable (its start) before this write
    appended: bool = False
    published: bool = False
    error: BaseException | None = None

    def close(self) -> None:
        for fd in (self.tmp, self.log):
            if fd >= 0:
                os.close(fd)
        if self.folder >= 0:
            unlock(self.folder)  # last: it holds the lock
        self.tmp = self.log = self.folder = -1


@dataclass(frozen=True, slots=True)
class _Doubt:
    """A log whose undo failed: it may hold bytes of a failed append past ``cut_to``."""

    left: Tail  # the log as the failed write left it
    snapshot: tuple[int, int, int] | None  # and the snapshot file (see _snapshot_id)
    cut_to: int  # the log's size before that append


def _snapshot_id(folder: int) -> tuple[int, int, int] | None:
    """The snapshot file's identity and mtime: a write replaces it with a new file."""
    try:
        st = os.stat(SNAPSHOT, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


class Appender:
    """Appends to the States of one store; shares ``tails`` (the tail cache) with it."""

    def __init__(self, store: StoreFolder, tails: dict[str, Tail]) -> None:
        self._store = store
        self._io = store.io
        self._tails = tails
        self._doubts: dict[str, _Doubt] = {}
        # Logs whose fsync failed: (dev, ino, from) -- bytes past ``from`` may be clean in
        # the page cache yet not on disk (fsyncgate), so they are written again first.
        self._suspects: dict[str, tuple[int, int, int]] = {}

    def commit(self, writes: list[PreparedWrite]) -> list[BaseException | None]:
        """Append a batch of writes (one per State) durably; return each one's error.

        Three phases so that the flushes are shared: stage every write (lock, check, write
        the log lines and the snapshot's temporary file), flush them all, then rename every
        snapshot into place and flush the folders. A write that fails in any phase is undone
        (log cut back, temporary file removed) and fails alone.
        """
        with BUDGET.held(len(writes)):
            return self._commit(writes)

    def _commit(self, writes: list[PreparedWrite]) -> list[BaseException | None]:
        items = [_Append(w) for w in writes]
        # Folder locks are taken in id order, the same in every process: no deadlock.
        ordered = sorted(items, key=lambda a: a.write.state_id)
        root = self._store.open_root(create=False, writing=True)
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
                    self._tails[sid] = Tail.of(item.log, item.next_seq)
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
        store, write = self._store, item.write
        sid = write.state_id
        folder = None if root is None else store.open_state(root, sid)
        if root is None or folder is None:
            raise missing_error(sid)
        lock(folder)
        item.folder = folder
        if not still_named(root, sid, folder):
            raise missing_error(sid)  # deleted while we waited for the lock
        item.log = store.open_in(folder, sid, LOG, os.O_RDWR | os.O_APPEND)
        item.sync_root = sid not in self._tails
        self._settle_doubt(folder, item.log, sid)
        item.size, next_seq, durable = read_tail(store, self._tails.get(sid), folder, item.log, sid)
        item.durable = item.size if durable else 0
        if self._rewrite_suspect(folder, item.log, sid, item.size):
            durable, item.durable = False, 0
        skip = plan_append(write, next_seq)
        item.next_seq = next_seq + len(write.lines) - skip
        if skip:
            stored = scan_whole(store, item.log, sid).entries[write.first_seq : write.first_seq + skip]
            check_overlap(write, stored)
        item.new = b"".join(write.lines[skip:])
        # Never acknowledge bytes nobody made durable: entries skipped as stored may be
        # the append of a writer that died before its fsync.
        item.sync_log = bool(item.new) or not durable
        if item.new:
            item.appended = True
            self._io.write_all(item.log, item.new)
        if write.snapshot is not None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            item.tmp = store.open_in(folder, sid, SNAPSHOT_TMP, flags)
            write_private(self._io, item.tmp, write.snapshot, sync=False)  # synced in _finish

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
                self._fsync_log(item)
            finally:
                job.exception()  # the file closes after this: never leave its fsync running
            job.result()
        else:
            if item.sync_log:
                self._fsync_log(item)
            if item.tmp >= 0:
                io.fsync(item.tmp)
        if item.tmp >= 0:
            io.rename(SNAPSHOT_TMP, SNAPSHOT, dir_fd=item.folder)
            item.published = True
            # From here a failed fsync leaves the snapshot maybe durable, maybe not, while
            # the entries before it are durable already.
            io.fsync(item.folder)

    def _fsync_log(self, item: _Append) -> None:
        """Fsync the log. If that fails, what it held past the part known durable is
        suspect until written again (see :meth:`_rewrite_suspect`). A write that made
        bytes durable without writing any (a re-sent write) also touches the log's mtime, so
        that a pending cut-back of a failed undo (:meth:`_settle_doubt`) sees it was not alone."""
        try:
            if not item.new:
                os.utime(item.log)
            self._io.fsync(item.log)
        except BaseException:
            try:
                st = os.fstat(item.log)
                self._suspects[item.write.state_id] = (st.st_dev, st.st_ino, item.durable)
            except OSError:
                self._tails.pop(item.write.state_id, None)
            raise

    def _rewrite_suspect(self, folder: int, log: int, sid: str, end: int) -> bool:
        """After a failed fsync of this log, write its suspect bytes again (same bytes, same
        place) so that the next fsync really stores them; True if it did."""
        suspect = self._suspects.pop(sid, None)
        if suspect is None:
            return False
        st = os.fstat(log)
        dev, ino, start = suspect
        if (st.st_dev, st.st_ino) != (dev, ino) or start >= end:
            return False  # replaced, or nothing left past the durable part
        data = os.pread(log, end - start, start)
        fd = self._store.open_in(folder, sid, LOG, os.O_WRONLY)  # no O_APPEND: write in place
        try:
            os.lseek(fd, start, os.SEEK_SET)
            self._io.write_all(fd, data)
        except BaseException:
            self._suspects[sid] = suspect  # still suspect
            raise
        finally:
            os.close(fd)
        return True

    def _undo(self, item: _Append) -> None:
        """Take back what a failed write did, so the State is as it was before it."""
        if item.published:
            return
        if item.tmp >= 0:
            quietly(lambda: self._io.unlink(SNAPSHOT_TMP, dir_fd=item.folder))
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
                    Tail.of(item.log, 0), _snapshot_id(item.folder), item.size
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
        unchanged = st.st_size == left.size and st.st_mtime_ns == left.mtime_ns  # see _fsync_log
        if left.holds_in(log, st) and unchanged and _snapshot_id(folder) == doubt.snapshot:
            self._io.truncate(log, doubt.cut_to)
            self._io.fsync(log)
        del self._doubts[sid]

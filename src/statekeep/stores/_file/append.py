"""FileStore's appends, as group commits: a batch of writes (one per State) is staged,
flushed together and finished, each write undone alone if it fails; and the bookkeeping
of an undo that failed, so the next write cuts off what may not be durable.

A steady-state append is one ``write()`` of the new entry lines and the closing record
(carrying the snapshot) to the log, opened once and kept open (:mod:`.handles`), and one
fsync of the log: nothing else is on the durable path. A lone one takes a shorter way
(:mod:`.steady`, its base class), which declines, having changed nothing, whenever more may be needed."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

import orjson

from ..._core.errors import StateNotFoundError
from ..._core.labels import encoded_expiry
from ..._core.leases import check_fence
from ..._core.records import decode_snapshot
from ..._core.writes import PreparedWrite, check_overlap, missing_error, plan_append
from ..._runtime.batching import WouldBlock
from ..._runtime.bridge import owner
from ..._store.expect import check_preconditions, sealed_after
from .budget import BUDGET, limit_hit
from .copies import Copies
from .expiry import log_expiry
from .folder import StoreFolder, log_named, still_named
from .handles import SpaceHandles, close_pair
from .leases import LeaseRows
from .locking import hold
from .logformat import closing_record, frame
from .logtail import entries_back
from .recovery import Tail, io_reader, read_tail, scan_whole, sealed_log
from .staged import Append, Doubt
from .steady import MISS, SteadyAppender
from .trust import LOG, SNAPSHOT


class Appender(SteadyAppender):
    """Appends to the States of one store; shares ``tails`` (the tail cache) with it."""

    def __init__(
        self,
        store: StoreFolder,
        tails: dict[str, Tail],
        handles: SpaceHandles,
        copies: Copies,
        now: Callable[[], datetime],
        leases: LeaseRows,
    ) -> None:
        self._store = store
        self._leases = leases
        self._now = now  # the store's clock, which judges expiry
        self._io = store.io
        self._tails = tails
        self._handles = handles
        self._copies = copies
        self._doubts: dict[str, Doubt] = {}
        # Logs whose fsync failed: (dev, ino, from) -- bytes past ``from`` may be clean in
        # the page cache yet not on disk (fsyncgate), so they are written again first.
        self._suspects: dict[str, tuple[int, int, int]] = {}

    def commit(self, writes: list[PreparedWrite]) -> list[BaseException | None]:
        """Append a batch of writes (one per State) durably; return each one's error.

        Two phases so that the flushes are shared: stage every write (lock, check, append
        its lines), then fsync every log at once. A write that fails in either phase is
        undone (its log cut back) and fails alone.
        """
        if len(writes) == 1:
            outcome = self._steady(writes[0], wait=True)
            if outcome is not MISS:
                return [cast(BaseException | None, outcome)]
        with BUDGET.held(len(writes)):
            return self._commit(writes)

    def commit_now(self, writes: list[PreparedWrite]) -> list[BaseException | None]:
        """:meth:`commit` of one write that must not wait: WouldBlock, having changed
        nothing, if another process holds the State's lock (or the budget is spent)."""
        if len(writes) != 1:
            raise WouldBlock
        outcome = self._steady(writes[0], wait=False)  # first: it checks what is below
        if outcome is not MISS:
            return [cast(BaseException | None, outcome)]
        sid = writes[0].state_id
        if sid not in self._tails or sid in self._doubts or sid in self._suspects or not self._store.settled:
            raise WouldBlock  # more than an append and its fsync may be needed: off the loop
        with BUDGET.held(1, wait=False):
            errors = self._commit(writes, wait=False)
        if isinstance(errors[0], WouldBlock):
            raise WouldBlock
        return errors

    def _commit(self, writes: list[PreparedWrite], *, wait: bool = True) -> list[BaseException | None]:
        items = [Append(w) for w in writes]
        # Folder locks are taken in id order, the same in every process: no deadlock.
        ordered = sorted(items, key=lambda a: a.write.state_id)
        root = self._store.open_root(create=False, writing=True)
        try:
            for item in ordered:
                self._attempt(item, self._stage, root, wait)
            # Then each write finishes on a thread of its own: concurrent fsyncs share the
            # journal commit and the device flush, and no write waits for a slower one.
            live = self._sync_root(root, [a for a in ordered if a.error is None])
            live = [a for a in live if a.sync_log]
            aux = owner().aux
            jobs = [aux.submit(self._attempt, a, self._fsync_log) for a in live[1:]]
            if live:
                self._attempt(live[0], self._fsync_log)
            for job in jobs:
                job.result()
            for item in ordered:
                self._done(item, root)
        finally:
            for item in items:
                self._put_back(item)
            if root is not None:
                self._io.close(root)
        return [a.error for a in items]

    def _sync_root(self, root: int | None, live: list[Append]) -> list[Append]:
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

    def _attempt(self, item: Append, step: Callable[..., object], *args: object) -> None:
        if item.error is not None:
            return
        try:
            step(item, *args)
        except BaseException as exc:
            if isinstance(exc, OSError):
                self._store.name_paths(exc, item.write.state_id)
            limit_hit(exc)
            item.error = exc
            self._undo(item)

    def _stage(self, item: Append, root: int | None, wait: bool) -> None:
        store, write = self._store, item.write
        sid = write.state_id
        if root is None:
            raise missing_error(sid)
        try:
            self._open(item, root, wait)
        except StateNotFoundError:
            check_fence(sid, self._leases.read(root, sid), write.lease, self._now())
            raise
        # The fence, under the State's lock: a lease changes only with it held (.leases).
        check_fence(sid, self._leases.read(root, sid), write.lease, self._now())
        item.sync_root = sid not in self._tails
        self._settle_doubt(item.log, sid)
        found = read_tail(store, self._tails.get(sid), item.folder, item.log, sid)
        item.size, durable = found.size, found.durable
        item.durable = item.size if durable else 0
        if self._rewrite_suspect(item.folder, item.log, sid, item.size):
            durable, item.durable = False, 0
        item.framed = found.framed
        # An expired State is absent: judged here, under its lock, from the log itself.
        expires = found.expiry[0] if found.expiry else log_expiry(item.log, found.snapshot_at, item.size)
        if expires is not None and expires <= self._now():
            raise missing_error(sid)
        item.expires_at = expires if write.snapshot is None else encoded_expiry(write.snapshot)
        sealed = found.sealed
        if sealed is None and write.opener is None:
            sealed = sealed_log(item.log, found)
        check_preconditions(write, found.incarnation, found.next_seq, bool(sealed))
        item.incarnation = found.incarnation
        skip = plan_append(write, found.next_seq)
        item.next_seq = found.next_seq + len(write.lines) - skip
        if skip:
            check_overlap(write, self._stored(item, found.next_seq, skip))
        lines = write.lines[skip:]
        snapshot = write.snapshot
        if snapshot is None and not found.framed:
            # The first write in format 2 to a State of format 1: its snapshot moves
            # into the log, which is the single source of truth from now on.
            snapshot = store.read_file(item.folder, sid, SNAPSHOT)
            snapshot = (
                None
                if snapshot is None
                else orjson.dumps(decode_snapshot(snapshot, store.where(sid, SNAPSHOT)))
            )
        item.sealed = sealed_after(sealed, snapshot, found.snapshot_at, lines)
        if lines or snapshot is not None:
            entries = b"".join([frame(line) for line in lines])
            item.snapshot = snapshot
            item.snapshot_at = found.snapshot_at if snapshot is None else item.size + len(entries)
            closing = closing_record(item.next_seq, entries, snapshot, found.snapshot_at, found.incarnation)
            item.new = entries + closing
        else:
            item.snapshot_at = found.snapshot_at
        # Never acknowledge bytes nobody made durable: entries skipped as stored may be
        # the append of a writer that died before its fsync.
        item.sync_log = bool(item.new) or not durable
        if item.new:
            item.framed = True
            item.appended = True
            self._io.write_all(item.log, item.new)

    def _open(self, item: Append, root: int, wait: bool) -> None:
        """Open the State's folder and log (or take them from the cache) and lock it."""
        store, sid = self._store, item.write.state_id
        for cached in (True, False):
            pair = self._handles.take(sid) if cached else None
            if pair is None:
                folder = store.open_state(root, sid)
                if folder is None:
                    raise missing_error(sid)
                try:
                    log = store.open_in(folder, sid, LOG, os.O_RDWR | os.O_APPEND)
                except BaseException:
                    self._io.close(folder)
                    raise
                pair = (folder, log, None)
            item.folder, item.log, item.mark = pair
            if wait:
                hold(item.folder, fcntl.LOCK_EX, self._io)  # on failure, _put_back closes both
            elif not hold(item.folder, fcntl.LOCK_EX | fcntl.LOCK_NB, self._io):
                raise WouldBlock  # another process is writing the State: wait in a worker
            item.locked = True
            if still_named(root, sid, item.folder, self._io):
                if log_named(item.folder, item.log, self._io):
                    return
                # A rekey replaced the log since it was opened (.reseal): use the new one.
                self._io.close(item.log)
                item.log, item.mark = -1, None
                item.log = store.open_in(item.folder, sid, LOG, os.O_RDWR | os.O_APPEND)
                return
            # Deleted, maybe made again, since these were opened: try the name once more.
            item.unlock(self._io)
            close_pair(item.folder, item.log, self._io)
            item.folder = item.log = -1
            if not cached:
                raise missing_error(sid)  # deleted while we waited for the lock
        raise AssertionError("unreachable")

    def _stored(self, item: Append, next_seq: int, skip: int) -> list[dict[str, Any]]:
        """The stored entries a write's first ``skip`` entries overlap, from the log's end."""
        first = item.write.first_seq
        log = item.log
        stored = entries_back(io_reader(self._io, log), item.size, first, first + skip)
        if stored is None:  # not to be told from the end: read it whole (damage raises there)
            whole = scan_whole(self._store, log, item.write.state_id).entries
            stored = [e for e in whole if first <= e["seq"] < first + skip]  # (trimmed: from its base)
        return stored

    def _done(self, item: Append, root: int | None) -> None:
        """Remember a finished write's log (the tail cache) and its snapshot's copy."""
        sid = item.write.state_id
        if isinstance(item.error, WouldBlock):
            return  # nothing was done: what this process knows of the log still holds
        if item.error is not None:
            self._tails.pop(sid, None)  # re-read from disk next time
            return
        try:
            tail = Tail.of(
                item.log,
                item.next_seq,
                item.snapshot_at,
                framed=item.framed,
                expiry=(item.expires_at,),
                incarnation=item.incarnation,
                sealed=item.sealed,
                io=self._io,
            )
        except OSError:
            self._tails.pop(sid, None)  # the write is durable; its log is read again next time
            return
        self._tails[sid] = item.mark = tail  # the log kept open is the one it describes
        if item.snapshot is not None and root is not None:  # a kept snapshot leaves its copy current
            self._copies.written(root, item.folder, sid, tail, item.snapshot)

    def _put_back(self, item: Append) -> None:
        """Unlock the State; keep its descriptors open for the next write if all went well."""
        if item.folder < 0:
            return
        item.unlock(self._io)
        if item.error is None or isinstance(item.error, WouldBlock):
            self._handles.give(item.write.state_id, item.folder, item.log, item.mark)
        else:
            close_pair(item.folder, item.log, self._io)
        item.folder = item.log = -1

    def _fsync_log(self, item: Append) -> None:
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

    def _undo(self, item: Append) -> None:
        """Take back what a failed write did, so the State is as it was before it."""
        if item.appended:
            self._undo_append(item)

    def _undo_append(self, item: Append) -> None:
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
                self._doubts[item.write.state_id] = Doubt(Tail.of(item.log, 0, None), item.size)
            except OSError:
                pass  # the next write then reads the log again and fsyncs it

    def _settle_doubt(self, log: int, sid: str) -> None:
        """Finish an undo of this process that failed: cut the log back, unless someone
        wrote to the State since (then it is theirs: it is read again and fsync'd)."""
        doubt = self._doubts.get(sid)
        if doubt is None:
            return
        st = os.fstat(log)
        left = doubt.left
        unchanged = st.st_size == left.size and st.st_mtime_ns == left.mtime_ns  # see _fsync_log
        if left.holds_in(log, st) and unchanged:
            self._io.truncate(log, doubt.cut_to)
            self._io.fsync(log)
        del self._doubts[sid]

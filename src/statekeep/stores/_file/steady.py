"""A steady-state append: one write to a State this process appended to last, with nothing
between (no other writer, no delete, no rekey), in six system calls through the I/O seam:

    flock(LOCK_EX)   the State's folder, kept open (.handles)
    stat             the log, by its full path: still named (the store's folder, the State's
                     folder and the log are the ones held) and its size as this process left
                     it (no other process appended since): so nothing is read back
    open             the State's lease row (.leases): absent on a State never leased
    write            the entries and the closing record, framed from the tail cache
    fdatasync        the log
    flock(LOCK_UN)

Anything else -- another process appended, the State was deleted or made again, a re-sent
write, expiry, a failed undo or fsync waiting to be settled -- goes the general way
(:mod:`.append`), which knows every case; this path only declines (:data:`MISS`) before it
has changed anything. A lease row that exists costs three calls more (fstat, read, close).
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable
from datetime import datetime
from typing import Final

from ..._core.labels import encoded_expiry
from ..._core.leases import check_fence
from ..._core.writes import PreparedWrite
from ..._runtime.batching import WouldBlock
from ..._store.expect import check_preconditions, sealed_after
from .._fsio import OsIO
from .budget import limit_hit
from .copies import Copies
from .folder import StoreFolder
from .handles import SpaceHandles, close_pair
from .leases import LeaseRows
from .locking import hold, release
from .logformat import closing_record, frame
from .recovery import CHECK_BYTES, Tail
from .staged import Append, Doubt
from .trust import LOG

MISS: Final = object()  # this path does not apply: take the general one
# (It does not take a gap, which raises there, a re-sent write, which compares what it
# overlaps, or a write of nothing, which may only need the log fsync'd.)


class SteadyAppender:
    """The steady-state way of :class:`.append.Appender`, its subclass, which sets the
    attributes below and gives the general way's steps this path shares."""

    _store: StoreFolder
    _leases: LeaseRows
    _now: Callable[[], datetime]  # the store's clock, which judges expiry
    _io: OsIO
    _tails: dict[str, Tail]  # the tail cache, shared with the store
    _handles: SpaceHandles
    _copies: Copies
    _doubts: dict[str, Doubt]  # undos that failed, to settle the general way
    _suspects: dict[str, tuple[int, int, int]]  # logs whose fsync failed, likewise

    # The general way's steps that this path shares, given by Appender.
    def _done(self, item: Append, root: int | None) -> None:
        raise NotImplementedError

    def _put_back(self, item: Append) -> None:
        raise NotImplementedError

    def _fsync_log(self, item: Append) -> None:
        raise NotImplementedError

    def _undo(self, item: Append) -> None:
        raise NotImplementedError

    def _steady(self, write: PreparedWrite, *, wait: bool) -> object:
        """Append ``write`` if it is a steady-state append: its error (None: durable), or
        :data:`MISS` having changed nothing. WouldBlock if ``wait`` is False and another
        process holds the State's lock."""
        sid = write.state_id
        tail = self._tails.get(sid)
        if (
            tail is None
            or not tail.framed
            or not tail.expiry_known
            or tail.sealed is None
            or (write.first_seq != tail.next_seq if write.lines else write.snapshot is None)
            or sid in self._doubts
            or sid in self._suspects
            or not self._store.settled
        ):
            return MISS
        if tail.expires_at is not None and tail.expires_at <= self._now():
            return MISS  # expired: the general way says so, from the log
        handles = self._handles
        pair = handles.take(sid)
        if pair is None:
            return MISS
        folder, log, mark = pair
        if mark is not tail:  # a log opened since, or left by another path: check it the long way
            handles.give(sid, folder, log, mark)
            return MISS
        io = self._io
        try:
            locked = hold(folder, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB, io)
        except BaseException:
            close_pair(folder, log, io)
            raise
        if not locked:
            handles.give(sid, folder, log, mark)
            raise WouldBlock  # another process is writing the State: wait in a worker
        item = Append(write, folder, log, locked=True, size=tail.size, durable=tail.size, mark=tail)
        try:
            outcome = self._steady_locked(item, tail)
        except BaseException as exc:
            limit_hit(exc)
            outcome = exc
        if outcome is MISS or item.error is None:
            release(folder, io)  # (a refused write changed nothing: all it knew still holds)
            handles.give(sid, folder, log, item.mark)
        else:  # a failed append, undone: forget the tail and close the pair, as the general way does
            self._done(item, None)
            self._put_back(item)
        return outcome

    def _steady_locked(self, item: Append, tail: Tail) -> object:
        """The append, with the State's lock held: MISS, or the write's error (None: done)."""
        write, store, io = item.write, self._store, self._io
        sid = write.state_id
        try:
            st = io.stat(store.where(sid, LOG))  # by its full path: no descriptor to open
        except OSError:
            return MISS  # deleted (or worse): the general way says which
        if st.st_size != tail.size or st.st_ino != tail.ino or st.st_dev != tail.dev:
            return MISS  # made again, rekeyed, or appended to by another process
        held = self._leases.read_path(sid, self._leases.where(sid))
        if held is not None or write.lease is not None:
            check_fence(sid, held, write.lease, self._now())
        if write.bound or write.expect_next is not None or tail.sealed:  # else none can refuse it
            check_preconditions(write, tail.incarnation, tail.next_seq, tail.sealed is True)
        lines, snapshot = write.lines, write.snapshot
        entries = b"".join([frame(line) for line in lines]) if lines else b""
        next_seq = tail.next_seq + len(lines)
        new = entries + closing_record(next_seq, entries, snapshot, tail.snapshot_at, tail.incarnation)
        item.new, item.appended = new, True
        try:
            io.write_all(item.log, new)
            self._fsync_log(item)
        except BaseException as exc:
            if isinstance(exc, OSError):
                store.name_paths(exc, sid)
            item.error = exc
            self._undo(item)
            return exc
        item.mark = after = Tail(
            tail.dev,
            tail.ino,
            tail.size + len(new),
            0,  # mtime_ns: not known without an fstat; only a failed undo's (fresh) tail uses it
            next_seq,
            new[-CHECK_BYTES:] if len(new) >= CHECK_BYTES else (tail.check + new)[-CHECK_BYTES:],
            tail.snapshot_at if snapshot is None else tail.size + len(entries),
            True,
            True,
            tail.expires_at if snapshot is None else encoded_expiry(snapshot),
            tail.incarnation,
            sealed_after(tail.sealed, snapshot, tail.snapshot_at, lines),
        )
        self._tails[sid] = after
        if snapshot is not None:
            self._copies.written(None, item.folder, sid, after, snapshot)
        return None

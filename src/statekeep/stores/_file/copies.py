"""``snapshot.json``: a copy of a State's current snapshot, kept for ``list()``.

The log is the single source of truth; the copy only saves a listing from reading logs.
It records the log length it matches (``sk.log``), is written only after the log is
durable up to there, and is replaced by rename, never fsync'd. A reader compares that
length with the log's size: equal, the copy is current; larger, the log has more writes,
and what they changed is read from the log past that length; smaller, acknowledged bytes
of the log are gone (CorruptStateError). A missing or damaged copy (a power cut can leave
one empty) is read from the log's last write instead.

Writers refresh it lazily (:class:`Copies`): at most every ``INTERVAL`` seconds per State
while writing, then once writes stop, and when the store is closed. Each refresh also sets
the namespace folder's modification time, the store's change stamp (a create or a delete,
a rename in that folder, moves it by itself): a poller that finds it as it was knows no
listing row changed, without listing (:meth:`.folder.StoreFolder.stamp`). Off the durable
path, and not on an append whose copy waits: that write's refresh touches it, later.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
import time
import weakref
from typing import Any

import orjson

from ..._core.records import decode_snapshot
from .._fsio import write_private
from .folder import StoreFolder, quietly, still_named
from .locking import hold, release
from .logtail import decode_copy, encode_copy, last_write, reader, snapshot_record
from .recovery import Tail, check_copy, scan_part
from .trust import LOG, SNAPSHOT, SNAPSHOT_TMP, check_stat, euid

INTERVAL = 0.5  # seconds: the longest a live writer leaves a copy behind its log

_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC


def write_copy(
    store: StoreFolder, folder: int, sid: str, log_size: int, next_seq: int, snapshot: bytes | None
) -> None:
    """Replace the State's copy (the caller holds its lock): not fsync'd, see above."""
    fd = store.open_in(folder, sid, SNAPSHOT_TMP, _TMP_FLAGS)
    try:
        try:
            write_private(store.io, fd, encode_copy(log_size, next_seq, snapshot), sync=False)
        finally:
            store.io.close(fd)
        store.io.rename(SNAPSHOT_TMP, SNAPSHOT, dir_fd=folder)
    except BaseException:
        quietly(lambda: store.io.unlink(SNAPSHOT_TMP, dir_fd=folder))
        raise


class Copies:
    """The copies one store's writes left behind their logs, refreshed lazily."""

    def __init__(self, store: StoreFolder) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._due: dict[str, tuple[Tail, bytes | None]] = {}  # sid -> the log written, its snapshot
        self._last: dict[str, float] = {}  # sid -> when its copy was last written
        self.timer: asyncio.TimerHandle | None = None  # the refresh due once writes pause
        _all.add(self)

    @property
    def behind(self) -> bool:
        """Are copies waiting for a refresh?"""
        return bool(self._due)

    def written(self, root: int | None, folder: int, sid: str, tail: Tail, snapshot: bytes | None) -> None:
        """After a write made the log durable up to ``tail.size`` (the caller holds the
        State's lock): refresh the copy now if it was not refreshed lately, else later.
        ``root``: the namespace folder, whose modification time a refresh moves (None:
        opened by its path, if a refresh is due)."""
        now = time.monotonic()
        with self._lock:
            fresh = now - self._last.get(sid, -INTERVAL) < INTERVAL
            if fresh:
                self._due[sid] = (tail, snapshot)
                return
            self._due.pop(sid, None)
            self._last[sid] = now
        try:
            write_copy(self._store, folder, sid, tail.size, tail.next_seq, snapshot)
        except (OSError, ValueError):
            # Only a copy: the write is durable in the log, and readers fall back to it.
            with self._lock:
                self._due.setdefault(sid, (tail, snapshot))  # try again later
            return
        quietly(lambda: self._store.touch(root))  # the change stamp

    def forget(self, sid: str) -> None:
        with self._lock:
            self._due.pop(sid, None)
            self._last.pop(sid, None)

    def flush(self) -> None:
        """Write every copy that is due (best effort: a State being written or deleted by
        another process right now is skipped; its writer refreshes it)."""
        with self._lock:
            due, self._due = self._due, {}
        if not due:
            return
        store = self._store
        try:
            root = store.open_root(create=False)
        except (OSError, ValueError):
            return  # the next write or listing reports what is wrong with the folder
        if root is None:
            return
        try:
            for sid, (tail, snapshot) in due.items():
                try:
                    self._refresh(root, sid, tail, snapshot)
                except (OSError, ValueError):
                    pass  # as above
            quietly(lambda: store.io.touch(root))  # the change stamp: once for them all
        finally:
            os.close(root)

    def _refresh(self, root: int, sid: str, tail: Tail, snapshot: bytes | None) -> None:
        folder = self._store.open_state(root, sid)
        if folder is None:
            return
        try:
            if not hold(folder, fcntl.LOCK_EX | fcntl.LOCK_NB):
                return  # being written (its writer refreshes it) or deleted
            try:
                log = self._store.open_in(folder, sid, LOG, os.O_RDONLY)
                try:
                    # Only into the log it describes: the State may be a new one since.
                    current = still_named(root, sid, folder) and tail.holds_in(log, os.fstat(log))
                finally:
                    os.close(log)
                if current:
                    write_copy(self._store, folder, sid, tail.size, tail.next_seq, snapshot)
                    with self._lock:
                        self._last[sid] = time.monotonic()
            finally:
                release(folder)
        finally:
            os.close(folder)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._due = {}
        self.timer = None  # on the parent's loop, which the child does not run


_all: weakref.WeakSet[Copies] = weakref.WeakSet()


def _forget_inherited() -> None:
    for copies in list(_all):  # a child refreshes nothing its parent owes
        copies._forget()


os.register_at_fork(after_in_child=_forget_inherited)


_COPY = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def listed_snapshot(store: StoreFolder, root: int, sid: str) -> tuple[bool, dict[str, Any] | None]:
    """(True, the State's snapshot) from its copy when the copy is current (the common case
    of a listing, in six system calls and no folder opened); (False, None) when the copy
    cannot say (missing, damaged, behind its log): then ask :func:`current_snapshot`.

    ``sid`` was found by ``scandir`` in the store's folder (ours, not writable by others),
    not as a link: so ``{sid}/...`` names the State's own files.
    """
    me, io = euid(), store.io
    st = io.stat(sid, dir_fd=root)
    if st.st_uid != me or st.st_mode & 0o022:
        check_stat(st, store.where(sid))
    try:
        fd = io.open(f"{sid}/{SNAPSHOT}", _COPY, dir_fd=root)
    except FileNotFoundError:
        return False, None
    try:
        st = io.fstat(fd)
        if st.st_uid != me or st.st_mode & 0o022:
            check_stat(st, store.where(sid, SNAPSHOT))
        raw = io.read(fd, st.st_size + 1)
    finally:
        io.close(fd)
    copy = decode_copy(raw)
    if copy is None or copy.log_size is None:
        return False, None
    if io.stat(f"{sid}/{LOG}", dir_fd=root).st_size != copy.log_size:
        return False, None
    return True, copy.snapshot


def current_snapshot(store: StoreFolder, folder: int, sid: str) -> dict[str, Any] | None:
    """The State's snapshot for a listing: the copy when it is current, else the log's."""
    raw = store.read_file(folder, sid, SNAPSHOT)
    copy = decode_copy(raw) if raw else None
    if copy is not None and copy.log_size is not None:
        size = os.stat(LOG, dir_fd=folder, follow_symlinks=False).st_size
        if size == copy.log_size:
            return copy.snapshot
        check_copy(store, sid, copy, size)
    log = store.open_in(folder, sid, LOG, os.O_RDONLY)
    try:
        size = os.fstat(log).st_size
        read_at = reader(log)

        if copy is not None and copy.log_size is not None:
            # The log went on after the copy: its later writes say what changed.
            data = read_at(copy.log_size, size - copy.log_size)
            scan = scan_part(store, log, sid, data, copy.next_seq, copy.log_size)
            if scan.snapshot is not None or (scan.framed and scan.snapshot_at is None):
                return scan.snapshot
            return copy.snapshot
        last = last_write(read_at, size)
        if last is None:  # a log of format 1 only: its snapshot.json is the snapshot
            return decode_snapshot(raw, store.where(sid, SNAPSHOT))
        if last.end < size:  # an unfinished write may follow, nothing else: damage raises
            scan_part(store, log, sid, read_at(last.end, size - last.end), last.next_seq, last.end)
        encoded = last.snapshot
        if encoded is None and last.snapshot_at is not None:
            encoded = snapshot_record(read_at, last.snapshot_at, last.end)
        return None if encoded is None else _snapshot(encoded)
    finally:
        os.close(log)


def _snapshot(encoded: bytes) -> dict[str, Any] | None:
    value = orjson.loads(encoded)
    return value if isinstance(value, dict) else None

"""Trimming a FileStore State (``store.trim``): its log rewritten from the base record on.

The log is append-only, so a trim writes a new one, as a rekey's reseal does
(:mod:`.reseal`): the base line, the entries from seq ``before`` on (as stored), and one
closing record with the current snapshot and the State's incarnation, to ``log.jsonl.tmp``
(0600, fsync'd); then ``snapshot.json`` is removed and the folder fsync'd (a copy describes
the old log's bytes, never the new one's); then the new log is renamed over the old and the
folder fsync'd again. A SIGKILL or power cut at any point leaves the old log or the new one,
each whole: the State reads as before the trim or as after it. The removed entries' bytes
leave the file system with the old log.

All of it under the State's flock, as appends take it. Writers of other processes that
kept the old log open see it is no longer named ``log.jsonl`` once they hold the lock
(:mod:`.append`), and readers that read the copy of the old log and the new log retry.
"""

from __future__ import annotations

import os

import orjson

from ..._core.errors import CorruptStateError
from ..._core.records import decode_snapshot
from ..._core.writes import missing_error
from .._fsio import write_private
from .copies import write_copy
from .folder import StoreFolder, quietly, still_named
from .locking import lock, unlock
from .logformat import closing_record, frame, scan_log
from .logtail import decode_copy
from .recovery import Tail, check_copy
from .trust import LOG, LOG_TMP, SNAPSHOT


def trim_log(store: StoreFolder, tails: dict[str, Tail], sid: str, before: int, base: bytes) -> None:
    """Rewrite the log of ``sid`` to start with ``base`` at seq ``before - 1`` (see the module)."""
    root = store.open_root(create=False, writing=True)
    if root is None:
        raise missing_error(sid)
    try:
        folder = store.open_state(root, sid)
        if folder is None:
            raise missing_error(sid)
        lock(folder)
        try:
            if not still_named(root, sid, folder):
                raise missing_error(sid)  # deleted meanwhile
            _trim(store, tails, folder, sid, before, base)
        finally:
            unlock(folder)  # (and closes it)
    finally:
        os.close(root)


def _trim(
    store: StoreFolder, tails: dict[str, Tail], folder: int, sid: str, before: int, base: bytes
) -> None:
    io = store.io
    raw_copy = store.read_file(folder, sid, SNAPSHOT)
    log = store.read_file(folder, sid, LOG) or b""
    scan = scan_log(log, name=store.where(sid, LOG))  # damage raises: nothing is rewritten
    check_copy(store, sid, decode_copy(raw_copy) if raw_copy else None, scan.end)
    if scan.framed and scan.snapshot_at is not None and scan.snapshot is None:
        raise CorruptStateError(
            f"{store.where(sid, LOG)}: no snapshot record at byte {scan.snapshot_at}, where its last "
            "write keeps it; nothing was rewritten. Move the State's folder aside"
        )
    first = scan.entries[0]["seq"] if scan.entries else 0
    if not first < before <= scan.next_seq:
        raise ValueError(f"State {sid!r} holds seqs {first} to {scan.next_seq - 1}; nothing was trimmed")
    current = scan.snapshot if scan.framed else decode_snapshot(raw_copy, store.where(sid, SNAPSHOT))
    kept = scan.entries[before - first :]
    lines = frame(base) + b"".join([frame(orjson.dumps(entry) + b"\n") for entry in kept])
    encoded = None if current is None else orjson.dumps(current)
    data = lines + closing_record(scan.next_seq, lines, encoded, None, scan.incarnation, trimmed=True)
    try:
        fd = store.open_in(folder, sid, LOG_TMP, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            write_private(io, fd, data)
        finally:
            os.close(fd)
        tails.pop(sid, None)
        try:
            io.unlink(SNAPSHOT, dir_fd=folder)
        except FileNotFoundError:
            pass
        io.fsync(folder)
        io.rename(LOG_TMP, LOG, dir_fd=folder)  # the atomic point
    except BaseException:
        quietly(lambda: io.unlink(LOG_TMP, dir_fd=folder))
        raise
    io.fsync(folder)
    try:
        write_copy(store, folder, sid, len(data), scan.next_seq, encoded)
    except (OSError, ValueError):
        pass  # only a copy: readers fall back to the log

"""Replacing stored records of a FileStore State in place, for ``statekeep rekey``.

The log is append-only, so a reseal writes a new one: every entry (the replaced ones in
their new form) and one closing record with the current snapshot (and the State's
incarnation), in format 2 or 3 as before, to
``log.jsonl.tmp`` (0600, fsync'd); then ``snapshot.json`` is removed and the folder
fsync'd (a copy describes the old log's bytes, never the new one's); then the new log is
renamed over the old and the folder fsync'd again. A SIGKILL or power cut at any point
leaves the old log or the new one, each whole (a missing copy is read from the log). Older
snapshot records of the old log are not carried over: only the current one is ever read,
and an old key's records must not outlive a rekey.

All of it under the State's flock, as appends take it. Writers of other processes that
kept the old log open see it is no longer named ``log.jsonl`` once they hold the lock
(:mod:`.append`), and readers that read the copy of the old log and the new log retry.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from ..._core.errors import CorruptStateError
from ..._core.records import decode_snapshot
from .._fsio import write_private
from .copies import write_copy
from .folder import StoreFolder, quietly, still_named
from .locking import lock, unlock
from .logformat import closing_record, frame, scan_log
from .logtail import decode_copy
from .recovery import Tail, check_copy
from .trust import LOG, LOG_TMP, SNAPSHOT

#: A record to replace: (the stored one as read, what replaces it), each encoded JSON.
Swap = tuple[bytes, bytes]


def reseal(
    store: StoreFolder, tails: dict[str, Tail], sid: str, entries: dict[int, Swap], snapshot: Swap | None
) -> int:
    """Replace the records of ``sid`` that still equal their ``old`` (as JSON); return how
    many were replaced (none: the log is left as it is)."""
    root = store.open_root(create=False, writing=True)
    if root is None:
        return 0
    try:
        folder = store.open_state(root, sid)
        if folder is None:
            return 0
        lock(folder)
        try:
            if not still_named(root, sid, folder):
                return 0  # deleted meanwhile
            return _reseal(store, tails, folder, sid, entries, snapshot)
        finally:
            unlock(folder)
    finally:
        os.close(root)


def _reseal(
    store: StoreFolder,
    tails: dict[str, Tail],
    folder: int,
    sid: str,
    entries: dict[int, Swap],
    snapshot: Swap | None,
) -> int:
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
    current = scan.snapshot if scan.framed else decode_snapshot(raw_copy, store.where(sid, SNAPSHOT))
    stored: list[Any] = list(scan.entries)
    replaced = 0
    first = stored[0]["seq"] if stored else 0  # above 0 for a trimmed log
    for seq, (old, new) in entries.items():
        if 0 <= seq - first < len(stored) and stored[seq - first] == orjson.loads(old):
            stored[seq - first] = orjson.loads(new)
            replaced += 1
    encoded = None if current is None else orjson.dumps(current)
    if snapshot is not None and current is not None and current == orjson.loads(snapshot[0]):
        encoded = snapshot[1]
        replaced += 1
    if not replaced:
        return 0
    lines = b"".join([frame(orjson.dumps(entry) + b"\n") for entry in stored])
    data = lines + closing_record(scan.next_seq, lines, encoded, None, scan.incarnation, trimmed=first > 0)
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
    return replaced

"""Rewriting a FileStore State's log whole, for a rekey's reseal and for a trim.

The log is append-only, so a rewrite writes a new one: its entry lines and one closing record
with the current snapshot (and the State's incarnation), to ``log.jsonl.tmp`` (0600,
fsync'd); then ``snapshot.json`` is removed and the folder fsync'd (a copy describes the old
log's bytes, never the new one's); then the new log is renamed over the old and the folder
fsync'd again. A SIGKILL or power cut at any point leaves the old log or the new one, each
whole: the State reads as before or as after. The caller holds the State's flock.
"""

from __future__ import annotations

import os
from typing import Any

from ..._core.errors import CorruptStateError
from ..._core.records import decode_snapshot
from .._fsio import write_private
from .copies import write_copy
from .folder import StoreFolder, quietly
from .logformat import LogScan, closing_record, scan_log
from .logtail import decode_copy
from .recovery import Tail, check_copy
from .trust import LOG, LOG_TMP, SNAPSHOT


def read_whole(store: StoreFolder, folder: int, sid: str) -> tuple[LogScan, dict[str, Any] | None]:
    """The State's log scanned whole, and its current snapshot; damage raises, nothing is
    rewritten then."""
    raw_copy = store.read_file(folder, sid, SNAPSHOT)
    log = store.read_file(folder, sid, LOG) or b""
    scan = scan_log(log, name=store.where(sid, LOG))
    check_copy(store, sid, decode_copy(raw_copy) if raw_copy else None, scan.end)
    if scan.framed and scan.snapshot_at is not None and scan.snapshot is None:
        raise CorruptStateError(
            f"{store.where(sid, LOG)}: no snapshot record at byte {scan.snapshot_at}, where its last "
            "write keeps it; nothing was rewritten. Move the State's folder aside"
        )
    current = scan.snapshot if scan.framed else decode_snapshot(raw_copy, store.where(sid, SNAPSHOT))
    return scan, current


def replace_log(
    store: StoreFolder,
    tails: dict[str, Tail],
    folder: int,
    sid: str,
    scan: LogScan,
    lines: bytes,
    snapshot: bytes | None,
    *,
    trimmed: bool,
) -> None:
    """Put a new log of the framed entry ``lines`` and ``snapshot`` (encoded) in place of the
    one ``scan`` read (see the module); ``trimmed``: the lines start with a trim's base."""
    io = store.io
    data = lines + closing_record(scan.next_seq, lines, snapshot, None, scan.incarnation, trimmed=trimmed)
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
        write_copy(store, folder, sid, len(data), scan.next_seq, snapshot)
    except (OSError, ValueError):
        pass  # only a copy: readers fall back to the log

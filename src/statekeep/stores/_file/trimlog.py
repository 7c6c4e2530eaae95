"""Trimming a FileStore State (``store.trim``): its log rewritten from the base record on.

The log is append-only, so a trim writes a new one, as a rekey's reseal does
(:mod:`.rewrite`): the base line, the entries from seq ``before`` on (as stored), and one
closing record with the current snapshot and the State's incarnation. A SIGKILL or power cut
at any point leaves the old log or the new one, each whole: the State reads as before the
trim or as after it. The removed entries' bytes leave the file system with the old log.

All of it under the State's flock, as appends take it; the log must still start at the seq
the trim read (``first``), else another process trimmed it meanwhile (its trim may have
released a blob this base refers to: gc reads the logs under no lock of ours) and nothing is
written (StateConflictError). Writers of other processes that
kept the old log open see it is no longer named ``log.jsonl`` once they hold the lock
(:mod:`.append`), and readers that read the copy of the old log and the new log retry.
"""

from __future__ import annotations

import os

import orjson

from ..._core.writes import missing_error, trimmed_meanwhile
from .folder import StoreFolder, still_named
from .locking import lock, unlock
from .logformat import frame
from .recovery import Tail
from .rewrite import read_whole, replace_log


def trim_log(
    store: StoreFolder, tails: dict[str, Tail], sid: str, before: int, base: bytes, first: int
) -> None:
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
            _trim(store, tails, folder, sid, before, base, first)
        finally:
            unlock(folder)  # (and closes it)
    finally:
        os.close(root)


def _trim(
    store: StoreFolder,
    tails: dict[str, Tail],
    folder: int,
    sid: str,
    before: int,
    base: bytes,
    read_first: int,
) -> None:
    scan, current = read_whole(store, folder, sid)
    first = scan.entries[0]["seq"] if scan.entries else 0
    if first != read_first:
        raise trimmed_meanwhile(sid, read_first, first)
    if not first < before <= scan.next_seq:
        raise ValueError(f"State {sid!r} holds seqs {first} to {scan.next_seq - 1}; nothing was trimmed")
    kept = scan.entries[before - first :]
    lines = frame(base) + b"".join([frame(orjson.dumps(entry) + b"\n") for entry in kept])
    encoded = None if current is None else orjson.dumps(current)
    replace_log(store, tails, folder, sid, scan, lines, encoded, trimmed=True)

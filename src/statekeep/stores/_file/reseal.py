"""Replacing stored records of a FileStore State in place, for ``statekeep rekey``.

The log is append-only, so a reseal writes a new one (:mod:`.rewrite`): every entry (the
replaced ones in their new form) and one closing record with the current snapshot (and the
State's incarnation). A SIGKILL or power cut at any point leaves the old log or the new one,
each whole (a missing copy is read from the log). Older snapshot records of the old log are not carried over: only the current one is ever read,
and an old key's records must not outlive a rekey.

All of it under the State's flock, as appends take it. Writers of other processes that
kept the old log open see it is no longer named ``log.jsonl`` once they hold the lock
(:mod:`.append`), and readers that read the copy of the old log and the new log retry.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from .folder import StoreFolder, still_named
from .locking import lock, unlock
from .logformat import frame
from .recovery import Tail
from .rewrite import read_whole, replace_log

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
    scan, current = read_whole(store, folder, sid)
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
    replace_log(store, tails, folder, sid, scan, lines, encoded, trimmed=first > 0)
    return replaced

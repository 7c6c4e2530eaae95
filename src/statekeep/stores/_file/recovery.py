"""A State's log as a FileStore finds it before an append: the tail cache (:class:`Tail`),
reading only what another process appended since, and cutting a torn last line left by a
crashed writer, unless the snapshot covers it (then it is damage: CorruptStateError)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..._errors import CorruptStateError
from ..._logframe import LogScan, scan_log
from ..._records import check_covered, decode_snapshot
from .folder import StoreFolder
from .trust import LOG, SNAPSHOT

_CHECK_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Tail:
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
    def of(cls, log: int, next_seq: int) -> Tail:
        st = os.fstat(log)
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, next_seq, _last_bytes(log, st.st_size))

    def holds_in(self, log: int, st: os.stat_result) -> bool:
        """Does ``log`` still start with what this describes (maybe with more after it)?"""
        return (
            (self.dev, self.ino) == (st.st_dev, st.st_ino)
            and st.st_size >= self.size
            and _last_bytes(log, self.size) == self.check
        )


def _last_bytes(log: int, size: int) -> bytes:
    n = min(size, _CHECK_BYTES)
    return os.pread(log, n, size - n)


def read_tail(
    store: StoreFolder, known: Tail | None, folder: int, log: int, sid: str
) -> tuple[int, int, bool]:
    """(size, next seq, durable) of the log, from ``known`` (the cache) when the file did
    not change.

    ``durable``: the log is known durable up to its end. A torn tail left by a crashed
    writer is cut here, before anything is appended, unless the snapshot covers it.
    """
    st = os.fstat(log)
    if known is not None and not known.holds_in(log, st):
        known = None  # replaced or cut by someone else: scan it whole
    if known is not None and st.st_size == known.size:
        return known.size, known.next_seq, True
    if known is not None:
        # Another process appended: read only what it added.
        data = os.pread(log, st.st_size - known.size, known.size)
        scan = scan_log(
            data, start_seq=known.next_seq, name=store.where(sid, LOG), first_line=known.next_seq + 1
        )
        end = known.size + scan.end
    else:
        scan = scan_whole(store, log, sid)
        end = scan.end
    if end < st.st_size:
        # A crash never leaves a torn line that the snapshot covers: damage does, and
        # cutting it would drop acknowledged entries without a word.
        try:
            snapshot = read_snapshot(store, folder, sid)
        except CorruptStateError:
            snapshot = None  # damaged itself: this write may replace it
        check_snapshot_covered(store, sid, snapshot, scan.next_seq, end)
        store.io.truncate(log, end)
        store.io.fsync(log)
        return end, scan.next_seq, True  # that fsync made the rest durable too
    return end, scan.next_seq, False


def scan_whole(store: StoreFolder, log: int, sid: str) -> LogScan:
    """Read the open log from its start."""
    os.lseek(log, 0, os.SEEK_SET)
    return scan_log(store.io.read_all(log), name=store.where(sid, LOG))


def read_snapshot(store: StoreFolder, folder: int, sid: str) -> dict[str, Any] | None:
    """The State's snapshot, decoded; None if it has none."""
    return decode_snapshot(store.read_file(folder, sid, SNAPSHOT), store.where(sid, SNAPSHOT))


def check_snapshot_covered(
    store: StoreFolder, sid: str, snapshot: dict[str, Any] | None, next_seq: int, torn_at: int | None
) -> None:
    """CorruptStateError if the snapshot covers entries the log lacks (see
    :func:`check_covered`). ``torn_at``: where the log's unreadable last line starts."""
    cut = "" if torn_at is None else f" (its last line, from byte {torn_at}, is cut short)"
    check_covered(
        snapshot,
        next_seq,
        snapshot_name=f"State {sid!r} is damaged: {store.where(sid, SNAPSHOT)}",
        history_name=f"{store.where(sid, LOG)}{cut}",
        advice="restore the log from a backup, or move the State's folder aside",
    )

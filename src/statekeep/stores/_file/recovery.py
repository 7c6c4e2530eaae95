"""A State's log as a FileStore finds it before an append: the tail cache (:class:`Tail`),
reading only what another process appended since, or, cold, only the log's last write
(:func:`~statekeep.stores._file.logformat.last_write`), and cutting an unfinished write left by a
crashed writer -- unless ``snapshot.json`` says it was acknowledged (then it is damage:
CorruptStateError)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import datetime

from ..._core.errors import CorruptStateError
from ..._protect.sealing import SEALED
from ..._store.expect import sealed_text
from .._fsio import OsIO
from .folder import StoreFolder
from .logformat import LogScan, scan_log
from .logtail import ReadAt, SnapshotCopy, decode_copy, entries_back, last_write, reader, snapshot_record
from .trust import LOG, SNAPSHOT

CHECK_BYTES = 64  # how much of a log's end a Tail keeps, to tell it from another
_OS = OsIO()


@dataclass(slots=True)  # not frozen: a frozen one costs a microsecond to make, on every write
class Tail:
    """What this process last knew of a log: where its last complete write ends, the seq
    that comes next, and where the current snapshot record is.

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
    snapshot_at: int | None = None  # the offset of the current snapshot record, if any
    framed: bool = True  # the log holds a format 2 write (else the snapshot is in snapshot.json)
    expiry_known: bool = False  # the current snapshot's expires_at is known: ``expires_at``
    expires_at: datetime | None = None
    incarnation: str | None = None  # the State's, as its closing records carry it
    sealed: bool | None = None  # the State is sealed (see _expect); None: not known

    @classmethod
    def of(
        cls,
        log: int,
        next_seq: int,
        snapshot_at: int | None,
        *,
        framed: bool = True,
        expiry: tuple[datetime | None] | None = None,
        incarnation: str | None = None,
        sealed: bool | None = None,
        io: OsIO = _OS,
    ) -> Tail:
        """``expiry``: ``(expires_at,)`` of the current snapshot, if known."""
        st = io.fstat(log)
        check = _last_bytes(io, log, st.st_size)
        known = expiry is not None
        when = None if expiry is None else expiry[0]
        return cls(
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            next_seq,
            check,
            snapshot_at,
            framed,
            known,
            when,
            incarnation,
            sealed,
        )

    def holds_in(self, log: int, st: os.stat_result, io: OsIO = _OS) -> bool:
        """Does ``log`` still start with what this describes (maybe with more after it)?"""
        return (
            (self.dev, self.ino) == (st.st_dev, st.st_ino)
            and st.st_size >= self.size
            and _last_bytes(io, log, self.size) == self.check
        )


def _last_bytes(io: OsIO, log: int, size: int) -> bytes:
    n = min(size, CHECK_BYTES)
    return io.pread(log, n, size - n)


def io_reader(io: OsIO, log: int) -> ReadAt:
    """The :data:`ReadAt` of an open log, through the I/O seam."""
    return lambda at, n: io.pread(log, n, at)


@dataclass(frozen=True, slots=True)
class Found:
    """The log before an append: ``durable`` says it is known durable up to ``size``."""

    size: int
    next_seq: int
    durable: bool
    snapshot_at: int | None
    framed: bool
    expiry: tuple[datetime | None] | None = None  # (expires_at,) of the current snapshot, if known
    incarnation: str | None = None  # the State's (its closing records carry it)
    sealed: bool | None = None  # the State is sealed (see _expect); None: not known


def read_tail(store: StoreFolder, known: Tail | None, folder: int, log: int, sid: str) -> Found:
    """The log's state before an append, from ``known`` (the cache) when the file did not
    change, else from what was appended since, else from its last write. An unfinished
    write at its end is cut here, before anything is appended."""
    io = store.io
    st = io.fstat(log)
    if known is not None and not known.holds_in(log, st, io):
        known = None  # replaced or cut by someone else: read it again
    if known is not None and st.st_size == known.size:
        expiry = (known.expires_at,) if known.expiry_known else None
        return Found(
            known.size,
            known.next_seq,
            True,
            known.snapshot_at,
            known.framed,
            expiry,
            known.incarnation,
            known.sealed,
        )
    if known is not None:
        # Another process appended: read only what it added.
        data = io.pread(log, st.st_size - known.size, known.size)
        scan = scan_part(store, log, sid, data, known.next_seq, known.size)
        at = known.snapshot_at if not scan.framed else scan.snapshot_at
        end = known.size + scan.end
        found = _settle(store, folder, log, sid, st.st_size, end, scan.next_seq, at, True)
        return replace(found, incarnation=scan.incarnation if scan.framed else known.incarnation)
    last = last_write(io_reader(io, log), st.st_size)
    if last is None:  # format 1 lines only (or no complete write): read it whole
        scan = scan_whole(store, log, sid)
        found = _settle(
            store,
            folder,
            log,
            sid,
            st.st_size,
            scan.end,
            scan.next_seq,
            scan.snapshot_at,
            scan.framed,
            cold=True,
        )
        return replace(found, incarnation=scan.incarnation)
    if last.end < st.st_size:  # only damage may follow: it raises
        scan_part(store, log, sid, io.pread(log, st.st_size - last.end, last.end), last.next_seq, last.end)
    found = _settle(
        store, folder, log, sid, st.st_size, last.end, last.next_seq, last.snapshot_at, True, cold=True
    )
    return replace(found, incarnation=last.incarnation)


def _settle(
    store: StoreFolder,
    folder: int,
    log: int,
    sid: str,
    size: int,
    end: int,
    next_seq: int,
    snapshot_at: int | None,
    framed: bool,
    cold: bool = False,
) -> Found:
    """Cut what follows the last complete write ``end`` (an unfinished write), unless the
    snapshot's copy says it was acknowledged. ``cold``: this process knew nothing of the
    log, so check the copy even when nothing is to be cut (a log that lost whole writes)."""
    if end == size and not cold:
        return Found(size, next_seq, False, snapshot_at, framed)
    check_copy(store, sid, decode_copy(store.read_file(folder, sid, SNAPSHOT) or b""), end)
    if end == size:
        return Found(size, next_seq, False, snapshot_at, framed)
    store.io.truncate(log, end)
    store.io.fsync(log)
    return Found(end, next_seq, True, snapshot_at, framed)  # that fsync made the rest durable too


def sealed_log(log: int, found: Found) -> bool:
    """Whether the State of ``log`` is sealed (its snapshot, else its last entry), read from
    the log's end: what the tail cache does not know (only a process's first write to it)."""
    if found.snapshot_at is not None:
        return sealed_text(snapshot_record(reader(log), found.snapshot_at, found.size))
    if found.next_seq == 0:
        return False
    last = entries_back(reader(log), found.size, found.next_seq - 1, found.next_seq)
    return last is not None and bool(last) and SEALED in last[-1]


def check_copy(store: StoreFolder, sid: str, copy: SnapshotCopy | None, end: int) -> None:
    """CorruptStateError if the snapshot's copy was written after more of the log was
    durable than its ``end``: acknowledged writes are missing."""
    if copy is not None and copy.log_size is not None and copy.log_size > end:
        raise lost_error(store, sid, copy.log_size, end)


def lost_error(store: StoreFolder, sid: str, copied: int, end: int) -> CorruptStateError:
    """The error for a log that lacks what its snapshot's copy says was acknowledged."""
    return CorruptStateError(
        f"State {sid!r} is damaged: {store.where(sid, SNAPSHOT)} was written after the first "
        f"{copied} bytes of {store.where(sid, LOG)} were durable, but its complete writes end at "
        f"byte {end}, so acknowledged entries are missing. Nothing was loaded or repaired; restore "
        "the log from a backup, or move the State's folder aside"
    )


def scan_part(store: StoreFolder, log: int, sid: str, data: bytes, start_seq: int, base: int) -> LogScan:
    """Scan ``data``, the part of the log from byte ``base``, where a complete write that
    ends before ``start_seq`` ends. Damage is reported as a scan of the whole log reports
    it: by line."""
    try:
        return scan_log(data, start_seq=start_seq, legacy=False, base=base, name=store.where(sid, LOG))
    except CorruptStateError:
        scan_whole(store, log, sid)  # raises, naming the line in the whole file
        raise


def scan_whole(store: StoreFolder, log: int, sid: str) -> LogScan:
    """Read the open log from its start."""
    os.lseek(log, 0, os.SEEK_SET)
    return scan_log(store.io.read_all(log), name=store.where(sid, LOG))

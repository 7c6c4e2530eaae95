"""FileStore's reads and listings: they never write anything (no folder, marker or
clean-up of leftovers), and parse what they read in the caller's thread where they can."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from ..._core.errors import CorruptStateError
from ..._core.ids import validate_id
from ..._core.ranges import cut
from ..._core.records import Record, SavedState, check_covered, decode_snapshot, left_out, listing_order
from ..._store.blobs import RawRecord
from .._fsio import OsIO, read_rest
from .copies import current_snapshot, listed_snapshot
from .folder import StoreFolder, still_named
from .logformat import scan_log
from .logtail import decode_copy, entries_back, last_write, reader, snapshot_record
from .recovery import check_copy, scan_part
from .trust import DIR, LOG, SNAPSHOT

#: A range read goes back from the log's end while it returns at most this share of the
#: history, else it scans the log whole and cuts. Reading back costs about 1.2 x the
#: whole scan per entry (benchmarks/bench_ranges.py, 100,000 entries, 3 runs: 0.09-0.11 x
#: the whole scan's time for the last 10 %, 0.57-0.70 x for half, 0.92-1.20 x for 70 %,
#: 1.04-1.34 x for 90 %).
BACKWARDS_SHARE = 0.5


def read_state(store: StoreFolder, sid: str) -> RawRecord | None:
    """Read the files; the returned function parses them, in the caller's thread
    (parsing where the bytes were read costs far more in memory faults)."""
    for again in (True, False):
        with _state_folder(store, sid) as opened:
            if opened is None:
                return None
            root, folder = opened
            # The copy first: it is written after the log is durable up to the length it
            # records, so a log shorter than that lost acknowledged writes.
            named = _log_file(store.io, folder)
            copy = store.read_file(folder, sid, SNAPSHOT)
            try:
                fd, st = store.open_stat(folder, sid, LOG, os.O_RDONLY)
            except FileNotFoundError:
                if still_named(root, sid, folder, store.io):
                    raise CorruptStateError(f"{store.where(sid, LOG)} is missing") from None
                return None  # deleted meanwhile: renamed away, then its files removed
            try:
                if again and _same(named, st) is False:
                    continue  # a rekey replaced the log after the copy was read: again
                log = read_rest(store.io, fd, st.st_size)
            finally:
                store.io.close(fd)
        return RawRecord(partial(_parse, store, sid, log, copy), log)
    raise AssertionError("unreachable")


def _log_file(io: OsIO, folder: int) -> os.stat_result | None:
    try:
        return io.stat(LOG, dir_fd=folder)
    except FileNotFoundError:
        return None


def _same(named: os.stat_result | None, held: os.stat_result) -> bool | None:
    """Is ``held`` the file ``named`` stood for? None if nothing was named."""
    return None if named is None else (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def read_range(
    store: StoreFolder, sid: str, since: int, share: float = BACKWARDS_SHARE
) -> Record | Callable[[], Record] | None:
    """The State's entries of seq >= ``since`` and its snapshot, read back from the log's
    end (its last complete write, then line by line to ``since``), so reading a history's
    end costs what it returns. Falls back to :func:`read_state` (whole, then cut) when
    that returns more than ``share`` of the history, and for a log that cannot be read
    from its end: one of format 1 only, or damaged there."""
    for again in (True, False):
        with _state_folder(store, sid) as opened:
            if opened is None:
                return None
            root, folder = opened
            named = _log_file(store.io, folder)
            copy = store.read_file(folder, sid, SNAPSHOT)
            try:
                log, st = store.open_stat(folder, sid, LOG, os.O_RDONLY)
            except FileNotFoundError:
                if still_named(root, sid, folder, store.io):
                    raise CorruptStateError(f"{store.where(sid, LOG)} is missing") from None
                return None  # deleted meanwhile
            try:
                if again and _same(named, st) is False:
                    continue  # a rekey replaced the log after the copy was read: again
                found = _read_back(store, sid, log, copy, since, share)
            finally:
                store.io.close(log)
        break
    if found is not None:
        return found
    whole = read_state(store, sid)
    return None if whole is None else RawRecord(lambda: cut(whole(), since), whole.raw)


def _read_back(
    store: StoreFolder, sid: str, log: int, raw_copy: bytes | None, since: int, share: float
) -> Record | None:
    read_at = reader(log)
    size = os.fstat(log).st_size
    last = last_write(read_at, size)
    if last is None:
        return None  # format 1 only, or no complete write: scan it whole
    if last.end < size:  # an unfinished write may follow, nothing else: damage raises
        scan_part(store, log, sid, read_at(last.end, size - last.end), last.next_seq, last.end)
    if last.next_seq - since > share * last.next_seq:
        return None  # most of the history: the whole scan is faster
    check_copy(store, sid, decode_copy(raw_copy) if raw_copy else None, last.end)
    entries = entries_back(read_at, last.end, since, last.next_seq)
    if entries is None:
        return None  # not readable from the end: the whole scan names the damage
    encoded = last.snapshot
    if encoded is None and last.snapshot_at is not None:
        encoded = snapshot_record(read_at, last.snapshot_at, last.end)
        if encoded is None:
            return None
    snapshot = None if encoded is None else decode_snapshot(encoded, store.where(sid, LOG))
    return Record(entries, snapshot, last.incarnation)


def read_snapshot(store: StoreFolder, sid: str) -> dict[str, Any] | None:
    """The State's snapshot without its history (None if there is none): the copy when it
    is current, else the log's writes after it, as listings read it."""
    with _state_folder(store, sid) as opened:
        if opened is None:
            return None
        root, folder = opened
        try:
            return _current(store, folder, sid)
        except FileNotFoundError:
            if still_named(root, sid, folder):
                raise
            return None  # deleted meanwhile


def _current(store: StoreFolder, folder: int, sid: str) -> dict[str, Any] | None:
    """:func:`current_snapshot`, read again once if it finds damage: a rekey may have
    replaced the log between its reads of the copy and of the log."""
    try:
        return current_snapshot(store, folder, sid)
    except CorruptStateError:
        return current_snapshot(store, folder, sid)


@contextmanager
def _state_folder(store: StoreFolder, sid: str) -> Iterator[tuple[int, int] | None]:
    """The store's folder and the State's, opened (and closed after), or None if either
    is missing."""
    root = store.open_root(create=False)
    if root is None:
        yield None
        return
    try:
        folder = store.open_state(root, sid)
        if folder is None:
            yield None
            return
        try:
            yield root, folder
        finally:
            store.io.close(folder)
    finally:
        store.io.close(root)


def _parse(store: StoreFolder, sid: str, log: bytes, raw_copy: bytes | None) -> Record:
    scan = scan_log(log, name=store.where(sid, LOG))
    copy = decode_copy(raw_copy) if raw_copy else None
    check_copy(store, sid, copy, scan.end)
    if scan.framed:
        if scan.snapshot_at is not None and scan.snapshot is None:
            raise CorruptStateError(
                f"{store.where(sid, LOG)}: its last write keeps the snapshot recorded at byte "
                f"{scan.snapshot_at}, but no snapshot record is there. Move the State's folder aside"
            )
        return Record(scan.entries, scan.snapshot, scan.incarnation)
    # A log of format 1 only: its snapshot.json is the snapshot.
    snapshot = decode_snapshot(raw_copy, store.where(sid, SNAPSHOT))
    cut = "" if not scan.torn else f" (its last line, from byte {scan.end}, is cut short)"
    check_covered(
        snapshot,
        scan.next_seq,
        snapshot_name=f"State {sid!r} is damaged: {store.where(sid, SNAPSHOT)}",
        history_name=f"{store.where(sid, LOG)}{cut}",
        advice="restore the log from a backup, or move the State's folder aside",
    )
    return Record(scan.entries, snapshot)


def _snapshot_from_log(store: StoreFolder, root: int, name: str) -> dict[str, Any] | None:
    """A listed State's snapshot when its copy is not current: read from its log."""
    try:  # named as scandir found it: spelled as stored
        folder = store.open_in(root, name, name, DIR)
    except FileNotFoundError:
        return None  # deleted meanwhile
    try:
        return _current(store, folder, name)
    except FileNotFoundError:
        if still_named(root, name, folder):
            raise
        return None  # deleted meanwhile
    finally:
        os.close(folder)


def state_ids(store: StoreFolder) -> list[str]:
    """Every State folder's name (those without a snapshot too), in id order."""
    root = store.open_root(create=False)
    if root is None:
        return []
    try:
        with os.scandir(root) as it:
            names = [e.name for e in it if not e.name.startswith(".")]
    finally:
        os.close(root)
    return sorted(name for name in names if _is_id(name))


def _is_id(name: str) -> bool:
    try:
        validate_id(name)
    except ValueError:
        return False  # not ours
    return True


def list_states(store: StoreFolder, prefix: str = "") -> tuple[list[SavedState], list[str]]:
    root = store.open_root(create=False)
    if root is None:
        return [], []
    rows: list[SavedState] = []
    skipped: list[str] = []
    try:
        with os.scandir(root) as it:
            names = [
                (e.name, e.is_symlink())
                for e in it
                if not e.name.startswith(".") and e.name.startswith(prefix)
            ]
        for name, is_link in names:
            try:
                validate_id(name)
            except ValueError:
                continue  # not ours
            try:
                if is_link:
                    raise CorruptStateError(f"{store.where(name)} is a symbolic link; not followed")
                try:
                    current, snapshot = listed_snapshot(store, root, name)
                except FileNotFoundError:
                    continue  # deleted meanwhile
                if not current:
                    snapshot = _snapshot_from_log(store, root, name)
                if snapshot is not None:
                    rows.append(SavedState.from_snapshot(name, snapshot))
            except (OSError, ValueError) as exc:
                skipped.append(left_out(name, exc))
    finally:
        os.close(root)
    return listing_order(rows), skipped

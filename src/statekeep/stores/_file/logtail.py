"""Reading a FileStore log (format 2, see :mod:`statekeep.stores._file.logformat`) from its end, pure
(no I/O: the caller gives a ``read_at``): the last complete write, the entries a re-sent
write overlaps, a snapshot record by offset; and the codec of ``snapshot.json``, the
copy of the current snapshot that listings read.

A cold append reads only this much, so its cost does not grow with the history.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from .logformat import (
    CHECKED,
    CLOSING_START,
    CRC_SUFFIX,
    DAMAGED,
    FORMAT,
    PLAIN,
    closes,
    closing_of,
    crc_text,
    incarnation_of,
    line_kind,
    seal,
)

ReadAt = Callable[[int, int], bytes]  # (offset, size) -> the log's bytes there


def reader(fd: int) -> ReadAt:
    """The :data:`ReadAt` of an open file: ``os.pread`` with its arguments in our order."""
    return lambda at, n: os.pread(fd, n, at)


@dataclass(frozen=True, slots=True)
class LastWrite:
    """The last complete write of a log, found from its end."""

    end: int  # just past its closing record
    next_seq: int
    snapshot_at: int | None  # where the current snapshot record is; None: the State has none
    snapshot: bytes | None  # the encoded snapshot, if this write's record carries it
    incarnation: str | None = None  # the State's (format 3), else None


def last_write(read_at: ReadAt, size: int) -> LastWrite | None:
    """The last complete write of the ``size`` bytes long log, reading back from its end
    only as far as that write's start. None when the log must be scanned from its start
    instead: it ends in format 1 lines, or holds no complete write.
    """
    for pos, line in _lines_back(read_at, size):
        kind = line_kind(line, 0, len(line))
        if kind == PLAIN:
            if b"\0" not in line and _legacy_entry(line):
                return None  # format 1 lines: the log was never written in format 2
            continue
        if kind == DAMAGED:
            continue
        try:
            record = closing_of(line, 0, len(line))
        except orjson.JSONDecodeError:
            continue
        if not record:
            continue
        size_ = record.get("sk.bytes")
        next_seq = record.get("sk.next")
        if type(size_) is not int or type(next_seq) is not int or not 0 <= size_ <= pos:
            continue
        if not closes(record, read_at(pos - size_, size_), 0, size_, None):
            continue  # its closing page survived a power cut, not all of its entries
        inc = incarnation_of(record)
        if "sk.snapshot" in record:
            return LastWrite(pos + len(line) + 1, next_seq, pos, snapshot_of(line), inc)
        at = record.get("sk.at")
        return LastWrite(pos + len(line) + 1, next_seq, at if type(at) is int else None, None, inc)
    return None


def entries_back(read_at: ReadAt, end: int, first_seq: int, next_seq: int) -> list[dict[str, Any]] | None:
    """The entries with seqs ``first_seq`` to ``next_seq - 1`` of the log's first ``end``
    bytes (complete writes only), read back from ``end``; None if they cannot be told
    from there (then scan the log whole)."""
    found: list[dict[str, Any]] = []
    want = next_seq - 1
    if want < first_seq:
        return found
    legacy = False  # format 1 (plain) lines come before every checked line, never after one
    for _, line in _lines_back(read_at, end):
        kind = line_kind(line, 0, len(line))
        if kind == DAMAGED or (kind == CHECKED and legacy):
            return None
        if kind == CHECKED and line.startswith(CLOSING_START):
            continue
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if type(entry) is not dict or entry.get("seq") != want:
            return None
        if kind == CHECKED:
            del entry["sk.crc"]
        elif any(key.startswith("sk.") for key in entry):
            return None  # a checked line whose checksum key was damaged: not a plain line
        else:
            legacy = True
        found.append(entry)
        if want == first_seq:
            found.reverse()
            return found
        want -= 1
    return None


def snapshot_of(line: bytes) -> bytes:
    """The encoded snapshot a checked closing record (or copy) ``line`` carries."""
    key = b'"sk.snapshot":'
    return line[line.index(key) + len(key) : len(line) - CRC_SUFFIX]


def _legacy_entry(line: bytes) -> bool:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return type(value) is dict and type(value.get("seq")) is int


def _lines_back(read_at: ReadAt, size: int, chunk: int = 1 << 16) -> Iterator[tuple[int, bytes]]:
    """(offset, line without its newline) of the complete lines of the log's first
    ``size`` bytes, last first. Reads back in chunks that double, so a long line costs
    linear time."""
    lo, buf = size, b""
    end: int | None = None  # where the next line to yield ends (its newline)
    while True:
        limit = (size if end is None else end) - lo
        i = buf.rfind(b"\n", 0, limit)
        if i >= 0:
            if end is not None:
                yield lo + i + 1, buf[i + 1 : limit]
            end = lo + i
            continue
        if lo == 0:
            if end is not None and end > 0:
                yield 0, buf[:limit]
            return
        n = min(max(chunk, len(buf)), lo)
        lo -= n
        buf = read_at(lo, n) + buf


# -- snapshot.json: a copy of the last snapshot record, refreshed lazily -------------------


@dataclass(frozen=True, slots=True)
class SnapshotCopy:
    """What ``snapshot.json`` holds: the snapshot as of the log's first ``log_size`` bytes.

    ``log_size`` is None for a copy written in format 1 (the snapshot itself, rewritten
    with every write). ``snapshot`` is None when the State has none.
    """

    log_size: int | None
    next_seq: int
    snapshot: dict[str, Any] | None


def encode_copy(log_size: int, next_seq: int, snapshot: bytes | None) -> bytes:
    """``snapshot.json``'s contents for a log of ``log_size`` bytes ending before ``next_seq``."""
    body = b'{"sk.v":%d,"sk.log":%d,"sk.next":%d,"sk.snapshot":%s' % (
        FORMAT,
        log_size,
        next_seq,
        b"null" if snapshot is None else snapshot,
    )
    return seal(body)


def decode_copy(raw: bytes) -> SnapshotCopy | None:
    """The copy ``raw`` holds; None if it is damaged (a copy is not fsync'd: a power cut
    can leave it empty or zero-filled, and the log has it all anyway).
    UnsupportedFormatError if a newer statekeep wrote it."""
    nl = len(raw) - 1
    if nl > 0 and raw[nl] == 10 and raw.startswith(CLOSING_START):
        try:
            record = orjson.loads(memoryview(raw)[:nl])
        except orjson.JSONDecodeError:
            return None
        if type(record) is not dict:
            return None
        crc, version = record.get("sk.crc"), record.get("sk.v")
        size, next_seq = record.get("sk.log"), record.get("sk.next")
        if (
            type(crc) is not str
            or type(version) is not int
            or type(size) is not int
            or type(next_seq) is not int
        ):
            return None
        if crc_text(memoryview(raw)[: nl - CRC_SUFFIX]) != crc or raw[nl - 2 : nl] != b'"}':
            return None
        if version > FORMAT:
            closing_of(raw, 0, nl)  # raises UnsupportedFormatError
        snapshot = record.get("sk.snapshot")
        return SnapshotCopy(size, next_seq, snapshot if type(snapshot) is dict else None)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return SnapshotCopy(None, 0, value) if type(value) is dict else None


def snapshot_record(read_at: ReadAt, at: int, size: int) -> bytes | None:
    """The encoded snapshot of the closing record at offset ``at`` of a log of ``size``
    bytes, or None if there is no checked snapshot record there."""
    n, line = 4096, b""
    while at + len(line) < size:
        line = read_at(at, min(n, size - at))
        nl = line.find(b"\n")
        if nl >= 0:
            line = line[:nl]
            if (
                line_kind(line, 0, nl) == CHECKED
                and line.startswith(CLOSING_START)
                and b'"sk.snapshot":' in line
            ):
                return snapshot_of(line)
            return None
        n *= 2
    return None

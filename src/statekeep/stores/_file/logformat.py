"""FileStore's log format and its recovery, pure (no I/O): tests and fuzzers drive it directly.

Format 2. A log is one JSON object per line, readable with ``jq``. Every line ends with a
checksum, the key ``"sk.crc"``: the CRC-32 (zlib's) of the line's bytes before
``,"sk.crc"``, as 8 hex digits. Each write appends its entries, then one *closing record*::

    {"seq":0,"kind":"user",...,"sk.crc":"1c291ca3"}
    {"sk.v":2,"sk.next":1,"sk.bytes":48,"sk.write":"5a3c...","sk.snapshot":{...},"sk.crc":"..."}

``sk.next`` is the seq after the write, ``sk.bytes`` and ``sk.write`` the length and CRC-32
of the write's entry lines before the record. A write that keeps the snapshot closes with
``"sk.at"`` (the byte offset of the line holding the current snapshot, or null when the
State has none) in place of ``"sk.snapshot"``. Closing records start with ``"sk.v"`` (the
format); entries never carry top-level keys starting with ``sk.`` (:data:`RESERVED`).

A write is the unit recovery can tell: a power cut may keep any of the 4 KiB pages of
bytes never fsync'd, so an unfinished write can hold zeros with complete lines after them,
and even its closing record -- whose write checksum then fails. Everything after the
last complete write that does not close another complete write is an unfinished write:
it was never acknowledged, and is left out (cut before the next append). A complete write
after a damaged line is :class:`CorruptStateError`: acknowledged data is damaged.

Format 3 is format 2 whose closing records also carry ``"sk.inc"``, the State's
incarnation (see :mod:`statekeep._store.incarnations`; none for a State created before), before
``sk.snapshot``/``sk.at``. Writes closed in format 3 from then on, so a statekeep that reads format 2
only refuses a State this one wrote to, rather than misread it (a snapshot sealed with the
names of its clear fields) or append records its readers could not open.

A trimmed log (``store.trim``, :mod:`.trimlog`) starts with its base entry, at the seq it
holds, and goes on from there; every other log starts at seq 0.

Format 4 is format 3 whose entries may refer to blobs (large values stored once, listed at a
line's top level as ``"sk.blobs"``: :mod:`statekeep._core.blobs`) or whose log starts with a
trim's base entry. A write closes in format 4 only then, so a statekeep that reads up to format
3 refuses such a State rather than read a reference in place of the value it names, and keeps
reading every other State.

Format 1 (statekeep before 0.4) lines are plain entries, one per line, each a unit of its
own. A log may start with them (a State written before the upgrade) and go on in format
2; nothing is rewritten. Format 1 lines never follow format 2 ones.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import orjson

from ..._core.errors import CorruptStateError, UnsupportedFormatError

#: The newest log format: a write closes in it when an older statekeep would misread the
#: write (its entries refer to blobs, or it starts a trimmed log), in format 3 otherwise, so
#: that a State holding neither stays readable by a statekeep that reads up to format 3.
FORMAT = 4
#: The format a write that needs nothing newer closes in.
PLAIN_FORMAT = 3
_BLOB_LIST = b'"sk.blobs":'

_HEAD = b',"sk.crc":"'
#: The length of a line's checksum ending, ``,"sk.crc":"xxxxxxxx"}`` and its newline.
CRC_SUFFIX = len(_HEAD) + 8 + 2
#: How every closing record starts (and no entry does).
CLOSING_START = b'{"sk.v":'
_crc32 = zlib.crc32
_loads = orjson.loads


def crc_text(data: bytes | memoryview) -> str:
    """The checksum of ``data`` as the log writes it: 8 lowercase hex digits. A checksum
    read is compared with this as text, so only what was written matches (``"ABCD0123"``
    or ``"+bcd0123"`` would parse as a number, but is damage)."""
    return f"{_crc32(data):08x}"


def seal(body: bytes) -> bytes:
    """The line ``body`` (a JSON object without its closing brace) with its checksum."""
    return b'%s,"sk.crc":"%08x"}\n' % (body, _crc32(body))


def frame(line: bytes) -> bytes:
    """A line of the log for the encoded entry ``line`` (a JSON object ending ``}\\n``)."""
    return seal(line[:-2])


def closing_record(
    next_seq: int,
    entries: bytes,
    snapshot: bytes | None,
    at: int | None,
    incarnation: str | None = None,
    *,
    trimmed: bool = False,
) -> bytes:
    """The line that closes a write whose entry lines are ``entries``: with the encoded
    ``snapshot``, or (None) a marker that keeps the snapshot recorded at offset ``at``; with
    the State's ``incarnation``, if it has one. In :data:`FORMAT` when the entries refer to
    blobs or start a ``trimmed`` log, else in :data:`PLAIN_FORMAT`."""
    newer = trimmed or _BLOB_LIST in entries
    head = b'{"sk.v":%d,"sk.next":%d,"sk.bytes":%d,"sk.write":"%08x",' % (
        FORMAT if newer else PLAIN_FORMAT,
        next_seq,
        len(entries),
        _crc32(entries),
    )
    if incarnation is not None:
        head += b'"sk.inc":"%s",' % incarnation.encode()
    if snapshot is not None:
        body = b'%s"sk.snapshot":%s' % (head, snapshot)
    else:
        body = b'%s"sk.at":%s' % (head, b"null" if at is None else b"%d" % at)
    return seal(body)


def incarnation_of(record: dict[str, Any]) -> str | None:
    """The incarnation a closing record carries (None: a State without one, or format 2)."""
    found = record.get("sk.inc")
    return found if type(found) is str else None


#: What :func:`line_kind` says of a line: no checksum (format 1, or not a line at all), a
#: checksum that holds, or one that does not.
PLAIN, CHECKED, DAMAGED = 0, 1, 2


def line_kind(data: bytes, pos: int, nl: int) -> int:
    """Is the line ``data[pos:nl]`` plain (no checksum: format 1, or not a line at all),
    checked (its checksum holds) or damaged (it has one, and it does not hold)?"""
    body = nl - CRC_SUFFIX
    if body <= pos or data[nl - 2 : nl] != b'"}' or data[body : body + len(_HEAD)] != _HEAD:
        return PLAIN
    # Compared as written (lowercase hex only): "ABCD0123" or "0x..." is damage, not a match.
    good = b"%08x" % _crc32(memoryview(data)[pos:body]) == data[nl - 10 : nl - 2]
    return CHECKED if good else DAMAGED


def closing_of(data: bytes, pos: int, nl: int) -> dict[str, Any] | None:
    """The closing record on the checked line ``data[pos:nl]``, or None if that line is an
    entry. UnsupportedFormatError for a record of a newer format."""
    if not data.startswith(CLOSING_START, pos):
        return None
    value = _loads(data[pos:nl])
    if type(value) is not dict:
        return {}  # closes nothing
    record: dict[str, Any] = value
    version = record.get("sk.v")
    if type(version) is not int:
        return {}  # closes nothing
    if version > FORMAT:
        raise UnsupportedFormatError(
            f"written by a newer statekeep (log format {version}; this one reads up to "
            f"{FORMAT}): upgrade statekeep to read it. Nothing was changed"
        )
    return record


def closes(record: dict[str, Any], data: bytes, start: int, pos: int, seq: int | None) -> bool:
    """Does ``record`` (at ``pos``) close the write ``data[start:pos]`` ending before ``seq``
    (None: any seq)?"""
    try:
        return (
            (seq is None or record["sk.next"] == seq)
            and record["sk.bytes"] == pos - start
            and bool(crc_text(memoryview(data)[start:pos]) == record["sk.write"])
        )
    except (KeyError, TypeError, ValueError):
        return False


@dataclass(slots=True)
class LogScan:
    """What a scan found: the entries of complete writes, and where they end."""

    entries: list[dict[str, Any]]
    end: int  # byte offset just past the last complete write
    next_seq: int  # the seq the next appended entry must have
    torn: bool  # bytes follow ``end``: an unfinished write, to cut before the next append
    framed: bool = False  # a format 2 write was seen
    snapshot_at: int | None = None  # where the current snapshot record is (framed only)
    snapshot: dict[str, Any] | None = None  # that record's snapshot, if the scan saw it
    incarnation: str | None = None  # the State's, from the last closing record seen


def scan_log(
    data: bytes,
    *,
    start: int = 0,
    start_seq: int = 0,
    legacy: bool = True,
    base: int = 0,
    name: str = "log",
    first_line: int = 1,
) -> LogScan:
    """Scan ``data[start:]``, whose first entry must hold ``start_seq``; offsets in the result
    count from the start of ``data``.

    ``legacy``: format 1 lines may come first (a scan from a log's start). ``base``: where
    ``data`` starts in the log (snapshot offsets are the log's, not ``data``'s). ``name`` and
    ``first_line`` (the line number of ``data[start:]``'s first line) are for messages.
    Raises CorruptStateError for damage before the end of the last complete write.
    """
    entries: list[dict[str, Any]] = []
    find = data.find
    seq = write_seq = start_seq
    pos = end = start
    framed = False
    at: int | None = None
    snapshot: dict[str, Any] | None = None
    incarnation: str | None = None
    why = ""
    view = memoryview(data)
    if start == 0 and start_seq == 0:
        seq = write_seq = start_seq = _trimmed_start(data)
    while (nl := find(b"\n", pos)) >= 0:
        # The common line first: an entry whose checksum holds, in a write being read.
        try:
            entry = _loads(view[pos:nl])
        except orjson.JSONDecodeError:
            entry = None
        if type(entry) is dict and entry.get("seq") == seq and type(entry["seq"]) is int:
            crc = entry.pop("sk.crc", None)
            if data[nl - CRC_SUFFIX : nl - 10] == _HEAD and crc_text(view[pos : nl - CRC_SUFFIX]) == crc:
                entries.append(entry)
                seq += 1
                pos = nl + 1
                continue
        kind = line_kind(data, pos, nl)
        try:
            if kind == CHECKED:
                record = closing_of(data, pos, nl)
                if record is None:  # an entry of the write being read
                    entry = _loads(data[pos:nl])
                    if type(entry) is not dict or entry.get("seq") != seq or type(entry["seq"]) is not int:
                        why = _wrong_seq(entry, seq)
                        break
                    del entry["sk.crc"]
                    entries.append(entry)
                    seq += 1
                    pos = nl + 1
                    continue
                if not closes(record, data, end, pos, seq):
                    why = "closes a write whose entries it does not match"
                    break
                if framed and incarnation_of(record) != incarnation:
                    why = "names another incarnation of the State than the writes before it"
                    break
                incarnation = incarnation_of(record)
                if "sk.snapshot" in record:
                    at, snapshot = base + pos, record["sk.snapshot"]
                elif record.get("sk.at") != at:
                    at, snapshot = record.get("sk.at"), None  # recorded before ``start``
                framed = True
            elif kind == PLAIN and legacy and not framed and pos == end:  # format 1: one line, one unit
                entry = _loads(data[pos:nl])
                if type(entry) is not dict:
                    break  # debris of an interrupted append, unless an entry follows
                if entry.get("seq") != seq or type(entry["seq"]) is not int:
                    why = _wrong_seq(entry, seq)
                    break
                entries.append(entry)
                seq += 1
            else:
                # Only lost pages (zeros) make a finished line fail in an unfinished write.
                if b"\0" not in data[pos:nl]:
                    why = (
                        "does not match its checksum" if kind == DAMAGED else "is not a line statekeep wrote"
                    )
                break
        except orjson.JSONDecodeError:
            if kind == CHECKED:
                why = "is not valid JSON"
            break
        pos = end = nl + 1
        write_seq = seq
    if why:
        _damaged(name, first_line + data.count(b"\n", start, pos), why)
    if end < len(data):
        _check_unfinished(
            data, end, pos, legacy and not framed, name, first_line + data.count(b"\n", start, end)
        )
        del entries[write_seq - start_seq :]
    return LogScan(entries, end, write_seq, end < len(data), framed, at, snapshot, incarnation)


def _trimmed_start(data: bytes) -> int:
    """The seq of a trimmed log's first line (its base: ``trim`` rewrote the log to start
    there), or 0. Only a checked entry line counts: a plain one is format 1, from seq 0."""
    nl = data.find(b"\n")
    if nl <= 0 or data.startswith(CLOSING_START) or line_kind(data, 0, nl) != CHECKED:
        return 0
    try:
        first = _loads(data[:nl])
    except orjson.JSONDecodeError:
        return 0
    seq = first.get("seq") if type(first) is dict else None
    return seq if type(seq) is int and seq > 0 else 0


def _wrong_seq(entry: object, seq: int) -> str:
    found = entry.get("seq") if isinstance(entry, dict) else entry
    return f"holds seq {found!r} where seq {seq} belongs"


def _check_unfinished(data: bytes, end: int, bad: int, legacy: bool, name: str, line_no: int) -> None:
    """Raise unless everything from ``end`` (where the last complete write ends) is one
    unfinished write: no complete write follows the damage at ``bad``, nor (``legacy``: a
    format 1 log) an entry of format 1."""
    find = data.find
    pos = bad
    while (nl := find(b"\n", pos)) >= 0:
        kind = line_kind(data, pos, nl)
        try:
            if kind == CHECKED:
                record = closing_of(data, pos, nl)
                size = None if record is None else record.get("sk.bytes")
                if (
                    record
                    and type(size) is int
                    and end <= pos - size
                    and closes(record, data, pos - size, pos, None)
                ):
                    _damaged_before(data, name, line_no, end, bad, pos, "a complete write")
            elif kind == PLAIN and legacy and pos > bad and isinstance(_loads(data[pos:nl]), dict):
                _damaged_before(data, name, line_no, end, bad, pos, "a valid entry")
        except orjson.JSONDecodeError:
            pass
        pos = nl + 1


def _damaged_before(data: bytes, name: str, line_no: int, end: int, bad: int, pos: int, what: str) -> None:
    bad_line = line_no + data.count(b"\n", end, bad)
    at_line = line_no + data.count(b"\n", end, pos)
    _damaged(name, bad_line, f"is damaged and followed by {what} on line {at_line}")


def _damaged(name: str, line: int, why: str) -> None:
    raise CorruptStateError(
        f"{name}: line {line} {why}; entries before line {line} are intact. "
        "The log is not repaired automatically: move the file aside and inspect it"
    )

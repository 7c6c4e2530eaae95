"""Framing and recovery of an append-only log: one JSON object per line, pure (no I/O).

A log holds entries with seq 0, 1, 2, ... each on its own line ending in ``\\n``. After a
crash the tail may be torn (a partial line), zero-filled or garbage. :func:`scan_log`
keeps the longest valid prefix. What follows it is a *torn tail* when no complete line in
it holds a JSON object: that is what an interrupted append leaves, and it was never
acknowledged. A complete JSON object after a bad line, or a line whose seq is not the
previous plus one, is *corruption*: acknowledged data may be at stake, so it raises
:class:`~statekeep._errors.CorruptStateError` naming the file and line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ._errors import CorruptStateError


@dataclass(frozen=True, slots=True)
class LogScan:
    """What a scan found: the valid entries and where the valid prefix ends."""

    entries: list[dict[str, Any]]
    end: int  # byte offset just past the last valid line
    next_seq: int  # the seq the next appended entry must have
    torn: bool  # bytes follow ``end`` (a torn tail to cut before the next append)


def scan_log(
    data: bytes, *, start: int = 0, start_seq: int = 0, name: str = "log", first_line: int = 1
) -> LogScan:
    """Scan ``data[start:]`` whose first line must hold ``start_seq``.

    ``name`` and ``first_line`` (the line number of ``data[start:]``'s first line) are used
    in error messages only.
    """
    entries: list[dict[str, Any]] = []
    loads = orjson.loads
    seq = start_seq
    pos = start
    find = data.find
    while True:
        nl = find(b"\n", pos)
        if nl < 0:
            break
        try:
            entry = loads(data[pos:nl])
        except orjson.JSONDecodeError:
            break
        if type(entry) is not dict or entry.get("seq") != seq or type(entry["seq"]) is not int:
            break
        entries.append(entry)
        seq += 1
        pos = nl + 1
    if pos < len(data):
        _check_tail(data, pos, seq, name, first_line + len(entries))
    return LogScan(entries, pos, seq, pos < len(data))


def _check_tail(data: bytes, pos: int, seq: int, name: str, line_no: int) -> None:
    """Raise unless everything from ``pos`` on is the debris of one interrupted append."""
    lines = data[pos:].split(b"\n")
    # The last piece has no newline after it: a partial line, never a finished record.
    for offset, line in enumerate(lines[:-1]):
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            bad = line_no + offset
            if offset == 0:
                found = value.get("seq")
                why = f"holds seq {found!r} where seq {seq} belongs"
            else:
                why = f"is damaged and followed by a valid entry on line {line_no + offset}"
                bad = line_no
            raise CorruptStateError(
                f"{name}: line {bad} {why}; entries before line {bad} are intact. "
                "The log is not repaired automatically: move the file aside and inspect it"
            )

"""The export file (``statekeep export`` / ``import``): JSON Lines, pure (no I/O but the
lines given and returned).

::

    {"format": "statekeep-export", "version": 1, "source": "FileStore", "states": 2,
     "entries": 7, "created_at": "2026-...", "holds": "..."}
    {"state": "run-1", "entries": 5, "snapshot": {...}, "incarnation": "<32 hex digits>"}
    {"entry": {"seq": 0, "kind": "task", ...}}
    ... its other entries, one line each; then the next State ...
    {"end": true, "states": 2, "entries": 7, "sha256": "<hex>"}

A trailer may also say what the export left out (States it could not read, a damaged one
say), each with why: ``"left_out": [{"state": "run-3", "why": "..."}]`` (an agent memory
key: with ``"memory": SCOPE``). A file without that key left nothing out, as every file
before it did; a reader that does not know it imports the States the file holds.

One line per entry, after a line holding the State's id, entry count and snapshot: a
State of any length streams in and out one entry at a time, and a reader knows where each
State ends. The trailer's ``sha256`` is over every byte before it (header included). A
reader checks the whole file (:func:`verify`) before anything is imported from it
(:func:`states`): a truncated or edited file is an :class:`ExportFileError` naming what is
wrong and where, and a file of a newer format version an :class:`UnsupportedFormatError`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from .._core.errors import CorruptStateError, UnsupportedFormatError
from .._core.ids import validate_id, validate_incarnation
from .._core.labels import validate_namespace
from .._core.records import Record

FORMAT = "statekeep-export"
#: The newest format version this statekeep reads. It writes version 1, or 2 when the file
#: holds agent memory (State lines with a ``"memory": SCOPE``), which version 1 readers
#: would take for States: they refuse it instead; or 3 when State lines carry the State's
#: ``"incarnation"``, which an import keeps (older readers would drop it: they refuse it).
VERSION = 3
MEMORY_VERSION = 2
INCARNATION_VERSION = 3
HOLDS = (
    "what read() returns: decrypted entries and snapshots (labels, explicit expiry), as the "
    "exporting store's keys could open them; without the exporting store's retention stamp "
    "(the importing store applies its own)"
)


class ExportFileError(CorruptStateError):
    """An export file that is not whole or not one: cut short, edited, or another file.
    Nothing was imported from it."""


def header_line(
    source: str,
    states: int,
    entries: int,
    created_at: datetime | None = None,
    memory_scopes: Sequence[str] = (),
    incarnations: bool = False,
) -> bytes:
    """``incarnations``: some State line carries its incarnation (format version 3)."""
    when = (created_at or datetime.now(UTC)).isoformat()
    version = INCARNATION_VERSION if incarnations else MEMORY_VERSION if memory_scopes else 1
    head: dict[str, Any] = {
        "format": FORMAT,
        "version": version,
        "source": source,
        "states": states,
        "entries": entries,
        "created_at": when,
        "holds": HOLDS,
    }
    if memory_scopes:
        head["memory_scopes"] = list(memory_scopes)
        head["holds"] += "; and the agent memory of memory_scopes, its keys as States marked with the scope"
    return orjson.dumps(head) + b"\n"


def state_lines(state_id: str, record: Record, memory: str | None = None) -> Iterator[bytes]:
    """The lines of one State: its id, entry count and snapshot, then one line per entry.
    ``memory``: the State is a key of the agent memory of that scope."""
    head: dict[str, Any] = {"state": state_id, "entries": len(record.entries), "snapshot": record.snapshot}
    if record.incarnation is not None:
        head["incarnation"] = record.incarnation
    if memory is not None:
        head["memory"] = memory
    yield orjson.dumps(head) + b"\n"
    for entry in record.entries:
        yield orjson.dumps({"entry": entry}) + b"\n"


@dataclass(frozen=True)
class LeftOut:
    """A State (or agent memory key, of scope ``memory``) an export could not read, and why."""

    state: str
    why: str
    memory: str | None = None

    @property
    def name(self) -> str:
        """The State's id, or ``memory SCOPE: key``."""
        return self.state if self.memory is None else f"memory {self.memory}: {self.state}"

    def line(self) -> dict[str, str]:
        """As the trailer lists it."""
        item = {"state": self.state, "why": self.why}
        return item if self.memory is None else {**item, "memory": self.memory}


def trailer_line(states: int, entries: int, sha256: str, left_out: Sequence[LeftOut] = ()) -> bytes:
    trailer: dict[str, Any] = {"end": True, "states": states, "entries": entries, "sha256": sha256}
    if left_out:
        trailer["left_out"] = [item.line() for item in left_out]
    return orjson.dumps(trailer) + b"\n"


@dataclass(frozen=True)
class Header:
    """What an export file's header says."""

    source: str
    states: int
    entries: int
    created_at: str
    #: The ids of the States the file holds, in order (filled by :func:`verify`).
    ids: tuple[str, ...] = ()
    #: What the export left out, as the trailer says (filled by :func:`verify`).
    left_out: tuple[LeftOut, ...] = ()


def _parse(line: bytes, where: str) -> dict[str, Any]:
    if not line.endswith(b"\n"):
        raise ExportFileError(f"{where} is cut short (no end of line): the file is truncated")
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise ExportFileError(f"{where} is not JSON: the file was damaged or edited") from None
    if type(value) is not dict:
        raise ExportFileError(f"{where} is not a JSON object: the file was damaged or edited")
    return value


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


def read_header(line: bytes | None) -> Header:
    """The header of an export file: ExportFileError if it is not one, UnsupportedFormatError
    if a newer statekeep wrote it."""
    if not line:
        raise ExportFileError("the file is empty: it is not a statekeep export")
    try:
        head = _parse(line, "line 1")
    except ExportFileError:
        head = {}
    if head.get("format") != FORMAT:
        raise ExportFileError(f'line 1 is not a statekeep export header ({{"format": "{FORMAT}", ...}})')
    version = head.get("version")
    if type(version) is not int or version < 1:
        raise ExportFileError(f"the header's version is {version!r}, not a format version")
    if version > VERSION:
        raise UnsupportedFormatError(
            f"the file is export format version {version}, written by a newer statekeep; this one "
            f"reads version {VERSION}: upgrade statekeep to import it"
        )
    if not (_count(head.get("states")) and _count(head.get("entries"))):
        raise ExportFileError("the header has no valid 'states' and 'entries' counts")
    return Header(str(head.get("source")), head["states"], head["entries"], str(head.get("created_at")))


def _walk(lines: Iterable[bytes]) -> Iterator[tuple[str, Mapping[str, Any], int]]:
    """Every line after the header parsed and checked in order: ("state", line, n),
    ("entry", line, n), then ("end", trailer, n); the checksum and counts checked at the end."""
    digest = hashlib.sha256()
    it = iter(lines)
    first = next(it, None)
    header = read_header(first)
    assert first is not None
    digest.update(first)
    states = entries = 0
    owed = announced = start = (
        0  # entry lines the current State still has to come, of how many; its first seq
    )
    current = ""
    number = 1
    for line in it:
        number += 1
        where = f"line {number}"
        item = _parse(line, where)
        if item.get("end") is True:
            if owed:
                raise ExportFileError(f"State {current!r} lacks its last {owed} entries before the trailer")
            _check_trailer(item, header, states, entries, digest.hexdigest(), where)
            yield "end", item, number
            if next(it, None) is not None:
                raise ExportFileError(f"there are lines after the trailer ({where}): the file was edited")
            return
        digest.update(line)
        if "entry" in item:
            if not owed or type(item["entry"]) is not dict:
                raise ExportFileError(f"{where} is an entry line no State line announced")
            seq, expected = item["entry"].get("seq"), start + announced - owed
            if owed == announced and type(seq) is int and seq > 0 and _a_base(item["entry"]):
                start = expected = seq  # a trimmed State's entries start at its base
            if type(seq) is not int or seq != expected:
                raise ExportFileError(
                    f"{where}: State {current!r} has an entry with seq {seq!r} where seq {expected} "
                    "belongs (each State's entries are seq 0, 1, 2, ... in order, or from a trimmed State's base on): "
                    "the file was edited"
                )
            owed -= 1
            entries += 1
            yield "entry", item, number
        elif "state" in item:
            if owed:
                raise ExportFileError(f"State {current!r} lacks its last {owed} entries ({where})")
            current, owed = _check_state(item, where)
            announced, start = owed, 0
            states += 1
            yield "state", item, number
        else:
            raise ExportFileError(f"{where} is neither a State, an entry nor the trailer")
    raise ExportFileError(
        f"the file ends at line {number} without its trailer line: it is truncated (export it again)"
    )


def _a_base(entry: Mapping[str, Any]) -> bool:
    """Whether ``entry`` may be a trimmed State's base (sealed, its kind cannot be told)."""
    return entry.get("kind") == "base" or "sk.sealed" in entry


def _check_state(item: Mapping[str, Any], where: str) -> tuple[str, int]:
    try:
        state_id = validate_id(item["state"])
    except (KeyError, TypeError, ValueError):
        raise ExportFileError(f"{where} does not hold a valid State id") from None
    memory = item.get("memory")
    if memory is not None:
        try:
            validate_namespace(memory)
        except (TypeError, ValueError):
            raise ExportFileError(f"{where} (State {state_id!r}) names no valid memory scope") from None
    try:
        validate_incarnation(item.get("incarnation"))
    except (TypeError, ValueError):
        raise ExportFileError(f"{where} (State {state_id!r}) has no valid incarnation id") from None
    snapshot = item.get("snapshot")
    if not _count(item.get("entries")) or (snapshot is not None and type(snapshot) is not dict):
        raise ExportFileError(f"{where} (State {state_id!r}) has no valid entry count or snapshot")
    return state_id, item["entries"]


def _check_trailer(
    item: Mapping[str, Any], header: Header, states: int, entries: int, sha256: str, where: str
) -> None:
    if item.get("sha256") != sha256:
        raise ExportFileError(
            f"the checksum in the trailer ({where}) does not match the file: it was changed after "
            "the export; export it again"
        )
    _left_out(item, where)
    counted = (states, entries)
    for name, said in (
        ("header", (header.states, header.entries)),
        ("trailer", (item.get("states"), item.get("entries"))),
    ):
        if said != counted:
            raise ExportFileError(
                f"the {name} counts {said[0]} States and {said[1]} entries, the file holds "
                f"{states} and {entries}"
            )


def _left_out(trailer: Mapping[str, Any], where: str) -> tuple[LeftOut, ...]:
    """The trailer's list of what the export left out (none if it has no such key)."""
    listed = trailer.get("left_out", [])
    if type(listed) is not list:
        raise ExportFileError(f"the trailer ({where}) has a 'left_out' that is not a list")
    found = []
    for item in listed:
        try:
            if type(item) is not dict or type(item["why"]) is not str:
                raise TypeError
            memory = item.get("memory")
            scope = None if memory is None else validate_namespace(memory)
            found.append(LeftOut(validate_id(item["state"]), item["why"], scope))
        except (KeyError, TypeError, ValueError):
            raise ExportFileError(
                f"the trailer ({where}) lists in 'left_out' something that is not a State and why: "
                "the file was damaged or edited"
            ) from None
    return tuple(found)


def verify(lines: Iterable[bytes]) -> Header:
    """Check a whole export file (its lines, ``\\n`` kept): header, structure, counts and
    checksum, holding one line at a time (and the States' ids, agent memory's left out).
    ExportFileError (or UnsupportedFormatError) if any is wrong; the header if all is well,
    with the ids and what the trailer says the export left out."""
    it = iter(lines)
    first = next(it, None)
    ids: list[str] = []
    left: tuple[LeftOut, ...] = ()
    for kind, item, number in _walk(_chain(first, it)):
        if kind == "state" and "memory" not in item:
            ids.append(item["state"])
        elif kind == "end":
            left = _left_out(item, f"line {number}")
    return dataclasses.replace(read_header(first), ids=tuple(ids), left_out=left)


def _chain(first: bytes | None, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first is not None:
        yield first
    yield from rest


def states(lines: Iterable[bytes]) -> Iterator[tuple[str, Record, str | None]]:
    """The States of an export file, one at a time (holding one State), each with the agent
    memory scope it is a key of (None: a State). Checks as it goes too, but only
    :func:`verify` beforehand guarantees the file is whole."""
    current: tuple[str, Any, list[dict[str, Any]], str | None, str | None] | None = None
    for kind, item, _ in _walk(lines):
        if kind == "entry":
            assert current is not None
            current[2].append(item["entry"])
            continue
        if current is not None:
            yield current[0], Record(current[2], current[1], current[4]), current[3]
        current = None
        if kind == "state":
            current = (item["state"], item.get("snapshot"), [], item.get("memory"), item.get("incarnation"))

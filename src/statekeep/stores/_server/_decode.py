"""Reading back what a server store holds: entries a write compares with, damaged entries
named by their seq, and the listing row of a snapshot."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import orjson

from ..._core.errors import CorruptStateError
from ..._core.records import SavedState, decode_snapshot, left_out


def decode_stored(stored: Sequence[bytes | str], sid: str, place: str) -> list[Any]:
    """The stored entries a write must compare with, decoded (``place`` names where they are)."""
    try:
        return [orjson.loads(data) for data in stored]
    except orjson.JSONDecodeError as exc:
        raise CorruptStateError(
            f"State {sid!r}: an entry stored in {place} is not valid JSON: {exc}"
        ) from None


def raise_bad_entry(items: Sequence[bytes | str], name: Callable[[int], str]) -> NoReturn:
    """Raise CorruptStateError for the first of ``items`` (entries, by seq) that is not a
    JSON object; ``name(seq)`` names it in the message. Called when the entries as a whole
    did not decode, so one of them is bad; if none is found singly, the set is still refused."""
    for seq, item in enumerate(items):
        decode_snapshot(item, name(seq))
    raise CorruptStateError(f"{name(0)} and the entries after it do not decode as a list of JSON objects")


def add_listed(sid: str, snapshot: bytes | str, rows: list[SavedState], skipped: list[str]) -> bool:
    """Add the listing row of State ``sid`` from its snapshot to ``rows`` (and return True),
    or the message saying why it is left out to ``skipped``."""
    try:
        rows.append(SavedState.from_snapshot(sid, orjson.loads(snapshot)))
    except ValueError as exc:
        skipped.append(left_out(sid, exc))
        return False
    return True

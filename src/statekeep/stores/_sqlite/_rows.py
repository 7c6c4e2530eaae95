"""Between rows and values: a snapshot's listing columns, a listing row's SavedState, and
an entry's stored JSON.

The listing columns are filled from the snapshot when it is written, with
:meth:`SavedState.from_snapshot`; times are kept as fixed-width UTC ISO text so that text
order is time order. A snapshot that lacks a listing key leaves them NULL and keeps the
reason in ``unlisted``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from ..._records import SavedState, decode_object, trusted_row, utc_time

_INT64_MAX = 2**63 - 1
_parse_time = datetime.fromisoformat


def listing_columns(sid: str, snapshot: bytes | None) -> tuple[Any, ...]:
    """The listing columns (task ... finished, unlisted) for a snapshot."""
    if snapshot is None:
        return (None,) * 7
    try:
        row = SavedState.from_snapshot(sid, orjson.loads(snapshot))
    except ValueError as exc:
        return (None,) * 6 + (str(exc),)
    return (
        row.task,
        row.created_at.isoformat(timespec="microseconds"),  # UTC, fixed width: sorts as text
        row.updated_at.isoformat(timespec="microseconds"),
        row.turn if row.turn <= _INT64_MAX else str(row.turn),  # SQLite integers are signed 64-bit
        row.stopped_by,
        int(row.finished),
        None,
    )


def saved_state(row: tuple[Any, ...]) -> SavedState:
    """A listing row, as read by the listing query; ValueError if a column was edited
    into something a listing cannot hold."""
    sid, task, created, updated, turn, stopped_by, finished = row
    # The columns were checked when written (listing_columns): times in UTC, so they parse
    # straight to UTC datetimes, and the row is built without checking again. A column
    # edited by hand falls through to the checks below.
    try:
        created_at, updated_at = _parse_time(created), _parse_time(updated)
    except (TypeError, ValueError):
        pass
    else:
        if created_at.tzinfo is UTC and updated_at.tzinfo is UTC and type(turn) is int:
            return trusted_row(sid, task, created_at, updated_at, turn, stopped_by, bool(finished))
    times = []
    for key, raw in (("created_at", created), ("updated_at", updated)):
        try:
            times.append(utc_time(raw))
        except ValueError as exc:
            raise ValueError(f"its {key} column holds {raw!r}, not {exc}") from None
    turn = turn if type(turn) is int else int(turn)
    return SavedState(sid, task, times[0], times[1], turn, stopped_by, bool(finished))


def decode_entry(path: Path, sid: str, seq: int, data: bytes) -> dict[str, Any]:
    """One stored entry, or CorruptStateError naming it if it is not a JSON object."""
    return decode_object(data, f"{path}: entry seq {seq} of State {sid!r}")

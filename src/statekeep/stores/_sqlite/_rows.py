"""Between rows and values: a snapshot's listing columns, a listing row's SavedState, and
an entry's stored JSON.

The listing columns are filled from the snapshot when it is written, with
:meth:`SavedState.from_snapshot`; times are kept as fixed-width UTC ISO text so that text
order is time order. A snapshot that lacks a listing key leaves them NULL and keeps the
reason in ``unlisted``; its ``expires_at`` column is still filled by the rule reads use
(:func:`~statekeep._core.labels.expired_at`), so such a State expires, and is collected, alike.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from ..._core.labels import iso
from ..._core.records import SavedState, decode_object, run_status, trusted_row, utc_time

_INT64_MAX = 2**63 - 1
_parse_time = datetime.fromisoformat
_NONE_13 = (None,) * 13


def listing_columns(sid: str, snapshot: bytes | None) -> tuple[tuple[Any, ...], dict[str, str]]:
    """The listing columns (task ... forked_from, unlisted, in ``_sql.LISTING_COLUMNS``
    order) for a snapshot, and its labels (the rows of the labels table)."""
    if snapshot is None:
        return _NONE_13, {}
    value = orjson.loads(snapshot)
    try:
        row = SavedState.from_snapshot(sid, value)
    except ValueError as exc:
        return (None,) * 9 + (expiry_column(value), None, None, str(exc)), {}
    finished = row.finished
    return (
        row.task,
        utc_text(value["created_at"], row.created_at),  # UTC, fixed width: sorts as text
        utc_text(value["updated_at"], row.updated_at),
        row.turn if row.turn <= _INT64_MAX else str(row.turn),  # SQLite integers are signed 64-bit
        row.stopped_by,
        int(finished),
        run_status(finished, row.stopped_by),
        row.agent,
        row.parent,
        None if row.expires_at is None else row.expires_at.isoformat(timespec="microseconds"),
        orjson.dumps(row.labels).decode() if row.labels else None,
        None if row.forked_from is None else orjson.dumps(row.forked_from).decode(),
        None,
    ), row.labels


def utc_text(raw: str, when: datetime) -> str:
    """``when`` (``raw`` parsed, in UTC) as fixed-width ISO text; from ``raw`` itself when it
    has that shape already (``datetime.isoformat`` costs a microsecond, on every write)."""
    if (
        raw[10:11] == "T"
        and raw[4] == raw[7] == "-"
        and raw[13] == raw[16] == ":"
        and raw.endswith("+00:00")
        and when.tzinfo is UTC
    ):
        if len(raw) == 32 and raw[19] == ".":  # YYYY-MM-DDTHH:MM:SS.ffffff+00:00
            return raw
        if len(raw) == 25:  # YYYY-MM-DDTHH:MM:SS+00:00
            return raw[:19] + ".000000+00:00"
    return when.isoformat(timespec="microseconds")


def expiry_column(snapshot: object) -> str | None:
    """The ``expires_at`` column of a snapshot listings cannot show, by the rule reads use."""
    raw = snapshot.get("expires_at") if type(snapshot) is dict else None
    if type(raw) is not str:
        return None
    try:
        when = datetime.fromisoformat(raw)
        return None if when.tzinfo is None else iso(when)
    except (ValueError, OverflowError):
        return None


def saved_state(row: tuple[Any, ...]) -> SavedState:
    """A listing row, as read by the listing query (``_sql.ROW_COLUMNS``); ValueError if a
    column was edited into something a listing cannot hold."""
    sid, task, created, updated, turn, stopped_by, finished, agent, parent, labels, expires, forked = row[:12]
    # The columns were checked when written (listing_columns): times in UTC, so they parse
    # straight to UTC datetimes, and the row is built without checking again. A column
    # edited by hand falls through to the checks below.
    try:
        created_at, updated_at = _parse_time(created), _parse_time(updated)
        expires_at = None if expires is None else _parse_time(expires)
        label_dict = {} if labels is None else orjson.loads(labels)
        forked_from = None if forked is None else orjson.loads(forked)
    except (TypeError, ValueError):
        pass
    else:
        if (
            created_at.tzinfo is UTC
            and updated_at.tzinfo is UTC
            and type(turn) is int
            and (expires_at is None or expires_at.tzinfo is UTC)
            and type(label_dict) is dict
        ):
            return trusted_row(
                sid, task, created_at, updated_at, turn, stopped_by, bool(finished),
                agent, parent, label_dict, expires_at, forked_from,
            )  # fmt: skip
    return _checked_row(row)


def _checked_row(row: tuple[Any, ...]) -> SavedState:
    sid, task, created, updated, turn, stopped_by, finished, agent, parent, labels, expires, forked = row[:12]
    times = []
    for key, raw in (("created_at", created), ("updated_at", updated), ("expires_at", expires)):
        try:
            times.append(None if raw is None and key == "expires_at" else utc_time(raw))
        except ValueError as exc:
            raise ValueError(f"its {key} column holds {raw!r}, not {exc}") from None
    extras: dict[str, Any] = {}
    for key, raw in (("labels", labels), ("forked_from", forked)):
        try:
            extras[key] = None if raw is None else orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ValueError(f"its {key} column holds {raw!r}, not JSON") from None
    snapshot = {
        "task": task, "created_at": created, "updated_at": updated, "stopped_by": stopped_by,
        "turn": turn if type(turn) is int else int(turn), "finished": bool(finished), "agent": agent,
        "parent": parent, "expires_at": None if times[2] is None else iso(times[2]), **extras,
    }  # fmt: skip
    return SavedState.from_snapshot(sid, snapshot)


def decode_entry(path: Path, sid: str, seq: int, data: bytes) -> dict[str, Any]:
    """One stored entry, or CorruptStateError naming it if it is not a JSON object."""
    return decode_object(data, f"{path}: entry seq {seq} of State {sid!r}")

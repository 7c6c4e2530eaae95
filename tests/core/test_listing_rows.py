"""Listing rows: SavedState built from a store's own checked columns (``trusted_row``) is the
row ``from_snapshot`` builds, as immutable; ``from_snapshot`` still checks every key."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import orjson
import pytest

from statekeep import SavedState
from statekeep._core.records import trusted_row, utc_time

SNAP: dict[str, Any] = {
    "v": 1,
    "task": "list me",
    "created_at": "2026-01-01T00:00:00+00:00",
    "updated_at": "2026-01-02T03:04:05.000006+00:00",
    "turn": 3,
    "stopped_by": "limit",
    "finished": False,
    "seq": 7,
}
CREATED = datetime(2026, 1, 1, tzinfo=UTC)
UPDATED = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)


def test_trusted_row_is_the_row_from_snapshot() -> None:
    fast = trusted_row("s1", "list me", CREATED, UPDATED, 3, "limit", False)
    built = SavedState("s1", "list me", CREATED, UPDATED, 3, "limit", False)
    for row in (built, SavedState.from_snapshot("s1", SNAP), SavedState._checked("s1", SNAP)):
        assert fast == row and hash(fast) == hash(row) and repr(fast) == repr(row)
        assert dataclasses.astuple(fast) == dataclasses.astuple(row)
    assert type(fast) is SavedState and fast.status == "limit"


def test_trusted_row_is_immutable() -> None:
    row = trusted_row("s1", "t", CREATED, UPDATED, 0, None, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.task = "changed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del row.turn  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):
        row.extra = 1  # type: ignore[attr-defined]  # slots: no room for new attributes
    assert row == SavedState("s1", "t", CREATED, UPDATED, 0, None, True)


@pytest.mark.parametrize(
    ("snapshot", "key"),
    [
        ({k: v for k, v in SNAP.items() if k != "task"}, "no 'task' key"),
        ({k: v for k, v in SNAP.items() if k != "updated_at"}, "no 'updated_at' key"),
        ({k: v for k, v in SNAP.items() if k != "finished"}, "no 'finished' key"),
        (SNAP | {"task": 5}, "invalid 'task'"),
        (SNAP | {"created_at": "yesterday"}, "invalid 'created_at'.*an ISO 8601 time"),
        (SNAP | {"updated_at": "2026-01-01T00:00:00"}, "invalid 'updated_at'.*a time with a UTC offset"),
        (SNAP | {"turn": -1}, "invalid 'turn'"),
        (SNAP | {"turn": True}, "invalid 'turn'"),
        (SNAP | {"stopped_by": 1}, "invalid 'stopped_by'"),
        (SNAP | {"finished": 0}, "invalid 'finished'"),
        # The first bad key in order is named, whatever follows it.
        ({k: v for k, v in SNAP.items() if k != "turn"} | {"task": None}, "invalid 'task'"),
    ],
)
def test_from_snapshot_names_the_first_bad_key(snapshot: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=rf"snapshot of 'odd' has (an )?{key}"):
        SavedState.from_snapshot("odd", snapshot)


def test_from_snapshot_takes_any_mapping_and_converts_times_to_utc() -> None:
    other = SNAP | {"created_at": "2026-01-01T02:00:00+02:00", "updated_at": "2026-01-02T03:04:05.000006Z"}
    for snapshot in (other, MappingProxyType(other)):
        row = SavedState.from_snapshot("s1", snapshot)
        assert row == SavedState("s1", "list me", CREATED, UPDATED, 3, "limit", False)
        assert row.created_at.tzinfo is UTC and row.updated_at.tzinfo is UTC
    with pytest.raises(ValueError, match="is not a dict: list"):
        SavedState.from_snapshot("odd", [])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "utc"),
    [
        ("2026-01-01T00:00:00+00:00", CREATED),
        ("2026-01-01T00:00:00Z", CREATED),
        ("2026-01-01T00:00:00-00:00", CREATED),
        ("2025-12-31T23:00:00-01:00", CREATED),
    ],
)
def test_utc_time_gives_aware_utc_datetimes(raw: str, utc: datetime) -> None:
    when = utc_time(raw)
    assert when == utc and when.tzinfo is UTC


@pytest.mark.parametrize(
    "raw",
    [
        "2026-01-02T03:04:05+00:00",
        "2026-01-02T03:04:05.000006+00:00",
        "2026-01-02T03:04:05.123+00:00",
        "2026-01-02 03:04:05+00:00",
        "2026-01-02T03:04:05Z",
        "2026-01-02T05:04:05+02:00",
        "2026-01-02T030405+00:00",
        "2026-01-02T030405.1+00:00",
        "20260102T03:04:05+00:00",
        "2026-01-02T03:04:05.12345+00:00",
        "2026-01-02T03:04+00:00",
        "0001-01-01T00:00:00+00:00",
        "9999-12-31T23:59:59.999999+00:00",
    ],
)
def test_sqlite_time_columns_are_the_fixed_width_utc_text(raw: str) -> None:
    # The columns a SQLite write fills take the snapshot's text as is when it is that text
    # already: any other spelling is converted, as datetime.isoformat would.
    from statekeep.stores._sqlite._rows import listing_columns, utc_text

    when = utc_time(raw)
    assert utc_text(raw, when) == when.isoformat(timespec="microseconds")
    columns, _ = listing_columns("s1", orjson.dumps({**SNAP, "created_at": raw, "updated_at": raw}))
    assert columns[1] == columns[2] == when.isoformat(timespec="microseconds")

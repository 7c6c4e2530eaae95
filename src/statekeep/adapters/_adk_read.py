"""Reading an ADK session's events: only the range a ``GetSessionConfig`` asks for."""

from __future__ import annotations

from typing import Any

from .._core.ranges import SNAPSHOT_ONLY
from .._core.records import Record
from .._store.contract import Store
from ._adk_layout import first_after, instant, session_meta


async def _ordered_tail(
    store: Store, state_id: str, recent: int | None, after: float, low: int, end: int
) -> tuple[dict[str, Any], list[dict[str, Any]]] | tuple[()] | None:
    """The events at or after ``after`` of a session whose timestamps never went back: a
    suffix of its history, read back from the end (16 events, then four times as many each
    round, never before ``low``) until an older event is read. ``()``: no such session; None:
    the session read is not ordered any more (made again meanwhile): read it the other way."""
    limit = instant(after)
    span = max(recent or 0, 16)
    while True:
        start = max(low, end - span)
        record = await store.aread(state_id, since=start)
        if record is None:
            return ()
        meta = session_meta(record.snapshot, state_id)
        assert record.snapshot is not None
        if not meta.get("ordered"):
            return None
        events = _event_entries(record, start)
        if start <= low or (events and instant(events[0]["timestamp"]) < limit):
            events = [event for event in events if instant(event["timestamp"]) >= limit]
            return record.snapshot, events if recent is None else events[max(0, len(events) - recent) :]
        end, span = meta["next"], span * 4


def _event_entries(record: Record, since: int) -> list[dict[str, Any]]:
    return [
        entry["event"]
        for entry in record.entries
        if entry.get("seq", 0) >= since and entry.get("kind") == "event"
    ]


async def read_events(
    store: Store, state_id: str, recent: int | None, after: float | None, hint: int | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The session's snapshot and its events (as stored dicts, in the order appended) that
    ``recent`` (the newest so many; None: all) and ``after`` (at or after that time; None or
    0: any) select, as ADK's ``GetSessionConfig`` says; None if there is no such session.

    Reads the snapshot, then the events from where the wanted ones can start: the newest
    ``recent`` ones, or the first index point before ``after``; further back only if
    events older than ``after`` hide some of the newest ``recent``. ``hint``: where the
    history ended when last seen (it only grows): the newest ``recent`` are then read at once,
    without the snapshot first."""
    if recent is None and not after:
        record = await store.aread(state_id, since=1)
        if record is None:
            return None
        session_meta(record.snapshot, state_id)
        assert record.snapshot is not None
        return record.snapshot, _event_entries(record, 1)
    if recent and not after and hint is not None:
        start = max(1, hint - recent)
        record = await store.aread(state_id, since=start)
        if record is None:
            return None
        session_meta(record.snapshot, state_id)
        assert record.snapshot is not None
        events = _event_entries(record, start)
        if len(events) >= recent or start <= 1:  # else: made again, shorter than the hint
            return record.snapshot, events[-recent:]
    head = await store.aread(state_id, since=SNAPSHOT_ONLY)
    if head is None:
        return None
    meta = session_meta(head.snapshot, state_id)
    assert head.snapshot is not None
    if recent == 0:
        return head.snapshot, []
    low = first_after(meta, after) if after else 1
    end = meta["next"]
    if after and meta.get("ordered"):
        tail = await _ordered_tail(store, state_id, recent, after, low, end)
        if tail is not None:
            return tail if tail else None
    start = low if recent is None else max(low, end - recent)
    limit = instant(after) if after else None
    while True:
        record = await store.aread(state_id, since=start)
        if record is None:
            return None
        snapshot = record.snapshot
        assert snapshot is not None
        events = _event_entries(record, start)
        if limit is not None:
            events = [event for event in events if instant(event["timestamp"]) >= limit]
        if recent is None:
            return snapshot, events
        if len(events) >= recent or start <= low:
            return snapshot, events[len(events) - recent :] if len(events) > recent else events
        end = session_meta(snapshot, state_id)["next"]
        start = max(low, end - 2 * max(end - start, recent))

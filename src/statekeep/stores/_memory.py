"""MemoryStore: the Store contract in this process's memory."""

from __future__ import annotations

from collections.abc import Hashable

import orjson

from .._backend import Backend
from .._records import Record, SavedState, left_out, listing_order
from .._writes import PreparedWrite, check_overlap, exists_error, missing_error, plan_append


class MemoryStore(Backend):
    """Keeps States in this process's memory, for tests and short-lived runs.

    Same contract as every store; nothing is durable: when ``write`` returns the data is
    in this process's memory only, and everything is gone when the process ends. Data is kept encoded, so readers always get fresh copies and the same values a
    file or database store would give back (tuples come back as lists).
    """

    def __init__(self) -> None:
        self._lines: dict[str, list[bytes]] = {}
        self._snapshots: dict[str, bytes | None] = {}

    def __repr__(self) -> str:
        return f"MemoryStore(<{len(self._lines)} States>)"

    def _storage_key(self) -> Hashable:
        return ("memory", id(self))

    async def _write(self, write: PreparedWrite) -> None:
        sid = write.state_id
        lines = self._lines.get(sid)
        if write.create:
            if lines is not None:
                raise exists_error(sid)
            self._lines[sid] = list(write.lines)
            self._snapshots[sid] = write.snapshot
            return
        if lines is None:
            raise missing_error(sid)
        skip = plan_append(write, len(lines))
        check_overlap(write, [orjson.loads(b) for b in lines[write.first_seq : write.first_seq + skip]])
        lines.extend(write.lines[skip:])
        if write.snapshot is not None:
            self._snapshots[sid] = write.snapshot

    async def _read(self, state_id: str) -> Record | None:
        lines = self._lines.get(state_id)
        if lines is None:
            return None
        snapshot = self._snapshots[state_id]
        return Record([orjson.loads(b) for b in lines], None if snapshot is None else orjson.loads(snapshot))

    async def _list(self) -> tuple[list[SavedState], list[str]]:
        rows, skipped = [], []
        for sid, snapshot in self._snapshots.items():
            if snapshot is None:
                continue
            try:
                rows.append(SavedState.from_snapshot(sid, orjson.loads(snapshot)))
            except ValueError as exc:
                skipped.append(left_out(sid, exc))
        return listing_order(rows), skipped

    async def _delete(self, state_id: str) -> None:
        self._lines.pop(state_id, None)
        self._snapshots.pop(state_id, None)

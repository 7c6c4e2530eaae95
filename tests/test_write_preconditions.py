"""The write preconditions under group commit: a write refused by its ``expect_next`` fails
alone, and the writes committed with it in one batch land, on every store."""

from __future__ import annotations

import asyncio

from statekeep import Record, StateConflictError, Store
from tests.conftest import entries, snapshot

IDS = [f"b{i}" for i in range(8)]
STALE = "b3"


async def test_a_refused_write_fails_alone_in_its_batch(store: Store) -> None:
    for sid in IDS:
        await store.awrite(sid, entries(0, 1), snapshot(), create=True)
    writes = [
        store.awrite(sid, entries(1, 1), snapshot(turn=1), expect_next=5 if sid == STALE else 1)
        for sid in IDS
    ]
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    refused = {sid: outcome for sid, outcome in zip(IDS, outcomes, strict=True) if outcome is not None}
    assert list(refused) == [STALE]
    assert isinstance(refused[STALE], StateConflictError)
    assert "has next seq 1, but this write expected 5" in str(refused[STALE])
    for sid in IDS:
        want = Record(entries(0, 1), snapshot()) if sid == STALE else Record(entries(0, 2), snapshot(turn=1))
        assert await store.aread(sid) == want

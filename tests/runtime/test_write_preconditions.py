"""The write preconditions under group commit: a write refused by its ``expect_next`` fails
alone, and the writes committed with it in one batch land, on every store."""

from __future__ import annotations

import asyncio

import pytest

from statekeep import Record, StateConflictError, Store
from statekeep.testing import entries, snapshot

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


OLD = "0" * 32  # an incarnation id


async def test_a_write_for_another_incarnation_is_refused_as_such_before_its_expect_next(
    store: Store,
) -> None:
    """The preconditions run in one order on every store: the incarnation first (a State
    made again is another State, whatever its next seq), then expect_next."""
    await store.awrite("a", entries(0, 3), snapshot(), create=True, incarnation=OLD)
    await store.adelete("a")
    await store.awrite("a", entries(0, 1), snapshot("new"), create=True)
    kept = await store.aread("a")
    with pytest.raises(StateConflictError, match="deleted and created again"):
        await store.awrite("a", entries(3, 1), None, incarnation=OLD, expect_next=3)
    assert kept is not None and kept.incarnation != OLD
    with pytest.raises(StateConflictError, match="has next seq 1, but this write expected 3"):
        await store.awrite("a", entries(3, 1), None, incarnation=kept.incarnation, expect_next=3)
    assert await store.aread("a") == kept

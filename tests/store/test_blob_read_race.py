"""A read whose blobs go between its record and its blobs (the State deleted, trimmed or
rewritten, then gc, in the window between the two) reads the record again: the reader sees
the State as it is now (here: gone), never a MissingBlobError for a healthy store."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

import pytest

from statekeep import MemoryStore


class DeletedBetween(MemoryStore):
    """Deletes the State and collects its blobs between a read's record and its blobs, once."""

    raced = False

    async def _get_blobs(self, names: Collection[str]) -> dict[str, bytes]:
        if not self.raced:
            self.raced = True
            self._space.drop("a")
            await self._gc_blobs(False)
        return await super()._get_blobs(names)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_read_racing_a_delete_and_gc_sees_the_state_gone(mode: str) -> None:
    store = DeletedBetween()
    store.write("a", [{"seq": 0, "kind": "note", "page": "p" * 50_000}], None, create=True)
    if mode == "sync":
        assert store.read("a") is None
    else:
        assert asyncio.run(store.aread("a")) is None
    assert store.raced

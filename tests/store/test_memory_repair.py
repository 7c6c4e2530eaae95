"""Agent memory: a key whose record has entries but no snapshot (what a copy or import
interrupted after its first chunk leaves) is repaired by the next put, on every store."""

from __future__ import annotations

import pytest

from statekeep import DecryptionError, Keyring, MemoryStore, Store
from statekeep._store.agentmemory import key_id
from statekeep._transfer.transfer import memory_view


def leave_headless(store: Store, scope: str, key: str, count: int) -> None:
    """Write ``count`` changes of ``key`` with no snapshot, as an interrupted copy does."""
    view = memory_view(store, scope)
    assert view is not None
    changes = [
        {"seq": i, "kind": "put", "at": "2026-01-01T00:00:00+00:00", "op": f"op{i}"} for i in range(count)
    ]
    view.write(key_id(key), changes, None, create=True)


def test_a_put_repairs_a_key_left_without_a_snapshot(store: Store) -> None:
    leave_headless(store, "s", "prefs", 3)
    memory = store.memory("s")
    assert memory.get("prefs") is None  # no snapshot: no value yet
    item = memory.put("prefs", {"tone": "terse"})
    assert (item.value, item.revision) == ({"tone": "terse"}, 4)  # after the 3 changes kept
    assert memory.get("prefs").value == {"tone": "terse"}  # type: ignore[union-attr]
    assert memory.put("prefs", "again", revision=4).revision == 5
    leave_headless(store, "s", "new", 1)
    assert memory.put("new", 1, revision=0).revision == 2  # revision 0: it has no value yet
    assert [i.key for i in memory.items()] == ["new", "prefs"]


def test_a_put_that_cannot_open_a_key_left_without_a_snapshot_says_why_at_once() -> None:
    sealed = MemoryStore(encrypt=Keyring({"k1": bytes(32)}, current="k1"))
    leave_headless(sealed, "s", "prefs", 2)  # sealed changes, no snapshot
    clear = MemoryStore()
    clear._spaces = sealed._spaces  # the same storage, opened without the key
    with pytest.raises(DecryptionError, match="sealed with key 'k1'"):
        clear.memory("s").put("prefs", 2)
    assert sealed.memory("s").put("prefs", 1).revision == 3

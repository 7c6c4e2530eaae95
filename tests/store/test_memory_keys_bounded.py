"""Agent memory keys keep only their latest changes: 1,000 puts of one key leave a bounded
stored history (and size), on a FileStore and a SQLite file; revisions and their checks are
as they were."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from statekeep import FileStore, MemoryStore, SQLiteStore, StateConflictError, Store
from statekeep._store.agentmemory import KEEP, key_id
from statekeep.stores._fsio import tree_bytes
from tests.support import servers


def made(kind: str, tmp_path: Path) -> Store:
    if kind == "file":
        return FileStore(tmp_path / "store")
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "runs.db")
    if kind == "postgres":
        return servers.postgres_store()  # type: ignore[no-any-return]
    if kind == "redis":
        return servers.redis_store()  # type: ignore[no-any-return]
    return MemoryStore()


def stored_bytes(kind: str, tmp_path: Path) -> int:
    if kind == "file":
        return tree_bytes(tmp_path / "store")
    with sqlite3.connect(tmp_path / "runs.db") as conn:  # the rows, not the file (which reuses freed pages)
        (size,) = conn.execute("SELECT coalesce(sum(length(data)), 0) FROM entries").fetchone()
    return int(size)


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_a_thousand_puts_of_one_key_leave_a_bounded_stored_size(kind: str, tmp_path: Path) -> None:
    value = {"notes": "x" * 200}
    with made(kind, tmp_path) as store:
        memory = store.memory("agent")
        sizes = []
        for i in range(1000):
            item = memory.put("profile", {**value, "n": i})
            sizes.append(stored_bytes(kind, tmp_path))
        assert item.revision == 1000
        # The size a key's history reaches in its first two rounds of KEEP changes is all it
        # ever takes (unbounded, the 1,000th put would hold 1,000 changes: 15 x as much).
        first_rounds = max(sizes[: 2 * KEEP])
        assert max(sizes) <= 1.1 * first_rounds, (first_rounds, max(sizes))
        held = store._sibling(store.namespace + ".memory.agent").read(key_id("profile"))  # type: ignore[attr-defined]
        assert held is not None and len(held.entries) <= KEEP
        assert held.entries[-1]["seq"] == 999
    if kind == "file":
        assert len(list((tmp_path / "store").rglob("log.jsonl"))) == 1


@pytest.mark.parametrize("kind", ["memory", "file", "sqlite", "postgres", "redis"])
def test_revisions_and_their_checks_go_on_across_the_trims(kind: str, tmp_path: Path) -> None:
    with made(kind, tmp_path) as store:
        memory = store.memory()
        for i in range(KEEP * 2 + 3):
            assert memory.put("k", i, revision=i).revision == i + 1
        with pytest.raises(StateConflictError):
            memory.put("k", "stale", revision=KEEP)
        got = memory.get("k")
        assert got is not None and (got.value, got.revision) == (KEEP * 2 + 2, KEEP * 2 + 3)
        memory.delete("k", revision=KEEP * 2 + 3)
        assert memory.get("k") is None
        assert memory.put("k", "again", revision=0).revision == KEEP * 2 + 5
        assert [item.key for item in memory.items()] == ["k"]
        held = store._sibling(store.namespace + ".memory.default").read("k")  # type: ignore[attr-defined]
        assert held is not None and len(held.entries) <= KEEP  # trimmed along the way


class _TrimFailsOnce(SQLiteStore):
    """A SQLite store whose first trim fails as a busy database would."""

    failed = False

    def _sibling(self, namespace: str) -> SQLiteStore:  # agent memory lives in a sibling
        sibling = super()._sibling(namespace)
        sibling.__class__ = _TrimFailsOnce
        return sibling

    async def _trim(self, state_id: str, before: int, base: bytes, first: int) -> None:
        if not _TrimFailsOnce.failed:
            _TrimFailsOnce.failed = True
            raise sqlite3.OperationalError("database is locked")
        await super()._trim(state_id, before, base, first)


def test_a_failed_bounding_leaves_the_put_standing_and_the_next_round_bounds_the_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _TrimFailsOnce.failed = False
    with _TrimFailsOnce(tmp_path / "runs.db") as store:
        memory = store.memory()
        for i in range(KEEP - 1):
            memory.put("k", i)
        with caplog.at_level("WARNING"):
            item = memory.put("k", "bounding fails")  # the KEEP-th: its bounding fails
        assert _TrimFailsOnce.failed and item.revision == KEEP
        assert "memory key" in caplog.text and "database is locked" in caplog.text
        got = memory.get("k")
        assert got is not None and (got.value, got.revision) == ("bounding fails", KEEP)
        held = store._sibling(store.namespace + ".memory.default").read("k")  # type: ignore[attr-defined]
        assert held is not None and len(held.entries) == KEEP  # not bounded yet
        for i in range(KEEP):
            memory.put("k", i)
        held = store._sibling(store.namespace + ".memory.default").read("k")  # type: ignore[attr-defined]
        assert held is not None and len(held.entries) == 1 and held.entries[0]["seq"] == 2 * KEEP - 1
        assert memory.put("k", "on", revision=2 * KEEP).revision == 2 * KEEP + 1

"""Fixtures shared by the test suite: every store, driven through the sync or async API."""

from __future__ import annotations

import asyncio
import gc
import os
import sqlite3
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from statekeep import FileStore, MemoryStore, SQLiteStore, Store
from statekeep import _bridge as bridge
from tests import servers
from tests.servers import postgres_server, redis_server  # noqa: F401  (session fixtures)

# Later backends join the conformance suite by adding a factory here.
STORE_FACTORIES: dict[str, Callable[[Any], Store]] = {
    "memory": lambda tmp_path: MemoryStore(),
    "file": lambda tmp_path: FileStore(tmp_path / "store"),
    "sqlite": lambda tmp_path: SQLiteStore(tmp_path / "store.db"),
    # Throwaway servers (tests/servers.py), started on first use; a schema or key prefix per test.
    "postgres": servers.postgres_store,
    "redis": servers.redis_store,
}


def snapshot(task: str = "task", *, turn: int = 0, updated: str = "2026-01-01T00:00:00+00:00") -> dict:
    """A snapshot that SavedState.from_snapshot accepts."""
    return {
        "task": task,
        "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": updated,
        "turn": turn,
        "stopped_by": None,
        "finished": False,
    }


async def plant_snapshot(store: Store, state_id: str, raw: bytes) -> None:
    """Put ``raw`` in place of a State's stored snapshot through the store's own storage,
    as a hand edit or an older statekeep could have left it (listing columns included)."""
    from statekeep.stores._postgres import PostgresStore, quote_identifier
    from statekeep.stores._redis import RedisStore

    if isinstance(store, MemoryStore):
        store._snapshots[state_id] = raw
    elif isinstance(store, FileStore):
        (store.path / state_id / "snapshot.json").write_bytes(raw)
    elif isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute(
                "UPDATE states SET snapshot = ?, updated_at = ? WHERE id = ?",
                (raw.decode(), orjson.loads(raw).get("updated_at"), state_id),
            )
        conn.close()
    elif isinstance(store, PostgresStore):
        import asyncpg

        conn = await asyncpg.connect(servers.shared_postgres().dsn)
        try:  # the listing columns empty: list() reads the snapshot itself
            await conn.execute(
                f"UPDATE {quote_identifier(store.schema)}.states SET snapshot = $2, task = NULL, "
                "created_at = NULL, updated_at = NULL, turn = NULL, stopped_by = NULL, "
                "finished = NULL, unlisted = NULL WHERE id = $1",
                state_id,
                raw.decode(),
            )
        finally:
            await conn.close()
    elif isinstance(store, RedisStore):
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(servers.shared_redis().url)
        try:
            await client.hset(store.prefix + "state:" + state_id, "snapshot", raw)
        finally:
            await client.aclose()
    else:
        raise AssertionError(f"no way to plant a snapshot in {store!r}")


def entries(start: int, count: int, **extra: Any) -> list[dict]:
    return [{"seq": s, "kind": "note", "text": f"entry {s}", **extra} for s in range(start, start + count)]


@pytest.fixture(params=sorted(STORE_FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Store]:
    s = STORE_FACTORIES[request.param](tmp_path)
    yield s
    s.close()


class Api:
    """One store seen through its sync or its async methods, always awaited by tests.

    The sync methods are called straight from the test's running event loop, which is
    one of the situations they must handle.
    """

    def __init__(self, store: Store, mode: str) -> None:
        self.store, self.mode = store, mode

    async def write(
        self, state_id: str, ents: list[dict], snap: dict | None, *, create: bool = False
    ) -> None:
        if self.mode == "async":
            await self.store.awrite(state_id, ents, snap, create=create)
        else:
            self.store.write(state_id, ents, snap, create=create)

    async def read(self, state_id: str) -> Any:
        return await self.store.aread(state_id) if self.mode == "async" else self.store.read(state_id)

    async def list(self) -> Any:
        return await self.store.alist() if self.mode == "async" else self.store.list()

    async def delete(self, state_id: str) -> None:
        if self.mode == "async":
            await self.store.adelete(state_id)
        else:
            self.store.delete(state_id)


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, store: Store) -> Api:
    return Api(store, request.param)


def is_root() -> bool:
    return os.geteuid() == 0


# -- dropped stores ------------------------------------------------------------------------


def drop_and_collect(stores: list[Store]) -> list[str]:
    """Drop the caller's ``stores`` (the list is emptied), collect garbage, and wait until
    statekeep's loop has closed what they held. Returns the ResourceWarnings raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stores.clear()
        gc.collect()
    owner_loop_settled()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


def owner_loop_settled() -> None:
    """Wait until statekeep's owner loop has finished every task it was given."""

    async def others_done() -> None:
        me = asyncio.current_task()
        while others := [t for t in bridge.owner().tasks if t is not me]:
            await asyncio.wait(others)

    bridge.run_sync(others_done(), "others_done")


def sqlite_looks(path: Path) -> tuple[bytes, str, list[str], list[str]]:
    """What a test compares before and after: the file's bytes, its journal mode, its
    tables, and the files next to it."""
    data = path.read_bytes()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        tables = [n for (n,) in conn.execute("SELECT name FROM sqlite_master ORDER BY name")]
    finally:
        conn.close()
    return data, mode, tables, sorted(os.listdir(path.parent))

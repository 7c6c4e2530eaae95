"""The Store contract (statekeep.testing.StoreContract), run against every built-in store,
through the sync and the async API, with statekeep's own error messages."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sniffio

from statekeep import FileStore, MemoryStore, SQLiteStore, StateConflictError, Store
from statekeep.testing import StoreContract
from tests.stores.file.test_model import FileMachine
from tests.stores.sqlite.test_sqlite import SQLiteMachine
from tests.support import servers
from tests.support.stores import namespace, plant_snapshot


class BuiltinContract(StoreContract):
    statekeep_messages = True
    supports_expect_next = True

    async def plant_snapshot(self, store: Store, state_id: str, raw: bytes) -> None:
        await plant_snapshot(store, state_id, raw)

    @pytest.mark.asyncio
    async def test_here_the_twins_run_under_anyios_plugin(self, request: pytest.FixtureRequest) -> None:
        twin = request.node.name.split("[")[0].endswith("_under_trio")
        assert sniffio.current_async_library() == ("trio" if twin else "asyncio")
        assert bool(request.node.get_closest_marker("anyio")) is twin
        assert bool(request.node.get_closest_marker("asyncio")) is not twin
        # In pytest's own thread: not the twin's fallback (trio in a worker thread), which
        # only pytest-asyncio's auto mode needs.
        assert threading.current_thread() is threading.main_thread()


MEMORY: dict[str, MemoryStore] = {}


class TestMemoryStore(BuiltinContract):
    durable = False
    supports_leases = supports_protection = True
    model_examples, model_steps = 150, 40

    def make_store(self, tmp_path: Path) -> Store:
        return MemoryStore()

    def make_store_with(self, tmp_path: Path, **options: Any) -> Store:
        # One storage per folder, as a durable store has; each call a view of it with its own
        # options (checked as a user's store checks them).
        view = MemoryStore(**options)
        shared = MEMORY.setdefault(str(tmp_path), view)
        view._spaces = shared._spaces
        view._blobs = shared._blobs
        view._space = shared._spaces.setdefault(view.namespace, view._space)
        return view


class TestFileStore(BuiltinContract):
    machine = FileMachine
    supports_leases = supports_protection = True
    model_examples, model_steps = 80, 30

    def make_store(self, tmp_path: Path) -> Store:
        return FileStore(tmp_path / "store")

    def make_store_with(self, tmp_path: Path, **options: Any) -> Store:
        return FileStore(tmp_path / "store", **options)


class TestSQLiteStore(BuiltinContract):
    machine = SQLiteMachine
    supports_leases = supports_protection = True
    model_examples, model_steps = 50, 30

    def make_store(self, tmp_path: Path) -> Store:
        return SQLiteStore(tmp_path / "store.db")

    def make_store_with(self, tmp_path: Path, **options: Any) -> Store:
        return SQLiteStore(tmp_path / "store.db", **options)


class TestPostgresStore(BuiltinContract):
    model_examples, model_steps = 15, 20

    server_clock = True
    supports_leases = supports_protection = True

    def make_store(self, tmp_path: Path) -> Store:
        return servers.postgres_store(schema=namespace(tmp_path))

    def make_store_with(self, tmp_path: Path, **options: Any) -> Store:
        return servers.postgres_store(schema=namespace(tmp_path), **options)

    async def server_now(self, store: Store) -> datetime:
        import asyncpg

        conn = await asyncpg.connect(servers.shared_postgres().dsn)
        try:
            now: datetime = await conn.fetchval("SELECT clock_timestamp()")
        finally:
            await conn.close()
        return now.astimezone(UTC)


class TestRedisStore(BuiltinContract):
    supports_leases = supports_protection = True
    model_examples, model_steps = 15, 20

    server_clock = True

    def make_store(self, tmp_path: Path) -> Store:
        return servers.redis_store(prefix=namespace(tmp_path) + ":")

    def make_store_with(self, tmp_path: Path, **options: Any) -> Store:
        return servers.redis_store(prefix=namespace(tmp_path) + ":", **options)

    async def server_now(self, store: Store) -> datetime:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(servers.shared_redis().url)
        try:
            seconds, micros = await client.time()
        finally:
            await client.aclose()
        return datetime.fromtimestamp(seconds, UTC).replace(microsecond=micros)


def test_conflict_is_a_value_error() -> None:
    assert issubclass(StateConflictError, ValueError)

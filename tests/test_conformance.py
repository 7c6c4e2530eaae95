"""The Store contract (statekeep.testing.StoreContract), run against every built-in store,
through the sync and the async API, with statekeep's own error messages."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest

from statekeep import FileStore, MemoryStore, SQLiteStore, StateConflictError, Store
from statekeep.testing import StoreContract
from tests import servers
from tests.conftest import plant_snapshot
from tests.test_model import FileMachine
from tests.test_sqlite import SQLiteMachine


def lifecycle(store: str, branch: str) -> dict[str, str]:
    """The lifecycle tests a backend still lacks the parts for (its helper's branch adds them)."""
    return {
        "test_expiry_*": f"{store}(retention=, clock=) and expiry on write and gc ({branch})",
        "test_namespace_*": f"{store}(namespace=) ({branch})",
        "test_memory_*": f"{store}._sibling(), which agent memory is built on ({branch})",
    }


def listing_columns(store: str, branch: str) -> dict[str, str]:
    """The tests that need a store's listing rows to carry agent, parent and labels."""
    part = f"{store} listing rows with agent, parent and labels ({branch})"
    names = [
        "test_fields_saved_state_carries_*", "test_fork_copies_the_whole_history_*",
        "test_lineage_child_records_*", "test_lineage_delete_children_*", "test_lineage_list_parent_*",
        "test_query_iter_states_*", "test_query_pages_with_a_filter*", "test_query_rows_carry_*",
    ] + [
        f"test_query_filters_alone_and_combined[*-{case}]"
        for case in (
            "agent", "agent-other", "agent+finished", "agent+label+after", "agent+label+status", "label",
            "label-user", "labels-both", "parent", "parent-deeper", "parent+updated_before",
        )
    ]  # fmt: skip
    return dict.fromkeys(names, part)


def namespace(tmp_path: Path) -> str:
    """A schema or key prefix of its own for each folder, the same for the same folder."""
    return "sk_" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]


class BuiltinContract(StoreContract):
    statekeep_messages = True
    #: Test name prefixes this store does not pass yet, with the part of the store they wait
    #: for: marked xfail(strict), so a test that starts passing fails until its entry goes.
    pending: ClassVar[dict[str, str]] = {}
    #: Test name prefixes that pass already with the generic defaults of the stores' base,
    #: though a pending pattern covers them.
    ready: ClassVar[tuple[str, ...]] = ()

    @pytest.fixture(autouse=True)
    def _pending(self, request: pytest.FixtureRequest) -> None:
        name = request.node.name
        if name.startswith(self.ready):
            return
        for pattern, part in self.pending.items():
            if re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), name):
                request.applymarker(pytest.mark.xfail(reason=f"waits for {part}", strict=True))
                return

    async def plant_snapshot(self, store: Store, state_id: str, raw: bytes) -> None:
        await plant_snapshot(store, state_id, raw)


MEMORY: dict[str, MemoryStore] = {}


class TestMemoryStore(BuiltinContract):
    pending = lifecycle("MemoryStore", "i10-file")
    durable = False
    model_examples, model_steps = 150, 40

    def make_store(self, tmp_path: Path) -> Store:
        return MemoryStore()

    def make_store_with(self, tmp_path: Path, **options: Any) -> Store:
        if "namespace" not in options:
            return MemoryStore(**options)
        # The namespaces of one MemoryStore live in this process's memory: its siblings. The
        # name is checked first as a user's store checks it.
        MemoryStore(namespace=options["namespace"]).close()
        return MEMORY.setdefault(str(tmp_path), MemoryStore())._sibling(options["namespace"])


class TestFileStore(BuiltinContract):
    pending = lifecycle("FileStore", "i10-file")
    machine = FileMachine
    model_examples, model_steps = 80, 30

    def make_store(self, tmp_path: Path) -> Store:
        return FileStore(tmp_path / "store")

    def make_store_with(self, tmp_path: Path, **options: Any) -> Store:
        return FileStore(tmp_path / "store", **options)


class TestSQLiteStore(BuiltinContract):
    machine = SQLiteMachine
    model_examples, model_steps = 50, 30

    def make_store(self, tmp_path: Path) -> Store:
        return SQLiteStore(tmp_path / "store.db")

    def make_store_with(self, tmp_path: Path, **options: Any) -> Store:
        return SQLiteStore(tmp_path / "store.db", **options)


class TestPostgresStore(BuiltinContract):
    model_examples, model_steps = 15, 20

    server_clock = True

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

"""The Store contract (statekeep.testing.StoreContract), run against every built-in store,
through the sync and the async API, with statekeep's own error messages."""

from __future__ import annotations

import hashlib
from pathlib import Path

from statekeep import FileStore, MemoryStore, SQLiteStore, StateConflictError, Store
from statekeep.testing import StoreContract
from tests import servers
from tests.conftest import plant_snapshot
from tests.test_model import FileMachine
from tests.test_sqlite import SQLiteMachine


def namespace(tmp_path: Path) -> str:
    """A schema or key prefix of its own for each folder, the same for the same folder."""
    return "sk_" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]


class BuiltinContract(StoreContract):
    statekeep_messages = True

    async def plant_snapshot(self, store: Store, state_id: str, raw: bytes) -> None:
        await plant_snapshot(store, state_id, raw)


class TestMemoryStore(BuiltinContract):
    durable = False
    model_examples, model_steps = 150, 40

    def make_store(self, tmp_path: Path) -> Store:
        return MemoryStore()


class TestFileStore(BuiltinContract):
    machine = FileMachine
    model_examples, model_steps = 80, 30

    def make_store(self, tmp_path: Path) -> Store:
        return FileStore(tmp_path / "store")


class TestSQLiteStore(BuiltinContract):
    machine = SQLiteMachine
    model_examples, model_steps = 50, 30

    def make_store(self, tmp_path: Path) -> Store:
        return SQLiteStore(tmp_path / "store.db")


class TestPostgresStore(BuiltinContract):
    model_examples, model_steps = 15, 20

    def make_store(self, tmp_path: Path) -> Store:
        return servers.postgres_store(schema=namespace(tmp_path))


class TestRedisStore(BuiltinContract):
    model_examples, model_steps = 15, 20

    def make_store(self, tmp_path: Path) -> Store:
        return servers.redis_store(prefix=namespace(tmp_path) + ":")


def test_conflict_is_a_value_error() -> None:
    assert issubclass(StateConflictError, ValueError)

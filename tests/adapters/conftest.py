"""The adapters' tests get each store in a namespace chosen for them, which an adapter uses
as it is, so a test reads what the adapter wrote through the store it gave it. How an
adapter places its States in a store's ``default`` namespace is tested in test_namespaces.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from statekeep import FileStore, MemoryStore, SQLiteStore, Store
from tests.support.stores import servers

SPACE = "adapted"

FACTORIES: dict[str, Callable[[Any], Store]] = {
    "memory": lambda tmp_path: MemoryStore(namespace=SPACE),
    "file": lambda tmp_path: FileStore(tmp_path / "store", namespace=SPACE),
    "sqlite": lambda tmp_path: SQLiteStore(tmp_path / "store.db", namespace=SPACE),
    "postgres": lambda tmp_path: servers().postgres_store(tmp_path, namespace=SPACE),
    "redis": lambda tmp_path: servers().redis_store(tmp_path, namespace=SPACE),
}


@pytest.fixture(params=sorted(FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Store]:
    s = FACTORIES[request.param](tmp_path)
    yield s
    s.close()

"""Writing your own Store: the derived sync/async methods, and what a subclass must provide."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from statekeep import FileStore, MemoryStore, Record, Store
from tests.conftest import STORE_FACTORIES, drop_and_collect, entries, snapshot


class SyncDictStore(Store):
    """A store written with sync methods only."""

    def __init__(self) -> None:
        self.data: dict[str, Record] = {}

    def write(self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False) -> None:
        old = self.data.get(state_id, Record([], None))
        self.data[state_id] = Record(old.entries + list(entries), snapshot or old.snapshot)

    def read(self, state_id: str) -> Record | None:
        return self.data.get(state_id)


class AsyncDictStore(Store):
    """A store written with async methods only, list and delete included."""

    def __init__(self) -> None:
        self.data: dict[str, Record] = {}
        self.loops: set[asyncio.AbstractEventLoop] = set()

    async def awrite(self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False) -> None:
        self.loops.add(asyncio.get_running_loop())
        old = self.data.get(state_id, Record([], None))
        self.data[state_id] = Record(old.entries + list(entries), snapshot or old.snapshot)

    async def aread(self, state_id: str) -> Record | None:
        return self.data.get(state_id)

    async def alist(self) -> list[Any]:
        return sorted(self.data)

    async def adelete(self, state_id: str) -> None:
        self.data.pop(state_id, None)


async def test_async_methods_derived_from_sync_ones() -> None:
    store = SyncDictStore()
    await store.awrite("a", [{"seq": 0}], {"k": 1})
    assert await store.aread("a") == Record([{"seq": 0}], {"k": 1})


def test_sync_methods_derived_from_async_ones_run_on_one_private_loop() -> None:
    store = AsyncDictStore()
    store.write("a", [{"seq": 0}], None)
    store.write("b", [{"seq": 0}], None)
    assert store.read("a") == Record([{"seq": 0}], None)
    assert store.list() == ["a", "b"]
    store.delete("a")
    assert store.read("a") is None
    assert len(store.loops) == 1


async def test_sync_method_of_async_store_inside_a_running_loop() -> None:
    store = AsyncDictStore()
    store.write("a", [{"seq": 0}], None)  # blocks this loop for the call, but works
    assert store.read("a") == Record([{"seq": 0}], None)


def test_missing_list_and_delete_say_so() -> None:
    store = SyncDictStore()
    with pytest.raises(NotImplementedError, match="SyncDictStore does not support list"):
        store.list()
    with pytest.raises(NotImplementedError, match="SyncDictStore does not support delete"):
        store.delete("a")
    with pytest.raises(NotImplementedError, match="SyncDictStore"):
        asyncio.run(store.alist())


def test_a_store_without_write_or_read_cannot_be_created() -> None:
    class ReadOnly(Store):
        def read(self, state_id: str) -> Record | None:
            return None

    class Nothing(Store):
        pass

    with pytest.raises(TypeError, match=r"ReadOnly must implement write\(\) or awrite\(\)"):
        ReadOnly()
    with pytest.raises(TypeError, match=r"write\(\) or awrite\(\) and read\(\) or aread\(\)"):
        Nothing()


def test_stores_on_the_same_storage_are_equal(tmp_path: Path) -> None:
    assert FileStore(tmp_path / "s") == FileStore(str(tmp_path / "s"))
    assert FileStore(tmp_path / "s") == FileStore(tmp_path / "x" / ".." / "s")
    assert hash(FileStore(tmp_path / "s")) == hash(FileStore(tmp_path / "s"))
    assert FileStore(tmp_path / "s") != FileStore(tmp_path / "t")
    (tmp_path / "link").symlink_to(tmp_path / "s", target_is_directory=True)
    assert FileStore(tmp_path / "link") == FileStore(tmp_path / "s")
    memory = MemoryStore()
    assert memory == memory and memory != MemoryStore()
    assert FileStore(tmp_path / "s") != memory


def test_with_block_closes(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s") as store:
        store.write("a", [], None, create=True)
    with pytest.raises(RuntimeError, match="closed"):
        store.read("a")
    assert FileStore(tmp_path / "s").read("a") == Record([], None)


async def test_async_with_closes() -> None:
    async with MemoryStore() as store:
        await store.awrite("a", [], None, create=True)
    with pytest.raises(RuntimeError, match="closed"):
        await store.aread("a")


@pytest.mark.parametrize("kind", sorted(STORE_FACTORIES))
def test_with_closes_every_builtin_store(tmp_path: Path, kind: str) -> None:
    stores = [STORE_FACTORIES[kind](tmp_path)]
    with stores[0] as store:
        assert store is stores[0]
        store.write("a", entries(0, 1), snapshot(), create=True)
    with pytest.raises(RuntimeError, match="closed"):
        store.read("a")
    del store
    assert drop_and_collect(stores) == []  # closed: nothing left to warn about


@pytest.mark.parametrize("kind", sorted(STORE_FACTORIES))
async def test_async_with_closes_every_builtin_store(tmp_path: Path, kind: str) -> None:
    stores = [STORE_FACTORIES[kind](tmp_path)]
    async with stores[0] as store:
        assert store is stores[0]
        await store.awrite("a", entries(0, 1), snapshot(), create=True)
        assert (await store.aread("a")).entries == entries(0, 1)
    with pytest.raises(RuntimeError, match="closed"):
        await store.aread("a")
    del store
    assert drop_and_collect(stores) == []

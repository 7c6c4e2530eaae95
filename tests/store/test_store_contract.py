"""Writing your own Store: the derived sync/async methods, what a subclass must provide, and
two such stores (sync only, async only) passing the conformance kit."""

from __future__ import annotations

import asyncio
import threading
import warnings
from pathlib import Path
from typing import Any

import orjson
import pytest

from statekeep import (
    FileStore,
    MemoryStore,
    Record,
    SavedState,
    StateConflictError,
    StateExistsError,
    StateNotFoundError,
    Store,
    validate_id,
)
from statekeep.testing import Api, StoreContract, entries, snapshot
from tests.support.settle import drop_and_collect
from tests.support.stores import STORE_FACTORIES


def write_to(data: dict[str, Record], state_id: str, entries: Any, snapshot: Any, create: bool) -> None:
    """The contract's seq rules over ``data``, with public names only, as a store of your own
    would apply them (the docs' "Write your own store" page has one in full)."""
    validate_id(state_id)
    ents = orjson.loads(orjson.dumps(list(entries)))  # copies; tuples become lists
    snap = None if snapshot is None else orjson.loads(orjson.dumps(snapshot))
    seqs = [e.get("seq") for e in ents]
    if not all(type(seq) is int and seq >= 0 for seq in seqs):
        raise ValueError(f"every entry needs an int 'seq' >= 0, got {seqs}")
    first = seqs[0] if seqs else 0
    if seqs != list(range(first, first + len(seqs))):
        raise ValueError(f"the seqs of one write must be consecutive, got {seqs}")
    if create:
        if first != 0:
            raise ValueError(f"a new State's history starts at seq 0, got {first}")
        if state_id in data:
            raise StateExistsError(f"State {state_id!r} already exists")
        data[state_id] = Record(ents, snap)
        return
    if state_id not in data:
        raise StateNotFoundError(f"no State {state_id!r}: use create=True")
    old = data[state_id]
    if first > len(old.entries):
        raise ValueError(f"expected seq {len(old.entries)} next, got seq {first}")
    for entry in ents[: len(old.entries) - first]:
        if canonical(entry) != canonical(old.entries[entry["seq"]]):
            raise StateConflictError(f"State {state_id!r} has another entry at seq {entry['seq']}")
    new = old.entries + ents[len(old.entries) - first :]
    data[state_id] = Record(new, old.snapshot if snap is None else snap)


def canonical(entry: dict[str, Any]) -> bytes:
    return orjson.dumps(entry, option=orjson.OPT_SORT_KEYS)


def read_from(data: dict[str, Record], state_id: str) -> Record | None:
    record = data.get(validate_id(state_id))
    return None if record is None else Record(*orjson.loads(orjson.dumps([record.entries, record.snapshot])))


def rows_of(data: dict[str, Record]) -> list[SavedState]:
    """A listing row for each State with a snapshot; one that cannot be read is left out with a warning."""
    rows = []
    for sid, record in data.items():
        if record.snapshot is not None:
            try:
                rows.append(SavedState.from_snapshot(sid, record.snapshot))
            except ValueError as exc:
                warnings.warn(f"State {sid!r} left out: {exc}", RuntimeWarning, stacklevel=3)
    return rows


class SyncDictStore(Store):
    """A store written with sync methods only, and no list or delete."""

    def __init__(self) -> None:
        self.data: dict[str, Record] = {}
        self.lock = threading.Lock()

    def write(self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False) -> None:
        with self.lock:
            write_to(self.data, state_id, entries, snapshot, create)

    def read(self, state_id: str) -> Record | None:
        with self.lock:
            return read_from(self.data, state_id)


class AsyncDictStore(Store):
    """A store written with async methods only, list and delete included."""

    def __init__(self) -> None:
        self.data: dict[str, Record] = {}
        self.loops: set[asyncio.AbstractEventLoop] = set()

    async def awrite(self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False) -> None:
        self.loops.add(asyncio.get_running_loop())
        write_to(self.data, state_id, entries, snapshot, create)

    async def aread(self, state_id: str) -> Record | None:
        return read_from(self.data, state_id)

    async def alist(self) -> list[Any]:
        return sorted(rows_of(self.data), key=lambda row: (-row.updated_at.timestamp(), row.id))

    async def adelete(self, state_id: str) -> None:
        self.data.pop(validate_id(state_id), None)


class TestSyncDictStore(StoreContract):
    """A store written by subclassing Store as the docs say passes the same suite."""

    durable = supports_list = supports_delete = checks_data = refuses_closed = False
    supports_expiry = supports_namespaces = supports_memory = False

    def make_store(self, tmp_path: Path) -> Store:
        return SyncDictStore()


class TestAsyncDictStore(StoreContract):
    durable = checks_data = refuses_closed = False  # its alist() takes no filters: Store adds them
    supports_expiry = supports_namespaces = supports_memory = False
    supports_trio = False  # its awrite asks asyncio for the running loop

    def make_store(self, tmp_path: Path) -> Store:
        return AsyncDictStore()


class ListingDictStore(SyncDictStore):
    """A store written with sync methods, its list() written without filters or pages."""

    def list(self) -> list[SavedState]:
        with self.lock:
            return rows_of(self.data)  # in no particular order: Store puts them in listing order

    def delete(self, state_id: str) -> None:
        with self.lock:
            self.data.pop(validate_id(state_id), None)


class TestListingDictStore(StoreContract):
    """A plain list() gets the query: filtered and paged by Store, by the rules of every store."""

    durable = checks_data = refuses_closed = False
    supports_expiry = supports_namespaces = supports_memory = False

    def make_store(self, tmp_path: Path) -> Store:
        return ListingDictStore()


def test_a_plain_list_takes_the_query_with_the_same_rules() -> None:
    store = ListingDictStore()
    for i, agent in enumerate(["a", "b", "a"]):
        snap = {**snapshot(f"t{i}", updated=f"2026-01-0{i + 1}T00:00:00+00:00"), "agent": agent}
        store.write(f"s{i}", [{"seq": 0}], snap, create=True)
    assert [r.id for r in store.list(agent="a")] == ["s2", "s0"]
    first = store.list(limit=2)
    assert [r.id for r in first] == ["s2", "s1"] and first.next is not None  # type: ignore[attr-defined]
    assert [r.id for r in store.list(limit=2, after=first.next)] == ["s0"]  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="limit must be"):
        store.list(limit=0)
    assert [r.id for r in asyncio.run(store.alist(agent="b"))] == ["s1"]


class ClaimsDelete(StoreContract):
    """Not collected (no Test prefix): a class whose flags say its store deletes, which it cannot."""

    def make_store(self, tmp_path: Path) -> Store:
        return SyncDictStore()


def test_the_kit_names_the_flag_of_a_capability_the_store_lacks() -> None:
    kit = ClaimsDelete()
    api = Api(SyncDictStore(), "sync")
    with pytest.raises(
        pytest.fail.Exception, match=r"ClaimsDelete.supports_delete says .*set supports_delete = False"
    ):
        asyncio.run(kit.test_delete_absent_id_does_nothing(api))


async def test_async_methods_derived_from_sync_ones() -> None:
    store = SyncDictStore()
    await store.awrite("a", [{"seq": 0}], {"k": 1}, create=True)
    assert await store.aread("a") == Record([{"seq": 0}], {"k": 1})


def test_sync_methods_derived_from_async_ones_run_on_one_private_loop() -> None:
    store = AsyncDictStore()
    store.write("a", [{"seq": 0}], snapshot("a"), create=True)
    store.write("b", [{"seq": 0}], snapshot("b"), create=True)
    assert store.read("a") == Record([{"seq": 0}], snapshot("a"))
    assert [row.id for row in store.list()] == ["a", "b"]
    store.delete("a")
    assert store.read("a") is None
    assert len(store.loops) == 1


async def test_sync_method_of_async_store_inside_a_running_loop() -> None:
    store = AsyncDictStore()
    store.write("a", [{"seq": 0}], None, create=True)  # blocks this loop for the call, but works
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

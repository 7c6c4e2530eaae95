"""StatekeepMemoryStore's own behaviour: its keys (escaped, hashed when long), TTL judged by the
store's clock (a FakeClock the tests move: no waiting), refresh on read only past half the TTL,
compare-and-set with revisions, semantic search, and the errors for bad input. Its agreement
with LangGraph's InMemoryStore is test_langgraph_memory_diff.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import InvalidNamespaceError, Item, PutOp

from statekeep import FileStore, MemoryStore, SQLiteStore, StateConflictError, Store
from statekeep.adapters._langgraph_memory_keys import KEY_ROOM, cost, memory_key
from statekeep.adapters.langgraph import RevisedItem, StatekeepMemoryStore
from statekeep.testing import FakeClock
from tests.adapters.conftest import FACTORIES

CLOCKED: dict[str, Callable[[Path, FakeClock], Store]] = {
    "memory": lambda tmp_path, clock: MemoryStore(clock=clock),
    "file": lambda tmp_path, clock: FileStore(tmp_path / "store", clock=clock),
    "sqlite": lambda tmp_path, clock: SQLiteStore(tmp_path / "store.db", clock=clock),
}


@pytest.fixture(params=sorted(CLOCKED))
def timed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, FakeClock]]:
    clock = FakeClock()
    store = CLOCKED[request.param](tmp_path, clock)
    yield store, clock
    store.close()


def stored_expiry(store: Store, namespace: tuple[str, ...], key: str) -> Any:
    """The expiry the item's record holds, as the store keeps it."""
    from statekeep._store.agentmemory import key_id

    record = store.memory("langgraph")._store.read(key_id(memory_key(namespace, key)))  # type: ignore[attr-defined]
    return None if record is None else record.snapshot.get("expires_at")


# -- keys ----------------------------------------------------------------------------------


def test_a_key_keeps_its_namespace_as_a_prefix_and_long_ones_are_hashed() -> None:
    assert memory_key(("users", "u1"), "prefs") == "users.u1.\x00prefs"
    assert memory_key(("a",), "b.\x00c") != memory_key(("a", "b"), "\x00c")  # the first NUL ends it
    long_key = memory_key(("users", "u1"), "k" * 200)
    assert long_key.startswith("users.u1.") and "\x00" not in long_key and cost(long_key) <= KEY_ROOM
    deep = memory_key(("x" * 40, "y" * 40, "z" * 40), "k")
    assert deep.startswith("x" * 40 + "." + "y" * 40 + ".") and "z" not in deep and cost(deep) <= KEY_ROOM
    assert memory_key(("x" * 40, "y" * 40, "z" * 40), "k2") != deep


def test_long_namespaces_and_keys_are_found_by_every_prefix(tmp_path: Path) -> None:
    lg = StatekeepMemoryStore(SQLiteStore(tmp_path / "s.db"))
    deep = ("é" * 10, "x" * 40, "y" * 40)
    lg.put(deep, "k" * 300, {"v": 1})
    lg.put(deep[:1], "short", {"v": 2})
    for n in range(4):
        assert {i.value["v"] for i in lg.search(deep[:n])} == ({1, 2} if n < 2 else {1})
    assert lg.get(deep, "k" * 300).value == {"v": 1}  # type: ignore[union-attr]
    assert lg.list_namespaces(prefix=deep[:2]) == [deep]
    assert lg.list_namespaces(max_depth=2) == [deep[:1], deep[:2]]


# -- TTL -----------------------------------------------------------------------------------


def test_an_item_expires_by_the_stores_clock_everywhere(timed: tuple[Store, FakeClock]) -> None:
    store, clock = timed
    lg = StatekeepMemoryStore(store, ttl={"default_ttl": 10})
    lg.put(("u",), "short", {"v": 1})
    lg.put(("u",), "forever", {"v": 2}, ttl=None)
    lg.put(("w",), "gone", {"v": 3}, ttl=5)
    clock.advance(timedelta(minutes=10, seconds=1))
    assert lg.get(("u",), "short") is None
    assert [i.key for i in lg.search(("u",))] == ["forever"]
    assert lg.list_namespaces() == [("u",)]
    assert lg.sweep_ttl() == 2  # the two expired records freed
    lg.put(("u",), "short", {"v": 4})  # put again after its expiry: a new item
    item = lg.get(("u",), "short")
    assert item is not None and item.value == {"v": 4} and item.revision == 1  # type: ignore[attr-defined]


def test_a_read_refreshes_only_once_less_than_half_the_ttl_is_left(timed: tuple[Store, FakeClock]) -> None:
    store, clock = timed
    lg = StatekeepMemoryStore(store, ttl={"default_ttl": 10})
    lg.put(("u",), "k", {"v": 1})
    first = stored_expiry(store, ("u",), "k")
    clock.advance(timedelta(minutes=4))  # 6 of 10 minutes left: the read writes nothing
    item = lg.get(("u",), "k")
    assert item is not None and stored_expiry(store, ("u",), "k") == first
    clock.advance(timedelta(minutes=2))  # 4 left: the read moves it 10 minutes on from now
    again = lg.get(("u",), "k")
    assert again is not None and again.revision == item.revision == 1  # type: ignore[attr-defined]
    assert again.updated_at == item.updated_at  # a refresh is no change
    clock.advance(timedelta(minutes=9))  # 15 minutes after the put: alive through the refresh
    assert [i.key for i in lg.search(("u",))] == ["k"]  # a search refreshes too (1 minute left)
    clock.advance(timedelta(minutes=9, seconds=59))
    assert lg.get(("u",), "k", refresh_ttl=False) is not None
    clock.advance(timedelta(seconds=2))
    assert lg.get(("u",), "k") is None


def test_refresh_on_read_false_keeps_the_expiry(timed: tuple[Store, FakeClock]) -> None:
    store, clock = timed
    lg = StatekeepMemoryStore(store, ttl={"default_ttl": 10, "refresh_on_read": False})
    lg.put(("u",), "k", {"v": 1})
    clock.advance(timedelta(minutes=9))
    assert lg.get(("u",), "k") is not None
    clock.advance(timedelta(minutes=1, seconds=1))
    assert lg.get(("u",), "k") is None


def test_ttl_through_the_async_api(timed: tuple[Store, FakeClock]) -> None:
    store, clock = timed
    lg = StatekeepMemoryStore(store)

    async def run() -> None:
        await lg.aput(("u",), "k", {"v": 1}, ttl=1)
        clock.advance(timedelta(seconds=40))  # 20 s left: refreshed to a minute from now
        assert await lg.aget(("u",), "k") is not None
        clock.advance(timedelta(seconds=40))
        assert [i.key for i in await lg.asearch(("u",))] == ["k"]
        clock.advance(timedelta(minutes=2))
        assert await lg.aget(("u",), "k") is None
        assert await lg.asweep_ttl() == 1

    asyncio.run(run())


# -- compare-and-set -----------------------------------------------------------------------


@pytest.mark.parametrize("api", ["sync", "async"])
def test_compare_and_set_with_revisions(store: Store, api: str) -> None:
    lg, other = StatekeepMemoryStore(store), StatekeepMemoryStore(store)

    def call(name: str, *args: Any, **kwargs: Any) -> Any:
        if api == "sync":
            return getattr(lg, name)(*args, **kwargs)
        return asyncio.run(getattr(lg, f"a{name}")(*args, **kwargs))

    call("put", ("u",), "k", {"v": 1}, revision=0)  # only if absent
    with pytest.raises(StateConflictError, match="not at revision 0"):
        call("put", ("u",), "k", {"v": 9}, revision=0)
    item = call("get", ("u",), "k")
    assert isinstance(item, RevisedItem) and isinstance(item, Item) and item.revision == 1
    other.put(("u",), "k", {"v": 2})  # another writer gets ahead
    with pytest.raises(StateConflictError, match=r"'k' in namespace \('u',\) is not at revision 1"):
        call("put", ("u",), "k", {"v": 3}, revision=item.revision)
    assert call("get", ("u",), "k").value == {"v": 2}  # nothing was written
    fresh = call("get", ("u",), "k")
    call("put", ("u",), "k", {"v": 3}, revision=fresh.revision)
    (found,) = call("search", ("u",))
    assert found.revision == 3 and found.value == {"v": 3}
    with pytest.raises(StateConflictError):
        call("delete", ("u",), "k", revision=2)
    call("delete", ("u",), "k", revision=3)
    assert call("get", ("u",), "k") is None
    call("put", ("u",), "k", {"v": 4}, revision=0)  # a deleted item is at revision 0
    assert item == Item(
        namespace=("u",), key="k", value={"v": 1}, created_at=item.created_at, updated_at=item.updated_at
    )


def test_created_at_stays_and_updated_at_moves_across_puts(store: Store) -> None:
    lg = StatekeepMemoryStore(store)
    lg.put(("u",), "k", {"v": 1})
    first = lg.get(("u",), "k")
    lg.put(("u",), "k", {"v": 2})
    second = lg.get(("u",), "k")
    assert first is not None and second is not None
    assert second.created_at == first.created_at and second.updated_at >= first.updated_at
    lg.delete(("u",), "k")
    lg.put(("u",), "k", {"v": 3})
    third = lg.get(("u",), "k")
    assert third is not None and third.created_at >= second.updated_at  # made anew


def test_search_without_a_query_lists_the_most_recently_changed_first(store: Store) -> None:
    lg = StatekeepMemoryStore(store)
    for key in ["a", "b", "c"]:
        lg.put(("u",), key, {"v": key})
    lg.put(("u",), "a", {"v": "again"})
    assert [i.key for i in lg.search(("u",))] == ["a", "c", "b"]
    assert [i.key for i in lg.search(("u",), limit=1, offset=1)] == ["c"]


# -- semantic search -----------------------------------------------------------------------


def letters(texts: list[str]) -> list[list[float]]:
    return [[float(t.count(c)) for c in "abcdefghijklmnopqrstuvwxyz"] for t in texts]


def test_semantic_search_scores_stored_embeddings_without_embedding_again(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> list[list[float]]:
        calls.append(list(texts))
        return letters(texts)

    index: Any = {"embed": embed, "dims": 26, "fields": ["text"]}
    lg = StatekeepMemoryStore(SQLiteStore(tmp_path / "s.db"), index=index)
    lg.put(("docs",), "1", {"text": "apple pie"})
    lg.put(("docs",), "2", {"text": "banana"})
    lg.put(("docs",), "3", {"title": "no text field"})
    lg.put(("docs",), "4", {"text": "apple"}, index=False)
    assert calls == [["apple pie"], ["banana"]]
    # A new store on the same file: the embeddings were stored with the items.
    again = StatekeepMemoryStore(SQLiteStore(tmp_path / "s.db"), index=index)
    found = again.search(("docs",), query="apple", limit=4)
    assert [i.key for i in found[:2]] == ["1", "2"] and found[0].score > found[1].score > 0  # type: ignore[operator]
    assert {i.key for i in found[2:]} == {"3", "4"} and all(i.score is None for i in found[2:])
    assert calls[-1] == ["apple"]  # only the query was embedded


# -- bad input -----------------------------------------------------------------------------


def test_bad_input_is_refused_and_nothing_is_lost(tmp_path: Path) -> None:
    lg = StatekeepMemoryStore(MemoryStore())
    lg.put(("u",), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError, match="periods"):
        lg.put(("u.v",), "k", {"v": 2})
    with pytest.raises(InvalidNamespaceError, match="empty"):
        lg.batch([PutOp((), "k", {"v": 2})])
    with pytest.raises(InvalidNamespaceError, match="langgraph"):
        lg.put(("langgraph",), "k", {"v": 2})
    with pytest.raises(ValueError, match=r"unsupported filter operator '\$in'"):
        lg.search(("u",), filter={"v": {"$in": [1]}})
    with pytest.raises(ValueError, match="ttl must be a number of minutes"):
        lg.put(("u",), "k", {"v": 2}, ttl=-1)
    with pytest.raises(ValueError, match="unknown ttl setting"):
        StatekeepMemoryStore(MemoryStore(), ttl={"default_tll": 5})  # type: ignore[typeddict-unknown-key]
    with pytest.raises(ValueError, match="unknown operation"):
        lg.batch(["get"])  # type: ignore[list-item]
    assert lg.get(("u",), "k").value == {"v": 1}  # type: ignore[union-attr]


@pytest.fixture(params=sorted(FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = FACTORIES[request.param](tmp_path)
    yield s
    s.close()


def test_of_two_writers_at_one_revision_exactly_one_wins(store: Store) -> None:
    first, second = StatekeepMemoryStore(store), StatekeepMemoryStore(store)
    first.put(("u",), "k", {"v": 0})

    async def race() -> list[Any]:
        return await asyncio.gather(
            first.aput(("u",), "k", {"v": 1}, revision=1),
            second.aput(("u",), "k", {"v": 2}, revision=1),
            return_exceptions=True,
        )

    outcomes = asyncio.run(race())
    lost = [o for o in outcomes if isinstance(o, StateConflictError)]
    assert len(lost) == 1 and outcomes.count(None) == 1
    item = first.get(("u",), "k")
    assert item is not None and item.revision == 2  # type: ignore[attr-defined]
    assert item.value == {"v": 1 if outcomes[0] is None else 2}


@pytest.mark.parametrize("kind", ["postgres", "redis"])
def test_a_server_store_expires_items_by_its_own_clock(kind: str, tmp_path: Path) -> None:
    from statekeep._core.records import utc_time
    from statekeep._runtime.bridge import run_sync

    store = FACTORIES[kind](tmp_path)
    try:
        lg = StatekeepMemoryStore(store)
        lg.put(("u",), "brief", {"v": 1}, ttl=1 / 60)  # one second
        lg.put(("u",), "kept", {"v": 2})
        expires = utc_time(stored_expiry(store, ("u",), "brief"))
        deadline = time.monotonic() + 60
        while run_sync(store._server_now(), "aread") <= expires:  # type: ignore[attr-defined]  # polled: the server judges
            assert time.monotonic() < deadline, "the server clock never reached the expiry"
            time.sleep(0.05)
        assert lg.get(("u",), "brief") is None
        assert [i.key for i in lg.search(("u",))] == ["kept"]
        lg.sweep_ttl()
        assert [i.key for i in lg.search(("u",))] == ["kept"]
    finally:
        store.close()


def test_a_redacting_store_masks_secret_fields_of_an_items_value() -> None:
    from statekeep._core.redactor import Redactor

    lg = StatekeepMemoryStore(MemoryStore(redact=Redactor()))
    lg.put(("users", "u1"), "prefs", {"token": "sk-live-1", "shade": "blue"})
    item = lg.get(("users", "u1"), "prefs")
    assert item is not None and item.value == {"token": "[REDACTED]", "shade": "blue"}
    assert [i.key for i in lg.search(("users",), filter={"shade": "blue"})] == ["prefs"]

"""The namespace and agent memory part of the Store contract: two namespaces on one storage
never see each other's States, listings, memory or gc; ``store.memory(scope)`` is a revisioned
key/value store (sync and async)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from .._core.errors import StateConflictError
from .._core.records import Record
from .._store.agentmemory import Item, Memory
from .._store.contract import Store
from ._helpers import Api, entries, snapshot

asyncio_test = pytest.mark.asyncio


class MemoryApi:
    """One :class:`Memory` seen through its sync or its async methods."""

    def __init__(self, memory: Memory, mode: str) -> None:
        self.memory, self.mode = memory, mode

    async def get(self, key: str) -> Item | None:
        return await self.memory.aget(key) if self.mode == "async" else self.memory.get(key)

    async def put(self, key: str, value: Any, **options: Any) -> Item:
        if self.mode == "async":
            return await self.memory.aput(key, value, **options)
        return self.memory.put(key, value, **options)

    async def delete(self, key: str, **options: Any) -> None:
        if self.mode == "async":
            await self.memory.adelete(key, **options)
        else:
            self.memory.delete(key, **options)

    async def items(self, **options: Any) -> list[Item]:
        if self.mode == "async":
            return await self.memory.aitems(**options)  # type: ignore[return-value]
        return self.memory.items(**options)  # type: ignore[return-value]


class SpacesContract:
    """Mixed into :class:`StoreContract`: namespaces and agent memory."""

    #: The store takes ``namespace=`` (see :meth:`ExpiryContract.make_store_with`).
    supports_namespaces: ClassVar[bool] = True
    #: The store has ``memory(scope)``.
    supports_memory: ClassVar[bool] = True
    supports_expiry: ClassVar[bool]
    supports_list: ClassVar[bool]
    server_clock: ClassVar[bool]
    durable: ClassVar[bool]

    if TYPE_CHECKING:

        def needs(self, *flags: str) -> None: ...
        def make_store(self, tmp_path: Path) -> Store: ...
        def make_store_with(self, tmp_path: Path, **options: Any) -> Store: ...
        async def server_now(self, store: Store) -> datetime: ...

    def memory_api(self, api: Api, scope: str = "default") -> MemoryApi:
        self.needs("supports_memory")
        return MemoryApi(api.store.memory(scope), api.mode)

    # -- namespaces -----------------------------------------------------------------------

    @pytest.mark.parametrize("mode", ["sync", "async"])
    @asyncio_test
    async def test_namespace_states_and_listings_are_isolated(self, tmp_path: Path, mode: str) -> None:
        self.needs("supports_namespaces")
        stores = [self.make_store_with(tmp_path, namespace=name) for name in ("default", "team-a", "b_2")]
        try:
            default, team_a, b2 = (Api(s, mode) for s in stores)
            assert [s.namespace for s in stores] == ["default", "team-a", "b_2"]  # type: ignore[attr-defined]
            for n, api in enumerate((default, team_a, b2)):
                await api.write("same-id", entries(0, n + 1), snapshot(f"in {n}"), create=True)
            await team_a.write("only-a", entries(0, 1), snapshot("a"), create=True)
            assert await default.read("same-id") == Record(entries(0, 1), snapshot("in 0"))
            assert await b2.read("same-id") == Record(entries(0, 3), snapshot("in 2"))
            assert await default.read("only-a") is None and await b2.read("only-a") is None
            if self.supports_list:
                assert sorted(r.id for r in await team_a.list()) == ["only-a", "same-id"]
                assert [r.id for r in await b2.list()] == ["same-id"]
            await team_a.delete("same-id")
            assert await team_a.read("same-id") is None
            assert await default.read("same-id") is not None and await b2.read("same-id") is not None
            if not self.durable:
                return
            with self.make_store(tmp_path) as plain:
                assert plain.namespace == "default"  # type: ignore[attr-defined]
                assert plain.read("same-id") == Record(entries(0, 1), snapshot("in 0"))
                assert plain.read("only-a") is None
        finally:
            for store in stores:
                store.close()

    @pytest.mark.parametrize("bad", ["", "Team", "a.b", "-x", "_x", "a b", "é", "x" * 64, "default.memory.x"])
    def test_namespace_names_are_checked(self, tmp_path: Path, bad: str) -> None:
        self.needs("supports_namespaces")
        with pytest.raises(ValueError, match="namespace"):
            self.make_store_with(tmp_path, namespace=bad).close()

    @asyncio_test
    async def test_namespace_gc_removes_only_its_own(self, tmp_path: Path) -> None:
        self.needs("supports_namespaces", "supports_expiry")
        from ._expiry import FakeClock, Timeline, expiring

        clock = None if self.server_clock else FakeClock()
        extra = {} if clock is None else {"clock": clock}
        a = self.make_store_with(tmp_path, namespace="a", **extra)
        b = self.make_store_with(tmp_path, namespace="b", **extra)
        try:
            line = Timeline(self, a, clock)  # type: ignore[arg-type]
            soon = await line.now() + line.span
            for store in (a, b):
                store.write("gone", entries(0, 1), expiring("gone", soon), create=True)
            await line.reach(soon)
            assert a.gc() == 1
            assert b.read("gone") is None  # expired there too: absent, but still b's to collect
            assert b.gc() == 1 and a.gc() == 0
        finally:
            a.close()
            b.close()

    @asyncio_test
    async def test_namespace_memory_is_per_namespace_and_never_listed(self, tmp_path: Path) -> None:
        self.needs("supports_namespaces", "supports_memory")
        a = self.make_store_with(tmp_path, namespace="a")
        b = self.make_store_with(tmp_path, namespace="b")
        try:
            a.memory().put("fact", "from a")
            assert b.memory().get("fact") is None
            assert a.memory("other").get("fact") is None
            got = a.memory().get("fact")
            assert got is not None and got.value == "from a"
            if self.supports_list:
                assert a.list() == [] and b.list() == []
            assert a.read("fact") is None
        finally:
            a.close()
            b.close()

    # -- agent memory -----------------------------------------------------------------------

    @asyncio_test
    async def test_memory_put_get_with_revisions(self, api: Api) -> None:
        mem = self.memory_api(api)
        assert await mem.get("fact") is None
        first = await mem.put("fact", {"likes": ["tea"]})
        assert (first.key, first.value, first.revision) == ("fact", {"likes": ["tea"]}, 1)
        assert first.updated_at.utcoffset() == timedelta(0)
        assert await mem.get("fact") == first
        second = await mem.put("fact", {"likes": ["coffee"]}, revision=1)
        assert second.revision == 2
        with pytest.raises(StateConflictError, match="revision"):
            await mem.put("fact", "stale", revision=1)
        with pytest.raises(StateConflictError):
            await mem.put("fact", "must be new", revision=0)
        assert await mem.get("fact") == second  # nothing written
        assert (await mem.put("fact", "anything")).revision == 3  # no revision: last write wins
        new = await mem.put("other", 1, revision=0)  # 0: must not exist yet
        assert new.revision == 1
        with pytest.raises(ValueError, match="revision"):
            await mem.put("fact", 1, revision=-1)

    @asyncio_test
    async def test_memory_delete_with_revisions(self, api: Api) -> None:
        mem = self.memory_api(api)
        await mem.put("k", "v")
        await mem.put("k", "w")
        with pytest.raises(StateConflictError):
            await mem.delete("k", revision=1)
        assert (await mem.get("k")).value == "w"  # type: ignore[union-attr]
        await mem.delete("k", revision=2)
        assert await mem.get("k") is None
        await mem.delete("k")  # a missing key is no error
        await mem.delete("never-there")
        again = await mem.put("k", "back", revision=0)  # deleted: as if never put
        assert again.value == "back" and (await mem.get("k")) == again

    @asyncio_test
    async def test_memory_values_are_copies(self, api: Api) -> None:
        mem = self.memory_api(api)
        value: dict[str, Any] = {"list": [1]}
        item = await mem.put("k", value)
        value["list"].append(2)
        item.value["list"].append(3)
        got = await mem.get("k")
        assert got is not None and got.value == {"list": [1]}
        got.value["list"].append(4)
        assert (await mem.get("k")).value == {"list": [1]}  # type: ignore[union-attr]
        with pytest.raises(TypeError):
            await mem.put("k", {1, 2})
        assert (await mem.get("k")).revision == 1  # type: ignore[union-attr]

    @asyncio_test
    async def test_memory_keys_any_text(self, api: Api) -> None:
        mem = self.memory_api(api)
        for key in ("a", "user:42/name", "ключ", "with space", "A-b_c.d"):
            await mem.put(key, key)
        for key in ("a", "user:42/name", "ключ", "with space", "A-b_c.d"):
            assert (await mem.get(key)).value == key  # type: ignore[union-attr]
        for bad in ("", "x" * 200):
            with pytest.raises(ValueError, match="key"):
                await mem.put(bad, 1)

    @asyncio_test
    async def test_memory_items_prefix_and_pages(self, api: Api) -> None:
        self.needs("supports_list", "supports_query")
        mem = self.memory_api(api)
        for key in ("user:1", "user:2", "user:3", "team:1"):
            await mem.put(key, key.upper())
        await mem.delete("user:2")
        everything = await mem.items()
        assert sorted(i.key for i in everything) == ["team:1", "user:1", "user:3"]
        times = [i.updated_at for i in everything]
        assert times == sorted(times, reverse=True)  # most recently changed first
        assert sorted(i.key for i in await mem.items(prefix="user:")) == ["user:1", "user:3"]
        assert await mem.items(prefix="nobody") == []
        walked: list[str] = []
        after = None
        while True:
            page = await mem.items(limit=2, after=after)
            assert len(page) <= 2
            walked += [i.key for i in page]
            after = page.next  # type: ignore[attr-defined]
            if after is None:
                break
        assert walked == [i.key for i in everything]

    @asyncio_test
    async def test_memory_scopes_are_separate_and_not_states(self, api: Api) -> None:
        notes, prefs = self.memory_api(api, "notes"), self.memory_api(api, "prefs")
        await notes.put("k", "note")
        assert await prefs.get("k") is None
        assert await api.read("k") is None
        if self.supports_list:
            assert await api.list() == []
        with pytest.raises(ValueError, match="namespace"):
            api.store.memory("Not Valid")

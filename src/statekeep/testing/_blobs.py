"""The blob part of the contract (large values stored once): run on a store that offers the
capability group ``blobs`` (``_get_blobs``, ``_gc_blobs``, ``_blob_usage``), skipped, saying
so, on one that does not. Values are sized against the default ``offload=`` bound (32 KiB);
the tests that need other options open stores through ``make_store_with(tmp_path, **options)``
(``offload``, ``encrypt``, ``namespace``) and are skipped where it is not defined."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import orjson
import pytest

from .._core.blobs import DEFAULT_OFFLOAD, wanted
from .._protect.sealing import Keyring
from .._run.state import State, agent_info
from .._runtime.bridge import run_sync
from .._store.blobs import Blobs
from .._store.capabilities import capabilities
from .._store.contract import Store
from ._helpers import Api, snapshot

asyncio_test = pytest.mark.asyncio
BOUND = DEFAULT_OFFLOAD


def text(size: int, seed: str = "a") -> str:
    """A str whose JSON encoding is exactly ``size`` bytes (``size`` >= 2), distinct per ``seed``."""
    body = (hashlib.sha256(seed.encode()).hexdigest() * (size // 64 + 1))[: size - 2]
    return body


def usage(store: Store) -> tuple[int, int]:
    """(blobs, bytes) the store holds."""
    assert isinstance(store, Blobs)
    return run_sync(store._blob_usage(), "stats")


class BlobContract:
    """Mixed into :class:`StoreContract`: offload, dedup, range reads and load across
    references, ``gc`` of blobs (also beside a writer in another thread), sealed blobs."""

    #: Blob gc beside a writer: the writer's rounds (each a create that refers to a blob gc
    #: may be removing), and gc's rounds.
    blob_race_rounds: ClassVar[int] = 40

    if TYPE_CHECKING:

        def needs(self, *flags: str) -> None: ...
        def make_store(self, tmp_path: Path) -> Store: ...

    def blob_store(self, store: Store) -> Store:
        if not isinstance(store, Blobs):
            pytest.skip(f"{type(store).__name__} stores no blobs (capability group 'blobs')")
        return store

    def blob_store_with(self, tmp_path: Path, **options: Any) -> Store:
        """A store opened with ``options`` (a store that offers no blobs: skipped, before
        it is asked to take options it may not know)."""
        make = getattr(self, "make_store_with", None)
        if make is None:
            pytest.skip(f"{type(self).__name__} defines no make_store_with()")
        probe = self.make_store(tmp_path / "blob-probe")
        offers = isinstance(probe, Blobs)
        probe.close()
        if not offers:
            pytest.skip(f"{type(probe).__name__} stores no blobs (capability group 'blobs')")
        return self.blob_store(make(tmp_path, **options))

    # -- offload and reads ---------------------------------------------------------------

    @asyncio_test
    async def test_blobs_large_values_round_trip(self, api: Api) -> None:
        store = self.blob_store(api.store)
        big = text(BOUND + 100, "s")
        obj = {"page": text(BOUND * 2, "o"), "meta": {"n": 1}}
        arr = [text(BOUND // 2, "x"), text(BOUND // 2, "y"), 3]
        nested = {"messages": [{"role": "tool", "content": big}, {"role": "user", "content": "hi"}]}
        ents = [
            {"seq": 0, "kind": "task", "text": big},
            {"seq": 1, "kind": "note", "obj": obj, "arr": arr},
            {"seq": 2, "kind": "note", "nested": nested, "small": "s"},
        ]
        await api.write("r", ents, snapshot(), create=True)
        assert await api.read("r") == await api.read("r")
        got = await api.read("r")
        assert got is not None and got.entries == ents
        assert usage(store)[0] >= 3  # the string, the object's page, the array: stored apart

    @asyncio_test
    async def test_blobs_bound_is_exclusive(self, api: Api) -> None:
        """A value whose encoding is exactly the bound stays inline; one byte more is a blob."""
        store = self.blob_store(api.store)
        await api.write(
            "at", [{"seq": 0, "kind": "note", "text": text(BOUND, "at")}], snapshot(), create=True
        )
        assert usage(store) == (0, 0)
        above = text(BOUND + 1, "above")
        await api.write("above", [{"seq": 0, "kind": "note", "text": above}], snapshot(), create=True)
        assert usage(store) == (1, BOUND + 1) or usage(store)[0] == 1
        got = await api.read("above")
        assert got is not None and got.entries[0]["text"] == above

    @asyncio_test
    async def test_blobs_equal_values_cost_no_new_bytes(self, api: Api) -> None:
        store = self.blob_store(api.store)
        big = {"page": text(BOUND * 3, "dedup")}
        await api.write("one", [{"seq": 0, "kind": "note", "v": big}], snapshot(), create=True)
        before = usage(store)
        await api.write("one", [{"seq": 1, "kind": "note", "v": big}], snapshot())
        await api.write("two", [{"seq": 0, "kind": "note", "v": big}], snapshot(), create=True)
        assert usage(store) == before == (1, before[1])
        for sid, count in (("one", 2), ("two", 1)):
            got = await api.read(sid)
            assert got is not None and [e["v"] for e in got.entries] == [big] * count

    @asyncio_test
    async def test_blobs_range_reads_resolve(self, api: Api) -> None:
        self.blob_store(api.store)
        ents = [{"seq": i, "kind": "note", "text": text(BOUND + 10 + i, str(i))} for i in range(6)]
        await api.write("r", ents[:3], snapshot(), create=True)
        await api.write("r", ents[3:], snapshot())
        for since in (0, 1, 4, 5, 6):
            got = await api.read("r", since=since)
            assert got is not None and got.entries == ents[since:]

    @asyncio_test
    async def test_blobs_load_sees_the_values(self, api: Api) -> None:
        self.blob_store(api.store)
        page = text(200_000, "page")
        state = State("browse", id="b")
        state.begin_run(agent_info("browser", "model"))
        for turn in range(3):
            state.request("model")
            state.add_reply("", [{"id": f"call-{turn}", "name": "fetch", "args": {}}])
            state.add_tool_result(f"call-{turn}", page)
        await api.save(state)
        loaded = await api.load("b")
        assert loaded.history == state.history
        assert loaded.messages == state.messages

    @asyncio_test
    async def test_blobs_a_fork_holds_the_values_and_keeps_them_from_gc(self, api: Api) -> None:
        # Server stores copy a fork's entries inside the database: the copy must match the
        # stored lines (references, not values) and make the fork a referrer of their blobs.
        store = self.blob_store(api.store)
        page = text(BOUND * 2, "forked")
        state = State("browse", id="src")
        state.begin_run(agent_info("browser", "model"))
        state.request("model")
        state.add_reply("", [{"id": "c1", "name": "fetch", "args": {}}])
        state.add_tool_result("c1", page)
        await api.save(state)
        fork = await api.fork("src", new_id="copy")
        await api.delete("src")
        await api.gc()
        loaded = await api.load("copy")
        assert loaded.history[1:] == state.history[1:] and fork.id == "copy"
        assert usage(store)[0] == 1

    # -- nested blobs: a blob whose own bytes refer to another --------------------------

    @pytest.mark.parametrize("mode", ["sync", "async"])
    @asyncio_test
    async def test_blobs_a_nested_value_survives_trim_then_gc(self, tmp_path: Path, mode: str) -> None:
        """A kept entry refers to a blob only through the blob that holds it (its line shows
        the outer name alone, and lists both): a trim that removes an entry naming the inner
        one directly, then gc, leave both, and the State loads whole."""
        api = Api(self.blob_store_with(tmp_path, offload=NESTED_BOUND), mode)
        try:
            if "trim" not in capabilities(api.store):
                pytest.skip(f"{type(api.store).__name__} does not offer trim()")
            value = nested_value("trim")
            state = State("browse", id="n")
            _tool_turn(state, "c1", value["page"])  # removed by the trim: the page's blob alone
            through = len(state.history) - 1
            state.compact("the story so far", through=through)
            _tool_turn(state, "c2", value)  # kept: the page's blob only inside the value's
            await api.save(state)
            if mode == "async":
                await api.store.atrim("n", before=through + 1)
            else:
                api.store.trim("n", before=through + 1)
            await api.gc()
            loaded = await api.load("n")
            assert _results(loaded) == [value]
            assert usage(api.store)[0] == 2  # the value's blob and the page's
        finally:
            await api.store.aclose()

    @pytest.mark.parametrize("mode", ["sync", "async"])
    @asyncio_test
    async def test_blobs_a_fork_of_a_nested_value_survives_the_sources_delete_and_gc(
        self, tmp_path: Path, mode: str
    ) -> None:
        """A fork refers to every blob the copied lines list, the inner ones of a nested value
        too: the source deleted and gc run, the fork loads whole."""
        self.needs("supports_delete")
        api = Api(self.blob_store_with(tmp_path, offload=NESTED_BOUND), mode)
        try:
            value = nested_value("fork")
            state = State("browse", id="src")
            _tool_turn(state, "c1", value)
            await api.save(state)
            await api.fork("src", new_id="copy")
            await api.delete("src")
            await api.gc()
            loaded = await api.load("copy")
            assert _results(loaded) == [value]
            assert usage(api.store)[0] == 2
        finally:
            await api.store.aclose()

    @asyncio_test
    async def test_blobs_a_users_own_ref_key_is_refused(self, api: Api) -> None:
        self.blob_store(api.store)
        with pytest.raises(ValueError, match=r"sk\.blob"):
            await api.write("r", [{"seq": 0, "kind": "note", "v": {"sk.blob": "x"}}], snapshot(), create=True)
        assert await api.read("r") is None

    @pytest.mark.parametrize("mode", ["sync", "async"])
    @asyncio_test
    async def test_blobs_offload_none_keeps_values_inline(self, tmp_path: Path, mode: str) -> None:
        api = Api(self.blob_store_with(tmp_path, offload=None), mode)
        try:
            big = text(BOUND * 4, "inline")
            await api.write("r", [{"seq": 0, "kind": "note", "text": big}], snapshot(), create=True)
            assert usage(api.store) == (0, 0)
            got = await api.read("r")
            assert got is not None and got.entries[0]["text"] == big
        finally:
            await api.store.aclose()

    @pytest.mark.parametrize("mode", ["sync", "async"])
    @asyncio_test
    async def test_blobs_offload_is_checked(self, tmp_path: Path, mode: str) -> None:
        for bad in (-1, 0, 10, "32768", 1.5, True):
            with pytest.raises(ValueError, match="offload"):
                self.blob_store_with(tmp_path, offload=bad).close()

    # -- gc --------------------------------------------------------------------------------

    @asyncio_test
    async def test_blobs_gc_removes_only_unreferenced(self, api: Api) -> None:
        store = self.blob_store(api.store)
        self.needs("supports_delete")
        kept, dropped = text(BOUND * 2, "kept"), text(BOUND * 3, "dropped")
        await api.write("keep", [{"seq": 0, "kind": "note", "v": kept}], snapshot(), create=True)
        await api.write("drop", [{"seq": 0, "kind": "note", "v": dropped}], snapshot(), create=True)
        assert usage(store)[0] == 2
        assert (await api.gc(dry_run=True)).blobs == 0  # type: ignore[attr-defined]
        await api.delete("drop")
        counted = await api.gc(dry_run=True)
        assert (counted.blobs, counted.blob_bytes) == (1, usage(store)[1] - len(orjson.dumps(kept)))  # type: ignore[attr-defined]
        assert usage(store)[0] == 2  # a dry run removes nothing
        removed = await api.gc()
        assert int(removed) == 0 and removed.blobs == 1  # type: ignore[attr-defined]
        assert usage(store)[0] == 1
        got = await api.read("keep")
        assert got is not None and got.entries[0]["v"] == kept
        # Written again after gc: stored again, reads back.
        await api.write("again", [{"seq": 0, "kind": "note", "v": dropped}], snapshot(), create=True)
        got = await api.read("again")
        assert got is not None and got.entries[0]["v"] == dropped

    @asyncio_test
    async def test_blobs_gc_beside_a_writer_loses_nothing(self, api: Api) -> None:
        """A writer thread creates States that refer to blobs (new ones, and ones gc may be
        removing: each value is written, its State deleted, then written again) while gc
        runs in another thread; every State left reads back whole."""
        store = self.blob_store(api.store)
        self.needs("supports_delete")
        rounds = self.blob_race_rounds
        values = [text(BOUND + 50, f"race-{i % 4}") for i in range(rounds)]
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def writer() -> None:
            try:
                start.wait()
                for i, value in enumerate(values):
                    store.write(f"w{i}", [{"seq": 0, "kind": "note", "v": value}], snapshot(), create=True)
                    if i % 2:
                        store.delete(f"w{i}")  # its blob unreferenced (unless another State has it)
            except BaseException as exc:  # reported below
                errors.append(exc)

        def collector() -> None:
            try:
                start.wait()
                for _ in range(rounds):
                    store.gc()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=writer), threading.Thread(target=collector)]
        _run_all(threads)  # (the sync API, from other threads: this loop may wait for them)
        assert errors == []
        for i, value in enumerate(values):
            got = await api.read(f"w{i}")
            assert (got is None) == bool(i % 2)
            if got is not None:
                assert got.entries[0]["v"] == value
        await api.gc()
        for i in range(0, rounds, 2):
            got = await api.read(f"w{i}")
            assert got is not None and got.entries[0]["v"] == values[i]

    # -- encryption ------------------------------------------------------------------------

    @pytest.mark.parametrize("mode", ["sync", "async"])
    @asyncio_test
    async def test_blobs_sealed_and_named_per_namespace(self, tmp_path: Path, mode: str) -> None:
        ring = Keyring({"k1": bytes(range(32))}, "k1")
        big = text(BOUND * 2, "secret-value")
        a = Api(self.blob_store_with(tmp_path, encrypt=ring), mode)
        stores = [a.store]
        try:
            await a.write("x", [{"seq": 0, "kind": "note", "v": big}], snapshot(), create=True)
            await a.write("y", [{"seq": 0, "kind": "note", "v": big}], snapshot(), create=True)
            assert usage(a.store)[0] == 1  # deduplicated within the namespace
            blobs = _all_blobs(a.store)
            ((name, stored),) = blobs.items()
            assert name != hashlib.sha256(orjson.dumps(big)).hexdigest()  # an HMAC, not a plain hash
            assert big[:40].encode() not in stored  # sealed
            got = await a.read("y")
            assert got is not None and got.entries[0]["v"] == big
            try:
                other = self.blob_store_with(tmp_path, encrypt=ring, namespace="other")
            except TypeError:
                return  # no namespaces: nothing more to see
            stores.append(other)
            b = Api(other, mode)
            await b.write("x", [{"seq": 0, "kind": "note", "v": big}], snapshot(), create=True)
            assert usage(a.store)[0] == 2  # another namespace: another name (no equality shown)
            got = await b.read("x")
            assert got is not None and got.entries[0]["v"] == big
        finally:
            for store in stores:
                await store.aclose()


#: An ``offload=`` bound under which :func:`nested_value` is stored as a blob whose own bytes
#: refer to another (offload works innermost first).
NESTED_BOUND = 1024


def nested_value(seed: str) -> dict[str, str]:
    """A page above :data:`NESTED_BOUND` (a blob of its own) beside two values below it, which
    together are above it too: the page's reference held in the outer value's blob."""
    return {"page": text(5000, seed + "-page"), "a": text(700, seed + "-a"), "b": text(700, seed + "-b")}


def _tool_turn(state: State, call_id: str, result: Any) -> None:
    state.begin_run(agent_info("browser", "model"))
    state.request("model")
    state.add_reply("", [{"id": call_id, "name": "fetch", "args": {}}])
    state.add_tool_result(call_id, result)
    state.stop("limit", answer="")


def _results(state: State) -> list[Any]:
    """The tool results of ``state`` still in its history, in order."""
    return [e["output"] for e in state.history if e["kind"] == "tool_result"]


def _run_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _all_blobs(store: Store) -> dict[str, bytes]:
    """Every blob the store holds, found by the names its States' stored lines list."""
    assert isinstance(store, Blobs)
    names: set[str] = set()
    raw: Callable[[str], Any] = getattr(store, "_read")  # noqa: B009  # the engine's, not in the Store contract
    for row in store.list():
        record = run_sync(raw(row.id), "aread")
        record = record() if callable(record) else record
        names |= wanted(record.entries)
    return run_sync(store._get_blobs(names), "aread")

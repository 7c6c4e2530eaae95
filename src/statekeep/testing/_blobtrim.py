"""The contract of trim and blobs together (issue 24): a trimmed State's base record stores its
large data values as blobs, as any entry does (stored once, kept by gc while the base refers
to them, removed after the State's delete); the blobs only removed entries referred to are
collected after a trim, on a clear store and on an encrypted one (whose sealed lines list
their blob names in clear); and a trimmed State with a blob re-sealed by ``rekey``. Run on a
store offering both capability groups, "trim" and "blobs", through the sync and async API."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from .._core.blobs import REFS, wanted
from .._core.errors import DecryptionError
from .._protect.rekey import arekey, rekey
from .._protect.sealing import Keyring
from .._run.state import State, agent_info
from .._runtime.bridge import run_sync
from .._store.capabilities import capabilities
from .._store.contract import Store
from ._blobs import BOUND, text, usage
from ._expiry import Timeline, expiring
from ._helpers import Api, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractAsyncContextManager

asyncio_test = pytest.mark.asyncio
MODES = pytest.mark.parametrize("mode", ["sync", "async"])
SEALING = pytest.mark.parametrize("sealed", [False, True], ids=["clear", "sealed"])
K1, K2 = bytes(range(32)), bytes(range(32, 64))
RING = Keyring({"k1": K1}, "k1")
#: A data value of 100 KB: above the default bound, stored once as a blob.
VALUE_SIZE = 100_000


def page_run(sid: str, value: str, page: str) -> tuple[State, int]:
    """A State holding ``value`` as data and ``page`` as a tool result, both before a
    compaction (so a trim removes the entries holding them), then one kept turn."""
    state = State("browse", id=sid)
    state.set_data("page", value)
    state.begin_run(agent_info("browser", "model"))
    state.request("model")
    state.add_reply("", [{"id": "c1", "name": "fetch", "args": {}}])
    state.add_tool_result("c1", page)
    state.stop("limit", answer="")
    through = len(state.history) - 1
    state.compact("the story so far", through=through)
    state.add_user("and now?")
    return state, through


def stored_lines(store: Store, sid: str) -> list[dict[str, Any]]:
    """The State's entries as the store holds them (references, sealed lines), not opened."""
    raw: Callable[[str], Any] = getattr(store, "_read")  # noqa: B009  # the engine's, not in the Store contract
    record = run_sync(raw(sid), "aread")
    record = record() if callable(record) else record
    assert record is not None
    return list(record.entries)


class BlobTrimContract:
    """Mixed into :class:`~statekeep.testing.StoreContract`."""

    if TYPE_CHECKING:

        def blob_store_with(self, tmp_path: Path, **options: Any) -> Store: ...
        def blob_store(self, store: Store) -> Store: ...
        def needs(self, *flags: str) -> None: ...
        def timed(
            self, tmp_path: Path, mode: str, **options: Any
        ) -> AbstractAsyncContextManager[tuple[Api, Timeline]]: ...

    def _trim_blob_api(self, tmp_path: Path, mode: str, **options: Any) -> Api:
        api = Api(self.blob_store_with(tmp_path, **options), mode)
        if "trim" not in capabilities(api.store):
            api.store.close()
            pytest.skip(f"{type(api.store).__name__} does not offer trim()")
        return api

    @staticmethod
    async def _trim_with(api: Api, sid: str, before: int) -> None:
        if api.mode == "async":
            await api.store.atrim(sid, before=before)
        else:
            api.store.trim(sid, before=before)

    @MODES
    @SEALING
    @asyncio_test
    async def test_trim_base_stores_a_large_data_value_once_as_a_blob(
        self, tmp_path: Path, mode: str, sealed: bool
    ) -> None:
        """The base record refers to the data value's blob (no inline copy: its line stays
        small), the value loads exactly, gc keeps the blob while the base refers to it and
        removes it once the State is deleted."""
        self.needs("supports_delete")
        api = self._trim_blob_api(tmp_path, mode, **({"encrypt": RING} if sealed else {}))
        try:
            value, page = text(VALUE_SIZE, "data"), text(BOUND + 500, "page")
            state, through = page_run("t1", value, page)
            await api.save(state)
            before = await api.load("t1")
            assert usage(api.store)[0] == 2  # the value and the page
            await self._trim_with(api, "t1", through + 1)
            base = stored_lines(api.store, "t1")[0]
            assert len(orjson.dumps(base)) < BOUND  # the value is not inline
            assert wanted([base])  # the base lists its blob, in clear on a sealed line too
            record = await api.read("t1")
            assert record is not None and record.entries[0]["kind"] == "base"
            assert record.entries[0]["data"] == {"page": value}
            assert REFS not in record.entries[0]
            loaded = await api.load("t1")
            assert loaded.data == before.data == {"page": value}
            collected = await api.gc()
            assert collected.blobs == 1  # type: ignore[attr-defined]  # the page: only removed entries held it
            count, size = usage(api.store)
            assert count == 1 and size < 2 * VALUE_SIZE  # the value, stored once (sealed: a little more)
            assert (await api.load("t1")).data == {"page": value}
            await api.delete("t1")
            collected = await api.gc()
            assert collected.blobs == 1 and usage(api.store) == (0, 0)  # type: ignore[attr-defined]
        finally:
            await api.store.aclose()

    @MODES
    @SEALING
    @asyncio_test
    async def test_trim_releases_the_blobs_only_removed_entries_referred_to(
        self, tmp_path: Path, mode: str, sealed: bool
    ) -> None:
        """After a trim, a State refers to exactly the blobs of its kept lines: a blob only the
        removed entries referred to goes at the next gc (on an encrypted store too), one a
        kept entry or another State refers to stays."""
        api = self._trim_blob_api(tmp_path, mode, **({"encrypt": RING} if sealed else {}))
        try:
            page, kept_page = text(BOUND + 700, "gone"), text(BOUND + 900, "kept")
            state, through = page_run("t1", "small", page)
            state.begin_run(agent_info("browser", "model"))
            state.request("model")
            state.add_reply("", [{"id": "c2", "name": "fetch", "args": {}}])
            state.add_tool_result("c2", kept_page)
            await api.save(state)
            assert usage(api.store)[0] == 2
            assert (await api.gc()).blobs == 0  # type: ignore[attr-defined]
            await self._trim_with(api, "t1", through + 1)
            collected = await api.gc()
            assert collected.blobs == 1  # type: ignore[attr-defined]
            assert usage(api.store)[0] == 1
            loaded = await api.load("t1")
            results = [e["output"] for e in loaded.history if e["kind"] == "tool_result"]
            assert results == [kept_page]
        finally:
            await api.store.aclose()

    @MODES
    @SEALING
    @asyncio_test
    async def test_a_fork_of_a_trimmed_state_keeps_the_bases_blob(
        self, tmp_path: Path, mode: str, sealed: bool
    ) -> None:
        """A fork of a trimmed State (above its base) refers to the blob its base refers to:
        the source's delete and gc leave it, and the fork loads the value."""
        self.needs("supports_delete")
        api = self._trim_blob_api(tmp_path, mode, **({"encrypt": RING} if sealed else {}))
        try:
            value = text(VALUE_SIZE, "forked")
            state, through = page_run("t1", value, "small")
            await api.save(state)
            await self._trim_with(api, "t1", through + 1)
            fork = await api.fork("t1", new_id="f1")
            await api.delete("t1")
            assert (await api.gc()).blobs == 0  # type: ignore[attr-defined]
            loaded = await api.load("f1")
            assert loaded.data == {"page": value} and fork.data == {"page": value}
            await api.delete("f1")
            assert (await api.gc()).blobs == 1  # type: ignore[attr-defined]
        finally:
            await api.store.aclose()

    @MODES
    @asyncio_test
    async def test_gc_dry_run_counts_the_blobs_no_state_refers_to_now(
        self, tmp_path: Path, mode: str
    ) -> None:
        """``gc(dry_run=True)`` counts the expired States and the blobs no State refers to now
        (the blobs only those expired States refer to may be left out); the real gc removes
        the States, then those blobs too; a dry run after it counts nothing."""
        self.needs("supports_delete")
        async with self.timed(tmp_path, mode) as (api, line):
            self.blob_store(api.store)
            soon = await line.now() + line.span
            expired, deleted = text(BOUND * 2, "expired"), text(BOUND * 3, "deleted")
            note = [{"seq": 0, "kind": "note", "v": expired}]
            await api.write("short", note, expiring("short", soon), create=True)
            await api.write("free", [{"seq": 0, "kind": "note", "v": deleted}], snapshot(), create=True)
            await api.write("kept", [{"seq": 0, "kind": "note", "v": deleted}], snapshot(), create=True)
            await api.delete("free")  # its blob stays: "kept" refers to it
            await api.delete("kept")
            await line.reach(soon)
            counted = await api.gc(dry_run=True)
            # The deleted State's blob; the expired State's too where the store's server has
            # dropped an expired State itself (RedisStore's native expiry), not elsewhere.
            assert int(counted) == 1 and counted.blobs in (1, 2), repr(counted)  # type: ignore[attr-defined]
            assert usage(api.store)[0] == 2  # a dry run removes nothing
            removed = await api.gc()
            assert (int(removed), removed.blobs) == (1, 2)  # type: ignore[attr-defined]
            again = await api.gc(dry_run=True)
            assert (int(again), again.blobs) == (0, 0)  # type: ignore[attr-defined]
            assert usage(api.store) == (0, 0)

    @MODES
    @asyncio_test
    async def test_rekey_re_seals_a_trimmed_state_and_its_blobs(self, tmp_path: Path, mode: str) -> None:
        """A trimmed State whose base and kept entries refer to blobs, rekeyed: it loads the
        same under the new key alone, and its blobs are re-sealed (the old key opens nothing)."""
        old = self._trim_blob_api(tmp_path, mode, encrypt=RING)
        value, kept_page = text(VALUE_SIZE, "data"), text(BOUND + 900, "kept")
        try:
            state, through = page_run("t1", value, text(BOUND + 700, "gone"))
            state.begin_run(agent_info("browser", "model"))
            state.request("model")
            state.add_reply("", [{"id": "c2", "name": "fetch", "args": {}}])
            state.add_tool_result("c2", kept_page)
            await old.save(state)
            await self._trim_with(old, "t1", through + 1)
            await old.gc()
            kept = (await old.load("t1")).history
            assert kept[0]["kind"] == "base" and kept[0]["data"] == {"page": value}
        finally:
            await old.store.aclose()
        both = self.blob_store_with(tmp_path, encrypt=Keyring({"k1": K1, "k2": K2}, "k2"))
        try:
            report = rekey(both) if mode == "sync" else await arekey(both)
            assert (report.blobs, report.records >= len(kept)) == (2, True), report
            assert rekey(both).blobs == 0  # done: nothing left on the old key
        finally:
            both.close()
        new = Api(self.blob_store_with(tmp_path, encrypt=Keyring({"k2": K2}, "k2")), mode)
        try:
            assert (await new.load("t1")).history == kept
        finally:
            await new.store.aclose()
        gone = Api(self.blob_store_with(tmp_path, encrypt=RING), mode)
        try:
            with pytest.raises(DecryptionError):
                await gone.load("t1")
        finally:
            await gone.store.aclose()

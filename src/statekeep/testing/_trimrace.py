"""The contract of a trim that another process overtakes (issue 24): a State's lock is per
process, so between a trim's read of the State and its backend ``_trim`` another store on
the same storage may trim the same State, its base built from other entries (here: kept
inline) so its trim releases a blob the first trim's base refers to. The first trim must
not then write that base (its blob would have no reference left, gc would remove it, and the
State would no longer load): its ``_trim`` is refused (StateConflictError, nothing changed)
while the State no longer starts at the seq it read, and ``trim`` reads it again.

Two stores on the same storage (``make_store_with(tmp_path)`` twice, as two processes open
it); the other store's trim is run at the point the first one hands its base to ``_trim``
(the seam the race falls in), on a store offering "trim"."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .._core.errors import StateConflictError
from .._run.base import build_base
from .._run.resume import first_seq
from .._run.state import State
from .._runtime.bridge import run_sync
from .._store import trimming
from .._store.capabilities import capabilities
from .._store.contract import Store
from .._store.trimming import base_line, removed_entries
from ._blobs import text
from ._blobtrim import stored_lines
from ._helpers import Api

asyncio_test = pytest.mark.asyncio
MODES = pytest.mark.parametrize("mode", ["sync", "async"])
#: A data value above the default offload bound (a blob where the store offloads), and ten
#: smaller ones, below the bound each but above it together (a base holding them all keeps
#: its values inline: its whole data would be a blob no stored line lists).
BIG, SMALL, SMALLS = 100_000, 4_000, 10


def twice_compacted(sid: str) -> tuple[State, int, int]:
    """A State whose data is one large value and ten small ones, compacted; then the small
    ones deleted and compacted again; returns it and the two compactions' ``through``."""
    state = State("keep the notes", id=sid)
    state.set_data("big", text(BIG, "big"))
    for i in range(SMALLS):
        state.set_data(f"small{i}", text(SMALL, f"small{i}"))
    state.add_user("the notes are in")
    first = len(state.history) - 1
    state.compact("the notes, written", through=first)
    for i in range(SMALLS):
        state.delete_data(f"small{i}")
    state.add_user("the small notes are gone")
    second = len(state.history) - 1
    state.compact("the small notes, deleted", through=second)
    state.add_user("and now?")
    return state, first, second


def engine(store: Store) -> Any:
    """``store`` seen as its engine (its ``_trim`` hook and the reads the trim makes)."""
    return store


def stale_base(store: Store, sid: str, before: int) -> tuple[bytes, int]:
    """What a trim of ``sid`` before ``before`` builds from a read now: its base line and the
    first seq it read (as :func:`statekeep._store.trimming.trim` does)."""
    backend = engine(store)
    read = run_sync(backend._read_with_blobs(sid, 0), "aread")
    record = backend._opened(sid, read, 0)
    removed = removed_entries(sid, record.entries, before)
    assert removed is not None
    line = base_line(backend, sid, build_base(removed), record.incarnation, read[1] or ())
    return line, first_seq(record.entries)


async def trim(api: Api, sid: str, before: int) -> None:
    """``trim`` of ``sid`` through ``api``'s sync or async method."""
    if api.mode == "async":
        await api.store.atrim(sid, before=before)
    else:
        api.store.trim(sid, before=before)


class TrimRaceContract:
    """Mixed into :class:`~statekeep.testing.StoreContract` (through ``TrimContract``)."""

    if TYPE_CHECKING:

        def make_store(self, tmp_path: Path) -> Store: ...

    def _two_stores(self, tmp_path: Path, mode: str) -> tuple[Api, Api]:
        """Two stores on the same storage (as two processes open it), each seen by ``mode``."""
        probe = self.make_store(tmp_path / "trim-probe")
        offers = "trim" in capabilities(probe)
        probe.close()
        if not offers:
            pytest.skip(f"{type(probe).__name__} does not offer trim()")
        make = getattr(self, "make_store_with", None)
        try:
            a = Api(make(tmp_path), mode) if make is not None else None
        except NotImplementedError:
            a = None
        if make is None or a is None:
            pytest.skip(f"{type(self).__name__} defines no make_store_with(): no second store on its storage")
        return a, Api(make(tmp_path), mode)

    @MODES
    @asyncio_test
    async def test_a_trim_overtaken_by_another_stores_trim_keeps_the_state_loadable(
        self, tmp_path: Path, mode: str
    ) -> None:
        """Store B trims the State (before its first compaction's end) while store A's trim
        (before the second's) has read it and built its base: A's trim reads it again and
        trims what is left; after gc the State loads on both, its data exact."""
        a, b = self._two_stores(tmp_path, mode)
        try:
            state, first, second = twice_compacted("t1")
            await a.save(state)
            expected = (await a.load("t1")).data
            assert expected == {"big": text(BIG, "big")}
            hooked = engine(a.store)
            real = hooked._trim
            overtaken: list[int] = []

            async def b_trims_first(state_id: str, before: int, base: bytes, read_first: int) -> None:
                if not overtaken:  # once: the other store's trim lands between A's read and this
                    overtaken.append(read_first)
                    # B's trim as another process runs it: under its own lock, not this
                    # process's (which A holds, here as in any one process).
                    await trimming.trim(engine(b.store), state_id, first + 1, None)
                await real(state_id, before, base, read_first)

            hooked._trim = b_trims_first
            await trim(a, "t1", second + 1)
            assert overtaken == [0]
            kept = stored_lines(a.store, "t1")
            assert kept[0]["seq"] == second and len(kept) == len(state.history) - second
            await a.gc()
            for api in (a, b):
                loaded = await api.load("t1")
                assert loaded.data == expected
                assert loaded.history[0]["kind"] == "base" and loaded.history[0]["seq"] == second
        finally:
            await a.store.aclose()
            await b.store.aclose()

    @MODES
    @asyncio_test
    async def test_a_trim_with_a_stale_first_seq_is_refused_and_changes_nothing(
        self, tmp_path: Path, mode: str
    ) -> None:
        """The backend's ``_trim`` given the first seq of a read another store's trim has
        since made stale: StateConflictError, and the State is as that other trim left it."""
        a, b = self._two_stores(tmp_path, mode)
        try:
            state, first, second = twice_compacted("t1")
            await a.save(state)
            expected = (await a.load("t1")).data
            line, read_first = stale_base(a.store, "t1", second + 1)
            assert read_first == 0
            await trim(b, "t1", first + 1)
            held = stored_lines(a.store, "t1")
            with pytest.raises(StateConflictError, match="another process trimmed it"):
                run_sync(engine(a.store)._trim("t1", second + 1, line, read_first), "atrim")
            assert stored_lines(a.store, "t1") == held
            await a.gc()
            loaded = await a.load("t1")
            assert loaded.data == expected and loaded.history[0]["seq"] == first
        finally:
            await a.store.aclose()
            await b.store.aclose()

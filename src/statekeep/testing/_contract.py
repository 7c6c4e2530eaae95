"""StoreContract: the Store contract as pytest tests a store's test class inherits, each run
through the sync and the async API."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import orjson
import pytest

from .._core.errors import StateConflictError
from .._core.records import Record, SavedState
from .._store.contract import Store
from ._backends import BackendContract, add_trio_twins, on_asyncio
from ._blobs import BlobContract
from ._blobtrim import BlobTrimContract
from ._cancel import CancellationContract
from ._capabilities import name_the_flags
from ._family import ErrorFamilyContract
from ._helpers import Api, entries, snapshot
from ._leases import LeaseContract
from ._preconditions import PreconditionContract
from ._protect import ProtectionContract
from ._ranges import RangeContract
from ._runs import RunsContract
from ._trim import TrimContract

if TYPE_CHECKING:
    from ._model import StoreMachine

BAD_TIMES = {
    "beyond 9999 in UTC": "9999-12-31T23:59:59-01:00",
    "before year 1 in UTC": "0001-01-01T00:00:00+01:00",
    "no UTC offset": "2026-01-01T00:00:00",
    "not a time": "yesterday",
    "not text": 20260101,
}
BAD_IDS = ["", ".", "..", "a/b", "a\\b", "nul\x00", "é", "a" * 129, "sp ace", "dot.ted"]
asyncio_test = pytest.mark.asyncio


class StoreContract(
    BackendContract,
    RunsContract,
    RangeContract,
    LeaseContract,
    ProtectionContract,
    PreconditionContract,
    ErrorFamilyContract,
    CancellationContract,
    BlobContract,
    BlobTrimContract,
    TrimContract,
):
    """Subclass in a ``test_*.py`` file, as ``Test...``, and define :meth:`make_store`.

    Capability flags (class attributes) say what the store cannot offer; the tests that need
    it are skipped, saying so. ``statekeep_messages`` also matches the wording of
    statekeep's own error messages (the built-in stores' tests set it); otherwise only the
    exception types are checked.
    """

    supports_list: ClassVar[bool] = True  # list() / alist()
    supports_delete: ClassVar[bool] = True  # delete() / adelete()
    durable: ClassVar[bool] = True  # a new store on the same storage (another process) sees it all
    checks_data: ClassVar[bool] = True  # bad ids, entries and snapshots refused before writing
    refuses_closed: ClassVar[bool] = True  # a closed store raises RuntimeError("... closed ...")
    settles_cancelled: ClassVar[bool] = True  # a cancelled awrite/asave/adelete reports once settled
    supports_trio: ClassVar[bool] = True  # the async API also works awaited from trio
    statekeep_messages: ClassVar[bool] = False
    machine: ClassVar[type[StoreMachine] | None] = None  # the model's rules; None: StoreMachine
    model_examples: ClassVar[int] = 50
    model_steps: ClassVar[int] = 30

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name_the_flags(cls)  # a capability the store lacks fails naming its flag (see _capabilities)
        add_trio_twins(cls)  # each async test also runs under trio (see _backends)

    def make_store(self, tmp_path: Path) -> Store:
        """A store on empty storage under ``tmp_path``; for a durable store, called again with
        the same folder it must open the same storage."""
        raise NotImplementedError(f"{type(self).__name__} must define make_store(tmp_path)")

    async def plant_snapshot(self, store: Store, state_id: str, raw: bytes) -> None:
        """Put ``raw`` in place of a State's stored snapshot through the store's own storage,
        as a hand edit could have left it. Optional: the test that needs it is skipped."""
        pytest.skip(f"{type(self).__name__} does not define plant_snapshot()")

    # -- fixtures and helpers ---------------------------------------------------------

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        made = self.make_store(tmp_path)
        yield made
        made.close()

    @pytest.fixture(params=["sync", "async"])
    def api(self, request: pytest.FixtureRequest, store: Store) -> Api:
        return Api(store, request.param)

    def raises(self, kind: type[BaseException], match: str) -> Any:
        """``pytest.raises``, matching the message only when ``statekeep_messages`` is set."""
        return pytest.raises(kind, match=match if self.statekeep_messages else None)

    def needs(self, *flags: str) -> None:
        for flag in flags:
            if not getattr(self, flag):
                pytest.skip(f"{type(self).__name__}.{flag} is False")

    async def listed(self, api: Api) -> list[str] | None:
        """The ids ``list()`` gives, or None when the store has no list()."""
        return [r.id for r in await api.list()] if self.supports_list else None

    # -- create, read, append ---------------------------------------------------------

    @asyncio_test
    async def test_create_then_read_round_trips(self, api: Api) -> None:
        ents = entries(0, 3)
        await api.write("run-1", ents, snapshot("first"), create=True)
        rec = await api.read("run-1")
        assert rec == Record(ents, snapshot("first"))

    @asyncio_test
    async def test_read_unknown_id_is_none(self, api: Api) -> None:
        assert await api.read("nobody") is None

    @asyncio_test
    async def test_create_existing_id_raises_and_keeps_data(self, api: Api) -> None:
        await api.write("a", entries(0, 2), snapshot("one"), create=True)
        with self.raises(ValueError, "already exists"):
            await api.write("a", entries(0, 1, other=True), snapshot("two"), create=True)
        assert await api.read("a") == Record(entries(0, 2), snapshot("one"))

    @asyncio_test
    async def test_create_must_start_at_seq_zero(self, api: Api) -> None:
        with self.raises(ValueError, "starts at seq 0"):
            await api.write("a", entries(1, 2), snapshot(), create=True)
        assert await api.read("a") is None

    @asyncio_test
    async def test_create_with_no_entries_and_no_snapshot(self, api: Api) -> None:
        await api.write("empty", [], None, create=True)
        assert await api.read("empty") == Record([], None)
        assert await self.listed(api) in ([], None)  # listed only once it has a snapshot

    @asyncio_test
    async def test_append_continues_history(self, api: Api) -> None:
        await api.write("a", entries(0, 2), snapshot(turn=0), create=True)
        await api.write("a", entries(2, 3), snapshot(turn=1))
        rec = await api.read("a")
        assert rec is not None
        assert [e["seq"] for e in rec.entries] == [0, 1, 2, 3, 4]
        assert rec.snapshot == snapshot(turn=1)

    @asyncio_test
    async def test_resending_stored_entries_is_harmless(self, api: Api) -> None:
        await api.write("a", entries(0, 3), snapshot(), create=True)
        await api.write("a", entries(0, 3), snapshot(turn=1))  # all known: skipped
        await api.write("a", entries(1, 4), snapshot(turn=2))  # 1-2 known, 3-4 new
        assert await api.read("a") == Record(entries(0, 5), snapshot(turn=2))

    @asyncio_test
    async def test_resent_tuples_equal_stored_lists(self, api: Api) -> None:
        await api.write("a", [{"seq": 0, "pair": (1, 2)}], snapshot(), create=True)
        await api.write("a", [{"seq": 0, "pair": (1, 2)}, {"seq": 1}], None)
        rec = await api.read("a")
        assert rec is not None and rec.entries == [{"seq": 0, "pair": [1, 2]}, {"seq": 1}]

    @asyncio_test
    async def test_different_entry_for_taken_seq_is_a_conflict(self, api: Api) -> None:
        await api.write("a", entries(0, 2), snapshot("kept"), create=True)
        with self.raises(StateConflictError, "seq 1"):
            await api.write("a", [entries(0, 2)[1] | {"text": "other"}, *entries(2, 1)], snapshot("new"))
        assert await api.read("a") == Record(entries(0, 2), snapshot("kept"))

    @asyncio_test
    async def test_gap_is_refused_naming_both_seqs(self, api: Api) -> None:
        await api.write("a", entries(0, 2), snapshot("kept"), create=True)
        with self.raises(ValueError, r"expected seq 2 next, got seq 4"):
            await api.write("a", entries(4, 1), snapshot("new"))
        assert await api.read("a") == Record(entries(0, 2), snapshot("kept"))

    @asyncio_test
    async def test_seqs_within_a_write_must_be_consecutive(self, api: Api) -> None:
        await api.write("a", [], None, create=True)
        with self.raises(ValueError, r"entries\[1\] has seq 2, expected 1"):
            await api.write("a", [{"seq": 0}, {"seq": 2}], None)
        assert await api.read("a") == Record([], None)

    @pytest.mark.parametrize("bad", [{"kind": "x"}, {"seq": "0"}, {"seq": -1}, {"seq": True}, {"seq": 1.0}])
    @asyncio_test
    async def test_entry_needs_int_seq(self, api: Api, bad: dict[str, Any]) -> None:
        with self.raises(ValueError, "int 'seq'"):
            await api.write("a", [bad], None, create=True)

    @asyncio_test
    async def test_write_to_unknown_id_is_lookup_error(self, api: Api) -> None:
        with self.raises(LookupError, "create=True"):
            await api.write("ghost", entries(0, 1), snapshot())
        assert await api.read("ghost") is None

    @asyncio_test
    async def test_snapshot_none_keeps_the_stored_one(self, api: Api) -> None:
        await api.write("a", entries(0, 1), snapshot("kept"), create=True)
        await api.write("a", entries(1, 1), None)
        assert await api.read("a") == Record(entries(0, 2), snapshot("kept"))

    @asyncio_test
    async def test_snapshot_only_write(self, api: Api) -> None:
        await api.write("a", entries(0, 1), snapshot(turn=0), create=True)
        await api.write("a", [], snapshot(turn=7))
        assert await api.read("a") == Record(entries(0, 1), snapshot(turn=7))

    @asyncio_test
    async def test_line_separators_round_trip(self, api: Api) -> None:
        text = "a\u2028b\u2029c\u0085d\re\nf"
        await api.write("a", [{"seq": 0, "text": text}], {"text": text}, create=True)
        assert await api.read("a") == Record([{"seq": 0, "text": text}], {"text": text})

    @asyncio_test
    async def test_unicode_and_large_values_round_trip(self, api: Api) -> None:
        value = {"seq": 0, "emoji": "🧭 ünïcødé", "big": 2**64 - 1, "neg": -(2**63), "f": 1.5, "n": None}
        await api.write("a", [value], None, create=True)
        assert await api.read("a") == Record([value], None)

    @asyncio_test
    async def test_readers_get_copies(self, api: Api) -> None:
        await api.write("a", [{"seq": 0, "list": [1]}], {"nested": {"k": 1}}, create=True)
        rec = await api.read("a")
        assert rec is not None and rec.snapshot is not None
        rec.entries[0]["list"].append(2)
        rec.entries.append({"seq": 1})
        rec.snapshot["nested"]["k"] = 99
        assert await api.read("a") == Record([{"seq": 0, "list": [1]}], {"nested": {"k": 1}})

    @asyncio_test
    async def test_caller_mutating_after_write_changes_nothing(self, api: Api) -> None:
        ents: list[dict[str, Any]] = [{"seq": 0, "list": [1]}]
        snap: dict[str, Any] = {"k": [1]}
        await api.write("a", ents, snap, create=True)
        ents[0]["list"].append(2)
        snap["k"].append(2)
        assert await api.read("a") == Record([{"seq": 0, "list": [1]}], {"k": [1]})

    @asyncio_test
    async def test_a_new_store_on_the_same_storage_sees_it_all(self, api: Api, tmp_path: Path) -> None:
        self.needs("durable")
        await api.write("a", entries(0, 2), snapshot("kept"), create=True)
        with self.make_store(tmp_path) as again:
            assert again.read("a") == Record(entries(0, 2), snapshot("kept"))
            again.write("a", entries(2, 1), None)
        assert await api.read("a") == Record(entries(0, 3), snapshot("kept"))

    def test_matches_the_model(self) -> None:
        """A Hypothesis state machine (:class:`StoreMachine`) drives the store's sync API and
        compares every answer with a plain dict model."""
        pytest.importorskip("hypothesis")
        from ._model import StoreMachine, run_machine

        base = self.machine or StoreMachine
        machine = type(f"{type(self).__name__}Machine", (base,), {"contract": self})
        run_machine(machine, self.model_examples, self.model_steps)

    # -- bad data -----------------------------------------------------------------------

    @asyncio_test
    async def test_entries_must_be_dicts_in_a_list(self, api: Api) -> None:
        self.needs("checks_data")
        with self.raises(TypeError, "list of dicts"):
            await api.write("a", {"seq": 0}, None, create=True)  # type: ignore[arg-type]
        with self.raises(TypeError, r"entries\[0\] must be a dict"):
            await api.write("a", ["seq 0"], None, create=True)  # type: ignore[list-item]

    @asyncio_test
    async def test_bad_data_raises_before_anything_is_written(self, api: Api) -> None:
        self.needs("checks_data")
        await api.write("a", entries(0, 1), snapshot("kept"), create=True)
        with self.raises(TypeError, r"entries\[1\]\['args'\]\['x'\] is nan"):
            await api.write("a", [*entries(1, 1), {"seq": 2, "args": {"x": float("nan")}}], snapshot("new"))
        with self.raises(TypeError, r"snapshot\['when'\] is a set"):
            await api.write("a", entries(1, 1), {"when": {1}})
        assert await api.read("a") == Record(entries(0, 1), snapshot("kept"))

    @pytest.mark.parametrize("case", sorted(BAD_TIMES))
    @asyncio_test
    async def test_a_snapshot_time_listings_cannot_read_is_refused(self, api: Api, case: str) -> None:
        self.needs("checks_data")
        bad = BAD_TIMES[case]
        await api.write("a", entries(0, 1), snapshot("kept"), create=True)
        for key in ("created_at", "updated_at"):
            with self.raises(ValueError, rf"snapshot\['{key}'\] is .*nothing was written.*UTC offset"):
                await api.write("a", entries(1, 1), {**snapshot("new"), key: bad})
            with self.raises(ValueError, rf"snapshot\['{key}'\]"):
                await api.write("b", entries(0, 1), {**snapshot("b"), key: bad}, create=True)
        assert await api.read("a") == Record(entries(0, 1), snapshot("kept"))
        assert await api.read("b") is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert await self.listed(api) in (["a"], None)

    @pytest.mark.parametrize("bad_id", BAD_IDS)
    @asyncio_test
    async def test_invalid_ids_are_refused_everywhere(self, api: Api, bad_id: str) -> None:
        self.needs("checks_data")
        with self.raises(ValueError, "invalid State id"):
            await api.write(bad_id, [], None, create=True)
        with self.raises(ValueError, "invalid State id"):
            await api.read(bad_id)
        if self.supports_delete:
            with self.raises(ValueError, "invalid State id"):
                await api.delete(bad_id)

    @asyncio_test
    async def test_longest_valid_id(self, api: Api) -> None:
        sid = "A-z_9" * 25 + "xyz"
        assert len(sid) == 128
        await api.write(sid, entries(0, 1), snapshot(), create=True)
        assert await self.listed(api) in ([sid], None)
        assert await api.read(sid) == Record(entries(0, 1), snapshot())

    @asyncio_test
    async def test_non_str_id_is_type_error(self, api: Api) -> None:
        self.needs("checks_data")
        with self.raises(TypeError, "must be a str"):
            await api.read(42)  # type: ignore[arg-type]

    # -- list -----------------------------------------------------------------------------

    @asyncio_test
    async def test_list_newest_first_ties_by_id(self, api: Api) -> None:
        self.needs("supports_list")
        await api.write("b", [], snapshot("b", updated="2026-01-02T00:00:00+00:00"), create=True)
        await api.write("a", [], snapshot("a", updated="2026-01-02T00:00:00+00:00"), create=True)
        await api.write("c", [], snapshot("c", updated="2026-01-03T00:00:00+00:00"), create=True)
        await api.write("old", [], snapshot("old", updated="2025-12-31T23:00:00-02:00"), create=True)
        rows = await api.list()
        assert [r.id for r in rows] == ["c", "a", "b", "old"]
        assert rows[0] == SavedState.from_snapshot("c", snapshot("c", updated="2026-01-03T00:00:00+00:00"))
        offset = rows[-1].updated_at.utcoffset()
        assert offset is not None and offset.total_seconds() == 0  # aware UTC

    @asyncio_test
    async def test_list_skips_a_bad_snapshot_with_a_warning(self, api: Api) -> None:
        self.needs("supports_list")
        await api.write("good", [], snapshot("good"), create=True)
        await api.write("bad", [], {"task": "no times"}, create=True)
        with pytest.warns(RuntimeWarning, match="'bad'.*created_at" if self.statekeep_messages else None):
            rows = await api.list()
        assert [r.id for r in rows] == ["good"]

    @asyncio_test
    async def test_a_bad_time_already_stored_is_left_out_with_a_warning(self, api: Api) -> None:
        self.needs("supports_list")
        await api.write("good", [], snapshot("good"), create=True)
        await api.write("odd", [], snapshot("odd"), create=True)
        raw = orjson.dumps(snapshot("odd", updated="9999-12-31T23:59:59-01:00"))
        await on_asyncio(lambda: self.plant_snapshot(api.store, "odd", raw))
        match = "'odd'.*updated_at.*years 1 to 9999" if self.statekeep_messages else None
        with pytest.warns(RuntimeWarning, match=match):
            rows = await api.list()
        assert [r.id for r in rows] == ["good"]

    @asyncio_test
    async def test_list_empty_store(self, api: Api) -> None:
        self.needs("supports_list")
        assert await api.list() == []

    # -- delete, close ----------------------------------------------------------------------

    @asyncio_test
    async def test_delete_removes_whole_state(self, api: Api) -> None:
        self.needs("supports_delete")
        await api.write("a", entries(0, 2), snapshot(), create=True)
        await api.write("b", entries(0, 1), snapshot(), create=True)
        await api.delete("a")
        assert await api.read("a") is None
        assert await self.listed(api) in (["b"], None)
        with pytest.raises(LookupError):
            await api.write("a", entries(2, 1), snapshot())
        await api.write("a", entries(0, 1), snapshot("again"), create=True)
        assert await api.read("a") == Record(entries(0, 1), snapshot("again"))

    @asyncio_test
    async def test_delete_absent_id_does_nothing(self, api: Api) -> None:
        self.needs("supports_delete")
        await api.delete("never-there")
        assert await api.read("never-there") is None

    @asyncio_test
    async def test_closed_store_refuses_work(self, api: Api) -> None:
        self.needs("refuses_closed")
        api.store.close()
        api.store.close()  # twice is fine
        with self.raises(RuntimeError, "closed"):
            await api.read("a")

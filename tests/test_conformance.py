"""The Store contract, run against every store, through the sync and the async API."""

from __future__ import annotations

import warnings

import orjson
import pytest

from statekeep import (
    FORMAT_VERSION,
    CorruptStateError,
    Record,
    SavedState,
    State,
    StateConflictError,
    StateExistsError,
    StatekeepError,
    StateNotFoundError,
    UnsupportedFormatError,
)
from tests.conftest import Api, entries, plant_snapshot, snapshot


async def test_create_then_read_round_trips(api: Api) -> None:
    ents = entries(0, 3)
    await api.write("run-1", ents, snapshot("first"), create=True)
    rec = await api.read("run-1")
    assert rec == Record(ents, snapshot("first"))


async def test_read_unknown_id_is_none(api: Api) -> None:
    assert await api.read("nobody") is None


async def test_create_existing_id_raises_and_keeps_data(api: Api) -> None:
    await api.write("a", entries(0, 2), snapshot("one"), create=True)
    with pytest.raises(ValueError, match="already exists"):
        await api.write("a", entries(0, 1, other=True), snapshot("two"), create=True)
    assert await api.read("a") == Record(entries(0, 2), snapshot("one"))


async def test_create_must_start_at_seq_zero(api: Api) -> None:
    with pytest.raises(ValueError, match="starts at seq 0"):
        await api.write("a", entries(1, 2), snapshot(), create=True)
    assert await api.read("a") is None


async def test_create_with_no_entries_and_no_snapshot(api: Api) -> None:
    await api.write("empty", [], None, create=True)
    assert await api.read("empty") == Record([], None)
    assert await api.list() == []  # listed only once it has a snapshot


async def test_append_continues_history(api: Api) -> None:
    await api.write("a", entries(0, 2), snapshot(turn=0), create=True)
    await api.write("a", entries(2, 3), snapshot(turn=1))
    rec = await api.read("a")
    assert [e["seq"] for e in rec.entries] == [0, 1, 2, 3, 4]
    assert rec.snapshot == snapshot(turn=1)


async def test_resending_stored_entries_is_harmless(api: Api) -> None:
    await api.write("a", entries(0, 3), snapshot(), create=True)
    await api.write("a", entries(0, 3), snapshot(turn=1))  # all known: skipped
    await api.write("a", entries(1, 4), snapshot(turn=2))  # 1-2 known, 3-4 new
    rec = await api.read("a")
    assert rec.entries == entries(0, 5)
    assert rec.snapshot == snapshot(turn=2)


async def test_resent_tuples_equal_stored_lists(api: Api) -> None:
    await api.write("a", [{"seq": 0, "pair": (1, 2)}], snapshot(), create=True)
    await api.write("a", [{"seq": 0, "pair": (1, 2)}, {"seq": 1}], None)
    assert (await api.read("a")).entries == [{"seq": 0, "pair": [1, 2]}, {"seq": 1}]


async def test_different_entry_for_taken_seq_is_a_conflict(api: Api) -> None:
    await api.write("a", entries(0, 2), snapshot("kept"), create=True)
    with pytest.raises(StateConflictError, match="seq 1"):
        await api.write("a", [entries(0, 2)[1] | {"text": "other"}, *entries(2, 1)], snapshot("new"))
    assert await api.read("a") == Record(entries(0, 2), snapshot("kept"))


def test_conflict_is_a_value_error() -> None:
    assert issubclass(StateConflictError, ValueError)


async def test_gap_is_refused_naming_both_seqs(api: Api) -> None:
    await api.write("a", entries(0, 2), snapshot("kept"), create=True)
    with pytest.raises(ValueError, match=r"expected seq 2 next, got seq 4"):
        await api.write("a", entries(4, 1), snapshot("new"))
    assert await api.read("a") == Record(entries(0, 2), snapshot("kept"))


async def test_seqs_within_a_write_must_be_consecutive(api: Api) -> None:
    await api.write("a", [], None, create=True)
    with pytest.raises(ValueError, match=r"entries\[1\] has seq 2, expected 1"):
        await api.write("a", [{"seq": 0}, {"seq": 2}], None)
    assert (await api.read("a")).entries == []


@pytest.mark.parametrize("bad", [{"kind": "x"}, {"seq": "0"}, {"seq": -1}, {"seq": True}, {"seq": 1.0}])
async def test_entry_needs_int_seq(api: Api, bad: dict) -> None:
    with pytest.raises(ValueError, match="int 'seq'"):
        await api.write("a", [bad], None, create=True)


async def test_entries_must_be_dicts_in_a_list(api: Api) -> None:
    with pytest.raises(TypeError, match="list of dicts"):
        await api.write("a", {"seq": 0}, None, create=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"entries\[0\] must be a dict"):
        await api.write("a", ["seq 0"], None, create=True)  # type: ignore[list-item]


async def test_write_to_unknown_id_is_lookup_error(api: Api) -> None:
    with pytest.raises(LookupError, match="create=True"):
        await api.write("ghost", entries(0, 1), snapshot())
    assert await api.read("ghost") is None


async def test_snapshot_none_keeps_the_stored_one(api: Api) -> None:
    await api.write("a", entries(0, 1), snapshot("kept"), create=True)
    await api.write("a", entries(1, 1), None)
    assert (await api.read("a")).snapshot == snapshot("kept")


async def test_snapshot_only_write(api: Api) -> None:
    await api.write("a", entries(0, 1), snapshot(turn=0), create=True)
    await api.write("a", [], snapshot(turn=7))
    assert await api.read("a") == Record(entries(0, 1), snapshot(turn=7))


async def test_bad_data_raises_before_anything_is_written(api: Api) -> None:
    await api.write("a", entries(0, 1), snapshot("kept"), create=True)
    with pytest.raises(TypeError, match=r"entries\[1\]\['args'\]\['x'\] is nan"):
        await api.write("a", [*entries(1, 1), {"seq": 2, "args": {"x": float("nan")}}], snapshot("new"))
    with pytest.raises(TypeError, match=r"snapshot\['when'\] is a set"):
        await api.write("a", entries(1, 1), {"when": {1}})
    assert await api.read("a") == Record(entries(0, 1), snapshot("kept"))


async def test_line_separators_round_trip(api: Api) -> None:
    text = "a\u2028b\u2029c\u0085d\re\nf"
    await api.write("a", [{"seq": 0, "text": text}], {"text": text}, create=True)
    rec = await api.read("a")
    assert rec.entries[0]["text"] == text and rec.snapshot == {"text": text}


async def test_unicode_and_large_values_round_trip(api: Api) -> None:
    value = {"seq": 0, "emoji": "🧭 ünïcødé", "big": 2**64 - 1, "neg": -(2**63), "f": 1.5, "n": None}
    await api.write("a", [value], None, create=True)
    assert (await api.read("a")).entries == [value]


async def test_list_newest_first_ties_by_id(api: Api) -> None:
    await api.write("b", [], snapshot("b", updated="2026-01-02T00:00:00+00:00"), create=True)
    await api.write("a", [], snapshot("a", updated="2026-01-02T00:00:00+00:00"), create=True)
    await api.write("c", [], snapshot("c", updated="2026-01-03T00:00:00+00:00"), create=True)
    await api.write("old", [], snapshot("old", updated="2025-12-31T23:00:00-02:00"), create=True)
    rows = await api.list()
    assert [r.id for r in rows] == ["c", "a", "b", "old"]
    assert rows[0] == SavedState.from_snapshot("c", snapshot("c", updated="2026-01-03T00:00:00+00:00"))
    assert rows[-1].updated_at.utcoffset().total_seconds() == 0  # aware UTC


async def test_list_skips_a_bad_snapshot_with_a_warning(api: Api) -> None:
    await api.write("good", [], snapshot("good"), create=True)
    await api.write("bad", [], {"task": "no times"}, create=True)
    with pytest.warns(RuntimeWarning, match="'bad'.*created_at"):
        rows = await api.list()
    assert [r.id for r in rows] == ["good"]


BAD_TIMES = {
    "beyond 9999 in UTC": "9999-12-31T23:59:59-01:00",
    "before year 1 in UTC": "0001-01-01T00:00:00+01:00",
    "no UTC offset": "2026-01-01T00:00:00",
    "not a time": "yesterday",
    "not text": 20260101,
}


@pytest.mark.parametrize("case", sorted(BAD_TIMES))
async def test_a_snapshot_time_listings_cannot_read_is_refused(api: Api, case: str) -> None:
    bad = BAD_TIMES[case]
    await api.write("a", entries(0, 1), snapshot("kept"), create=True)
    for key in ("created_at", "updated_at"):
        with pytest.raises(ValueError, match=rf"snapshot\['{key}'\] is .*nothing was written.*UTC offset"):
            await api.write("a", entries(1, 1), {**snapshot("new"), key: bad})
        with pytest.raises(ValueError, match=rf"snapshot\['{key}'\]"):
            await api.write("b", entries(0, 1), {**snapshot("b"), key: bad}, create=True)
    assert await api.read("a") == Record(entries(0, 1), snapshot("kept"))
    assert await api.read("b") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r.id for r in await api.list()] == ["a"]


async def test_a_bad_time_already_stored_is_left_out_with_a_warning(api: Api) -> None:
    await api.write("good", [], snapshot("good"), create=True)
    await api.write("odd", [], snapshot("odd"), create=True)
    await plant_snapshot(api.store, "odd", orjson.dumps(snapshot("odd", updated="9999-12-31T23:59:59-01:00")))
    with pytest.warns(RuntimeWarning, match="'odd'.*updated_at.*years 1 to 9999"):
        rows = await api.list()
    assert [r.id for r in rows] == ["good"]


async def test_list_empty_store(api: Api) -> None:
    assert await api.list() == []


async def test_delete_removes_whole_state(api: Api) -> None:
    await api.write("a", entries(0, 2), snapshot(), create=True)
    await api.write("b", entries(0, 1), snapshot(), create=True)
    await api.delete("a")
    assert await api.read("a") is None
    assert [r.id for r in await api.list()] == ["b"]
    with pytest.raises(LookupError):
        await api.write("a", entries(2, 1), snapshot())
    await api.write("a", entries(0, 1), snapshot("again"), create=True)
    assert await api.read("a") == Record(entries(0, 1), snapshot("again"))


async def test_delete_absent_id_does_nothing(api: Api) -> None:
    await api.delete("never-there")
    assert await api.read("never-there") is None


@pytest.mark.parametrize(
    "bad_id", ["", ".", "..", "a/b", "a\\b", "nul\x00", "é", "a" * 129, "sp ace", "dot.ted"]
)
async def test_invalid_ids_are_refused_everywhere(api: Api, bad_id: str) -> None:
    with pytest.raises(ValueError, match="invalid State id"):
        await api.write(bad_id, [], None, create=True)
    with pytest.raises(ValueError, match="invalid State id"):
        await api.read(bad_id)
    with pytest.raises(ValueError, match="invalid State id"):
        await api.delete(bad_id)


async def test_longest_valid_id(api: Api) -> None:
    sid = "A-z_9" * 25 + "xyz"
    assert len(sid) == 128
    await api.write(sid, entries(0, 1), snapshot(), create=True)
    assert [r.id for r in await api.list()] == [sid]


async def test_non_str_id_is_type_error(api: Api) -> None:
    with pytest.raises(TypeError, match="must be a str"):
        await api.read(42)  # type: ignore[arg-type]


async def test_readers_get_copies(api: Api) -> None:
    await api.write("a", [{"seq": 0, "list": [1]}], {"nested": {"k": 1}}, create=True)
    rec = await api.read("a")
    rec.entries[0]["list"].append(2)
    rec.entries.append({"seq": 1})
    rec.snapshot["nested"]["k"] = 99
    assert await api.read("a") == Record([{"seq": 0, "list": [1]}], {"nested": {"k": 1}})


async def test_caller_mutating_after_write_changes_nothing(api: Api) -> None:
    ents, snap = [{"seq": 0, "list": [1]}], {"k": [1]}
    await api.write("a", ents, snap, create=True)
    ents[0]["list"].append(2)
    snap["k"].append(2)
    assert await api.read("a") == Record([{"seq": 0, "list": [1]}], {"k": [1]})


async def test_closed_store_refuses_work(api: Api) -> None:
    api.store.close()
    api.store.close()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        await api.read("a")


# -- the error family: every store raises the same types --------------------------------


async def load(api: Api, state_id: str) -> State:
    return await api.store.aload(state_id) if api.mode == "async" else api.store.load(state_id)


async def save(api: Api, state: State) -> None:
    if api.mode == "async":
        await api.store.asave(state)
    else:
        api.store.save(state)


def family(
    info: pytest.ExceptionInfo[BaseException], kind: type[Exception], builtin: type[Exception]
) -> None:
    assert type(info.value) is kind
    assert isinstance(info.value, StatekeepError) and isinstance(info.value, builtin)


async def test_an_unknown_id_is_state_not_found_on_write_and_load(api: Api) -> None:
    with pytest.raises(StateNotFoundError) as info:
        await api.write("ghost", entries(0, 1), snapshot())
    family(info, StateNotFoundError, LookupError)
    written = str(info.value)
    with pytest.raises(StateNotFoundError) as info:
        await load(api, "ghost")
    family(info, StateNotFoundError, LookupError)
    assert str(info.value) == written  # one message for a missing State


async def test_create_on_an_existing_id_is_state_exists(api: Api) -> None:
    await api.write("a", entries(0, 1), snapshot(), create=True)
    with pytest.raises(StateExistsError) as info:
        await api.write("a", entries(0, 1), snapshot(), create=True)
    family(info, StateExistsError, ValueError)
    with pytest.raises(StateExistsError, match="saved by another State") as info:
        await save(api, State("t", id="a"))
    family(info, StateExistsError, ValueError)


async def test_saving_a_deleted_state_is_state_not_found(api: Api) -> None:
    state = State("t", id="gone")
    await save(api, state)
    await api.delete("gone")
    state.add_user("more")
    with pytest.raises(StateNotFoundError, match="was deleted") as info:
        await save(api, state)
    family(info, StateNotFoundError, LookupError)


async def test_a_conflict_is_state_conflict(api: Api) -> None:
    await api.write("a", entries(0, 1), snapshot(), create=True)
    with pytest.raises(StateConflictError) as info:
        await api.write("a", entries(0, 1, other=True), snapshot())
    family(info, StateConflictError, ValueError)


async def test_a_newer_history_format_is_unsupported_format(api: Api) -> None:
    task = {"seq": 0, "kind": "task", "at": "2026-01-01T00:00:00+00:00", "text": "t"}
    await api.write("newer", [task], snapshot() | {"v": FORMAT_VERSION + 1, "seq": 0}, create=True)
    with pytest.raises(UnsupportedFormatError, match="upgrade statekeep") as info:
        await load(api, "newer")
    family(info, UnsupportedFormatError, ValueError)


async def test_a_damaged_history_is_corrupt_state(api: Api) -> None:
    await api.write("odd", [{"seq": 0, "kind": "hologram"}], snapshot() | {"v": FORMAT_VERSION}, create=True)
    with pytest.raises(CorruptStateError, match="damaged") as info:
        await load(api, "odd")
    family(info, CorruptStateError, ValueError)

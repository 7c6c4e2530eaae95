"""The codec's refusals: every value JSON cannot hold faithfully raises TypeError naming its path,
before anything is written (no byte on disk, no seq used), through every store and both APIs.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from statekeep import FileStore, MemoryStore, Store
from statekeep._core.codec import MAX_DEPTH, encode
from statekeep.testing import Api, entries, snapshot


def deep(levels: int, innermost: Any) -> Any:
    """``levels`` nested lists around ``innermost``."""
    value = innermost
    for _ in range(levels):
        value = [value]
    return value


def self_dict() -> dict:
    d: dict[str, Any] = {"name": "loop"}
    d["again"] = d
    return d


def self_list() -> list:
    items: list[Any] = [1]
    items.append(items)
    return items


class Custom:
    pass


@dataclasses.dataclass
class Point:
    x: int
    y: int


# (label, bad value): each sits at the path the test puts it at.
BAD_VALUES = [
    ("nan", float("nan")),
    ("inf", float("inf")),
    ("-inf", float("-inf")),
    ("2**64", 2**64),
    ("-(2**63)-1", -(2**63) - 1),
    ("huge-int", 10**40),
    ("set", {1, 2}),
    ("frozenset", frozenset({"a"})),
    ("bytes", b"raw"),
    ("bytearray", bytearray(b"raw")),
    ("datetime", datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)),
    ("date", datetime.date(2026, 1, 1)),
    ("custom-object", Custom()),
    ("dataclass", Point(1, 2)),
    ("complex", 1j),
    ("lone-surrogate", "ok \udce9 not ok"),
    ("lone-high-surrogate", "\ud800"),
    ("nested-300", deep(300, 1)),
    ("self-dict", self_dict()),
    ("self-list", self_list()),
]

# (label, bad dict whose *keys* are refused)
BAD_KEYS = [
    ("int-key", {1: "v"}),
    ("tuple-key", {(1, 2): "v"}),
    ("none-key", {None: "v"}),
    ("bool-key", {True: "v"}),
    ("float-key", {1.5: "v"}),
    ("surrogate-key", {"k\udcff": "v"}),
]


def disk(store: Store) -> dict[str, bytes | None] | None:
    """Every file (bytes) and folder (None) under a FileStore's folder; None for other stores."""
    if not isinstance(store, FileStore):
        return None
    found: dict[str, bytes | None] = {}
    for root, dirs, files in os.walk(store.path):
        for name in dirs:
            found[os.path.relpath(os.path.join(root, name), store.path)] = None
        for name in files:
            path = os.path.join(root, name)
            found[os.path.relpath(path, store.path)] = Path(path).read_bytes()
    return found


async def seeded(api: Api, state_id: str = "run-1") -> tuple[Any, Any]:
    await api.write(state_id, entries(0, 3), snapshot(turn=3), create=True)
    return await api.read(state_id), disk(api.store)


async def assert_unchanged(api: Api, before: tuple[Any, Any], state_id: str = "run-1") -> None:
    record, files = before
    assert await api.read(state_id) == record
    assert disk(api.store) == files


def placements(bad: Any) -> list[tuple[list[dict], dict | None, str]]:
    """(entries, snapshot, expected path) with ``bad`` at a dict key, in a list and in the snapshot."""
    good = {"seq": 3, "kind": "note"}
    return [
        ([good, {"seq": 4, "args": {"x": bad}}], None, "entries[1]['args']['x']"),
        ([good, {"seq": 4, "args": {"list": [0, "a", bad]}}], None, "entries[1]['args']['list'][2]"),
        ([{"seq": 3, "top": bad}], None, "entries[0]['top']"),
        ([good], {**snapshot(turn=4), "meta": {"x": bad}}, "snapshot['meta']['x']"),
        ([good], {**snapshot(turn=4), "items": [bad]}, "snapshot['items'][0]"),
    ]


@pytest.mark.parametrize(("label", "bad"), BAD_VALUES, ids=[label for label, _ in BAD_VALUES])
async def test_refused_value_names_path_and_writes_nothing(api: Api, label: str, bad: Any) -> None:
    before = await seeded(api)
    for ents, snap, path in placements(bad):
        with pytest.raises(TypeError) as info:
            await api.write("run-1", ents, snap)
        assert path in str(info.value), (label, path, str(info.value)[:300])
        await assert_unchanged(api, before)
    # No seq was used up: the good entry is accepted next.
    await api.write("run-1", entries(3, 1), None)
    assert [e["seq"] for e in (await api.read("run-1")).entries] == [0, 1, 2, 3]


@pytest.mark.parametrize(("label", "bad"), BAD_KEYS, ids=[label for label, _ in BAD_KEYS])
async def test_refused_key_names_path_and_writes_nothing(api: Api, label: str, bad: dict) -> None:
    before = await seeded(api)
    cases = [
        ([{"seq": 3}, {"seq": 4, "args": bad}], None, "entries[1]['args']"),
        ([{"seq": 3, "args": {"inner": [bad]}}], None, "entries[0]['args']['inner'][0]"),
        ([{"seq": 3}], {**snapshot(), "meta": bad}, "snapshot['meta']"),
    ]
    for ents, snap, path in cases:
        with pytest.raises(TypeError) as info:
            await api.write("run-1", ents, snap)
        assert path in str(info.value), (label, str(info.value))
        await assert_unchanged(api, before)
    await api.write("run-1", entries(3, 1), None)
    assert len((await api.read("run-1")).entries) == 4


async def test_refused_top_level_key_of_entry_and_snapshot(api: Api) -> None:
    before = await seeded(api)
    with pytest.raises(TypeError, match=r"entries\[0\]"):
        await api.write("run-1", [{"seq": 3, 7: "x"}], None)
    with pytest.raises(TypeError, match="snapshot"):
        await api.write("run-1", entries(3, 1), {**snapshot(), 7: "x"})
    await assert_unchanged(api, before)


@pytest.mark.parametrize(("label", "bad"), BAD_VALUES[:6] + BAD_VALUES[15:17], ids=lambda v: str(v)[:20])
async def test_refused_value_in_create_leaves_no_state(api: Api, label: str, bad: Any) -> None:
    store = api.store
    if isinstance(store, FileStore):
        assert not store.path.exists()  # fresh store: the failed create must not even make the folder
    with pytest.raises(TypeError, match=r"entries\[1\]\['x'\]"):
        await api.write("new", [{"seq": 0}, {"seq": 1, "x": bad}], snapshot(), create=True)
    with pytest.raises(TypeError, match=r"snapshot\['x'\]"):
        await api.write("new", [{"seq": 0}], {**snapshot(), "x": bad}, create=True)
    assert await api.read("new") is None
    assert await api.list() == []
    if isinstance(store, FileStore):
        assert not store.path.exists()
    # The id is still free.
    await api.write("new", entries(0, 1), snapshot(), create=True)
    assert (await api.read("new")).entries == entries(0, 1)


def nest_levels(levels: int, leaf: str) -> dict:
    """An entry whose total JSON nesting (the entry object counted as level 1) is ``levels``.

    ``leaf`` says what the deepest container is: a list holding an int, an empty list, or a
    dict holding an int.
    """
    innermost: Any = {"list-int": [1], "empty-list": [], "dict-int": {"k": 1}}[leaf]
    return {"seq": 0, "deep": deep(levels - 2, innermost)}


@pytest.mark.parametrize("leaf", ["list-int", "empty-list", "dict-int"])
def test_deepest_nesting_orjson_accepts_is_accepted(leaf: str) -> None:
    entry = nest_levels(MAX_DEPTH, leaf)
    orjson.dumps(entry)  # orjson's own limit: this many levels is fine
    store = MemoryStore()
    store.write("deep", [entry], None, create=True)
    assert store.read("deep").entries == [entry]


@pytest.mark.parametrize(
    "leaf",
    [
        "list-int",
        "empty-list",
        "dict-int",
    ],
)
def test_one_level_too_deep_is_refused_naming_path(leaf: str) -> None:
    entry = nest_levels(MAX_DEPTH + 1, leaf)
    with pytest.raises(TypeError):
        orjson.dumps(entry)  # orjson refuses it, so the store must too
    store = MemoryStore()
    with pytest.raises(TypeError) as info:
        store.write("deep", [entry], None, create=True)
    assert "entries[0]['deep'][0]" in str(info.value)
    assert store.read("deep") is None


ACCEPTED: list[tuple[str, Any, Any]] = [
    # (label, value written, value read back)
    ("2**64-1", 2**64 - 1, 2**64 - 1),
    ("-(2**63)", -(2**63), -(2**63)),
    ("zero", 0, 0),
    ("bools-none", [True, False, None], [True, False, None]),
    ("floats", [1e308, -1e308, 5e-324, -0.0, 0.1], [1e308, -1e308, 5e-324, -0.0, 0.1]),
    ("nested-lists", [[1, [2, [3, []]]], []], [[1, [2, [3, []]]], []]),
    ("tuples", (1, (2, 3), [4, (5,)]), [1, [2, 3], [4, [5]]]),
    ("unicode", "héllo ✓ 日本 🤖 \u2028\u2029\u0085 \r\n\t \x00 \x1f \ufeff", None),
    ("unicode-keys", {"ключ": 1, "🤖": {"\u2028": "\r"}, "": "empty key"}, None),
    ("empty-dict", {}, {}),
    ("empty-list", [], []),
    ("empty-str", "", ""),
    ("nested-empty", {"a": {}, "b": [{}], "c": [[]]}, None),
    ("deep-200", deep(200, {"x": 1}), None),
]


@pytest.mark.parametrize(("label", "value", "back"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
async def test_accepted_values_round_trip(api: Api, label: str, value: Any, back: Any) -> None:
    expected = value if back is None else back
    ents = [{"seq": 0, "v": value}, {"seq": 1, "list": [value, {"in": value}]}]
    snap = {**snapshot(), "v": value}
    await api.write("ok", ents, snap, create=True)
    record = await api.read("ok")
    assert record.entries == [{"seq": 0, "v": expected}, {"seq": 1, "list": [expected, {"in": expected}]}]
    assert record.snapshot == {**snapshot(), "v": expected}
    # Byte-exact too: types survive (floats stay floats, ints stay ints, -0.0 keeps its sign).
    assert orjson.dumps(record.entries) == orjson.dumps(
        [{"seq": 0, "v": expected}, {"seq": 1, "list": [expected, {"in": expected}]}]
    )
    # Re-sending the same batch is recognised as equal and skipped.
    await api.write("ok", ents, None)
    assert (await api.read("ok")).entries == record.entries


async def test_empty_dicts_as_entry_payload_and_snapshot(api: Api) -> None:
    await api.write("e", [{"seq": 0}], {}, create=True)
    record = await api.read("e")
    assert record.entries == [{"seq": 0}]
    assert record.snapshot == {}
    with pytest.warns(RuntimeWarning, match="'e' left out of the listing"):
        assert await api.list() == []  # an empty snapshot is not a listing row


def test_encode_is_pure_and_names_the_given_path() -> None:
    assert encode({"a": [1, "x"]}, "whatever") == b'{"a":[1,"x"]}'
    with pytest.raises(TypeError, match=r"^custom\['a'\]\[1\]"):
        encode({"a": [1, float("nan")]}, "custom")
    with pytest.raises(TypeError, match="must be a dict"):
        encode([1], "top")  # type: ignore[arg-type]

"""StatekeepSaver beyond LangGraph's conformance suite: the sync API against InMemorySaver
(the reference), framework ids, lossless blobs, concurrent writers, and what the
history holds."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import uuid
from decimal import Decimal
from typing import Any

import pytest

from statekeep import MemoryStore, Record, Store
from tests.support.frameworks import require_installed

require_installed("langgraph-checkpoint", "4.3.2")

from langgraph.checkpoint.base import CheckpointTuple  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT  # noqa: E402

from statekeep.adapters.langgraph import StatekeepSaver  # noqa: E402


def checkpoint(values: dict[str, Any] | None = None, cid: str | None = None) -> dict[str, Any]:
    values = values or {}
    return {
        "v": 1,
        "id": cid or str(uuid.uuid1()),  # time-ordered, as LangGraph's ids are
        "ts": "2026-11-30T10:00:00+00:00",
        "channel_values": values,
        "channel_versions": {k: int(cid) if cid else 1 for k in values},  # new versions each time
        "versions_seen": {},
        "pending_sends": [],
        "updated_channels": None,
    }


def put(
    saver: Any,
    thread: str,
    parent: dict[str, Any] | None = None,
    ns: str = "",
    cid: str | None = None,
    **values: Any,
) -> Any:
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    if parent:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    cp = checkpoint(values, cid)
    return saver.put(config, cp, {"source": "loop", "step": 0, "parents": {}}, cp["channel_versions"])


def shape(item: CheckpointTuple | None) -> Any:
    if item is None:
        return None
    return (
        item.config["configurable"],
        item.checkpoint["id"],
        item.checkpoint["channel_values"],
        item.metadata,
        item.parent_config,
        item.pending_writes,
    )


def script(saver: Any) -> list[Any]:
    """One run of puts and writes; what get_tuple and list show along the way."""
    seen: list[Any] = []
    first = put(saver, "t:1", cid="1", a="one")
    second = put(saver, "t:1", first, cid="2", a="two", b=b"\x00\xff")
    child = put(saver, "t:1", ns="sub:1", cid="3", c=[1, 2])
    # Writes out of order: LangGraph's order is (task_path, task_id, idx).
    saver.put_writes(second, [("a", 1), ("b", 2)], "task-b", "~1")
    saver.put_writes(second, [("x", "first")], "task-a", "~0")
    saver.put_writes(second, [("x", "again")], "task-a", "~0")  # regular: the first one stays
    saver.put_writes(second, [(ERROR, "boom")], "task-a", "~0")
    saver.put_writes(
        second, [(ERROR, "boom 2"), (INTERRUPT, {"ask": 1})], "task-a", "~0"
    )  # special: replaced
    saver.put_writes(child, [("c", [3])], "task-c")
    for config in (
        {"configurable": {"thread_id": "t:1"}},
        {"configurable": {"thread_id": "t:1", "checkpoint_ns": ""}},
        {"configurable": {"thread_id": "t:1", "checkpoint_ns": "sub:1"}},
        first,
        second,
        {"configurable": {"thread_id": "t:1", "checkpoint_ns": "", "checkpoint_id": "nope"}},
        {"configurable": {"thread_id": "nobody"}},
    ):
        seen.append(shape(saver.get_tuple(config)))
    seen.append([shape(t) for t in saver.list({"configurable": {"thread_id": "t:1"}})])
    seen.append([shape(t) for t in saver.list(None, limit=2)])
    seen.append([shape(t) for t in saver.list({"configurable": {"thread_id": "t:1"}}, before=second)])
    seen.append([shape(t) for t in saver.list({"configurable": {"thread_id": "t:1"}}, filter={"step": 0})])
    saver.delete_thread("t:1")
    seen.append(shape(saver.get_tuple({"configurable": {"thread_id": "t:1"}})))
    return seen


def test_the_sync_api_shows_what_inmemorysaver_shows(store: Store) -> None:
    assert script(StatekeepSaver(store)) == script(InMemorySaver())


async def test_the_async_api_shows_what_the_sync_api_shows(store: Store) -> None:
    saver = StatekeepSaver(store)
    second = await saver.aput(
        {"configurable": {"thread_id": "a", "checkpoint_ns": ""}},
        checkpoint({"k": "v"}),
        {"step": 1},
        {"k": 1},
    )
    await saver.aput_writes(second, [("k", "w"), (ERROR, "e")], "task")
    async_view = shape(await saver.aget_tuple({"configurable": {"thread_id": "a"}}))
    assert async_view == shape(saver.get_tuple({"configurable": {"thread_id": "a"}}))
    assert [shape(t) async for t in saver.alist(None)] == [shape(t) for t in saver.list(None)]
    assert async_view[5] == [("task", ERROR, "e"), ("task", "k", "w")]


def test_thread_ids_with_any_character_map_to_states_that_list_the_original(store: Store) -> None:
    saver = StatekeepSaver(store)
    long_id = "tenant/" + "x" * 500 + ":end"
    for thread in ("org/team:7", long_id, "org_team_3a7"):  # the last spells the first's escape
        put(saver, thread, n=thread)
    rows = {row.task: row for row in store.list()}
    assert set(rows) == {"org/team:7", long_id, "org_team_3a7"}
    assert rows["org/team:7"].id == "org_2fteam_3a7" and rows["org_team_3a7"].id == "org__team__3a7"
    assert rows[long_id].id.startswith("_h") and len(rows[long_id].id) == 66
    listed = {t.config["configurable"]["thread_id"]: t.checkpoint["channel_values"] for t in saver.list(None)}
    assert listed == {thread: {"n": thread} for thread in rows}
    fresh = StatekeepSaver(store)  # nothing cached: found by the id alone
    for thread in rows:
        found = fresh.get_tuple({"configurable": {"thread_id": thread}})
        assert found is not None and found.checkpoint["channel_values"] == {"n": thread}


def test_values_the_serializer_handles_come_back_equal_including_bytes(store: Store) -> None:
    values = {
        "raw": bytes(range(256)),
        "when": dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC),
        "ids": {uuid.UUID(int=1), uuid.UUID(int=2)},
        "pair": (1, "two"),
        "money": Decimal("12.3400"),
        "big": -(2**63),
        "text": "naïve ☃ \x00 nul",
        "inf": float("inf"),
    }
    reference = InMemorySaver()  # what the serializer itself gives back (tuples become lists)
    expected = reference.get_tuple(put(reference, "blobs", **values))
    assert expected is not None and expected.checkpoint["channel_values"]["raw"] == bytes(range(256))
    saver = StatekeepSaver(store)
    stored = put(saver, "blobs", **values)
    saver.put_writes(stored, [("raw", b"\xff" * 3), ("when", values["when"])], "task")
    again = StatekeepSaver(store).get_tuple(stored)
    assert again is not None
    assert again.checkpoint["channel_values"] == expected.checkpoint["channel_values"]
    assert again.pending_writes == [("task", "raw", b"\xff" * 3), ("task", "when", values["when"])]
    record = store.read("blobs")
    assert record is not None  # JSON in the store: the blobs are base64 text
    assert [e["kind"] for e in record.entries] == ["lg.checkpoint", "lg.tip", "lg.writes", "lg.tip"]


@pytest.mark.parametrize("api", ["sync", "async"])
def test_two_savers_putting_to_one_thread_at_once_lose_nothing(store: Store, api: str) -> None:
    per_saver = 15
    savers = [StatekeepSaver(store), StatekeepSaver(store)]
    put(savers[0], "shared", v=0)  # both know the thread: each one's next put may hit a taken seq
    for saver in savers:
        saver.get_tuple({"configurable": {"thread_id": "shared"}})
    start = threading.Barrier(2)

    def work(saver: StatekeepSaver, who: int) -> None:
        start.wait()
        if api == "sync":
            for i in range(per_saver):
                put(saver, "shared", v=f"{who}-{i}")
        else:

            async def many() -> None:
                for i in range(per_saver):
                    cp = checkpoint({"v": f"{who}-{i}"})
                    config = {"configurable": {"thread_id": "shared", "checkpoint_ns": ""}}
                    await saver.aput(config, cp, {"step": i}, {"v": 1})

            asyncio.run(many())

    threads = [threading.Thread(target=work, args=(saver, n)) for n, saver in enumerate(savers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    values = {t.checkpoint["channel_values"]["v"] for t in StatekeepSaver(store).list(None)}
    assert values == {0} | {f"{who}-{i}" for who in (0, 1) for i in range(per_saver)}
    record = store.read("shared")
    assert record is not None
    # Each put: its checkpoint and a tip; the first put's two, then each saver's.
    assert [e["kind"] for e in record.entries] == ["lg.checkpoint", "lg.tip"] * (2 * per_saver + 1)


class CountingStore(Store):
    """A store of one's own over a MemoryStore that records where each read starts."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.reads: list[int] = []

    def write(self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False) -> None:
        self.inner.write(state_id, entries, snapshot, create=create)

    def read(self, state_id: str, *, since: int = 0) -> Record | None:
        self.reads.append(since)
        return self.inner.read(state_id, since=since)


def test_the_newest_checkpoint_is_read_from_where_it_starts_not_from_the_beginning() -> None:
    store = CountingStore()
    saver = StatekeepSaver(store)
    parent = None
    for i in range(30):
        parent = put(saver, "long", parent, i=i)
        saver.put_writes(parent, [("i", i)], "task")
    store.reads.clear()
    newest = saver.get_tuple({"configurable": {"thread_id": "long"}})
    assert newest is not None and newest.checkpoint["channel_values"] == {"i": 29}
    assert newest.pending_writes == [("task", "i", 29)]
    assert store.reads == [116]  # the newest checkpoint's entry: 4 entries per step
    fresh = StatekeepSaver(store)  # a new process: the snapshot says where it starts
    store.reads.clear()
    assert shape(fresh.get_tuple({"configurable": {"thread_id": "long"}})) == shape(newest)
    assert store.reads[-1] == 116 and 0 not in store.reads


def kinds_stored(store: Store) -> list[list[str]]:
    """The kinds of entries of every State in the store (a thread's old history included)."""
    return sorted([e["kind"] for e in store.read(row.id).entries] for row in store.list())  # type: ignore[union-attr]


def test_prune_and_delete_for_runs_leave_only_what_they_keep_in_the_store(store: Store) -> None:
    saver = StatekeepSaver(store)
    configs: list[Any] = []
    for run in ("r1", "r1", "r2"):
        cp = checkpoint({"run": run})
        config = {"configurable": {"thread_id": "h", "checkpoint_ns": "", "run_id": run}}
        if configs:
            config["configurable"]["checkpoint_id"] = configs[-1]["configurable"]["checkpoint_id"]
        configs.append(saver.put(config, cp, {"step": len(configs)}, {"run": 1}))
        saver.put_writes(configs[-1], [("run", run)], f"task-{len(configs)}")
    saver.delete_for_runs(["r2"])
    newest = saver.get_tuple({"configurable": {"thread_id": "h"}})
    assert newest is not None and newest.config == configs[1]  # the newest left
    assert newest.checkpoint["channel_values"] == {"run": "r1"} and newest.pending_writes == [
        ("task-2", "run", "r1")
    ]
    # the thread's old history is gone from the store: one State, two checkpoints and their writes
    assert [kinds.count("lg.checkpoint") for kinds in kinds_stored(store)] == [2]
    assert [kinds.count("lg.writes") for kinds in kinds_stored(store)] == [2]
    saver.prune(["h"])
    assert [t.config for t in saver.list({"configurable": {"thread_id": "h"}})] == [configs[1]]
    assert shape(saver.get_tuple({"configurable": {"thread_id": "h"}})) == shape(newest)
    assert [kinds.count("lg.checkpoint") for kinds in kinds_stored(store)] == [1]
    before = kinds_stored(store)
    saver.prune(["h"])  # nothing left to prune: nothing written
    assert kinds_stored(store) == before
    fresh = StatekeepSaver(store)  # another process finds it where it was moved
    assert shape(fresh.get_tuple({"configurable": {"thread_id": "h"}})) == shape(newest)
    assert [t.config for t in fresh.list(None)] == [configs[1]]
    saver.put(configs[1], checkpoint({"run": "r3"}), {"step": 3}, {"run": 1})  # writes go on
    assert len(list(fresh.list({"configurable": {"thread_id": "h"}}))) == 2
    saver.prune(["h"])  # and back: the thread moves between its two States
    assert [kinds.count("lg.checkpoint") for kinds in kinds_stored(store)] == [1]
    saver.prune(["h"], strategy="delete")
    assert store.list() == [] and fresh.get_tuple({"configurable": {"thread_id": "h"}}) is None
    with pytest.raises(ValueError, match="strategy"):
        saver.prune(["h"], strategy="everything")


def test_a_state_that_is_not_a_thread_is_refused_untouched(store: Store) -> None:
    snapshot = {
        "task": "mine",
        "created_at": "2026-11-30T10:00:00+00:00",
        "updated_at": "2026-11-30T10:00:00+00:00",
        "turn": 0,
        "stopped_by": None,
        "finished": False,
    }
    store.write("run-1", [{"seq": 0, "kind": "task", "text": "mine"}], snapshot, create=True)
    saver = StatekeepSaver(store)
    with pytest.raises(ValueError, match="not a LangGraph thread"):
        put(saver, "run-1", x=1)
    with pytest.raises(ValueError, match="not a LangGraph thread"):
        saver.get_tuple({"configurable": {"thread_id": "run-1"}})
    assert store.read("run-1") == Record([{"seq": 0, "kind": "task", "text": "mine"}], snapshot)
    assert list(saver.list(None)) == []  # other States are not threads


@pytest.mark.parametrize("ns", ["", "sub:1"])
def test_writes_stored_before_their_checkpoint_come_back_with_it(store: Store, ns: str) -> None:
    """LangGraph saves a step's writes and its checkpoint in the background, so the writes
    may land first: reading the newest checkpoint from where it starts must still see them."""
    saver = StatekeepSaver(store)
    first = put(saver, "early", ns=ns, cid="1", a=1)
    ahead = {"configurable": {"thread_id": "early", "checkpoint_ns": ns, "checkpoint_id": "2"}}
    saver.put_writes(ahead, [("a", 2)], "task-1")
    saver.put_writes(ahead, [("c", 0)], "task-0")
    put(saver, "early", first, ns=ns, cid="2", a=2)
    saver.put_writes(ahead, [("b", 3)], "task-2")
    saver.put_writes(first, [("late", 1)], "task-9")  # a write for an older checkpoint
    want = [("task-0", "c", 0), ("task-1", "a", 2), ("task-2", "b", 3)]
    for reader in (saver, StatekeepSaver(store)):  # the cached end, and a fresh read
        newest = reader.get_tuple({"configurable": {"thread_id": "early", "checkpoint_ns": ns}})
        assert newest is not None and newest.checkpoint["id"] == "2"
        assert newest.pending_writes == want
    saver.prune(["early"])  # the heads computed from the whole history agree
    newest = StatekeepSaver(store).get_tuple({"configurable": {"thread_id": "early", "checkpoint_ns": ns}})
    assert newest is not None and newest.pending_writes == want
    third = {"configurable": {"thread_id": "early", "checkpoint_ns": ns, "checkpoint_id": "3"}}
    saver.put_writes(third, [("d", 4)], "task-3")  # a run under way: its checkpoint still to come
    saver.prune(["early"])
    put(saver, "early", ahead, ns=ns, cid="3", a=3)
    newest = StatekeepSaver(store).get_tuple({"configurable": {"thread_id": "early", "checkpoint_ns": ns}})
    assert newest is not None and newest.pending_writes == [("task-3", "d", 4)]


def test_a_newest_checkpoint_named_by_id_is_read_from_where_it_starts_by_a_fresh_saver() -> None:
    store = CountingStore()
    saver = StatekeepSaver(store)
    parent = None
    for i in range(30):
        parent = put(saver, "named", parent, i=i)
        saver.put_writes(parent, [("i", i)], "task")
    first = saver.get_tuple({"configurable": {"thread_id": "named"}})
    assert parent is not None and first is not None
    fresh = StatekeepSaver(store)  # a new process: nothing cached, the id from elsewhere
    store.reads.clear()
    assert shape(fresh.get_tuple(parent)) == shape(first)
    assert store.reads and 0 not in store.reads  # the snapshot, then from where it starts
    older = {
        "configurable": {
            **parent["configurable"],
            "checkpoint_id": first.parent_config["configurable"]["checkpoint_id"],
        }
    }  # type: ignore[index]
    found = StatekeepSaver(store).get_tuple(older)  # an older one: the whole thread is read
    assert found is not None and found.checkpoint["channel_values"] == {"i": 28}


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_saver_that_saw_a_thread_deleted_and_rebuilt_to_the_same_length_writes_onto_the_new_one(
    store: Store, api: str
) -> None:
    stale, other = StatekeepSaver(store), StatekeepSaver(store)
    put(stale, "again", a=0)
    put(stale, "again", ns="sub", a=0)  # stale now holds the thread's end and its heads
    other.delete_thread("again")  # another worker deletes the thread ...
    put(other, "again", a=1)  # ... and starts it again, as long as stale saw it
    put(other, "again", a=2)
    if api == "sync":
        put(stale, "again", a=3)
    else:
        cp = checkpoint({"a": 3})
        config = {"configurable": {"thread_id": "again", "checkpoint_ns": ""}}
        asyncio.run(stale.aput(config, cp, {"step": 3}, cp["channel_versions"]))
    fresh = StatekeepSaver(store)
    assert fresh.get_tuple({"configurable": {"thread_id": "again", "checkpoint_ns": "sub"}}) is None
    newest = fresh.get_tuple({"configurable": {"thread_id": "again"}})
    assert newest is not None and newest.checkpoint["channel_values"] == {"a": 3}
    values = [
        t.checkpoint["channel_values"]["a"] for t in fresh.list({"configurable": {"thread_id": "again"}})
    ]
    assert sorted(values) == [1, 2, 3]
    assert [row.turn for row in store.list()] == [3]  # the checkpoints of the new thread


def test_a_saver_that_saw_a_thread_deleted_and_rebuilt_one_entry_shorter_writes_onto_the_new_one(
    store: Store,
) -> None:
    stale, other = StatekeepSaver(store), StatekeepSaver(store)
    put(stale, "again", a=0)
    put(stale, "again", a=1)  # stale saw 4 entries: two checkpoints, each with its tip
    put(other, "src", a=10)
    put(other, "src", ns="sub", a=11)
    other.delete_thread("again")  # another worker deletes the thread ...
    other.copy_thread("src", "again")  # ... and fills it again in one write: 3 entries
    put(stale, "again", a=3)  # its old tip must not land in the free slot
    fresh = StatekeepSaver(store)
    newest = fresh.get_tuple({"configurable": {"thread_id": "again"}})
    assert newest is not None and newest.checkpoint["channel_values"] == {"a": 3}
    values = [
        t.checkpoint["channel_values"]["a"] for t in fresh.list({"configurable": {"thread_id": "again"}})
    ]
    assert sorted(values) == [3, 10, 11]
    stored = store.read("again")
    assert stored is not None and [e["kind"] for e in stored.entries].count("lg.tip") == 2

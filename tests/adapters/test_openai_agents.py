"""StatekeepSession (statekeep.adapters.openai_agents) on every store: what a user of the
OpenAI Agents SDK sees, and what the history keeps."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents.memory import Session, SessionSettings

from statekeep import CorruptStateError, MemoryStore, StateConflictError, Store
from statekeep._core.records import Record
from statekeep.adapters._ids import framework_id_for, state_id_for
from statekeep.adapters.openai_agents import StatekeepSession


def msg(text: str, role: str = "user") -> Any:
    return {"role": role, "content": text}


def texts(items: list[Any]) -> list[str]:
    return [item["content"] for item in items]


async def test_it_is_an_agents_session(store: Store) -> None:
    session = StatekeepSession("user-42", store)
    assert isinstance(session, Session)
    assert session.session_id == "user-42"
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.clear_session()
    assert await store.aread(session.state_id) is None  # reading and no-ops write nothing
    await session.add_items([msg("hi"), msg("hello", "assistant")])
    assert await session.get_items() == [msg("hi"), msg("hello", "assistant")]
    assert await StatekeepSession("user-42", store).get_items() == [msg("hi"), msg("hello", "assistant")]


async def test_pop_and_clear_keep_the_history_append_only(store: Store) -> None:
    session = StatekeepSession("s", store)
    await session.add_items([msg("a"), msg("b"), msg("c")])
    assert await session.pop_item() == msg("c")
    await session.clear_session()
    await session.add_items([msg("d")])
    assert await session.get_items() == [msg("d")]

    record = await store.aread(session.state_id)
    assert record is not None
    kinds = [entry["kind"] for entry in record.entries]
    assert kinds == ["session", "item", "item", "item", "pop", "clear", "item"]
    assert [entry["item"] for entry in record.entries if entry["kind"] == "item"] == [
        msg("a"),
        msg("b"),
        msg("c"),
        msg("d"),
    ]
    assert record.entries[4]["of"] == 3  # the tombstone names the item it hides
    assert record.entries[0]["session_id"] == "s"


async def test_pop_hides_the_newest_live_item_each_time(store: Store) -> None:
    session = StatekeepSession("s", store)
    await session.add_items([msg("a"), msg("b")])
    assert await session.pop_item() == msg("b")
    await session.add_items([msg("c")])
    assert await session.pop_item() == msg("c")
    assert await session.pop_item() == msg("a")
    assert await session.pop_item() is None
    assert await session.get_items() == []
    await session.add_items([msg("e")])
    assert await session.get_items(limit=5) == [msg("e")]


async def test_limits_as_sqlite_session_has_them(store: Store) -> None:
    session = StatekeepSession("s", store, session_settings=SessionSettings(limit=2))
    await session.add_items([msg(f"m{i}") for i in range(5)])
    assert texts(await session.get_items()) == ["m3", "m4"]  # the settings' limit by default
    assert texts(await session.get_items(limit=3)) == ["m2", "m3", "m4"]
    assert await session.get_items(limit=0) == []
    assert len(await session.get_items(limit=-1)) == 5  # negative: no limit, as SQLite's LIMIT
    assert len(await StatekeepSession("s", store, session_settings={"limit": None}).get_items()) == 5


class Counting(Store):
    """A MemoryStore that counts the entries each read hands back."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.reads: list[int] = []

    async def aread(self, state_id: str, *, since: int = 0) -> Record | None:
        record = await self.inner.aread(state_id, since=since)
        self.reads.append(0 if record is None else len(record.entries))
        return record

    async def awrite(self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False) -> None:
        await self.inner.awrite(state_id, entries, snapshot, create=create)


async def test_get_items_with_a_limit_reads_the_end_of_a_long_history() -> None:
    store = Counting()
    writer = StatekeepSession("long", store)
    for batch in range(10):
        await writer.add_items([msg(f"m{batch * 100 + i}") for i in range(100)])

    reader = StatekeepSession("long", store)  # a fresh object: nothing cached
    store.reads.clear()
    assert texts(await reader.get_items(limit=3)) == ["m997", "m998", "m999"]
    assert sum(store.reads) <= 3
    store.reads.clear()
    assert texts(await reader.get_items(limit=5)) == [f"m{i}" for i in range(995, 1000)]
    assert sum(store.reads) <= 5

    # Tombstones hide items: it reads further back, but not the whole history.
    for _ in range(40):
        await writer.pop_item()
    await writer.add_items([msg("new")])
    store.reads.clear()
    assert texts(await StatekeepSession("long", store).get_items(limit=4)) == ["m957", "m958", "m959", "new"]
    assert 0 < sum(store.reads) < 300
    assert len(await reader.get_items()) == 961


async def test_an_entry_the_snapshot_does_not_cover_yet_is_read_and_never_overwritten(store: Store) -> None:
    session = StatekeepSession("lagging", store)
    await session.add_items([msg("a")])
    # As a write cut off between its entries and its snapshot leaves it: snapshot=None keeps the old one.
    await store.awrite(session.state_id, [{"seq": 2, "kind": "item", "item": msg("b"), "w": "x"}], None)
    fresh = StatekeepSession("lagging", store)
    assert await fresh.get_items() == [msg("a"), msg("b")]
    await StatekeepSession("lagging", store).add_items([msg("c")])
    assert await fresh.get_items(limit=2) == [msg("b"), msg("c")]
    assert await StatekeepSession("lagging", store).pop_item() == msg("c")


async def test_concurrent_writers_lose_nothing_and_duplicate_nothing(store: Store) -> None:
    one, two = StatekeepSession("busy", store), StatekeepSession("busy", store)

    async def add(task: int) -> None:
        # Every call also adds the same item: equal entries must never be taken for a resend.
        await (one if task % 2 else two).add_items([msg(f"t{task}-0"), msg(f"t{task}-1"), msg("same")])

    async def add_the_same(task: int) -> None:  # equal calls too: each one adds its item
        await (one if task % 2 else two).add_items([msg("again")])

    await asyncio.gather(*(add(task) for task in range(20)), *(add_the_same(task) for task in range(10)))
    got = texts(await one.get_items())
    assert got.count("again") == 10
    got = [text for text in got if text != "again"]
    assert len(got) == 60
    assert got.count("same") == 20
    assert sorted(text for text in got if text != "same") == sorted(
        f"t{task}-{i}" for task in range(20) for i in range(2)
    )
    for task in range(20):  # one call's items stay together, in order
        at = got.index(f"t{task}-0")
        assert got[at : at + 3] == [f"t{task}-0", f"t{task}-1", "same"]
    record = await store.aread(one.state_id)
    assert record is not None and len(record.entries) == 71


async def test_concurrent_pops_each_take_a_different_item(store: Store) -> None:
    one, two = StatekeepSession("pops", store), StatekeepSession("pops", store)
    await one.add_items([msg(f"m{i}") for i in range(10)])
    popped = await asyncio.gather(*((one if i % 2 else two).pop_item() for i in range(6)))
    assert sorted(texts(popped)) == [f"m{i}" for i in range(4, 10)]
    assert texts(await two.get_items()) == [f"m{i}" for i in range(4)]


@pytest.mark.parametrize(
    "session_id",
    ["user:42", "user_3a42", "a/b c", "ünïcödé 🙂", "_h" + "0" * 64, "x" * 1000, " ", "\n"],
)
async def test_session_ids_of_any_length_and_characters(store: Store, session_id: str) -> None:
    session = StatekeepSession(session_id, store)
    neighbour = StatekeepSession(session_id + "!", store)
    await session.add_items([msg("mine")])
    await neighbour.add_items([msg("theirs")])
    assert await StatekeepSession(session_id, store).get_items() == [msg("mine")]
    assert session.state_id == state_id_for(session_id) != neighbour.state_id
    (row,) = [row for row in store.list() if row.id == session.state_id]
    assert row.task == session_id  # listed under its own id, hashed or not
    assert row.turn == 1 and row.labels == {"framework": "openai-agents"}
    assert framework_id_for(row.id) in (session_id, None)


async def test_a_framework_session_is_listed_under_its_original_id(store: Store) -> None:
    long_id = "tenant/acme:" + "user-" * 60
    await StatekeepSession(long_id, store).add_items([msg("a"), msg("b")])
    (row,) = store.list()
    assert row.id.startswith("_h") and row.task == long_id
    assert (row.turn, row.finished, row.stopped_by) == (2, False, None)


async def test_a_value_the_codec_refuses_is_a_clear_error_and_writes_nothing(store: Store) -> None:
    session = StatekeepSession("bad", store)
    with pytest.raises(TypeError, match=r"add_items: items\[1\]\['content'\] is nan"):
        await session.add_items([msg("fine"), {"role": "user", "content": float("nan")}])
    with pytest.raises(TypeError, match=r"items\[0\]\['content'\] is a object"):
        await session.add_items([{"role": "user", "content": object()}])
    with pytest.raises(TypeError, match="lone surrogate"):
        await session.add_items([msg("\udc80")])
    with pytest.raises(TypeError, match=r"items\[0\] must be a dict"):
        await session.add_items(["text"])  # type: ignore[list-item]
    assert await store.aread(session.state_id) is None
    await session.add_items([msg("after")])
    assert await session.get_items() == [msg("after")]


def test_a_session_id_must_be_a_non_empty_valid_str() -> None:
    with pytest.raises(TypeError, match="session_id holds a lone surrogate"):
        StatekeepSession("user-\udc80", MemoryStore())
    with pytest.raises(ValueError, match="must not be empty"):
        StatekeepSession("", MemoryStore())


async def test_a_state_that_is_no_session_is_refused(store: Store) -> None:
    store.write("not-a-session", [{"seq": 0, "kind": "task"}], {"task": "x"}, create=True)
    with pytest.raises(ValueError, match="is not an OpenAI Agents session"):
        await StatekeepSession("not-a-session", store).get_items()


async def test_a_closed_session_refuses_calls_and_leaves_the_store_open(store: Store) -> None:
    session = StatekeepSession("s", store)
    await session.add_items([msg("a")])
    session.close()
    with pytest.raises(RuntimeError, match="StatekeepSession is closed"):
        await session.add_items([])
    with pytest.raises(RuntimeError, match="closed"):
        await session.get_items()
    assert await StatekeepSession("s", store).get_items() == [msg("a")]


async def test_clear_writes_nothing_on_an_empty_session_and_sees_what_others_added(store: Store) -> None:
    mine, theirs = StatekeepSession("c", store), StatekeepSession("c", store)
    await mine.add_items([msg("a")])
    assert await mine.pop_item() == msg("a")
    await mine.clear_session()  # nothing to clear
    record = await store.aread(mine.state_id)
    assert record is not None and [e["kind"] for e in record.entries] == ["session", "item", "pop"]
    await theirs.add_items([msg("b")])  # mine last saw no items
    await mine.clear_session()
    assert await theirs.get_items() == []


class Gated(Store):
    """A MemoryStore whose writes wait until the test lets them through."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.writing = asyncio.Event()
        self.go = asyncio.Event()

    async def aread(self, state_id: str, *, since: int = 0) -> Record | None:
        return await self.inner.aread(state_id, since=since)

    async def awrite(self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False) -> None:
        self.writing.set()
        await self.go.wait()
        await self.inner.awrite(state_id, entries, snapshot, create=create)


async def test_a_cancelled_call_finishes_its_write_before_raising() -> None:
    store = Gated()
    session = StatekeepSession("s", store)
    call = asyncio.create_task(session.add_items([msg("once")]))
    await store.writing.wait()
    call.cancel()
    store.go.set()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await session.get_items() == [msg("once")]  # the outcome is known: written once


async def test_a_writer_whose_session_was_deleted_and_restarted_shorter_writes_at_its_new_end(
    store: Store,
) -> None:
    mine = StatekeepSession("u1", store)
    await mine.add_items([msg(f"old{i}") for i in range(5)])
    await store.adelete(mine.state_id)
    await StatekeepSession("u1", store).add_items([msg("new")])  # another worker starts again
    await mine.add_items([msg("y")])
    await mine.add_items([msg("z")])
    assert await mine.pop_item() == msg("z")
    assert texts(await StatekeepSession("u1", store).get_items()) == ["new", "y"]
    await mine.clear_session()
    assert await StatekeepSession("u1", store).get_items() == []


async def test_a_writer_whose_session_was_rebuilt_to_the_same_length_does_not_write_on_its_old_view(
    store: Store,
) -> None:
    mine = StatekeepSession("u1", store)
    await mine.add_items([msg("old1"), msg("old2")])
    await mine.clear_session()  # mine last saw 4 entries, no items
    await store.adelete(mine.state_id)
    theirs = StatekeepSession("u1", store)
    await theirs.add_items([msg("new1"), msg("new2"), msg("new3")])  # 4 entries again
    await mine.add_items([msg("y")])
    assert texts(await StatekeepSession("u1", store).get_items()) == ["new1", "new2", "new3", "y"]
    assert texts(await theirs.get_items(2)) == ["new3", "y"]


async def test_a_writer_whose_session_was_rebuilt_one_entry_shorter_does_not_write_on_its_old_view(
    store: Store,
) -> None:
    mine = StatekeepSession("u1", store)
    await mine.add_items([msg("old1"), msg("old2")])  # mine last saw 3 entries
    await store.adelete(mine.state_id)
    await StatekeepSession("u1", store).add_items([msg("new1")])  # 2 entries: one fewer
    await mine.add_items([msg("y")])  # its old last entry must not land in the free slot
    assert texts(await StatekeepSession("u1", store).get_items()) == ["new1", "y"]


class Rival(Store):
    """A MemoryStore where another writer adds an item right before each of the first
    ``wins`` writes of "mine" items, so each of those writes loses the race."""

    def __init__(self, wins: int) -> None:
        self.inner = MemoryStore()
        self.wins = wins
        self.lost = 0  # writes of "mine" that lost
        self.on_loss: Any = None  # called after each lost write
        self.rival = StatekeepSession("s", self)

    async def aread(self, state_id: str, *, since: int = 0) -> Record | None:
        return await self.inner.aread(state_id, since=since)

    async def awrite(self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False) -> None:
        if self.wins and any(entry.get("item") == msg("mine") for entry in entries):
            self.wins -= 1
            await self.rival.add_items([msg("theirs")])
            try:
                await self.inner.awrite(state_id, entries, snapshot, create=create)
            except BaseException:
                self.lost += 1
                if self.on_loss is not None:
                    self.on_loss()
                raise
            return
        await self.inner.awrite(state_id, entries, snapshot, create=create)


async def test_a_writer_that_keeps_losing_gives_up_with_a_clear_error() -> None:
    store = Rival(wins=1000)
    session = StatekeepSession("s", store)
    await session.add_items([msg("first")])
    with pytest.raises(StateConflictError, match=r"'s'.*100 writes in a row"):
        await session.add_items([msg("mine")])
    assert store.lost == 100
    record = await store.aread(session.state_id)
    assert record is not None and msg("mine") not in [e.get("item") for e in record.entries]


async def test_a_cancellation_takes_effect_after_a_lost_write() -> None:
    store = Rival(wins=1000)
    session = StatekeepSession("s", store)
    await session.add_items([msg("first")])
    call = asyncio.create_task(session.add_items([msg("mine")]))
    store.on_loss = lambda: call.cancel() if store.lost == 3 else None
    with pytest.raises(asyncio.CancelledError):
        await call
    assert store.lost == 3  # no attempt after the cancellation
    items = texts(await session.get_items())
    assert "mine" not in items and items.count("theirs") == 3


async def test_a_snapshot_ahead_of_the_history_is_a_clear_error(store: Store) -> None:
    await StatekeepSession("s", store).add_items([msg("a")])
    record = await store.aread(state_id_for("s"))
    assert record is not None and record.snapshot is not None
    meta = record.snapshot["openai_session"]
    await store.awrite(state_id_for("s"), [], {**record.snapshot, "openai_session": {**meta, "next": 10}})
    with pytest.raises(CorruptStateError, match="ends at seq 9"):
        await StatekeepSession("s", store).add_items([msg("b")])

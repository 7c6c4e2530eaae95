"""StatekeepStore: an alpineagents agent saving into statekeep stores and resuming from them,
adapter equality, ids, and the lone-surrogate refusal."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.frameworks import REPO, under_ci

if importlib.util.find_spec("alpineagents") is None:  # under CI a missing framework fails
    if under_ci():
        raise ImportError("alpineagents is not installed: ./dev test installs it (statekeep[frameworks])")
    pytest.skip("alpineagents is not installed: ./dev test installs it", allow_module_level=True)

from alpineagents import Agent, Message, State, tool
from alpineagents.testing import FakeModel, tool_call

from statekeep import FileStore, MemoryStore, SQLiteStore, open_store
from statekeep.adapters._ids import state_id_for
from statekeep.adapters.alpineagents import StatekeepStore

LOCAL = ("memory", "file", "sqlite")


def local_store(kind: str, tmp_path: Path) -> Any:
    if kind == "memory":
        return MemoryStore()
    if kind == "file":
        return FileStore(tmp_path / "fs")
    return SQLiteStore(tmp_path / "runs.db")


def agent(replies: list[Any], store: StatekeepStore, **settings: Any) -> Agent:
    return Agent(model=FakeModel(replies), store=store, reporter=None, human=None, **settings)


@tool
def add(a: int, b: int) -> int:
    """Add two numbers"""
    return a + b


@pytest.mark.parametrize("kind", LOCAL)
def test_an_agent_run_saves_into_statekeep_and_resumes(kind: str, tmp_path: Path) -> None:
    with local_store(kind, tmp_path) as raw:
        store = StatekeepStore(raw)
        state = State(id="sum_1", messages=[Message.user("What is 1+2?")])
        agent([tool_call("add", a=1, b=2), "It is 3"], store, tools=[add]).run(state)

        loaded = store.load("sum_1")
        assert loaded.history == state.history and loaded.answer == "It is 3"
        loaded.add_message(Message.user("And times 2?"))
        fake = FakeModel(["6"])
        Agent(model=fake, store=store, tools=[add], reporter=None, human=None).run(loaded)
        assert [m.text for m in fake.requests[0].messages][-1] == "And times 2?"

        again = StatekeepStore(raw).load("sum_1")
        assert again.answer == "6" and again.history == loaded.history
        # statekeep's own view: one State, under the mapped id, listed with the alpineagents id,
        # in the adapter's namespace (the store given, when it is in a namespace of its own).
        (row,) = store.store.list()
        assert (row.id, row.task, row.turn) == (state_id_for("sum_1"), "sum_1", again.turn)
        assert len(store.store.read(row.id).entries) == len(again.history)


def test_a_new_process_resumes_what_an_exited_one_saved(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    script = textwrap.dedent(
        f"""
        from alpineagents import Agent, Message, State
        from alpineagents.testing import FakeModel
        from statekeep import open_store
        from statekeep.adapters.alpineagents import StatekeepStore

        store = StatekeepStore(open_store({url!r}))
        Agent(model=FakeModel(["Hello"]), store=store, reporter=None, human=None).run(
            State(id="chat", messages=[Message.user("Hi")])
        )
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=REPO, timeout=120)

    with open_store(url) as raw:
        store = StatekeepStore(raw)
        state = store.load("chat")
        assert [m.text for m in state.messages] == ["Hi", "Hello"]
        state.add_message(Message.user("And then?"))
        fake = FakeModel(["More"])
        Agent(model=fake, store=store, reporter=None, human=None).run(state)
        assert [m.text for m in fake.requests[0].messages] == ["Hi", "Hello", "And then?"]
        assert StatekeepStore(raw).load("chat").answer == "More"


def test_async_run_list_and_delete(tmp_path: Path) -> None:
    async def main() -> None:
        async with SQLiteStore(tmp_path / "runs.db") as raw:
            store = StatekeepStore(raw)
            await agent(["One"], store).arun(State(id="a-1", messages=[Message.user("First")]))
            await agent(["Two"], store).arun(State(id="b_2", messages=[Message.user("Second")]))
            listed = await store.alist()
            assert [(i.id, i.first_message, i.turn) for i in listed] == [
                ("b_2", "Second", 1),
                ("a-1", "First", 1),
            ]
            assert [i.id for i in store.list()] == ["b_2", "a-1"]
            assert (await store.aload("b_2")).answer == "Two"
            await store.adelete("b_2")
            assert [i.id for i in await store.alist()] == ["a-1"]
            assert await store.aread("b_2") is None

    asyncio.run(main())


def test_list_leaves_out_states_it_did_not_write(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "runs.db") as raw:
        store = StatekeepStore(raw)
        agent(["Done"], store).run(State(id="mine", messages=[Message.user("Go")]))
        at = "2030-01-01T00:00:00+00:00"
        not_ours = {
            "task": "x",
            "created_at": at,
            "updated_at": at,
            "turn": 0,
            "stopped_by": None,
            "finished": False,
        }
        raw.write("theirs", [{"seq": 0, "kind": "note"}], not_ours, create=True)
        assert store.read("theirs") is None  # the default namespace's: another program's, unseen
        store.store.write(  # in the adapter's namespace: seen, and refused
            "theirs",
            [{"seq": 0, "kind": "note"}],
            {
                "task": "x",
                "created_at": "2030-01-01T00:00:00+00:00",
                "updated_at": "2030-01-01T00:00:00+00:00",
                "turn": 0,
                "stopped_by": None,
                "finished": False,
            },
            create=True,
        )
        assert [i.id for i in store.list()] == ["mine"]
        with pytest.raises(ValueError, match="not an alpineagents State"):
            store.read("theirs")


def test_read_gives_back_the_info_exactly_as_written(tmp_path: Path) -> None:
    with FileStore(tmp_path / "fs") as raw:
        store = StatekeepStore(raw)
        state = State(id="x", messages=[Message.user("Go")])
        store.save(state)
        record = store.read("x")
        assert record is not None and record.info["v"] == 5 and record.info["first_message"] == "Go"
        entries = [*record.entries, {**record.entries[-1], "seq": len(record.entries)}]
        info = {**record.info, "turn": 7}
        store.write("x", entries, info)
        again = store.read("x")
        assert again is not None and (again.entries, again.info) == (entries, info)


# -- equality: alpineagents compares stores with == ------------------------------------


def test_adapters_over_the_same_storage_are_equal(tmp_path: Path) -> None:
    first = StatekeepStore(open_store(f"sqlite:///{tmp_path / 'runs.db'}"))
    second = StatekeepStore(open_store(f"sqlite:///{tmp_path / 'runs.db'}"))
    other_space = StatekeepStore(open_store(f"sqlite:///{tmp_path / 'runs.db'}?namespace=team-b"))
    other_file = StatekeepStore(open_store(f"sqlite:///{tmp_path / 'other.db'}"))
    folder = StatekeepStore(open_store(str(tmp_path / "fs")))
    try:
        assert first == second and hash(first) == hash(second)
        assert first != other_space and first != other_file and first != folder
        assert StatekeepStore(folder.store) == StatekeepStore(FileStore(tmp_path / "fs" / "."))
        memory = MemoryStore()
        assert StatekeepStore(memory) == StatekeepStore(memory)
        assert StatekeepStore(memory) != StatekeepStore(MemoryStore())

        # What alpineagents does with it: a State loaded through one adapter saves through
        # an equal one, and is refused by an adapter on other storage.
        agent(["One"], first).run(State(id="same", messages=[Message.user("Go")]))
        state = second.load("same")
        state.add_message(Message.user("again"))
        agent(["Two"], first).run(state)
        assert second.load("same").answer == "Two"
        state.add_message(Message.user("more"))
        with pytest.raises(ValueError, match="saved in another store"):
            other_space.save(state)
    finally:
        for adapter in (first, second, other_space, other_file, folder):
            adapter.store.close()


# -- lone surrogates ---------------------------------------------------------------------


def test_a_lone_surrogate_is_refused_with_a_clear_error_and_nothing_is_saved(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "runs.db") as raw:
        store = StatekeepStore(raw)
        state = State(id="bad", messages=[Message.user("name: caf\udce9.txt")])
        with pytest.raises(TypeError) as raised:
            store.save(state)
        message = str(raised.value)
        assert "lone surrogate" in message and "'bad'" in message
        assert "history entry seq 0" in message and "U+DCE9" in message
        assert "Nothing was saved" in message
        assert store.read("bad") is None and raw.list() == []

        good = State(id="good", messages=[Message.user("fine")])
        store.save(good)
        held = store.read("good")
        assert held is not None
        good.add_message(Message.user("then \ud800"))
        with pytest.raises(TypeError, match=r"history entry seq 1.*lone surrogate"):
            store.save(good)
        assert store.read("good") == held  # nothing of the failed write was stored


def test_a_lone_surrogate_in_a_run_fails_the_save_not_silently(tmp_path: Path) -> None:
    with MemoryStore() as raw:
        store = StatekeepStore(raw)
        with pytest.raises(TypeError, match="lone surrogate"):
            agent(["ok"], store).run(State(id="run", messages=[Message.user("\udc80")]))
        assert store.read("run") is None


def test_a_statekeep_store_is_required() -> None:
    from alpineagents import FileStore as AlpineFileStore

    with pytest.raises(TypeError, match="needs a statekeep store"):
        StatekeepStore(AlpineFileStore("x"))


def test_an_id_too_long_to_escape_is_kept_whole_in_the_listing(tmp_path: Path) -> None:
    long_id = "a_" * 64  # 128 characters, valid in alpineagents; 192 once escaped
    with FileStore(tmp_path / "fs") as raw:
        store = StatekeepStore(raw)
        agent(["Done"], store).run(State(id=long_id, messages=[Message.user("Go")]))
        assert [i.id for i in store.list()] == [long_id]
        assert store.load(long_id).answer == "Done"
        (row,) = store.store.list()
        assert row.id == state_id_for(long_id) and row.id.startswith("_h") and row.task == long_id
        with pytest.raises(ValueError, match="already saved"):
            store.save(State(id=long_id, messages=[Message.user("Again")]))

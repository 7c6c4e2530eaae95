"""Each adapter keeps its States in a namespace of its own when given a store in its
``default`` namespace, reads and continues what an adapter saved in ``default`` before, and
uses a store without namespaces as it is. On every built-in store."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from statekeep import FileStore, MemoryStore, State, Store
from tests.support.frameworks import require_installed
from tests.support.stores import STORE_FACTORIES

require_installed("langgraph-checkpoint", "4.3.2")
require_installed("openai-agents", "0.24.0")
require_installed("alpineagents", "0.7.1")

from alpineagents import Agent, Message  # noqa: E402
from alpineagents import State as AlpineState  # noqa: E402
from alpineagents.testing import FakeModel  # noqa: E402

from statekeep.adapters.alpineagents import StatekeepStore  # noqa: E402
from statekeep.adapters.langgraph import StatekeepSaver  # noqa: E402
from statekeep.adapters.openai_agents import StatekeepSession  # noqa: E402

ID = "chat-1"  # one id, used by every framework and by statekeep's own State


@pytest.fixture(params=sorted(STORE_FACTORIES))
def shared(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Store]:
    """A store of each kind in its ``default`` namespace, as a user opens it."""
    s = STORE_FACTORIES[request.param](tmp_path)
    yield s
    s.close()


def checkpoint(cid: str, **values: Any) -> dict[str, Any]:
    return {
        "v": 1,
        "id": cid,
        "ts": "2026-11-30T10:00:00+00:00",
        "channel_values": values,
        "channel_versions": dict.fromkeys(values, int(cid)),
        "versions_seen": {},
        "pending_sends": [],
        "updated_channels": None,
    }


def put(saver: StatekeepSaver, cid: str, thread: str = ID, **values: Any) -> None:
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    cp = checkpoint(cid, **values)
    saver.put(config, cp, {"source": "loop", "step": 0, "parents": {}}, cp["channel_versions"])


def newest(saver: StatekeepSaver, thread: str = ID) -> Any:
    found = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
    return None if found is None else found.checkpoint["channel_values"]


def session_items(session: StatekeepSession) -> list[Any]:
    return asyncio.run(session.get_items())


def run_alpine(store: StatekeepStore, answer: str, state: Any | None = None, alpine_id: str = ID) -> Any:
    state = state or AlpineState(id=alpine_id, messages=[Message.user("Hi")])
    Agent(model=FakeModel([answer]), store=store, reporter=None, human=None).run(state)
    return store.load(state.id)


def test_frameworks_sharing_one_store_each_keep_their_own_states(shared: Store) -> None:
    shared.save(State("statekeep's own run", id=ID))
    saver, session, alpine = StatekeepSaver(shared), StatekeepSession(ID, shared), StatekeepStore(shared)
    put(saver, "1", a="one")
    asyncio.run(session.add_items([{"role": "user", "content": "hello"}]))
    assert run_alpine(alpine, "Hello!").answer == "Hello!"

    assert newest(saver) == {"a": "one"}
    assert session_items(session) == [{"role": "user", "content": "hello"}]
    assert [info.id for info in alpine.list()] == [ID]
    assert shared.load(ID).task == "statekeep's own run"  # untouched, and the only State listed here
    assert [row.task for row in shared.list()] == ["statekeep's own run"]
    for adapter, space in ((saver, "langgraph"), (session, "openai-agents"), (alpine, "alpineagents")):
        (row,) = adapter.store.list()
        assert (row.task, adapter.store.namespace, row.labels) == (ID, space, {"framework": space})


def test_what_an_adapter_saved_in_default_before_is_read_and_continued_there(shared: Store) -> None:
    # Saved as adapters did before they had namespaces: in the store's default namespace
    # (where two frameworks could not share an id: each has its own here).
    old_saver = StatekeepSaver(shared, namespace="default")
    put(old_saver, "1", thread="lg-old", a="one")
    old_session = StatekeepSession("oa-old", shared, namespace="default")
    asyncio.run(old_session.add_items([{"role": "user", "content": "before"}]))
    old_alpine = StatekeepStore(shared, namespace="default")
    run_alpine(old_alpine, "Before.", alpine_id="al-old")
    before = {row.labels["framework"] for row in shared.list()}
    assert before == {"langgraph", "openai-agents", "alpineagents"} and old_saver.store is shared

    saver, session, alpine = (
        StatekeepSaver(shared),
        StatekeepSession("oa-old", shared),
        StatekeepStore(shared),
    )
    assert newest(saver, "lg-old") == {"a": "one"}
    put(saver, "2", thread="lg-old", a="two")  # continued where it is
    assert newest(saver, "lg-old") == {"a": "two"} and newest(old_saver, "lg-old") == {"a": "two"}
    config = {"configurable": {"thread_id": "lg-old"}}
    assert [c.checkpoint["id"] for c in saver.list(config)] == ["2", "1"]
    assert [c.config["configurable"]["thread_id"] for c in saver.list(None)] == ["lg-old", "lg-old"]

    assert session_items(session) == [{"role": "user", "content": "before"}]
    asyncio.run(session.add_items([{"role": "user", "content": "after"}]))
    assert [i["content"] for i in session_items(old_session)] == ["before", "after"]

    assert [info.id for info in alpine.list()] == ["al-old"]
    state = alpine.load("al-old")
    state.add_message(Message.user("And now?"))
    assert run_alpine(alpine, "After.", state).answer == "After."
    assert old_alpine.load("al-old").answer == "After."
    with pytest.raises(ValueError, match="already saved"):  # the id is taken, where it is
        alpine.save(AlpineState(id="al-old", messages=[Message.user("Again")]))

    # Nothing was copied to the new namespaces; new ids go there.
    for adapter in (saver, session, alpine):
        assert adapter.store.list() == []
    other = StatekeepSession("user-2", shared)
    asyncio.run(other.add_items([{"role": "user", "content": "new"}]))
    assert [row.task for row in other.store.list()] == ["user-2"]

    # Deleting removes what was saved in default.
    saver.delete_thread("lg-old")
    assert newest(saver, "lg-old") is None and newest(old_saver, "lg-old") is None
    alpine.delete("al-old")
    assert alpine.read("al-old") is None and old_alpine.read("al-old") is None
    assert [row.task for row in shared.list()] == ["oa-old"]


class OwnStore(Store):
    """A store written against the public API: no namespaces."""

    def __init__(self) -> None:
        self.inner = MemoryStore()

    def write(self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False) -> None:
        self.inner.write(state_id, entries, snapshot, create=create)

    def read(self, state_id: str, *, since: int = 0) -> Any:
        return self.inner.read(state_id, since=since)

    def list(self, **query: Any) -> Any:
        return self.inner.list(**query)

    def delete(self, state_id: str, **options: Any) -> None:
        self.inner.delete(state_id, **options)


def test_a_store_without_namespaces_is_used_as_it_is() -> None:
    own = OwnStore()
    session = StatekeepSession(ID, own)
    asyncio.run(session.add_items([{"role": "user", "content": "hi"}]))
    assert session.store is own and [row.task for row in own.list()] == [ID]
    with pytest.raises(TypeError, match="needs a store with namespaces"):
        StatekeepSaver(own, namespace="langgraph")


def test_a_store_in_a_chosen_namespace_is_used_as_it_is_and_namespace_picks_another(tmp_path: Any) -> None:
    chosen = FileStore(tmp_path / "runs", namespace="team-a")
    saver = StatekeepSaver(chosen)
    put(saver, "1", a="one")
    assert saver.store is chosen and [row.task for row in chosen.list()] == [ID]
    picked = StatekeepSaver(chosen, namespace=f"n-{uuid.uuid4().hex[:8]}")
    assert newest(picked) is None
    put(picked, "1", a="elsewhere")
    assert newest(saver) == {"a": "one"} and newest(picked) == {"a": "elsewhere"}
    with pytest.raises(ValueError, match="invalid namespace"):
        StatekeepStore(chosen, namespace="Not Valid")

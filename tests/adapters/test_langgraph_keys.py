"""statekeep.adapters.langgraph.tool_call_key: a LangGraph tool's idempotency key, from its
ToolRuntime or its config and InjectedToolCallId, made of the thread id, the thread's life
(kept by StatekeepSaver in the thread's snapshot) and the call id: the same in a new
process resuming the thread and after prune / delete_for_runs, new for a thread deleted
and started again, different per call and per thread."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from statekeep import MemoryStore, Store, idempotency_key, open_store
from statekeep.adapters.langgraph import StatekeepSaver, tool_call_key
from tests.support.frameworks import BACKENDS, backend_url, child_result, require_installed

require_installed("langgraph", "1.2.22")

from tests.support.children import langgraph_keys_child as child  # noqa: E402

THREAD = "user:42/orders"
CALLS = [call_id for _, call_id in child.CALLS]


def keys_of(thread_id: str, life: str | None) -> dict[str, str]:
    return {call_id: idempotency_key(thread_id, life, call_id) for call_id in CALLS}


def life_of(store: Store, thread_id: str) -> str | None:
    """The thread's life token, as a new saver (a new process) reads it."""
    return StatekeepSaver(store).thread_life(thread_id)


def ran(store: Store, thread_id: str) -> dict[str, str]:
    """Start the graph on the thread (it stops before its tools), then resume it: the keys."""
    assert child.run(store, thread_id, "start") == {}
    return child.run(store, thread_id, "resume")


def in_child(url: str, phase: str) -> dict[str, Any]:
    return child_result("tests.support.children.langgraph_keys_child", url, THREAD, phase)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with open_store(backend_url(request.param, tmp_path)) as opened:
        yield opened


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_a_new_process_resuming_the_thread_gives_its_tools_the_same_keys(
    backend: str, tmp_path: Path
) -> None:
    url = backend_url(backend, tmp_path)
    assert in_child(url, "start") == {}  # stopped before the tools
    keys = in_child(url, "resume")  # both ways of reaching the call id
    with open_store(url) as store:
        life = life_of(store, THREAD)
    assert isinstance(life, str) and len(life) == 32
    assert keys == keys_of(THREAD, life)


def test_the_key_follows_the_thread_s_life(store: Store) -> None:
    first = ran(store, THREAD)
    life = life_of(store, THREAD)
    assert life is not None and first == keys_of(THREAD, life)
    assert first != keys_of(THREAD, None)

    # another saver (another process) on the same store: the same key for the same call
    other: Any = {"configurable": {"thread_id": THREAD, "__pregel_checkpointer": StatekeepSaver(store)}}
    assert {c: tool_call_key(other, c) for c in CALLS} == first

    # deleted, then run again under the same id with the same call ids: new keys
    StatekeepSaver(store).delete_thread(THREAD)
    again = ran(store, THREAD)
    assert again == keys_of(THREAD, life_of(store, THREAD))
    assert set(again.values()).isdisjoint(first.values())


def test_prune_and_delete_for_runs_keep_the_thread_s_life(store: Store) -> None:
    """Both rewrite the thread (moved to its other State and home again: a new State each
    time); the thread's life, and so its tools' keys, stay."""
    saver = StatekeepSaver(store)
    assert child.run(store, THREAD, "start", run_id="run-start") == {}
    keys = child.run(store, THREAD, "resume", run_id="run-resume")
    life = life_of(store, THREAD)
    assert keys == keys_of(THREAD, life)
    assert child.run(store, THREAD, "through", run_id="run-again") == keys  # the same calls again
    runs = {item.metadata.get("run_id") for item in saver.list(config(THREAD))}
    assert runs == {"run-start", "run-resume", "run-again"}
    before = stored(saver)

    saver.delete_for_runs(["run-start"])
    after_drop = stored(saver)
    assert after_drop < before  # rewritten without the start's checkpoints
    assert life_of(store, THREAD) == life
    saver.prune([THREAD])
    assert stored(saver) < after_drop
    assert life_of(store, THREAD) == life

    # the thread goes on with it: the model asks for the same calls again, same keys
    assert child.run(store, THREAD, "through") == keys
    assert life_of(store, THREAD) == life


def test_a_copied_thread_has_a_life_of_its_own(store: Store) -> None:
    saver = StatekeepSaver(store)
    ran(store, THREAD)
    saver.copy_thread(THREAD, "copy")
    life, copied = life_of(store, THREAD), life_of(store, "copy")
    assert copied is not None and copied != life
    # copied again after the copy was deleted: another life again
    saver.delete_thread("copy")
    saver.copy_thread(THREAD, "copy")
    assert life_of(store, "copy") not in (None, life, copied)
    # copied into a thread that exists: the target keeps its own
    ran(store, "target")
    target = life_of(store, "target")
    saver.copy_thread(THREAD, "target")
    assert life_of(store, "target") == target


def test_a_thread_stored_before_life_tokens_keeps_its_keys(store: Store) -> None:
    """A thread an older statekeep wrote has no token: its keys stay those of the thread and
    call ids alone, through later writes and a prune (a call in doubt keeps its key)."""
    saver = StatekeepSaver(store)
    assert child.run(store, THREAD, "start") == {}
    sid = child_state(THREAD)
    record = saver.store.read(sid)
    assert record is not None and record.snapshot is not None
    snapshot = dict(record.snapshot, langgraph=dict(record.snapshot["langgraph"]))
    assert snapshot["langgraph"].pop("life")
    saver.store.delete(sid)  # written again as the older statekeep left it: no token
    saver.store.write(sid, record.entries, snapshot, create=True)

    keys = child.run(store, THREAD, "resume")
    assert keys == keys_of(THREAD, None)
    assert life_of(store, THREAD) is None
    saver.prune([THREAD])
    assert life_of(store, THREAD) is None
    # deleted and started again, it is a new thread: it gets a token
    saver.delete_thread(THREAD)
    assert ran(store, THREAD) == keys_of(THREAD, life_of(store, THREAD))
    assert life_of(store, THREAD) is not None


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_new_thread_s_tools_run_before_its_first_checkpoint_is_stored(api: str, durability: str) -> None:
    """Run through without stopping: with durability="exit" nothing of the thread is stored
    before its tools run; their keys use the token the thread is then stored with. The async
    run uses async tools (tool_call_key blocks for its read, if any)."""
    with MemoryStore() as store:
        if api == "sync":
            keys = child.run(store, THREAD, "through", durability=durability)
        else:
            keys = asyncio.run(child.arun(store, THREAD, "through", durability=durability))
        assert keys == keys_of(THREAD, life_of(store, THREAD))
        assert life_of(store, THREAD) is not None


def test_the_async_graph_resumed_gives_the_same_keys() -> None:
    with MemoryStore() as store:
        assert asyncio.run(child.arun(store, THREAD, "start")) == {}
        keys = asyncio.run(child.arun(store, THREAD, "resume"))
        assert keys == keys_of(THREAD, life_of(store, THREAD)) == child.run(store, THREAD, "resume")
        assert asyncio.run(StatekeepSaver(store).athread_life(THREAD)) == life_of(store, THREAD)


def test_another_checkpointer_or_none_gives_the_key_without_a_life() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    assert child.run(None, THREAD, "through", checkpointer=InMemorySaver()) == keys_of(THREAD, None)
    config: Any = {"configurable": {"thread_id": THREAD, "__pregel_checkpointer": InMemorySaver()}}
    assert tool_call_key(config, "call-1") == idempotency_key(THREAD, None, "call-1")


def test_keys_differ_per_call_and_per_thread() -> None:
    with MemoryStore() as store:
        here = ran(store, THREAD)
        other = ran(store, "another thread")
        assert other == keys_of("another thread", life_of(store, "another thread"))
    assert len(set(here.values())) == 2  # per call
    assert set(here.values()).isdisjoint(other.values())  # per thread


def test_the_parts_of_a_key() -> None:
    config = {"configurable": {"thread_id": THREAD, "checkpoint_ns": "sub"}}
    key = tool_call_key(config, "call-1")
    assert key == idempotency_key(THREAD, None, "call-1") and key.startswith("sk1_")
    assert (
        tool_call_key(SimpleNamespace(config=config, tool_call_id="call-1")) == key
    )  # a ToolRuntime's fields
    # a thread id that is no str is taken as StatekeepSaver takes it: str(thread_id)
    assert tool_call_key({"configurable": {"thread_id": 42}}, "c") == idempotency_key("42", None, "c")
    with MemoryStore() as store:
        saver = StatekeepSaver(store)
        ran(store, "42")
        with_saver: Any = {"configurable": {"thread_id": 42, "__pregel_checkpointer": saver}}
        assert tool_call_key(with_saver, "c") == idempotency_key("42", saver.thread_life("42"), "c")


def test_a_missing_thread_or_call_id_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"no thread id in the config.*thread_id"):
        tool_call_key({"configurable": {}}, "call-1")
    with pytest.raises(TypeError, match="no thread id"):
        tool_call_key(None, "call-1")
    with pytest.raises(TypeError, match=r"no tool call id.*InjectedToolCallId"):
        tool_call_key({"configurable": {"thread_id": "t"}})
    with pytest.raises(TypeError, match="no tool call id"):
        tool_call_key(SimpleNamespace(config={"configurable": {"thread_id": "t"}}, tool_call_id=None))
    with MemoryStore() as store:  # with the saver in the config: the same errors, nothing stored
        saver = StatekeepSaver(store)
        with pytest.raises(TypeError, match="no tool call id"):
            tool_call_key({"configurable": {"thread_id": "t", "__pregel_checkpointer": saver}})
        with pytest.raises(TypeError, match="no thread id"):
            tool_call_key({"configurable": {"__pregel_checkpointer": saver}}, "call-1")
        assert saver.store.list() == []


def stored(saver: StatekeepSaver) -> int:
    """How many entries the thread's State holds."""
    record = saver.store.read(child_state(THREAD))
    assert record is not None
    return len(record.entries)


def config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def child_state(thread_id: str) -> str:
    from statekeep.adapters._ids import state_id_for

    return state_id_for(thread_id)

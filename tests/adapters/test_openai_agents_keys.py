"""StatekeepSession.tool_call_key / atool_call_key: the idempotency key an OpenAI Agents
function tool passes to the service it calls, made of the session id, the incarnation of
the session's State and the tool call id, on every store."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext as AgentsToolContext

from statekeep import MemoryStore, StateNotFoundError, Store, idempotency_key
from statekeep._core.records import Record
from statekeep.adapters.openai_agents import StatekeepSession

SESSION = "user:42/refunds"


def msg(text: str) -> Any:
    return {"role": "user", "content": text}


async def incarnation_of(session: StatekeepSession) -> str | None:
    record = await session.store.aread(session.state_id)
    assert record is not None, "the session has no State"
    return record.incarnation


def refunding(session: StatekeepSession, keys: dict[str, str], call_ids: list[str]) -> Agent[Any]:
    """An agent whose model calls ``refund`` (a sync tool) and ``notify`` (an async one)
    once per call id, then answers; each tool records its key by call id."""

    @function_tool
    def refund(ctx: AgentsToolContext[Any], amount: int) -> str:
        """Refund an amount."""
        keys[ctx.tool_call_id] = session.tool_call_key(ctx)
        return "refunded"

    @function_tool
    async def notify(ctx: AgentsToolContext[Any], text: str) -> str:
        """Tell the customer."""
        keys[ctx.tool_call_id] = await session.atool_call_key(ctx)
        return "sent"

    calls = [
        function_call("refund", {"amount": 5}, call_id=call_id)
        if i % 2 == 0
        else function_call("notify", {"text": "done"}, call_id=call_id)
        for i, call_id in enumerate(call_ids)
    ]
    model = ScriptedModel([calls, [assistant_message("Refunded.")]])
    return Agent(name="clerk", model=model, tools=[refund, notify])


async def test_a_runs_tools_get_the_key_of_the_session_state_and_the_call(store: Store) -> None:
    session, keys = StatekeepSession(SESSION, store), {}
    result = await Runner.run(refunding(session, keys, ["c1", "c2"]), "refund 5", session=session)
    assert result.final_output == "Refunded."
    incarnation = await incarnation_of(session)
    assert incarnation is not None  # every built-in store keeps one
    assert keys == {
        "c1": idempotency_key(SESSION, incarnation, "c1"),  # the sync tool's
        "c2": idempotency_key(SESSION, incarnation, "c2"),  # the async tool's
    }


async def test_the_key_is_the_same_from_another_session_object_and_after_clear(store: Store) -> None:
    session = StatekeepSession(SESSION, store)
    await session.add_items([msg("refund 5")])
    key = session.tool_call_key("c1")
    assert key == idempotency_key(SESSION, await incarnation_of(session), "c1")
    assert session.tool_call_key("c2") != key  # another call
    # another process's view: a session object that has read nothing yet reads once (the
    # sync read works inside this running event loop; the async one never blocks it)
    assert StatekeepSession(SESSION, store).tool_call_key("c1") == key
    assert await StatekeepSession(SESSION, store).atool_call_key("c1") == key
    other = StatekeepSession("user:43/refunds", store)
    await other.add_items([msg("refund 7")])
    assert other.tool_call_key("c1") != key  # another session
    await session.clear_session()  # the same State: the keys stay
    assert session.tool_call_key("c1") == key
    assert StatekeepSession(SESSION, store).tool_call_key("c1") == key


async def test_a_session_deleted_and_started_again_gets_new_keys_for_the_same_call_ids(
    store: Store,
) -> None:
    session, before, after = StatekeepSession(SESSION, store), dict[str, str](), dict[str, str]()
    await Runner.run(refunding(session, before, ["c1", "c2"]), "refund 5", session=session)
    await store.adelete(session.state_id)
    # the same session object, and a model that gives the same call ids again
    await Runner.run(refunding(session, after, ["c1", "c2"]), "refund 5", session=session)
    assert set(before) == set(after) == {"c1", "c2"}
    assert before["c1"] != after["c1"] and before["c2"] != after["c2"]
    incarnation = await incarnation_of(session)
    assert after == {call_id: idempotency_key(SESSION, incarnation, call_id) for call_id in after}
    assert StatekeepSession(SESSION, store).tool_call_key("c1") == after["c1"]


async def test_a_writer_that_finds_the_session_created_again_learns_its_new_incarnation(
    store: Store,
) -> None:
    mine = StatekeepSession(SESSION, store)
    await mine.add_items([msg("old1"), msg("old2")])
    old_key = mine.tool_call_key("c1")
    await store.adelete(mine.state_id)
    await StatekeepSession(SESSION, store).add_items([msg("new1"), msg("new2")])  # the same length
    await mine.add_items([msg("y")])  # its old view is refused: it reads again, and writes
    new_key = mine.tool_call_key("c1")
    assert new_key != old_key and new_key == idempotency_key(SESSION, await incarnation_of(mine), "c1")
    assert [item["content"] for item in await mine.get_items()] == ["new1", "new2", "y"]


async def test_a_session_in_the_adapters_own_namespace_keys_with_its_state_there() -> None:
    shared = MemoryStore()  # in its default namespace: the session goes to "openai-agents"
    session = StatekeepSession(SESSION, shared)
    await session.add_items([msg("hi")])
    assert session.store.namespace == "openai-agents" and shared.read(session.state_id) is None
    key = idempotency_key(SESSION, await incarnation_of(session), "c1")
    assert session.tool_call_key("c1") == StatekeepSession(SESSION, shared).tool_call_key("c1") == key


async def test_a_session_saved_in_default_before_namespaces_keys_with_its_state_there() -> None:
    shared = MemoryStore()
    older = StatekeepSession(SESSION, shared, namespace="default")  # as saved before namespaces
    await older.add_items([msg("old")])
    record = shared.read(older.state_id)
    assert record is not None and record.incarnation is not None
    key = idempotency_key(SESSION, record.incarnation, "c1")
    session = StatekeepSession(SESSION, shared)  # found in default, and continued there
    assert session.tool_call_key("c1") == key
    await session.add_items([msg("new")])  # bound to that incarnation: written
    assert session.tool_call_key("c1") == key == older.tool_call_key("c1")
    assert [item["content"] for item in await older.get_items()] == ["old", "new"]


class ForgetfulStore(Store):
    """A store of one's own that keeps no incarnations: its records carry none, and its
    write takes no ``incarnation=``."""

    def __init__(self) -> None:
        self.inner = MemoryStore()

    async def aread(self, state_id: str, *, since: int = 0) -> Record | None:
        record = await self.inner.aread(state_id, since=since)
        return None if record is None else dataclasses.replace(record, incarnation=None)

    async def awrite(self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False) -> None:
        await self.inner.awrite(state_id, entries, snapshot, create=create)

    async def adelete(self, state_id: str, **options: Any) -> None:
        await self.inner.adelete(state_id, **options)


async def test_a_store_that_keeps_no_incarnations_gives_keys_without_one() -> None:
    store = ForgetfulStore()
    session, keys = StatekeepSession(SESSION, store), {}
    await Runner.run(refunding(session, keys, ["c1", "c2"]), "refund 5", session=session)
    assert keys == {call_id: idempotency_key(SESSION, None, call_id) for call_id in ("c1", "c2")}
    assert StatekeepSession(SESSION, store).tool_call_key("c1") == keys["c1"]
    # nothing tells this session's lives apart: a model repeating call ids meets its old keys
    await store.adelete(session.state_id)
    again: dict[str, str] = {}
    await Runner.run(refunding(session, again, ["c1"]), "refund 5", session=session)
    assert again == {"c1": keys["c1"]}


async def test_a_session_with_nothing_saved_has_no_keys_and_bad_calls_are_clear_errors(
    store: Store,
) -> None:
    session = StatekeepSession(SESSION, store)
    with pytest.raises(
        StateNotFoundError, match=r"has nothing saved in .* yet, so tool call 'c1' has no key"
    ):
        session.tool_call_key("c1")
    with pytest.raises(StateNotFoundError, match="saves its input before any tool runs"):
        await session.atool_call_key("c1")
    assert await store.aread(session.state_id) is None  # asking wrote nothing

    await session.add_items([msg("hi")])
    for bad in (42, "", None, SimpleNamespace(tool_call_id=None), SimpleNamespace(tool_call_id="")):
        with pytest.raises(TypeError, match=r"tool_call_key\(\): tool_call must be the agents.ToolContext"):
            session.tool_call_key(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"atool_call_key\(\): tool_call must be"):
            await session.atool_call_key(bad)  # type: ignore[arg-type]
    assert session.tool_call_key(SimpleNamespace(tool_call_id="c1")) == session.tool_call_key("c1")  # type: ignore[arg-type]

    session.close()
    with pytest.raises(RuntimeError, match="closed"):
        session.tool_call_key("c1")
    with pytest.raises(RuntimeError, match="closed"):
        await session.atool_call_key("c1")
    assert [item["content"] for item in await StatekeepSession(SESSION, store).get_items()] == ["hi"]

"""Keys, reconcile and idempotent tools in the Agent loop (the crash harness with real
processes: test_exactly_once_crash.py; the soak: test_exactly_once_soak.py).

A crash here is a State saved right after the model reply holding the calls, as a process
killed before (or during) its tools leaves it, then loaded: load repairs the calls as
"may or may not have run" and the next run resolves those its tools can.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeep import (
    Agent,
    FileStore,
    NotRun,
    Reply,
    ScriptedModel,
    State,
    Store,
    ToolContext,
    idempotency_key,
    tool,
)
from statekeep._run.resume import INTERRUPTED_TOOL
from tests.support.agents import call, kinds, no_warnings

SYSTEM = "You keep the books."


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = FileStore(tmp_path / "store")
    yield s
    s.close()


def crashed(store: Store, agent: Agent, *calls: dict[str, Any], sid: str = "crashed") -> State:
    """A State saved with ``calls`` waiting (as a kill during them leaves it), loaded again."""
    state = State("Do the books", id=sid)
    state.begin_run(agent.info())
    state.request(agent.model_name)
    state.add_reply("On it.", list(calls))
    store.save(state)
    return store.load(sid)


def agent_of(store: Store, *tools: Any, replies: tuple[Reply | str, ...] = ("Done.",)) -> Agent:
    return Agent(ScriptedModel(replies), tools=tools, system=SYSTEM, store=store)


def result_of(state: State, call_id: str) -> dict[str, Any]:
    (result,) = [e for e in state.history if e["kind"] == "tool_result" and e["call_id"] == call_id]
    return result


# -- keys reach tools through ToolContext ---------------------------------------------


def test_a_tool_gets_its_calls_context_and_the_model_never_sees_it(store: Store) -> None:
    seen: list[ToolContext] = []

    @tool
    def charge(amount: int, ctx: ToolContext) -> str:
        """Charge."""
        seen.append(ctx)
        return f"charged {amount}"

    model = ScriptedModel([Reply("", [call("c1", "charge", amount=3)]), "Done."])
    agent = Agent(model, tools=[charge], store=store)
    state = State("Charge", id="ctx")
    assert agent.run(state) == "Done."
    (ctx,) = seen
    assert ctx.idempotency_key == idempotency_key("ctx", state.incarnation, "c1")
    assert (ctx.state_id, ctx.call_id, ctx.attempt, ctx.name, ctx.args) == (
        "ctx",
        "c1",
        1,
        "charge",
        {"amount": 3},
    )
    assert agent.info()["tools"] == ["charge"] and "ctx" not in str(charge.schema)
    assert state.incarnation is not None and store.load("ctx").incarnation == state.incarnation


def test_the_key_is_the_same_after_a_crash_and_differs_per_call_and_state(store: Store) -> None:
    keys: list[tuple[str, str]] = []

    @tool(idempotent=True)
    def send(ctx: ToolContext) -> str:
        """Send."""
        keys.append((ctx.call_id, ctx.idempotency_key))
        return "sent"

    agent = agent_of(store, send)
    first = State("Do the books", id="a")
    first.begin_run(agent.info())
    first.request(agent.model_name)
    first.add_reply("", [call("c1", "send"), call("c2", "send")])
    store.save(first)
    before = {cid: idempotency_key("a", first.incarnation, cid) for cid in ("c1", "c2")}
    agent.run(store.load("a"))
    assert dict(keys) == before and len(set(before.values())) == 2
    other = crashed(store, agent_of(store, send), call("c1", "send"), sid="b")
    agent_of(store, send).run(other)
    assert keys[-1][1] != before["c1"]


# -- reconcile and idempotent on resume ------------------------------------------------


def test_reconcile_finding_the_call_ran_records_its_result_without_running_it(store: Store) -> None:
    checked: list[ToolContext] = []

    def found(ctx: ToolContext) -> str:
        checked.append(ctx)
        return "paid 30 (found)"

    @tool(reconcile=found)
    def pay(amount: int, ctx: ToolContext) -> str:
        """Pay."""
        raise AssertionError("pay must not run again")

    agent = agent_of(store, pay)
    state = crashed(store, agent, call("c1", "pay", amount=30))
    assert result_of(state, "c1")["outcome"] == "unknown"  # load's repair, not saved
    with no_warnings():
        assert agent.run(state) == "Done."
    result = result_of(state, "c1")
    assert (result["outcome"], result["is_error"], result["reconciled"]) == ("done", False, True)
    assert result["output"] == "paid 30 (found)"
    (ctx,) = checked
    assert (ctx.attempt, ctx.idempotency_key) == (1, idempotency_key("crashed", state.incarnation, "c1"))
    assert kinds(state.history)[4:] == ["tool_result", "run_start", "model_request", "model_reply", "stop"]
    assert store.load("crashed") == state
    assert agent.model.calls[0][-1]["content"] == "paid 30 (found)"  # type: ignore[attr-defined]


def test_reconcile_finding_it_did_not_run_runs_it_again_with_the_same_key(store: Store) -> None:
    ran: list[ToolContext] = []

    @tool(reconcile=lambda ctx: NotRun)
    def pay(amount: int, ctx: ToolContext) -> str:
        """Pay."""
        # Intent before effect: the tool_resume is in the store before the tool starts.
        saved = store.read("crashed")
        assert saved is not None and saved.entries[-1]["kind"] == "tool_resume"
        ran.append(ctx)
        return f"paid {amount}"

    agent = agent_of(store, pay)
    state = crashed(store, agent, call("c1", "pay", amount=30))
    agent.run(state)
    (ctx,) = ran
    assert ctx.attempt == 2 and ctx.idempotency_key == idempotency_key("crashed", state.incarnation, "c1")
    resume = state.history[4]
    assert (resume["kind"], resume["call_id"], resume["name"], resume["by"]) == (
        "tool_resume",
        "c1",
        "pay",
        "reconcile",
    )
    result = result_of(state, "c1")
    assert (result["output"], result["outcome"], result.get("reconciled")) == ("paid 30", "done", None)
    assert store.load("crashed") == state


async def test_an_async_reconcile_is_awaited(store: Store) -> None:
    async def found(ctx: ToolContext) -> str:
        return "found"

    @tool(reconcile=found)
    async def pay(ctx: ToolContext) -> str:
        """Pay."""
        raise AssertionError("must not run")

    agent = agent_of(store, pay)
    state = crashed(store, agent, call("c1", "pay"))
    await agent.arun(state)
    assert result_of(state, "c1")["output"] == "found" and result_of(state, "c1")["reconciled"] is True


def test_a_reconcile_that_raises_keeps_the_call_in_doubt(store: Store) -> None:
    def broken(ctx: ToolContext) -> Any:
        raise ConnectionError("the bank is down")

    @tool(reconcile=broken)
    def pay(ctx: ToolContext) -> str:
        """Pay."""
        raise AssertionError("must not run")

    agent = agent_of(store, pay)
    state = crashed(store, agent, call("c1", "pay"))
    agent.run(state)
    result = result_of(state, "c1")
    assert (result["outcome"], result["output"], result["is_error"]) == ("unknown", INTERRUPTED_TOOL, True)
    assert "tool_resume" not in kinds(state.history)
    assert store.load("crashed") == state


def test_an_idempotent_tool_runs_again_and_counts_its_attempts_over_crashes(store: Store) -> None:
    attempts: list[int] = []

    @tool(idempotent=True)
    def ship(ctx: ToolContext) -> str:
        """Ship."""
        attempts.append(ctx.attempt)
        if len(attempts) == 1:
            raise KeyboardInterrupt  # as a crash while the call runs again: nothing more saved
        return f"shipped on attempt {ctx.attempt}"

    agent = agent_of(store, ship)
    state = crashed(store, agent, call("c1", "ship"))
    with pytest.raises(KeyboardInterrupt):
        agent.run(state)
    saved = store.read("crashed")
    assert saved is not None and kinds(saved.entries)[-1] == "tool_resume"  # durable before it ran
    state = store.load("crashed")
    agent.run(state)
    assert attempts == [2, 3]
    assert [e["by"] for e in state.history if e["kind"] == "tool_resume"] == ["idempotent", "idempotent"]
    assert result_of(state, "c1")["output"] == "shipped on attempt 3"


def test_a_plain_tool_stays_in_doubt_and_the_others_of_the_reply_are_resolved(store: Store) -> None:
    @tool
    def notify(ctx: ToolContext) -> str:
        """Notify."""
        raise AssertionError("a plain tool in doubt must not run again")

    @tool(reconcile=lambda ctx: "paid")
    def pay(ctx: ToolContext) -> str:
        """Pay."""
        raise AssertionError("must not run")

    @tool(idempotent=True)
    def ship(ctx: ToolContext) -> str:
        """Ship."""
        return "shipped"

    agent = agent_of(store, notify, pay, ship)
    state = crashed(store, agent, call("c1", "notify"), call("c2", "pay"), call("c3", "ship"))
    agent.run(state)
    assert kinds(state.history)[4:8] == ["tool_result", "tool_result", "tool_resume", "tool_result"]
    assert [e["call_id"] for e in state.history[4:8]] == ["c1", "c2", "c3", "c3"]
    assert result_of(state, "c1")["output"] == INTERRUPTED_TOOL
    assert result_of(state, "c2")["reconciled"] is True and result_of(state, "c3")["output"] == "shipped"
    assert [m["role"] for m in agent.model.calls[0]].count("tool") == 3  # type: ignore[attr-defined]
    assert store.load("crashed") == state


def test_nothing_is_taken_back_once_the_loaded_state_was_changed(store: Store) -> None:
    """A message added after the load follows the repair: the calls stay in doubt."""

    @tool(idempotent=True)
    def ship(ctx: ToolContext) -> str:
        """Ship."""
        raise AssertionError("must not run")

    agent = agent_of(store, ship)
    state = crashed(store, agent, call("c1", "ship"))
    state.add_user("Go on.")
    agent.run(state)
    assert result_of(state, "c1")["outcome"] == "unknown" and "tool_resume" not in kinds(state.history)


def test_a_state_saved_after_its_repair_is_not_resolved_again(store: Store) -> None:
    """The repair saved (by a save of the loaded State, or an earlier run) is history."""

    @tool(reconcile=lambda ctx: "found")
    def pay(ctx: ToolContext) -> str:
        """Pay."""
        raise AssertionError("must not run")

    agent = agent_of(store, pay)
    state = crashed(store, agent, call("c1", "pay"))
    store.save(state)
    agent.run(state)
    assert result_of(state, "c1")["outcome"] == "unknown"


def test_a_reconciled_result_json_cannot_hold_is_an_error_result_saying_so(store: Store) -> None:
    @tool(reconcile=lambda ctx: object())
    def pay(ctx: ToolContext) -> str:
        """Pay."""
        raise AssertionError("must not run")

    agent = agent_of(store, pay)
    state = crashed(store, agent, call("c1", "pay"))
    agent.run(state)
    result = result_of(state, "c1")
    assert (result["outcome"], result["is_error"], result["reconciled"]) == ("done", True, True)
    assert "reconcile found it" in result["output"] and "cannot be saved" in result["output"]


def test_calls_in_doubt_are_resolved_under_trio_too(store: Store) -> None:
    """A sync reconcile runs in a worker thread of trio's loop; an async idempotent tool in it."""
    import anyio

    @tool(reconcile=lambda ctx: NotRun)
    def pay(ctx: ToolContext) -> str:
        """Pay."""
        return f"paid on attempt {ctx.attempt}"

    @tool(idempotent=True)
    async def ship(ctx: ToolContext) -> str:
        """Ship."""
        await anyio.sleep(0)
        return f"shipped on attempt {ctx.attempt}"

    agent = agent_of(store, pay, ship)
    state = crashed(store, agent, call("c1", "pay"), call("c2", "ship"))
    assert anyio.run(agent.arun, state, backend="trio") == "Done."
    assert result_of(state, "c1")["output"] == "paid on attempt 2"
    assert result_of(state, "c2")["output"] == "shipped on attempt 2"
    assert store.load("crashed") == state


def test_on_a_store_that_keeps_no_incarnation_the_key_is_the_same_after_a_crash() -> None:
    # A store of one's own written as the docs show (no incarnation=): the key of a call the
    # first process ran is the one the process that loads it again uses.
    from tests.store.test_store_contract import SyncDictStore

    keys: list[tuple[str, int]] = []

    class Cut(BaseException):
        pass

    @tool(idempotent=True)
    def send(ctx: ToolContext) -> str:
        """Send."""
        keys.append((ctx.idempotency_key, ctx.attempt))
        if len(keys) == 1:
            raise Cut  # the process dies in the tool
        return "sent"

    store = SyncDictStore()
    state = State("Do the books")
    with pytest.raises(Cut):
        Agent(ScriptedModel([Reply("", [call("c1", "send")])]), tools=[send], store=store).run(state)
    assert state.incarnation is None
    Agent(ScriptedModel(["Done."]), tools=[send], store=store).run(store.load(state.id))
    assert [k for k, _ in keys] == [keys[0][0]] * 2 and [a for _, a in keys] == [1, 2]

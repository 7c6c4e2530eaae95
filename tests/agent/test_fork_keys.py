"""A fork keeps the keys of the calls it inherited pending: they are its source's calls.

A run forked while a tool call was under way (or at a point where the call had no result
yet) holds that call pending in the fork. Resolved in the fork, by a reconcile or an
idempotent tool, it must carry the source's idempotency key: the service it talks to then
sees the same call, not a new one, and a charge made by the source is not made again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeep import (
    Agent,
    FileStore,
    MemoryStore,
    NotRun,
    Redactor,
    Reply,
    ScriptedModel,
    SQLiteStore,
    State,
    Store,
    ToolContext,
    idempotency_key,
    tool,
)
from tests.support.agents import call


@pytest.fixture(params=["memory", "file", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    kind = request.param
    made: Store = (
        MemoryStore()
        if kind == "memory"
        else FileStore(tmp_path / "files")
        if kind == "file"
        else SQLiteStore(tmp_path / "db.sqlite")
    )
    yield made
    made.close()


class Bank:
    """A service that dedupes by idempotency key, as payment APIs do."""

    def __init__(self) -> None:
        self.charges: dict[str, int] = {}
        self.keys_seen: list[str] = []

    def charge(self, key: str, amount: int) -> str:
        self.keys_seen.append(key)
        self.charges.setdefault(key, amount)
        return f"charged {amount}"


def snapshot_of(store: Store, sid: str) -> dict[str, Any]:
    saved = store.read(sid)
    assert saved is not None and saved.snapshot is not None
    return saved.snapshot


def with_pending_call(store: Store, sid: str = "src") -> State:
    """A run saved right after the reply that asked for ``pay`` (a kill during the tool)."""
    state = State("Pay the bill", id=sid)
    state.begin_run(payer(store, Bank())[0].info())  # the agent that resumes it
    state.request("scripted")
    state.add_reply("Paying.", [call("c1", "pay", amount=30)])
    store.save(state)
    return state


def payer(store: Store, bank: Bank, *replies: Reply | str) -> tuple[Agent, list[ToolContext]]:
    seen: list[ToolContext] = []

    @tool(idempotent=True)
    def pay(amount: int, ctx: ToolContext) -> str:
        """Pay."""
        seen.append(ctx)
        return bank.charge(ctx.idempotency_key, amount)

    model = ScriptedModel(replies or ("Paid.",))
    return Agent(model, tools=[pay], store=store, name="payer"), seen


def test_a_call_a_fork_inherited_pending_keeps_its_sources_key(store: Store) -> None:
    source = with_pending_call(store)
    source_key = idempotency_key("src", source.incarnation, "c1")
    bank = Bank()
    agent, seen = payer(store, bank)
    agent.run(store.load("src"))  # the source resolves its call: charged once, under its key
    fork = store.fork("src", at_seq=3, new_id="fork")  # the reply: c1 pending in the fork
    assert fork.incarnation != source.incarnation
    again, seen_again = payer(store, bank)
    again.run(fork)
    seen += seen_again
    assert [ctx.idempotency_key for ctx in seen] == [source_key, source_key]
    assert [(ctx.state_id, ctx.attempt) for ctx in seen] == [("src", 2), ("fork", 2)]
    assert bank.charges == {source_key: 30}  # the service saw one call, twice


def test_a_fork_of_a_fork_and_a_load_keep_the_first_sources_key(store: Store) -> None:
    source = with_pending_call(store)
    source_key = idempotency_key("src", source.incarnation, "c1")
    store.fork("src", new_id="mid")
    store.fork("mid", new_id="leaf")
    bank = Bank()
    agent, seen = payer(store, bank)
    agent.run(store.load("leaf"))  # another process: the origins come back from the store
    assert [ctx.idempotency_key for ctx in seen] == [source_key]


def test_the_calls_a_fork_makes_itself_get_its_own_keys(store: Store) -> None:
    with_pending_call(store)
    bank = Bank()
    agent, seen = payer(store, bank, Reply("Once more.", [call("c2", "pay", amount=5)]), "Paid twice.")
    fork = store.fork("src", new_id="fork")
    agent.run(fork)
    assert [ctx.call_id for ctx in seen] == ["c1", "c2"]
    assert seen[1].idempotency_key == idempotency_key("fork", fork.incarnation, "c2")
    assert seen[0].idempotency_key != seen[1].idempotency_key
    assert set(snapshot_of(store, "fork")["key_origins"]) == {"c1"}  # only the inherited call has one


def test_a_reconcile_in_the_fork_looks_for_the_sources_call(store: Store) -> None:
    source = with_pending_call(store)
    done = {idempotency_key("src", source.incarnation, "c1"): "charged 30 (by src)"}

    def look_up(ctx: ToolContext) -> Any:
        return done.get(ctx.idempotency_key, NotRun)

    @tool(reconcile=look_up)
    def pay(amount: int, ctx: ToolContext) -> str:
        """Pay."""
        raise AssertionError("the source's charge was found: pay must not run")

    agent = Agent(ScriptedModel(["Paid."]), tools=[pay], store=store, name="payer")
    fork = store.fork("src", new_id="fork")
    agent.run(fork)
    (result,) = [e for e in fork.history if e["kind"] == "tool_result"]
    assert (result["output"], result["reconciled"]) == ("charged 30 (by src)", True)


def test_a_step_of_an_inherited_call_has_the_key_it_has_in_the_source(store: Store) -> None:
    source = with_pending_call(store)
    keys: dict[str, str] = {}

    @tool(idempotent=True)
    async def pay(amount: int, ctx: ToolContext) -> str:
        """Pay."""

        def charge(step: ToolContext) -> str:
            keys[ctx.state_id] = step.idempotency_key
            return "charged"

        return str(await ctx.step("charge", charge))

    for sid in ("src", "fork"):
        if sid == "fork":
            store.fork("src", at_seq=3, new_id="fork")
        Agent(ScriptedModel(["Paid."]), tools=[pay], store=store, name="payer").run(store.load(sid))
    assert keys["src"] == keys["fork"]
    assert keys["src"] == idempotency_key("src", source.incarnation, '["step","c1","charge"]')


def test_a_state_of_its_own_has_no_key_origins_in_its_snapshot(store: Store) -> None:
    state = with_pending_call(store)
    assert "key_origins" not in state.snapshot()
    store.fork("src", new_id="fork")
    assert snapshot_of(store, "fork")["key_origins"] == {"c1": ["src", state.incarnation]}
    # Settled (here by load's repair, saved), the call keeps its origin: a fork of this fork
    # at a seq where the call is pending inherits it from here.
    store.save(store.load("fork"))
    assert snapshot_of(store, "fork")["key_origins"] == {"c1": ["src", state.incarnation]}


@pytest.mark.parametrize("settle", ["idempotent", "repair"])
def test_a_fork_of_a_fork_that_settled_the_call_keeps_the_first_sources_key(
    store: Store, settle: str
) -> None:
    source = with_pending_call(store)
    source_key = idempotency_key("src", source.incarnation, "c1")
    store.fork("src", new_id="mid")
    bank = Bank()
    if settle == "idempotent":
        payer(store, bank)[0].run(store.load("mid"))  # mid runs c1 again, under src's key
    else:
        store.save(store.load("mid"))  # mid keeps load's repair: c1 "may or may not have run"
    store.fork("mid", at_seq=3, new_id="leaf")  # at the reply: c1 pending in leaf
    agent, seen = payer(store, bank)
    agent.run(store.load("leaf"))
    assert [ctx.idempotency_key for ctx in seen] == [source_key]
    assert list(bank.charges) == [source_key]  # one charge, whoever ran it


def test_a_redacting_store_keeps_the_origins_as_they_are(tmp_path: Path) -> None:
    # A pattern that would mask every incarnation (32 hex digits) if the origins were data.
    store = FileStore(tmp_path / "masked", redact=Redactor(patterns=[r"\b[0-9a-f]{32}\b"]))
    source = with_pending_call(store)
    store.fork("src", new_id="fork")
    bank = Bank()
    agent, seen = payer(store, bank)
    agent.run(store.load("fork"))
    assert [ctx.idempotency_key for ctx in seen] == [idempotency_key("src", source.incarnation, "c1")]
    store.close()

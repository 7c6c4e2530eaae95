"""Agents the tests run, and what they read back: tools, calls, histories, the resume warning."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from statekeep import Agent, Reply, ResumeWarning, ScriptedModel, State, Store
from statekeep._runtime.bridge import run_async


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args}


def kinds(history: list[dict[str, Any]]) -> list[str]:
    return [e["kind"] for e in history]


@contextmanager
def no_warnings() -> Iterator[None]:
    """Fail if anything warns inside the block (from any thread)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []


def lookup(city: str) -> str:
    """Find a restaurant in a city."""
    return f"{city}: Chez Janou"


def t1() -> str:
    """Tool one."""
    return "one"


def t2() -> str:
    """Tool two."""
    return "two"


def history(store: Store, state_id: str) -> list[dict[str, Any]]:
    record = store.read(state_id)
    assert record is not None
    return record.entries


async def store_now(store: Any) -> datetime:
    """The time by the clock that judges the store's leases."""
    return await run_async(store._server_now())


def stalls_until_taken_over(store: Any, taken: dict[str, Any], reply: Reply) -> Any:
    """A model whose call blocks its event loop (heartbeat and all: a stalled worker) until
    the State's lease has lapsed by the store's clock and "worker-b" has acquired it and saved
    a user message; then it answers ``reply``. ``taken`` gets worker-b's lease and the history
    it left ("lease", "entries")."""

    def take_over() -> None:
        while store.current_lease("job") is not None:  # until the store's clock ends the lease
            pass
        lease = store.acquire("job", "worker-b", 30)
        state = store.load("job")
        state.add_user("worker-b was here")
        store.save(state, lease=lease)
        taken["lease"], taken["entries"] = lease, history(store, "job")

    async def stalling_model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        thief = threading.Thread(target=take_over)
        thief.start()
        thief.join()
        return reply

    return stalling_model


def saved_after_one_run(store: Store, state_id: str = "resume") -> str:
    """A State run once by the base agent (name 'agent', model 'scripted', system 'A', tools t1)."""
    state = State("resume me", id=state_id)
    model = ScriptedModel([Reply("", [call("c0", "t1")])])
    assert Agent(model, tools=[t1], system="A", store=store, limit=1).run(state) is None
    assert state.stopped_by == "limit"
    return state_id


def one_resume_warning(caught: list[warnings.WarningMessage]) -> warnings.WarningMessage:
    [warning] = [w for w in caught if issubclass(w.category, ResumeWarning)]
    return warning


def changed_agent(
    store: Store, *, limit: int = 20, call_id: str = "c1", **change: Any
) -> tuple[Agent, ScriptedModel]:
    """The base agent with ``change``; its model calls t1 once (as ``call_id``), then answers."""
    config: dict[str, Any] = dict(name="agent", model_name="scripted", system="A", tools=[t1])
    config.update(change)
    model = ScriptedModel([Reply("", [call(call_id, "t1")]), "done"], name=config.pop("model_name"))
    return Agent(model, store=store, limit=limit, **config), model

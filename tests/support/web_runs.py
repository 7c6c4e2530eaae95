"""States the viewer's tests look at: one run holding every kind of entry, and a few more."""

from __future__ import annotations

from typing import Any

from statekeep import State, Store, agent_info

EVIL = "<script>window.pwned=1</script>"


def every_kind(task: str = "the task", *, id: str | None = None, agent: str = "bot") -> State:
    """A stopped run with each kind of entry: a tool result done, one unknown, one failed."""
    s = State(task, id=id, labels={"team": "a"})
    s.add_user("more please")
    s.begin_run(agent_info(agent, "m1", tools=["search", "fetch", "boom"]))
    s.request("m1")
    s.add_reply(
        "let me look",
        [
            {"id": "c1", "name": "search", "args": {"q": "x", "n": [1, 2]}},
            {"id": "c2", "name": "fetch", "args": {}},
            {"id": "c3", "name": "boom", "args": None},
        ],
        usage={"input_tokens": 1200, "output_tokens": 34},
    )
    s.add_tool_result("c1", {"hits": 2})
    s.add_tool_result("c2", "timed out", outcome="unknown")
    s.add_tool_result("c3", "it broke", is_error=True)
    s.set_data("k", {"v": 1})
    s.delete_data("k")
    s.request("m1")
    s.add_model_error("rate limited")
    s.request("m1")
    s.add_reply("done", usage={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15})
    s.add_error("ValueError: boom")
    s.stop("limit", answer={"partial": True})
    return s


def running(task: str, *, id: str | None = None, agent: str | None = None, **labels: str) -> State:
    """A run under way: a task and, with ``agent``, a run start and a request."""
    s = State(task, id=id, labels=labels)
    if agent is not None:
        s.begin_run(agent_info(agent, "m1"))
        s.request("m1")
    return s


def finished(task: str, *, id: str | None = None, agent: str = "bot", **labels: str) -> State:
    s = running(task, id=id, agent=agent, **labels)
    s.add_reply("the answer")
    s.finish("the answer")
    return s


def evil(store: Store) -> State:
    """A run whose every stored text tries to be markup."""
    s = State(f"task {EVIL}", id="evil")
    s.begin_run(agent_info(f"agent {EVIL}", "m1", tools=["t"]))
    s.request("m1")
    s.add_reply(f"reply {EVIL}", [{"id": "c1", "name": "t", "args": {"html": EVIL}}])
    s.add_tool_result("c1", f"output {EVIL}")
    s.set_data("page", {"html": EVIL})
    store.save(s)
    return s


def save_all(store: Store, *states: State) -> list[Any]:
    for s in states:
        store.save(s)
    return [s.id for s in states]

"""Real LangGraph graphs on StatekeepSaver show what they show on InMemorySaver (the
reference): subgraphs (checkpoint namespaces), update_state, history and time travel."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from statekeep import Store
from tests.support.frameworks import require_installed

require_installed("langgraph", "1.2.22")

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from statekeep.adapters.langgraph import StatekeepSaver  # noqa: E402


class Steps(TypedDict):
    log: Annotated[list[str], operator.add]


def app(checkpointer: Any) -> Any:
    inner = StateGraph(Steps)
    inner.add_node("inner_a", lambda s: {"log": ["inner a"]})
    inner.add_node("inner_b", lambda s: {"log": ["inner b"]})
    inner.add_edge(START, "inner_a")
    inner.add_edge("inner_a", "inner_b")
    inner.add_edge("inner_b", END)
    outer = StateGraph(Steps)
    outer.add_node("first", lambda s: {"log": ["first"]})
    outer.add_node("sub", inner.compile(checkpointer=True))  # its own checkpoint namespace
    outer.add_node("last", lambda s: {"log": [f"last after {len(s['log'])}"]})
    outer.add_edge(START, "first")
    outer.add_edge("first", "sub")
    outer.add_edge("sub", "last")
    outer.add_edge("last", END)
    return outer.compile(checkpointer=checkpointer)


def story(checkpointer: Any) -> list[Any]:
    graph = app(checkpointer)
    config: Any = {"configurable": {"thread_id": "t/1"}}
    seen: list[Any] = [graph.invoke({"log": ["start"]}, config)]
    graph.update_state(config, {"log": ["edited"]})
    seen.append(graph.get_state(config).values)
    history = list(graph.get_state_history(config))
    seen.append([(h.values, h.next, h.metadata["source"], h.metadata["step"]) for h in history])
    # Time travel: run again from the checkpoint before "sub" ran.
    before_sub = next(h for h in history if h.next == ("sub",))
    seen.append(graph.invoke(None, before_sub.config))
    seen.append(len(list(graph.get_state_history(config))))
    return seen


def test_a_graph_with_a_subgraph_tells_the_same_story(store: Store) -> None:
    assert story(StatekeepSaver(store)) == story(InMemorySaver())


async def test_the_async_api_tells_the_same_story(store: Store) -> None:
    async def astory(checkpointer: Any) -> list[Any]:
        graph = app(checkpointer)
        config: Any = {"configurable": {"thread_id": "a"}}
        seen = [await graph.ainvoke({"log": ["start"]}, config)]
        await graph.aupdate_state(config, {"log": ["edited"]})
        seen.append([(h.values, h.next) async for h in graph.aget_state_history(config)])
        return seen

    assert await astory(StatekeepSaver(store)) == await astory(InMemorySaver())

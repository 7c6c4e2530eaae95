"""A LangGraph graph that keeps what it learns in a ``StatekeepMemoryStore``, run by
test_langgraph_memory_graph.py in a process of its own:

    python -m tests.support.children.langgraph_memory_child STORE_URL USER learn|recall sync|async

``learn`` runs a graph whose node puts a memory for USER (and a second node that updates it
with compare-and-set); ``recall`` runs another graph whose node searches USER's memories.
Each prints what the graph returned as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from statekeep import open_store
from statekeep.adapters.langgraph import StatekeepMemoryStore


class Turn(TypedDict, total=False):
    user: str
    said: str
    recalled: list[dict[str, Any]]


def learn(state: Turn, *, store: BaseStore) -> dict[str, Any]:
    store.put(("memories", state["user"]), "food", {"text": state["said"], "times": 1})
    return {}


def confirm(state: Turn, *, store: BaseStore) -> dict[str, Any]:
    item = store.get(("memories", state["user"]), "food")
    assert item is not None
    revision = item.revision  # type: ignore[attr-defined]
    store.put(("memories", state["user"]), "food", {**item.value, "times": 2}, revision=revision)  # type: ignore[call-arg]
    return {}


def recall(state: Turn, *, store: BaseStore) -> dict[str, Any]:
    found = store.search(("memories",))
    return {"recalled": [{"ns": list(i.namespace), "key": i.key, "value": i.value} for i in found]}


def graph(store: BaseStore, phase: str) -> Any:
    builder = StateGraph(Turn)
    if phase == "learn":
        builder.add_node("learn", learn)
        builder.add_node("confirm", confirm)
        builder.add_edge(START, "learn")
        builder.add_edge("learn", "confirm")
        builder.add_edge("confirm", END)
    else:
        builder.add_node("recall", recall)
        builder.add_edge(START, "recall")
        builder.add_edge("recall", END)
    return builder.compile(store=store)


def main() -> None:
    url, user, phase, api = sys.argv[1:5]
    with open_store(url) as store:
        app = graph(StatekeepMemoryStore(store), phase)
        given: Turn = {"user": user, "said": "likes lentil soup"}
        result = app.invoke(given) if api == "sync" else asyncio.run(app.ainvoke(given))
        print(json.dumps(result))


if __name__ == "__main__":
    main()

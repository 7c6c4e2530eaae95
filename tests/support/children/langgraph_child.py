"""A LangGraph graph with an interrupt, run against a statekeep store by
test_langgraph_resume.py, in a process of its own:

    python -m tests.support.children.langgraph_child STORE_URL THREAD_ID start|resume sync|async

``start`` runs the graph until it stops at the interrupt; ``resume`` answers it with
``Command(resume=...)``. Each prints what the graph returned as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import operator
import sys
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from statekeep import Store, open_store
from statekeep.adapters.langgraph import StatekeepSaver

ANSWER = "ship it"


class Plan(TypedDict):
    topic: str
    steps: Annotated[list[str], operator.add]
    approval: str


def draft(state: Plan) -> dict[str, Any]:
    return {"steps": [f"draft {state['topic']}"]}


def approve(state: Plan) -> dict[str, Any]:
    answer = interrupt({"question": f"approve the draft of {state['topic']}?"})
    return {"approval": answer, "steps": ["approved"]}


def publish(state: Plan) -> dict[str, Any]:
    return {"steps": [f"published after {state['approval']!r}"]}


def graph(store: Store) -> Any:
    builder = StateGraph(Plan)
    builder.add_node("draft", draft)
    builder.add_node("approve", approve)
    builder.add_node("publish", publish)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "approve")
    builder.add_edge("approve", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=StatekeepSaver(store))


def run(store: Store, thread_id: str, phase: str, api: str) -> dict[str, Any]:
    """Run one phase with a fresh saver on ``store``; what the graph returned, as JSON data."""
    config = {"configurable": {"thread_id": thread_id}}
    app = graph(store)
    given: Any = {"topic": "the report", "steps": []} if phase == "start" else Command(resume=ANSWER)
    result = app.invoke(given, config) if api == "sync" else asyncio.run(app.ainvoke(given, config))
    interrupts = [item.value for item in result.pop("__interrupt__", [])]
    return {"state": result, "interrupts": interrupts, "next": list(app.get_state(config).next)}


def main() -> None:
    url, thread_id, phase, api = sys.argv[1:5]
    with open_store(url) as store:
        print(json.dumps(run(store, thread_id, phase, api)))


if __name__ == "__main__":
    main()

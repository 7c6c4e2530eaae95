"""A LangGraph graph whose tools take their idempotency key from tool_call_key, run by
test_langgraph_keys.py, in a process of its own or in the test's:

    python -m tests.support.children.langgraph_keys_child STORE_URL THREAD_ID start|resume

The graph's "model" node asks for two tool calls (fixed ids), and the graph stops before its
tools (``interrupt_before``); ``resume`` runs them. One tool reads its key from a
``ToolRuntime``, the other from its config and an ``InjectedToolCallId`` parameter; each
returns the key it got. Each phase prints the keys in the thread's tool messages (JSON).
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, ToolRuntime

from statekeep import Store, open_store
from statekeep.adapters.langgraph import StatekeepSaver, tool_call_key

CALLS = [("charge", "call-charge-1"), ("refund", "call-refund-1")]


@tool
def charge(amount: int, runtime: ToolRuntime) -> str:
    """Charge an amount."""
    return tool_call_key(runtime)


@tool
def refund(amount: int, config: RunnableConfig, call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Refund an amount."""
    return tool_call_key(config, call_id)


def model(state: MessagesState) -> dict[str, Any]:
    calls = [{"name": name, "args": {"amount": 5}, "id": call_id} for name, call_id in CALLS]
    return {"messages": [AIMessage(content="", tool_calls=calls)]}


def graph(store: Store) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode([charge, refund]))
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=StatekeepSaver(store), interrupt_before=["tools"])


def run(store: Store, thread_id: str, phase: str) -> dict[str, str]:
    """Run one phase; the key each tool returned, by tool call id."""
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    given = {"messages": [("user", "charge 5, refund 5")]} if phase == "start" else None
    result = graph(store).invoke(given, config)
    return {m.tool_call_id: str(m.content) for m in result["messages"] if isinstance(m, ToolMessage)}


def main() -> None:
    url, thread_id, phase = sys.argv[1:4]
    with open_store(url) as store:
        print(json.dumps(run(store, thread_id, phase)))


if __name__ == "__main__":
    main()

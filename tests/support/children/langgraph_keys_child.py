"""A LangGraph graph whose tools take their idempotency key from tool_call_key, run by
test_langgraph_keys.py, in a process of its own or in the test's:

    python -m tests.support.children.langgraph_keys_child STORE_URL THREAD_ID start|resume

The graph's "model" node asks for two tool calls (fixed ids), and the graph stops before its
tools (``interrupt_before``); ``resume`` runs them. One tool reads its key from a
``ToolRuntime``, the other from its config and an ``InjectedToolCallId`` parameter; each
returns the key it got. Each phase prints the keys in the thread's tool messages (JSON).
In the test's process, :func:`run` and :func:`arun` also run the graph without stopping
(``phase="through"``), on another checkpointer, and with async tools.
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


@tool("charge")
async def acharge(amount: int, runtime: ToolRuntime) -> str:
    """Charge an amount."""
    return tool_call_key(runtime)


@tool("refund")
async def arefund(amount: int, config: RunnableConfig, call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Refund an amount."""
    return tool_call_key(config, call_id)


def model(state: MessagesState) -> dict[str, Any]:
    calls = [{"name": name, "args": {"amount": 5}, "id": call_id} for name, call_id in CALLS]
    return {"messages": [AIMessage(content="", tool_calls=calls)]}


def graph(store: Store | None, *, stop: bool = True, checkpointer: Any = None, tools: Any = None) -> Any:
    """The graph on a StatekeepSaver of ``store`` (or on ``checkpointer``); ``stop``: before
    its tools; ``tools``: the tools node's tools (the sync ones by default)."""
    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode(tools or [charge, refund]))
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    saver = checkpointer if store is None else StatekeepSaver(store)
    return builder.compile(checkpointer=saver, interrupt_before=["tools"] if stop else None)


def _given(phase: str) -> Any:
    return None if phase == "resume" else {"messages": [("user", "charge 5, refund 5")]}


def _config(thread_id: str, run_id: str | None) -> RunnableConfig:
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    if run_id is not None:
        config["metadata"] = {"run_id": run_id}
    return config


def _keys(result: Any) -> dict[str, str]:
    return {m.tool_call_id: str(m.content) for m in result["messages"] if isinstance(m, ToolMessage)}


def run(store: Store | None, thread_id: str, phase: str, **options: Any) -> dict[str, str]:
    """Run one phase (``start``, ``resume``, or ``through``: start without stopping); the
    key each tool returned, by tool call id. ``durability`` goes to ``invoke``, ``run_id``
    to the checkpoints' metadata, the other ``options`` to :func:`graph`."""
    config = _config(thread_id, options.pop("run_id", None))
    durability = options.pop("durability", None)
    built = graph(store, stop=phase != "through", **options)
    return _keys(built.invoke(_given(phase), config, durability=durability))


async def arun(store: Store | None, thread_id: str, phase: str, **options: Any) -> dict[str, str]:
    """:func:`run` with ``ainvoke``, the async tools unless ``tools`` says otherwise."""
    config = _config(thread_id, options.pop("run_id", None))
    durability = options.pop("durability", None)
    options.setdefault("tools", [acharge, arefund])
    built = graph(store, stop=phase != "through", **options)
    return _keys(await built.ainvoke(_given(phase), config, durability=durability))


def main() -> None:
    url, thread_id, phase = sys.argv[1:4]
    with open_store(url) as store:
        print(json.dumps(run(store, thread_id, phase)))


if __name__ == "__main__":
    main()

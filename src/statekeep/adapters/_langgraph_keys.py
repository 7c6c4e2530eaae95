"""The idempotency key of a LangGraph tool call (pure: no I/O, no store)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._core.keys import idempotency_key


def tool_call_key(config: Any, tool_call_id: str | None = None) -> str:
    """The idempotency key of one tool call of a LangGraph thread: the same in every process,
    after any crash and on every resume of the thread, different for every other call id or
    thread.

    Give it the ``ToolRuntime`` a tool declares (``runtime: ToolRuntime``: its ``config`` and
    ``tool_call_id`` are used), or the tool's ``RunnableConfig`` and its tool call id (a
    parameter annotated ``Annotated[str, InjectedToolCallId]``). The key is
    ``statekeep.idempotency_key(str(thread_id), None, tool_call_id)``, the thread id taken
    from ``config["configurable"]["thread_id"]`` as ``StatekeepSaver`` takes it: a tool sees
    no store, so the thread's incarnation is not part of it (it is as unique as the model's
    call ids). Pass it to the service the tool calls (an ``Idempotency-Key`` header, a unique
    column), so that a call run again after a crash is recognised there.

    TypeError if there is no thread id (the graph was run without
    ``{"configurable": {"thread_id": ...}}``) or no tool call id."""
    if tool_call_id is None and not isinstance(config, Mapping):  # a ToolRuntime
        tool_call_id = getattr(config, "tool_call_id", None)
        config = getattr(config, "config", None)
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    thread_id = configurable.get("thread_id") if isinstance(configurable, Mapping) else None
    if thread_id is None or thread_id == "":
        raise TypeError(
            "tool_call_key(): no thread id in the config: give the tool's ToolRuntime or RunnableConfig "
            "of a graph run with config={'configurable': {'thread_id': ...}}"
        )
    if not isinstance(tool_call_id, str) or not tool_call_id:
        raise TypeError(
            "tool_call_key(): no tool call id: give the tool's ToolRuntime, or its config and the id "
            f"from a parameter annotated Annotated[str, InjectedToolCallId] (got {tool_call_id!r})"
        )
    return idempotency_key(str(thread_id), None, tool_call_id)

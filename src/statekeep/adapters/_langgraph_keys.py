"""The idempotency key of a LangGraph tool call: the thread id, the thread's life (asked of
the graph's ``StatekeepSaver``) and the tool call id."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._core.keys import idempotency_key

#: Where LangGraph puts the graph's checkpointer in a run's ``configurable``
#: (``langgraph._internal._constants.CONFIG_KEY_CHECKPOINTER``; a private name, so spelled here).
CHECKPOINTER = "__pregel_checkpointer"


def tool_call_key(config: Any, tool_call_id: str | None = None) -> str:
    """The idempotency key of one tool call of a LangGraph thread: the same in every process,
    after any crash and on every resume of the thread, different for every other call id,
    thread, or life of the thread (one deleted and started again under the same id).

    Give it the ``ToolRuntime`` a tool declares (``runtime: ToolRuntime``: its ``config`` and
    ``tool_call_id`` are used), or the tool's ``RunnableConfig`` and its tool call id (a
    parameter annotated ``Annotated[str, InjectedToolCallId]``). The key is
    ``statekeep.idempotency_key(str(thread_id), life, tool_call_id)``: the thread id taken
    from ``config["configurable"]["thread_id"]`` as ``StatekeepSaver`` takes it, and
    ``life`` the thread's life token (:meth:`StatekeepSaver.thread_life`), asked of the
    graph's checkpointer, which LangGraph puts in the tool's config: made when the thread
    is first stored, kept through every write, ``prune`` and ``delete_for_runs``, new after
    ``delete_thread`` (and for a thread ``copy_thread`` creates), so the calls of a thread
    started again under its id, whose model repeats call ids, get new keys. The saver reads
    it once per thread (the snapshot alone, a blocking call, in an async tool too), then
    remembers it.

    ``life`` is None (the key made from the thread and call ids alone, as unique as the
    model's call ids) when the graph's checkpointer is not a ``StatekeepSaver`` (or there
    is none, or the config is not a graph run's), and for a thread first stored by a
    statekeep that kept no life token: its keys never change.

    Pass the key to the service the tool calls (an ``Idempotency-Key`` header, a unique
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
    assert isinstance(configurable, Mapping)
    return idempotency_key(
        str(thread_id), _life(configurable.get(CHECKPOINTER), str(thread_id)), tool_call_id
    )


class KeepsLives:
    """A checkpointer that keeps each thread's life token (``StatekeepSaver``): what
    :func:`tool_call_key` asks for it."""

    def thread_life(self, thread_id: str) -> str | None:
        raise NotImplementedError


def _life(checkpointer: Any, thread_id: str) -> str | None:
    return checkpointer.thread_life(thread_id) if isinstance(checkpointer, KeepsLives) else None

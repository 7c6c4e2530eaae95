"""How statekeep's own views (``statekeep show``, the viewer, ``store.load``) read a State
an adapter wrote: which adapter it was, each entry in words, and how to read it instead.

Pure and framework-free: the command line and the viewer use it without LangGraph, the
OpenAI Agents SDK or alpineagents installed. Each adapter's entries are summarised by its
own module (:mod:`._shown_langgraph`, :mod:`._shown_openai`, :mod:`._shown_alpine`,
:mod:`.shown_adk`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shown:
    """One history entry as statekeep's views show it.

    ``entry``: what statekeep's own renderers take (the adapter's entry, or, for alpineagents,
    the same step in statekeep's own entry shape: a reply's ``text``, ``tool_calls`` and
    ``usage``, a stop's ``by``). ``line``: the adapter's one-line summary, for an entry
    statekeep has no renderer for (None: the renderer describes ``entry``). ``detail``: a
    readable value to show below the line (decoded: never the serializer's base64)."""

    entry: dict[str, Any]
    line: str | None = None
    detail: Any = None


#: The adapters, by the label value each one's States carry (``framework=...``), with the
#: snapshot key each one keeps its own data under.
MARKS = {
    "langgraph": "langgraph",
    "openai-agents": "openai_session",
    "alpineagents": "alpineagents",
    "adk": "adk",
}


def framework_of(snapshot: object) -> str | None:
    """``langgraph``, ``openai-agents``, ``alpineagents`` or ``adk`` for a snapshot that adapter
    wrote (its label and its own key), else None."""
    if not isinstance(snapshot, Mapping):
        return None
    labels = snapshot.get("labels")
    name = labels.get("framework") if isinstance(labels, Mapping) else None
    if isinstance(name, str) and name in MARKS and isinstance(snapshot.get(MARKS[name]), Mapping):
        return name
    return None


def not_an_agent_state(state_id: str, snapshot: Mapping[str, Any], framework: str) -> str:
    """The message of ``store.load()`` for a State an adapter wrote: which adapter, and how
    to read it."""
    task = snapshot.get("task")
    name = repr(task) if isinstance(task, str) else "?"
    read = {
        "langgraph": (
            f"a LangGraph thread (thread id {name}) kept by statekeep.adapters.langgraph",
            f"read it through LangGraph: graph.get_state({{'configurable': {{'thread_id': {name}}}}}) on a "
            "graph compiled with checkpointer=StatekeepSaver(store), or StatekeepSaver(store).get_tuple(config)",
        ),
        "openai-agents": (
            f"an OpenAI Agents session (session id {name}) kept by statekeep.adapters.openai_agents",
            f"read it with await StatekeepSession({name}, store).get_items(), or pass that session to Runner.run",
        ),
        "alpineagents": (
            f"an alpineagents State (id {name}) saved by statekeep.adapters.alpineagents",
            f"read it with StatekeepStore(store).load({name}), or run it on with an alpineagents Agent",
        ),
        "adk": (
            f"Google ADK state ({name}: app/user/session) kept by statekeep.adapters.adk",
            "read it with await StatekeepSessionService(store).get_session(app_name=..., user_id=..., "
            "session_id=...), or give that service to an ADK Runner",
        ),
    }
    what, how = read[framework]
    return (
        f"State {state_id!r} is {what}, not a State of statekeep's Agent, so store.load() does not read "
        f"it: {how}. `statekeep show {state_id}` (with the store's namespace) and the viewer show its history"
    )


def text_of(content: object) -> str:
    """The text of a message's content: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        parts = [
            text_of(part.get("text", "")) if isinstance(part, Mapping) else text_of(part) for part in content
        ]
        return " ".join(part for part in parts if part)
    return ""

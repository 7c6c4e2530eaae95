"""A Google ADK session's history entry in words (pure, framework-free)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .shown import Shown


def shown(entry: dict[str, Any]) -> Shown:
    kind = entry.get("kind")
    if kind == "adk_session":
        return Shown(
            entry, f"session {entry.get('id')!r} of user {entry.get('user')!r} in app {entry.get('app')!r}"
        )
    if kind in ("adk_app", "adk_user") or kind == "delta":
        return Shown(
            entry,
            f"state delta: {dict(entry.get('delta') or {})}" if kind == "delta" else f"{kind[4:]} state",
        )
    event = entry.get("event")
    if kind == "event" and isinstance(event, Mapping):
        return _event(entry, event)
    return Shown(entry)


def _event(entry: dict[str, Any], event: Mapping[str, Any]) -> Shown:
    """An event: who, and what its content holds (text, function calls, their results)."""
    author = event.get("author") or "?"
    content = event.get("content")
    parts = content.get("parts") if isinstance(content, Mapping) else None
    words: list[str] = []
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, Mapping):
            continue
        call, result = part.get("function_call"), part.get("function_response")
        if isinstance(part.get("text"), str):
            words.append(part["text"])
        elif isinstance(call, Mapping):
            words.append(f"calls {call.get('name')}({call.get('args', {})}) [{call.get('id')}]")
        elif isinstance(result, Mapping):
            words.append(f"result of [{result.get('id')}]: {result.get('response')}")
    actions = event.get("actions")
    delta = actions.get("state_delta") if isinstance(actions, Mapping) else None
    if delta:
        words.append(f"(state {dict(delta)})")
    return Shown(entry, f"{author}: {' '.join(words)}" if words else f"{author}: event", None)

"""An OpenAI Agents session's history entry in words (pure, framework-free)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .shown import Shown, text_of


def shown(entry: dict[str, Any]) -> Shown:
    kind = entry.get("kind")
    if kind == "session":
        return Shown(entry, f"session {entry.get('session_id')!r} started")
    if kind == "pop":
        return Shown(entry, f"pop_item: the item at seq {entry.get('of')} was removed")
    if kind == "clear":
        return Shown(entry, "clear_session: every item before this was removed")
    if kind == "run_state":
        return _run_state(entry, entry.get("run_state"))
    if kind == "item" and isinstance(entry.get("item"), Mapping):
        return _item(entry, entry["item"])
    return Shown(entry)


def _item(entry: dict[str, Any], item: Mapping[str, Any]) -> Shown:
    kind = item.get("type")
    if "role" in item and kind in (None, "message"):
        text = text_of(item.get("content"))
        return Shown(entry, f"{item.get('role')}: {text}", None if text else dict(item))
    if kind == "function_call":
        line = f"calls {item.get('name')}({item.get('arguments', '')}) [{item.get('call_id')}]"
        return Shown(entry, line)
    if kind == "function_call_output":
        output = item.get("output")
        shown_output = output if isinstance(output, str) else text_of(output)
        return Shown(entry, f"output of [{item.get('call_id')}]: {shown_output}")
    return Shown(entry, f"{kind or 'item'}", dict(item))


def _run_state(entry: dict[str, Any], state: object) -> Shown:
    """A run state saved for approvals (the SDK's ``RunState.to_json()``), or its clearing."""
    if not isinstance(state, Mapping) and "taken" in entry:
        return Shown(entry, f"take_run_state: the run state at seq {entry.get('taken')} was taken to go on")
    if not isinstance(state, Mapping):
        return Shown(entry, "clear_run_state: the run paused for approvals went on")
    step = state.get("current_step")
    data = step.get("data") if isinstance(step, Mapping) else None
    items = data.get("interruptions") if isinstance(data, Mapping) else None
    waiting = []
    for item in items if isinstance(items, list) else []:
        raw = item.get("raw_item") if isinstance(item, Mapping) else None
        if isinstance(raw, Mapping):
            waiting.append(f"{raw.get('name')}({raw.get('arguments', '')}) [{raw.get('call_id')}]")
    return Shown(entry, "save_run_state: a run paused for approval of " + (", ".join(waiting) or "?"))

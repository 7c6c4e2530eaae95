"""An alpineagents history entry in statekeep's own entry shape (pure, framework-free).

alpineagents keeps each step's data under ``content`` (a reply's message blocks and usage,
a stop's kind, a tool result's call); statekeep's views read ``text``, ``tool_calls``,
``usage``, ``by``, ``name``, ``output``. Steps statekeep has no kind for get a line of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .shown import Shown, text_of


def shown(entry: dict[str, Any]) -> Shown:
    kind = entry.get("kind")
    content = entry.get("content")
    base: dict[str, Any] = {k: entry[k] for k in ("seq", "at", "turn") if k in entry}
    body = _map(content)
    if kind in ("user", "notice"):
        return Shown({**base, "kind": "user", "text": text_of(content)})
    if kind == "run_start":
        agent = {"name": body.get("name"), "model": body.get("model"), "tools": body.get("tools") or []}
        return Shown({**base, "kind": "run_start", "agent": agent})
    if kind == "model_request":
        return Shown({**base, "kind": "model_request", "model": content})
    if kind == "model_reply":
        return Shown({**base, "kind": "model_reply", **_reply(body)})
    if kind == "tool_result":
        call = _map(entry.get("call"))
        outcome = entry.get("outcome")
        return Shown(
            {
                **base,
                "kind": "tool_result",
                "name": call.get("name"),
                "call_id": call.get("id"),
                "output": content if isinstance(content, str) else text_of(content),
                "outcome": outcome,
                "is_error": outcome not in (None, "done"),
            }
        )
    if kind == "stop":
        by = body.get("kind")
        name = body.get("name")
        answer = body.get("answer", body.get("text"))
        stop: dict[str, Any] = {**base, "kind": "stop", "by": f"{by} ({name})" if name else by}
        return Shown(stop if answer is None else {**stop, "answer": answer})
    if kind == "error":
        message = body.get("message", content) if body else content
        return Shown({**base, "kind": "error", "message": message})
    if kind == "context_change":
        messages = _list(body.get("messages"))
        said = [f"{m.get('role')}: {text_of(m.get('content'))}" for m in messages if isinstance(m, Mapping)]
        line = f"context {body.get('kind')}: {len(messages)} message(s), {body.get('after_tokens')} tokens"
        return Shown(entry, line + (f" · {said[0]}" if said else ""), said or None)
    return Shown(entry, f"{kind}: {text_of(content) or ''}".rstrip(": "), content)


def _reply(body: Mapping[str, Any]) -> dict[str, Any]:
    """A reply's text, tool calls, usage and stop reason, as statekeep's model_reply has them."""
    blocks = _list(_map(body.get("message")).get("content"))
    texts = [b.get("text") for b in blocks if isinstance(b, Mapping) and b.get("type") == "text"]
    calls = [
        {"name": b.get("name"), "args": b.get("args"), "id": b.get("id")}
        for b in blocks
        if isinstance(b, Mapping) and b.get("type") == "tool_call"
    ]
    out: dict[str, Any] = {"text": " ".join(t for t in texts if isinstance(t, str)), "tool_calls": calls}
    if isinstance(body.get("usage"), Mapping):
        out["usage"] = dict(_map(body.get("usage")))
    if body.get("stop_reason") is not None:
        out["stop_reason"] = body["stop_reason"]
    return out


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []

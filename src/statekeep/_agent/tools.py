"""Tools for the reference agent loop: plain or async functions, described by JSON schemas."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._runtime.callerloop import worker_thread

_JSON_TYPES: dict[object, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


@dataclass(frozen=True)
class Tool:
    """A function the model may call, with the JSON schema of its arguments."""

    name: str
    fn: Callable[..., Any]
    schema: dict[str, Any]

    @classmethod
    def from_function(cls, fn: Callable[..., Any]) -> Tool:
        """Describe ``fn`` from its signature (annotations give the JSON types; parameters
        without a default are required) and its docstring's first paragraph."""
        hints = typing.get_type_hints(fn)
        properties: dict[str, dict[str, Any]] = {}
        required: list[str] = []
        for param in inspect.signature(fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            properties[param.name] = _json_type(hints.get(param.name, Any))
            if param.default is param.empty:
                required.append(param.name)
        doc = inspect.getdoc(fn) or ""
        schema = {
            "name": fn.__name__,
            "description": doc.split("\n\n")[0].strip(),
            "parameters": {"type": "object", "properties": properties, "required": required},
        }
        return cls(fn.__name__, fn, schema)

    async def call(self, args: dict[str, Any]) -> Any:
        """Call the tool; a plain function runs in a worker thread, so a slow one does not
        hold up the event loop."""
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**args)
        result = await worker_thread(self.fn, **args)
        if inspect.isawaitable(result):
            result = await result
        return result


def _json_type(annotation: object) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _json_type(options[0]) if len(options) == 1 else {}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(annotation))}
    base = origin or annotation
    if base in (list, tuple) and typing.get_args(annotation):
        return {"type": "array", "items": _json_type(typing.get_args(annotation)[0])}
    kind = _JSON_TYPES.get(base)
    return {"type": kind} if kind else {}

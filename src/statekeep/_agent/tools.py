"""Tools for the reference agent loop: plain or async functions, described by JSON schemas,
with what the loop needs to never run one twice by accident (:func:`tool`)."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, overload

from .._runtime.callerloop import worker_thread
from .context import ToolContext

#: ``needs_approval``: every call (True), none (False), or those whose arguments it is true for.
Approval = bool | Callable[[Mapping[str, Any]], bool]

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
    """A function the model may call, with the JSON schema of its arguments.

    Make one with :func:`tool` (or ``Tool.from_function``); :class:`~statekeep.Agent` takes
    plain functions too. A parameter annotated :class:`~statekeep.ToolContext` is left out of
    the schema (the model never sees it) and gets the call's context: its stable
    ``idempotency_key``, ids and attempt number.

    ``reconcile``: ``fn(ctx)`` (a plain or async function) that says, after a crash left the
    call in doubt, whether it ran: its result (the call ran: that result is recorded, with
    ``reconciled: true``) or :data:`~statekeep.NotRun` (it did not: the call runs now, with the
    same key); an exception leaves the call in doubt. The Agent asks it in the first run after
    the load, before anything else. ``idempotent``: the tool may simply run again with the same
    key when in doubt. A tool with neither is reported to the model as "may or may not have
    run" and never run again by the Agent.
    ``needs_approval``: the run stops for a person to approve or reject the call first
    (True, or a predicate over the call's arguments).
    """

    name: str
    fn: Callable[..., Any]
    schema: dict[str, Any]
    reconcile: Callable[[ToolContext], Any] | None = None
    idempotent: bool = False
    needs_approval: Approval = False
    #: The name of the parameter that takes the ToolContext, if the function has one.
    context_param: str | None = field(default=None, compare=False)

    @classmethod
    def from_function(cls, fn: Callable[..., Any] | Tool) -> Tool:
        """Describe ``fn`` from its signature (annotations give the JSON types; parameters
        without a default are required; one annotated ToolContext is left out) and its
        docstring's first paragraph. A Tool is returned as it is."""
        if isinstance(fn, Tool):
            return fn
        hints = typing.get_type_hints(fn)
        properties: dict[str, dict[str, Any]] = {}
        required: list[str] = []
        context_param = None
        for param in inspect.signature(fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            if hints.get(param.name) is ToolContext:
                context_param = param.name
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
        return cls(fn.__name__, fn, schema, context_param=context_param)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function itself, as if it were not a Tool (tests, other code)."""
        return self.fn(*args, **kwargs)

    async def call(self, args: dict[str, Any], ctx: ToolContext | None = None) -> Any:
        """Call the tool (with ``ctx`` as its ToolContext parameter, if it has one); a plain
        function runs in a worker thread, so a slow one does not hold up the event loop."""
        if self.context_param is not None:
            if ctx is None:
                raise TypeError(f"tool {self.name!r} takes a ToolContext: call it with ctx=")
            args = {**args, self.context_param: ctx}
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**args)
        result = await worker_thread(self.fn, **args)
        if inspect.isawaitable(result):
            result = await result
        return result

    def wants_approval(self, args: Mapping[str, Any]) -> bool:
        """Whether a call with ``args`` waits for a person's approval before it runs."""
        check = self.needs_approval
        return bool(check(args)) if callable(check) else bool(check)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    reconcile: Callable[[ToolContext], Any] | None = None,
    idempotent: bool = False,
    needs_approval: Approval = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    reconcile: Callable[[ToolContext], Any] | None = None,
    idempotent: bool = False,
    needs_approval: Approval = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a function a :class:`Tool`: ``@tool`` or ``@tool(reconcile=..., idempotent=...,
    needs_approval=...)`` (see :class:`Tool`). ``name``: the name the model calls it by
    (default: the function's). The Tool is still callable as the function."""
    if reconcile is not None and not callable(reconcile):
        raise TypeError(f"tool(reconcile=...) takes a function of the ToolContext, got {reconcile!r}")
    if type(idempotent) is not bool:
        raise TypeError(f"tool(idempotent=...) takes True or False, got {idempotent!r}")
    if not (type(needs_approval) is bool or callable(needs_approval)):
        raise TypeError(
            f"tool(needs_approval=...) takes True, False or a predicate over the call's arguments, "
            f"got {needs_approval!r}"
        )

    def make(fn: Callable[..., Any]) -> Tool:
        made = Tool.from_function(fn)
        if name is not None:
            made = replace(made, name=name, schema={**made.schema, "name": name})
        return replace(made, reconcile=reconcile, idempotent=idempotent, needs_approval=needs_approval)

    return make if fn is None else make(fn)


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

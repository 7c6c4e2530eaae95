"""The agent loop's OpenTelemetry spans, after the GenAI semantic conventions (as of
``opentelemetry-semantic-conventions`` 0.65b0, semantic conventions 1.43.0).

A run is an ``invoke_agent {name}`` span; each model request in it a ``chat {model}`` span
(CLIENT) with the reply's token usage; each tool call an ``execute_tool {name}`` span. No
message, argument or result is recorded; the State id (``gen_ai.conversation.id``) only when
the agent's store was made with ``trace_ids=True``. The run's span is kept in its
``run_start`` entry (:mod:`statekeep._run.runtrace`), and a later run of the State (resumed
after a stop, a crash or in another process) links its span to the latest one kept.

Nothing is recorded when no tracer provider is set (:func:`~statekeep._runtime.telemetry.active`)
or the agent's store was made with ``telemetry=False``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .._run.runtrace import earlier_trace
from .._run.state import State
from .._runtime.telemetry import Tools, active

#: The keys a reply's ``usage`` may give its token counts under (the first one found counts).
INPUT_KEYS = ("input_tokens", "prompt_tokens")
OUTPUT_KEYS = ("output_tokens", "completion_tokens")


def tools_for(store: object) -> Tools | None:
    """The tracer to record an agent's spans with, or None (nothing is recorded)."""
    if store is not None and not getattr(store, "_telemetry", True):
        return None
    tools = active()
    return None if tools is None or tools.tracer is None else tools


@contextmanager
def span(
    tools: Tools | None, name: str, attributes: dict[str, Any], *, client: bool = False
) -> Iterator[Any]:
    """A span made current for the block (None when ``tools`` is None); an exception out of
    the block sets its status and ``error.type`` (the class name, never the message)."""
    if tools is None:
        yield None
        return
    kind = tools.span_kind.CLIENT if client else tools.span_kind.INTERNAL
    assert tools.tracer is not None
    with tools.tracer.start_as_current_span(
        name, kind=kind, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except BaseException as exc:
            failed(tools, current, type(exc).__qualname__)
            raise


def failed(tools: Tools, current: Any, error_type: str) -> None:
    current.set_attribute("error.type", error_type)
    status, code = tools.status
    current.set_status(status(code, error_type))


@contextmanager
def run_span(agent: Any, state: State) -> Iterator[tuple[Tools | None, dict[str, str] | None]]:
    """The ``invoke_agent`` span of a run of ``state``, linked to the State's earlier run's
    span; gives the tools and the ``trace`` for its ``run_start`` (None, None: not traced)."""
    tools = tools_for(agent.store)
    if tools is None:
        yield None, None
        return
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent.name,
        "gen_ai.request.model": agent.model_name,
    }
    if getattr(agent.store, "_trace_ids", False):
        attributes["gen_ai.conversation.id"] = state.id
    links = []
    earlier = earlier_trace(state.history)
    if earlier is not None:
        trace = tools.trace
        context = trace.SpanContext(
            trace_id=int(earlier["trace_id"], 16),
            span_id=int(earlier["span_id"], 16),
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
        links.append(tools.link(context, {"statekeep.link": "resumed"}))
    assert tools.tracer is not None
    with tools.tracer.start_as_current_span(
        f"invoke_agent {agent.name}",
        kind=tools.span_kind.INTERNAL,
        attributes=attributes,
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        got = current.get_span_context()
        kept = None
        if got.is_valid and got.trace_flags.sampled:  # a link to a span never exported leads nowhere
            kept = {"trace_id": f"{got.trace_id:032x}", "span_id": f"{got.span_id:016x}"}
        try:
            yield tools, kept
        except BaseException as exc:
            failed(tools, current, type(exc).__qualname__)
            raise


def chat_attributes(model: str) -> dict[str, Any]:
    return {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}


def note_reply(current: Any, usage: Mapping[str, Any] | None, stop_reason: str | None) -> None:
    """Put a reply's token usage (a mapping, or None as a model may give) and finish reason
    on its ``chat`` span (None: not traced)."""
    if current is None:
        return
    if not isinstance(usage, Mapping):
        usage = {}
    for attribute, keys in (
        ("gen_ai.usage.input_tokens", INPUT_KEYS),
        ("gen_ai.usage.output_tokens", OUTPUT_KEYS),
    ):
        count = next((usage[k] for k in keys if k in usage), None)
        if type(count) is int:
            current.set_attribute(attribute, count)
    if stop_reason is not None:
        current.set_attribute("gen_ai.response.finish_reasons", [str(stop_reason)])


def tool_attributes(call: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": str(call["name"]),
        "gen_ai.tool.call.id": str(call["id"]),
        "gen_ai.tool.type": "function",
    }

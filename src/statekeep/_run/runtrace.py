"""The OpenTelemetry span a run was traced under, as its ``run_start`` entry keeps it
(``trace``: ``{"trace_id", "span_id"}``, lowercase hex), so that a later run of the State can
link its own span to it. Pure: the agent loop makes the spans."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_DIGITS = {"trace_id": 32, "span_id": 16}


def trace_problem(trace: object) -> str | None:
    """What is wrong with a ``trace`` value, or None when it is well formed."""
    if not isinstance(trace, Mapping) or set(trace) != set(_DIGITS):
        return f"trace must be a dict of trace_id and span_id (hex), got {trace!r}"
    for key, digits in _DIGITS.items():
        value = trace[key]
        if not isinstance(value, str) or len(value) != digits or value.strip("0123456789abcdef"):
            return f"trace {key} must be {digits} lowercase hex digits, got {value!r}"
        if not value.strip("0"):
            return f"trace {key} must not be all zeros (an invalid span)"
    return None


def check_trace(trace: Mapping[str, str]) -> dict[str, str]:
    """``trace`` (checked, ValueError saying what is wrong) as a ``run_start`` entry keeps it."""
    problem = trace_problem(trace)
    if problem is not None:
        raise ValueError(problem)
    return {"trace_id": trace["trace_id"], "span_id": trace["span_id"]}


def earlier_trace(history: Sequence[Mapping[str, Any]]) -> dict[str, str] | None:
    """The ``trace`` of the latest ``run_start`` in ``history`` that has a well-formed one
    (one written by hand or by another tool that is not is passed over), or None."""
    for entry in reversed(history):
        if entry.get("kind") == "run_start":
            trace = entry.get("trace")
            if trace is not None and trace_problem(trace) is None:
                return {"trace_id": trace["trace_id"], "span_id": trace["span_id"]}
    return None

"""Replaying what happens to a pending tool call after a pause (format 4): ``tool_resume``.

A mixin of :class:`~statekeep._run.history.Replay` (which holds ``pending_calls``): it keeps,
per pending call, how many attempts came after the first, for ``ToolContext.attempt``.
"""

from __future__ import annotations

from typing import Any

#: Why a ``tool_resume`` runs a pending call now; the first two are attempts after a crash.
RESUMED_BY = ("reconcile", "idempotent", "approved")


class ResumedCalls:
    """The ``tool_resume`` kind, replayed."""

    pending_calls: dict[str, dict[str, Any]]

    def __init__(self) -> None:
        #: Pending call id -> the attempts after the first (tool_resume by reconcile/idempotent).
        self.attempts: dict[str, int] = {}
        #: Pending call ids resumed (tool_resume) since they were last in doubt.
        self.resumed: set[str] = set()

    def _call_closed(self, call_id: str) -> None:
        """A pending call got its result."""
        self.attempts.pop(call_id, None)
        self.resumed.discard(call_id)

    def _tool_resume(self, e: dict[str, Any]) -> None:
        seq, call_id, by = e["seq"], e["call_id"], e["by"]
        if call_id not in self.pending_calls:
            raise ValueError(f"seq {seq}: tool_resume of call {call_id!r}, which is not a pending call")
        if by not in RESUMED_BY:
            raise ValueError(f"seq {seq}: tool_resume by {by!r} is not one of {', '.join(RESUMED_BY)}")
        if by != "approved":
            self.attempts[call_id] = self.attempts.get(call_id, 0) + 1
        self.resumed.add(call_id)

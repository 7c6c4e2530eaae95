"""What a State does with a pending tool call after a pause (format 4): resume it, count its
attempts. A mixin of :class:`~statekeep._run.state.State`, used by the agent loop."""

from __future__ import annotations

from typing import Any

from .history import Replay


class CallResumption:
    """The State methods of ``tool_resume`` (see :mod:`statekeep._run.replay_calls`)."""

    _replay: Replay

    def _append(self, kind: str, call: str, **fields: Any) -> None:
        raise NotImplementedError

    def _attempt(self, call_id: str) -> int:
        """The attempt a pending call is on: 1, plus each in-doubt resumption recorded."""
        return 1 + self._replay.attempts.get(call_id, 0)

    def _resume_call(self, call_id: str, by: str) -> None:
        """Record that pending call ``call_id`` runs now, after a pause (``by``: reconcile,
        idempotent or approved); it counts as an attempt unless ``by`` is approved."""
        call = self._replay.pending_calls.get(call_id)
        name = call["name"] if call else ""
        self._append("tool_resume", f"tool_resume({call_id!r})", call_id=call_id, name=name, by=by)

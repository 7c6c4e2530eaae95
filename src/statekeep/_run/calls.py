"""What a State does with a pending tool call after a pause (format 4): resume it, count its
attempts, and take back load's unsaved in-doubt repair of it. A mixin of
:class:`~statekeep._run.state.State`, used by the agent loop."""

from __future__ import annotations

from typing import Any

from .history import Replay


class CallResumption:
    """The State methods of ``tool_resume`` (see :mod:`statekeep._run.replay_calls`)."""

    _replay: Replay
    _saved: int

    @property
    def history(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _next_seq(self) -> int:
        raise NotImplementedError

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

    def _add_reconciled(self, call_id: str, output: Any, *, is_error: bool = False) -> None:
        """Record what a tool's ``reconcile`` found: the pending call ran, with ``output``
        (outcome done, ``reconciled: true``). TypeError if JSON cannot hold ``output``."""
        where = f"reconcile of {call_id!r}"
        self._tool_result(where, call_id, output, is_error, "done", reconciled=True)

    def _tool_result(
        self, where: str, call_id: str, output: Any, is_error: bool, outcome: str, **extra: Any
    ) -> None:
        """Append the ``tool_result`` of pending call ``call_id`` (errors name ``where``)."""
        call = self._replay.pending_calls.get(call_id)
        name = call["name"] if call else ""
        self._append(
            "tool_result", where, call_id=call_id, name=name, output=output, is_error=is_error,
            outcome=outcome, **extra,
        )  # fmt: skip

    def _unsaved_in_doubt(self) -> list[dict[str, Any]]:
        """The in-doubt results (outcome ``unknown``) that the store lacks, when they are all
        the store lacks: the repair a load just made, before anything followed it. Empty
        otherwise (nothing to take back)."""
        history = self.history
        start = self._next_seq() - len(history)  # above 0 for a trimmed history
        tail = history[max(self._saved - start, 0) :]
        if any(e["kind"] != "tool_result" or e["outcome"] != "unknown" for e in tail):
            return []
        return list(tail)

    def _take_back(self, call_ids: set[str]) -> None:
        """Take back the unsaved in-doubt results of ``call_ids`` (see :meth:`_unsaved_in_doubt`):
        those calls are pending again, as the store holds them; the other unsaved results
        stay, renumbered after what the store holds. Replays the saved history once."""
        tail = self._unsaved_in_doubt()
        if not call_ids <= {e["call_id"] for e in tail}:
            raise ValueError(f"calls {sorted(call_ids)} have no unsaved in-doubt result to take back")
        kept = self.history[: len(self.history) - len(tail)]
        replay = Replay()
        for entry in kept:
            replay.apply(entry)
        for entry in tail:
            if entry["call_id"] not in call_ids:
                replay.apply({**entry, "seq": replay.next_seq})
        self._replay = replay

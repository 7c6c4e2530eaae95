"""A person's approval of tool calls (format 4): what waits, approve, reject. A mixin of
:class:`~statekeep._run.state.State`; the kinds replay in :mod:`statekeep._run.replay_approvals`."""

from __future__ import annotations

from typing import Any

from .history import Replay


class Approvals:
    """The State methods of ``approval_wait`` and ``approval``."""

    _replay: Replay
    id: str

    def _append(self, kind: str, call: str, **fields: Any) -> None:
        raise NotImplementedError

    def _unsaved_in_doubt(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    @property
    def pending_approvals(self) -> list[dict[str, Any]]:
        """The tool calls waiting for a person's decision, in call order: each
        ``{"id", "name", "args", "since"}`` (``since``: when it began to wait, ISO 8601 UTC).
        Approved or rejected calls are not listed; ``agent.run(state)`` settles them."""
        replay = self._replay
        return [
            {**call, "since": replay.awaiting[call_id]}
            for call_id, call in replay.pending_calls.items()
            if call_id in replay.awaiting and call_id not in replay.decisions
        ]

    def approve(self, call_id: str, note: str | None = None) -> None:
        """Approve tool call ``call_id``, one of :attr:`pending_approvals`: the next
        ``agent.run(state)`` runs it. ``note``: why, kept in the history.

        ValueError (adding nothing) if the State has no such call, the call does not wait
        for approval, it was decided already (a decision is final), or the State was loaded
        while other calls had started and had no saved result (a run is going on, or was cut
        off: decide once it stops for approval again). Nothing is saved:
        the decision is durable once ``store.save(state)`` returns."""
        self._decide(call_id, True, note, "approve")

    def reject(self, call_id: str, note: str | None = None) -> None:
        """Reject tool call ``call_id``, one of :attr:`pending_approvals`: the next
        ``agent.run(state)`` never runs it, and gives the model an error result holding
        ``note`` (say why, so that it can do something else).

        Errors as :meth:`approve`. Nothing is saved: the decision is durable once
        ``store.save(state)`` returns."""
        self._decide(call_id, False, note, "reject")

    def _decide(self, call_id: str, approved: bool, note: str | None, how: str) -> None:
        call = f"State.{how}({call_id!r})"
        if not isinstance(call_id, str):
            raise TypeError(f"State.{how}(): call_id must be a str, got {type(call_id).__name__}")
        if note is not None and not isinstance(note, str):
            raise TypeError(f"{call}: note must be a str or None, got {type(note).__name__}")
        problem = self._replay.approval_problem(call_id)
        if problem is not None:
            raise ValueError(f"{call}: State {self.id!r}: {problem} (see state.pending_approvals)")
        started = [e["call_id"] for e in self._unsaved_in_doubt()]
        if started:
            # Saving the decision would save load's "may or may not have run" for these too,
            # over the result a running agent is about to save, or before reconcile can look.
            raise ValueError(
                f"{call}: State {self.id!r} has tool calls that started and have no saved result "
                f"({', '.join(started)}): a run is going on, or was cut off before it saved them. "
                "Decide once the run stops for approval again (running the agent on it settles "
                "them first); nothing was added"
            )
        self._append("approval", call, call_id=call_id, approved=approved, note=note)

    def _wait_for_approval(self, call_ids: list[str]) -> None:
        """Record that ``call_ids`` (pending calls) wait for a person's approval: the run
        stops (``stopped_by`` "approval")."""
        self._append("approval_wait", "approval_wait", call_ids=call_ids)

    def _decision(self, call_id: str) -> dict[str, Any] | None:
        """The decision on a pending call waiting on approval (``approved``, ``note``), if any."""
        return self._replay.decisions.get(call_id)

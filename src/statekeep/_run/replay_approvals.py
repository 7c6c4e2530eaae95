"""Replaying approvals (format 4): ``approval_wait`` and ``approval``.

A mixin of :class:`~statekeep._run.history.Replay` (which holds ``pending_calls``). A model
reply's calls that a person must approve first are named by an ``approval_wait`` entry,
which stops the run (``stopped_by`` "approval"); an ``approval`` entry records a person's
decision on one of them. The rules replay checks:

- ``approval_wait`` {``call_ids``}: each a pending call with no decision yet (one named by
  an earlier ``approval_wait`` may be named again: a run that stopped again); every other
  pending call must be waiting on approval too (a stop cannot leave a call owing a result).
- ``approval`` {``call_id``, ``approved``, [``note``]}: the call waits on approval and has no
  decision yet.
- ``tool_resume`` by approved: only of a call approved (and still pending), once; a call that
  waits on approval is resumed by nothing else. Once resumed, it is in doubt after a crash like
  any call, and its tool's reconcile or idempotent may resume it again.
- A ``run_start`` may follow while calls are pending if every one of them waits on approval
  (decided or not): the run then settles the decided ones first.
- A result closes the call's wait; a call that waits, or was approved and is not yet
  resumed (``tool_resume`` by approved), is not in doubt after a crash: load leaves it open.
"""

from __future__ import annotations

from typing import Any


class ApprovalWaits:
    """The ``approval_wait`` and ``approval`` kinds, replayed."""

    pending_calls: dict[str, dict[str, Any]]
    pending_request: dict[str, Any] | None
    answered: set[str]
    resumed: set[str]
    stopped_by: str | None
    version: int

    def __init__(self) -> None:
        #: Pending call id -> when it began to wait on approval (the first approval_wait's ``at``).
        self.awaiting: dict[str, str] = {}
        #: Call id -> its decision: {"approved", "note", "at"}; kept after the call's result.
        self.decisions: dict[str, dict[str, Any]] = {}

    def _reply_approval(self, e: dict[str, Any], calls: dict[str, Any]) -> list[str]:
        """A model reply's ``approval``: the ids of its calls that wait for a person's approval
        (the loop records them with the reply, so a crash before its ``approval_wait`` leaves
        them waiting, not in doubt: they never ran). Checked before the reply is applied."""
        ids = e.get("approval")
        if ids is None:
            return []
        if not (isinstance(ids, list) and ids and all(isinstance(i, str) and i in calls for i in ids)) or len(
            set(ids)
        ) != len(ids):
            raise ValueError(
                f"seq {e['seq']}: a model reply's 'approval' must list distinct call ids of the reply"
            )
        return ids

    def _wait_from_reply(self, e: dict[str, Any], ids: list[str]) -> None:
        for call_id in ids:
            self.awaiting[call_id] = e["at"]
        if ids:
            self.version = max(self.version, 4)

    def _call_closed(self, call_id: str) -> None:
        """A pending call got its result: it waits no more."""
        self.awaiting.pop(call_id, None)
        super()._call_closed(call_id)  # type: ignore[misc]  # the next mixin's (ResumedCalls)

    def _approval_wait(self, e: dict[str, Any]) -> None:
        seq, ids = e["seq"], e["call_ids"]
        if not ids or not all(isinstance(i, str) for i in ids) or len(set(ids)) != len(ids):
            raise ValueError(f"seq {seq}: an approval_wait needs 'call_ids', distinct call ids (strs)")
        for call_id in ids:
            if call_id not in self.pending_calls:
                raise ValueError(
                    f"seq {seq}: approval_wait names call {call_id!r}, which is not a pending call"
                )
            if self._decided(call_id):
                raise ValueError(f"seq {seq}: approval_wait names call {call_id!r}, which is decided already")
            if call_id in self.resumed:
                raise ValueError(f"seq {seq}: approval_wait names call {call_id!r}, which runs already")
        owing = [c for c in self.pending_calls if c not in ids and not self.is_awaiting(c)]
        if owing:
            raise ValueError(
                f"seq {seq}: approval_wait stops the run while tool calls wait for results: {', '.join(owing)}"
            )
        for call_id in ids:
            self.awaiting.setdefault(call_id, e["at"])
        self.stopped_by = "approval"

    def _tool_resume(self, e: dict[str, Any]) -> None:
        seq, call_id, by = e["seq"], e["call_id"], e["by"]
        decision = self.decisions.get(call_id)
        if by == "approved" and not (decision and decision["approved"] and self.is_awaiting(call_id)):
            why = "is resumed already" if decision and decision["approved"] else "is not approved"
            raise ValueError(f"seq {seq}: tool_resume by approved of call {call_id!r}, which {why}")
        # Once resumed (approved), a call is in doubt like any other after a crash: its tool's
        # reconcile or idempotent settles it (by those); until then it waits for approval.
        if by != "approved" and self.is_awaiting(call_id):
            raise ValueError(f"seq {seq}: tool_resume by {by} of call {call_id!r}, which waits for approval")
        super()._tool_resume(e)  # type: ignore[misc]  # the next mixin's (ResumedCalls)

    def _approval(self, e: dict[str, Any]) -> None:
        seq, call_id = e["seq"], e["call_id"]
        problem = self.approval_problem(call_id)
        if problem is not None:
            raise ValueError(f"seq {seq}: {problem}")
        self.decisions[call_id] = {"approved": e["approved"], "note": e.get("note"), "at": e["at"]}

    def _decided(self, call_id: str) -> bool:
        return call_id in self.decisions

    def approval_problem(self, call_id: str) -> str | None:
        """Why a decision on ``call_id`` cannot be recorded now, or None if it can."""
        decision = self.decisions.get(call_id)
        if decision is not None:
            how = "approved" if decision["approved"] else "rejected"
            return f"tool call {call_id!r} was {how} already (at {decision['at']}); a decision is final"
        if call_id in self.awaiting:
            return None
        if call_id in self.pending_calls:
            return f"tool call {call_id!r} is not waiting for approval (its tool did not ask for it)"
        if call_id in self.answered:
            return f"tool call {call_id!r} is not waiting for approval: it has its result already"
        return f"there is no tool call {call_id!r} in this State"

    def is_awaiting(self, call_id: str) -> bool:
        """Whether pending call ``call_id`` waits on approval, or was approved and is not resumed
        yet: either way it did not run, so it is not in doubt."""
        return call_id in self.awaiting and call_id not in self.resumed

    def check_run_start(self, seq: int) -> None:
        """Refuse a run start while the model owes a reply or a tool call owes a result,
        except calls waiting on approval (the run settles them)."""
        if self.pending_request is not None:
            raise ValueError(f"seq {seq}: a run start while a model request waits for its reply")
        owing = [c for c in self.pending_calls if not self.is_awaiting(c)]
        if owing:
            raise ValueError(f"seq {seq}: a run start while tool calls wait for results: {', '.join(owing)}")

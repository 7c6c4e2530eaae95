"""What a State does with a pending tool call after a pause (format 4): give its key, resume
it, count its attempts, and take back load's unsaved in-doubt repair of it. A mixin of
:class:`~statekeep._run.state.State`, used by the agent loop.

A call's idempotency key is made from the State that made the call. A fork
(``store.fork``) copies its source's history: a call pending at the fork point was made by
the source, and keeps the source's key in the fork (the snapshot's ``key_origins``: call id
-> ``[state id, incarnation]``), so a reconcile finds what the source's attempt did and an
idempotent tool run again in the fork is recognised as the same call by the service. Calls
the fork makes itself get its own keys.
"""

from __future__ import annotations

from typing import Any

from .._core.keys import idempotency_key
from .history import Replay

#: The snapshot key of the calls a fork inherited pending, and whose keys they keep.
KEY_ORIGINS = "key_origins"


class CallResumption:
    """The State methods of ``tool_resume`` (see :mod:`statekeep._run.replay_calls`)."""

    id: str
    _replay: Replay
    _saved: int
    _key_origins: dict[str, tuple[str, str | None]]

    @property
    def incarnation(self) -> str | None:
        raise NotImplementedError

    @property
    def history(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _next_seq(self) -> int:
        raise NotImplementedError

    def _append(self, kind: str, call: str, **fields: Any) -> None:
        raise NotImplementedError

    def _origin(self, call_id: str | None) -> tuple[str, str | None]:
        """The (State id, incarnation) the keys of call ``call_id`` (and of its steps) are
        made from: this State's, or the fork source's for a call the fork inherited pending."""
        origin = None if call_id is None else self._key_origins.get(call_id)
        return (self.id, self.incarnation) if origin is None else origin

    def _call_key(self, call_id: str) -> str:
        """The idempotency key of tool call ``call_id`` (``ToolContext.idempotency_key``)."""
        return idempotency_key(*self._origin(call_id), call_id)

    def _inherit_origins(self, source_id: str, source_incarnation: str | None) -> None:
        """Make this State (a fork, its source's origins restored) keep the source's keys for
        the calls pending at the fork point."""
        inherited = self._key_origins
        self._key_origins = {
            call_id: inherited.get(call_id, (source_id, source_incarnation))
            for call_id in self._replay.pending_calls
        }

    def _saved_origins(self) -> dict[str, Any]:
        """What the snapshot keeps of the key origins: all of them (none: no key), also once
        their calls are settled: a fork of this State at a seq where one is still pending
        inherits its origin from here. Only the calls pending at a fork point have one."""
        kept = {c: list(origin) for c, origin in self._key_origins.items()}
        return {KEY_ORIGINS: kept} if kept else {}

    def _restore_origins(self, saved: Any) -> None:
        """Take back the snapshot's key origins (malformed items are dropped)."""
        self._key_origins = {
            call_id: (origin[0], origin[1])
            for call_id, origin in (saved.items() if isinstance(saved, dict) else ())
            if isinstance(call_id, str)
            and isinstance(origin, list)
            and len(origin) == 2
            and isinstance(origin[0], str)
            and (origin[1] is None or isinstance(origin[1], str))
        }

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

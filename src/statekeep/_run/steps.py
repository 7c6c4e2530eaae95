"""What a State does for durable steps (format 4): record their starts and ends, and check
that a process calls a loaded State's steps in the order they were recorded. A mixin of
:class:`~statekeep._run.state.State`, used by ``store.astep`` and ``ctx.step``
(:mod:`statekeep._store.steps`); the entries replay in :mod:`statekeep._run.replay_steps`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from .._core.keys import idempotency_key
from .history import Replay
from .replay_steps import Scope


def _nth(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _where(scope: Scope) -> str:
    return "" if scope is None else f" in tool call {scope!r}"


class StepRecords:
    """The State methods of ``step_start`` and ``step_end``."""

    id: str
    _replay: Replay
    _origin: Callable[[str | None], tuple[str, str | None]]  # CallResumption's

    @property
    def incarnation(self) -> str | None:
        raise NotImplementedError

    def _append(self, kind: str, call: str, **fields: Any) -> None:
        raise NotImplementedError

    @property
    def _steps_here(self) -> dict[Scope, int]:
        """Per scope, how many steps this State object was asked for so far (not saved: the
        next one must be the next one recorded, if any)."""
        called: dict[Scope, int] | None = self.__dict__.get("_step_calls")
        if called is None:
            called = self.__dict__["_step_calls"] = {}
        return called

    @property
    def _steps_unrun(self) -> set[tuple[Scope, str]]:
        """Steps whose start this State object recorded and whose function it has not called
        (their start's save failed): not in doubt, they start when called again."""
        unrun: set[tuple[Scope, str]] | None = self.__dict__.get("_step_unrun")
        if unrun is None:
            unrun = self.__dict__["_step_unrun"] = set()
        return unrun

    def _step_key(self, name: str, scope: Scope) -> str:
        """A new step's idempotency key: ``"step:" + name`` as the call id, or, for a step
        of a tool call, ``["step", call id, name]`` as JSON text (the two never meet)."""
        part = "step:" + name if scope is None else orjson.dumps(["step", scope, name]).decode()
        return idempotency_key(*self._origin(scope), part)

    def _step_called(self, name: str, scope: Scope) -> dict[str, Any] | None:
        """The record of step ``name`` being called now (None: a new step), once the call is
        checked against the recorded order; ValueError naming both steps if this is not
        the step the history holds at this place, or names one recorded before."""
        record = self._replay.steps.get((scope, name))
        if (scope, name) in self._steps_unrun and record is not None:
            return dict(record)  # called again after its start's save failed: its place is taken
        order = self._replay.step_order.get(scope, [])
        k = self._steps_here.get(scope, 0)
        if k < len(order) and order[k] != name:
            raise ValueError(
                f"step {name!r}{_where(scope)} is called as the {_nth(k + 1)} step of State {self.id!r}, "
                f"whose history recorded step {order[k]!r} there: a loaded State's steps replay in the "
                f"order they were recorded. Call {order[k]!r} first (the code changed the order of its "
                "steps?), or start a new State for the new order"
            )
        if k >= len(order) and (scope, name) in self._replay.steps:
            raise ValueError(
                f"step {name!r}{_where(scope)} was recorded already, as the "
                f"{_nth(order.index(name) + 1)} step of State {self.id!r}: step names are unique "
                "per State (per tool call for ctx.step); give this step another name"
            )
        if record is None:
            return None  # its place is taken once its start is recorded (_start_step)
        self._steps_here[scope] = k + 1
        return dict(record)

    def _step_record(self, name: str, scope: Scope) -> dict[str, Any]:
        """A copy of the record of step ``name`` (which must have been started)."""
        return dict(self._replay.steps[(scope, name)])

    def _start_step(self, name: str, scope: Scope, key: str, attempt: int) -> None:
        """Record that step ``name`` starts (its ``attempt``: 1, or one more after a crash)."""
        fields: dict[str, Any] = {"name": name, "key": key}
        if attempt != 1:
            fields["attempt"] = attempt
        if scope is not None:
            fields["call_id"] = scope
        new = (scope, name) not in self._replay.steps
        self._append("step_start", f"step({name!r})", **fields)
        if new:
            self._steps_here[scope] = self._steps_here.get(scope, 0) + 1

    def _end_step(
        self, name: str, scope: Scope, output: Any, outcome: str, *, reconciled: bool = False
    ) -> None:
        """Record step ``name``'s end; TypeError (nothing added) if ``output`` is not JSON."""
        fields: dict[str, Any] = {"name": name, "output": output, "is_error": outcome != "done"}
        fields["outcome"] = outcome
        if reconciled:
            fields["reconciled"] = True
        if scope is not None:
            fields["call_id"] = scope
        self._append("step_end", f"step({name!r}) result", **fields)

"""Replaying durable steps (format 4): ``step_start`` and ``step_end``.

A mixin of :class:`~statekeep._run.history.Replay` (which holds ``pending_calls``). A step
is named, unique within its scope: the State (``store.step``), or one tool call
(``ctx.step``: its entries carry the ``call_id``, which must be a pending call). It keeps,
per step, its latest start (key, attempt) and its end once recorded, and the order the
steps of each scope were first started in (a step called again replays in that order).
A base record (``store.trim``) carries them as its ``steps``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: A step's scope: None for the State's own steps, else the tool call's id.
Scope = str | None
#: What a step's end records, kept in its record once it is recorded.
END_KEYS = ("output", "is_error", "outcome", "reconciled")
_OUTCOMES = ("done", "error", "unknown")


class StepReplay:
    """The ``step_start`` and ``step_end`` kinds, replayed."""

    pending_calls: dict[str, dict[str, Any]]
    version: int
    is_awaiting: Callable[[str], bool]  # ApprovalWaits'

    def __init__(self) -> None:
        #: (scope, name) -> {name, key, attempt, [call_id], and once ended: output, is_error,
        #: outcome, [reconciled]}, in the order the steps were first started.
        self.steps: dict[tuple[Scope, str], dict[str, Any]] = {}
        #: scope -> the names of its steps, in the order they were first started.
        self.step_order: dict[Scope, list[str]] = {}

    def _step_scope(self, e: dict[str, Any], what: str) -> Scope:
        call_id = e.get("call_id")
        if call_id is not None and call_id not in self.pending_calls:
            raise ValueError(f"seq {e['seq']}: {what} of tool call {call_id!r}, which is not a pending call")
        if call_id is not None and self.is_awaiting(call_id):  # it has not run: no step of it started
            raise ValueError(f"seq {e['seq']}: {what} of tool call {call_id!r}, which waits for approval")
        return call_id

    def _step_start(self, e: dict[str, Any]) -> None:
        seq, name = e["seq"], e["name"]
        scope = self._step_scope(e, f"step_start of step {name!r}")
        attempt = e.get("attempt") or 1
        if type(attempt) is not int or attempt < 1:
            raise ValueError(f"seq {seq}: a step_start's attempt must be an int >= 1, got {attempt!r}")
        record = self.steps.get((scope, name))
        if record is None:
            if attempt != 1:
                raise ValueError(f"seq {seq}: step {name!r} starts at attempt {attempt}, not 1")
            record = {"name": name}
            if scope is not None:
                record["call_id"] = scope
            self.steps[(scope, name)] = record
            self.step_order.setdefault(scope, []).append(name)
        elif "outcome" in record:
            raise ValueError(f"seq {seq}: step {name!r} starts again, but its end is recorded already")
        elif attempt != record["attempt"] + 1:
            raise ValueError(
                f"seq {seq}: step {name!r} starts again at attempt {attempt}, after attempt {record['attempt']}"
            )
        record["key"], record["attempt"] = e["key"], attempt

    def _step_end(self, e: dict[str, Any]) -> None:
        seq, name = e["seq"], e["name"]
        record = self.steps.get((self._step_scope(e, f"step_end of step {name!r}"), name))
        if record is None or "outcome" in record:
            why = "is not started" if record is None else "has its end recorded already"
            raise ValueError(f"seq {seq}: the end of step {name!r}, which {why}")
        if e["outcome"] not in _OUTCOMES:
            raise ValueError(f"seq {seq}: outcome {e['outcome']!r} is not one of {', '.join(_OUTCOMES)}")
        if "output" not in e:
            raise ValueError(f"seq {seq}: step_end entry needs 'output'")
        record.update({key: e.get(key) for key in END_KEYS if key == "output" or e.get(key) is not None})

    def _base_steps(self, steps: list[Any] | None) -> None:
        """Take up the steps a base record carries (its ``steps``, as :meth:`step_records` gave)."""
        for item in steps or ():
            if not (
                isinstance(item, dict)
                and isinstance(item.get("name"), str)
                and isinstance(item.get("key"), str)
                and type(item.get("attempt")) is int
                and (item.get("outcome") is None or item.get("outcome") in _OUTCOMES)
            ):
                raise ValueError("a base entry's steps each need a str 'name' and 'key' and an int 'attempt'")
            scope = item.get("call_id")
            record = {key: value for key, value in item.items() if key == "output" or value is not None}
            if "outcome" not in record:  # open: no end recorded
                record = {key: value for key, value in record.items() if key not in END_KEYS}
            else:
                record.setdefault("output", None)  # null is an output
            self.steps[(scope, item["name"])] = record
            self.step_order.setdefault(scope, []).append(item["name"])
        if steps:
            self.version = max(self.version, 4)

    def step_records(self) -> list[dict[str, Any]]:
        """Every step's record, in the order they were first started (what a base keeps)."""
        return [dict(record) for record in self.steps.values()]

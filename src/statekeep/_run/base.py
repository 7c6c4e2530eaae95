"""The base record: what a trimmed State keeps of the entries ``trim`` removed (pure, no I/O).

``store.trim(id, before=seq)`` removes a State's entries before ``seq`` and writes, at seq
``before - 1`` (in the place of the last entry removed, so every kept seq is unchanged), one
``base`` entry holding what replaying the removed entries gave::

    {"seq": 41, "kind": "base", "at": "...",            # the time of the entry it replaces
     "task": {"text": ..., "at": ..., "parent": ..., "call_id": ...},
     "trimmed": 42,                                      # the entries it stands for
     "turn": 17, "data": {key: value}, "last_agent": {...} | null,
     "stopped_by": ... | null, "answer": ..., "answered": [call ids],
     "open_calls": [{"id", "name", "args"}], "waiting": model name | null,
     "steps": [{"name", "key", "attempt", [call_id], [output, is_error, outcome, reconciled]}]}

``steps`` (only when the removed entries recorded durable steps) keeps each step's latest
start and its end, so that a step called again after the trim still replays.

:class:`~statekeep._run.history.Replay` takes a base as the first entry of a history instead
of the task, and picks up from it as if it had replayed the entries it stands for. The
messages of the removed entries are not kept: ``trim`` is allowed only up to the latest
compaction, whose summary stands for them (``before <= through + 1``).
"""

from __future__ import annotations

from typing import Any

from .._core.frozen import thaw
from .history import Replay

#: What a base keeps of the task entry (the State's ``task``, ``created_at``, ``parent``, ``call_id``).
TASK_KEYS = ("text", "at", "parent", "call_id")


def build_base(removed: list[dict[str, Any]]) -> dict[str, Any]:
    """The base record standing for ``removed``: a history's first entries (from its task,
    or its base), in order. ValueError if they cannot be replayed."""
    if not removed:
        raise ValueError("a base record stands for at least one entry")
    replay = Replay()
    for entry in removed:
        replay.apply(entry)
    last = removed[-1]
    task = {key: replay.task_entry[key] for key in TASK_KEYS if replay.task_entry.get(key) is not None}
    request = replay.pending_request
    steps = {"steps": replay.step_records()} if replay.steps else {}
    return {
        "seq": last["seq"],
        "kind": "base",
        "at": last["at"],
        "task": task,
        "trimmed": last["seq"] + 1,
        "turn": replay.turn,
        "data": {key: thaw(value) for key, value in replay.data.items()},
        "last_agent": replay.last_agent,
        "stopped_by": replay.stopped_by,
        "answer": replay.answer,
        "answered": sorted(replay.answered),
        "open_calls": list(replay.pending_calls.values()),
        "waiting": None if request is None else request["model"],
        **steps,
    }

"""Saving a State to a store and loading it back ready to continue, with repair.

A State saved mid-turn is closed on load: every tool call without a result gets a
``tool_result`` with outcome ``unknown`` telling the model the tool may or may not have
run, and a request still waiting on the model gets a ``model_error`` (the next run asks
again). The repair is deterministic (its entries carry the time of the last saved
entry), kept in memory, and written by the next save.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from .errors import CorruptStateError, StateConflictError
from .history import FORMAT_VERSION
from .records import Record
from .state import State

if TYPE_CHECKING:
    from .store import Store

INTERRUPTED_TOOL = (
    "The run was interrupted before the result of this tool call was recorded, so the tool "
    "may or may not have run. Check its effect before relying on it or calling it again."
)
INTERRUPTED_MODEL = "The run was interrupted while waiting for the model; the request is asked again."


class ResumeWarning(UserWarning):
    """A State is resumed by an agent that differs from the one that ran it last.

    ``changes`` maps each differing field (``name``, ``model``, ``system_sha256``,
    ``tools``) to ``(saved, current)``.
    """

    def __init__(self, message: str, changes: dict[str, tuple[Any, Any]]) -> None:
        super().__init__(message)
        self.changes = changes


def warn_if_agent_changed(state_id: str, saved: dict[str, Any] | None, current: dict[str, Any]) -> None:
    if saved is None:
        return
    changes = {key: (saved.get(key), current[key]) for key in current if saved.get(key) != current[key]}
    if changes:
        listed = "; ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in changes.items())
        warnings.warn(
            ResumeWarning(f"State {state_id!r} is resumed by a different agent ({listed})", changes),
            stacklevel=3,
        )


def write_args(state: State, store: Store) -> tuple[list[dict[str, Any]], dict[str, Any], bool]:
    """What ``store.save(state)`` sends: the new entries, the snapshot, and create."""
    if state._store is not None and state._store != store:
        raise ValueError(
            f"State {state.id!r} is saved in {state._store!r}; a State is saved in one store only. "
            "Load it from that store, or make a new State for this one"
        )
    return state.history[state._saved :], state.snapshot(), not state._created


def after_write(state: State, store: Store, sent_to: int) -> None:
    state._store, state._saved, state._created, state._create_unsure = store, sent_to, True, False


def conflict(state: State, exc: StateConflictError) -> StateConflictError:
    return StateConflictError(
        f"{exc} — State {state.id!r} was changed by another writer since it was loaded; "
        f"load it again with store.load({state.id!r}) and continue from there"
    )


def from_record(state_id: str, record: Record | None, store: Store) -> State:
    """Rebuild and repair a State that ``store`` read; LookupError or ValueError
    (CorruptStateError when saved entries are missing)."""
    if record is None:
        raise LookupError(f"no State {state_id!r} in this store")
    snapshot = record.snapshot
    version = snapshot.get("v") if isinstance(snapshot, dict) else None
    if version is None:
        raise ValueError(
            f"State {state_id!r} is damaged or not a statekeep State: its snapshot has no version"
        )
    if type(version) is not int or version > FORMAT_VERSION:
        raise ValueError(
            f"State {state_id!r} was saved in format version {version!r}, newer than this statekeep "
            f"reads (version {FORMAT_VERSION}); upgrade statekeep to load it"
        )
    _check_snapshot_covered(state_id, snapshot, record.entries)
    try:
        state = State._from_history(state_id, record.entries)
    except ValueError as exc:
        raise ValueError(f"State {state_id!r} is damaged: its history cannot be replayed: {exc}") from None
    state._store, state._saved, state._created = store, len(state.history), True
    _repair(state)
    state._check_agent = True
    return state


def _check_snapshot_covered(state_id: str, snapshot: dict[str, Any], entries: list[dict[str, Any]]) -> None:
    """The snapshot is written after the entries it covers, so a snapshot beyond the last
    entry means acknowledged entries were lost: refuse, rather than load less than was saved."""
    seq = snapshot.get("seq")
    last = len(entries) - 1
    if type(seq) is not int or seq <= last:
        return
    ends = "is empty" if last < 0 else f"ends at seq {last}"
    missing = (
        f"entry seq {seq} is missing" if seq == last + 1 else f"entries seq {last + 1} to {seq} are missing"
    )
    raise CorruptStateError(
        f"State {state_id!r} is damaged: its snapshot covers the history up to seq {seq}, but the "
        f"history {ends}, so saved {missing}. Nothing was loaded or repaired; restore "
        "the missing entries from a backup, or delete the State"
    )


def _repair(state: State) -> None:
    at = state.updated_at  # deterministic: loading twice gives equal States
    replay = state._replay
    if replay.pending_request is not None:
        replay.apply(_entry(state, at, "model_error", message=INTERRUPTED_MODEL))
    for call in list(replay.pending_calls.values()):
        replay.apply(
            _entry(
                state,
                at,
                "tool_result",
                call_id=call["id"],
                name=call["name"],
                output=INTERRUPTED_TOOL,
                is_error=True,
                outcome="unknown",
            )
        )


def _entry(state: State, at: str, kind: str, **fields: Any) -> dict[str, Any]:
    return {"seq": len(state.history), "kind": kind, "at": at, **fields}

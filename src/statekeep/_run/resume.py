"""Saving a State to a store and loading it back ready to continue, with repair.

A State saved mid-turn is closed on load: every tool call without a result gets a
``tool_result`` with outcome ``unknown`` telling the model the tool may or may not have
run, and a request still waiting on the model gets a ``model_error`` (the next run asks
again). A call that waits for a person's approval, or was approved and has not started
(no ``tool_resume`` yet), never ran: it is left open for ``agent.run`` to settle. The
repair is deterministic (its entries carry the time of the last saved entry), kept in
memory, and written by the next save.

The errors of :meth:`Store.save` (a first save whose id is taken, a save of a deleted
State, a conflict) are made here, with advice for ``save`` rather than for the raw write.
"""

from __future__ import annotations

from typing import Any

from .._core.errors import (
    CorruptStateError,
    StateConflictError,
    StateExistsError,
    StateNotFoundError,
    UnsupportedFormatError,
)
from .._core.records import Record, check_covered
from .._core.writes import missing_error
from .history import FORMAT_VERSION
from .shown import framework_of, not_an_agent_state
from .state import State

INTERRUPTED_TOOL = (
    "The run was interrupted before the result of this tool call was recorded, so the tool "
    "may or may not have run. Check its effect before relying on it or calling it again."
)
INTERRUPTED_MODEL = "The run was interrupted while waiting for the model; the request is asked again."


def exists(state: State) -> StateExistsError:
    """The error of a first save whose id is taken (advice for save and Agent.run)."""
    sid = state.id
    return StateExistsError(
        f"State {sid!r} already exists in this store, saved by another State object; nothing was "
        f"written. To continue that one, load it with store.load({sid!r}); to start over, delete "
        f"it with store.delete({sid!r}) first; or give this State a new id"
    )


def deleted(state: State) -> StateNotFoundError:
    """The error of a save whose State was deleted from the store since it was saved."""
    return StateNotFoundError(
        f"State {state.id!r} was deleted from this store after it was saved or loaded; nothing was "
        "written. A deleted State stays deleted: to go on, start a new State with a new id"
    )


def conflict(state: State, exc: StateConflictError) -> StateConflictError:
    """The error of a save that another writer got ahead of."""
    return StateConflictError(
        f"{exc} — State {state.id!r} was changed by another writer since it was loaded; "
        f"load it again with store.load({state.id!r}) and continue from there"
    )


def from_record(state_id: str, record: Record | None, store: object) -> State:
    """Rebuild and repair a State that ``store`` read.

    StateNotFoundError for no record, UnsupportedFormatError for a newer history format or
    a State a framework adapter wrote (naming the adapter and how to read it),
    CorruptStateError for a damaged one (all three are LookupError or ValueError).
    """
    if record is None:
        raise missing_error(state_id)
    snapshot = record.snapshot
    framework = framework_of(snapshot)
    if framework is not None:
        assert isinstance(snapshot, dict)
        raise UnsupportedFormatError(not_an_agent_state(state_id, snapshot, framework))
    version = snapshot.get("v") if isinstance(snapshot, dict) else None
    if type(version) is not int or version < 1:
        what = "no version" if version is None else f"the version {version!r}, which is not one"
        raise CorruptStateError(
            f"State {state_id!r} is damaged or not a statekeep State: its snapshot has {what}"
        )
    if version > FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"State {state_id!r} was saved in format version {version!r}, newer than this statekeep "
            f"reads (version {FORMAT_VERSION}); upgrade statekeep to load it"
        )
    check_covered(
        snapshot,
        first_seq(record.entries) + len(record.entries),
        snapshot_name=f"State {state_id!r} is damaged: its snapshot",
        history_name="its history",
        advice="restore the missing entries from a backup, or delete the State",
    )
    try:
        state = State._from_history(state_id, record.entries)
    except ValueError as exc:
        raise CorruptStateError(
            f"State {state_id!r} is damaged: its history cannot be replayed: {exc}"
        ) from None
    state._restore(snapshot)
    state._incarnation = record.incarnation
    state._bind_loaded(store)
    _repair(state)
    return state


def first_seq(entries: list[dict[str, Any]]) -> int:
    """The seq of a history's first entry: 0, or a trimmed history's base's."""
    first = entries[0] if entries else {}
    seq = first.get("seq")
    return seq if first.get("kind") == "base" and type(seq) is int and seq > 0 else 0


def _repair(state: State) -> None:
    at = state.updated_at  # deterministic: loading twice gives equal States
    if state.waiting_on_model:
        state._add_repair(_entry(state, at, "model_error", message=INTERRUPTED_MODEL))
    for call in state.pending_calls:
        if state._replay.is_awaiting(call["id"]):
            continue  # it waits on approval (or was approved and has not started): it never ran
        state._add_repair(
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
    return {"seq": state._next_seq(), "kind": kind, "at": at, **fields}

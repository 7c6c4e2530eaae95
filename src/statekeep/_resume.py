"""Saving a State to a store and loading it back ready to continue, with repair.

A State saved mid-turn is closed on load: every tool call without a result gets a
``tool_result`` with outcome ``unknown`` telling the model the tool may or may not have
run, and a request still waiting on the model gets a ``model_error`` (the next run asks
again). The repair is deterministic (its entries carry the time of the last saved
entry), kept in memory, and written by the next save.
"""

from __future__ import annotations

import asyncio
import os
import sys
import warnings
from typing import TYPE_CHECKING, Any

from ._errors import StateConflictError
from ._history import FORMAT_VERSION
from ._records import Record, check_covered
from ._state import State

if TYPE_CHECKING:
    from ._store import Store

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
    """Warn with :class:`ResumeWarning`, at the caller's line, if the agent changed."""
    if saved is None:
        return
    changes = {key: (saved.get(key), current[key]) for key in current if saved.get(key) != current[key]}
    if changes:
        listed = "; ".join(
            "system prompt changed" if key == "system_sha256" else f"{key}: {old!r} -> {new!r}"
            for key, (old, new) in changes.items()
        )
        _warn_at_caller(
            ResumeWarning(f"State {state_id!r} is resumed by a different agent ({listed})", changes)
        )


# Frames in these folders are statekeep's or the event loop's, never the caller's line.
_NOT_THE_CALLER = (os.path.dirname(__file__) + os.sep, os.path.dirname(asyncio.__file__) + os.sep)


def _warn_at_caller(warning: Warning) -> None:
    """Warn at the first frame outside statekeep and asyncio: the line that called
    statekeep, however deep in statekeep or the event loop the warning arises."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_NOT_THE_CALLER):
        frame = frame.f_back
    if frame is None:  # no caller's frame on this thread's stack
        warnings.warn(warning, stacklevel=2)
        return
    module_globals = frame.f_globals
    warnings.warn_explicit(
        warning,
        type(warning),
        frame.f_code.co_filename,
        frame.f_lineno,
        module_globals.get("__name__", "<string>"),
        module_globals.setdefault("__warningregistry__", {}),
        module_globals,
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


def exists(state: State) -> ValueError:
    """The error of a first save whose id is taken (advice for save and Agent.run)."""
    sid = state.id
    return ValueError(
        f"State {sid!r} already exists in this store, saved by another State object; nothing was "
        f"written. To continue that one, load it with store.load({sid!r}); to start over, delete "
        f"it with store.delete({sid!r}) first; or give this State a new id"
    )


def deleted(state: State) -> LookupError:
    """The error of a save whose State was deleted from the store since it was saved."""
    return LookupError(
        f"State {state.id!r} was deleted from this store after it was saved or loaded; nothing was "
        "written. A deleted State stays deleted: to go on, start a new State with a new id"
    )


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
    check_covered(
        snapshot,
        len(record.entries),
        snapshot_name=f"State {state_id!r} is damaged: its snapshot",
        history_name="its history",
        advice="restore the missing entries from a backup, or delete the State",
    )
    try:
        state = State._from_history(state_id, record.entries)
    except ValueError as exc:
        raise ValueError(f"State {state_id!r} is damaged: its history cannot be replayed: {exc}") from None
    state._store, state._saved, state._created = store, len(state.history), True
    _repair(state)
    state._check_agent = True
    return state


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

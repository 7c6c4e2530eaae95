"""Saving and forking a State on any store, built on its record operations: what a save
sends, what a failed one leaves, the advice each refusal gets; a fork's one create.
:class:`~statekeep.Store`'s ``asave`` and ``afork`` run these."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core.errors import (
    LeaseHeldError,
    StaleLeaseError,
    StateConflictError,
    StateExistsError,
    StateNotFoundError,
)
from .._core.records import Record
from .._core.writes import missing_error
from .._run.lineage import fork_state
from .._run.resume import conflict, deleted, exists, from_record
from .incarnations import incarnated, takes_incarnation
from .shims import save_options

if TYPE_CHECKING:
    from .._core.leases import Lease
    from .._run.state import State


def match_incarnation(store: Any, state: State) -> None:
    """Drop ``state``'s incarnation if ``store`` keeps none: a load from it gives None, so
    from the first save (or step) on the State has what a load gives, and the keys of its tool
    calls and steps (made from it) stay the same across a crash."""
    if state._incarnation is not None and not takes_incarnation(type(store)):
        state._incarnation = None


async def save(store: Any, state: State, lease: Lease | None) -> None:
    """Write what ``store`` does not have of ``state`` yet, plus its snapshot (see
    :meth:`~statekeep.Store.asave`)."""
    entries, snapshot, create, unsure = state._unsaved(store)
    sent = state._next_seq()
    match_incarnation(store, state)
    options = save_options(store, lease, state)
    try:
        if unsure:
            # An earlier create failed after it may have been stored: append instead,
            # which skips what is there already.
            try:
                await store.awrite(state.id, entries, snapshot, **options)
            except LookupError:
                await store.awrite(state.id, entries, snapshot, create=True, **options)
        else:
            await store.awrite(state.id, entries, snapshot, create=create, **options)
    except (StaleLeaseError, LeaseHeldError):
        raise  # nothing was written, and the advice is the lease's
    except StateConflictError as exc:
        raise conflict(state, exc) from None
    except StateExistsError:  # the raw write's advice (create=...) is not for save
        raise exists(state) from None
    except StateNotFoundError:
        raise deleted(state) from None
    except (ValueError, TypeError, LookupError):
        raise
    except BaseException:  # failed, cancelled or interrupted: it may be stored or not
        state._mark_failed()
        raise
    state._mark_saved(store, sent)


async def fork(
    store: Any, state_id: str, at_seq: int | None, new_id: str | None, labels: dict[str, str] | None
) -> State:
    """The fork of ``state_id`` at ``at_seq``, created in ``store`` (see
    :meth:`~statekeep.Store.afork`): copied on the store's side where it may."""
    record = await store.aread(state_id)
    if record is None:
        raise missing_error(state_id)
    state, entries, snapshot = fork_state(state_id, record, at_seq, new_id, labels)
    if store._may_copy_on_server():
        await store._afork_write(state_id, entries, snapshot, state.id, state.incarnation)
    else:  # its sealed records are sealed for their place: written again, sealed for the fork's
        await write_fork(store, entries, snapshot, state.id, state.incarnation)
    kept = state.incarnation if takes_incarnation(type(store)) else None
    return from_record(state.id, Record(entries, snapshot, kept), store)


async def write_fork(
    store: Any, entries: list[dict[str, Any]], snapshot: dict[str, Any], new_id: str, incarnation: str | None
) -> None:
    """Create a fork (a new incarnation) with the store's ``awrite``."""
    await store.awrite(new_id, entries, snapshot, create=True, **incarnated(store, incarnation))

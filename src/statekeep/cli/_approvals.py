"""``statekeep approvals``, ``approve`` and ``reject``: the tool calls that wait for a person."""

from __future__ import annotations

import json
import warnings
from typing import Any

import click

from .._core.errors import LeaseHeldError, StateConflictError
from .._core.writes import missing_error
from .._run.state import State
from .._store.contract import Store
from ._common import NOT_FOUND, USAGE, emit, fail, open_store_at, reporting, say, state_id_arg, store_option
from ._group import main
from ._keys import keys_option
from ._render import _args, safe, short


def waiting(store: Store) -> list[tuple[State, dict[str, Any]]]:
    """Every pending approval in ``store``: (State, call), the States most recently updated
    first, each one's calls in call order. A State that cannot be loaded (damaged, or
    encrypted and no keys given) is left out with a warning naming it."""
    found: list[tuple[State, dict[str, Any]]] = []
    for row in store.iter_states(status="approval"):
        try:
            state = store.load(row.id)
        except LookupError:  # deleted meanwhile
            continue
        except ValueError as exc:  # damaged, or sealed without --keys: the others still show
            warnings.warn(f"State {row.id} is left out: {exc}", RuntimeWarning, stacklevel=1)
            continue
        found.extend((state, call) for call in state.pending_approvals)
    return found


@main.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
@keys_option
def approvals(store_url: str, as_json: bool, keys_file: str | None) -> None:
    """List the tool calls waiting for a person's approval, across the store's runs: the State
    id, the call id, the tool, its arguments and since when it waits (UTC). Decide with
    'statekeep approve ID CALL' or 'statekeep reject ID CALL'."""
    with reporting(), open_store_at(store_url, keys_file) as store:
        found = waiting(store)
    if as_json:
        emit(
            json.dumps(
                {"id": s.id, "call": c["id"], "tool": c["name"], "args": c["args"], "since": c["since"]},
                ensure_ascii=True,
            )
            for s, c in found
        )
    elif not found:
        say("no tool calls wait for approval")
    else:
        lines = [f"{'ID':<34} {'CALL':<20} {'TOOL':<16} {'SINCE (UTC)':<19} ARGS"]
        for state, call in found:
            since = str(call["since"])[:19].replace("T", " ")
            lines.append(
                f"{state.id:<34} {short(call['id'], 20):<20} {short(call['name'], 16):<16} {since:<19} "
                f"{_args(call['args'])}"
            )
        emit(safe(line) for line in lines)


note_option = click.option(
    "--note", help="why: kept in the history (a rejected call's note goes to the model)"
)


@main.command()
@click.argument("state_id", callback=state_id_arg)
@click.argument("call_id")
@note_option
@store_option
@keys_option
def approve(state_id: str, call_id: str, note: str | None, store_url: str, keys_file: str | None) -> None:
    """Approve tool call CALL of State ID (see 'statekeep approvals'): the run's next
    agent.run(state) runs it. Saved when the command returns."""
    _decide(state_id, call_id, True, note, store_url, keys_file)


@main.command()
@click.argument("state_id", callback=state_id_arg)
@click.argument("call_id")
@note_option
@store_option
@keys_option
def reject(state_id: str, call_id: str, note: str | None, store_url: str, keys_file: str | None) -> None:
    """Reject tool call CALL of State ID (see 'statekeep approvals'): it never runs, and the
    run's next agent.run(state) gives the model an error result holding --note. Saved when
    the command returns."""
    _decide(state_id, call_id, False, note, store_url, keys_file)


def _decide(
    state_id: str, call_id: str, approved: bool, note: str | None, store_url: str, keys_file: str | None
) -> None:
    how = "approved" if approved else "rejected"
    with reporting(), open_store_at(store_url, keys_file) as store:
        if store.read(state_id) is None:
            fail(missing_error(state_id, store_url).found)
        state = store.load(state_id)
        problem = state._replay.approval_problem(call_id)
        if problem is not None:
            known = call_id in state._replay.pending_calls or call_id in state._replay.answered
            fail(
                f"State {state_id}: {problem}; nothing was saved (see 'statekeep approvals')",
                USAGE if known else NOT_FOUND,
            )
        try:
            (state.approve if approved else state.reject)(call_id, note=note)
        except ValueError as exc:  # a run is going on (or was cut off): it must stop first
            fail(str(exc), USAGE)
        try:
            store.save(state)
        except LeaseHeldError:
            fail(
                f"State {state_id} is leased by a running agent; nothing was saved. Decide once it stops "
                "for approval again (see 'statekeep approvals')",
                USAGE,
            )
        except StateConflictError:
            fail(
                f"State {state_id} changed while deciding (a run or another decision saved meanwhile); "
                "nothing was saved: see 'statekeep approvals' and try again",
                USAGE,
            )
    say(f"{how} call {call_id} of {state_id}: the next run of the agent on it goes on from here")

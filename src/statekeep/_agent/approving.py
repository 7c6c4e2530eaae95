"""Approvals in the reference loop: a reply's calls that a person must approve first stop the
run; a decided State's calls are settled when it runs again (see ``docs/exactly-once.md``,
"Approvals"). Used by :mod:`statekeep._agent.loop`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from .._leases.keepalive import LeaseKeeper
from .._run.state import State
from .tools import Tool

#: What the model reads as the result of a call a person rejected; the note follows.
REJECTED = "A person rejected this tool call; it did not run."

Save = Callable[[], Awaitable[None]]
#: Records a call's result in the State: ``record(state, call, output, is_error)``.
Record = Callable[[State, Mapping[str, Any], Any, bool], None]


class Agent(Protocol):
    """What this module needs of :class:`~statekeep.Agent` (which imports it)."""

    tools: dict[str, Tool]

    async def _call_tool(
        self, state: State, call: Mapping[str, Any], keeper: LeaseKeeper | None = None
    ) -> tuple[Any, bool]: ...


def wants_approval(agent: Agent, call: Mapping[str, Any]) -> bool:
    """Whether ``call`` must wait for a person's approval before it runs. A predicate that
    raises counts as a yes: a call is never run unasked because its check failed."""
    tool = agent.tools.get(call["name"])
    if tool is None:
        return False
    try:
        return tool.wants_approval(dict(call.get("args") or {}))
    except Exception:
        return True


def asked(agent: Agent, calls: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ids of a reply's calls that wait for a person's approval, in call order: asked once
    per reply, so the calls the run skips are exactly the ones it then records as waiting."""
    return [call["id"] for call in calls if wants_approval(agent, call)]


async def stop_for_approval(state: State, waiting: list[str], save: Save) -> bool:
    """After the other calls of a reply ran: record (and save) that ``waiting`` (see
    :func:`asked`) wait for approval, which stops the run. False if there are none."""
    if not waiting:
        return False
    state._wait_for_approval(waiting)
    await save()
    return True


async def settle(agent: Agent, state: State, keeper: LeaseKeeper | None, save: Save, record: Record) -> bool:
    """At the start of a run: answer the rejected calls (an error result with the note), run
    the approved ones (their ``tool_resume`` saved first: intent before effect), in call
    order. True if calls still wait for a decision: an ``approval_wait`` for them is saved
    and the run stops without asking the model."""
    undecided = []
    for call in state.pending_calls:
        if not state._replay.is_awaiting(call["id"]):
            continue
        decision = state._decision(call["id"])
        if decision is None:
            undecided.append(call["id"])
        elif not decision["approved"]:
            note = decision.get("note")
            output = REJECTED + (f" Their note: {note}" if note else "")
            state.add_tool_result(call["id"], output, is_error=True, outcome="error")
            await save()
        else:
            state._resume_call(call["id"], "approved")
            await save()
            if keeper is not None:
                await keeper.keep()  # a tool's effects must not start on a lost lease
            output, is_error = await agent._call_tool(
                state, call, keeper
            )  # with its ToolContext: the same key
            record(state, call, output, is_error)
            await save()
    if not undecided:
        return False
    state._wait_for_approval(undecided)
    await save()
    return True

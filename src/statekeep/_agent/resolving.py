"""What an :class:`~statekeep.Agent` run does first with a State just loaded after a crash:
resolve its in-doubt tool calls by fact where the tool can say (a mixin of the Agent).

``store.load`` knows no tools: it closes every call that has no recorded result with an
unsaved "may or may not have run" result (outcome ``unknown``). Before the run's first save,
for each of those calls whose tool has ``reconcile`` or ``idempotent``, the run takes that
repair back and instead:

- ``reconcile(ctx)`` returns a result: the call ran; the result is recorded (outcome
  ``done``, ``reconciled: true``), and the tool is not run;
- ``reconcile(ctx)`` returns :data:`~statekeep.NotRun`, or the tool is ``idempotent``: a
  ``tool_resume`` entry is recorded and saved, then the call runs with the same idempotency
  key and the next attempt number, and its result is saved;
- ``reconcile(ctx)`` raises: the repair stays (the model is told the call may or may not
  have run), as it does for every other tool.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from typing import Any

from .._leases.keepalive import LeaseKeeper
from .._run.resume import INTERRUPTED_TOOL
from .._run.state import State
from .._runtime.callerloop import worker_thread
from .context import NotRun, ToolContext
from .tools import Tool


class Resolving:
    """The in-doubt resolution of :class:`~statekeep.Agent` (see the module)."""

    tools: dict[str, Tool]

    def _context(
        self, state: State, call: Mapping[str, Any], keeper: LeaseKeeper | None = None
    ) -> ToolContext:
        raise NotImplementedError

    async def _call_tool(
        self, state: State, call: Mapping[str, Any], keeper: LeaseKeeper | None = None
    ) -> tuple[Any, bool]:
        raise NotImplementedError

    async def _save(self, state: State, keeper: LeaseKeeper | None) -> None:
        raise NotImplementedError

    def _resolvable(self, entry: Mapping[str, Any]) -> bool:
        """Whether a load's in-doubt result is one the call's tool can resolve."""
        tool = self.tools.get(entry["name"])
        return (
            entry["output"] == INTERRUPTED_TOOL
            and tool is not None
            and (tool.reconcile is not None or tool.idempotent)
        )

    async def _resolve_in_doubt(self, state: State, keeper: LeaseKeeper | None) -> None:
        """Resolve the calls a load left in doubt whose tools can say what became of them
        (see the module); saves before each call runs again and after each result. Does
        nothing for a State with no such call."""
        repairs = {e["call_id"]: e for e in state._unsaved_in_doubt() if self._resolvable(e)}
        if not repairs:
            return
        state._take_back(set(repairs))
        resumed = []
        # The calls taken back, in their order (others may wait too: for an approval, say).
        for call in [c for c in state.pending_calls if c["id"] in repairs]:
            tool = self.tools[call["name"]]
            if tool.reconcile is None:
                state._resume_call(call["id"], "idempotent")
                resumed.append(call)
                continue
            try:
                found = await _reconcile(tool, self._context(state, call, keeper))
            except asyncio.CancelledError:
                raise
            except Exception:
                # The tool cannot tell: the call stays in doubt, as load repaired it.
                state._add_repair({**repairs[call["id"]], "seq": state._next_seq()})
                continue
            if found is NotRun:
                state._resume_call(call["id"], "reconcile")
                resumed.append(call)
            else:
                _record_reconciled(state, call, found)
        await self._save(state, keeper)  # intent before effect: every tool_resume is durable
        for call in resumed:
            if keeper is not None:
                await keeper.keep()  # a tool's effects must not start on a lost lease
            output, is_error = await self._call_tool(state, call, keeper)
            record_result(state, call, output, is_error)
            await self._save(state, keeper)


async def _reconcile(tool: Tool, ctx: ToolContext) -> Any:
    """Call ``tool.reconcile(ctx)``, awaiting it if it is async (a plain function runs in a
    worker thread, as tools do)."""
    assert tool.reconcile is not None
    if inspect.iscoroutinefunction(tool.reconcile):
        return await tool.reconcile(ctx)
    found = await worker_thread(tool.reconcile, ctx)
    if inspect.isawaitable(found):
        found = await found
    return found


def _record_reconciled(state: State, call: Mapping[str, Any], output: Any) -> None:
    try:
        state._add_reconciled(call["id"], output)
    except TypeError as exc:
        what = f"tool {call['name']!r} ran (its reconcile found it), but the result cannot be saved: {exc}"
        state._add_reconciled(call["id"], what, is_error=True)


def record_result(state: State, call: Mapping[str, Any], output: Any, is_error: bool) -> None:
    """Record a tool's result; one JSON cannot hold becomes an error result saying so
    (outcome ``done``: the tool ran, its effects happened)."""
    try:
        state.add_tool_result(call["id"], output, is_error=is_error)
    except TypeError as exc:
        state.add_tool_result(
            call["id"],
            f"tool {call['name']!r} ran, but its result cannot be saved: {exc}",
            is_error=True,
            outcome="done",
        )

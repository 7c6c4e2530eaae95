"""An OpenAI Agents run whose tool needs approval, on a StatekeepSession, run by
test_openai_agents_approvals.py in a process of its own:

    python -m tests.support.children.openai_approval_child STORE_URL SESSION_ID LEDGER start|approve|reject

``start`` runs until the SDK stops for approval, saves the run state in the session, prints
what it saw as one JSON line and SIGKILLs itself (nothing is flushed or closed after the save
returns). ``approve`` / ``reject`` load (approve) or take (reject) the run state in this new
process, decide, run on with a scripted model and clear the run state. The tool appends its idempotency key to
the file LEDGER each time it runs: how many times it ran, seen from outside.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from agents import Agent, FunctionTool, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext

from statekeep import Store, open_store
from statekeep.adapters.openai_agents import StatekeepSession

CALL_ID = "call-pay-1"


def pay_tool(session: StatekeepSession, ledger: Path) -> FunctionTool:
    @function_tool(needs_approval=True)
    def pay(ctx: ToolContext[Any], amount: int) -> str:
        """Pay an amount."""
        key = session.tool_call_key(ctx)
        with ledger.open("a") as out:
            out.write(key + "\n")
        return f"paid {amount}"

    return pay


def agent(session: StatekeepSession, ledger: Path, steps: list[Any]) -> Agent[Any]:
    return Agent(name="clerk", model=ScriptedModel(steps), tools=[pay_tool(session, ledger)])


async def start(store: Store, session_id: str, ledger: Path) -> dict[str, Any]:
    session = StatekeepSession(session_id, store)
    clerk = agent(session, ledger, [[function_call("pay", {"amount": 5}, call_id=CALL_ID)]])
    result = await Runner.run(clerk, "pay the invoice", session=session)
    await session.save_run_state(result.to_state())
    waiting = [{"tool": item.name, "call_id": item.call_id} for item in result.interruptions]
    return {"waiting": waiting, "final": result.final_output}


async def decide(store: Store, session_id: str, ledger: Path, approve: bool) -> dict[str, Any]:
    session = StatekeepSession(session_id, store)
    clerk = agent(session, ledger, [[assistant_message("paid" if approve else "not paid")]])
    # approve: load, run, then clear (at least once); reject: take (load and clear in one write)
    state = await (session.load_run_state(clerk) if approve else session.take_run_state(clerk))
    assert state is not None, "no run state saved"
    waiting = state.get_interruptions()
    for item in waiting:
        if approve:
            state.approve(item)
        else:
            state.reject(item, rejection_message="the manager said no")
    result = await Runner.run(clerk, state, session=session)
    if result.interruptions:
        await session.save_run_state(result.to_state())
    else:
        await session.clear_run_state()
    return {
        "waiting": [{"tool": item.name, "call_id": item.call_id} for item in waiting],
        "final": result.final_output,
        "left": await session.load_run_state(clerk) is not None,
        "items": await session.get_items(),
    }


def main() -> None:
    url, session_id, ledger, phase = sys.argv[1:5]
    with open_store(url) as store:
        if phase == "start":
            out = asyncio.run(start(store, session_id, Path(ledger)))
            print(json.dumps(out), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # the run state must already be durable
        out = asyncio.run(decide(store, session_id, Path(ledger), phase == "approve"))
        print(json.dumps(out))


if __name__ == "__main__":
    main()

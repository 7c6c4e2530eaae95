"""An agent process whose ``pay`` tool needs a person's approval (tests/cli/test_cli_approvals.py).

Run as ``python approval_child.py start|resume STORE_URL STATE_ID LEDGER``:

- ``start``: a new State; the model's first reply calls ``pay`` (needs approval) and ``look``
  (does not): the run stops for approval and the process exits;
- ``resume``: load the State and run the agent on;
- ``resume-block``: the same, but ``pay`` prints :data:`MARKER` after its effect and blocks
  forever (the test kills the process with SIGKILL there).

Each time ``pay`` runs it appends one line to the file LEDGER (its effect, outside the store).
The process prints one JSON line: ``{"stopped_by", "answer"}``.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from statekeep import Agent, Reply, ScriptedModel, State, open_store, tool

MARKER = "approval-child: paid, blocking"
REPLIES = [
    Reply(
        "Paying the bill.",
        [
            {"id": "call-pay", "name": "pay", "args": {"amount": 120}},
            {"id": "call-look", "name": "look", "args": {"what": "bill"}},
        ],
    ),
    "Done.",
]


@tool(needs_approval=lambda args: args["amount"] > 100)
def pay(amount: int) -> str:
    """Pay an amount (large ones need approval)."""
    with Path(sys.argv[4]).open("a") as ledger:
        ledger.write(f"paid {amount}\n")
    if sys.argv[1] == "resume-block":
        print(MARKER, flush=True)
        threading.Event().wait()
    return f"paid {amount}"


def look(what: str) -> str:
    """Look at something."""
    return f"{what}: 120 EUR"


def main() -> None:
    mode, url, state_id = sys.argv[1:4]
    store = open_store(url)
    try:
        if mode == "start":
            state = State("Pay the bill", id=state_id)
            model = ScriptedModel(REPLIES)
        else:
            state = store.load(state_id)
            model = ScriptedModel(REPLIES[1:])
        agent = Agent(model, tools=[pay, look], name="payer", store=store)
        answer = agent.run(state)
        print(json.dumps({"stopped_by": state.stopped_by, "answer": answer}), flush=True)
    finally:
        store.close()


if __name__ == "__main__":
    main()

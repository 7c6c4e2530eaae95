"""An agent process that tests/run/test_resume.py kills with SIGKILL in the middle of a step.

Run as ``python agent_child.py MODE ROOT STATE_ID``, with a FileStore in ROOT:

- ``tool``: the model's first reply calls ``lookup``; its second reply calls ``lookup`` and
  then ``book``, which prints :data:`MARKER` and blocks forever.
- ``model``: the model's first reply calls ``lookup``; when it is asked the second time it
  prints :data:`MARKER` and blocks forever, so the process dies waiting on the model.

The parent resumes with an agent of the same name, model name, system prompt and tools, so
the resume is silent (no ResumeWarning).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from statekeep import Agent, FileStore, Reply, ScriptedModel, State

MARKER = "statekeep-child: blocked"
TASK = "Book a table for two"
SYSTEM = "You book tables."
FIRST_REPLY = Reply("Looking.", [{"id": "call-1", "name": "lookup", "args": {"city": "Paris"}}])
SECOND_REPLY = Reply(
    "Booking.",
    [
        {"id": "call-2", "name": "lookup", "args": {"city": "Lyon"}},
        {"id": "call-3", "name": "book", "args": {"place": "Chez Janou", "people": 2}},
    ],
)


def lookup(city: str) -> str:
    """Find a restaurant."""
    return f"{city}: Chez Janou"


def book(place: str, people: int) -> str:
    """Book a table (the process is killed while this runs)."""
    print(MARKER, flush=True)
    threading.Event().wait()
    return "booked"


class BlockingModel(ScriptedModel):
    """Gives its first reply, then blocks forever when asked again."""

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        if self.calls:
            print(MARKER, flush=True)
            threading.Event().wait()
        return super().__call__(messages, tools)


def main(mode: str, root: str, state_id: str) -> None:
    if mode == "tool":
        model: ScriptedModel = ScriptedModel([FIRST_REPLY, SECOND_REPLY])
    elif mode == "model":
        model = BlockingModel([FIRST_REPLY])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    agent = Agent(model, tools=[lookup, book], system=SYSTEM, store=FileStore(root))
    agent.run(State(TASK, id=state_id))
    raise SystemExit("the run ended, but it should have been killed")


if __name__ == "__main__":
    main(*sys.argv[1:])

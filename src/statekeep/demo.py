"""The demo: an agent saved as it goes, killed with SIGKILL mid-tool-call, resumed and finished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from .agent import Agent, Reply, ScriptedModel
from .cli import timeline
from .filestore import FileStore
from .state import State

STATE_ID = "demo-booking"
TASK = "Book a table for 4 in Paris on Friday evening"
BOOKING_STARTED = "booking the table..."

_CHILD = """
import sys
from statekeep.demo import first_run
first_run(sys.argv[1])
"""


def search_restaurants(city: str) -> list[str]:
    """Find restaurants with free tables in a city."""
    return ["Chez Janou", "Le Comptoir"]


def book_table(restaurant: str, people: int, day: str) -> str:
    """Book a table (in the demo the first process dies right here)."""
    print(BOOKING_STARTED, flush=True)
    threading.Event().wait()  # a slow booking API: the process is killed while it waits
    return "booked"


def check_booking(restaurant: str) -> str:
    """Ask the restaurant whether a booking exists."""
    return f"{restaurant}: a table for 4 on Friday 20:00 is confirmed"


def first_run(path: str) -> None:
    """The doomed process: the agent searches, then starts a booking and is killed."""
    model = ScriptedModel(
        [
            Reply(
                "Let me find a restaurant.",
                [{"id": "call-1", "name": "search_restaurants", "args": {"city": "Paris"}}],
            ),
            Reply(
                "Chez Janou has room; booking it.",
                [
                    {
                        "id": "call-2",
                        "name": "book_table",
                        "args": {"restaurant": "Chez Janou", "people": 4, "day": "Friday"},
                    }
                ],
            ),
        ],
        name="demo-model",
    )
    agent = Agent(
        model, tools=[search_restaurants, book_table, check_booking], store=FileStore(path), name="booker"
    )
    agent.run(State(TASK, id=STATE_ID))


def run(path: str | os.PathLike[str] = ".statekeep") -> int:
    """Run the demo with a FileStore in ``path``; returns the exit status."""
    store = FileStore(path)
    store.delete(STATE_ID)
    say = print
    say(f"statekeep demo · FileStore in {store.path}\n")
    say("1. An agent process starts the task and saves after every step:")
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for line in child.stdout:
        if line.strip() == BOOKING_STARTED:
            os.kill(child.pid, signal.SIGKILL)  # in the middle of the tool call
            break
    child.wait()
    say(f"   process {child.pid} was in the middle of book_table(...) when it got SIGKILL.\n")

    state = store.load(STATE_ID)
    say("2. store.load() gives the State back, closed where it broke off:")
    record = store.read(STATE_ID)
    assert record is not None
    for line in timeline(STATE_ID, record)[3:]:
        say("   " + line)
    repaired = state.history[-1]
    say(f"   + {repaired['kind']} [{repaired['call_id']}] outcome {repaired['outcome']!r} (added by load):")
    say(f'     "{repaired["output"]}"\n')

    say("3. A new process continues the run; the model checks before booking again:")
    model = ScriptedModel(
        [
            Reply(
                "The booking may not have gone through; checking first.",
                [{"id": "call-3", "name": "check_booking", "args": {"restaurant": "Chez Janou"}}],
            ),
            "Booked: Chez Janou, Friday 20:00, table for 4 (confirmed with the restaurant).",
        ],
        name="demo-model",
    )
    agent = Agent(model, tools=[search_restaurants, book_table, check_booking], store=store, name="booker")
    answer = agent.run(state)
    say(f"   answer: {answer}\n")

    say("4. statekeep list:")
    for row in store.list():
        status = "finished" if row.finished else (row.stopped_by or "running")
        say(f"   {row.id}  turn {row.turn}  {status}  {row.task}")
    say(
        f"\nThe whole history: statekeep show {STATE_ID} --store {path}   (in this repo: ./dev show {STATE_ID})"
    )
    return 0

"""The demo: an agent saved as it goes, killed with SIGKILL mid-tool-call, resumed and finished."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading

from .._agent.loop import Agent, Reply, ScriptedModel
from .._core.passwords import redact_url
from .._run.state import State
from .._store.contract import Store
from ..stores._memory import MemoryStore
from ..stores._urls import open_store
from ._render import DEFAULT_STORE, listing, timeline

STATE_ID = "demo-booking"
TASK = "Book a table for 4 in Paris on Friday evening"
BOOKING_STARTED = "booking the table..."

# The store URL goes to the child in its environment, not on its command line (where
# any user could read a password in it).
_URL_VARIABLE = "STATEKEEP_DEMO_STORE"
_CHILD = f"""
import os
from statekeep.cli._demo import first_run
first_run(os.environ[{_URL_VARIABLE!r}])
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


def first_run(url: str) -> None:
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
        model, tools=[search_restaurants, book_table, check_booking], store=open_store(url), name="booker"
    )
    agent.run(State(TASK, id=STATE_ID))


def run(url: str | os.PathLike[str] = DEFAULT_STORE) -> int:
    """Run the demo in the store ``url`` names (a folder or any store URL, see
    :func:`open_store`); returns the exit status."""
    url = os.fspath(url)
    with open_store(url) as store:
        if isinstance(store, MemoryStore):
            raise ValueError(
                "the demo needs a store that a second process can open: a folder, sqlite:///, "
                "postgresql:// or redis://, not memory://"
            )
        return _run(url, store)


def _run(url: str, store: Store) -> int:
    store.delete(STATE_ID)
    say = print
    say(f"statekeep demo · {store!r}\n")
    say("1. An agent process starts the task and saves after every step:")
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, _URL_VARIABLE: url},
    )
    assert child.stdout is not None
    for line in child.stdout:
        if line.strip() == BOOKING_STARTED:
            os.kill(child.pid, signal.SIGKILL)  # in the middle of the tool call
            break
    child.wait()
    child.stdout.close()
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
    for line in listing(store.list()):
        say("   " + line)
    if url == DEFAULT_STORE:
        say(f"\nThe whole history: statekeep show {STATE_ID}   (in this repo: ./dev show {STATE_ID})")
    else:
        shown = redact_url(url)
        say(f"\nThe whole history: statekeep show {STATE_ID} --store {shlex.quote(shown)}")
        if shown != url:
            say("(with your password in place of ***)")
    return 0

"""A real ADK Runner (scripted model, a function tool) on StatekeepSessionService: killed with
SIGKILL in the middle of a turn, then resumed by a new process with the same session; and
concurrent appends from several services (as from several processes) lose and duplicate nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions

from statekeep import Store, open_store
from statekeep.adapters.adk import StatekeepSessionService
from tests.support import REPO

CHILD = [sys.executable, "-m", "tests.support.children.adk_runner_child"]


def said(event: Event) -> str:
    """What an event holds, in a word: the user's or model's text, a call, a response."""
    parts = event.content.parts if event.content and event.content.parts else []
    words = []
    for part in parts:
        if part.text:
            words.append(f"{event.author}: {part.text}")
        elif part.function_call:
            words.append(f"call record({part.function_call.args})")
        elif part.function_response:
            words.append(f"result {part.function_response.response}")
    return " ".join(words)


def turn(n: int) -> list[str]:
    return [f"user: turn {n}", f"call record({{'turn': {n}}})", f"result {{'turn': {n}}}", f"clerk: done {n}"]


async def conversation(url: str) -> tuple[list[str], dict[str, Any]]:
    store = open_store(url)
    try:
        session = await StatekeepSessionService(store).get_session(
            app_name="shop", user_id="ann", session_id="conversation-1"
        )
        assert session is not None
        return [said(event) for event in session.events], session.state
    finally:
        await store.aclose()


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_a_runner_killed_mid_turn_resumes_in_a_new_process(kind: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db" if kind == "sqlite" else f"file://{tmp_path}/store"
    child = subprocess.Popen(
        [*CHILD, url, "1", "2", "3", "--hang-at", "3"], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "HANG"  # turn 3's tool is running
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL

    events, state = asyncio.run(conversation(url))
    assert events == turn(1) + turn(2) + ["user: turn 3", "call record({'turn': 3})"]
    assert state == {"last": 2, "user:calls": 2}

    done = subprocess.run([*CHILD, url, "4"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "DONE", done.stderr
    events, state = asyncio.run(conversation(url))
    assert events == turn(1) + turn(2) + ["user: turn 3", "call record({'turn': 3})"] + turn(4)
    assert state == {"last": 4, "user:calls": 3}


async def test_concurrent_appends_from_several_services_lose_and_duplicate_nothing(store: Store) -> None:
    """Four services (no lock shared, as four processes) each append ten events to one
    session, reloading it on StaleSessionError: every event is there once, in each writer's order."""
    first = StatekeepSessionService(store)
    await first.create_session(app_name="a", user_id="u", session_id="s")

    async def writer(w: int) -> int:
        service = StatekeepSessionService(store)
        stale = 0
        for i in range(10):
            while True:
                session = await service.get_session(app_name="a", user_id="u", session_id="s")
                assert session is not None
                event = Event(
                    id=f"w{w}-{i}", author="user", invocation_id=f"w{w}",
                    actions=EventActions(state_delta={f"w{w}": i, "app:total": f"{w}-{i}", f"user:w{w}": i}),
                )  # fmt: skip
                try:
                    await service.append_event(session, event)
                    break
                except StaleSessionError:
                    stale += 1
        return stale

    await asyncio.gather(*(writer(w) for w in range(4)))
    session = await first.get_session(app_name="a", user_id="u", session_id="s")
    assert session is not None
    ids = [event.id for event in session.events]
    assert sorted(ids) == sorted(f"w{w}-{i}" for w in range(4) for i in range(10))
    for w in range(4):
        assert [i for i in ids if i.startswith(f"w{w}-")] == [f"w{w}-{i}" for i in range(10)]
        assert session.state[f"w{w}"] == 9 and session.state[f"user:w{w}"] == 9
    # app: deltas are applied in the session's order: the state is the newest event's value
    assert session.state["app:total"] == ids[-1].removeprefix("w")


async def test_one_session_object_shared_by_tasks_takes_every_append(store: Store) -> None:
    """Appends from many tasks to one session object are serialised, as ADK's database
    service does in a process: none is refused as stale, none lost."""
    service = StatekeepSessionService(store)
    session = await service.create_session(app_name="a", user_id="u")
    events = [Event(id=f"e{i}", author="user", invocation_id="i") for i in range(20)]
    await asyncio.gather(*(service.append_event(session, event) for event in events))
    again = await service.get_session(app_name="a", user_id="u", session_id=session.id)
    assert again is not None and sorted(e.id for e in again.events) == sorted(e.id for e in events)
    assert [e.id for e in session.events] == [e.id for e in again.events]

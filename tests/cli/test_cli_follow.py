"""``statekeep show ID --follow`` as a real subprocess on every store that a second process
can open (File, SQLite, PostgreSQL, Redis): this process saves, the follower prints.

Each test reads the follower's output line by line until the line it waits for comes (a
generous deadline, no sleeps). The follow ends with exit status 0 when the run stops, 130
on Ctrl-C (without a traceback), 1 when the State is deleted meanwhile.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeep import State, Store, agent_info
from statekeep.cli._follow import stopped_after
from statekeep.stores._urls import open_store
from tests.support.cli_follower import DEADLINE, Follower
from tests.support.stores import URL_KINDS, store_url


@pytest.fixture(params=URL_KINDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL another process can open; server stores in a namespace of their own."""
    return store_url(request.param, tmp_path, "follow")


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with open_store(url, create=True) as opened:
        yield opened


@pytest.fixture
def follow(url: str) -> Iterator[Any]:
    started: list[Follower] = []

    def start(state_id: str, *extra: str) -> Follower:
        started.append(Follower(url, state_id, *extra))
        return started[-1]

    yield start
    for follower in started:
        follower.kill()


def running(store: Store, state_id: str = "run") -> State:
    state = State("Watch the weather", id=state_id)
    state.begin_run(agent_info("forecaster", "scripted", tools=["weather"]))
    state.request("scripted")
    store.save(state)
    return state


def test_follow_prints_entries_saved_by_another_process_and_ends_at_the_stop(
    store: Store, follow: Any
) -> None:
    state = running(store)
    follower = follow("run")
    assert "State run: Watch the weather" in follower.wait_for("State run")
    follower.wait_for("model_request")

    state.add_reply("", [{"id": "c1", "name": "weather", "args": {"city": "Oslo"}}])
    store.save(state)
    line = follower.wait_for("model_reply")
    assert line.split()[0] == "3" and "weather(city='Oslo') [c1]" in line

    state.add_tool_result("c1", "Oslo: snow, -4 C")
    store.save(state)
    assert "Oslo: snow, -4 C" in follower.wait_for("tool_result")

    state.finish("Snow in Oslo.")
    store.save(state)
    assert "by finish: Snow in Oslo." in follower.wait_for("stop")
    status, err, rest = follower.end()
    assert (status, err, rest) == (0, "", [])


def test_follow_ends_at_an_error_entry(store: Store, follow: Any) -> None:
    state = running(store)
    follower = follow("run")
    follower.wait_for("model_request")
    state.add_model_error("TimeoutError: slow")
    state.add_error("TimeoutError: slow")
    store.save(state)
    follower.wait_for("error ")
    assert follower.end()[0] == 0


def test_ctrl_c_ends_a_follow_with_130_and_no_traceback(store: Store, follow: Any) -> None:
    running(store)
    follower = follow("run")
    follower.wait_for("model_request")
    follower.proc.send_signal(signal.SIGINT)
    status, err, _ = follower.end()
    assert status == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_a_state_deleted_while_followed_exits_1_in_one_line(store: Store, follow: Any) -> None:
    running(store)
    follower = follow("run")
    follower.wait_for("model_request")
    store.delete("run")
    status, err, _ = follower.end()
    assert status == 1
    assert err.splitlines() == [
        "statekeep: State 'run' was deleted while it was followed; "
        "pass --wait to wait for it and follow the new one"
    ]


def recreate(store: Store, task: str, questions: int) -> State:
    """Delete the State ``run`` and save another under its id: its task, ``questions`` user entries."""
    store.delete("run")
    state = State(task, id="run")
    for i in range(questions):
        state.add_user(f"question {i}")
    store.save(state)
    return state


@pytest.mark.parametrize("questions", [0, 6], ids=["shorter", "longer"])
def test_a_state_deleted_and_recreated_while_followed_exits_1(
    store: Store, follow: Any, questions: int
) -> None:
    """Without --wait the follow never joins the new State's entries to the old one's, as
    tail -f keeps to the file it opened; a shorter new State is not waited for either."""
    state = running(store)
    state.add_reply("first")
    store.save(state)
    follower = follow("run", "--json")
    follower.wait_for('"model_reply"')
    recreate(store, "Another task", questions)
    status, err, rest = follower.end()
    assert status == 1 and rest == []
    [line] = err.splitlines()
    assert line.startswith("statekeep: State 'run' was deleted") and "--wait" in line


def test_follow_wait_follows_a_recreated_state_from_seq_0(store: Store, follow: Any) -> None:
    """With --wait (tail -F): a State deleted and saved again is followed from its seq 0,
    with one line on stderr."""
    running(store)
    follower = follow("run", "--json", "--wait")
    follower.wait_for('"model_request"')
    again = recreate(store, "Another task", 1)
    follower.wait_for_error("following the new one from seq 0")
    first = json.loads(follower.wait_for('"seq": 0'))
    assert (first["kind"], first["text"]) == ("task", "Another task")
    again.finish("done")
    store.save(again)
    status, _, rest = follower.end()
    assert status == 0
    assert [e["kind"] for e in map(json.loads, rest)] == ["user", "stop"]


def test_follow_wait_waits_for_a_state_saved_later(store: Store, follow: Any) -> None:
    """``show ID --follow --wait`` started before the State exists: it says it waits, then
    follows the State once it is saved, to its stop."""
    running(store, "other")  # the store exists (a folder or a database is made by a first save)
    follower = follow("later", "--wait")
    assert "waiting" in follower.wait_for_error("'later'")
    state = running(store, "later")
    assert "State later: Watch the weather" in follower.wait_for("State later")
    follower.wait_for("model_request")
    state.add_reply("Rain.")
    state.finish("Rain.")
    store.save(state)
    follower.wait_for("stop")
    assert follower.end()[0] == 0


def test_ctrl_c_stops_a_show_that_waits_with_130_and_one_line(store: Store, url: str) -> None:
    """``show ID --wait`` (no --follow) waits for the State; Ctrl-C stops it: exit status 130
    and one line saying so (a follow's Ctrl-C is silent: it is how a follow ends)."""
    running(store, "other")
    shower = Follower(url, "later", "--wait", follow=False)
    try:
        shower.wait_for_error("waiting")
        shower.proc.send_signal(signal.SIGINT)
        status, err, rest = shower.end()
    finally:
        shower.kill()
    assert (status, rest) == (130, [])
    assert err.splitlines()[1:] == ["statekeep: show stopped (Ctrl-C)"]


def test_follow_json_prints_one_entry_object_per_line(store: Store, follow: Any) -> None:
    state = running(store)
    follower = follow("run", "--json")
    first = [json.loads(follower.wait_for('"seq": ')) for _ in range(3)]
    assert [(e["seq"], e["kind"]) for e in first] == [(0, "task"), (1, "run_start"), (2, "model_request")]
    state.add_reply("Sunny.")
    state.finish("Sunny.")
    store.save(state)
    status, err, rest = follower.end()
    assert status == 0, err
    assert [(e["seq"], e["kind"]) for e in map(json.loads, rest)] == [(3, "model_reply"), (4, "stop")]


def test_following_a_stopped_run_prints_it_and_ends_at_once(store: Store, url: str) -> None:
    state = running(store)
    state.add_reply("Done.")
    state.stop("limit")
    store.save(state)
    proc = subprocess.run(
        [sys.executable, "-m", "statekeep", "show", "run", "--store", url, "--follow"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].split()[2:4] == ["stop", "by"]


def test_follow_of_an_unknown_id_exits_1(store: Store, url: str) -> None:
    running(store)
    proc = subprocess.run(
        [sys.executable, "-m", "statekeep", "show", "nobody", "--store", url, "--follow"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert proc.returncode == 1 and "no State 'nobody'" in proc.stderr


# -- when a run is stopped (pure) -----------------------------------------------------------


def kinds(*names: str) -> list[dict[str, Any]]:
    return [{"seq": i, "kind": kind} for i, kind in enumerate(names)]


def test_a_run_stops_at_a_stop_or_error_entry_and_a_run_start_starts_another() -> None:
    assert not stopped_after(kinds("task", "run_start", "model_request"))
    assert stopped_after(kinds("task", "run_start", "stop"))
    assert stopped_after(kinds("task", "run_start", "error"))
    assert stopped_after(kinds("task", "run_start", "stop", "data"))  # data after the stop
    assert not stopped_after(kinds("task", "run_start", "stop", "user", "run_start"))  # resumed
    assert stopped_after([], stopped=True) and not stopped_after(kinds("run_start"), stopped=True)


def test_a_reader_that_goes_away_ends_the_follow_quietly(store: Store, url: str) -> None:
    state = running(store)
    proc = subprocess.Popen(
        [sys.executable, "-m", "statekeep", "show", "run", "--store", url, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("State run:")
        proc.stdout.close()  # as `| head -1` does after its line
        state.add_reply("Sunny.")
        store.save(state)  # the follower's next write meets the closed pipe
        _, err = proc.communicate(timeout=DEADLINE)
        assert (proc.returncode, err) == (0, "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

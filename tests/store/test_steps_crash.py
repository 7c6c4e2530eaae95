"""Durable steps under SIGKILL (issue 25): a workflow of three steps (idempotent, with a
reconcile, and with neither) runs in a child process killed at each point of each step in
turn (before its start's save, after it, after its body's effect, after its end's save), then
runs again from the top in a new process. Each step body's effect (a line in a side file,
the ledger) happens once per recorded success; a step in doubt is resolved by its reconcile
or run again with the same key when idempotent, and one with neither raises
StepInDoubtError and never runs again; the State replays the recorded results. FileStore and
SQLite at every point; Postgres and Redis at each way a step is left in doubt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statekeep import FileStore, SQLiteStore, State, StepInDoubtError, Store
from tests.support import REPO, servers

CHILD = REPO / "tests" / "support" / "children" / "steps_child.py"
STEPS = ("charge", "ship", "notify")
POINTS = ("before-start", "after-start", "effect", "after-end")
KILLS = [f"{step}:{point}" for step in STEPS for point in POINTS]


def run_child(
    kind: str, target: str, ledger: Path, kill_at: str = "", env: dict[str, str] | None = None
) -> Any:
    """Run the workflow in a new process; the JSON it printed, or None if it was SIGKILLed."""
    done = subprocess.run(
        [sys.executable, str(CHILD), kind, target, str(ledger), "w1", kill_at],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path]), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode == -9:
        return None
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def ledger_lines(ledger: Path) -> list[tuple[str, str]]:
    if not ledger.exists():
        return []
    return [tuple(line.split()) for line in ledger.read_text().splitlines()]  # type: ignore[misc]


def never(*args: Any) -> Any:
    raise AssertionError("a recorded step ran again")


def check_history(store: Store, ledger: Path, kill_at: str, got: dict[str, Any]) -> None:
    """What the resumed run gave agrees with the history and with the ledger."""
    state = store.load("w1")
    starts = Counter(e["name"] for e in state.history if e["kind"] == "step_start")
    ends = {e["name"]: e for e in state.history if e["kind"] == "step_end"}
    keys = {e["name"]: e["key"] for e in state.history if e["kind"] == "step_start"}
    lines = ledger_lines(ledger)
    killed_step, killed_point = kill_at.split(":")
    in_doubt = killed_point in ("after-start", "effect")  # started, its end never saved
    for name in STEPS:
        ran = [key for step, key in lines if step == name]
        end = ends[name]
        assert set(ran) <= {keys[name]}, (name, ran)  # every run had the step's one key
        if name == "notify" and killed_step == name and in_doubt:
            # Neither reconcile nor idempotent: never run again, reported in doubt.
            assert got[name] == "in doubt" and end["outcome"] == "unknown" and starts[name] == 1
            assert len(ran) == (1 if killed_point == "effect" else 0)
            continue
        assert end["outcome"] == "done" and got[name] == end["output"] == {"done": name, "key": keys[name]}
        if name == "ship":  # reconcile: the effect exactly once
            assert len(ran) == 1
            assert bool(end.get("reconciled")) is (killed_step == name and killed_point == "effect")
            assert starts[name] == (2 if killed_step == name and killed_point == "after-start" else 1)
        elif name == "charge":  # idempotent: run again with the same key, once per attempt at most
            assert starts[name] == (2 if killed_step == name and in_doubt else 1)
            assert len(ran) == (2 if kill_at == "charge:effect" else 1)
        else:
            assert len(ran) == 1 and starts[name] == 1
    # The State replays: a recorded step never runs again, in this process too.
    again = store.load("w1")
    for name in STEPS:
        if ends[name]["outcome"] == "unknown":
            with pytest.raises(StepInDoubtError):
                store.step(again, name, never)
        else:
            assert store.step(again, name, never) == got[name]
    assert ledger_lines(ledger) == lines


def crash_and_resume(kind: str, target: str, tmp_path: Path, store: Store, kill_at: str, **env: str) -> None:
    ledger = tmp_path / f"ledger-{kill_at.replace(':', '-')}"
    assert run_child(kind, target, ledger, kill_at, env) is None, f"the child was not killed at {kill_at}"
    got = run_child(kind, target, ledger, env=env)
    check_history(store, ledger, kill_at, got)
    lines = ledger_lines(ledger)
    assert run_child(kind, target, ledger, env=env) == got  # a third process: the same, nothing run
    assert ledger_lines(ledger) == lines


@pytest.mark.parametrize("kill_at", KILLS)
def test_file_store_steps_killed_and_resumed(tmp_path: Path, kill_at: str) -> None:
    folder = tmp_path / "store"
    FileStore(folder).close()
    with FileStore(folder) as store:
        crash_and_resume("file", str(folder), tmp_path, store, kill_at)


@pytest.mark.parametrize("kill_at", KILLS)
def test_sqlite_store_steps_killed_and_resumed(tmp_path: Path, kill_at: str) -> None:
    path = tmp_path / "store.db"
    SQLiteStore(path).close()
    with SQLiteStore(path) as store:
        crash_and_resume("sqlite", str(path), tmp_path, store, kill_at)


#: The points where the servers' stores are killed: each way a step is left in doubt.
SERVER_KILLS = ["charge:effect", "ship:after-start", "ship:effect", "notify:effect"]


@pytest.mark.parametrize("kill_at", SERVER_KILLS)
def test_postgres_store_steps_killed_and_resumed(tmp_path: Path, kill_at: str) -> None:
    schema = servers.unique_name("steps")
    url = servers.shared_postgres().dsn
    with servers.postgres_store(schema=schema) as store:
        crash_and_resume("postgres", schema, tmp_path, store, kill_at, STEPS_URL=url)


@pytest.mark.parametrize("kill_at", SERVER_KILLS)
def test_redis_store_steps_killed_and_resumed(tmp_path: Path, kill_at: str) -> None:
    prefix = servers.unique_name("steps") + ":"
    url = servers.shared_redis().url
    with servers.redis_store(prefix=prefix) as store:
        crash_and_resume("redis", prefix, tmp_path, store, kill_at, STEPS_URL=url)


def test_the_first_run_alone_runs_every_step_once(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    ledger = tmp_path / "ledger"
    got = run_child("file", str(folder), ledger)
    assert [step for step, _ in ledger_lines(ledger)] == list(STEPS)
    assert run_child("file", str(folder), ledger) == got and len(ledger_lines(ledger)) == 3
    with FileStore(folder) as store:
        assert isinstance(store.load("w1"), State)

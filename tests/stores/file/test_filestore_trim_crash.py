"""FileStore's trim under a power cut (the I/O seam's recorded operations, every crash
point and the trees it may leave) and under SIGKILL at every step of the log's rewrite: the
State reads as before the trim or as after it, never between, and goes on from there."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from statekeep import FileStore, Record, State
from statekeep.testing._trim import SAME, compacted_run
from tests.support import REPO
from tests.support.powerloss import build, crash_points
from tests.support.powerloss_recorder import RecordingIO


def same_state(loaded: State, before: State) -> None:
    for name in SAME:
        if name != "incarnation":
            assert getattr(loaded, name) == getattr(before, name), name


def goes_on(store: FileStore, before: State) -> None:
    loaded = store.load("t1")
    same_state(loaded, before)
    loaded.add_user("and then?")
    store.save(loaded)
    assert store.load("t1").history == loaded.history


def test_a_power_cut_during_a_trim_leaves_the_state_before_or_after_it(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir(mode=0o700)
    io = RecordingIO(base)
    with FileStore(base / "store", io=io) as store:
        state, through = compacted_run("t1")
        store.save(state)
        state.add_user("a second write")
        store.save(state)
        before, whole = store.load("t1"), store.read("t1")
        start = io.mark()  # the trim's first op
        store.trim("t1", before=through + 1)
        trimmed = store.read("t1")
    assert whole is not None and trimmed is not None and trimmed.entries[0]["kind"] == "base"
    rng = random.Random(24)
    seen: set[bytes] = set()
    outcomes: dict[str, int] = {"before": 0, "after": 0}
    checked = 0
    for k, disk in crash_points(io):
        if k < start:
            continue  # the saves are the power-loss test's own (test_filestore_powerloss)
        for crash in disk.crash_states(rng):
            if crash.key in seen:
                continue
            seen.add(crash.key)
            checked += 1
            where = tmp_path / f"s{checked}"
            build(crash.tree, where)
            with FileStore(where / "store") as after:
                record = after.read("t1")
                assert record in (whole, trimmed), f"crash after op {k}: {crash.how}"
                outcomes["before" if record == whole else "after"] += 1
                goes_on(after, before)
            shutil.rmtree(where)
    assert outcomes["before"] and outcomes["after"], outcomes
    assert checked >= 8, checked


KILLER = """
import sys
import statekeep as sk
from tests.support.crashpoints import KillingIO

io = KillingIO(int(sys.argv[2]))
store = sk.FileStore(sys.argv[1], io=io)
io.armed = True
store.trim("t1", before=int(sys.argv[3]))
print("done")
"""


def test_a_trim_killed_at_any_step_leaves_the_old_log_or_the_new(tmp_path: Path) -> None:
    with FileStore(tmp_path / "seed") as seed:
        state, through = compacted_run("t1")
        seed.save(state)
        before, whole = seed.load("t1"), seed.read("t1")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    kept: set[str] = set()
    for step in range(100):
        folder = tmp_path / f"run{step}"
        shutil.copytree(tmp_path / "seed", folder)
        child = subprocess.run(
            [sys.executable, "-c", KILLER, str(folder), str(step), str(through + 1)],
            env=env,
            capture_output=True,
        )
        with FileStore(folder) as store:
            record = store.read("t1")
            assert isinstance(record, Record)
            if child.returncode == 0:
                assert record.entries[0]["seq"] == through
                goes_on(store, before)
                break
            assert child.returncode == -9, child.stderr.decode()
            kept.add("before" if record == whole else "after")
            assert record == whole or record.entries[0]["seq"] == through  # the old log, or the new one whole
            goes_on(store, before)
            store.delete("t1")  # a leftover new log does not keep the State from going
    else:
        pytest.fail("the trim never finished")
    assert step > 5 and kept == {"before", "after"}, (step, kept)

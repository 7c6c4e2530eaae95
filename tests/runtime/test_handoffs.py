"""Where a write's commit runs, and who wakes its caller (statekeep._runtime.handoff, _batching).

A sync write from a thread other than the main one commits its batch in its own thread; the
main thread's goes to a worker thread, since a signal handler may run in the main thread
in the middle of anything. Every wait is bounded by a timeout that only turns a hang into
a failure.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from statekeep import FileStore, Record, SQLiteStore, Store
from statekeep.stores import OsIO
from statekeep.testing import entries, snapshot
from tests.runtime.test_bridge import JOIN, join_all, run_script


class LogWrites(OsIO):
    """Notes the thread that appends to a State's log."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def write_all(self, fd: int, data: bytes) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/log.jsonl"):
            self.threads.append(threading.current_thread().name)
        super().write_all(fd, data)


def test_a_sync_write_from_another_thread_commits_in_that_thread(tmp_path: Path) -> None:
    io = LogWrites()
    store = FileStore(tmp_path, io=io)
    store.write("a", entries(0, 1), snapshot(), create=True)
    io.threads.clear()
    thread = threading.Thread(target=store.write, args=("a", entries(1, 2), snapshot(turn=1)), name="caller")
    thread.start()
    join_all([thread])
    assert io.threads == ["caller"]  # no worker thread between the caller and the disk
    store.write("a", entries(3, 1), None)  # the main thread: a worker commits for it
    assert io.threads[1:] and "MainThread" not in io.threads
    assert store.read("a") == Record(entries(0, 4), snapshot(turn=1))


def make(kind: str, path: Path) -> Store:
    return SQLiteStore(path / "s.db") if kind == "sqlite" else FileStore(path / "files")


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_writes_committed_by_callers_threads_give_each_caller_its_own_outcome(
    tmp_path: Path, kind: str
) -> None:
    # Threads writing at once share batches; whoever commits one wakes the others.
    store = make(kind, tmp_path)
    for i in range(6):
        store.write(f"s{i}", entries(0, 1), snapshot(), create=True)
    errors: list[BaseException] = []
    conflicts = [0] * 6

    def writer(i: int) -> None:
        try:
            for n in range(1, 30):
                store.write(f"s{i}", entries(n, 1), snapshot(turn=n))
                try:  # a conflicting write: its own error, not its batch neighbours'
                    store.write(f"s{i}", entries(n, 1, other=True), None)
                except ValueError:
                    conflicts[i] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    join_all(threads)
    assert not errors, errors
    assert conflicts == [29] * 6
    for i in range(6):
        assert store.read(f"s{i}") == Record(entries(0, 30), snapshot(turn=29))
    store.close()


async def test_an_async_write_from_another_loop_gets_its_own_outcome(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    await store.awrite("a", entries(0, 1), snapshot(), create=True)
    results = await asyncio.gather(
        store.awrite("a", entries(1, 1), None),
        store.awrite("a", entries(1, 1, other=True), None),
        store.awrite("b", entries(0, 1), None),
        return_exceptions=True,
    )
    assert results[0] is None
    assert isinstance(results[1], ValueError) and isinstance(results[2], LookupError)
    assert (await store.aread("a")).entries == entries(0, 2)
    await store.aclose()


WRITE_WITH_SIGNAL_AT_EVERY_LINE = """
import signal, sys
from statekeep import FileStore, SQLiteStore, State

kind, path = sys.argv[1], sys.argv[2]
store = SQLiteStore(path + "/s.db") if kind == "sqlite" else FileStore(path)
store.write("main", [], {"n": 0}, create=True)
saved, in_handler = [], False

def on_sigterm(signum, frame):
    # Saves to the same store while the main thread's write is under way, with whatever
    # locks it holds at that line.
    global in_handler
    in_handler = True
    state = State("from the handler", id=f"h{len(saved)}")
    store.save(state)
    saved.append(state.id)
    in_handler = False

signal.signal(signal.SIGTERM, on_sigterm)

def write_interrupted_at_line(k):
    lines = 0
    def local(frame, event, arg):
        nonlocal lines
        if event == "line" and not in_handler:
            lines += 1
            if lines == k:
                signal.raise_signal(signal.SIGTERM)
        return local
    sys.settrace(lambda frame, event, arg: local)
    try:
        store.write("main", [{"seq": k - 1, "k": k}], {"n": k})
    finally:
        sys.settrace(None)
    return lines >= k

k = 1
while write_interrupted_at_line(k):
    k += 1
print(k - 1, len(saved), flush=True)
fresh = SQLiteStore(path + "/s.db") if kind == "sqlite" else FileStore(path)
record = fresh.read("main")
assert [e["k"] for e in record.entries] == list(range(1, k + 1)) and record.snapshot == {"n": k}
for sid in saved:
    assert fresh.load(sid).task == "from the handler"
"""


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_a_signal_handler_that_saves_can_interrupt_a_sync_write_anywhere(tmp_path: Path, kind: str) -> None:
    # The main thread's write is committed by a worker thread that wakes it directly; a
    # handler that saves to the same store at any line of it must not wait for itself.
    result = run_script(WRITE_WITH_SIGNAL_AT_EVERY_LINE, kind, str(tmp_path), timeout=120)
    assert result.returncode == 0, result.stderr
    lines, saves = map(int, result.stdout.split())
    assert lines > 5 and saves == lines


def test_code_that_runs_inside_a_commit_in_the_callers_thread_can_use_statekeep(tmp_path: Path) -> None:
    # A trace function (like a finalizer, the only code that can run in the middle of a
    # commit in a thread other than the main one) reads the State being written and writes
    # to another store, at every line of the transaction, in the committing thread itself.
    # (Not inside the store's short sections under a thread lock: code that calls the same
    # store from there waits for that lock, in a worker thread as well.)
    store, other = SQLiteStore(tmp_path / "a.db"), SQLiteStore(tmp_path / "b.db")
    store.write("a", entries(0, 1), snapshot(), create=True)
    other.write("o", [], None, create=True)
    seen: list[Any] = []
    nested = False

    def local(frame: Any, event: str, arg: Any) -> Any:
        nonlocal nested
        if event == "line" and not nested and frame.f_code.co_filename.endswith("_batch.py"):
            nested = True
            try:
                seen.append(len(store.read("a").entries))
                n = len(other.read("o").entries)
                other.write("o", entries(n, 1), None)
            finally:
                nested = False
        return local

    def writer() -> None:
        sys.settrace(lambda frame, event, arg: local)
        try:
            store.write("a", entries(1, 1), snapshot(turn=1))
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join(JOIN)
    assert not thread.is_alive(), "a call from inside the commit waited for the commit"
    assert store.read("a") == Record(entries(0, 2), snapshot(turn=1))
    assert len(other.read("o").entries) == len(seen) > 5
    assert set(seen) <= {1, 2}
    store.close()
    other.close()

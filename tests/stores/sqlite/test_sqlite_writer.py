"""SQLiteStore's writer connection never waits inside SQLite (busy_timeout 0): a write that
finds another process holding the database's write lock waits for it in Python, in a worker
thread, so the owner loop goes on serving reads and listings meanwhile, and the write
lands once the lock is free."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from statekeep import Record, SQLiteStore
from statekeep.testing import entries, snapshot

# Another process takes the write lock, says so, and keeps it until told to let go.
HOLDER = """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("held", flush=True)
    sys.stdin.readline()
    conn.execute("COMMIT")
    print("released", flush=True)
"""


def test_a_write_waiting_for_another_process_holds_up_no_read(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    store.write("a", entries(0, 1), snapshot(), create=True)
    store.write("a", entries(1, 1), None)  # the writer connection is made
    writer = store._conns.writer if store._conns else None
    assert writer is not None
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLDER), str(store.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == "held\n"
        tries = threading.Semaphore(0)
        writer.set_trace_callback(lambda s: tries.release() if s == "BEGIN IMMEDIATE" else None)
        outcome: list[BaseException | None] = []

        def write() -> None:
            try:
                store.write("a", entries(2, 1), snapshot(turn=2))
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        waiting = threading.Thread(target=write, daemon=True)
        waiting.start()
        for _ in range(2):  # it was refused on the loop, then tried again in a worker thread
            assert tries.acquire(timeout=60), "the write never asked for the lock"
        # The lock is still held by the other process: the loop still serves reads.
        assert store.read("a") == Record(entries(0, 2), snapshot())
        assert [row.id for row in store.list(limit=5)] == ["a"]
        assert waiting.is_alive() and outcome == []
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == "released\n"
        waiting.join(120)
        assert outcome == [None]
        writer.set_trace_callback(None)
        assert store.read("a") == Record(entries(0, 3), snapshot(turn=2))
    finally:
        holder.kill()
        holder.wait()
        store.close()

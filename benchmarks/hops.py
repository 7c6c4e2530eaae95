"""What each thread hand-off costs a write: a no-op write timed on each path, beside a raw
thread round trip. Part of bench_core (section 9); runs alone too::

    .venv/bin/python benchmarks/hops.py            # 3 repetitions of every path
    .venv/bin/python benchmarks/hops.py --quick

A no-op write (no entries, snapshot kept) does all of a write's hand-offs and locking but
no I/O that needs an fsync, so what is left is the path. Paths, per write (median µs):

- ``raw round trip``: this thread wakes a waiting thread, which wakes this one back (two
  hand-offs of plain locks): the floor any path with two hand-offs pays.
- ``on the loop``: ``await store.awrite`` in a task on statekeep's owner loop (MemoryStore:
  no hand-off; SQLiteStore: loop -> worker -> loop).
- ``async, foreign loop``: ``await store.awrite`` from ``asyncio.run`` in this thread.
- ``sync, main thread`` and ``sync, other thread``: ``store.write``.
- ``the commit alone`` (SQLiteStore): its blocking commit called in this thread, no hand-off.

The numbers are noisy on a shared machine; compare paths within one run.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from statekeep import MemoryStore, SQLiteStore, Store

# Two paths reach private parts (the owner loop, the commit called bare): a path whose part
# moved is left out (the others still run), so a rename elsewhere does not break the run.

Clock = Callable[[], int]


def raw_round_trip(calls: int) -> float:
    """Median µs for this thread -> another thread -> this thread, with plain locks."""
    go, back = threading.Lock(), threading.Lock()
    go.acquire()
    back.acquire()
    stop = False

    def partner() -> None:
        while True:
            go.acquire()
            if stop:
                return
            back.release()

    thread = threading.Thread(target=partner, daemon=True)
    thread.start()
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        go.release()
        back.acquire()
        times.append(time.perf_counter_ns() - start)
    stop = True
    go.release()
    thread.join()
    return statistics.median(times) / 1e3


def sync_calls(calls: int, write: Callable[[], object]) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        write()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e3


def in_thread(calls: int, write: Callable[[], object]) -> float:
    out: list[float] = []
    thread = threading.Thread(target=lambda: out.append(sync_calls(calls, write)))
    thread.start()
    thread.join()
    return out[0]


async def awaited(calls: int, awrite: Callable[[], Awaitable[object]]) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        await awrite()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e3


def owner_loop() -> asyncio.AbstractEventLoop | None:
    """statekeep's owner loop (private: None if it moved)."""
    try:
        from statekeep._runtime import bridge

        loop = bridge.owner().loop
    except (ImportError, AttributeError):
        return None
    return loop if isinstance(loop, asyncio.AbstractEventLoop) else None


def on_owner_loop(calls: int, awrite: Callable[[], Awaitable[object]]) -> float:
    loop = owner_loop()
    assert loop is not None
    return asyncio.run_coroutine_threadsafe(awaited(calls, awrite), loop).result()


def measure(store: Store, calls: int) -> dict[str, float]:
    """Median µs per no-op write of ``store`` on each path (State "hop" must exist)."""

    def write() -> None:
        store.write("hop", [], None)

    def awrite() -> Awaitable[None]:
        return store.awrite("hop", [], None)

    paths: dict[str, Callable[[], float]] = {
        "on the loop": lambda: on_owner_loop(calls, awrite),
        "async, foreign loop": lambda: asyncio.run(awaited(calls, awrite)),
        "sync, main thread": lambda: sync_calls(calls, write),
        "sync, other thread": lambda: in_thread(calls, write),
    }
    if owner_loop() is None:
        del paths["on the loop"]
    out = {}
    for name, run in paths.items():
        run()  # warm up: threads started, connections open
        gc.collect()
        out[name] = run()
    return out


def commit_alone(store: SQLiteStore, calls: int) -> float | None:
    """Median µs of SQLiteStore's blocking commit of one no-op write, called in this thread
    (private parts: None if they moved)."""
    try:
        from statekeep._core.writes import prepare_write

        op = ("write", store.namespace, prepare_write("hop", [], None, False))
        store._commit([op])
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    return sync_calls(calls, lambda: store._commit([op]))


def run(calls: int) -> dict[str, float]:
    """One repetition: ``{"raw round trip": µs, "<store>: <path>": µs, ...}``."""
    results = {"raw round trip": raw_round_trip(calls)}
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parent.parent) as tmp:
        stores: dict[str, Store] = {
            "MemoryStore": MemoryStore(),
            "SQLiteStore": SQLiteStore(Path(tmp) / "h.db"),
        }
        for name, store in stores.items():
            store.write("hop", [{"seq": 0}], {"n": 0}, create=True)
            for path, us in measure(store, calls).items():
                results[f"{name}: {path}"] = us
            if isinstance(store, SQLiteStore):  # the work without any hand-off or lock
                alone = commit_alone(store, calls)
                if alone is not None:
                    results[f"{name}: the commit alone"] = alone
            store.close()
    return results


def main(argv: list[str]) -> int:
    calls, reps = (200, 1) if "--quick" in argv else (3000, 3)
    runs = [run(calls) for _ in range(reps)]
    print(f"median µs per no-op write, {calls} calls, {reps} repetitions (noisy: compare within a column)")
    for key in runs[0]:
        print(f"  {key:40s}" + "".join(f"{r[key]:9.1f}" for r in runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

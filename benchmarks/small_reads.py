"""A small ``read``: one State of 10 entries (3.4 KB turns) read whole, against the raw read of
the same data (the file read and split, or the query, then orjson), alternating. Each sample
is the mean of many calls (one read is tens of µs). Used by bench_core (FileStore) and
bench_sqlite (SQLiteStore)."""

from __future__ import annotations

import time
from collections.abc import Callable

import common
from statekeep import Store

ENTRIES = 10
SID = "small-read"


def fill(store: Store) -> Store:
    """State SID of ENTRIES entries (one write), snapshot and all."""
    entries = [common.make_entry(seq) for seq in range(ENTRIES)]
    store.write(SID, entries, common.make_snapshot(0, 3), create=True)
    return store


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    common.timed(lambda: None)  # a collection first
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def measure(
    store: Store, raw: Callable[[], list[object]], reps: int, calls: int, samples: dict[str, list[float]]
) -> None:
    """Keys ``small_read`` (``store.read``) and ``small_read_raw`` (``raw()``), µs per call."""
    record = store.read(SID)
    assert record is not None and len(record.entries) == ENTRIES
    assert len(raw()) >= ENTRIES
    for _ in range(reps):
        samples.setdefault("small_read_raw", []).append(per_call_us(raw, calls))
        samples.setdefault("small_read", []).append(per_call_us(lambda: store.read(SID), calls))

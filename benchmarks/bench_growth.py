"""Runs that stay small: bytes stored for a run whose large tool output recurs, and gc of
unreferenced blobs while writers run.

Run from the repository::

    .venv/bin/python benchmarks/bench_growth.py            # the full run
    .venv/bin/python benchmarks/bench_growth.py --quick    # a small run, a smoke test only
    .venv/bin/python benchmarks/bench_growth.py --json out.json

(1) A statekeep run of 1,000 turns, one durable ``save`` a turn: each turn a user message,
a model reply calling a tool and the tool's result; every 10th turn the result is the same
200 KB page (a browsing agent fetching one page again), the others text of their own whose
sizes spread as tool outputs do: log-uniform from 100 B to 32 KB (seeded, the same every
run). Stored bytes (the store's size on disk: FileStore's folder, SQLite's database with its
WAL) over the unique bytes (the JSON of the history with the recurring page counted once).
Target <= 1.2 on FileStore and SQLite (a store that keeps every value inline stores the page
100 times).

(2) The same run with every other output exactly 2 KB: SQLite's worst case, for the record.
A row of about 2.1 KB is just over half of SQLite's 4 KiB page, so each leaf page holds one
such row and the small ones of a turn, about 65 % full. 8 KiB pages would fit three, but
fill worse for the spread sizes of (1) and write twice the WAL bytes per commit, so the
store keeps SQLite's default page size.

(3) gc of 10,000 unreferenced blobs (offload=256, values of 300-400 B, written by one
State that is then deleted), alone and while two writer threads keep saving States that
refer to blobs (new ones and ones gc is removing): the time of one ``gc()``, median of the
reps, and the ratio of gc beside writers to gc alone. Nothing a writer refers to is lost
(checked after each run: every writer State reads back whole).
"""

from __future__ import annotations

import random
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

import common
from statekeep import FileStore, SQLiteStore, State, Store, agent_info
from statekeep._runtime.bridge import run_sync
from statekeep._store.capabilities import SizeOnDisk
from statekeep.testing import snapshot


@dataclass(frozen=True)
class Config:
    states: int  # unused: the banner prints it (one run State)
    turns: int  # turns of the run
    reps: int  # repetitions of the gc measures
    read_reps: int  # unused
    blobs: int  # unreferenced blobs gc removes


FULL = Config(states=1, turns=1000, reps=3, read_reps=0, blobs=10_000)
QUICK = Config(states=1, turns=100, reps=1, read_reps=0, blobs=1_000)
PAGE = ("<html>" + "lorem ipsum dolor sit amet, " * 8000)[:200_000]
AGENT = agent_info("browser", "model-x")


#: The sizes of the other tool outputs: "spread" (log-uniform, 100 B to 32 KB) or "2kb".
SIZES = ("spread", "2kb")


def tool_output(turn: int, sizes: str) -> str:
    if turn % 10 == 0:
        return PAGE
    size = 2048 if sizes == "2kb" else int(10 ** random.Random(turn).uniform(2, 4.5))
    text = f"result of turn {turn}: " + common.POOL
    return (text * (size // len(text) + 1))[:size]


def run_turns(store: Store, turns: int, sizes: str) -> State:
    state = State("browse the docs", id="run")
    state.begin_run(AGENT)
    for turn in range(turns):
        state.add_user(f"turn {turn}: look again at the page and tell me what changed")
        state.request("model-x")
        state.add_reply("fetching", [{"id": f"c{turn}", "name": "fetch", "args": {"url": "https://x.test/"}}])
        state.add_tool_result(f"c{turn}", tool_output(turn, sizes))
        store.save(state)
    return state


def unique_bytes(state: State) -> int:
    """The history's JSON, each distinct large value counted once."""
    total = sum(len(orjson.dumps(entry)) + 1 for entry in state.history)
    recurring = sum(1 for turn in range(state.turn) if turn % 10 == 0)
    return total - (recurring - 1) * len(orjson.dumps(PAGE))


def stored_bytes(store: Store) -> int:
    """The store's size on disk (every file of its folder; the database and its WAL)."""
    assert isinstance(store, SizeOnDisk)
    size = run_sync(store._size_bytes(), "stats")
    assert size is not None
    return size


def growth(kind: str, path: Path, turns: int, sizes: str) -> tuple[int, int, float]:
    store: Store = FileStore(path / "store") if kind == "file" else SQLiteStore(path / "store.db")
    try:
        state = run_turns(store, turns, sizes)
        assert store.load("run").history == state.history
        uniq = unique_bytes(state)
    finally:
        store.close()  # SQLite: the last connection's close checkpoints the WAL into the file
    reopened: Store = FileStore(path / "store") if kind == "file" else SQLiteStore(path / "store.db")
    try:
        stored = stored_bytes(reopened)  # what stays: the folder, or the database (and any WAL left)
    finally:
        reopened.close()
    return stored, uniq, stored / uniq


def growth_row(n: int, name: str, sizes: str, turns: int, stored: int, uniq: int, ratio: float) -> common.Row:
    """Section (1) (spread output sizes, the target) or (2) (every output 2 KB, for the record)."""
    what = "outputs 100 B-32 KB" if sizes == "spread" else "outputs all 2 KB"
    target = "<= 1.2" if sizes == "spread" else ""
    return common.Row(
        f"({n}) {name}: {turns}-turn run, {what}, stored / unique bytes",
        ratio,
        "x",
        baseline_name="unique",
        baseline=float(uniq),
        ratio=ratio,
        target=target,
        met=common.meets(ratio, target),
        extra={"stored_bytes": stored},
    )


def small(i: int, tag: str) -> str:
    return f"{tag}-{i}-" + common.POOL[(i * 31) % 4000 :][:300]


def gc_run(path: Path, blobs: int, writers: int) -> float:
    """Seconds of one gc() removing ``blobs`` unreferenced blobs, beside ``writers`` threads."""
    store = FileStore(path / "store", offload=256)
    per = 200
    for start in range(0, blobs, per):
        ents = [{"seq": start + i, "kind": "note", "v": small(start + i, "gone")} for i in range(per)]
        store.write("doomed", ents, snapshot(), create=start == 0)
    store.delete("doomed")
    stop = threading.Event()
    written: list[list[str]] = [[] for _ in range(writers)]

    def writer(n: int) -> None:
        i = 0
        while not stop.is_set():
            sid = f"w{n}-{i}"
            # Half the values are ones gc is removing right now: written again, kept.
            value = small(i, "gone") if i % 2 else small(i, f"w{n}")
            store.write(sid, [{"seq": 0, "kind": "note", "v": value}], snapshot(), create=True)
            written[n].append(value)
            i += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    try:
        elapsed = common.timed(store.gc)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    for n, values in enumerate(written):  # nothing a writer referred to was lost
        for i, value in enumerate(values):
            got = store.read(f"w{n}-{i}")
            assert got is not None and got.entries[0]["v"] == value, f"w{n}-{i} lost its value"
    store.close()
    return elapsed


def main(argv: Sequence[str] | None = None) -> int:
    args, cfg, scratch, began = common.start(
        "growth benchmark (large values stored once)", __doc__, argv, QUICK, FULL
    )
    rows: list[common.Row] = []
    samples: dict[str, list[float]] = {}
    extra: dict[str, Any] = {}
    try:
        for n, sizes in enumerate(SIZES, 1):
            for kind, name in (("file", "FileStore"), ("sqlite", "SQLiteStore")):
                stored, uniq, ratio = growth(kind, scratch.new(f"{kind}-{sizes}"), cfg.turns, sizes)
                extra[f"{kind}_{sizes}"] = {"stored_bytes": stored, "unique_bytes": uniq}
                rows.append(growth_row(n, name, sizes, cfg.turns, stored, uniq, ratio))
                print(f"  {name}, {sizes} outputs: {stored:,} bytes stored, {uniq:,} unique", flush=True)
        for rep in range(cfg.reps):
            for writers in (0, 2) if rep % 2 == 0 else (2, 0):
                samples.setdefault(f"gc_{writers}", []).append(
                    gc_run(scratch.new(f"gc{writers}"), cfg.blobs, writers)
                )
            print(f"  gc: rep {rep + 1}/{cfg.reps} done", flush=True)
    finally:
        scratch.cleanup()
    alone, beside = statistics.median(samples["gc_0"]), statistics.median(samples["gc_2"])
    rows.append(
        common.Row(
            f"(3) FileStore.gc of {cfg.blobs:,} unreferenced blobs, alone",
            alone,
            "s",
            spread=common.spread(samples["gc_0"]),
        )
    )
    rows.append(
        common.Row(
            f"(3) FileStore.gc of {cfg.blobs:,} unreferenced blobs, 2 writers running",
            beside,
            "s",
            baseline_name="alone",
            baseline=alone,
            ratio=beside / alone,
            spread=common.spread(samples["gc_2"]),
        )
    )
    common.print_table(rows)
    elapsed = time.perf_counter() - began
    print(
        f"\nStored bytes: the store's size on disk after the run. Unique bytes: the history's JSON with the "
        f"200 KB page counted once ({cfg.turns // 10} times in the run).\n"
        "gc beside writers: two threads saving States that refer to blobs (half of them ones gc is removing) "
        "for as long as gc runs; every value they wrote read back whole afterwards.\n"
        f"Took {elapsed:.1f} s."
    )
    common.write_json_if_asked(args, cfg, scratch, elapsed, rows, samples, extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())

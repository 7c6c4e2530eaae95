"""Trimming: ``load`` of a long run after compaction and ``trim``, against ``load`` of a run
holding only the kept part.

Run from the repository::

    .venv/bin/python benchmarks/bench_trim.py            # the full run (about a minute)
    .venv/bin/python benchmarks/bench_trim.py --quick    # a small run, a smoke test only
    .venv/bin/python benchmarks/bench_trim.py --json out.json

On FileStore and SQLiteStore: a State of 1,000 turns (each a run start, a model request, a
reply with a tool call of ~1 KB output, its result and a stop: 5 entries), with data set
along the way, compacted through its last turn and then run for ``KEPT`` more turns, then
trimmed up to its compaction (``store.trim(id, before=through + 1)``). The baseline is a State
holding only the kept part: its task, a compaction of its own, the same ``KEPT`` turns.
Measured side by side (each repetition: the median of ``calls`` loads of each, in turn):

- ``load`` of the trimmed run against ``load`` of the kept part alone. Target: at most 1.2 x.

Also shown (no target): ``load`` of the same run untrimmed, and the bytes each takes.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import common  # noqa: E402
from common import POOL, Row, Scratch  # noqa: E402
from statekeep import FileStore, SQLiteStore, State, Store, agent_info  # noqa: E402
from statekeep.stores._fsio import tree_bytes  # noqa: E402

KEPT = 10  # turns after the compaction
AGENT = agent_info("bench", "m1", system="be brief", tools=["fetch"])


@dataclass(frozen=True)
class Config:
    turns: int  # turns before the compaction
    reps: int
    calls: int  # loads a sample is the median of


FULL = Config(turns=1_000, reps=5, calls=15)
QUICK = Config(turns=100, reps=2, calls=3)


def turn(state: State, i: int) -> None:
    state.begin_run(AGENT)
    state.request("m1")
    state.add_reply(f"step {i}", [{"id": f"c{i}", "name": "fetch", "args": {"page": i}}])
    start = (i * 7919) % (len(POOL) - 1024)
    state.add_tool_result(f"c{i}", POOL[start : start + 1024])
    state.stop("limit", answer=f"done {i}")
    if i % 50 == 0:
        state.set_data(f"note{i % 7}", {"turn": i})


def long_run(store: Store, sid: str, turns: int) -> int:
    """The long run saved (every 50 turns) and compacted; returns the compaction's through."""
    state = State("a long task", id=sid)
    for i in range(turns):
        turn(state, i)
        if i % 50 == 49:
            store.save(state)
    through = len(state.history) - 1
    state.compact("what happened so far", through=through)
    for i in range(turns, turns + KEPT):
        turn(state, i)
    store.save(state)
    return through


def kept_part(store: Store, sid: str, turns: int) -> None:
    state = State("a long task", id=sid)
    state.compact("what happened so far", through=0)
    for i in range(turns, turns + KEPT):
        turn(state, i)
    store.save(state)


def median_load(store: Store, sids: list[str], calls: int) -> list[float]:
    for sid in sids:
        store.load(sid)
    times: list[list[float]] = [[] for _ in sids]
    for _ in range(calls):
        for sid, got in zip(sids, times, strict=True):
            got.append(common.timed(lambda s=sid: store.load(s)))  # type: ignore[misc]
    return [statistics.median(t) * 1e3 for t in times]


def measure(name: str, make: Callable[[], Store], size: Callable[[], int], cfg: Config) -> list[Row]:
    store = make()
    try:
        through = long_run(store, "long", cfg.turns)
        long_run(store, "whole", cfg.turns)
        kept_part(store, "kept", cfg.turns)
        before = size()
        began = time.perf_counter()
        store.trim("long", before=through + 1)
        trim_s = time.perf_counter() - began
        after = size()
        trimmed, whole = store.load("long"), store.load("whole")
        assert trimmed.data == whole.data and trimmed.turn == whole.turn == cfg.turns + KEPT
        samples: dict[str, list[float]] = {"trimmed": [], "kept": [], "whole": []}
        for _ in range(cfg.reps):
            t, k, w = median_load(store, ["long", "kept", "whole"], cfg.calls)
            samples["trimmed"].append(t)
            samples["kept"].append(k)
            samples["whole"].append(w)
    finally:
        store.close()
    ratio = statistics.median(t / k for t, k in zip(samples["trimmed"], samples["kept"], strict=True))
    untrimmed = statistics.median(w / k for w, k in zip(samples["whole"], samples["kept"], strict=True))
    med = {key: statistics.median(v) for key, v in samples.items()}
    print(
        f"  {name}: trim took {trim_s * 1e3:.0f} ms; store {before:,} B before the trim, {after:,} B after",
        flush=True,
    )
    entries = cfg.turns * 5
    return [
        Row(
            f"{name}: load, {cfg.turns:,} turns compacted + {KEPT}, trimmed",
            med["trimmed"], "ms", f"kept part alone ({KEPT} turns)", med["kept"], ratio, "<= 1.2",
            common.meets(ratio, "<= 1.2"), common.spread(samples["trimmed"]),
        ),
        Row(
            f"{name}: load, the same run untrimmed ({entries:,} entries more)",
            med["whole"], "ms", "kept part alone", med["kept"], untrimmed, "", None, common.spread(samples["whole"]),
        ),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(__doc__, argv)
    cfg = QUICK if args.quick else FULL
    scratch = Scratch()
    began = time.perf_counter()
    try:
        print(f"statekeep trim benchmark{' (--quick: numbers are not meaningful)' if args.quick else ''}")
        print(f"scratch: {scratch.root} ({scratch.fs}); {cfg}\n", flush=True)
        folder = scratch.new("file")
        db = scratch.new("sqlite") / "store.db"
        rows = measure("File", lambda: FileStore(folder), lambda: tree_bytes(folder), cfg)
        rows += measure("SQLite", lambda: SQLiteStore(db), lambda: tree_bytes(db, Path(f"{db}-wal")), cfg)
        print()
        common.print_table(rows)
        if args.json:
            versions = {"python": sys.version.split()[0]}
            common.write_json(
                args.json, cfg, args.quick, versions, scratch, {}, time.perf_counter() - began, rows, {}
            )
    finally:
        scratch.cleanup()
    return 0 if all(r.met is not False for r in rows) or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())

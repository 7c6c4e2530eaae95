"""``statekeep copy``'s engine (statekeep._transfer.transfer.acopy): States copied per second, next to
the same States written directly into the same kind of store.

Run from the repository::

    .venv/bin/python benchmarks/bench_copy.py            # the full run (10,000 States)
    .venv/bin/python benchmarks/bench_copy.py --quick    # a small run, a smoke test only
    .venv/bin/python benchmarks/bench_copy.py --json out.json

The workload: 10,000 States of 2 turns each (6 entries, text fields of about 800 B, 200 B
and 2 KB, and a snapshot), copied FileStore -> SQLiteStore and SQLiteStore -> PostgresStore
(a throwaway server from tests/support/servers.py, ``fsync=on``), each into a fresh destination. A
copy reads each State from the source, reads the destination (to skip what is there),
writes it (one durable ``awrite`` with ``create=True``) and reads it back to check its last
seq and snapshot; 8 States at a time (acopy's default ``concurrency``). The baseline, run
side by side: the same States written from memory with ``write(create=True)`` into a fresh
store of the destination's kind, one after another (what a hand-written loop costs without
any reads). Ratio: copy States/s / baseline States/s.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support import servers  # noqa: E402

import common  # noqa: E402
from common import Scratch, make_entry, make_snapshot  # noqa: E402
from statekeep import FileStore, Record, SQLiteStore, Store  # noqa: E402
from statekeep._transfer.transfer import acopy  # noqa: E402


@dataclass(frozen=True)
class Config:
    states: int  # States copied per run
    turns: int  # turns per State (3 entries each)
    reps: int  # repetitions of each run (median reported)
    read_reps: int  # unused here; the banner prints it


FULL = Config(states=10_000, turns=2, reps=2, read_reps=0)
QUICK = Config(states=40, turns=2, reps=1, read_reps=0)


def workload(cfg: Config) -> list[tuple[str, Record]]:
    out = []
    for i in range(cfg.states):
        entries = [make_entry(seq) for seq in range(cfg.turns * 3)]
        out.append((f"state-{i:05d}", Record(entries, make_snapshot(i, cfg.turns - 1))))
    return out


def fill(store: Store, states: list[tuple[str, Record]]) -> Store:
    for sid, record in states:
        store.write(sid, record.entries, record.snapshot, create=True)
    return store


def copy_rate(src: Store, make_dst: Callable[[], Store], count: int) -> float:
    """States/s of acopy from ``src`` into a fresh destination (checked to hold them all)."""
    dst = make_dst()
    try:
        start = time.perf_counter()
        report = asyncio.run(acopy(src, dst))
        elapsed = time.perf_counter() - start
        assert report.copied == count and not report.failed, report
        return count / elapsed
    finally:
        dst.close()


def write_rate(make_dst: Callable[[], Store], states: list[tuple[str, Record]]) -> float:
    """States/s of writing ``states`` from memory, one create each, into a fresh store."""
    dst = make_dst()
    try:
        return len(states) / common.timed(lambda: fill(dst, states))
    finally:
        dst.close()


def main(argv: Sequence[str] | None = None) -> int:
    args, cfg, scratch, began = common.start("copy benchmark", __doc__, argv, QUICK, FULL)
    samples: dict[str, list[float]] = {}
    started: list[Any] = []
    states = workload(cfg)
    pairs: list[tuple[str, str, Callable[[], Store], Callable[[], Store]]] = [
        ("file_sqlite", "FileStore -> SQLiteStore", lambda: FileStore(scratch.new("src")), _sqlite(scratch))
    ]
    try:
        try:
            pg = servers.start_postgres()
            started.append(pg)
            from statekeep.stores import PostgresStore

            pairs.append(
                (
                    "sqlite_postgres",
                    "SQLiteStore -> PostgresStore",
                    _sqlite(scratch),
                    lambda: PostgresStore(pg.dsn, schema=f"bench_{uuid.uuid4().hex[:10]}"),
                )
            )
        except servers.ServerMissing as exc:
            print(f"  Postgres skipped: {exc}", flush=True)
        for key, name, make_src, make_dst in pairs:
            with make_src() as src:
                fill(src, states)
                for rep in range(cfg.reps):
                    runs = [
                        (f"{key}_copy", lambda s=src, d=make_dst: copy_rate(s, d, cfg.states)),
                        (f"{key}_write", lambda d=make_dst: write_rate(d, states)),
                    ]
                    for run_name, run in runs[rep % 2 :] + runs[: rep % 2]:
                        samples.setdefault(run_name, []).append(run())
                    print(f"  {name}: rep {rep + 1}/{cfg.reps} done", flush=True)
    finally:
        scratch.cleanup()
        for server in started:
            server.remove()

    med = common.Medians(samples)
    rows = [
        med.ratio_row(f"({n}) copy {name}", f"{key}_copy", "States/s", f"{key}_write", "write(create=True)")
        for n, (key, name, *_) in enumerate(pairs, 1)
    ]
    common.print_table(rows)
    elapsed = time.perf_counter() - began
    print(
        f"\n{cfg.states} States of {cfg.turns * 3} entries + a snapshot per run, copied 8 at a time. Ratio: "
        "copy States/s / the same States written from memory with write(create=True), one after another.\n"
        f"Took {elapsed:.1f} s."
    )
    common.write_json_if_asked(args, cfg, scratch, elapsed, rows, samples)
    return 0


def _sqlite(scratch: Scratch) -> Callable[[], Store]:
    return lambda: SQLiteStore(scratch.new("sqlite") / "store.db")


if __name__ == "__main__":
    sys.exit(main())

"""PostgresStore through PgBouncer in transaction mode against the same store connected directly,
side by side on one throwaway PostgreSQL.

Run from the repository::

    .venv/bin/python benchmarks/bench_pgbouncer.py            # the full run (a minute or two)
    .venv/bin/python benchmarks/bench_pgbouncer.py --quick    # a small run, for the smoke test
    .venv/bin/python benchmarks/bench_pgbouncer.py --json out.json

It starts its own PostgreSQL (``fsync=on``, ``synchronous_commit=on``: every write durable on
return) and a PgBouncer in front of it (tests/support/servers.py: ``pool_mode = transaction``,
``default_pool_size`` 4, fewer server connections than the writers' client connections). The
store through it has ``pooler="transaction"`` (no prepared statements kept); the direct one
is a plain PostgresStore (asyncpg's statement cache on).

The workload is bench_servers': each turn adds 3 entries (about 800 B, 200 B and 2 KB of text)
and replaces the snapshot, in one durable write. Measures:

- (1) 8 writer processes, each writing its own States all at once (asyncio.gather; group
  commit shares a transaction between them), all processes started together: turns/s of all
  of them, direct, and through PgBouncer (the ratio to direct in the same repetition).
- (2) one process, one write at a time: turns/s direct and through PgBouncer (the cost of
  each statement's extra round trip: without a statement cache asyncpg asks the server to
  describe each statement before it runs it, and of PgBouncer's hop).
- (3) for information: the direct store with ``statement_cache_size=0``, one write at a time,
  which separates the cost of the cache from PgBouncer's hop.

Each repetition runs every measure on both, the order alternating; the report gives medians,
and each ratio is the median of the repetitions' ratios.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support import servers  # noqa: E402

import common  # noqa: E402
from bench_core import Turn, make_workload  # noqa: E402
from common import state_id  # noqa: E402

POOL_SIZE = 4  # PgBouncer's server connections, fewer than the writers' client connections


@dataclass(frozen=True)
class Config:
    processes: int  # writer processes in (1)
    states: int  # States each writer process writes at once in (1)
    turns: int  # turns per State
    seq_writes: int  # writes one at a time in (2) and (3)
    reps: int  # repetitions (median reported)
    read_reps: int = 0  # unused; the banner prints it

    def describe(self) -> str:
        return (
            f"(1) {self.processes} processes x {self.states} States x {self.turns} turns at once; "
            f"(2) {self.seq_writes} writes one at a time; 3 entries (800/200/2048 B text) + snapshot "
            f"per durable write; PgBouncer pool_mode=transaction, default_pool_size={POOL_SIZE}; "
            f"median of {self.reps} reps"
        )


FULL = Config(processes=8, states=10, turns=20, seq_writes=300, reps=5)
QUICK = Config(processes=2, states=2, turns=3, seq_writes=5, reps=1)


# -- a writer process ------------------------------------------------------------------------


def writer(
    dsn: str, options: dict[str, Any], prefix: str, states: int, turns: int, go: Any, out: Any
) -> None:
    """A writer process: open the store (its pool and tables ready), wait for ``go``, write
    ``states`` States of ``turns`` turns all at once, and send the time it finished."""
    from statekeep.stores import PostgresStore

    work = make_workload(states, turns)

    async def main() -> float:
        store = PostgresStore(dsn, **options)
        try:
            await store.awrite(f"{prefix}-warm", [], common.make_snapshot(0, 0), create=True)
            await asyncio.to_thread(go.wait)

            async def one(i: int, mine: list[Turn]) -> None:
                for t, turn in enumerate(mine):
                    await store.awrite(f"{prefix}-{state_id(i)}", turn.entries, turn.snapshot, create=t == 0)

            await asyncio.gather(*(one(i, mine) for i, mine in enumerate(work)))
            return time.perf_counter()
        finally:
            await store.aclose()

    out.send(asyncio.run(main()))


def many_writers(dsn: str, options: dict[str, Any], cfg: Config, run: str) -> float:
    """Turns/s of ``cfg.processes`` writer processes started together on ``dsn``."""
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    pipes = [ctx.Pipe(duplex=False) for _ in range(cfg.processes)]
    procs = [
        ctx.Process(target=writer, args=(dsn, options, f"{run}-p{n}", cfg.states, cfg.turns, go, pipes[n][1]))
        for n in range(cfg.processes)
    ]
    for proc in procs:
        proc.start()
    # Every process has its store open once its warm-up write is there; then all go at once.
    probe = _store(dsn, options)
    try:
        while len(probe.list(limit=cfg.processes + 1)) < cfg.processes:
            time.sleep(0.02)
    finally:
        probe.close()
    common.settle()
    began = time.perf_counter()
    go.set()
    ends = [receive.recv() for receive, _ in pipes]
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise RuntimeError(f"a writer process failed with exit code {proc.exitcode}")
    return cfg.processes * cfg.states * cfg.turns / (max(ends) - began)


def one_at_a_time(dsn: str, options: dict[str, Any], writes: int, run: str) -> float:
    """Turns/s of one process writing one State's turns one at a time."""
    work = make_workload(1, writes)[0]
    store = _store(dsn, options)
    try:
        store.write(f"{run}-warm", [], None, create=True)
        common.settle()
        began = time.perf_counter()
        for t, turn in enumerate(work):
            store.write(f"{run}-{state_id(0)}", turn.entries, turn.snapshot, create=t == 0)
        return writes / (time.perf_counter() - began)
    finally:
        store.close()


def _store(dsn: str, options: dict[str, Any]) -> Any:
    from statekeep.stores import PostgresStore

    return PostgresStore(dsn, **options)


# -- the run ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args, cfg, scratch, began = common.start("PgBouncer benchmark", __doc__, argv, QUICK, FULL)
    postgres = servers.start_postgres()
    bouncer = servers.start_pgbouncer(postgres, pool_size=POOL_SIZE)
    targets = {
        "direct": (postgres.dsn, {}),
        "bouncer": (bouncer.dsn, {"pooler": "transaction"}),
        "nocache": (postgres.dsn, {"statement_cache_size": 0}),
    }
    samples: dict[str, list[float]] = {}
    try:
        for rep in range(cfg.reps):
            order = ["direct", "bouncer"] if rep % 2 == 0 else ["bouncer", "direct"]
            for name in order:  # a schema of its own each time: every run starts on empty tables
                dsn, options = targets[name]
                schema = {"schema": servers.unique_name("bench")}
                samples.setdefault(f"many_{name}", []).append(
                    many_writers(dsn, {**options, **schema}, cfg, f"r{rep}")
                )
            for name in [*order, "nocache"]:
                dsn, options = targets[name]
                schema = {"schema": servers.unique_name("bench")}
                samples.setdefault(f"one_{name}", []).append(
                    one_at_a_time(dsn, {**options, **schema}, cfg.seq_writes, f"r{rep}")
                )
            print(f"  rep {rep + 1}/{cfg.reps} done", flush=True)
    finally:
        bouncer.remove()
        postgres.remove()
        scratch.cleanup()

    med = common.Medians(samples)
    rows = [
        med.row(f"(1) {cfg.processes} writer processes, direct", "many_direct", "turns/s"),
        _ratio(med, f"(1) {cfg.processes} writer processes, through PgBouncer", "many", "turns/s"),
        med.row("(2) one write at a time, direct", "one_direct", "turns/s"),
        _ratio(med, "(2) one write at a time, through PgBouncer", "one", "turns/s"),
        med.ratio_row(
            "(3) one write at a time, direct, statement_cache_size=0",
            "one_nocache",
            "turns/s",
            "one_direct",
            "(2) direct",
        ),
    ]
    print()
    common.print_table(rows)
    common.write_json_if_asked(args, cfg, scratch, time.perf_counter() - began, rows, samples)
    return 0


def _ratio(med: common.Medians, measure: str, key: str, unit: str) -> common.Row:
    """The PgBouncer run of ``key`` against the direct one: the median of the repetitions'
    ratios (each repetition measured both, side by side)."""
    row = med.ratio_row(measure, f"{key}_bouncer", unit, f"{key}_direct", f"{measure[:3]} direct")
    pairs = zip(med.samples[f"{key}_bouncer"], med.samples[f"{key}_direct"], strict=True)
    row.ratio = statistics.median(b / d for b, d in pairs)
    return row


if __name__ == "__main__":
    raise SystemExit(main())

"""Postgres failover: how long writes stop when the primary dies, what asynchronous replication
loses, and what a synchronous standby costs.

Run from the repository::

    .venv/bin/python benchmarks/bench_failover.py            # the full run (about a minute)
    .venv/bin/python benchmarks/bench_failover.py --quick    # a small run, for the smoke test
    .venv/bin/python benchmarks/bench_failover.py --json out.json

It starts its own throwaway servers (tests/support/servers.py: ``start_postgres_pair``): a
primary (``fsync=on``, ``synchronous_commit=on``) and a hot standby made with
``pg_basebackup -R``, synchronous (``synchronous_standby_names='*'``) or asynchronous. A
PostgresStore writes through the pair's multi-host DSN (``failover_timeout`` 30 s, the
default there).

- failover time: 8 writers (asyncio tasks, one new State per write, ``create=True``) write
  without pause; the primary is SIGKILLed and the standby promoted at once (``pg_ctl
  promote``); the time from the kill to the first write, begun after the kill, that is
  acknowledged (by the promoted standby). Median of the runs, with and without sync
  replication. It includes the store's resend pause (50 ms, doubling up to 1 s).
- acknowledged writes lost: of the writes acknowledged before the kill, how many the
  promoted standby does not have, summed over the runs (a figure, not a target: with
  synchronous replication it must be 0; with asynchronous replication it is the writes
  whose WAL had not reached the standby, often 0 on one machine).
- write throughput: one write after another, and 8 States at once, on a primary with a
  synchronous standby against a single server (same machine, same settings), side by side
  in each repetition; the ratio is the median of the repetitions' ratios.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.common import Medians, Row, print_table, start, write_json_if_asked  # noqa: E402
from tests.support import servers  # noqa: E402


@dataclass
class Config:
    runs: int = 3  # failovers per setting
    writers: int = 8
    before_kill: int = 200  # writes acknowledged before the kill
    reps: int = 3  # throughput repetitions
    writes: int = 300  # per throughput measure

    def describe(self) -> str:
        return (
            f"{self.runs} failovers per setting, {self.writers} writers ({self.before_kill} writes "
            f"before each kill); throughput: {self.writes} writes x {self.reps} reps, 1 entry each"
        )


QUICK = Config(runs=1, writers=4, before_kill=40, reps=1, writes=40)


def _entry(i: int) -> list[dict[str, Any]]:
    return [{"seq": 0, "kind": "note", "text": f"write {i} " + "x" * 200}]


async def _one_failover(sync: bool, cfg: Config) -> tuple[float, int, int, float]:
    """(seconds from the kill to the first write acknowledged after it, acknowledged writes
    lost, writes acknowledged before the kill, seconds the promotion took) for one primary
    killed under load."""
    from statekeep.stores import PostgresStore

    primary, standby = servers.start_postgres_pair(sync)
    store = PostgresStore(servers.pair_dsn(primary, standby), schema="bench")
    acked: list[tuple[str, float, float]] = []  # (State id, began, acknowledged)
    stop = asyncio.Event()
    try:
        await store.awrite("warm", [], None, create=True)

        async def writer(n: int) -> None:
            i = 0
            while not stop.is_set():
                sid, began = f"w{n}-{i}", time.perf_counter()
                await store.awrite(sid, _entry(i), None, create=True)
                acked.append((sid, began, time.perf_counter()))
                i += 1

        tasks = [asyncio.create_task(writer(n)) for n in range(cfg.writers)]
        while len(acked) < cfg.before_kill:
            await asyncio.sleep(0.005)
        killed, promoting = await asyncio.to_thread(_kill_and_promote, primary, standby)
        while not any(began > killed for _, began, _ in acked):
            await asyncio.sleep(0.005)
        first = min(done for _, began, done in acked if began > killed)
        stop.set()
        await asyncio.gather(*tasks)
        before = [item for item in acked if item[2] <= killed]
        lost = 0
        for sid, _, _ in before:
            lost += await store.aread(sid) is None
        return first - killed, lost, len(before), promoting
    finally:
        stop.set()
        await store.aclose()
        primary.remove()
        standby.remove()


def _kill_and_promote(primary: Any, standby: Any) -> tuple[float, float]:
    """SIGKILL ``primary`` (returning once it is gone), promote ``standby``; the time of the
    kill, and the seconds ``pg_ctl promote -w`` took."""
    primary.kill()
    killed = time.perf_counter()
    standby.promote()
    return killed, time.perf_counter() - killed


async def _throughput(dsn: str, cfg: Config, concurrent: int) -> float:
    """Writes per second through a store on ``dsn``: ``concurrent`` States at once."""
    from statekeep.stores import PostgresStore

    store = PostgresStore(dsn, schema="t" + uuid.uuid4().hex[:8])
    try:
        await store.awrite("warm", [], None, create=True)
        per = max(1, cfg.writes // concurrent)

        async def one(n: int) -> None:
            for i in range(per):
                await store.awrite(f"s{n}-{i}", _entry(i), None, create=True)

        began = time.perf_counter()
        await asyncio.gather(*(one(n) for n in range(concurrent)))
        return per * concurrent / (time.perf_counter() - began)
    finally:
        await store.aclose()


def main(argv: list[str] | None = None) -> int:
    args, cfg, scratch, began = start("Postgres failover benchmark", __doc__, argv, QUICK, Config())
    samples: dict[str, list[float]] = {}
    figures: dict[str, Any] = {}
    for sync in (True, False):
        name = "sync" if sync else "async"
        lost_total = acked_total = 0
        for run in range(cfg.runs):
            seconds, lost, before, promoting = asyncio.run(_one_failover(sync, cfg))
            samples.setdefault(f"failover {name}", []).append(seconds)
            samples.setdefault(f"promotion {name}", []).append(promoting)
            lost_total, acked_total = lost_total + lost, acked_total + before
            print(
                f"  {name} failover {run + 1}/{cfg.runs}: {seconds:.2f} s (promotion {promoting:.2f} s), "
                f"lost {lost} of {before}",
                flush=True,
            )
        samples[f"lost {name}"] = [float(lost_total)]
        figures[f"lost_{name}"] = {"lost": lost_total, "acknowledged_before_kill": acked_total}
    single = servers.start_postgres()
    primary, standby = servers.start_postgres_pair(True)
    try:
        for rep in range(cfg.reps):
            for concurrent in (1, 8):
                for which, dsn in (("single", single.dsn), ("pair", servers.pair_dsn(primary, standby))):
                    rate = asyncio.run(_throughput(dsn, cfg, concurrent))
                    samples.setdefault(f"{which} {concurrent}", []).append(rate)
            print(f"  throughput: rep {rep + 1}/{cfg.reps} done", flush=True)
    finally:
        single.remove()
        primary.remove()
        standby.remove()
    med = Medians(samples)
    rows: list[Row] = [
        med.row("failover time, sync standby (kill -> first write)", "failover sync", "s"),
        med.row("failover time, async standby (kill -> first write)", "failover async", "s"),
        med.row("of which pg_ctl promote, sync standby", "promotion sync", "s"),
        med.row("of which pg_ctl promote, async standby", "promotion async", "s"),
        med.row(f"acknowledged writes lost, sync (of {figures['lost_sync']['acknowledged_before_kill']})",
                "lost sync", "writes"),
        med.row(f"acknowledged writes lost, async (of {figures['lost_async']['acknowledged_before_kill']})",
                "lost async", "writes"),
    ]  # fmt: skip
    for concurrent in (1, 8):
        ratios = [
            p / s for p, s in zip(samples[f"pair {concurrent}"], samples[f"single {concurrent}"], strict=True)
        ]
        row = med.ratio_row(
            f"writes, {concurrent} at a time: sync standby vs single server",
            f"pair {concurrent}",
            "writes/s",
            f"single {concurrent}",
            "single server",
        )
        row.ratio = statistics.median(ratios)
        rows.append(row)
    print()
    print_table(rows)
    write_json_if_asked(args, cfg, scratch, time.perf_counter() - began, rows, samples, {"figures": figures})
    scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

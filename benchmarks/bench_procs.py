"""Writer processes started together: total durable writes/s and CPU per write, for FileStore
and SQLiteStore, each next to a raw baseline run in the same run.

Run from the repository::

    .venv/bin/python benchmarks/bench_procs.py            # the full run (a few minutes)
    .venv/bin/python benchmarks/bench_procs.py --quick    # a small run, for the smoke test
    .venv/bin/python benchmarks/bench_procs.py --json out.json

For P in 1, 2, 4, 8 writer processes (``--quick``: 1, 2), each process writes its own 10
States; a turn adds 3 entries (text fields of about 800 B, 200 B and 2 KB) and replaces the
snapshot, in one durable write, States in turn (round robin), one write at a time per
process (the sync API). Four writers, each in a fresh scratch folder:

- raw write+fdatasync: one file per State, per turn the entry lines + snapshot JSON encoded
  with orjson, one ``os.write`` of them, then ``fdatasync``;
- raw sqlite3: one database shared by the P processes (as SQLiteStore's is), WAL,
  synchronous=FULL, SQLiteStore's tables; per turn one transaction (BEGIN IMMEDIATE, upsert
  the States row, insert the 3 entries, COMMIT);
- FileStore: one store folder shared by the P processes, ``store.write`` per turn;
- SQLiteStore: one database file shared by the P processes, ``store.write`` per turn.

Each process starts (``multiprocessing`` spawn: a fresh interpreter, as a separate agent
process would be), opens its files or store and writes the first turn of each of its States
(creation: not the steady state, and not timed). Then all wait on a barrier; the parent
flushes the disk (``sync``) and releases them together. Measured per process from the
release until its last write returned and its store (or files, or connection) is closed:
its wall-clock interval (CLOCK_MONOTONIC) and its CPU time, user and system, from
``resource.getrusage(RUSAGE_SELF)`` taken in the process itself at both ends (all its
threads: a store's owner loop and worker threads count; start-up and imports do not).

- writes/s: all the processes' timed writes / (last end - first start);
- CPU per write: the processes' user + system CPU summed / their writes;
- machine CPU per write (detail table only): busy time of the whole machine from
  ``/proc/stat`` over the same window / writes. It adds what the kernel does for the
  writers in its own threads (journal commits, writeback), and whatever else runs.

Every writer runs once per repetition, the order rotated; the report gives medians and
ratios (value / baseline). Targets (issue 22): FileStore CPU per write with 8 processes <= 3 x
raw write+fdatasync's, and FileStore writes/s with 8 processes >= 0.5 x raw write+fdatasync's. The raw
writers encode each turn with orjson inside the timed window, as a store must.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import resource
import sqlite3
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import common
from bench_core import Turn, _write_all, make_workload
from bench_sqlite import raw_commit, raw_connect, raw_database, raw_params
from common import Row, Scratch, settle, state_id
from rawio import encode_turn
from statekeep import FileStore, SQLiteStore, Store


@dataclass(frozen=True)
class Config:
    procs: tuple[int, ...]  # the numbers of writer processes measured
    states: int  # States per process
    turns: int  # turns per State; the first creates it and is not timed
    reps: int  # repetitions of every (writer, P) run (median reported)


FULL = Config(procs=(1, 2, 4, 8), states=10, turns=101, reps=3)
QUICK = Config(procs=(1, 2), states=3, turns=4, reps=1)

WRITERS = ("raw_file", "raw_sqlite", "filestore", "sqlitestore")
LABELS = {
    "raw_file": "raw write+fdatasync",
    "raw_sqlite": "raw sqlite3",
    "filestore": "FileStore.write",
    "sqlitestore": "SQLiteStore.write",
}
BARRIER_TIMEOUT = 600.0  # seconds; a writer that never arrives breaks the run, not hangs it


def proc_state_id(proc: int, i: int) -> str:
    """The id of State ``i`` of writer process ``proc``: no two processes share a State."""
    return f"p{proc:02d}-{state_id(i)}"


# -- in each writer process -------------------------------------------------------------------


class Window:
    """The timed part of a writer: from the barrier's release until :meth:`stop`."""

    def __init__(self, barrier: Barrier) -> None:
        self._barrier = barrier

    def start(self) -> None:
        self._barrier.wait(BARRIER_TIMEOUT)  # set up: ready
        self._barrier.wait(BARRIER_TIMEOUT)  # the parent synced the disk: go
        self._usage = resource.getrusage(resource.RUSAGE_SELF)
        self._t0 = time.clock_gettime(time.CLOCK_MONOTONIC)

    def stop(self, writes: int) -> dict[str, float]:
        t1 = time.clock_gettime(time.CLOCK_MONOTONIC)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "t0": self._t0,
            "t1": t1,
            "user": usage.ru_utime - self._usage.ru_utime,
            "sys": usage.ru_stime - self._usage.ru_stime,
            "writes": writes,
        }


def write_raw_file(folder: Path, proc: int, work: list[list[Turn]], window: Window) -> dict[str, float]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    fds = [os.open(folder / f"{proc_state_id(proc, i)}.jsonl", flags, 0o600) for i in range(len(work))]

    def append(fd: int, turn: Turn) -> None:  # encoded with orjson here, as a store must
        _write_all(fd, encode_turn(turn.entries, turn.snapshot))
        os.fdatasync(fd)

    try:
        for fd, turns in zip(fds, work, strict=True):
            append(fd, turns[0])
        window.start()
        for t in range(1, len(work[0])):
            for fd, turns in zip(fds, work, strict=True):
                append(fd, turns[t])
    finally:
        for fd in fds:
            os.close(fd)
    return window.stop(len(work) * (len(work[0]) - 1))


def write_raw_sqlite(folder: Path, proc: int, work: list[list[Turn]], window: Window) -> dict[str, float]:
    params = raw_params(work, lambda i: proc_state_id(proc, i))  # encoded in raw_commit, timed
    conn = raw_connect(folder / "raw.db")  # the parent made the tables
    try:
        for turns in params:
            raw_commit(conn, turns[0])
        window.start()
        for t in range(1, len(params[0])):
            for turns in params:
                raw_commit(conn, turns[t])
    finally:
        conn.close()
    return window.stop(len(work) * (len(params[0]) - 1))


def write_store(store: Store, proc: int, work: list[list[Turn]], window: Window) -> dict[str, float]:
    sids = [proc_state_id(proc, i) for i in range(len(work))]
    try:
        for sid, turns in zip(sids, work, strict=True):
            store.write(sid, turns[0].entries, turns[0].snapshot, create=True)
        window.start()
        for t in range(1, len(work[0])):
            for sid, turns in zip(sids, work, strict=True):
                store.write(sid, turns[t].entries, turns[t].snapshot)
    finally:
        store.close()
    return window.stop(len(work) * (len(work[0]) - 1))


def writer(
    kind: str, folder: str, proc: int, states: int, turns: int, barrier: Barrier, out: Connection
) -> None:
    """One writer process: set up, wait for the others, write, send its measures to ``out``."""
    try:
        work = make_workload(states, turns)
        window = Window(barrier)
        path = Path(folder)
        if kind == "raw_file":
            result = write_raw_file(path, proc, work, window)
        elif kind == "raw_sqlite":
            result = write_raw_sqlite(path, proc, work, window)
        elif kind == "filestore":
            result = write_store(FileStore(path / "store"), proc, work, window)
        elif kind == "sqlitestore":
            result = write_store(SQLiteStore(path / "store.db"), proc, work, window)
        else:
            raise ValueError(f"unknown writer {kind!r}")
        out.send(("ok", result))
    except BaseException:
        barrier.abort()  # the parent and the others stop waiting
        out.send(("error", f"writer {kind} #{proc}:\n{traceback.format_exc()}"))
    finally:
        out.close()


# -- in the parent -----------------------------------------------------------------------------


def cpu_busy_seconds() -> float:
    """The machine's busy CPU time so far (all CPUs, everything but idle and iowait), from
    the first line of /proc/stat."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def prepare(kind: str, folder: Path) -> None:
    """What the processes share, made before they start: the databases' tables."""
    if kind == "raw_sqlite":
        raw_database(folder / "raw.db").close()
    elif kind == "sqlitestore":
        store = SQLiteStore(folder / "store.db")
        store.list()
        store.close()


def check(kind: str, folder: Path, procs: int, cfg: Config, work: list[list[Turn]]) -> None:
    """Every write the run reported is there."""
    per_state = cfg.turns * len(work[0][0].entries)
    sids = [proc_state_id(p, i) for p in range(procs) for i in range(cfg.states)]
    if kind == "raw_file":
        for sid, turns in zip(sids, work * procs, strict=True):
            size = sum(len(t.lines) + len(t.snap) + 1 for t in turns)
            assert os.path.getsize(folder / f"{sid}.jsonl") == size, sid
    elif kind == "raw_sqlite":
        conn = sqlite3.connect(folder / "raw.db")
        try:
            (count,) = conn.execute("SELECT count(*) FROM entries").fetchone()
        finally:
            conn.close()
        assert count == per_state * len(sids), (count, per_state * len(sids))
    else:
        store: Store = (
            FileStore(folder / "store") if kind == "filestore" else SQLiteStore(folder / "store.db")
        )
        try:
            for sid in sids:
                record = store.read(sid)
                assert record is not None and len(record.entries) == per_state, sid
        finally:
            store.close()


def run_writers(kind: str, folder: Path, procs: int, cfg: Config, work: list[list[Turn]]) -> dict[str, float]:
    """``procs`` writer processes of ``kind`` started together in ``folder``; their measures."""
    ctx = multiprocessing.get_context("spawn")
    prepare(kind, folder)
    barrier = ctx.Barrier(procs + 1)
    pipes = []
    children = []
    for proc in range(procs):
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(
            target=writer, args=(kind, str(folder), proc, cfg.states, cfg.turns, barrier, send), daemon=True
        )
        child.start()
        send.close()
        pipes.append(receive)
        children.append(child)
    results: list[tuple[str, Any]] = []
    try:
        try:
            barrier.wait(BARRIER_TIMEOUT)  # every writer is set up
            settle()
            busy0 = cpu_busy_seconds()
            barrier.wait(BARRIER_TIMEOUT)  # go
        except Exception:  # a writer failed (it aborted the barrier): its error is in its pipe
            busy0 = 0.0
        for receive in pipes:
            try:
                results.append(receive.recv())
            except EOFError:
                results.append(("error", "a writer exited without a result"))
        busy = cpu_busy_seconds() - busy0
    finally:
        for child in children:
            child.join(BARRIER_TIMEOUT)
            if child.is_alive():
                child.kill()
                child.join()
        for receive in pipes:
            receive.close()
    errors = [str(value) for status, value in results if status != "ok"]
    if errors:
        raise RuntimeError("\n".join(errors))
    measures = [value for _, value in results]
    writes = sum(m["writes"] for m in measures)
    wall = max(m["t1"] for m in measures) - min(m["t0"] for m in measures)
    user = sum(m["user"] for m in measures)
    system = sum(m["sys"] for m in measures)
    check(kind, folder, procs, cfg, work)
    return {
        "wps": writes / wall,
        "cpu": (user + system) / writes * 1e3,
        "user": user / writes * 1e3,
        "sys": system / writes * 1e3,
        "machine": busy / writes * 1e3,
        "wall": wall,
    }


def measure(
    kind: str,
    procs: int,
    scratch: Scratch,
    cfg: Config,
    work: list[list[Turn]],
    samples: dict[str, list[float]],
) -> Callable[[], float]:
    """A run for :func:`common.run_rotated`: records every measure in ``samples``, returns
    writes/s."""

    def run() -> float:
        result = run_writers(kind, scratch.new(f"{kind}-p{procs}"), procs, cfg, work)
        for name, value in result.items():
            if name != "wps":
                samples.setdefault(f"{kind}_p{procs}_{name}", []).append(value)
        return result["wps"]

    return run


# -- the report ---------------------------------------------------------------------------------


def detail_table(cfg: Config, med: common.Medians) -> list[str]:
    headers = ("writer", "P", "writes/s", "CPU ms/write", "user", "sys", "sys %", "machine ms/write")
    table = []
    for kind in WRITERS:
        for p in cfg.procs:
            key = f"{kind}_p{p}"
            cpu = med[f"{key}_cpu"]
            table.append(
                (
                    LABELS[kind],
                    str(p),
                    f"{med[f'{key}_wps']:,.0f}",
                    f"{cpu:.3f}",
                    f"{med[f'{key}_user']:.3f}",
                    f"{med[f'{key}_sys']:.3f}",
                    f"{med[f'{key}_sys'] / (med[f'{key}_user'] + med[f'{key}_sys']) * 100:.0f}",
                    f"{med[f'{key}_machine']:.3f}",
                )
            )
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return " | ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return [line(headers), "-+-".join("-" * w for w in widths), *(line(row) for row in table)]


def main(argv: Sequence[str] | None = None) -> int:
    args = common.parse_args(__doc__, argv)
    cfg = QUICK if args.quick else FULL

    scratch = Scratch()
    began = time.perf_counter()
    print(
        f"statekeep multi-process benchmark{' (--quick: numbers are not meaningful)' if args.quick else ''}\n"
        f"python {platform.python_version()}, SQLite {sqlite3.sqlite_version} on {platform.platform()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start\n"
        f"scratch: {scratch.root} ({scratch.fs})\n"
        f"workload: P = {', '.join(map(str, cfg.procs))} writer processes started together, each "
        f"{cfg.states} States x {cfg.turns - 1} timed turns (+1 creating, untimed), 3 entries/turn "
        f"({'/'.join(str(s) for _, s in common.ENTRY_KINDS)} B text) + snapshot, 1 durable write/turn; "
        f"median of {cfg.reps} reps\n",
        flush=True,
    )
    samples: dict[str, list[float]] = {}
    try:
        work = make_workload(cfg.states, cfg.turns)
        runs = [
            (f"{kind}_p{p}_wps", measure(kind, p, scratch, cfg, work, samples))
            for p in cfg.procs
            for kind in WRITERS
        ]
        common.run_rotated(runs, cfg.reps, scratch, samples)
    finally:
        scratch.cleanup()

    med = common.Medians(samples)
    rows: list[Row] = []
    for p in cfg.procs:
        procs = f"{p} proc{'s' if p > 1 else ''}"
        rows += [
            med.row(f"(1) raw write+fdatasync, {procs}", f"raw_file_p{p}_wps", "writes/s"),
            med.row(f"(2) raw sqlite3, {procs}", f"raw_sqlite_p{p}_wps", "writes/s"),
            med.ratio_row(
                f"(3) FileStore.write, {procs}",
                f"filestore_p{p}_wps",
                "writes/s",
                f"raw_file_p{p}_wps",
                "(1)",
                ">= 0.5" if p == 8 else "",
            ),
            med.ratio_row(
                f"(4) SQLiteStore.write, {procs}",
                f"sqlitestore_p{p}_wps",
                "writes/s",
                f"raw_sqlite_p{p}_wps",
                "(2)",
            ),
        ]
    for p in cfg.procs:
        procs = f"{p} proc{'s' if p > 1 else ''}"
        rows += [
            med.row(f"(5) CPU/write raw write+fdatasync, {procs}", f"raw_file_p{p}_cpu", "ms"),
            med.row(f"(6) CPU/write raw sqlite3, {procs}", f"raw_sqlite_p{p}_cpu", "ms"),
            med.ratio_row(
                f"(7) CPU/write FileStore, {procs}",
                f"filestore_p{p}_cpu",
                "ms",
                f"raw_file_p{p}_cpu",
                "(5)",
                "<= 3" if p == 8 else "",
            ),
            med.ratio_row(
                f"(8) CPU/write SQLiteStore, {procs}",
                f"sqlitestore_p{p}_cpu",
                "ms",
                f"raw_sqlite_p{p}_cpu",
                "(6)",
            ),
        ]
    common.print_table(rows)
    print()
    print("\n".join(detail_table(cfg, med)))
    elapsed = time.perf_counter() - began
    timed_writes = cfg.states * (cfg.turns - 1)
    print(
        f"\n{timed_writes} timed writes per process per run, {statistics.mean(len(t.lines) + len(t.snap) for t in work[0]):,.0f} B each. "
        "Ratios: value / baseline.\n"
        "writes/s: all the processes' writes / (last end - first start), from the barrier's release.\n"
        "CPU/write: the writer processes' user + sys CPU (getrusage(RUSAGE_SELF) in each, all its threads,\n"
        "    over the timed window, closing included) / their writes. machine: busy CPU of the whole\n"
        "    machine over the window (/proc/stat; adds kernel threads, and anything else running) / writes.\n"
        f"Took {elapsed:.1f} s."
    )
    if args.json:
        versions = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
        common.write_json(args.json, cfg, args.quick, versions, scratch, {}, elapsed, rows, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())

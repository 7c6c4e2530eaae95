"""The per-write budget of a steady-state append: FileStore and SQLiteStore, sync and async,
each beside its raw baseline in the same run, by phase and thread, and counted.

Run from the repository::

    .venv/bin/python benchmarks/bench_budget.py            # the full run (about a minute)
    .venv/bin/python benchmarks/bench_budget.py --quick    # a small run, for the smoke test
    .venv/bin/python benchmarks/bench_budget.py --strace   # also count system calls (strace -f -c)
    .venv/bin/python benchmarks/bench_budget.py --json out.json

A steady-state append: one process, one State, no other writer since its last append;
each write is 3 entries (text of 800 B, 200 B and 2 KB) + the snapshot, about 3.4 KB, one
at a time. Every subject runs once per repetition, the order rotated, in a fresh folder:
warm-up writes first (the first creates the State; untimed), then each timed write is
timed alone. Values are medians of the per-repetition medians, in µs per write; a ratio
is the baseline's µs / the value's (a speed ratio: 1.0 is as fast as raw), and beside it
the µs per write above the baseline ("overhead").

Raw baselines encode the same JSON with orjson inside the timed call (benchmarks/rawio.py):
a file per State, ``os.write`` + ``fdatasync``; and sqlite3, WAL, synchronous=FULL, per
write BEGIN IMMEDIATE, upsert the State's row, insert the 3 entries, COMMIT.

Phases and threads, seen from outside (public seams only; a seam that is gone is "n/a"):
the fsync swapped for a no-op (FileStore: an ``OsIO`` whose ``fsync`` does nothing;
SQLiteStore: ``PRAGMA synchronous=OFF`` on the connections it opened), set beside raw
without its fsync: the CPU overhead alone. The caller's share: the turn's orjson encoding
and statekeep's validation + encoding called bare, a MemoryStore write (validation,
encoding, hop, an in-memory commit) and a no-op write (no entries, snapshot kept: the hop
and the lock). CPU per write of each thread (caller, statekeep's owner loop, its workers)
from per-thread CPU clocks. Counts per write: the FileStore's calls through its ``OsIO``
(and the time spent in them per thread), the SQL statements run on the connections a
SQLiteStore opened (a trace callback) and, with ``--strace``, every system call.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import budget_probes as probes
import budget_subjects as subjects
import common
from budget_subjects import SID, Subject, make_turns, run
from common import Row, Scratch
from rawio import RawFile, RawSQLite
from statekeep import FileStore, SQLiteStore


@dataclass(frozen=True)
class Config:
    states: int  # always 1 (the banner's workload line)
    turns: int  # timed writes per subject per repetition
    warm: int  # untimed writes first (the first creates)
    reps: int
    read_reps: int  # unused: the banner's
    strace_writes: tuple[int, int]  # writes of the two strace runs (their difference is counted)


FULL = Config(states=1, turns=200, warm=20, reps=5, read_reps=0, strace_writes=(50, 250))
QUICK = Config(states=1, turns=8, warm=2, reps=1, read_reps=0, strace_writes=(5, 15))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (a smoke test, not a measurement)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--strace", action="store_true", help="also count system calls with strace -f -c")
    parser.add_argument("--strace-child", nargs=3, metavar=("KIND", "FOLDER", "N"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# -- counts ------------------------------------------------------------------------------------------


def count_file(folder: Path, turns: list[subjects.Turn], warm: int, asynchronous: bool) -> dict[str, Any]:
    """OsIO calls per FileStore write, by method, and the µs per write spent in them per
    (thread role, method)."""
    recorder = probes.Recorder()
    io = probes.recording_io(recorder)
    if io is None:
        return {}
    subject = subjects.store_subject(FileStore(folder, io=io), asynchronous=asynchronous)
    subject.warmed = lambda: setattr(recorder, "on", True)
    close = subject.close

    def closed() -> None:  # closing's own calls are not a write's
        recorder.on = False
        close()

    subject.close = closed
    result = run(subject, turns, warm)
    n = len(result.us)
    return {
        "calls": {k: v / n for k, v in recorder.calls.items()},
        "us": {f"{m} @ {r}": s / n * 1e6 for (r, m), s in recorder.seconds.items()},
    }


def count_sqlite(folder: Path, turns: list[subjects.Turn], warm: int) -> dict[str, Any]:
    """SQL statements per SQLiteStore write (on the connections it opened), and those of
    one steady-state write; the raw baseline's per write."""
    conns = probes.Connections()
    with conns.watching():
        store = SQLiteStore(folder / "store.db")
        for i, (entries, snapshot) in enumerate(turns[:warm]):
            store.write(SID, entries, snapshot, create=i == 0)
        conns.on = True
        for entries, snapshot in turns[warm:]:
            store.write(SID, entries, snapshot)
        conns.on = False
        store.close()
    n = len(turns) - warm
    out: dict[str, Any] = {"raw": _raw_statements(folder, turns, warm)}
    if conns.opened:
        out["store"] = len(conns.statements) / n
        out["one"] = conns.statements[: round(len(conns.statements) / n)]
    return out


def _raw_statements(folder: Path, turns: list[subjects.Turn], warm: int) -> float:
    raw = RawSQLite(folder / "raw.db")
    seen: list[str] = []
    for entries, snapshot in turns[:warm]:
        raw.write(entries, snapshot)
    raw.conn.set_trace_callback(seen.append)
    for entries, snapshot in turns[warm:]:
        raw.write(entries, snapshot)
    raw.close()
    return len(seen) / (len(turns) - warm)


def strace_child(kind: str, folder: str, n: int) -> int:
    """Under strace: ``n`` steady-state writes of ``kind`` (after 5 untimed)."""
    path = Path(folder)
    made: dict[str, Callable[[], Subject]] = {
        "raw_file": lambda: subjects.raw_subject(RawFile(path)),
        "filestore": lambda: subjects.store_subject(FileStore(path / "store")),
        "raw_sqlite": lambda: subjects.raw_subject(RawSQLite(path / "raw.db")),
        "sqlite": lambda: subjects.store_subject(SQLiteStore(path / "store.db")),
    }
    run(made[kind](), make_turns(5 + n), 5)
    return 0


def count_strace(scratch: Scratch, cfg: Config) -> dict[str, dict[str, Any]]:
    """System calls per write of each kind: two runs of different lengths under strace,
    the difference divided by the difference in writes (start-up and imports cancel)."""
    out: dict[str, dict[str, Any]] = {}
    script = str(Path(__file__).resolve())
    low_n, high_n = cfg.strace_writes
    for kind in ("raw_file", "filestore", "raw_sqlite", "sqlite"):
        totals = []
        for n in (low_n, high_n):
            folder = scratch.new(f"strace-{kind}-{n}")
            got = probes.strace_run(
                [script, "--strace-child", kind, str(folder), str(n)], folder / "strace.txt"
            )
            if got is None:
                return {}
            totals.append(got)
        low, high = totals
        counts = Counter({k: (high[k] - low[k]) / (high_n - low_n) for k in high | low})
        out[kind] = {**probes.strace_split(counts), "top": dict(counts.most_common(8))}
    return out


# -- timing ------------------------------------------------------------------------------------------


def timing_runs(
    scratch: Scratch, cfg: Config, samples: dict[str, list[float]], missing: list[str]
) -> list[tuple[str, Callable[[], float]]]:
    """Each subject as a run for common.run_rotated: its median µs per write (its CPU per
    thread role into ``samples`` too)."""
    turns = make_turns(cfg.warm + cfg.turns)

    def timing(name: str, make: Callable[[], Subject | None]) -> Callable[[], float]:
        def once() -> float:
            subject = make()
            if subject is None:
                return float("nan")
            result = run(subject, turns, cfg.warm)
            for part, us in result.cpu.items():
                samples.setdefault(f"cpu:{name}:{part}", []).append(us)
            return statistics.median(result.us)

        return once

    runs = []
    for name, make in subjects.subjects(scratch).items():
        probe = make()
        if probe is None:
            missing.append(name)
            continue
        probe.close()
        runs.append((name, timing(name, make)))
    return runs


# -- the report --------------------------------------------------------------------------------------

LABELS = {
    "raw_file": "raw os.write+fdatasync (orjson in the loop)",
    "filestore": "FileStore.write",
    "raw_file_nosync": "raw os.write, no fdatasync",
    "filestore_nosync": "FileStore.write, OsIO.fsync a no-op",
    "raw_sqlite": "raw sqlite3 (BEGIN; upsert; 3 inserts; COMMIT)",
    "sqlite": "SQLiteStore.write",
    "raw_sqlite_nosync": "raw sqlite3, synchronous=OFF",
    "sqlite_nosync": "SQLiteStore.write, synchronous=OFF",
    "raw_file_async": "await asyncio.to_thread(raw file write)",
    "filestore_async": "await FileStore.awrite, caller's loop",
    "raw_sqlite_async": "await asyncio.to_thread(raw sqlite3 write)",
    "sqlite_async": "await SQLiteStore.awrite, caller's loop",
    "encode": "caller: orjson encode of the turn, bare",
    "prepare": "caller: statekeep validate+encode, bare",
    "memory": "MemoryStore.write (validate+encode+hop)",
    "memory_noop": "no-op write (hop + lock): MemoryStore",
    "filestore_noop": "no-op write: FileStore",
    "sqlite_noop": "no-op write: SQLiteStore",
}
# (subject, its baseline, target on the speed ratio)
VERSUS = {
    "filestore": ("raw_file", ">= 0.8"),
    "filestore_nosync": ("raw_file_nosync", ""),
    "sqlite": ("raw_sqlite", ">= 0.8"),
    "sqlite_nosync": ("raw_sqlite_nosync", ""),
    "filestore_async": ("raw_file_async", ">= 0.7"),
    "sqlite_async": ("raw_sqlite_async", ">= 0.7"),
    "memory": ("memory_noop", ""),
}
OVERHEAD_TARGET = 150.0  # µs per sync write above raw (issue 22)


def speed_row(med: common.Medians, numbers: dict[str, int], name: str) -> Row:
    """``name``'s µs per write; against its baseline: base µs / its µs, and the overhead."""
    label = f"({numbers[name]}) {LABELS[name]}"
    if name not in VERSUS or VERSUS[name][0] not in med.med:
        return med.row(label, name, "µs")
    base, target = VERSUS[name]
    return med.time_row(label, name, base, f"({numbers[base]})", target)


def rows_of(med: common.Medians, counts: dict[str, Any], stats: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    numbers = {name: i for i, name in enumerate((n for n in LABELS if n in med.med), 1)}
    for name in numbers:
        rows.append(speed_row(med, numbers, name))
        if name in ("filestore", "sqlite"):  # the overhead target, as a row of its own
            over = rows[-1].overhead or 0.0
            rows.append(Row(f"({numbers[name]}) {LABELS[name]}: overhead above raw", over, "µs",
                            target=f"<= {OVERHEAD_TARGET:.0f}", met=over <= OVERHEAD_TARGET))  # fmt: skip
    for name in ("filestore", "filestore_async", "sqlite", "sqlite_async", "raw_file", "raw_sqlite"):
        base = "raw_file" if "file" in name else "raw_sqlite"
        if "async" in name:
            base += "_async"
        all_key, base_key = f"cpu:{name}:all threads", f"cpu:{base}:all threads"
        if all_key not in med.med:
            continue
        for key in sorted(k for k in med.med if k.startswith(f"cpu:{name}:")):
            part = key.rsplit(":", 1)[1]
            if med[key] < 0.5:  # a thread that did nothing for this subject
                continue
            row = med.row(f"CPU/write ({numbers[name]}): {part}", key, "µs")
            if part == "all threads" and name != base:
                row = med.ratio_row(row.measure, key, "µs", base_key, f"({numbers[base]}) all threads")
            rows.append(row)
    for how in ("sync", "async"):
        found = counts.get(f"file_{how}")
        if not found:
            continue
        calls = sum(found["calls"].values())
        rows.append(Row(f"OsIO calls per FileStore write ({how})", calls, "calls", "raw", 2.0, calls / 2,
                        "<= 8 calls" if how == "sync" else "", calls <= 8 if how == "sync" else None,
                        extra={"by_method": found["calls"]}))  # fmt: skip
        for part, us in sorted(found["us"].items(), key=lambda kv: -kv[1]):
            if us >= 1.0:
                rows.append(Row(f"OsIO time per write ({how}): {part}", us, "µs"))
    lite = counts.get("sqlite", {})
    if "store" in lite:
        rows.append(Row("SQL statements per SQLiteStore write", lite["store"], "statements", "raw", lite["raw"],
                        lite["store"] / lite["raw"], "<= 7 statements", lite["store"] <= 7,
                        extra={"one_write": lite["one"]}))  # fmt: skip
    elif "raw" in lite:
        rows.append(Row("SQL statements per raw sqlite3 write (the store's: n/a)", lite["raw"], "statements"))
    for kind, split in stats.items():
        for part in ("futex", "epoll", "other", "total"):
            rows.append(Row(f"syscalls/write (strace -f) {kind}: {part}", split[part], "calls",
                            extra={"top": split["top"]} if part == "total" else {}))  # fmt: skip
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.strace_child:
        kind, folder, n = args.strace_child
        return strace_child(kind, folder, int(n))
    cfg = QUICK if args.quick else FULL
    scratch = Scratch()
    began = time.perf_counter()
    versions = f"python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"
    common.print_banner("per-write budget", args.quick, versions, scratch, cfg)
    print(f"load average {os.getloadavg()[0]:.2f} at start (a shared machine: compare ratios)\n", flush=True)
    samples: dict[str, list[float]] = {}
    missing: list[str] = []
    counts: dict[str, Any] = {}
    stats: dict[str, Any] = {}
    try:
        runs = timing_runs(scratch, cfg, samples, missing)
        common.run_rotated(runs, cfg.reps, scratch, samples)
        turns = make_turns(cfg.warm + cfg.turns)
        counts["file_sync"] = count_file(scratch.new("count-fs") / "store", turns, cfg.warm, False)
        counts["file_async"] = count_file(scratch.new("count-fs-async") / "store", turns, cfg.warm, True)
        counts["sqlite"] = count_sqlite(scratch.new("count-sqlite"), turns, cfg.warm)
        print("  counts done", flush=True)
        if args.strace:
            stats = count_strace(scratch, cfg)
            print(f"  strace {'done' if stats else 'n/a: strace is not on PATH'}", flush=True)
        print(flush=True)
    finally:
        scratch.cleanup()
    med = common.Medians(samples)
    rows = rows_of(med, counts, stats)
    common.print_table(rows)
    print(notes(counts, missing, cfg))
    for kind, split in stats.items():
        top = ", ".join(f"{name} {n:.1f}" for name, n in split["top"].items())
        print(f"strace -f, {kind}, the most frequent system calls per write: {top}")
    elapsed = time.perf_counter() - began
    print(f"Took {elapsed:.1f} s.")
    if args.json:
        versions_json = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
        extra = {"counts": counts, "strace": stats, "missing": missing}
        common.write_json(args.json, cfg, args.quick, versions_json, scratch, extra, elapsed, rows, samples)
    return 0


def notes(counts: dict[str, Any], missing: list[str], cfg: Config) -> str:
    lines = [
        f"\n{cfg.turns} timed writes per subject per rep after {cfg.warm} untimed; medians of per-rep medians.",
        "ratio: the baseline's µs / the value's (>= 1 is faster than the baseline); (+N µs): above it.",
        "CPU/write: per-thread CPU clocks over the timed loop / writes (caller = this thread, with the",
        "    asyncio loop of the async rows; owner loop = statekeep-loop; workers = statekeep-io/aux;",
        "    to_thread workers = asyncio's); 'all threads' = process CPU time.",
    ]
    for how in ("sync", "async"):
        found = counts.get(f"file_{how}")
        if found:
            by = ", ".join(f"{k} {v:.1f}" for k, v in sorted(found["calls"].items(), key=lambda kv: -kv[1]))
            lines.append(f"OsIO calls per FileStore write ({how}), innermost only: {by}")
        else:
            lines.append(f"OsIO calls per FileStore write ({how}): n/a (statekeep.stores.OsIO not found)")
    lite = counts.get("sqlite", {})
    if "one" in lite:
        lines.append(f"SQL of one steady-state SQLiteStore write: {probes.statement_kinds(lite['one'])}")
        lines += [f"    {' '.join(sql.split())[:100]}" for sql in lite["one"]]
    else:
        lines.append("SQL statements of SQLiteStore: n/a (it opened no connection through sqlite3.connect)")
    for name in missing:
        lines.append(f"n/a: {LABELS[name]} (its seam is gone: see budget_subjects.py)")
    lines += [f"doubtful: {warning}" for warning in sorted(subjects.WARNINGS)]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""statekeep beside its peers, the frameworks' own stores, on the same workload in one run:
alpineagents' FileStore, OpenAI Agents' SQLiteSession and LangGraph's SqliteSaver.

Run from the repository::

    .venv/bin/python benchmarks/bench_peers.py            # the full run (about a minute)
    .venv/bin/python benchmarks/bench_peers.py --quick    # a small run, for the smoke test
    .venv/bin/python benchmarks/bench_peers.py --json out.json

The peers are the versions pinned in pyproject.toml's ``frameworks`` extra. The workload is
bench_budget's: one State (session, thread) appended to one write at a time, each write 3
entries (text of 800 B, 200 B and 2 KB) + the snapshot, warm-up writes first (untimed), then
each write timed alone; every subject once per repetition, the order rotated, in a fresh
folder. Each pair does the same thing its own way:

- alpineagents ``FileStore.write(id, entries, info)`` (log append + fsync, then info.json
  replaced + fsync) vs statekeep ``FileStore.write``;
- OpenAI Agents ``await SQLiteSession.add_items(entries)`` (the entries only; its own WAL
  database, a thread hop per call) vs statekeep ``SQLiteStore.write`` (sync, entries and
  snapshot), and vs ``await StatekeepSession.add_items`` on a SQLiteStore (the adapter);
- LangGraph ``SqliteSaver.put`` of a checkpoint holding the turn's entries and snapshot vs
  ``StatekeepSaver.put`` (the adapter) on a SQLiteStore.

Values are medians of per-repetition medians, µs per write; a ratio is the peer's µs /
statekeep's (>= 1: statekeep is faster), with the µs per write between them. The raw
baselines of bench_budget run beside them for scale.
"""

from __future__ import annotations

import platform
import sqlite3
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import budget_probes as probes
import common
from budget_subjects import SID, Subject, make_turns, raw_subject, run, store_subject
from common import Row, Scratch
from rawio import RawFile, RawSQLite
from statekeep import FileStore, SQLiteStore


@dataclass(frozen=True)
class Config:
    states: int  # always 1 (the banner's workload line)
    turns: int  # timed writes per subject per repetition
    warm: int
    reps: int
    read_reps: int  # unused: the banner's


FULL = Config(states=1, turns=150, warm=10, reps=7, read_reps=0)
QUICK = Config(states=1, turns=6, warm=2, reps=1, read_reps=0)
PEERS = ("alpineagents", "openai-agents", "langgraph-checkpoint", "langgraph-checkpoint-sqlite")


# -- the peers ----------------------------------------------------------------------------------------


def alpine_fs(folder: Path) -> Subject:
    from alpineagents import FileStore as AlpineFileStore

    store = AlpineFileStore(folder / "runs")
    return Subject(write=lambda e, s, create: store.write(SID, e, s, create=create))


def session(folder: Path, watch: probes.Connections) -> Subject:
    from agents.memory import SQLiteSession

    with watch.watching(trace=False):
        peer = SQLiteSession(SID, folder / "session.db")

    async def add(entries: list[dict[str, Any]], snapshot: dict[str, Any], create: bool) -> None:
        if create:  # it connects in its worker thread on first use: catch that connection too
            with watch.watching(trace=False):
                await peer.add_items(entries)  # type: ignore[arg-type]
        else:
            await peer.add_items(entries)  # type: ignore[arg-type]

    return Subject(awrite=add, close=peer.close)


def statekeep_session(folder: Path) -> Subject:
    from statekeep.adapters.openai_agents import StatekeepSession

    store = SQLiteStore(folder / "store.db")
    adapter = StatekeepSession(SID, store)

    async def add(entries: list[dict[str, Any]], snapshot: dict[str, Any], create: bool) -> None:
        await adapter.add_items(entries)  # type: ignore[arg-type]

    def close() -> None:
        adapter.close()
        store.close()

    return Subject(awrite=add, close=close)


def checkpoints(saver: Any, close: Callable[[], object]) -> Subject:
    """``saver.put`` of one checkpoint per turn, each the child of the one before."""
    config: dict[str, Any] = {"configurable": {"thread_id": SID, "checkpoint_ns": ""}}
    step = 0

    def put(entries: list[dict[str, Any]], snapshot: dict[str, Any], create: bool) -> None:
        nonlocal config, step
        step += 1
        versions = {"messages": step, "snapshot": step}
        checkpoint = {
            "v": 1,
            "id": str(uuid.uuid1()),  # time-ordered, as LangGraph's ids are
            "ts": snapshot["updated_at"],
            "channel_values": {"messages": entries, "snapshot": snapshot},
            "channel_versions": versions,
            "versions_seen": {},
            "pending_sends": [],
            "updated_channels": None,
        }
        config = saver.put(config, checkpoint, {"source": "loop", "step": step, "parents": {}}, versions)

    return Subject(write=put, close=close)


def sqlite_saver(folder: Path, watch: probes.Connections) -> Subject:
    from langgraph.checkpoint.sqlite import SqliteSaver

    with watch.watching(trace=False):
        conn = sqlite3.connect(folder / "graph.db", check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    return checkpoints(saver, conn.close)


def statekeep_saver(folder: Path) -> Subject:
    from statekeep.adapters.langgraph import StatekeepSaver

    store = SQLiteStore(folder / "store.db")
    return checkpoints(StatekeepSaver(store), store.close)


def subjects(scratch: Scratch, watch: dict[str, probes.Connections]) -> dict[str, Callable[[], Subject]]:
    for name in ("session", "saver"):
        watch[name] = probes.Connections()
    return {
        "raw_file": lambda: raw_subject(RawFile(scratch.new("raw"))),
        "alpine_fs": lambda: alpine_fs(scratch.new("alpine")),
        "filestore": lambda: store_subject(FileStore(scratch.new("fs") / "store")),
        "raw_sqlite": lambda: raw_subject(RawSQLite(scratch.new("raw") / "raw.db")),
        "sqlite_session": lambda: session(scratch.new("session"), watch["session"]),
        "sqlite": lambda: store_subject(SQLiteStore(scratch.new("sqlite") / "store.db")),
        "statekeep_session": lambda: statekeep_session(scratch.new("sk-session")),
        "sqlite_saver": lambda: sqlite_saver(scratch.new("saver"), watch["saver"]),
        "statekeep_saver": lambda: statekeep_saver(scratch.new("sk-saver")),
    }


# -- the report ----------------------------------------------------------------------------------------

LABELS = {
    "raw_file": "raw os.write+fdatasync (orjson in the loop)",
    "alpine_fs": "alpineagents FileStore.write",
    "filestore": "statekeep FileStore.write",
    "raw_sqlite": "raw sqlite3 (BEGIN; upsert; 3 inserts; COMMIT)",
    "sqlite_session": "OpenAI Agents await SQLiteSession.add_items",
    "sqlite": "statekeep SQLiteStore.write",
    "statekeep_session": "statekeep await StatekeepSession.add_items, SQLite",
    "sqlite_saver": "LangGraph SqliteSaver.put",
    "statekeep_saver": "statekeep StatekeepSaver.put, SQLite",
}
# statekeep's subject: (its peer, target on peer µs / statekeep µs)
VERSUS = {
    "filestore": ("alpine_fs", ">= 1.6"),
    "sqlite": ("sqlite_session", ">= 1.3"),
    "statekeep_session": ("sqlite_session", ">= 1.0"),
    "statekeep_saver": ("sqlite_saver", ""),
}


def rows_of(med: common.Medians) -> list[Row]:
    numbers = {name: i for i, name in enumerate(LABELS, 1)}
    rows = []
    for name, label in LABELS.items():
        if name in VERSUS:
            peer, target = VERSUS[name]
            rows.append(med.time_row(f"({numbers[name]}) {label}", name, peer, f"({numbers[peer]})", target))
        else:
            rows.append(med.row(f"({numbers[name]}) {label}", name, "µs"))
    for name in ("alpine_fs", "filestore", "sqlite_session", "sqlite", "sqlite_saver", "statekeep_saver"):
        raw = "raw_file" if name in ("alpine_fs", "filestore") else "raw_sqlite"
        rows.append(med.time_row(f"({numbers[name]}) vs raw: {LABELS[name]}", name, raw, f"({numbers[raw]})"))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = common.parse_args(__doc__, argv)
    cfg = QUICK if args.quick else FULL
    versions = {name: metadata.version(name) for name in PEERS}
    scratch = Scratch()
    began = time.perf_counter()
    shown = ", ".join(f"{k} {v}" for k, v in versions.items())
    common.print_banner(
        "beside its peers", args.quick, f"python {platform.python_version()}, {shown}", scratch, cfg
    )
    samples: dict[str, list[float]] = {}
    watch: dict[str, probes.Connections] = {}
    synchronous: dict[str, set[int]] = {}
    try:
        turns = make_turns(cfg.warm + cfg.turns)

        def timing(name: str, make: Callable[[], Subject]) -> Callable[[], float]:
            def once() -> float:
                subject = make()
                if name in ("sqlite_session", "sqlite_saver"):  # their own settings, as they ship
                    conns = watch[name.split("_")[1]]

                    def warmed() -> None:
                        synchronous.setdefault(name, set()).update(conns.synchronous())

                    subject.warmed = warmed
                return statistics.median(run(subject, turns, cfg.warm).us)

            return once

        runs = [(name, timing(name, make)) for name, make in subjects(scratch, watch).items()]
        common.run_rotated(runs, cfg.reps, scratch, samples)
        print(flush=True)
    finally:
        scratch.cleanup()
    rows = rows_of(common.Medians(samples))
    common.print_table(rows)
    levels = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    shipped = "; ".join(f"{LABELS[k].split(' await ')[-1].split('.')[0]}: synchronous="
                        f"{'/'.join(levels.get(v, str(v)) for v in sorted(s)) or 'n/a'}"
                        for k, s in synchronous.items())  # fmt: skip
    elapsed = time.perf_counter() - began
    print(
        f"\n{cfg.turns} timed writes per subject per rep after {cfg.warm} untimed; medians of per-rep medians.\n"
        "ratio: the peer's (or raw's) µs / statekeep's: >= 1 means statekeep is faster; (+N µs): statekeep's\n"
        "    µs per write above the peer's (negative: below).\n"
        f"The peers' SQLite settings as they ship them: {shipped}; statekeep's: WAL, synchronous=FULL.\n"
        "SQLiteSession and StatekeepSession are async only: awaited from an asyncio loop in this thread.\n"
        f"Took {elapsed:.1f} s."
    )
    if args.json:
        extra = {"peers": versions, "synchronous": {k: sorted(v) for k, v in synchronous.items()}}
        common.write_json(args.json, cfg, args.quick, {"python": platform.python_version()}, scratch, extra,
                          elapsed, rows, samples)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

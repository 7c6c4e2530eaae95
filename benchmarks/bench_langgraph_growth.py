"""How a LangGraph thread grows: bytes stored by StatekeepSaver beside LangGraph's own savers.

Run from the repository::

    .venv/bin/python benchmarks/bench_langgraph_growth.py            # the full run (a few minutes)
    .venv/bin/python benchmarks/bench_langgraph_growth.py --quick    # a small run, for the smoke test
    .venv/bin/python benchmarks/bench_langgraph_growth.py --json out.json

One graph (a ``messages`` channel with LangGraph's ``add_messages`` reducer, one node that
answers), one thread, ``steps`` invocations: each sends a ~1 KB human message and the node
appends a ~1 KB AI message, so the channel grows by two messages a step and every step
writes the checkpoints LangGraph writes (input, loop). The same run on three savers:

- ``StatekeepSaver`` on a ``SQLiteStore`` (its folder's bytes once the store is closed);
- LangGraph's ``PostgresSaver`` on a throwaway PostgreSQL (tests/support/servers.py): the
  ``pg_total_relation_size`` of its tables (checkpoints, blobs, writes, migrations);
- LangGraph's ``SqliteSaver`` (its database file's bytes once closed).

Then StatekeepSaver's thread goes on to twice the steps (linear growth: bytes at 2x steps
/ bytes at 1x steps), and reading its newest checkpoint (``get_tuple``) is timed against
reading the same value stored whole (one checkpoint holding the same messages, in a thread
of its own in the same store), alternated, medians.
"""

from __future__ import annotations

import platform
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, TypedDict

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from tests.support import servers  # noqa: E402

import common  # noqa: E402
from common import POOL, Row, Scratch  # noqa: E402
from statekeep import SQLiteStore  # noqa: E402

PEERS = ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres", "langgraph-checkpoint-sqlite")
MB = 1024 * 1024


@dataclass(frozen=True)
class Config:
    states: int  # always 1 thread (the banner's workload line)
    turns: int  # steps of the thread measured on every saver
    reps: int  # reads timed, each way
    read_reps: int  # unused: the banner's
    size: int  # bytes of each message's text


FULL = Config(states=1, turns=300, reps=41, read_reps=0, size=1000)
QUICK = Config(states=1, turns=20, reps=5, read_reps=0, size=1000)


def text(i: int, size: int) -> str:
    start = (i * 7919) % (len(POOL) - size)
    return POOL[start : start + size]


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def make_graph(saver: Any, size: int) -> Any:
    def answer(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(text(n, size), id=f"ai-{n}")]}

    builder = StateGraph(State)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


def run_steps(graph: Any, first: int, last: int, size: int) -> None:
    config = {"configurable": {"thread_id": "grow"}}
    for step in range(first, last):
        graph.invoke({"messages": [HumanMessage(text(step * 2 + 1, size), id=f"human-{step}")]}, config)


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def statekeep_run(folder: Path, cfg: Config) -> tuple[int, int]:
    """Bytes of the StatekeepSaver's store at ``turns`` steps and at twice that."""
    from statekeep.adapters.langgraph import StatekeepSaver

    sizes = []
    for first, last in ((0, cfg.turns), (cfg.turns, 2 * cfg.turns)):
        store = SQLiteStore(folder / "store.db")
        try:
            run_steps(make_graph(StatekeepSaver(store), cfg.size), first, last, cfg.size)
        finally:
            store.close()
        sizes.append(folder_bytes(folder))
    return sizes[0], sizes[1]


def sqlite_saver_run(folder: Path, cfg: Config) -> int:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(folder / "graph.db", check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        run_steps(make_graph(saver, cfg.size), 0, cfg.turns, cfg.size)
    finally:
        conn.close()
    return folder_bytes(folder)


def postgres_saver_run(dsn: str, cfg: Config) -> int:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        run_steps(make_graph(saver, cfg.size), 0, cfg.turns, cfg.size)
        with saver.conn.cursor() as cur:
            cur.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r' "
                "AND n.nspname = 'public' AND c.relname LIKE 'checkpoint%'"
            )
            row = cur.fetchone()
    assert row is not None
    return int(next(iter(row.values())) if isinstance(row, dict) else row[0])


def read_times(folder: Path, cfg: Config) -> tuple[list[float], list[float], int]:
    """Seconds per ``get_tuple`` of the grown thread's newest checkpoint, and of one holding
    the same value whole; the number of messages read."""
    from statekeep.adapters.langgraph import StatekeepSaver

    store = SQLiteStore(folder / "store.db")
    try:
        saver = StatekeepSaver(store)
        newest = saver.get_tuple({"configurable": {"thread_id": "grow"}})
        assert newest is not None
        whole_config = {"configurable": {"thread_id": "whole", "checkpoint_ns": ""}}
        cp = newest.checkpoint
        saver.put(whole_config, cp, newest.metadata, dict(cp["channel_versions"]))
        grown: Callable[[], object] = lambda: saver.get_tuple({"configurable": {"thread_id": "grow"}})  # noqa: E731
        whole: Callable[[], object] = lambda: saver.get_tuple({"configurable": {"thread_id": "whole"}})  # noqa: E731
        check = saver.get_tuple({"configurable": {"thread_id": "whole"}})
        assert check is not None and check.checkpoint["channel_values"] == cp["channel_values"]
        a: list[float] = []
        b: list[float] = []
        for rep in range(cfg.reps):
            first, second = (grown, whole) if rep % 2 == 0 else (whole, grown)
            t1, t2 = common.timed(first), common.timed(second)
            a.append(t1 if first is grown else t2)
            b.append(t2 if first is grown else t1)
        return a, b, len(cp["channel_values"]["messages"])
    finally:
        store.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = common.parse_args(__doc__, argv)
    cfg = QUICK if args.quick else FULL
    versions = {name: metadata.version(name) for name in PEERS}
    scratch = Scratch()
    began = time.perf_counter()
    shown = ", ".join(f"{k} {v}" for k, v in versions.items())
    common.print_banner("LangGraph thread growth", args.quick, f"python {platform.python_version()}, {shown}",
                        scratch, cfg)  # fmt: skip
    try:
        server = servers.start_postgres()
    except servers.ServerMissing as exc:
        print(f"cannot run: {exc}", file=sys.stderr)
        scratch.cleanup()
        return 2
    samples: dict[str, list[float]] = {}
    try:
        ours = scratch.new("statekeep")
        at_once, at_twice = statekeep_run(ours, cfg)
        print(f"  StatekeepSaver: {at_once / MB:.2f} MB at {cfg.turns} steps", flush=True)
        pg = postgres_saver_run(server.dsn, cfg)
        print(f"  PostgresSaver: {pg / MB:.2f} MB", flush=True)
        lite = sqlite_saver_run(scratch.new("sqlitesaver"), cfg)
        print(f"  SqliteSaver: {lite / MB:.2f} MB", flush=True)
        grown, whole, messages = read_times(ours, cfg)
    finally:
        server.remove()
        scratch.cleanup()
    samples = {
        "statekeep": [at_once / MB],
        "postgres": [pg / MB],
        "sqlite": [lite / MB],
        "twice": [at_twice / MB],
        "grown": [t * 1e6 for t in grown],
        "whole": [t * 1e6 for t in whole],
    }
    med = common.Medians(samples)
    n = cfg.turns
    rows: list[Row] = [
        med.row(f"(1) StatekeepSaver on SQLiteStore, {n} steps", "statekeep", "MB"),
        med.row(f"(2) PostgresSaver, {n} steps (its tables)", "postgres", "MB"),
        med.row(f"(3) SqliteSaver, {n} steps (its file)", "sqlite", "MB"),
        med.ratio_row("(1) vs PostgresSaver: bytes", "statekeep", "MB", "postgres", "(2)", "<= 0.1"),
        med.ratio_row("(1) vs SqliteSaver: bytes", "statekeep", "MB", "sqlite", "(3)"),
        med.ratio_row(
            f"(4) StatekeepSaver at {2 * n} steps vs {n}", "twice", "MB", "statekeep", "(1)", "<= 2.2"
        ),
        med.ratio_row(
            f"(5) get_tuple newest ({messages} messages) vs stored whole",
            "grown",
            "µs",
            "whole",
            "whole",
            "<= 1.5",
        ),
    ]
    common.print_table(rows)
    elapsed = time.perf_counter() - began
    print(
        f"\nEach step: one invoke, a ~{cfg.size} B human message in and a ~{cfg.size} B AI message out.\n"
        "(1)-(4): bytes on disk (SQLite: the folder once closed; PostgreSQL: pg_total_relation_size).\n"
        f"(5): medians of {cfg.reps} reads each way, alternated; 'whole': one checkpoint holding the same\n"
        f"    value in a thread of its own in the same store. Took {elapsed:.1f} s."
    )
    if args.json:
        common.write_json(args.json, cfg, args.quick, {"python": platform.python_version()}, scratch,
                          {"peers": versions}, elapsed, rows, samples)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

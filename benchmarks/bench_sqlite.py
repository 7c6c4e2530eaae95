"""SQLiteStore benchmarks, each measured side by side with raw sqlite3 doing the same work.

Run from the repository::

    .venv/bin/python benchmarks/bench_sqlite.py            # the full run
    .venv/bin/python benchmarks/bench_sqlite.py --quick    # a small run, a smoke test only
    .venv/bin/python benchmarks/bench_sqlite.py --json out.json

The workload is bench_core's: 20 States x 50 turns; each turn adds 3 entries (text fields
of about 800 B, 200 B and 2 KB) and replaces the snapshot, in one durable write. The raw
baseline uses the same table layout as SQLiteStore (its own migration statements), WAL and
synchronous=FULL, and per turn one transaction that inserts the same encoded bytes into
``entries`` and upserts the ``states`` row, States one after another. Measures alternate
repetition by repetition; the report gives medians and ratios (value / baseline).
"""

from __future__ import annotations

import platform
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

import common
import small_reads
from bench_core import Turn, make_workload, store_concurrent, store_sequential
from bench_sqlite_pages import measure_pages, page_rows
from common import ListedRow, Scratch, settle, state_id, timed
from statekeep import SQLiteStore
from statekeep._core.query import make_query
from statekeep.stores._sqlite._listing import listing_sql
from statekeep.stores._sqlite._rows import listing_columns
from statekeep.stores._sqlite._sql import LISTING_COLUMNS, MIGRATIONS


@dataclass(frozen=True)
class Config:
    states: int  # States written in the turn benchmarks
    turns: int  # turns per State
    reps: int  # repetitions of each turn benchmark (median reported)
    load_entries: int  # entries of the State loaded whole
    list_states: int  # States listed
    read_reps: int  # repetitions of the load and list timings
    page_sizes: tuple[int, ...]  # States in the store, for the first page of a listing


FULL = Config(
    states=20, turns=50, reps=5, load_entries=10_000, list_states=1_000, read_reps=15,
    page_sizes=(1_000, 10_000, 100_000),
)  # fmt: skip
QUICK = Config(
    states=4, turns=8, reps=1, load_entries=600, list_states=40, read_reps=2, page_sizes=(1_000, 2_000)
)


# -- raw sqlite3 ---------------------------------------------------------------------------


def raw_connect(path: Path) -> sqlite3.Connection:
    """A connection set up as SQLiteStore's are (WAL, synchronous=FULL, foreign keys)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def raw_database(path: Path) -> sqlite3.Connection:
    conn = raw_connect(path)
    for step in MIGRATIONS:
        for sql in step:
            conn.execute(sql)
    return conn


_UPDATES = ", ".join(f"{c} = excluded.{c}" for c in LISTING_COLUMNS.split(", "))
_RAW_UPSERT = (
    f"INSERT INTO states (namespace, id, next_seq, snapshot, {LISTING_COLUMNS}) "
    "VALUES ('default', ?, ?, CAST(? AS TEXT), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    f"ON CONFLICT (namespace, id) DO UPDATE SET next_seq = excluded.next_seq, snapshot = excluded.snapshot, {_UPDATES}"
)
_RAW_INSERT = "INSERT INTO entries (namespace, state_id, seq, data) VALUES ('default', ?, ?, CAST(? AS TEXT))"


RawTurn = tuple[str, list[dict[str, Any]], dict[str, Any], tuple[Any, ...]]


def raw_params(work: list[list[Turn]], name: Callable[[int], str] = state_id) -> list[list[RawTurn]]:
    """Per State and turn: its id, entries, snapshot and the listing columns of its States
    row (those worked out beforehand; the JSON is encoded in :func:`raw_commit`, timed);
    ``name(i)`` is the id of the i-th State."""
    out = []
    for i, turns in enumerate(work):
        sid = name(i)
        rows = []
        for turn in turns:
            columns, _ = listing_columns(sid, turn.snap)  # the columns the store fills
            rows.append((sid, turn.entries, turn.snapshot, tuple(columns)))
        out.append(rows)
    return out


def raw_commit(conn: sqlite3.Connection, turn: RawTurn) -> None:
    """One turn in one transaction: the entries and snapshot encoded with orjson, BEGIN
    IMMEDIATE, upsert the States row (first: the entries refer to it), insert the entries,
    COMMIT."""
    sid, entries, snapshot, columns = turn
    dumps = orjson.dumps
    rows = [(sid, e["seq"], dumps(e)) for e in entries]
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(_RAW_UPSERT, (sid, entries[-1]["seq"] + 1, dumps(snapshot), *columns))
    conn.executemany(_RAW_INSERT, rows)
    conn.execute("COMMIT")


def raw_sequential(root: Path, work: list[list[Turn]]) -> float:
    """One transaction per turn (encode, upsert the State, insert the entries), in sequence. Turns/s."""
    params = raw_params(work)
    conn = raw_database(root / "raw.db")
    try:
        settle()
        start = time.perf_counter()
        for turns in params:
            for turn in turns:
                raw_commit(conn, turn)
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
    return sum(map(len, params)) / elapsed


def sqlite_sequential(scratch: Scratch, work: list[list[Turn]]) -> float:
    store = SQLiteStore(scratch.new("store-seq") / "store.db")
    try:
        store.list()  # open the file and make the schema outside the timing, as raw does
        return store_sequential(store, work)
    finally:
        store.close()


def sqlite_concurrent(scratch: Scratch, work: list[list[Turn]]) -> float:
    store = SQLiteStore(scratch.new("store-conc") / "store.db")
    try:
        store.list()
        return store_concurrent(store, work)
    finally:
        store.close()


# -- load and list --------------------------------------------------------------------------


def raw_load(conn: sqlite3.Connection, sid: str) -> list[dict[str, Any]]:
    """The State's entries in seq order, each parsed with orjson."""
    loads = orjson.loads
    rows = conn.execute("SELECT data FROM entries WHERE state_id = ? ORDER BY seq", (sid,)).fetchall()
    return [loads(d) for (d,) in rows]


def raw_list_query(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    """SQLiteStore's listing query through the index, rows as plain tuples."""
    text, params = listing_sql("default", make_query(), "0001-01-01T00:00:00.000000+00:00")
    return conn.execute(text, params).fetchall()


def raw_list_rows(conn: sqlite3.Connection) -> list[ListedRow]:
    """The listing query, each row made into a row with SavedState's fields (times parsed):
    what SQLiteStore.list returns, built by hand. The database gives the order."""
    return page_rows(raw_list_query(conn))


def measure_list(scratch: Scratch, cfg: Config, samples: dict[str, list[float]]) -> None:
    """(5): SQLiteStore.list of ``cfg.list_states`` States against the same indexed query
    done raw, alternating."""
    many = common.fill_many_states(SQLiteStore(scratch.new("list") / "store.db"), cfg.list_states)
    raw = raw_connect(many.path)
    try:
        assert common.same_rows(many.list(), raw_list_rows(raw))
        assert len(raw_list_query(raw)) == cfg.list_states
        for _ in range(cfg.read_reps):
            samples.setdefault("list_raw_query", []).append(timed(lambda: raw_list_query(raw)) * 1e3)
            samples.setdefault("list_raw_rows", []).append(timed(lambda: raw_list_rows(raw)) * 1e3)
            samples.setdefault("list_sqlite", []).append(timed(many.list) * 1e3)
    finally:
        raw.close()
        many.close()


# -- the report -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = common.parse_args(__doc__, argv)
    cfg = QUICK if args.quick else FULL

    scratch = Scratch()
    began = time.perf_counter()
    versions = f"python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"
    common.print_banner("SQLiteStore benchmark", args.quick, versions, scratch, cfg)
    samples: dict[str, list[float]] = {}
    try:
        work = make_workload(cfg.states, cfg.turns)
        runs: list[tuple[str, Callable[[], float]]] = [
            ("raw_seq", lambda: raw_sequential(scratch.new("raw-seq"), work)),
            ("sqlite_seq", lambda: sqlite_sequential(scratch, work)),
            ("sqlite_concurrent", lambda: sqlite_concurrent(scratch, work)),
        ]
        common.run_rotated(runs, cfg.reps, scratch, samples)

        # Load one State of many entries: SQLiteStore.read against the raw query + parse.
        big = common.fill_big_state(SQLiteStore(scratch.new("load") / "store.db"), cfg.load_entries)
        raw = raw_connect(big.path)
        record = big.read("big")
        assert record is not None and record.entries == raw_load(raw, "big")
        for _ in range(cfg.read_reps):
            samples.setdefault("load_raw", []).append(timed(lambda: raw_load(raw, "big")) * 1e3)
            samples.setdefault("load_sqlite", []).append(timed(lambda: big.read("big")) * 1e3)
        raw.close()
        big.close()
        small = small_reads.fill(SQLiteStore(scratch.new("small-read") / "store.db"))
        raw = raw_connect(small.path)
        small_reads.measure(small, lambda: raw_load(raw, small_reads.SID), cfg.read_reps, 200, samples)
        raw.close()
        small.close()
        print("  load done", flush=True)

        # List many States: SQLiteStore.list against the same indexed query done raw.
        measure_list(scratch, cfg, samples)
        print("  list done", flush=True)

        # The first page of 50, unfiltered, by agent and by label, at each store size.
        measure_pages(scratch, cfg.page_sizes, cfg.read_reps, samples)
        print("  pages done\n", flush=True)
    finally:
        scratch.cleanup()

    n = cfg.states
    med = common.Medians(samples)
    ratio_row = med.ratio_row
    load = f"(4) SQLiteStore.read, {cfg.load_entries:,} entries"
    listing = f"(5) SQLiteStore.list, {cfg.list_states:,} States"
    rows = [
        med.row("(1) raw sqlite3, sequential", "raw_seq", "turns/s"),
        ratio_row(
            "(2) SQLiteStore.write, sequential",
            "sqlite_seq",
            "turns/s",
            "raw_seq",
            "(1)",
            ">= 0.8",
            overhead=True,
        ),
        ratio_row(
            f"(3) SQLiteStore.awrite, {n} concurrent",
            "sqlite_concurrent",
            "turns/s",
            "raw_seq",
            "(1)",
            ">= 3",
        ),
        ratio_row(load, "load_sqlite", "ms", "load_raw", "raw fetch+orjson", "<= 1.5"),
        ratio_row(
            f"(4) SQLiteStore.read, {small_reads.ENTRIES} entries",
            "small_read",
            "µs",
            "small_read_raw",
            "raw fetch+orjson",
            "<= 1.3",
        ),
        ratio_row(listing, "list_sqlite", "ms", "list_raw_rows", "raw query+rows", "<= 1.3"),
        ratio_row(listing, "list_sqlite", "ms", "list_raw_query", "raw indexed query"),
    ]
    big, small = max(cfg.page_sizes), min(cfg.page_sizes)
    for kind in ("all", "agent", "label"):
        page = f"(6) list(limit=50{'' if kind == 'all' else f', {kind}=...'})"
        rows.append(
            ratio_row(f"{page}, {big:,} States", f"page_{kind}_{big}", "ms", f"page_raw_{kind}_{big}",
                      "raw query+rows", "<= 1.3")
        )  # fmt: skip
        for size in sorted(cfg.page_sizes)[1:]:  # the same page in a larger store: no slower
            rows.append(
                ratio_row(f"{page}, {size:,} vs {small:,} States", f"page_{kind}_{size}", "ms",
                          f"page_{kind}_{small}", f"{small:,} States")
            )  # fmt: skip
    common.print_table(rows)
    elapsed = time.perf_counter() - began
    print(
        f"\n{cfg.states * cfg.turns} turns per run. Ratios: value / baseline.\n"
        "(1) per turn: encode with orjson, BEGIN IMMEDIATE, upsert the States row, insert 3 entries, COMMIT\n"
        "    (WAL, synchronous=FULL). (2) (+N µs): the µs per write above (1)'s in the same run.\n"
        "(5) raw indexed query: the store's listing SQL, rows as tuples; +rows: each made into a row with\n"
        "    SavedState's fields (times parsed, labels decoded, a frozen slotted dataclass), in the order\n"
        "    the database gives.\n"
        "(6) the first page of 50 (the index range, then 50 rows built) against the same indexed query\n"
        "    done raw; States filled with raw bulk inserts of the store's own listing columns.\n"
        f"Took {elapsed:.1f} s."
    )
    if args.json:
        versions = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
        common.write_json(args.json, cfg, args.quick, versions, scratch, {}, elapsed, rows, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())

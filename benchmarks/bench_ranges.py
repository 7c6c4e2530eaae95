"""Range reads: the last 10 entries of a long history against reading all of it, per store.

Run from the repository::

    .venv/bin/python benchmarks/bench_ranges.py            # the full run (a few minutes)
    .venv/bin/python benchmarks/bench_ranges.py --quick    # a small run, a smoke test only
    .venv/bin/python benchmarks/bench_ranges.py --json out.json

On each store (Memory, File, SQLite, and PostgreSQL and Redis on throwaway servers of
tests/support/servers.py, skipped with a note when their binaries are missing) one State, "big", of
100,000 entries (text fields of 150, 450 and 700 B: entries of about 200 to 800 bytes), and
one, "small", of 100, both filled through the store's own ``write``: in batches of 1,000
entries, then the last 30 in 10 writes of 3 as an agent's turns write them (so both States
end alike). Measured side by side in each repetition (a range read: the median of 25 calls, the two range
reads called in turn):

- (a) ``read("big", since=99_990)``: its last 10 entries;
- (b) ``read("big")``: all of it. Target: (a) at most 0.01 x (b)'s time;
- (c) ``read("small", since=90)``: the last 10 of 100. Target: (a) at most 1.5 x (c)'s time,
  the cost grows with what is returned, not with the history.

FileStore also: reading back from the log's end (forced, whatever ``since``) against a whole
read cut in Python, at ``since`` = 90 %, 50 % and 10 % of the history, which is where
FileStore's choice between the two (``reads.BACKWARDS_SHARE``) comes from; and its public
``read(since=...)`` (that choice) against the whole read cut. Ratios are the median of each
repetition's ratio (the machine's speed drifts; ratios much less than times).
"""

from __future__ import annotations

import platform
import statistics
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
from common import POOL, Row, Scratch, make_snapshot  # noqa: E402
from statekeep import FileStore, MemoryStore, Record, SQLiteStore, Store  # noqa: E402
from statekeep._core.ranges import cut  # noqa: E402
from statekeep.stores._file import reads  # noqa: E402

TAIL = 10
BATCH = 1_000
TURNS = 10  # the last writes: 3 entries each
# (kind, size of its text field in bytes): entries of about 200 to 800 bytes encoded.
KINDS = (("message", 450), ("tool_call", 150), ("tool_result", 700))


@dataclass(frozen=True)
class Config:
    entries: int  # entries of the big State
    small: int  # entries of the small one
    reps: int  # repetitions (each: one whole read, and a sample of each range read)
    calls: int  # calls a range-read sample is the median of (one is well under a millisecond)


FULL = Config(entries=100_000, small=100, reps=5, calls=25)
QUICK = Config(entries=2_000, small=100, reps=2, calls=3)


def make_entry(seq: int) -> dict[str, Any]:
    kind, size = KINDS[seq % len(KINDS)]
    start = (seq * 7919) % (len(POOL) - size)
    entry: dict[str, Any] = {"seq": seq, "kind": kind, "role": "assistant" if kind == "message" else "tool"}
    if kind != "message":
        entry["call_id"] = f"call_{seq // len(KINDS)}"
    entry["text"] = POOL[start : start + size]
    return entry


def fill(store: Store, sid: str, count: int) -> None:
    """``count`` entries through the store's own write: BATCH a write, then the last
    TURNS * 3 in TURNS writes of 3, as an agent's turns write them (so the big and the small
    State end alike: FileStore checks the last write whole when reading back)."""
    bulk = max(0, count - TURNS * 3)
    for first in range(0, bulk, BATCH):
        batch = [make_entry(seq) for seq in range(first, min(first + BATCH, bulk))]
        store.write(sid, batch, make_snapshot(0, first // 3), create=first == 0)
    for first in range(bulk, count, 3):
        batch = [make_entry(seq) for seq in range(first, min(first + 3, count))]
        store.write(sid, batch, make_snapshot(0, first // 3), create=first == 0)


def per_call(fns: Sequence[Callable[[], object]], calls: int) -> list[float]:
    """Milliseconds one call of each of ``fns`` takes: the median of ``calls`` calls, the
    functions called in turn (so that their ratio is taken under the same load), after one
    untimed call each (a read right after a whole read of 100,000 entries pays for freeing them)."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(calls):
        for fn, got in zip(fns, times, strict=True):
            got.append(common.timed(fn))
    return [statistics.median(got) * 1e3 for got in times]


def ratio_row(
    measure: str, samples: dict[str, list[float]], key: str, base: str, base_name: str, target: str = ""
) -> Row:
    """``key``'s median (ms) against ``base``'s; the ratio is the median of the repetitions' ratios."""
    top, bottom = samples[key], samples[base]
    r = statistics.median(t / b for t, b in zip(top, bottom, strict=True))
    met = None
    if target:
        op, bound = target.split()
        met = r >= float(bound) if op == ">=" else r <= float(bound)
    return Row(
        measure,
        statistics.median(top),
        "ms",
        base_name,
        statistics.median(bottom),
        r,
        target,
        met,
        common.spread(top),
    )


# -- the stores ----------------------------------------------------------------------------


def open_stores(scratch: Scratch, quick: bool) -> tuple[list[tuple[str, Callable[[], Store]]], list[Any]]:
    """(name, make a fresh store) per backend, and the servers started (removed by the caller)."""
    made: list[tuple[str, Callable[[], Store]]] = [
        ("Memory", MemoryStore),
        ("File", lambda: FileStore(scratch.new("file"))),
        ("SQLite", lambda: SQLiteStore(scratch.new("sqlite") / "store.db")),
    ]
    started: list[Any] = []
    try:
        pg = servers.start_postgres()
        started.append(pg)
        from statekeep.stores import PostgresStore

        made.append(("Postgres", lambda: PostgresStore(pg.dsn, schema=f"bench_{uuid.uuid4().hex[:10]}")))
    except servers.ServerMissing as exc:
        print(f"  Postgres skipped: {exc}", flush=True)
    try:
        rd = servers.start_redis()
        started.append(rd)
        from statekeep.stores import RedisStore

        made.append(("Redis", lambda: RedisStore(rd.url, prefix=f"bench_{uuid.uuid4().hex[:10]}:")))
    except servers.ServerMissing as exc:
        print(f"  Redis skipped: {exc}", flush=True)
    return made, started


def measure_store(name: str, store: Store, cfg: Config, samples: dict[str, list[float]]) -> None:
    """Keys ``<name>_tail``, ``<name>_whole``, ``<name>_small`` (ms)."""
    n, since = cfg.entries, cfg.entries - TAIL
    began = time.perf_counter()
    fill(store, "big", n)
    fill(store, "small", cfg.small)
    filled = time.perf_counter() - began
    whole = store.read("big")
    assert whole is not None and len(whole.entries) == n
    assert store.read("big", since=since) == Record(whole.entries[since:], whole.snapshot)
    small = store.read("small", since=cfg.small - TAIL)
    assert small is not None and [e["seq"] for e in small.entries] == list(range(cfg.small - TAIL, cfg.small))
    del whole
    for _ in range(cfg.reps):
        samples.setdefault(f"{name}_whole", []).append(common.timed(lambda: store.read("big")) * 1e3)
        tail, small = per_call(
            [lambda: store.read("big", since=since), lambda: store.read("small", since=cfg.small - TAIL)],
            cfg.calls,
        )
        samples.setdefault(f"{name}_tail", []).append(tail)
        samples.setdefault(f"{name}_small", []).append(small)
    print(f"  {name}: filled {n:,} + {cfg.small} entries in {filled:.1f} s, measured", flush=True)


# -- FileStore: reading backwards or whole ----------------------------------------------------

SHARES = (0.9, 0.5, 0.3, 0.1)  # since, as a share of the history


def file_backwards(store: FileStore, since: int) -> Record:
    """Read back from the log's end whatever ``since`` (the path FileStore takes near the end)."""
    got = reads.read_range(store._folder, "big", since, share=1.0)
    assert got is not None
    return got() if callable(got) else got


def file_whole_cut(store: FileStore, since: int) -> Record:
    """Scan the log whole and cut (the path FileStore takes for since=0, then a slice)."""
    parse = reads.read_state(store._folder, "big")
    assert parse is not None
    return cut(parse(), since)


def measure_file_paths(scratch: Scratch, cfg: Config, samples: dict[str, list[float]]) -> None:
    """Keys ``file_back_<p>``, ``file_cut_<p>``, ``file_read_<p>`` (ms) for each share p."""
    store = FileStore(scratch.new("file-paths"))
    try:
        fill(store, "big", cfg.entries)
        whole = store.read("big")
        assert whole is not None
        for share in SHARES:
            since = int(cfg.entries * share)
            want = Record(whole.entries[since:], whole.snapshot)
            assert file_backwards(store, since) == want == file_whole_cut(store, since)
            assert store.read("big", since=since) == want
        del whole
        for _ in range(cfg.reps):
            for share in SHARES:
                since = int(cfg.entries * share)
                p = f"{share:.0%}"
                samples.setdefault(f"file_back_{p}", []).append(
                    common.timed(lambda s=since: file_backwards(store, s)) * 1e3
                )
                samples.setdefault(f"file_cut_{p}", []).append(
                    common.timed(lambda s=since: file_whole_cut(store, s)) * 1e3
                )
                samples.setdefault(f"file_read_{p}", []).append(
                    common.timed(lambda s=since: store.read("big", since=s)) * 1e3
                )
                samples.setdefault(f"file_readcut_{p}", []).append(
                    common.timed(lambda s=since: cut(store.read("big"), s)) * 1e3
                )
    finally:
        store.close()
    print("  File: backwards against whole measured", flush=True)


# -- running --------------------------------------------------------------------------------


def make_rows(cfg: Config, names: Sequence[str], samples: dict[str, list[float]]) -> list[Row]:
    n, since = cfg.entries, cfg.entries - TAIL
    rows = []
    for i, name in enumerate(names, 1):
        tail = f"({i}) {name}: read(since={since:_}), last {TAIL} of {n:,}"
        rows.append(
            ratio_row(tail, samples, f"{name}_tail", f"{name}_whole", f"read(), all {n:,}", "<= 0.01")
        )
        rows.append(
            ratio_row(tail, samples, f"{name}_tail", f"{name}_small", f"last {TAIL} of {cfg.small}", "<= 1.5")
        )
    f = len(names) + 1
    for share in SHARES:
        p, since = f"{share:.0%}", int(n * share)
        rows.append(
            ratio_row(
                f"({f}) File, since={since:_} ({p}): backwards",
                samples,
                f"file_back_{p}",
                f"file_cut_{p}",
                "whole, cut",
            )
        )
    for share in SHARES:
        p, since = f"{share:.0%}", int(n * share)
        rows.append(
            ratio_row(
                f"({f + 1}) File, read(since={since:_}) ({p})",
                samples,
                f"file_read_{p}",
                f"file_readcut_{p}",
                "read() cut",
                "<= 1.25",
            )
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = common.parse_args(__doc__, argv)
    cfg = QUICK if args.quick else FULL
    scratch = Scratch()
    began = time.perf_counter()
    print(
        f"statekeep range-read benchmark{' (--quick: numbers are not meaningful)' if args.quick else ''}\n"
        f"python {platform.python_version()} on {platform.platform()}\n"
        f"scratch: {scratch.root} ({scratch.fs})\n"
        f"a State of {cfg.entries:,} entries (~200-800 B) and one of {cfg.small}, filled with the store's "
        f"own write, {BATCH:,} entries a write then {TURNS} writes of 3; {cfg.reps} reps, a range read's "
        f"sample the median of {cfg.calls} calls\n",
        flush=True,
    )
    samples: dict[str, list[float]] = {}
    names: list[str] = []
    made, started = open_stores(scratch, args.quick)
    try:
        for name, make in made:
            store = make()
            try:
                measure_store(name, store, cfg, samples)
            finally:
                store.close()
            names.append(name)
        measure_file_paths(scratch, cfg, samples)
    finally:
        for server in started:
            server.remove()
        scratch.cleanup()
    print()
    rows = make_rows(cfg, names, samples)
    common.print_table(rows)
    elapsed = time.perf_counter() - began
    print(
        "\nRatios: value / baseline, the median of the repetitions' ratios.\n"
        f"(1)-({len(names)}) first row: the last {TAIL} against the whole history; second: the last {TAIL} "
        f"of {cfg.entries:,} against the last {TAIL} of {cfg.small}.\n"
        f"({len(names) + 1}) FileStore reading back from the log's end, against scanning it whole and "
        "cutting (reads.read_range / read_state, no store overhead).\n"
        f"({len(names) + 2}) FileStore.read(since=...) (its choice, BACKWARDS_SHARE = {reads.BACKWARDS_SHARE}) "
        "against read() cut in Python; where it scans whole this is the same work\n"
        "    (the target allows for the noise of a shared machine).\n"
        f"Took {elapsed:.1f} s."
    )
    if args.json:
        versions = {"python": platform.python_version()}
        extra = {"backends": names}
        common.write_json(args.json, cfg, args.quick, versions, scratch, extra, elapsed, rows, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())

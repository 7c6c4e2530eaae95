"""Core benchmarks for statekeep, each measured side by side with a raw baseline.

Run from the repository::

    .venv/bin/python benchmarks/bench_core.py            # the full run (a few minutes: it lists 10,000 States)
    .venv/bin/python benchmarks/bench_core.py --quick    # a small run, for the smoke test
    .venv/bin/python benchmarks/bench_core.py --json out.json

The workload (from the issue): 20 States x 50 turns; each turn adds 3 entries (text fields
of about 800 B, 200 B and 2 KB) and replaces the snapshot, in one durable write. Every
measure runs in this process next to its baseline, alternating repetition by repetition,
and the report gives medians and ratios: the numbers are noisy on a small VM, the ratios
much less so.

Scratch folders are made on the repository's disk, never in memory: the system temp folder
when it is on the same device as the repository and not a tmpfs, else ``.bench-tmp/``
inside the repository. Both are removed at the end.
"""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

import common
import hops
import small_reads
from common import ListedRow, Row, Scratch, settle, state_id, timed
from rawio import encode_turn
from statekeep import FileStore, MemoryStore, Store


@dataclass(frozen=True)
class Config:
    states: int  # States written in the turn benchmarks
    turns: int  # turns per State
    reps: int  # repetitions of each turn benchmark (median reported)
    load_entries: int  # entries of the State loaded whole
    list_states: int  # States listed
    read_reps: int  # repetitions of the load and list timings
    calls: int  # calls per side in the sync-vs-async overhead measure
    hop_calls: int  # no-op writes per path in the hand-off measure
    cold_mb: int  # history of the big State in the cold-append measure, MB


FULL = Config(
    states=20,
    turns=50,
    reps=5,
    load_entries=10_000,
    list_states=10_000,
    read_reps=9,
    calls=2_000,
    hop_calls=2_000,
    cold_mb=50,
)
QUICK = Config(
    states=4,
    turns=8,
    reps=1,
    load_entries=600,
    list_states=40,
    read_reps=2,
    calls=100,
    hop_calls=100,
    cold_mb=2,
)


# -- the workload ------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One turn: what a store is given, and the same bytes for the raw baselines."""

    entries: list[dict[str, Any]]
    snapshot: dict[str, Any]
    lines: bytes  # the entries as log lines, exactly as FileStore appends them
    snap: bytes  # the snapshot as FileStore writes it


def make_workload(states: int, turns: int) -> list[list[Turn]]:
    def turn(entries: list[dict[str, Any]], snapshot: dict[str, Any]) -> Turn:
        lines = b"".join(orjson.dumps(e) + b"\n" for e in entries)
        return Turn(entries, snapshot, lines, orjson.dumps(snapshot))

    return common.make_workload(states, turns, turn)


# -- raw baselines ---------------------------------------------------------------------------


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def raw_append_sequential(root: Path, work: list[list[Turn]]) -> float:
    """(1) Per turn the entry lines + snapshot JSON encoded with orjson, one os.write of
    them, then fdatasync; one file per State, States one after another. Returns turns/s."""
    settle()
    start = time.perf_counter()
    for i, turns in enumerate(work):
        fd = os.open(
            root / f"{state_id(i)}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600
        )
        try:
            for turn in turns:
                _write_all(fd, encode_turn(turn.entries, turn.snapshot))
                os.fdatasync(fd)
        finally:
            os.close(fd)
    return sum(map(len, work)) / (time.perf_counter() - start)


def raw_append_threads(root: Path, work: list[list[Turn]]) -> float:
    """(1)'s encode + write + fdatasync with one thread per State, all at once: what appends
    alone reach concurrently with one file per State. Returns turns/s."""
    barrier = threading.Barrier(len(work) + 1)
    errors: list[BaseException] = []

    def worker(i: int, turns: list[Turn]) -> None:
        barrier.wait()
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
            fd = os.open(root / f"{state_id(i)}.jsonl", flags, 0o600)
            try:
                for turn in turns:
                    _write_all(fd, encode_turn(turn.entries, turn.snapshot))
                    os.fdatasync(fd)
            finally:
                os.close(fd)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i, turns)) for i, turns in enumerate(work)]
    for thread in threads:
        thread.start()
    settle()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return sum(map(len, work)) / elapsed


def _raw_protocol_state(root_fd: int, sid: str, turns: Sequence[Turn]) -> None:
    """FileStore's protocol by hand: each turn's entry lines and its snapshot appended to
    the log in one write, then one fdatasync of the log. The folder is made (and its parent
    fsync'd) first."""
    os.mkdir(sid, 0o700, dir_fd=root_fd)
    os.fsync(root_fd)
    folder = os.open(sid, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root_fd)
    try:
        log = os.open(
            "log.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600, dir_fd=folder
        )
        try:
            for turn in turns:
                _write_all(log, encode_turn(turn.entries, turn.snapshot))
                os.fdatasync(log)
        finally:
            os.close(log)
    finally:
        os.close(folder)


def raw_protocol_sequential(root: Path, work: list[list[Turn]]) -> float:
    """(2) FileStore's protocol by hand, States one after another. Returns turns/s."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        settle()
        start = time.perf_counter()
        for i, turns in enumerate(work):
            _raw_protocol_state(root_fd, state_id(i), turns)
        elapsed = time.perf_counter() - start
    finally:
        os.close(root_fd)
    return sum(map(len, work)) / elapsed


def raw_protocol_threads(root: Path, work: list[list[Turn]]) -> float:
    """(2)'s protocol with one thread per State, all at once. Returns turns/s."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    barrier = threading.Barrier(len(work) + 1)
    errors: list[BaseException] = []

    def worker(i: int, turns: list[Turn]) -> None:
        barrier.wait()
        try:
            _raw_protocol_state(root_fd, state_id(i), turns)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i, turns)) for i, turns in enumerate(work)]
    try:
        for thread in threads:
            thread.start()
        settle()
        barrier.wait()
        start = time.perf_counter()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start
    finally:
        os.close(root_fd)
    if errors:
        raise errors[0]
    return sum(map(len, work)) / elapsed


# -- statekeep -------------------------------------------------------------------------------


def store_sequential(store: Store, work: list[list[Turn]]) -> float:
    """Sync ``write`` per turn, States one after another (the first write creates). Turns/s."""
    settle()
    start = time.perf_counter()
    for i, turns in enumerate(work):
        sid = state_id(i)
        for t, turn in enumerate(turns):
            store.write(sid, turn.entries, turn.snapshot, create=t == 0)
    return sum(map(len, work)) / (time.perf_counter() - start)


def store_concurrent(store: Store, work: list[list[Turn]]) -> float:
    """One coroutine per State doing its turns with ``awrite``, all gathered. Turns/s."""

    async def one(sid: str, turns: list[Turn]) -> None:
        for t, turn in enumerate(turns):
            await store.awrite(sid, turn.entries, turn.snapshot, create=t == 0)

    async def main() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(one(state_id(i), turns) for i, turns in enumerate(work)))
        return time.perf_counter() - start

    settle()
    return sum(map(len, work)) / asyncio.run(main())


def filestore_sequential(scratch: Scratch, work: list[list[Turn]]) -> float:
    store = FileStore(scratch.new("fs-seq"))
    try:
        return store_sequential(store, work)
    finally:
        store.close()


def filestore_concurrent(scratch: Scratch, work: list[list[Turn]]) -> float:
    store = FileStore(scratch.new("fs-conc"))
    try:
        return store_concurrent(store, work)
    finally:
        store.close()


def memorystore_sequential(scratch: Scratch, work: list[list[Turn]]) -> float:
    store = MemoryStore()
    try:
        return store_sequential(store, work)
    finally:
        store.close()


# -- the first append after reopening ---------------------------------------------------------


def measure_cold_append(scratch: Scratch, megabytes: int, reps: int, samples: dict[str, list[float]]) -> None:
    """(10) A fresh FileStore's first append to a State of ``megabytes`` of history, and to
    one of 1 KB, alternating (each in a store opened anew, as a new process would)."""
    root = scratch.new("cold")
    store = FileStore(root)
    text = "x" * 5_000
    per_write = 200  # entries per filling write (about 1 MB)
    count = megabytes * 1_000_000 // (len(text) + 40)
    for start in range(0, count, per_write):
        n = min(per_write, count - start)
        batch = [{"seq": start + i, "kind": "note", "text": text} for i in range(n)]
        store.write("big", batch, {"task": "big"}, create=start == 0)
    store.write("small", [{"seq": 0, "kind": "note", "text": "x" * 900}], {"task": "small"}, create=True)
    store.close()
    next_seq = {"big": count, "small": 1}
    for _ in range(reps):
        for sid in ("big", "small"):
            fresh = FileStore(root)
            entry = {"seq": next_seq[sid], "kind": "note", "text": "y"}
            settle()
            samples.setdefault(f"cold_{sid}", []).append(
                timed(lambda: fresh.write(sid, [entry], {"task": sid})) * 1e3  # noqa: B023
            )
            next_seq[sid] += 1
            fresh.close()


# -- load and list ------------------------------------------------------------------------------


def raw_load(path: Path) -> list[dict[str, Any]]:
    """Read the log file, split on newlines, decode each line."""
    with open(path, "rb") as f:
        data = f.read()
    loads = orjson.loads
    return [entry for line in data.split(b"\n") if line and "seq" in (entry := loads(line))]


def _snapshots(root: Path) -> list[tuple[str, bytes]]:
    """Each State folder's name and its snapshot.json, read with plain os calls (openat
    relative to the store folder, fstat for the size, read, close)."""
    out = []
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in os.listdir(top):
            if name.startswith("."):  # the store marker, not a State (FileStore.list skips these too)
                continue
            fd = os.open(f"{name}/snapshot.json", os.O_RDONLY, dir_fd=top)
            try:
                out.append((name, os.read(fd, os.fstat(fd).st_size)))
            finally:
                os.close(fd)
    finally:
        os.close(top)
    return out


def raw_list_read(root: Path) -> int:
    """Read every snapshot file, no parsing."""
    return sum(len(raw) for _, raw in _snapshots(root))


def raw_list_parse(root: Path) -> list[dict[str, Any]]:
    """As :func:`raw_list_read`, and decode each snapshot with orjson."""
    loads = orjson.loads
    return [loads(raw)["sk.snapshot"] for _, raw in _snapshots(root)]


def raw_list_rows(root: Path) -> list[ListedRow]:
    """As :func:`raw_list_parse`, each snapshot made into a row with SavedState's fields
    (times parsed; the optional ones with their defaults), in listing order: what
    FileStore.list returns, built by hand."""
    loads, when = orjson.loads, datetime.fromisoformat
    rows = []
    for name, raw in _snapshots(root):
        s = loads(raw)["sk.snapshot"]
        expires = s.get("expires_at")
        rows.append(
            ListedRow(
                name,
                s["task"],
                when(s["created_at"]),
                when(s["updated_at"]),
                s["turn"],
                s["stopped_by"],
                s["finished"],
                s.get("agent"),
                s.get("parent"),
                dict(s.get("labels") or {}),
                None if expires is None else when(expires),
                s.get("forked_from"),
            )
        )
    return common.newest_first(rows)


def raw_list_page(root: Path, agent: str, user: str, limit: int) -> list[ListedRow]:
    """:func:`raw_list_rows` filtered by agent and a label, first ``limit`` rows."""
    rows = raw_list_rows(root)
    return [r for r in rows if r.agent == agent and r.labels.get("user") == user][:limit]


def listed_snapshot(i: int) -> dict[str, Any]:
    """A listed State's snapshot with the fields issue 10 added (an agent, labels, an
    expiry far ahead), so a listing reads and filters them."""
    return {
        **common.make_snapshot(i, i % 97),
        "agent": f"agent-{i % 4}",
        "labels": {"user": f"u{i % 50}", "env": "prod"},
        "expires_at": "2099-01-01T00:00:00+00:00",
    }


def fill_listed(store: FileStore, count: int) -> FileStore:
    """Create ``count`` States of one entry each, 64 at a time."""

    async def create(i: int, gate: asyncio.Semaphore) -> None:
        async with gate:
            await store.awrite(state_id(i), [common.make_entry(0)], listed_snapshot(i), create=True)

    async def main() -> None:
        gate = asyncio.Semaphore(64)
        await asyncio.gather(*(create(i, gate) for i in range(count)))

    asyncio.run(main())
    return store


def measure_list(scratch: Scratch, cfg: Config, samples: dict[str, list[float]]) -> None:
    """(6): FileStore.list of ``cfg.list_states`` States against the raw reads, parses and
    rows, alternating; and a first page of 50 filtered by agent and label (a scan too)."""
    many = fill_listed(FileStore(scratch.new("list")), cfg.list_states)
    page = {"limit": 50, "agent": "agent-3", "labels": {"user": "u7"}}
    try:
        assert common.same_rows(many.list(), raw_list_rows(many.path))
        assert common.same_rows(many.list(**page), raw_list_page(many.path, "agent-3", "u7", 50))
        assert len(raw_list_parse(many.path)) == cfg.list_states
        for _ in range(cfg.read_reps):
            samples.setdefault("list_raw_read", []).append(timed(lambda: raw_list_read(many.path)) * 1e3)
            samples.setdefault("list_raw_parse", []).append(timed(lambda: raw_list_parse(many.path)) * 1e3)
            samples.setdefault("list_raw_rows", []).append(timed(lambda: raw_list_rows(many.path)) * 1e3)
            samples.setdefault("list_filestore", []).append(timed(many.list) * 1e3)
            raw_page = timed(lambda: raw_list_page(many.path, "agent-3", "u7", 50)) * 1e3
            samples.setdefault("list_raw_page", []).append(raw_page)
            samples.setdefault("list_filestore_page", []).append(timed(lambda: many.list(**page)) * 1e3)
    finally:
        many.close()


def per_call_ms(
    calls: int, sync_call: Callable[[], object], async_call: Callable[[], Any]
) -> tuple[float, float]:
    """Median ms per call: ``sync_call()`` from this (plain) thread, and ``await async_call()``
    from an asyncio loop on it. Done in alternating rounds so drift hits both alike."""
    sync_ns: list[int] = []
    async_ns: list[int] = []
    rounds = 4 if calls >= 400 else 1
    per_round = max(calls // rounds, 1)
    clock = time.perf_counter_ns

    async def run_async(n: int, out: list[int]) -> None:
        for _ in range(n):
            start = clock()
            await async_call()
            out.append(clock() - start)

    for _ in range(20):  # warm both paths up (threads started, caches filled)
        sync_call()
    asyncio.run(run_async(20, []))
    for _ in range(rounds):
        gc.collect()
        for _ in range(per_round):
            start = clock()
            sync_call()
            sync_ns.append(clock() - start)
        gc.collect()
        asyncio.run(run_async(per_round, async_ns))
    return statistics.median(sync_ns) / 1e6, statistics.median(async_ns) / 1e6


# -- the report -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = common.parse_args(__doc__, argv)
    cfg = QUICK if args.quick else FULL

    scratch = Scratch()
    began = time.perf_counter()
    common.print_banner("core benchmark", args.quick, f"python {platform.python_version()}", scratch, cfg)
    samples: dict[str, list[float]] = {}
    try:
        work = make_workload(cfg.states, cfg.turns)
        turns = cfg.states * cfg.turns
        bytes_per_turn = statistics.mean(len(t.lines) + len(t.snap) for s in work for t in s)

        # 1-4, 8: the turn workload, every measure once per repetition, the order rotated.
        runs: list[tuple[str, Callable[[], float]]] = [
            ("raw_seq", lambda: raw_append_sequential(scratch.new("raw-seq"), work)),
            ("raw_protocol_seq", lambda: raw_protocol_sequential(scratch.new("raw-proto"), work)),
            ("filestore_seq", lambda: filestore_sequential(scratch, work)),
            ("raw_append_threads", lambda: raw_append_threads(scratch.new("raw-append-threads"), work)),
            ("raw_protocol_threads", lambda: raw_protocol_threads(scratch.new("raw-threads"), work)),
            ("filestore_concurrent", lambda: filestore_concurrent(scratch, work)),
            ("memorystore_seq", lambda: memorystore_sequential(scratch, work)),
        ]
        common.run_rotated(runs, cfg.reps, scratch, samples)

        # 5: load one State of many entries.
        big = common.fill_big_state(FileStore(scratch.new("load")), cfg.load_entries)
        log_path = big.path / "big" / "log.jsonl"
        record = big.read("big")
        assert record is not None and len(record.entries) == cfg.load_entries
        assert len(raw_load(log_path)) == cfg.load_entries
        for _ in range(cfg.read_reps):
            raw_ms = timed(lambda: raw_load(log_path), samples.setdefault("load_raw_faults", [])) * 1e3
            samples.setdefault("load_raw", []).append(raw_ms)
            fs_ms = timed(lambda: big.read("big"), samples.setdefault("load_filestore_faults", [])) * 1e3
            samples.setdefault("load_filestore", []).append(fs_ms)
        print("  load done", flush=True)

        # 11: read a small State (10 entries) whole.
        small_store = small_reads.fill(FileStore(scratch.new("small-read")))
        small_log = small_store.path / small_reads.SID / "log.jsonl"
        small_reads.measure(small_store, lambda: raw_load(small_log), cfg.read_reps, cfg.calls, samples)
        small_store.close()

        # 6: list many States.
        measure_list(scratch, cfg, samples)
        print("  list done", flush=True)

        # 7: what the sync API costs over the async one, per call.
        mem = MemoryStore()
        small = work[0][0]
        mem.write("small", small.entries, small.snapshot, create=True)
        mem_sync, mem_async = per_call_ms(cfg.calls, lambda: mem.read("small"), lambda: mem.aread("small"))
        disk = FileStore(scratch.new("small"))
        disk.write("small", small.entries, small.snapshot, create=True)
        fs_sync, fs_async = per_call_ms(cfg.calls, lambda: disk.read("small"), lambda: disk.aread("small"))
        print("  sync/async done", flush=True)

        # 9: what each thread hand-off costs a write (benchmarks/hops.py).
        hop = hops.run(cfg.hop_calls)
        print("  hand-offs done", flush=True)

        # 10: the first append after reopening, long history against short.
        measure_cold_append(scratch, cfg.cold_mb, cfg.read_reps, samples)
        print("  cold append done\n", flush=True)
        for store in (big, mem, disk):
            store.close()
    finally:
        scratch.cleanup()

    n = cfg.states
    med = common.Medians(samples)
    ratio_row = med.ratio_row
    load = f"(5) FileStore.read, {cfg.load_entries:,} entries"
    listing = f"(6) FileStore.list, {cfg.list_states:,} States"
    rows = [
        med.row("(1) raw write+fdatasync, sequential", "raw_seq", "turns/s"),
        ratio_row("(2) raw same protocol, sequential", "raw_protocol_seq", "turns/s", "raw_seq", "(1)"),
        ratio_row(
            "(3) FileStore.write, sequential",
            "filestore_seq",
            "turns/s",
            "raw_seq",
            "(1)",
            ">= 0.8",
            overhead=True,
        ),
        ratio_row("(3) FileStore.write, sequential", "filestore_seq", "turns/s", "raw_protocol_seq", "(2)"),
        ratio_row(f"(4) raw write+fdatasync, {n} threads", "raw_append_threads", "turns/s", "raw_seq", "(1)"),
        ratio_row(f"(4) raw protocol, {n} threads", "raw_protocol_threads", "turns/s", "raw_seq", "(1)"),
        ratio_row(
            f"(4) FileStore.awrite, {n} concurrent",
            "filestore_concurrent",
            "turns/s",
            "raw_seq",
            "(1)",
            ">= 3",
        ),
        ratio_row(
            f"(4) FileStore.awrite, {n} concurrent",
            "filestore_concurrent",
            "turns/s",
            "raw_protocol_threads",
            f"raw protocol {n} thr",
        ),
        ratio_row(load, "load_filestore", "ms", "load_raw", "raw read+split+loads", "<= 1.5"),
        ratio_row(listing, "list_filestore", "ms", "list_raw_rows", "raw read+loads+rows", "<= 1.3"),
        ratio_row(listing, "list_filestore", "ms", "list_raw_parse", "raw read+orjson.loads"),
        ratio_row(listing, "list_filestore", "ms", "list_raw_read", "raw open+fstat+read+close"),
    ]
    rows.append(
        ratio_row(
            f"(6) FileStore.list(limit=50, agent, label), {cfg.list_states:,}",
            "list_filestore_page",
            "ms",
            "list_raw_page",
            "raw rows+filter",
            "<= 1.3",
        )
    )
    rows[8].extra = {
        "minor_faults_median": statistics.median(samples["load_filestore_faults"]),
        "baseline_minor_faults_median": statistics.median(samples["load_raw_faults"]),
    }
    for label, sync_ms, async_ms in (
        ("MemoryStore.read", mem_sync, mem_async),
        ("FileStore.read, small", fs_sync, fs_async),
    ):
        diff = sync_ms - async_ms
        rows.append(
            Row(
                f"(7) sync - async per call, {label}",
                diff,
                "ms",
                "await a*",
                async_ms,
                sync_ms / async_ms,
                "<= 0.15 ms",
                diff <= 0.15,
                extra={"sync_ms": sync_ms, "async_ms": async_ms, "calls": cfg.calls},
            )
        )
    rows.append(
        ratio_row("(8) MemoryStore.write, sequential", "memorystore_seq", "turns/s", "raw_seq", "(1)")
    )

    raw_trip = hop.pop("raw round trip")
    rows.append(Row("(9) raw thread round trip (2 hand-offs)", raw_trip, "µs"))
    for path, us in hop.items():
        rows.append(Row(f"(9) no-op write, {path}", us, "µs", "raw round trip", raw_trip, us / raw_trip))

    rows.append(
        ratio_row(
            f"(10) first append after reopening, {cfg.cold_mb} MB history",
            "cold_big",
            "ms",
            "cold_small",
            "1 KB history",
            "<= 1.5",
        )
    )

    rows.append(
        ratio_row(
            f"(11) FileStore.read, {small_reads.ENTRIES} entries",
            "small_read",
            "µs",
            "small_read_raw",
            "raw read+split+orjson",
            "<= 1.3",
        )
    )
    common.print_table(rows)
    elapsed = time.perf_counter() - began
    faults = rows[8].extra
    print(
        f"\n{turns} turns per run, {bytes_per_turn:,.0f} B per turn. Ratios: value / baseline.\n"
        f"(5) minor page faults per load, median: FileStore.read {faults['minor_faults_median']:,.0f}, "
        f"raw {faults['baseline_minor_faults_median']:,.0f}.\n"
        "(6) raw: each State folder's snapshot.json read with os calls; +loads: parsed with orjson; +rows:\n"
        "    each made into a row with SavedState's fields (times parsed, a frozen slotted dataclass), sorted.\n"
        "(7) value = median sync call - median async call; baseline = the async call; ratio = sync/async.\n"
        "(9) median per no-op write on each path (see benchmarks/hops.py); ratio = / raw round trip.\n"
        "(1), (2), (4) raw: each turn encoded with orjson inside the timed loop, as a store must.\n"
        "(3) (+N µs): the µs per write above (1)'s in the same run.\n"
        f"Took {elapsed:.1f} s."
    )
    if args.json:
        versions = {"python": platform.python_version()}
        extra = {"bytes_per_turn": bytes_per_turn}
        common.write_json(args.json, cfg, args.quick, versions, scratch, extra, elapsed, rows, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())

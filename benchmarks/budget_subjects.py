"""What bench_budget times: one State's steady-state appends through each writer, sync
and async, one write at a time, each beside its raw baseline.

A subject is made in a fresh folder, writes its warm-up turns (the first creates the
State) untimed, then its timed turns; each write is timed alone (median µs reported) and
the CPU of every thread is taken over the timed loop (budget_probes.CPUWindow).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import budget_probes as probes
import common
from rawio import RawFile, RawSQLite, encode_turn
from statekeep import FileStore, MemoryStore, SQLiteStore, Store

Turn = tuple[list[dict[str, Any]], dict[str, Any]]
SID = "budget"
WARNINGS: set[str] = set()  # what a run saw that makes a row doubtful, for the report


def make_turns(count: int) -> list[Turn]:
    """3 entries (800/200/2,048 B of text) + the snapshot a turn, as common's workload."""
    return [
        ([common.make_entry(t * 3 + i) for i in range(3)], common.make_snapshot(0, t)) for t in range(count)
    ]


@dataclass
class Subject:
    """One writer: ``write(entries, snapshot, create)`` (sync) or ``awrite`` (a coroutine
    function), ``close``; ``warmed`` runs after the warm-up (e.g. to set a pragma)."""

    write: Callable[[list[dict[str, Any]], dict[str, Any], bool], object] | None = None
    awrite: Callable[[list[dict[str, Any]], dict[str, Any], bool], Any] | None = None
    close: Callable[[], object] = lambda: None
    warmed: Callable[[], object] = lambda: None
    notes: list[str] = field(default_factory=list)


@dataclass
class Result:
    us: list[float]  # per timed write
    cpu: dict[str, float]  # CPU µs per write by thread role, "all threads" too


def run(subject: Subject, turns: list[Turn], warm: int) -> Result:
    """Warm up, then time each of the remaining turns (sync, or on an asyncio loop run in
    this thread)."""
    try:
        if subject.write is not None:
            return _run_sync(subject.write, subject, turns, warm)
        return asyncio.run(_run_async(subject, turns, warm))
    finally:
        subject.close()


def _result(times: list[int], window: probes.CPUWindow) -> Result:
    n = len(times)
    return Result([t / 1e3 for t in times], {k: v / n * 1e6 for k, v in window.roles.items()})


def _run_sync(write: Callable[..., object], subject: Subject, turns: list[Turn], warm: int) -> Result:
    for i, (entries, snapshot) in enumerate(turns[:warm]):
        write(entries, snapshot, i == 0)
    subject.warmed()
    clock = time.perf_counter_ns
    times = []
    common.timed(lambda: None)  # a collection first
    with probes.CPUWindow() as window:
        for entries, snapshot in turns[warm:]:
            start = clock()
            write(entries, snapshot, False)
            times.append(clock() - start)
    return _result(times, window)


async def _run_async(subject: Subject, turns: list[Turn], warm: int) -> Result:
    awrite = subject.awrite
    assert awrite is not None
    for i, (entries, snapshot) in enumerate(turns[:warm]):
        await awrite(entries, snapshot, i == 0)
    subject.warmed()
    clock = time.perf_counter_ns
    times = []
    common.timed(lambda: None)
    with probes.CPUWindow() as window:
        for entries, snapshot in turns[warm:]:
            start = clock()
            await awrite(entries, snapshot, False)
            times.append(clock() - start)
    return _result(times, window)


def median(result: Result) -> float:
    return statistics.median(result.us)


# -- the subjects -----------------------------------------------------------------------------------


def store_subject(store: Store, *, noop: bool = False, asynchronous: bool = False) -> Subject:
    """``store``'s ``write`` (``awrite``) of each turn; with ``noop`` after the first, a
    write of nothing (no entries, snapshot kept): the hop and lock, no durable work."""

    def write(entries: list[dict[str, Any]], snapshot: dict[str, Any], create: bool) -> None:
        if noop and not create:
            store.write(SID, [], None)
        else:
            store.write(SID, entries, snapshot, create=create)

    async def awrite(entries: list[dict[str, Any]], snapshot: dict[str, Any], create: bool) -> None:
        await store.awrite(SID, entries, snapshot, create=create)

    if asynchronous:
        return Subject(awrite=awrite, close=store.close)
    return Subject(write=write, close=store.close)


def raw_subject(raw: RawFile | RawSQLite, *, asynchronous: bool = False) -> Subject:
    """The raw baseline's write; async: ``await asyncio.to_thread(write)``."""

    def write(entries: list[dict[str, Any]], snapshot: dict[str, Any], create: bool) -> None:
        raw.write(entries, snapshot)

    async def awrite(entries: list[dict[str, Any]], snapshot: dict[str, Any], create: bool) -> None:
        await asyncio.to_thread(raw.write, entries, snapshot)

    if asynchronous:
        return Subject(awrite=awrite, close=raw.close)
    return Subject(write=write, close=raw.close)


def sqlite_nosync(folder: Path) -> Subject | None:
    """A SQLiteStore whose connections (caught as ``sqlite3.connect`` opens them) are set to
    synchronous=OFF after the warm-up; None if it opened none that way."""
    conns = probes.Connections()
    with conns.watching():
        store = SQLiteStore(folder / "store.db")
        store.write(SID, [common.make_entry(0)], common.make_snapshot(0, 0), create=True)
    if not conns.synchronous_off():
        store.close()
        return None
    subject = store_subject(store)

    def write(entries: list[dict[str, Any]], snapshot: dict[str, Any], create: bool) -> None:
        store.write(SID, entries, snapshot)  # created above

    def close() -> None:
        if conns.synchronous() - {0}:  # the store set it back, or opened another connection
            WARNINGS.add("SQLiteStore, synchronous=OFF: a connection was not at OFF by the end")
        store.close()

    subject.write, subject.close = write, close
    return subject


def prepare_call() -> Callable[[list[dict[str, Any]], dict[str, Any], bool], object] | None:
    """statekeep's own validation and encoding of a write, called bare (a private function:
    None if it moved)."""
    try:
        from statekeep._core.writes import prepare_write

        prepare_write(SID, [common.make_entry(0)], common.make_snapshot(0, 0), True)
    except (ImportError, TypeError):  # moved, or called another way now
        return None
    return lambda entries, snapshot, create: prepare_write(SID, entries, snapshot, create)


def subjects(scratch: common.Scratch) -> dict[str, Callable[[], Subject | None]]:
    """Each timed subject's name and how to make it in a fresh folder."""

    def fs(io: Any = None, **kw: Any) -> Callable[[], Subject]:
        return lambda: store_subject(FileStore(scratch.new("fs") / "store", io=io), **kw)

    def lite(**kw: Any) -> Callable[[], Subject]:
        return lambda: store_subject(SQLiteStore(scratch.new("sqlite") / "store.db"), **kw)

    prepare = prepare_call()
    nosync = probes.no_sync_io()
    made: dict[str, Callable[[], Subject | None]] = {
        "raw_file": lambda: raw_subject(RawFile(scratch.new("raw"))),
        "filestore": fs(),
        "raw_file_nosync": lambda: raw_subject(RawFile(scratch.new("raw"), sync=False)),
        "filestore_nosync": (lambda: None) if nosync is None else fs(io=nosync),
        "raw_sqlite": lambda: raw_subject(RawSQLite(scratch.new("raw") / "raw.db")),
        "sqlite": lite(),
        "raw_sqlite_nosync": lambda: raw_subject(RawSQLite(scratch.new("raw") / "raw.db", sync=False)),
        "sqlite_nosync": lambda: sqlite_nosync(scratch.new("sqlite-off")),
        "raw_file_async": lambda: raw_subject(RawFile(scratch.new("raw")), asynchronous=True),
        "filestore_async": fs(asynchronous=True),
        "raw_sqlite_async": lambda: raw_subject(RawSQLite(scratch.new("raw") / "raw.db"), asynchronous=True),
        "sqlite_async": lite(asynchronous=True),
        "encode": lambda: Subject(write=lambda e, s, c: encode_turn(e, s)),
        "prepare": (lambda: None) if prepare is None else (lambda: Subject(write=prepare)),
        "memory": lambda: store_subject(MemoryStore()),
        "memory_noop": lambda: store_subject(MemoryStore(), noop=True),
        "filestore_noop": fs(noop=True),
        "sqlite_noop": lite(noop=True),
    }
    return made

"""SQLiteStore beyond the shared conformance suite: the file's settings and schema,
several processes on one file, group commit with a failing write, schema versions,
SIGKILL of a writer, locked databases, fork, and text that looks like SQL.

Worker processes run small programs given with ``python -c`` from the repository root. The
model-based test (the kit's state machine) runs from tests/store/test_conformance.py.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pytest

from statekeep import (
    CorruptStateError,
    FileStore,
    NotAStoreError,
    Record,
    SQLiteStore,
    StateConflictError,
    UnsupportedFormatError,
)
from statekeep._core.query import make_query
from statekeep._core.writes import prepare_write
from statekeep._runtime.batching import WouldBlock
from statekeep._runtime.bridge import owner
from statekeep.stores._sqlite import _connections, _store
from statekeep.stores._sqlite._batch import Delete, Op
from statekeep.stores._sqlite._listing import listing_sql
from statekeep.stores._sqlite._schema import SCHEMA_VERSION
from statekeep.testing import StoreMachine, entries, snapshot
from tests.support import REPO
from tests.support.settle import drop_and_collect
from tests.support.stores import sqlite_looks

#: A schema version newer than this statekeep's.
NEWER = SCHEMA_VERSION + 1


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def store(db: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(db)
    yield s
    s.close()


class _ClosedAfterWith(sqlite3.Connection):
    """A connection that its ``with`` block also closes (sqlite3's own only commits), so that
    none is left for the garbage collector: Python 3.13 warns then (ResourceWarning), inside
    whichever test runs at that moment."""

    def __exit__(self, *exc: object) -> Literal[False]:
        try:
            super().__exit__(*exc)
        finally:
            self.close()
        return False


def raw(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection to look at (or tamper with) the file; ``with raw(path) as
    conn`` closes it at the end."""
    return sqlite3.connect(
        path, isolation_level=None, timeout=30, check_same_thread=False, factory=_ClosedAfterWith
    )


def run_python(code: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


async def wait_until(condition: Any, what: str, timeout: float = 30) -> None:
    """Poll ``condition`` while the test's event loop keeps running its tasks."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.002)


# -- the file, its settings and schema ------------------------------------------------------


def test_file_settings_and_schema(store: SQLiteStore, db: Path) -> None:
    store.write("a", entries(0, 2), snapshot(), create=True)
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    with raw(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"schema_version", "states", "entries", "labels", "leases"} <= tables
        # Entries are the encoded JSON, as text a person (or SQLite's JSON functions) can read.
        assert conn.execute("SELECT typeof(data), data FROM entries ORDER BY seq LIMIT 1").fetchone() == (
            "text",
            '{"seq":0,"kind":"note","text":"entry 0"}',
        )
        assert conn.execute("SELECT json_extract(snapshot, '$.task') FROM states").fetchone() == ("task",)
    writer = store._conns.writer
    assert writer is not None
    assert writer.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    assert writer.execute("PRAGMA foreign_keys").fetchone() == (1,)
    # The writer never waits inside SQLite (it retries in Python, off the owner loop), so
    # that a write committed on the loop never waits for another process's lock.
    assert writer.execute("PRAGMA busy_timeout").fetchone() == (0,)


def test_reading_does_not_create_the_file(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sub" / "store.db")
    assert store.read("a") is None and store.list() == []
    assert not (tmp_path / "sub").exists()
    store.write("a", [], snapshot(), create=True)
    assert [r.id for r in store.list()] == ["a"]
    store.close()


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o277])
def test_folders_0700_files_0600_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    db = tmp_path / "a" / "b" / "store.db"
    store = SQLiteStore(db)
    old = os.umask(umask)
    try:
        store.write("x", [], snapshot(), create=True)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700
    for name in ("store.db", "store.db-wal", "store.db-shm"):
        assert stat.S_IMODE((db.parent / name).stat().st_mode) == 0o600, name
    store.close()


def test_list_is_one_ordered_index_scan(store: SQLiteStore, db: Path) -> None:
    # Every filter's plan: tests/stores/sqlite/test_sqlite_lifecycle.py.
    store.write("a", [], snapshot(), create=True)
    text, params = listing_sql("default", make_query(limit=50), "2026-01-01T00:00:00.000000+00:00")
    with raw(db) as conn:
        plan = " ".join(str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + text, params))
    assert "INDEX states_listing" in plan and "TEMP B-TREE" not in plan, plan


def test_list_keeps_times_in_order_across_offsets(store: SQLiteStore) -> None:
    # Same instant written with different offsets, and times that sort wrongly as raw text.
    store.write("utc", [], snapshot(updated="2026-01-01T10:00:00+00:00"), create=True)
    store.write("plus2", [], snapshot(updated="2026-01-01T12:00:00+02:00"), create=True)
    store.write("later", [], snapshot(updated="2026-01-01T09:30:00-01:00"), create=True)
    store.write("micro", [], snapshot(updated="2026-01-01T10:00:00.000001+00:00"), create=True)
    assert [r.id for r in store.list()] == ["later", "micro", "plus2", "utc"]


def test_listing_columns_edited_by_hand_are_checked_again(store: SQLiteStore, db: Path) -> None:
    # Rows are built from the columns unchecked only when they are as the store wrote them.
    for sid in ("offset", "text_turn", "garbage"):
        store.write(sid, [], snapshot(sid), create=True)
    with raw(db) as conn:
        conn.execute("UPDATE states SET created_at = '2026-01-01T02:00:00+02:00' WHERE id = 'offset'")
        conn.execute("UPDATE states SET turn = '7' WHERE id = 'text_turn'")
        conn.execute("UPDATE states SET updated_at = 'soon' WHERE id = 'garbage'")
    conn.close()
    with pytest.warns(
        RuntimeWarning, match="'garbage' left out of the listing: its updated_at column holds 'soon'"
    ):
        rows = {r.id: r for r in store.list()}
    assert set(rows) == {"offset", "text_turn"}
    assert rows["offset"].created_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert rows["offset"].created_at.tzinfo is UTC
    assert rows["text_turn"].turn == 7


def test_listing_follows_snapshot_changes(store: SQLiteStore) -> None:
    store.write("a", [], snapshot("one", updated="2026-01-01T00:00:00+00:00"), create=True)
    store.write("b", [], snapshot("two", updated="2026-01-02T00:00:00+00:00"), create=True)
    assert [(r.id, r.task) for r in store.list()] == [("b", "two"), ("a", "one")]
    store.write("a", [], snapshot("one more", updated="2026-01-03T00:00:00+00:00"))
    assert [(r.id, r.task) for r in store.list()] == [("a", "one more"), ("b", "two")]
    store.write("a", [], {"task": "no longer listable"})
    with pytest.warns(RuntimeWarning, match="'a' left out of the listing.*created_at"):
        assert [r.id for r in store.list()] == ["b"]
    store.write("a", [], snapshot("back"))
    assert [r.id for r in store.list()] == ["b", "a"]
    store.delete("b")
    assert [r.id for r in store.list()] == ["a"]


def test_equality_is_by_real_path(tmp_path: Path, db: Path) -> None:
    (tmp_path / "link").symlink_to(tmp_path)
    same = [SQLiteStore(db), SQLiteStore(tmp_path / "link" / "store.db"), SQLiteStore(os.path.relpath(db))]
    assert same[0] == same[1] == same[2] and len(set(same)) == 1
    assert SQLiteStore(db) != SQLiteStore(tmp_path / "other.db")
    assert SQLiteStore(db) != FileStore(db)
    assert repr(same[0]) == f"SQLiteStore({str(db)!r})"


def test_close_releases_connections(db: Path) -> None:
    store = SQLiteStore(db)
    store.write("a", entries(0, 1), snapshot(), create=True)
    store.read("a")
    conns = store._conns
    assert conns.writer is not None and conns.idle and conns.closer in owner().closers
    store.close()
    assert conns.writer is None and not conns.idle and conns.closer not in owner().closers
    assert not Path(f"{db}-wal").exists()  # the last connection closed: WAL checkpointed away
    assert SQLiteStore(db).read("a") == Record(entries(0, 1), snapshot())


def test_exit_closer_closes_connections(db: Path) -> None:
    store = SQLiteStore(db)
    store.write("a", [], None, create=True)
    conns = store._conns
    assert conns.closer is not None
    asyncio.run_coroutine_threadsafe(conns.closer.close(), owner().loop).result(10)
    assert conns.writer is None and not conns.idle
    store.write("a", entries(0, 1), None)  # a straggler still works; its connection is closed after
    assert conns.writer is None
    store.close()


# -- text that looks like SQL -----------------------------------------------------------------

HOSTILE = [
    "'; DROP TABLE states; --",
    '" OR 1=1 --',
    "Robert'); DELETE FROM entries WHERE ('1'='1",
    "\\' \\\" \\\\ %s %d ? ?1 :name @x $y",
    "100% _like_ [brackets] `ticks`",
    "nul\x00byte and \u2028 line separators \r\n",
    "CAST(x AS BLOB) || X'00' /* comment */",
    "🧭 ünïcødé ' \"",
]


def test_sql_like_ids_are_refused_before_the_file_is_touched(store: SQLiteStore, db: Path) -> None:
    for bad in ("a'; DROP TABLE states; --", 'x" OR 1=1', "a;b", "a%", "a b"):
        with pytest.raises(ValueError, match="invalid State id"):
            store.write(bad, [], snapshot(), create=True)
        with pytest.raises(ValueError, match="invalid State id"):
            store.read(bad)
    assert not db.exists()


async def test_sql_like_text_round_trips(db: Path) -> None:
    store = SQLiteStore(db)
    ents = [{"seq": i, "text": t, t: i} for i, t in enumerate(HOSTILE)]
    snap = snapshot(HOSTILE[0]) | {"notes": HOSTILE, "stopped_by": HOSTILE[2]}
    await store.awrite("hostile", ents, snap, create=True)
    await store.awrite(
        "hostile", [*ents, {"seq": len(HOSTILE), "text": HOSTILE[1]}], snap
    )  # overlap compared
    store.close()
    store = SQLiteStore(db)
    rec = await store.aread("hostile")
    assert rec == Record([*ents, {"seq": len(HOSTILE), "text": HOSTILE[1]}], snap)
    [row] = await store.alist()
    assert (row.task, row.stopped_by) == (HOSTILE[0], HOSTILE[2])
    with pytest.raises(StateConflictError):
        await store.awrite("hostile", [{"seq": 0, "text": HOSTILE[0] + "'"}], None)
    with raw(db) as conn:
        assert conn.execute("SELECT count(*) FROM entries").fetchone() == (len(HOSTILE) + 1,)
    await store.aclose()


def test_turn_beyond_signed_64_bits_is_listed_exactly(store: SQLiteStore) -> None:
    store.write("big", [], snapshot(turn=2**64 - 1), create=True)
    store.write("small", [], snapshot(turn=2**63 - 1), create=True)
    assert {r.id: r.turn for r in store.list()} == {"big": 2**64 - 1, "small": 2**63 - 1}


def test_large_entries_round_trip(store: SQLiteStore) -> None:
    big = [{"seq": 0, "blob": "x" * 5_000_000}, {"seq": 1, "blob": "é" * 1_000_000}]
    store.write("big", big, {"size": "big"}, create=True)
    assert store.read("big") == Record(big, {"size": "big"})


def test_damaged_entry_is_named(store: SQLiteStore, db: Path) -> None:
    store.write("a", entries(0, 3), snapshot(), create=True)
    with raw(db) as conn:
        conn.execute("UPDATE entries SET data = '{not json' WHERE state_id = 'a' AND seq = 1")
    with pytest.raises(CorruptStateError, match=r"entry seq 1 of State 'a' is not valid JSON"):
        store.read("a")


# -- group commit --------------------------------------------------------------------------------


class HeldCommits:
    """Wraps a store's ``_commit``: records each batch's size and holds the first batch
    until released, so that the writes sent meanwhile queue up into one batch."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store, self.sizes, self.gate = store, [], threading.Event()
        self._commit = store._commit
        store._commit = self  # type: ignore[method-assign]
        store._commit_now = self.in_a_worker  # type: ignore[method-assign]

    @staticmethod
    def in_a_worker(ops: list[Any]) -> list[BaseException | None]:
        raise WouldBlock  # as when another connection holds the lock: batches commit off the loop

    def __call__(self, ops: list[Any]) -> list[BaseException | None]:
        self.sizes.append(len(ops))
        if len(self.sizes) == 1:
            self.gate.wait(30)
        return self._commit(ops)


async def test_batch_with_failing_writes_fails_only_those(store: SQLiteStore) -> None:
    for sid in ("a", "b", "c", "d", "x"):
        await store.awrite(sid, entries(0, 2), snapshot(sid), create=True)
    held = HeldCommits(store)
    first = asyncio.ensure_future(store.awrite("blocker", [], snapshot(), create=True))
    await wait_until(lambda: held.sizes == [1], "the first batch")
    calls = {
        "a ok": store.awrite("a", entries(2, 1), snapshot("a", turn=1)),
        "b conflict": store.awrite(
            "b", [entries(0, 2)[1] | {"text": "other"}, *entries(2, 1)], snapshot("B")
        ),
        "c gap": store.awrite("c", entries(5, 1), snapshot("C")),
        "ghost missing": store.awrite("ghost", entries(0, 1), snapshot()),
        "x exists": store.awrite("x", [], snapshot("X"), create=True),
        "d ok": store.awrite("d", entries(1, 3), None),  # seq 1 resent, 2-3 new
        "new ok": store.awrite("new", entries(0, 2), snapshot("new"), create=True),
        "gone ok": store.adelete("x-gone"),
    }
    tasks = {name: asyncio.ensure_future(call) for name, call in calls.items()}
    await wait_until(lambda: len(store._batches.queue) == len(calls), "the writes to queue up")
    held.gate.set()
    await first
    outcome = dict(zip(tasks, await asyncio.gather(*tasks.values(), return_exceptions=True), strict=True))
    assert held.sizes == [1, len(calls)]  # one transaction for all of them
    assert type(outcome.pop("b conflict")) is StateConflictError
    assert "expected seq 2 next, got seq 5" in str(outcome.pop("c gap"))
    assert isinstance(outcome.pop("ghost missing"), LookupError)
    assert "already exists" in str(outcome.pop("x exists"))
    assert outcome == {name: None for name in outcome}
    assert await store.aread("a") == Record(entries(0, 3), snapshot("a", turn=1))
    assert await store.aread("b") == Record(entries(0, 2), snapshot("b"))
    assert await store.aread("c") == Record(entries(0, 2), snapshot("c"))
    assert await store.aread("d") == Record(entries(0, 4), snapshot("d"))
    assert await store.aread("x") == Record(entries(0, 2), snapshot("x"))
    assert await store.aread("new") == Record(entries(0, 2), snapshot("new"))
    assert await store.aread("ghost") is None


async def test_write_sqlite_refuses_is_rolled_back_alone(store: SQLiteStore, db: Path) -> None:
    # A stray row (a damaged database) makes SQLite refuse the insert of a's next entry:
    # the batch is redone with a savepoint per write, and only a's write fails.
    for sid in ("a", "b"):
        await store.awrite(sid, entries(0, 1), snapshot(sid), create=True)
    with raw(db) as conn:
        conn.execute(
            "INSERT INTO entries (namespace, state_id, seq, data) VALUES ('default', 'a', 1, '{\"seq\":1}')"
        )
    held = HeldCommits(store)
    first = asyncio.ensure_future(store.awrite("blocker", [], None, create=True))
    await wait_until(lambda: held.sizes == [1], "the first batch")
    tasks = [
        asyncio.ensure_future(store.awrite("a", entries(1, 1), snapshot("a2"))),
        asyncio.ensure_future(store.awrite("b", entries(1, 2), snapshot("b2"))),
        asyncio.ensure_future(store.awrite("c", entries(0, 1), snapshot("c"), create=True)),
    ]
    await wait_until(lambda: len(store._batches.queue) == 3, "the writes to queue up")
    held.gate.set()
    await first
    a, b, c = await asyncio.gather(*tasks, return_exceptions=True)
    assert held.sizes == [1, 3]
    assert isinstance(a, sqlite3.IntegrityError) and b is None and c is None
    with raw(db) as conn:
        assert conn.execute(
            "SELECT next_seq, json_extract(snapshot, '$.task') FROM states WHERE id = 'a'"
        ).fetchone() == (
            1,
            "a",
        )
    assert await store.aread("b") == Record(entries(0, 3), snapshot("b2"))
    assert await store.aread("c") == Record(entries(0, 1), snapshot("c"))


def test_one_batch_may_hold_several_writes_to_one_state(store: SQLiteStore) -> None:
    # Not possible through the API (a State's writes wait for each other); _commit still
    # applies them in order, one by one.
    store.write("a", entries(0, 1), None, create=True)
    ops: list[Op] = [
        ("write", "default", prepare_write("a", entries(1, 1), snapshot(turn=1), False)),
        ("write", "default", prepare_write("a", entries(2, 2), snapshot(turn=2), False)),
        ("write", "default", prepare_write("a", entries(9, 1), None, False)),
        ("delete", "default", Delete("b")),
        ("write", "default", prepare_write("b", [], snapshot("b"), True)),
    ]
    errors = store._commit(ops)
    assert errors[:2] == [None, None] and isinstance(errors[2], ValueError) and errors[3:] == [None, None]
    assert store.read("a") == Record(entries(0, 4), snapshot(turn=2))
    assert store.read("b") == Record([], snapshot("b"))


async def test_concurrent_writes_share_transactions(store: SQLiteStore) -> None:
    sizes: list[int] = []
    commit = store._commit

    def counted(ops: list[Any]) -> list[BaseException | None]:
        sizes.append(len(ops))
        return commit(ops)

    store._commit = counted  # type: ignore[method-assign]
    commit_now = store._commit_now

    def counted_now(ops: list[Any]) -> list[BaseException | None]:
        errors = commit_now(ops)  # a lone write committed on the loop (or WouldBlock)
        sizes.append(len(ops))
        return errors

    store._commit_now = counted_now  # type: ignore[method-assign]

    async def run(sid: str) -> None:
        await store.awrite(sid, entries(0, 1), snapshot(sid), create=True)
        for seq in range(1, 20):
            await store.awrite(sid, entries(seq, 1), snapshot(sid, turn=seq))

    await asyncio.gather(*(run(f"s{i}") for i in range(20)))
    assert sum(sizes) == 400 and len(sizes) < 400 / 2  # batched: far fewer transactions than writes
    for i in range(20):
        assert await store.aread(f"s{i}") == Record(entries(0, 20), snapshot(f"s{i}", turn=19))


# -- schema versions -----------------------------------------------------------------------------


def test_newer_schema_is_refused(db: Path) -> None:
    store = SQLiteStore(db)
    store.write("a", entries(0, 1), snapshot(), create=True)
    store.close()
    with raw(db) as conn:
        conn.execute(f"UPDATE schema_version SET version = {NEWER}")
    newer = SQLiteStore(db)
    message = rf"written by a newer statekeep \(database schema version {NEWER}.*Upgrade statekeep"
    with pytest.raises(UnsupportedFormatError, match=message):
        newer.read("a")
    with pytest.raises(UnsupportedFormatError, match=message):
        newer.write("a", entries(1, 1), None)
    with pytest.raises(UnsupportedFormatError, match=message):
        newer.list()
    newer.close()
    with raw(db) as conn:  # nothing was changed
        assert conn.execute("SELECT count(*) FROM entries").fetchone() == (1,)
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(NEWER,)]


@pytest.mark.parametrize("agent", [None, "nobody"], ids=["rows", "no-rows"])
def test_a_page_read_after_another_process_upgraded_the_file_is_refused(db: Path, agent: str | None) -> None:
    # A small page is read on the owner loop in one statement that also reads the version.
    store = SQLiteStore(db)
    store.write("a", entries(0, 1), snapshot(), create=True)
    assert [row.id for row in store.list(limit=5)] == ["a"]
    with raw(db) as conn:
        conn.execute(f"UPDATE schema_version SET version = {NEWER}")
    with pytest.raises(UnsupportedFormatError, match="newer statekeep"):
        store.list(limit=5, agent=agent)
    store.close()


def test_a_newer_database_is_refused_without_a_write(db: Path) -> None:
    # A database in rollback-journal mode, of a newer schema: refusing it must not even
    # switch it to WAL.
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute(f"INSERT INTO schema_version VALUES ({NEWER})")
    conn.commit()
    conn.close()
    before = sqlite_looks(db)
    assert before[1] == "delete"
    newer = SQLiteStore(db)
    for attempt in (lambda: newer.read("a"), newer.list, lambda: newer.write("a", entries(0, 1), None)):
        with pytest.raises(UnsupportedFormatError, match="newer statekeep"):
            attempt()
    newer.close()
    assert sqlite_looks(db) == before


@pytest.fixture
def foreign(db: Path) -> Path:
    """Another program's SQLite database, in rollback-journal mode."""
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.execute("INSERT INTO users VALUES ('ada')")
    conn.commit()
    conn.close()
    return db


def test_create_false_never_changes_another_programs_database(foreign: Path) -> None:
    before = sqlite_looks(foreign)
    store = SQLiteStore(foreign, create=False)
    message = r"is not a statekeep database \(its tables: users\); nothing was changed"
    for attempt in (
        lambda: store.read("a"),
        store.list,
        lambda: store.delete("a"),
        lambda: store.write("a", entries(0, 1), snapshot(), create=True),
    ):
        with pytest.raises(NotAStoreError, match=message):
            attempt()
    store.close()
    assert sqlite_looks(foreign) == before


def test_create_false_reads_and_deletes_in_a_statekeep_database(db: Path) -> None:
    with SQLiteStore(db) as store:
        store.write("a", entries(0, 2), snapshot(), create=True)
        store.write("b", entries(0, 1), snapshot("b"), create=True)
    with SQLiteStore(db, create=False) as existing:
        assert existing.read("a") == Record(entries(0, 2), snapshot())
        assert sorted(row.id for row in existing.list()) == ["a", "b"]
        existing.delete("a")
        assert existing.read("a") is None
    with SQLiteStore(db) as store:
        assert store.read("a") is None and store.read("b") is not None


def test_create_false_makes_no_file(db: Path) -> None:
    store = SQLiteStore(db, create=False)
    assert store.read("a") is None and store.list() == []
    with pytest.raises(FileNotFoundError, match="create=False"):
        store.write("a", entries(0, 1), None, create=True)
    store.close()
    assert not db.exists()


@pytest.mark.parametrize("create", [True, False])
def test_a_file_that_is_not_a_database_is_refused_unchanged(db: Path, create: bool) -> None:
    db.write_text("just some notes, not a database\n" * 200)
    before = looks_bytes = db.read_bytes(), sorted(os.listdir(db.parent))
    store = SQLiteStore(db, create=create)
    for attempt in (lambda: store.read("a"), store.list, lambda: store.write("a", [], None, create=True)):
        with pytest.raises(NotAStoreError, match="is not a SQLite database"):
            attempt()
    store.close()
    assert (db.read_bytes(), sorted(os.listdir(db.parent))) == before == looks_bytes


def test_schema_upgraded_under_an_open_store_stops_its_writes(store: SQLiteStore, db: Path) -> None:
    store.write("a", entries(0, 1), snapshot(), create=True)
    with raw(db) as conn:
        conn.execute("UPDATE schema_version SET version = 7")
    with pytest.raises(UnsupportedFormatError, match="newer statekeep"):
        store.write("a", entries(1, 1), None)
    with raw(db) as conn:
        conn.execute("UPDATE schema_version SET version = 3")
    store.write("a", entries(1, 1), None)
    assert store.read("a").entries == entries(0, 2)


def test_empty_file_gets_the_schema(db: Path) -> None:
    db.touch(mode=0o600)
    store = SQLiteStore(db)
    assert store.read("a") is None
    store.close()
    with raw(db) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]


# -- locks ---------------------------------------------------------------------------------------


def test_write_waits_for_another_writer_and_reads_do_not(store: SQLiteStore, db: Path) -> None:
    store.write("a", entries(0, 1), snapshot(), create=True)
    other = raw(db)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    release = threading.Timer(0.5, other.execute, ("COMMIT",))
    release.start()
    start = time.monotonic()
    assert store.read("a") == Record(entries(0, 1), snapshot())  # WAL: readers never wait
    assert time.monotonic() - start < 0.4
    store.write("a", entries(1, 1), None)
    assert time.monotonic() - start >= 0.45
    release.join()
    other.close()
    assert store.read("a").entries == entries(0, 2)


def test_busy_is_retried_then_reported_clearly(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_connections, "BUSY_TIMEOUT_SECONDS", 0.01)  # SQLite gives up at once
    store = SQLiteStore(db)
    store.write("a", [], None, create=True)
    other = raw(db)
    other.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, other.execute, ("COMMIT",))
    release.start()
    store.write("a", entries(0, 1), None)  # statekeep retried until the lock was free
    release.join()
    monkeypatch.setattr(_store, "BUSY_PATIENCE_SECONDS", 0.2)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(TimeoutError, match="stayed locked by another connection"):
        store.write("a", entries(1, 1), None)
    other.execute("ROLLBACK")
    other.close()
    assert store.read("a").entries == entries(0, 1)
    store.close()


# -- several processes ---------------------------------------------------------------------------

ONE_STATE_WRITER = """
    import sys
    from statekeep import SQLiteStore, StateConflictError
    path, sid, name, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = SQLiteStore(path)
    conflicts = 0
    for n in range(count):
        while True:
            seq = len(store.read(sid).entries)
            try:
                store.write(sid, [{"seq": seq, "by": name, "n": n}], {"last": name, "n": n})
                break
            except StateConflictError:
                conflicts += 1
    store.close()
    print(conflicts)
"""


def check_writers(procs: list[subprocess.Popen[str]]) -> int:
    conflicts = 0
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "locked" not in err, err
        conflicts += int(out)
    return conflicts


def test_processes_appending_to_one_state(db: Path) -> None:
    SQLiteStore(db).write("shared", [], None, create=True)
    count, writers = 100, 4
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(ONE_STATE_WRITER), str(db), "shared", f"p{i}", str(count)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(writers)
    ]
    conflicts = check_writers(procs)
    rec = SQLiteStore(db).read("shared")
    assert [e["seq"] for e in rec.entries] == list(range(count * writers))  # dense, nothing lost
    for i in range(writers):  # each acknowledged write exactly once, in its order
        assert [e["n"] for e in rec.entries if e["by"] == f"p{i}"] == list(range(count))
    assert rec.snapshot is not None and rec.snapshot["n"] == count - 1
    print(f"{conflicts} conflicts retried")


MANY_STATES_WRITER = """
    import asyncio, sys
    from statekeep import SQLiteStore, StateConflictError
    path, name, states, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

    async def main():
        store = SQLiteStore(path)
        conflicts = 0

        async def one(sid):
            nonlocal conflicts
            for n in range(rounds):
                while True:
                    seq = len((await store.aread(sid)).entries)
                    try:
                        await store.awrite(sid, [{"seq": seq, "by": name, "n": n}], None)
                        break
                    except StateConflictError:
                        conflicts += 1

        await asyncio.gather(*(one(f"s{i:03d}") for i in range(states)))
        await store.aclose()
        print(conflicts)

    asyncio.run(main())
"""


def test_processes_appending_to_100_states_at_once(db: Path) -> None:
    states, rounds, writers = 100, 5, 4
    store = SQLiteStore(db)
    for i in range(states):
        store.write(f"s{i:03d}", [], snapshot(f"s{i:03d}"), create=True)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(MANY_STATES_WRITER),
                str(db),
                f"p{i}",
                str(states),
                str(rounds),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(writers)
    ]
    conflicts = check_writers(procs)
    for i in range(states):
        rec = store.read(f"s{i:03d}")
        assert [e["seq"] for e in rec.entries] == list(range(rounds * writers))
        for w in range(writers):
            assert [e["n"] for e in rec.entries if e["by"] == f"p{w}"] == list(range(rounds))
    store.close()
    with raw(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    print(f"{conflicts} conflicts retried")


# -- SIGKILL ---------------------------------------------------------------------------------------

KILLED_WRITER = """
    import asyncio, hashlib, random, sys
    from statekeep import SQLiteStore
    path, seed, states = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    def entry(sid, seq):
        rng = random.Random(f"{seed}:{sid}:{seq}")
        size = rng.choice([100, 1_000, 20_000, 200_000, 1_000_000])
        data = hashlib.shake_128(f"{seed}:{sid}:{seq}".encode()).hexdigest(size // 2 + 1)[:size]
        return {"seq": seq, "data": data}

    async def main():
        store = SQLiteStore(path)

        async def one(sid):
            seq = len((await store.aread(sid)).entries)
            rng = random.Random()
            while True:
                count = rng.randint(1, 3)
                ents = [entry(sid, s) for s in range(seq, seq + count)]
                await store.awrite(sid, ents, {"last_seq": seq + count - 1})
                seq += count
                print("ack", sid, seq - 1, flush=True)

        print("ready", flush=True)
        await asyncio.gather(*(one(f"k{i}") for i in range(states)))

    asyncio.run(main())
"""


def killed_entry(seed: int, sid: str, seq: int) -> dict[str, Any]:
    import hashlib

    rng = random.Random(f"{seed}:{sid}:{seq}")
    size = rng.choice([100, 1_000, 20_000, 200_000, 1_000_000])
    data = hashlib.shake_128(f"{seed}:{sid}:{seq}".encode()).hexdigest(size // 2 + 1)[:size]
    return {"seq": seq, "data": data}


def test_sigkill_keeps_every_acknowledged_write(db: Path) -> None:
    seed = random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    states = 3
    store = SQLiteStore(db)
    for i in range(states):
        store.write(f"k{i}", [], {"last_seq": -1}, create=True)
    store.close()
    acked = {f"k{i}": -1 for i in range(states)}
    for kill in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(KILLED_WRITER), str(db), str(seed), str(states)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n", proc.stderr.read() if proc.stderr else ""
        for _ in range(rng.randint(3, 30)):
            line = proc.stdout.readline()
            assert line.startswith("ack "), (line, proc.stderr.read() if proc.stderr else "")
            _, sid, seq = line.split()
            acked[sid] = max(acked[sid], int(seq))
        time.sleep(rng.random() * 0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        # Read on through the same buffered pipe (communicate() would skip what readline()
        # buffered): acknowledged before the kill landed; a line the kill cut short is left out.
        rest = proc.stdout.read()
        assert proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
        for line in rest.split("\n")[:-1]:
            _, sid, seq = line.split()
            acked[sid] = max(acked[sid], int(seq))
        reader = SQLiteStore(db)
        for sid, last in acked.items():
            rec = reader.read(sid)
            assert rec is not None
            n = len(rec.entries)
            assert n >= last + 1, f"seed {seed}, kill {kill}: {sid} lost acknowledged seqs {n}..{last}"
            for seq in range(n):  # nothing that was never written, byte for byte
                assert rec.entries[seq] == killed_entry(seed, sid, seq), f"seed {seed}: {sid} seq {seq}"
            assert rec.snapshot == {"last_seq": n - 1}  # entries and snapshot committed together
        reader.close()
    with raw(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


# -- fork ----------------------------------------------------------------------------------------


def test_forked_child_opens_its_own_connections(store: SQLiteStore) -> None:
    store.write("parent", entries(0, 1), snapshot(), create=True)
    assert store.read("parent") is not None  # the parent has a writer and a reader open
    parent_conns = store._conns
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            store.write("child", entries(0, 2), snapshot("child"), create=True)
            if (
                store.read("child") == Record(entries(0, 2), snapshot("child"))
                and store._conns is not parent_conns
            ):
                code = 0
        finally:
            os._exit(code)
    status: list[int] = []
    waiter = threading.Thread(target=lambda: status.append(os.waitpid(pid, 0)[1]), daemon=True)
    waiter.start()
    waiter.join(60)
    if waiter.is_alive():
        os.kill(pid, signal.SIGKILL)
        waiter.join()
        pytest.fail("the forked child hung")
    assert os.waitstatus_to_exitcode(status[0]) == 0
    store.write("parent", entries(1, 1), None)  # the parent's connections still work
    assert store._conns is parent_conns
    assert store.read("parent").entries == entries(0, 2)
    assert store.read("child") == Record(entries(0, 2), snapshot("child"))


# -- the model ------------------------------------------------------------------------------------


class SQLiteMachine(StoreMachine):
    """The kit's rules (statekeep.testing.StoreMachine, run by tests/store/test_conformance.py)
    against SQLiteStore in a fresh file, where a second instance (as another process would)
    writes, deletes and re-creates between the main instance's calls; at the end the
    database passes SQLite's own checks."""

    def teardown(self) -> None:
        path = self.folder / "store.db"
        try:
            self.store.close()
            if not path.exists():  # only reads and lists so far
                assert not self.model
                return
            with raw(path) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
                assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
                assert conn.execute("SELECT count(*) FROM states").fetchone() == (len(self.model),)
        finally:
            super().teardown()


def fds_on(db: Path) -> int:
    """This process's open file descriptors on the database and its WAL and shm files."""
    names = {str(db), f"{db}-wal", f"{db}-shm"}
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") in names
        except OSError:
            pass  # closed meanwhile
    return count


def test_dropped_stores_are_closed_forgotten_and_warned_about(db: Path) -> None:
    with SQLiteStore(db) as first:
        first.write("a", entries(0, 1), snapshot(), create=True)
    drop_and_collect([])  # stores other tests left behind
    closers = len(owner().closers)
    stores = []
    count = 200  # each holds about three descriptors (db, -wal, -shm): fits a 1024 limit
    for _ in range(count):
        store = SQLiteStore(db)
        assert store.read("a") is not None  # holds a connection from here on
        stores.append(store)
    del store
    assert len(owner().closers) == closers + count and fds_on(db) >= count
    warned = drop_and_collect(stores)
    assert len(owner().closers) == closers  # not one left registered
    assert fds_on(db) == 0  # and every connection really closed
    assert len(warned) == count and all(f"SQLiteStore({str(db)!r})" in w for w in warned)


def test_a_store_that_holds_nothing_is_dropped_without_warning(db: Path) -> None:
    unused = SQLiteStore(db)
    closed = SQLiteStore(db)
    closed.write("a", [], None, create=True)
    closed.close()
    with SQLiteStore(db) as used_in_with:
        used_in_with.read("a")
    assert drop_and_collect([unused, closed, used_in_with]) == []

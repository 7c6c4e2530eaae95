"""SQLiteStore's issue-10 parts beyond the conformance suite: the version 2 migration of a
version 1 file, listings answered from indexes, the fork copied inside the database,
expiry judged by the store's clock, gc racing writers from several processes, and
namespaces sharing one file."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from statekeep import Record, SQLiteStore, StateConflictError, StateExistsError, StateNotFoundError
from statekeep._core.query import make_query
from statekeep._run.lineage import fork_state
from statekeep.stores._sqlite import _schema, _sql
from statekeep.stores._sqlite._listing import listing_sql
from statekeep.stores._sqlite._schema import SCHEMA_VERSION
from statekeep.testing import entries, snapshot
from tests.support import REPO

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(db: Path, clock: Clock) -> Iterator[SQLiteStore]:
    s = SQLiteStore(db, clock=clock)
    yield s
    s.close()


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None, timeout=30)


def snap(task: str = "task", *, minute: int = 0, **extra: Any) -> dict[str, Any]:
    return {**snapshot(task, updated=(T0 + timedelta(minutes=minute)).isoformat()), **extra}


def hist(n: int) -> list[dict[str, Any]]:
    """A history a State replays (a fork needs one): the task, then user messages."""
    at = T0.isoformat()
    return [{"seq": 0, "kind": "task", "at": at, "text": "task"}] + [
        {"seq": i, "kind": "user", "at": at, "text": f"message {i}"} for i in range(1, n)
    ]


def ids(rows: Any) -> list[str]:
    return [r.id for r in rows]


# -- the version 2 migration ----------------------------------------------------------------------


def make_v1_file(db: Path) -> None:
    """A database as statekeep 0.x with schema version 1 left it (its schema is the first
    migration step, unchanged since): two States, one with keys only version 2 lists."""
    conn = raw(db)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN")
    conn.execute(_sql.CREATE_VERSION_TABLE)
    for statement in _sql.MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute("INSERT INTO schema_version VALUES (1)")
    old = snap("old", minute=1)
    tagged = snap("tagged", minute=2, agent="planner", labels={"env": "prod"}, parent="old")
    for sid, value, n in (("old", old, 2), ("tagged", tagged, 1)):
        conn.execute(
            "INSERT INTO states (id, next_seq, task, created_at, updated_at, turn, stopped_by, finished, "
            "unlisted, snapshot) VALUES (?, ?, ?, ?, ?, 0, NULL, 0, NULL, ?)",
            (sid, n, value["task"], T0.isoformat(timespec="microseconds"),
             datetime.fromisoformat(value["updated_at"]).isoformat(timespec="microseconds"),
             orjson.dumps(value).decode()),
        )  # fmt: skip
        for e in hist(n):
            conn.execute("INSERT INTO entries VALUES (?, ?, ?)", (sid, e["seq"], orjson.dumps(e).decode()))
    conn.execute("INSERT INTO states (id, next_seq, snapshot) VALUES ('bare', 0, NULL)")
    conn.execute("COMMIT")
    conn.close()


def test_a_version_1_file_upgrades_in_place_as_the_default_namespace(db: Path) -> None:
    make_v1_file(db)
    store = SQLiteStore(db)
    assert store.read("old") == Record(hist(2), snap("old", minute=1))
    assert ids(store.list()) == ["tagged", "old"]
    # The new listing columns were filled from the snapshots the file already held.
    [tagged] = store.list(labels={"env": "prod"})
    assert (tagged.id, tagged.agent, tagged.parent, tagged.labels) == (
        "tagged",
        "planner",
        "old",
        {"env": "prod"},
    )
    assert ids(store.list(agent="planner")) == ids(store.list(parent="old")) == ["tagged"]
    assert store.read("bare") == Record([], None)
    store.write("old", hist(3)[2:], snap("old", minute=3))
    assert ids(store.list()) == ["old", "tagged"]
    assert store.fork("old", at_seq=1, new_id="copy").history == hist(2)
    assert SQLiteStore(db, namespace="other").list() == []
    store.close()
    with raw(db) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "states_v1" not in tables and "entries_v1" not in tables
    conn.close()


def test_a_migration_that_fails_leaves_the_version_1_file_whole(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_v1_file(db)

    def fail(conn: sqlite3.Connection) -> None:
        raise OSError("disk gone mid-migration")

    monkeypatch.setattr(_schema, "refill", fail)
    broken = SQLiteStore(db)
    with pytest.raises(OSError, match="mid-migration"):
        broken.read("old")
    broken.close()
    with raw(db) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(1,)]
        assert conn.execute("SELECT count(*) FROM entries WHERE state_id = 'old'").fetchone() == (2,)
    conn.close()
    monkeypatch.undo()
    store = SQLiteStore(db)
    assert store.read("old") == Record(hist(2), snap("old", minute=1))
    store.close()


def test_create_false_refuses_a_version_1_file_unchanged(db: Path) -> None:
    make_v1_file(db)
    before = db.read_bytes()
    with pytest.raises(Exception, match=f"version 1, older than this statekeep's {SCHEMA_VERSION}"):
        SQLiteStore(db, create=False).read("old")
    assert db.read_bytes() == before


# -- listings from indexes ------------------------------------------------------------------------

# Each filter, and the index whose range answers it (then the equality terms it searches by).
FILTERS: list[tuple[dict[str, Any], str]] = [
    ({}, "states_listing (namespace=?"),
    ({"agent": "planner"}, "states_agent (namespace=? AND agent=?"),
    ({"parent": "root"}, "states_parent (namespace=? AND parent=?"),
    ({"labels": {"env": "prod"}}, "labels_listing (namespace=? AND key=? AND value=?"),
    ({"labels": {"env": "prod", "user": "u1"}}, "labels_listing (namespace=? AND key=? AND value=?"),
    ({"status": "running"}, "states_status (namespace=? AND status=?"),
    ({"status": "finished"}, "states_status (namespace=? AND status=?"),
    ({"status": "max_turns"}, "states_status (namespace=? AND status=?"),
    ({"finished": True}, "states_status (namespace=? AND status=?"),
    ({"finished": False}, "states_unfinished (namespace=?"),
    ({"stopped_by": "max_turns"}, "states_stopped (namespace=? AND stopped_by=?"),
    ({"updated_after": T0}, "states_listing (namespace=? AND updated_at>?"),
    ({"updated_before": T0}, "states_listing (namespace=? AND updated_at>? AND updated_at<?"),
    ({"id_prefix": "run-"}, "sqlite_autoindex_states_1 (namespace=? AND id>? AND id<?"),  # the primary key
    ({"agent": "planner", "labels": {"env": "prod"}, "finished": False}, "labels_listing"),
]


@pytest.mark.parametrize("paged", [False, True], ids=["first page", "later page"])
@pytest.mark.parametrize(
    ("filters", "index"), FILTERS, ids=lambda f: ",".join(f) if isinstance(f, dict) else ""
)
def test_every_listing_filter_is_answered_from_its_index(
    store: SQLiteStore, db: Path, filters: dict[str, Any], index: str, paged: bool
) -> None:
    store.write("a", [], snap(agent="planner", labels={"env": "prod"}), create=True)
    query = make_query(limit=50, **filters)
    if paged:
        query = query.with_after((T0, "a"))
    text, params = listing_sql("default", query, "2026-01-01T00:00:00.000000+00:00")
    with raw(db) as conn:
        plan = [str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + text, params)]
    conn.close()
    steps = [p for p in plan if p.startswith(("SEARCH", "SCAN"))]
    assert steps and all(p.startswith("SEARCH") for p in steps), plan  # ranges of indexes, never a scan
    assert index in steps[0], plan
    if "id_prefix" not in filters:  # the index gives the order: a page stops when it is full
        assert not any("TEMP B-TREE" in p for p in plan), plan


def test_filters_and_pages_agree_with_the_rows(store: SQLiteStore) -> None:
    # Each kind of row, for the filters whose SQL is the store's own (conformance covers more).
    store.write(
        "run-1", [], snap(minute=1, agent="planner", labels={"env": "prod", "user": "u1"}), create=True
    )
    store.write(
        "run-2", [], snap(minute=2, agent="coder", parent="run-1", labels={"env": "dev"}), create=True
    )
    store.write("run-3", [], {**snap(minute=3, labels={"env": "prod"}), "finished": True}, create=True)
    store.write("x-4", [], {**snap(minute=3), "stopped_by": "max_turns"}, create=True)
    assert ids(store.list()) == ["run-3", "x-4", "run-2", "run-1"]
    assert ids(store.list(labels={"env": "prod"})) == ["run-3", "run-1"]
    assert ids(store.list(labels={"env": "prod", "user": "u1"})) == ["run-1"]
    assert ids(store.list(status="running")) == ["run-2", "run-1"]
    assert ids(store.list(status="max_turns")) == ids(store.list(stopped_by="max_turns")) == ["x-4"]
    assert ids(store.list(finished=True)) == ["run-3"]
    assert ids(store.list(finished=False)) == ["x-4", "run-2", "run-1"]
    assert ids(store.list(id_prefix="run-")) == ["run-3", "run-2", "run-1"]
    assert ids(store.list(updated_after=T0 + timedelta(minutes=1))) == ["run-3", "x-4", "run-2"]
    walked, after = [], None
    while True:
        page = store.list(limit=1, after=after, id_prefix="run-")
        walked += ids(page)
        if page.next is None:
            break
        after = page.next
    assert walked == ["run-3", "run-2", "run-1"]
    # A new save replaces the labels a filter finds.
    store.write("run-1", [], snap(minute=4, labels={"env": "dev"}))
    assert ids(store.list(labels={"env": "prod"})) == ["run-3"]
    assert ids(store.list(labels={"env": "dev"})) == ["run-1", "run-2"]


def test_a_deleted_state_leaves_no_label_rows(store: SQLiteStore, db: Path) -> None:
    store.write("a", entries(0, 2), snap(labels={"env": "prod", "user": "u1"}), create=True)
    store.delete("a")
    with raw(db) as conn:
        assert [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("states", "entries", "labels")] == [
            0, 0, 0,
        ]  # fmt: skip
    conn.close()


# -- fork -----------------------------------------------------------------------------------------


def test_fork_copies_the_entries_inside_the_database(store: SQLiteStore, db: Path) -> None:
    store.write("src", hist(5), snap(labels={"env": "prod"}), create=True)
    fork = store.fork("src", at_seq=2, new_id="f")
    assert fork.forked_from == {"id": "src", "seq": 2}
    assert store.read("f") is not None and store.read("f").entries == hist(3)  # type: ignore[union-attr]
    assert store.read("src") == Record(hist(5), snap(labels={"env": "prod"}))
    [row] = store.list(labels={"env": "prod"}, id_prefix="f")
    assert row.forked_from == {"id": "src", "seq": 2}
    with raw(db) as conn:
        copied = conn.execute("SELECT data FROM entries WHERE state_id = 'f' ORDER BY seq").fetchall()
        source = conn.execute(
            "SELECT data FROM entries WHERE state_id = 'src' AND seq < 3 ORDER BY seq"
        ).fetchall()
    conn.close()
    assert copied == source  # the stored text itself, copied
    with pytest.raises(StateExistsError):
        store.fork("src", new_id="f")


def test_a_fork_whose_source_goes_away_before_the_copy_creates_nothing(store: SQLiteStore) -> None:
    store.write("src", hist(3), snap(), create=True)
    read = store.aread

    async def read_then_delete(state_id: str) -> Record | None:
        record = await read(state_id)
        await store.adelete(state_id)  # between the fork's read and its write
        return record

    store.aread = read_then_delete  # type: ignore[method-assign]
    with pytest.raises(StateNotFoundError, match="src"):
        store.fork("src", new_id="f")
    del store.aread
    assert store.read("f") is None and store.list() == []


# -- expiry by the store's clock ------------------------------------------------------------------


def test_expired_is_absent_and_a_create_replaces_it(store: SQLiteStore, db: Path, clock: Clock) -> None:
    store.write(
        "a", entries(0, 3), snap(labels={"env": "prod"}, expires_at="2026-01-01T01:00:00+00:00"), create=True
    )
    clock.now = T0 + timedelta(hours=1)  # expires_at <= now: expired
    assert store.read("a") is None and store.list() == [] and store.list(labels={"env": "prod"}) == []
    with pytest.raises(StateNotFoundError):
        store.write("a", entries(3, 1), None)
    with pytest.raises(StateNotFoundError):
        store.fork("a")
    store.write("a", entries(0, 1), snap("new"), create=True)
    assert store.read("a") == Record(entries(0, 1), snap("new"))
    assert ids(store.list()) == ["a"] and store.list(labels={"env": "prod"}) == []
    assert store.gc() == 0


def test_retention_stamps_by_the_store_clock_and_gc_removes(db: Path, clock: Clock) -> None:
    store = SQLiteStore(db, retention=timedelta(minutes=10), clock=clock)
    store.write("a", entries(0, 2), snap(), create=True)
    store.write("keep", [], snap(expires_at="2027-01-01T00:00:00+00:00"), create=True)
    [row] = store.list(id_prefix="a")
    assert row.expires_at == T0 + timedelta(minutes=10)
    clock.now = T0 + timedelta(minutes=9)
    store.write("b", [], snap(), create=True)  # expires at minute 19
    clock.now = T0 + timedelta(minutes=10)
    assert store.gc() == 1 and store.read("a") is None
    clock.now = T0 + timedelta(minutes=30)
    assert store.gc(limit=1) == 1 and store.gc() == 0
    assert ids(store.list()) == ["keep"]
    with raw(db) as conn:
        assert conn.execute("SELECT count(*) FROM entries").fetchone() == (0,)
    conn.close()
    store.close()


GC_RACE = """
    import sys
    from datetime import datetime
    from statekeep import SQLiteStore, StateNotFoundError
    from statekeep.testing import snapshot

    role, db, now, last = sys.argv[1:5]
    when = datetime.fromisoformat(now)
    store = SQLiteStore(db, clock=lambda: when)
    sys.stdin.readline()  # every process starts together
    if role == "gc":
        print(sum(store.gc(limit=3) for _ in range(40)))
    else:
        for i in range(int(last) - 1, -1, -2):  # from the end, where gc (in id order) ends
            try:  # extends the State well past the gc processes' clock
                store.write(f"s{i}", [], {**snapshot(), "expires_at": "2030-01-01T00:00:00+00:00"})
                print(f"s{i}")
            except StateNotFoundError:
                pass
    store.close()
"""


def test_gc_from_several_processes_never_removes_a_state_a_writer_extended(db: Path) -> None:
    store = SQLiteStore(db)
    n = 400
    for i in range(n):
        store.write(f"s{i}", entries(0, 1), snap(expires_at="2026-06-01T00:00:00+00:00"), create=True)
    store.close()
    # Writers see the States live (May); gc sees them expired (July) unless extended.
    roles = [("gc", "2026-07-01T00:00:00+00:00", 0)] * 3 + [
        ("write", "2026-05-01T00:00:00+00:00", n - k) for k in range(2)
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(GC_RACE), role, str(db), now, str(last)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role, now, last in roles
    ]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outs = [proc.communicate(timeout=300) for proc in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err
    removed = sum(int(out) for out, _ in outs[:3])
    extended = {line for out, _ in outs[3:] for line in out.split()}
    late = SQLiteStore(db, clock=lambda: datetime(2026, 7, 1, tzinfo=UTC))
    left = set(ids(late.list()))
    late.gc()  # whatever the gc processes had not reached yet
    assert set(ids(late.list())) == extended <= left  # every extended State is there, whole
    assert removed + len(extended) <= n and removed == n - len(left)  # each removal counted once
    for sid in extended:
        assert late.read(sid) == Record(
            entries(0, 1), {**snapshot(), "expires_at": "2030-01-01T00:00:00+00:00"}
        )
    late.close()


# -- namespaces -----------------------------------------------------------------------------------


def test_namespaces_in_one_file_never_see_each_other(db: Path, clock: Clock) -> None:
    a = SQLiteStore(db, namespace="a", clock=clock)
    b = SQLiteStore(db, namespace="b", clock=clock)
    default = SQLiteStore(db, clock=clock)
    a.write(
        "x",
        entries(0, 2),
        snap("in a", labels={"k": "v"}, expires_at="2026-01-01T01:00:00+00:00"),
        create=True,
    )
    b.write("x", entries(0, 1), snap("in b", labels={"k": "v"}), create=True)
    assert a.read("x") == Record(
        entries(0, 2), snap("in a", labels={"k": "v"}, expires_at="2026-01-01T01:00:00+00:00")
    )
    assert b.read("x") == Record(entries(0, 1), snap("in b", labels={"k": "v"}))
    assert default.read("x") is None and default.list() == []
    assert [r.task for r in a.list(labels={"k": "v"})] == ["in a"]
    assert [r.task for r in b.list(labels={"k": "v"})] == ["in b"]
    a.memory().put("note", 1)
    assert b.memory().get("note") is None and a.memory().get("note").value == 1  # type: ignore[union-attr]
    assert a.memory("other").get("note") is None
    assert ids(a.list()) == ["x"]  # memory is not a State
    clock.now = T0 + timedelta(hours=2)
    assert b.gc() == 0 and a.gc() == 1 and b.read("x") is not None
    b.delete("x")
    assert a != b and a == SQLiteStore(db, namespace="a")
    assert repr(a) == f"SQLiteStore({str(db)!r}, namespace='a')"
    with pytest.raises(ValueError, match="invalid namespace"):
        SQLiteStore(db, namespace="A.b")
    for s in (a, b, default):
        s.close()


def test_memory_closes_with_its_store(store: SQLiteStore) -> None:
    memory = store.memory()
    memory.put("k", "v")
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        memory.get("k")


class BusyOnce:
    """A connection whose next statement SQLite reports busy (as in WAL recovery, which no
    test can hold still), then the real one."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn, self.busy = conn, True

    def execute(self, *args: Any) -> Any:
        if self.busy:
            self.busy = False
            exc = sqlite3.OperationalError("database is locked")
            exc.sqlite_errorcode = sqlite3.SQLITE_BUSY  # type: ignore[attr-defined]
            raise exc
        return self.conn.execute(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def test_a_page_read_on_the_loop_goes_to_a_worker_when_busy(store: SQLiteStore) -> None:
    # Small pages are read on the owner loop by a reader that never waits; busy, the page
    # is read by a worker thread instead, which may wait.
    store.write("a", [], snap(), create=True)
    assert ids(store.list(limit=10)) == ["a"]  # the loop's reader is made
    conns = store._conns
    assert conns is not None and conns.loop_reader is not None
    real = conns.loop_reader
    conns.loop_reader = BusyOnce(real)  # type: ignore[assignment]
    workers = []
    read_on_a_worker = store._select_once

    def counted(*args: Any) -> Any:
        workers.append(True)
        return read_on_a_worker(*args)

    store._select_once = counted  # type: ignore[method-assign]
    assert ids(store.list(limit=10)) == ["a"] and workers == [True]
    assert ids(store.list(limit=10)) == ["a"] and workers == [True]  # no longer busy: on the loop
    assert ids(store.list(limit=1000)) == ["a"] and workers == [True, True]  # a large page: a worker
    conns.loop_reader = real


# -- review fixes: tree deletes and gc dry runs see expired States; snapshot reads; fork race ------


def test_a_tree_delete_reaches_live_states_under_an_expired_one(store: SQLiteStore, clock: Clock) -> None:
    store.write("root", [], snap(), create=True)
    store.write("mid", [], snap(parent="root", expires_at="2026-01-01T01:00:00+00:00"), create=True)
    store.write("leaf", [], snap(parent="mid"), create=True)
    clock.now = T0 + timedelta(hours=1)  # mid is expired, so no listing shows it
    store.delete("root", children=True)
    assert store.read("leaf") is None and store.list() == []
    clock.now = T0  # mid was removed too, not just hidden by its expiry
    assert store.read("mid") is None


def test_gc_dry_run_counts_what_gc_removes_and_removes_nothing(
    store: SQLiteStore, db: Path, clock: Clock
) -> None:
    hour = "2026-01-01T01:00:00+00:00"
    store.write("a", entries(0, 2), snap(expires_at=hour), create=True)
    store.write("unlisted", [], {"expires_at": hour}, create=True)  # no listing row: gc removes it too
    store.write("later", [], snap(expires_at="2026-01-02T00:00:00+00:00"), create=True)
    store.write("keep", [], snap(), create=True)
    other = SQLiteStore(db, namespace="other", clock=clock)
    other.write("b", [], snap(expires_at=hour), create=True)
    assert store.gc(dry_run=True) == 0
    clock.now = T0 + timedelta(hours=1)
    assert store.gc(dry_run=True) == 2 and other.gc(dry_run=True) == 1
    clock.now = T0
    assert store.read("a") is not None and store.read("unlisted") is not None  # nothing removed
    clock.now = T0 + timedelta(hours=1)
    assert store.gc() == 2 and store.gc(dry_run=True) == 0
    other.close()


def test_a_snapshot_read_reads_the_states_row_alone(store: SQLiteStore, db: Path, clock: Clock) -> None:
    store.write("k", entries(0, 3), snap(expires_at="2026-01-01T01:00:00+00:00"), create=True)
    with raw(db) as conn:
        conn.execute("DELETE FROM entries WHERE state_id = 'k'")  # a history read would now fail
    conn.close()
    assert asyncio.run(store.aread_snapshot("k")) == snap(expires_at="2026-01-01T01:00:00+00:00")
    assert asyncio.run(store.aread_snapshot("missing")) is None
    assert asyncio.run(SQLiteStore(db, namespace="other").aread_snapshot("k")) is None
    clock.now = T0 + timedelta(hours=1)
    assert asyncio.run(store.aread_snapshot("k")) is None  # expired: absent


def test_a_fork_of_a_source_deleted_and_written_again_meanwhile_creates_nothing(store: SQLiteStore) -> None:
    store.write("src", hist(3), snap(), create=True)
    record = store.read("src")
    assert record is not None
    _, forked, fork_snapshot = fork_state("src", record, None, "f", None)
    store.delete("src")  # between the fork's read and its write: another history, as long
    store.write("src", [{**e, "text": "other"} for e in hist(3)], snap(), create=True)
    with pytest.raises(StateConflictError, match="src"):
        asyncio.run(store._afork_write("src", forked, fork_snapshot, "f", None))
    assert store.read("f") is None and ids(store.list()) == ["src"]


def test_a_fork_compares_entries_by_value_not_by_their_stored_spelling(store: SQLiteStore, db: Path) -> None:
    store.write("src", hist(2), snap(), create=True)
    spaced = orjson.dumps(hist(2)[1], option=orjson.OPT_INDENT_2).decode()
    with raw(db) as conn:  # the same entry, written by another encoder
        conn.execute("UPDATE entries SET data = ? WHERE state_id = 'src' AND seq = 1", (spaced,))
    conn.close()
    store.fork("src", new_id="f")
    fork = store.read("f")
    assert fork is not None and fork.entries == hist(2)


def test_agent_memory_reads_a_keys_snapshot_not_its_history(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    store = SQLiteStore(path)
    notes = store.memory("notes")
    for value in range(3):
        notes.put("k", value)
    with sqlite3.connect(path) as conn:  # the key's change history gone: get must not need it
        assert conn.execute("DELETE FROM entries WHERE namespace = 'default.memory.notes'").rowcount == 3
    item = notes.get("k")
    assert item is not None and (item.value, item.revision) == (2, 3)
    store.close()


def test_a_range_read_is_a_range_of_the_entries_key(store: SQLiteStore, db: Path) -> None:
    # read(id, since=N) reads the primary key from (namespace, id, N): it costs what it returns.
    store.write("a", entries(0, 5), snapshot(), create=True)
    assert store.read("a", since=3) == Record(entries(3, 2), snapshot())
    with raw(db) as conn:
        plan = [
            str(row[-1])
            for row in conn.execute(
                "EXPLAIN QUERY PLAN " + _sql.READ, ("default", "a", "default", "a", 3, -1)
            )
        ]
    conn.close()
    # The State's row and its entries are merged in order: the entries side is read in
    # the key's order, never sorted, so a LIMIT stops it.
    reads = [step for step in plan if "entries" in step]
    assert len(reads) == 1 and reads[0].startswith("SEARCH entries"), plan
    assert "seq>?" in reads[0].replace(" ", ""), plan
    assert "MERGE (UNION ALL)" in plan, plan

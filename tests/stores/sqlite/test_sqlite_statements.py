"""What SQLiteStore asks of SQLite per operation, counted with a trace callback on its own
connections: a steady-state write, a small read and a listing page each run only the
statements their work needs (no setting flipped back and forth, no label rows touched for
a State without labels, the schema version read with the rows)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeep import CorruptStateError, Record, SQLiteStore, UnsupportedFormatError
from statekeep.stores._sqlite._schema import SCHEMA_VERSION
from statekeep.testing import entries, snapshot


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "store.db")
    yield s
    s.close()


class Traced:
    """The statements SQLite runs on the store's connections of this process, from now on."""

    def __init__(self, store: SQLiteStore) -> None:
        conns = store._conns
        assert conns is not None
        self.statements: list[str] = []
        for conn in (conns.writer, conns.loop_reader, *conns.idle):
            if conn is not None:
                conn.set_trace_callback(self.statements.append)
        self.conns = [conns.writer, conns.loop_reader, *conns.idle]

    def stop(self) -> list[str]:
        for conn in self.conns:
            if conn is not None:
                conn.set_trace_callback(None)
        return self.statements


def warm(store: SQLiteStore, sid: str = "a") -> int:
    """Make State ``sid`` with a few writes (the connections are made by then); its next seq."""
    store.write(sid, entries(0, 3), snapshot(turn=0), create=True)
    for turn in range(1, 4):
        store.write(sid, entries(turn * 3, 3), snapshot(turn=turn))
    store.read(sid)
    store.list(limit=50)
    return 12


def test_a_write_runs_at_most_seven_statements(store: SQLiteStore) -> None:
    seq = warm(store)
    traced = Traced(store)
    store.write("a", entries(seq, 3), snapshot(turn=4))
    statements = traced.stop()
    # BEGIN IMMEDIATE; the State, its lease and the schema version in one query; the
    # snapshot's update; the 3 entries; COMMIT (raw sqlite3 needs 6).
    assert len(statements) <= 7, statements
    assert not [s for s in statements if s.upper().startswith("PRAGMA")], statements
    assert not [s for s in statements if touches_labels(s)], statements
    assert store.read("a").entries == entries(0, seq + 3)


def touches_labels(statement: str) -> bool:
    return "from labels" in statement.lower() or "into labels" in statement.lower()


def test_a_delete_touches_only_what_the_state_has(store: SQLiteStore) -> None:
    warm(store)
    store.write("b", entries(0, 1), snapshot() | {"labels": {"user": "u1"}}, create=True)
    traced = Traced(store)
    store.delete("a")  # no labels
    statements = traced.stop()
    assert not [s for s in statements if touches_labels(s)], statements
    traced = Traced(store)
    store.delete("nobody")  # nothing there: BEGIN IMMEDIATE; the State, its lease, the version; COMMIT
    statements = traced.stop()
    assert len(statements) == 3, statements
    store.delete("b")
    assert store.read("a") is None and store.read("b") is None
    assert store.list(labels={"user": "u1"}) == []
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT count(*) FROM labels").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM entries").fetchone() == (0,)


def test_a_small_read_is_one_statement(store: SQLiteStore) -> None:
    warm(store)
    traced = Traced(store)
    record = store.read("a")
    statements = traced.stop()
    assert record is not None and record.entries == entries(0, 12)
    assert len(statements) == 1, statements


def test_a_listing_page_is_one_statement(store: SQLiteStore) -> None:
    warm(store)
    for i in range(60):
        store.write(f"s{i:02d}", [], snapshot(turn=i), create=True)
    traced = Traced(store)
    page = store.list(limit=50)
    statements = traced.stop()
    assert len(page) == 50 and page.next is not None
    assert len(statements) == 1, statements


def test_label_rows_follow_the_snapshot(store: SQLiteStore) -> None:
    # A write to a State without labels touches no label rows; one that had labels has
    # them replaced (or removed) with the snapshot.
    store.write("a", [], snapshot(), create=True)
    store.write("a", [], snapshot(turn=1) | {"labels": {"user": "u1", "team": "t"}})
    assert [r.id for r in store.list(labels={"user": "u1"})] == ["a"]
    store.write("a", [], snapshot(turn=2) | {"labels": {"user": "u2"}})
    assert [r.id for r in store.list(labels={"user": "u1"})] == []
    assert [r.id for r in store.list(labels={"team": "t"})] == []
    assert [r.id for r in store.list(labels={"user": "u2"})] == ["a"]
    store.write("a", entries(0, 1), None)  # no snapshot: the labels stay
    assert [r.id for r in store.list(labels={"user": "u2"})] == ["a"]
    store.write("a", [], snapshot(turn=3))
    assert [r.id for r in store.list(labels={"user": "u2"})] == []
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT count(*) FROM labels").fetchone() == (0,)


def test_a_newer_schema_the_write_query_does_not_fit_is_refused_as_newer(store: SQLiteStore) -> None:
    # The version is read by the query that reads the States; a newer statekeep may have
    # changed the tables under it: the write is refused as written by a newer statekeep,
    # not with SQLite's complaint about a column.
    warm(store)
    with sqlite3.connect(store.path, isolation_level=None) as conn:
        conn.execute("ALTER TABLE states DROP COLUMN incarnation")
        conn.execute(f"UPDATE schema_version SET version = {SCHEMA_VERSION + 1}")
    with pytest.raises(UnsupportedFormatError, match="newer statekeep"):
        store.write("a", entries(12, 1), None)
    with sqlite3.connect(store.path, isolation_level=None) as conn:
        assert conn.execute("SELECT max(seq) FROM entries").fetchone() == (11,)


@pytest.mark.parametrize("count", [3, 250], ids=["on-the-loop", "in-a-worker"])
def test_reads_short_and_long_histories_whole(store: SQLiteStore, count: int) -> None:
    # A short history is read on the owner loop, a long one in a worker thread: the same Record.
    store.write("a", entries(0, count), snapshot(), create=True)
    assert store.read("a") == Record(entries(0, count), snapshot())
    assert store.read("a", since=count - 2) == Record(entries(count - 2, 2), snapshot())
    assert store.read("a", since=count + 5) == Record([], snapshot())
    assert store.read("nobody") is None


@pytest.mark.parametrize("count", [3, 250], ids=["on-the-loop", "in-a-worker"])
def test_a_read_after_another_process_upgraded_the_file_is_refused(store: SQLiteStore, count: int) -> None:
    store.write("a", entries(0, count), snapshot(), create=True)
    assert store.read("a") is not None
    with sqlite3.connect(store.path, isolation_level=None) as conn:
        conn.execute(f"UPDATE schema_version SET version = {SCHEMA_VERSION + 1}")
    with pytest.raises(UnsupportedFormatError, match="newer statekeep"):
        store.read("a")
    with pytest.raises(UnsupportedFormatError, match="newer statekeep"):
        store.read("nobody")
    with sqlite3.connect(store.path, isolation_level=None) as conn:
        conn.execute("ALTER TABLE states DROP COLUMN incarnation")  # a newer layout the read does not fit
    with pytest.raises(UnsupportedFormatError, match="newer statekeep"):
        store.read("a")


def test_a_history_shorter_than_its_next_seq_is_reported(store: SQLiteStore) -> None:
    store.write("a", entries(0, 3), snapshot(), create=True)
    with sqlite3.connect(store.path, isolation_level=None) as conn:
        conn.execute("DELETE FROM entries WHERE seq = 1")
    with pytest.raises(CorruptStateError, match=r"records next seq 3 but has 2 entries from seq 0"):
        store.read("a")

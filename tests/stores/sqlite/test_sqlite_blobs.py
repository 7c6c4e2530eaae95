"""SQLiteStore's blobs (issue 24, item 1), at the backend level: a write stores its blobs and
its references in the transaction of its entries, once per name for the whole file (every
namespace); ``_get_blobs`` reads them; gc removes those no State refers to (a dry run counts
them), beside a writer in another process; after delete and gc the bytes are gone from the
database file and its WAL; schema version 5 adds the tables, migrated from version 4 and
refused by an older statekeep; a write without blobs runs no more statements than before."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeep import SQLiteStore
from statekeep._core.writes import prepare_write
from statekeep.stores._sqlite._schema import SCHEMA_VERSION
from statekeep.testing import entries, snapshot
from tests.stores.sqlite.test_sqlite_statements import Traced, warm
from tests.support import blob_trim
from tests.support import blobs as shared
from tests.support.blobs import blob, blob_write, gc_blobs, get_blobs, usage, write
from tests.support.older import run_older


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "store.db")
    yield s
    s.close()


def rows(store: SQLiteStore, query: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(store.path) as conn:
        found = conn.execute(query).fetchall()
    conn.close()
    return found


def make_store(store: SQLiteStore) -> str:
    """Python that opens ``store``'s file in another process."""
    return f"from statekeep import SQLiteStore; store = SQLiteStore({str(store.path)!r})"


def test_a_write_stores_its_blobs_once_across_states_and_namespaces(store: SQLiteStore) -> None:
    name, other_name = shared.check_stored_once_across_states_and_namespaces(store)
    assert rows(store, "SELECT count(*), sum(length(data)) FROM blobs") == [(2, 90_000)]
    assert sorted(rows(store, "SELECT namespace, state_id, name, seq FROM blob_refs")) == sorted(
        [("default", "a", name, 0), ("default", "a", other_name, 0), ("default", "b", name, 0),
         ("memory", "a", name, 0)]
    )  # fmt: skip


def test_an_append_refers_to_a_stored_blob_without_its_bytes(store: SQLiteStore) -> None:
    shared.check_an_append_refers_without_bytes(store)
    assert rows(store, "SELECT state_id, seq FROM blob_refs ORDER BY state_id") == [("a", 0), ("b", 0)]


def test_a_reference_to_a_blob_the_store_lacks_is_refused_whole(store: SQLiteStore) -> None:
    shared.check_a_missing_blob_is_refused_whole(store)


def test_gc_removes_only_unreferenced_blobs_and_a_dry_run_counts_them(store: SQLiteStore) -> None:
    shared.check_gc_removes_only_unreferenced(store)


def test_a_reference_in_another_namespace_keeps_the_blob(store: SQLiteStore) -> None:
    shared.check_another_namespace_keeps_the_blob(store)


def test_gc_of_expired_states_releases_their_blobs(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    now = [datetime(2030, 1, 1, tzinfo=UTC)]
    store = SQLiteStore(tmp_path / "store.db", clock=lambda: now[0])
    shared.write_expiring(store, (now[0] + timedelta(hours=1)).isoformat())
    now[0] += timedelta(hours=2)
    shared.check_gc_collects_the_expired_state_and_its_blob(store)
    store.close()


def test_a_fork_copied_in_the_database_keeps_the_references_of_its_entries(store: SQLiteStore) -> None:
    shared.check_fork_refers_to_the_blobs_of_its_entries(store)


def test_deleted_and_collected_blob_bytes_leave_the_files(store: SQLiteStore) -> None:
    name, data = blob(200_000)
    kept_name, kept = blob(30_000)
    write(store, blob_write("a", 0, [name], {name: data}, create=True))
    write(store, blob_write("b", 0, [kept_name], {kept_name: kept}, create=True))
    for turn in range(1, 20):  # more writes after it, so its pages are not simply the last ones
        store.write("b", entries(turn, 1), snapshot(turn=turn))

    def on_disk() -> bytes:
        folder = store.path.parent
        return b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith(store.path.name))

    def pieces(value: bytes, raw: bytes) -> int:  # its 512-byte pieces found in raw (pages split it)
        return sum(value[at : at + 512] in raw for at in range(0, len(value) - 511, 512))

    assert pieces(data, on_disk()) > 300
    store.delete("a")
    assert gc_blobs(store) == (1, 200_000)
    raw = on_disk()
    assert pieces(data, raw) == 0
    assert pieces(kept, raw) > 40  # (the check finds a blob that is there)
    assert get_blobs(store, [kept_name]) == {kept_name: kept}


def test_gc_beside_a_writer_in_another_process_never_removes_a_referenced_blob(store: SQLiteStore) -> None:
    store.write("seed", [], None, create=True)  # the file exists for the writer
    shared.check_gc_beside_writer(store, make_store(store))


def test_a_write_without_blobs_runs_no_more_statements(store: SQLiteStore) -> None:
    seq = warm(store)
    traced = Traced(store)
    store.write("a", entries(seq, 3), snapshot(turn=4))
    statements = traced.stop()
    assert len(statements) <= 7, statements
    assert not [s for s in statements if " blobs " in s or "blob_refs" in s], statements


def test_a_write_with_blobs_adds_one_statement_per_table(store: SQLiteStore) -> None:
    seq = warm(store)
    name, data = blob()
    traced = Traced(store)
    write(store, blob_write("a", seq, [name], {name: data}))
    statements = traced.stop()
    assert len([s for s in statements if " blobs " in s or "blob_refs" in s]) == 2, statements
    assert len(statements) <= 9, statements


def test_a_version_4_file_is_migrated(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    store = SQLiteStore(db)
    store.write("a", entries(0, 2), snapshot(), create=True)
    store.close()
    with sqlite3.connect(db, isolation_level=None) as conn:  # back to version 4's tables
        conn.execute("DROP TABLE blob_refs")
        conn.execute("DROP TABLE blobs")
        conn.execute("UPDATE schema_version SET version = 4")
    conn.close()
    with pytest.raises(Exception, match="version 4, older than this statekeep's 5"):
        SQLiteStore(db, create=False).read("a")
    store = SQLiteStore(db)
    assert store.read("a").entries == entries(0, 2)
    name, data = blob()
    write(store, blob_write("a", 2, [name], {name: data}))
    assert get_blobs(store, [name]) == {name: data}
    store.close()
    assert rows(store, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)] == [(5,)]


def test_an_older_statekeep_refuses_a_file_with_blobs(store: SQLiteStore) -> None:
    name, data = blob()
    write(store, blob_write("a", 0, [name], {name: data}, create=True))
    done = run_older(
        f"""
        from statekeep import SQLiteStore
        try:
            SQLiteStore({str(store.path)!r}).read("a")
            print("read")
        except Exception as exc:
            print(type(exc).__name__, exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "UnsupportedFormatError" in done.stdout and "newer statekeep" in done.stdout, done.stdout


def test_prepare_write_leaves_no_blobs(store: SQLiteStore) -> None:
    prepared = prepare_write("a", entries(0, 1), snapshot(), True)
    assert prepared.blobs is None and prepared.blob_refs is None


def test_writes_batched_together_store_a_shared_blob_once(store: SQLiteStore) -> None:
    shared.check_batched_writes(store)


def test_a_writer_killed_mid_write_leaves_every_state_with_its_blobs(store: SQLiteStore) -> None:
    store.write("seed", [], None, create=True)
    assert len(shared.kill_a_writer(store, make_store(store))) >= 8


def test_a_write_may_refer_to_a_blob_an_earlier_write_of_its_transaction_carries(store: SQLiteStore) -> None:
    name, data = blob()
    shared.write_together(
        store,
        [
            blob_write("a", 0, [name], {name: data}, create=True),
            blob_write("b", 0, [name], None, create=True),
        ],
    )
    assert usage(store) == (1, 40_000)
    assert rows(store, "SELECT state_id FROM blob_refs ORDER BY state_id") == [("a",), ("b",)]


def test_a_trim_releases_the_blobs_only_its_removed_entries_referred_to(store: SQLiteStore) -> None:
    blob_trim.check_trim_releases_blobs(store)


def test_a_trim_moves_each_kept_reference_to_the_first_kept_line_that_makes_it(store: SQLiteStore) -> None:
    # So a later fork copies a reference with the entry that makes it (blob_refs.seq < its count).
    first, first_data = blob(1_000)
    later, later_data = blob(2_000)
    write(store, blob_write("a", 0, [first, later], {first: first_data, later: later_data}, create=True))
    write(store, blob_write("a", 1, [], None))
    write(store, blob_write("a", 2, [later], None))
    write(store, blob_write("a", 3, [first], None))
    blob_trim.trim(store, "a", 2, {"seq": 1, "kind": "base", "trimmed": 1})
    assert sorted(rows(store, "SELECT name, seq FROM blob_refs")) == sorted([(first, 3), (later, 2)])
    assert gc_blobs(store) == (0, 0)


class GcTrace:
    """What the store's gc connection runs, from the next gc on: its statements, and the
    SQLite VM steps of each write transaction (a measure of the rows it examines)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from statekeep.stores._sqlite import _blobs

        made = _blobs.gc_connection
        self.statements: list[str] = []
        self.steps: list[int] = []
        counting = [False]

        def on_statement(text: str) -> None:
            self.statements.append(text)
            if text.startswith("BEGIN"):
                self.steps.append(0)
            counting[0] = text.startswith("BEGIN") or (counting[0] and text != "COMMIT")

        def on_step() -> int:
            if counting[0]:
                self.steps[-1] += 1
            return 0

        def traced(path: Path) -> sqlite3.Connection:
            conn = made(path)
            conn.set_trace_callback(on_statement)
            conn.set_progress_handler(on_step, 1)
            return conn

        monkeypatch.setattr(_blobs, "gc_connection", traced)


def test_each_gc_transaction_examines_a_bounded_number_of_blobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statekeep.stores._sqlite._blobs import GC_CHUNK

    def heaviest_transaction(referenced: int) -> tuple[int, int]:
        """gc of a file with ``referenced`` blobs in use and 10 unreferenced after them: the VM
        steps of its heaviest write transaction, and how many it ran."""
        store = SQLiteStore(tmp_path / f"{referenced}.db")
        used = [blob(64) for _ in range(referenced)]
        write(store, blob_write("a", 0, [n for n, _ in used], dict(used), create=True))
        unused = [blob(64) for _ in range(10)]
        write(store, blob_write("b", 0, [n for n, _ in unused], dict(unused), create=True))
        store.delete("b")
        trace = GcTrace(monkeypatch)
        assert gc_blobs(store) == (10, 640)
        store.close()
        return max(trace.steps), len(trace.steps)

    few, few_transactions = heaviest_transaction(2 * GC_CHUNK)
    many, many_transactions = heaviest_transaction(8 * GC_CHUNK)
    # The walk goes a bounded window per transaction: more referenced blobs make more
    # transactions, not heavier ones (a scan from the first row each time made the last
    # transaction examine every referenced blob).
    assert many <= few * 1.2, (few, many)
    assert (few_transactions, many_transactions) == (3, 9)


def test_gc_does_not_hold_writers_off_for_a_long_reader_and_a_later_gc_erases(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, data = blob(200_000)
    write(store, blob_write("a", 0, [name], {name: data}, create=True))
    store.delete("a")
    reader = sqlite3.connect(store.path, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM blobs").fetchone() == (1,)  # holds the WAL
    trace = GcTrace(monkeypatch)
    assert gc_blobs(store) == (1, 200_000)
    # Only a passive checkpoint ran: no truncating one held the write lock waiting for the reader.
    assert [s for s in trace.statements if "checkpoint" in s] == ["PRAGMA wal_checkpoint(PASSIVE)"]
    store.write("b", [], None, create=True)  # writers go on meanwhile
    reader.execute("COMMIT")
    reader.close()

    def on_disk() -> bytes:
        folder = store.path.parent
        return b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith(store.path.name))

    trace = GcTrace(monkeypatch)
    assert gc_blobs(store) == (0, 0)  # the next gc completes the checkpoint: the bytes are gone
    assert "PRAGMA wal_checkpoint(TRUNCATE)" in trace.statements
    assert data[:4096] not in on_disk() and data[-4096:] not in on_disk()


def test_a_trim_of_a_sealed_state_keeps_the_references_its_kept_lines_list(store: SQLiteStore) -> None:
    blob_trim.check_a_sealed_state_keeps_the_references_its_kept_lines_list(store)

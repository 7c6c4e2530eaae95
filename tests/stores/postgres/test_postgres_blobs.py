"""PostgresStore's blobs (issue 24, item 1), at the backend level, on the throwaway server: a
write stores its blobs and references in its own transaction (the write function), once per
name for all the namespaces of the tables; ``_get_blobs``; gc of the unreferenced ones (a dry
run counts them), beside writers in another process; schema version 5 migrated from version
4 and refused by the last release; a write without blobs is still one statement."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support import blob_trim
from tests.support import blobs as shared
from tests.support.blobs import blob, blob_write, gc_blobs, get_blobs, write
from tests.support.older import run_older
from tests.support.postgres import old_tables, raw
from tests.support.servers import PostgresServer, unique_name

pytest.importorskip("asyncpg")

from statekeep.stores import PostgresStore
from statekeep.stores._postgres import SCHEMA_VERSION
from statekeep.stores._postgres._sql import Sql


def rows(server: PostgresServer, store: PostgresStore, query: str) -> list[tuple[Any, ...]]:
    sql = Sql(store.schema, store.table_prefix)
    return [tuple(r) for r in raw(server, query.format(blobs=sql.blobs, refs=sql.blob_refs))]


#: An expiry long past.
EXPIRED = "2001-01-01T00:00:00+00:00"


def make_store(server: PostgresServer, store: PostgresStore) -> str:
    """Python that opens ``store``'s tables in another process."""
    return (
        f"from statekeep.stores import PostgresStore; "
        f"store = PostgresStore({server.dsn!r}, schema={store.schema!r})"
    )


def test_a_write_stores_its_blobs_once_across_states_and_namespaces(
    pg: PostgresStore, postgres_server: PostgresServer
) -> None:
    name, other_name = shared.check_stored_once_across_states_and_namespaces(pg)
    assert rows(postgres_server, pg, "SELECT count(*), sum(octet_length(data)) FROM {blobs}") == [(2, 90_000)]
    assert sorted(rows(postgres_server, pg, "SELECT ns, state_id, name, seq FROM {refs}")) == sorted(
        [("default", "a", name, 0), ("default", "a", other_name, 0), ("default", "b", name, 0),
         ("memory", "a", name, 0)]
    )  # fmt: skip


def test_an_append_refers_to_a_stored_blob_without_its_bytes(
    pg: PostgresStore, postgres_server: PostgresServer
) -> None:
    shared.check_an_append_refers_without_bytes(pg)
    assert rows(postgres_server, pg, "SELECT state_id, seq FROM {refs} ORDER BY state_id") == [
        ("a", 0),
        ("b", 0),
    ]


def test_a_reference_to_a_blob_the_store_lacks_is_refused_whole(pg: PostgresStore) -> None:
    shared.check_a_missing_blob_is_refused_whole(pg)


def test_gc_removes_only_unreferenced_blobs_and_a_dry_run_counts_them(pg: PostgresStore) -> None:
    shared.check_gc_removes_only_unreferenced(pg)


def test_a_reference_in_another_namespace_keeps_the_blob(pg: PostgresStore) -> None:
    shared.check_another_namespace_keeps_the_blob(pg)


def test_gc_of_expired_states_releases_their_blobs(pg: PostgresStore) -> None:
    shared.write_expiring(pg, EXPIRED)
    assert gc_blobs(pg) == (0, 0)  # expired, but still there: it refers to the blob
    shared.check_gc_collects_the_expired_state_and_its_blob(pg)


def test_a_create_replacing_an_expired_state_drops_its_references(pg: PostgresStore) -> None:
    shared.write_expiring(pg, EXPIRED)
    write(pg, blob_write("a", 0, [], None, create=True))
    assert gc_blobs(pg) == (1, 40_000)


def test_a_fork_copied_on_the_server_keeps_the_references_of_its_entries(pg: PostgresStore) -> None:
    shared.check_fork_refers_to_the_blobs_of_its_entries(pg)


def test_gc_beside_writers_in_another_process_never_removes_a_referenced_blob(
    pg: PostgresStore, postgres_server: PostgresServer
) -> None:
    pg.write("seed", [], None, create=True)  # the tables exist
    shared.check_gc_beside_writer(pg, make_store(postgres_server, pg))


def test_a_write_waiting_on_gc_stores_the_blob_again(
    pg: PostgresStore, postgres_server: PostgresServer
) -> None:
    # gc holds the unreferenced blob (its lock taken, its delete not yet committed) while a
    # write that carries it comes: the write waits, then stores it again, and refers to it.
    import asyncpg

    name, data = blob()
    write(pg, blob_write("a", 0, [name], {name: data}, create=True))
    pg.delete("a")
    sql = Sql(pg.schema, pg.table_prefix)

    async def race() -> None:
        conn = await asyncpg.connect(postgres_server.dsn)
        try:
            tx = conn.transaction()
            await tx.start()
            assert await conn.fetchval(f"SELECT count(*) FROM {sql.blobs} WHERE name = $1", name) == 1
            await conn.execute(f"SELECT name FROM {sql.blobs} WHERE name = $1 FOR UPDATE", name)
            await conn.execute(f"DELETE FROM {sql.blobs} WHERE name = $1", name)
            writing = asyncio.get_running_loop().run_in_executor(
                None, write, pg, blob_write("b", 0, [name], {name: data}, create=True)
            )
            await wait_for_lock(conn, sql)
            await tx.commit()
            await writing
        finally:
            await conn.close()

    asyncio.run(race())
    assert get_blobs(pg, [name]) == {name: data}
    assert gc_blobs(pg) == (0, 0)


async def wait_for_lock(conn: Any, sql: Sql) -> None:
    """Until another backend waits for a lock this connection holds."""
    while not await blocked_by(conn):
        await asyncio.sleep(0.01)


async def blocked_by(conn: Any) -> bool:
    """Whether another backend waits for a lock ``conn`` holds (not just any lock wait)."""
    found = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity a WHERE pg_backend_pid() = ANY (pg_blocking_pids(a.pid))"
    )
    return bool(found)


def test_wait_for_lock_heeds_only_waits_on_this_connections_locks(postgres_server: PostgresServer) -> None:
    import asyncpg

    async def check() -> None:
        mine, holder, waiter = [await asyncpg.connect(postgres_server.dsn) for _ in range(3)]
        try:
            key = 2_400_024
            await mine.execute("SELECT pg_advisory_lock($1)", key + 1)
            await holder.execute("SELECT pg_advisory_lock($1)", key)
            waiting = asyncio.ensure_future(waiter.execute("SELECT pg_advisory_lock($1)", key))
            while not await holder.fetchval(
                "SELECT count(*) FROM pg_stat_activity a WHERE pg_backend_pid() = ANY (pg_blocking_pids(a.pid))"
            ):
                await asyncio.sleep(0.01)
            assert not await blocked_by(mine)  # another backend's wait is not on this connection
            await holder.execute("SELECT pg_advisory_unlock($1)", key)
            await waiting
            await waiter.execute("SELECT pg_advisory_unlock($1)", key)
            waiting = asyncio.ensure_future(waiter.execute("SELECT pg_advisory_lock($1)", key + 1))
            await wait_for_lock(mine, Sql("public", ""))
            assert await blocked_by(mine)
            await mine.execute("SELECT pg_advisory_unlock($1)", key + 1)
            await waiting
        finally:
            for conn in (mine, holder, waiter):
                await conn.close()

    asyncio.run(check())


def test_a_trim_releases_the_blobs_only_its_removed_entries_referred_to(pg: PostgresStore) -> None:
    blob_trim.check_trim_releases_blobs(pg)


def test_a_write_without_blobs_is_one_statement(postgres_server: PostgresServer) -> None:
    from statekeep.testing import entries, snapshot

    sent: list[str] = []

    async def log_queries(conn: Any) -> None:
        conn.add_query_logger(lambda record: sent.append(record.query))

    store = PostgresStore(postgres_server.dsn, schema=unique_name("sk"), init=log_queries)
    try:
        store.write("a", entries(0, 3), snapshot(), create=True)
        name, data = blob()
        sent.clear()
        store.write("a", entries(3, 3), snapshot(turn=1))
        write(store, blob_write("a", 6, [name], {name: data}))
        assert len(sent) == 2 and all('."write"(' in q for q in sent), sent
    finally:
        store.close()


def test_version_4_tables_gain_blobs(postgres_server: PostgresServer) -> None:
    schema = unique_name("sk")
    sql = Sql(schema, "")
    old_tables(postgres_server, sql, 4, 27)
    store = PostgresStore(postgres_server.dsn, schema=schema)
    try:
        assert len(store.read("a").entries) == 2  # type: ignore[union-attr]
        name, data = blob()
        write(store, blob_write("a", 2, [name], {name: data}))
        assert get_blobs(store, [name]) == {name: data}
        store.delete("a")
        assert gc_blobs(store) == (1, 40_000)
    finally:
        store.close()
    assert raw(postgres_server, f"SELECT version FROM {sql.version}")[0][0] == SCHEMA_VERSION == 5


def test_the_last_release_refuses_version_5_tables(
    pg: PostgresStore, postgres_server: PostgresServer
) -> None:
    name, data = blob()
    write(pg, blob_write("a", 0, [name], {name: data}, create=True))
    older = run_older(
        f"""
        from statekeep.stores import PostgresStore
        try:
            print(PostgresStore({postgres_server.dsn!r}, schema={pg.schema!r}).read("a"))
        except Exception as exc:
            print(type(exc).__name__, exc)
        """
    )
    assert "newer statekeep" in older.stdout, older.stdout + older.stderr


def test_collected_blob_bytes_leave_the_table_files_after_vacuum_full(
    pg: PostgresStore, postgres_server: PostgresServer
) -> None:
    # What the docs say about erasure: gc's DELETE leaves the bytes in dead tuples, and a plain
    # VACUUM frees their space without writing over it (here a later blob keeps the pages in
    # use); VACUUM FULL rewrites the table, and the old files go. (The WAL keeps them until its
    # segments are written over: not checked here.)
    name, data = blob(300_000)
    later, later_data = blob(300_000)
    write(pg, blob_write("a", 0, [name], {name: data}, create=True))
    write(pg, blob_write("b", 0, [later], {later: later_data}, create=True))
    sql = Sql(pg.schema, pg.table_prefix)

    def in_table_files(value: bytes) -> bool:
        raw(postgres_server, "CHECKPOINT")
        files = (p for p in postgres_server.root.rglob("*") if p.is_file() and "pg_wal" not in p.parts)
        return any(value[1000:1500] in p.read_bytes() for p in files)

    assert in_table_files(data)
    pg.delete("a")
    assert gc_blobs(pg) == (1, 300_000)
    raw(postgres_server, f"VACUUM {sql.blobs}")
    assert in_table_files(data)  # freed, not written over
    raw(postgres_server, f"VACUUM FULL {sql.blobs}")
    assert not in_table_files(data)
    assert in_table_files(later_data)
    assert get_blobs(pg, [later]) == {later: later_data}


def test_writes_batched_together_store_a_shared_blob_once(pg: PostgresStore) -> None:
    shared.check_batched_writes(pg)


def test_a_writer_killed_mid_write_leaves_every_state_with_its_blobs(
    pg: PostgresStore, postgres_server: PostgresServer
) -> None:
    pg.write("seed", [], None, create=True)
    assert len(shared.kill_a_writer(pg, make_store(postgres_server, pg))) >= 8


def test_a_trim_of_a_sealed_state_keeps_the_references_its_kept_lines_list(pg: PostgresStore) -> None:
    blob_trim.check_a_sealed_state_keeps_the_references_its_kept_lines_list(pg)

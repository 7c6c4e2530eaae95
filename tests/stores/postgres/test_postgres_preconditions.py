"""PostgresStore schema version 4: version 3 tables gain the write's preconditions
(``expect_next`` and the refusal of a clear write to a sealed State) in place."""

from __future__ import annotations

import pytest

from statekeep import StateConflictError
from statekeep.testing import entries, snapshot
from tests.support.older import run_older
from tests.support.postgres import old_tables, raw
from tests.support.servers import PostgresServer, unique_name

asyncpg = pytest.importorskip("asyncpg")

from statekeep.stores import PostgresStore  # noqa: E402
from statekeep.stores._postgres import SCHEMA_VERSION  # noqa: E402
from statekeep.stores._postgres._sql import Sql  # noqa: E402


def test_version_3_tables_gain_the_write_preconditions(postgres_server: PostgresServer) -> None:
    schema = unique_name("sk")
    sql = Sql(schema, "")
    old_tables(postgres_server, sql, 3, 23)
    store = PostgresStore(postgres_server.dsn, schema=schema)
    try:
        assert store.read("a").entries == entries(0, 2)  # type: ignore[union-attr]
        with pytest.raises(StateConflictError, match="has next seq 2, but this write expected 3"):
            store.write("a", entries(2, 1), None, expect_next=3)
        store.write("a", entries(2, 1), None, expect_next=2)
        assert len(store.read("a").entries) == 3  # type: ignore[union-attr]
    finally:
        store.close()
    assert raw(postgres_server, f"SELECT version FROM {sql.version}")[0][0] == SCHEMA_VERSION


def test_the_last_release_refuses_version_4_tables(postgres_server: PostgresServer) -> None:
    schema = unique_name("sk")
    store = PostgresStore(postgres_server.dsn, schema=schema)
    try:
        store.write("a", entries(0, 1), snapshot(), create=True)  # makes the version 4 tables
    finally:
        store.close()
    older = run_older(
        f"""
        from statekeep.stores import PostgresStore
        try:
            PostgresStore({postgres_server.dsn!r}, schema={schema!r}).write("a", [{{"seq": 1}}], None)
        except Exception as exc:
            print(type(exc).__name__, exc)
        """
    )
    assert "newer statekeep" in older.stdout, older.stdout + older.stderr
    assert store_entries(postgres_server, schema) == 1  # it wrote nothing


def store_entries(server: PostgresServer, schema: str) -> int:
    return int(raw(server, f'SELECT count(*) FROM "{schema}".entries')[0][0])

"""PostgresStore schema version 4: version 3 tables gain the write's preconditions
(``expect_next`` and the refusal of a clear write to a sealed State) in place."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from statekeep import StateConflictError
from tests.conftest import entries, snapshot
from tests.servers import PostgresServer, unique_name
from tests.test_postgres import raw

asyncpg = pytest.importorskip("asyncpg")

from statekeep.stores import PostgresStore  # noqa: E402
from statekeep.stores._postgres import SCHEMA_VERSION  # noqa: E402
from statekeep.stores._postgres._schema import bootstrap, migrations  # noqa: E402
from statekeep.stores._postgres._sql import Sql  # noqa: E402


def test_version_3_tables_gain_the_write_preconditions(postgres_server: PostgresServer) -> None:
    schema = unique_name("sk")
    sql = Sql(schema, "")
    steps = migrations(sql)
    statements = [
        *bootstrap(sql),
        *steps[0],
        *steps[1],
        *steps[2],
        f"INSERT INTO {sql.version} (version) VALUES (3)",
    ]
    write_v3 = f"SELECT o_status FROM {sql.write_fn}({', '.join(f'${i}' for i in range(1, 24))})"

    async def make_version_3() -> None:
        conn = await asyncpg.connect(postgres_server.dsn)
        try:
            async with conn.transaction():
                for statement in statements:
                    await conn.execute(statement)
            lines = [orjson.dumps(e).decode() for e in entries(0, 2)]
            args = ("default", "a", True, 0, lines, orjson.dumps(snapshot("old")).decode())
            assert await conn.fetchval(write_v3, *args, *[None] * 16, False) == 0
        finally:
            await conn.close()

    asyncio.run(make_version_3())
    store = PostgresStore(postgres_server.dsn, schema=schema)
    try:
        assert store.read("a").entries == entries(0, 2)  # type: ignore[union-attr]
        with pytest.raises(StateConflictError, match="has next seq 2, but this write expected 3"):
            store.write("a", entries(2, 1), None, expect_next=3)
        store.write("a", entries(2, 1), None, expect_next=2)
        assert len(store.read("a").entries) == 3  # type: ignore[union-attr]
    finally:
        store.close()
    assert raw(postgres_server, f"SELECT version FROM {sql.version}")[0][0] == SCHEMA_VERSION == 4

"""What the PostgresStore tests share: queries on a connection of their own, and tables as an
older statekeep left them."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from statekeep.stores._postgres._schema import bootstrap, migrations
from statekeep.stores._postgres._sql import Sql
from statekeep.testing import entries, snapshot
from tests.support.servers import PostgresServer


def raw(server: PostgresServer, query: str, *args: Any) -> Any:
    """Run one query on a connection of its own (not the store's)."""

    import asyncpg  # the postgres extra: only the Postgres tests come here

    async def go() -> Any:
        conn = await asyncpg.connect(server.dsn)
        try:
            return await conn.fetch(query, *args)
        finally:
            await conn.close()

    return asyncio.run(go())


def old_tables(server: PostgresServer, sql: Sql, version: int, nargs: int) -> None:
    """Tables made by an older statekeep at schema ``version`` (its migrations, as it ran
    them), holding State "a" with entries 0 and 1, written by that version's write function
    (``nargs`` arguments)."""
    steps = migrations(sql)[:version]
    statements = [*bootstrap(sql), *(s for step in steps for s in step)]
    statements.append(f"INSERT INTO {sql.version} (version) VALUES ({version})")
    write = f"SELECT o_status FROM {sql.write_fn}({', '.join(f'${i}' for i in range(1, nargs + 1))})"

    import asyncpg

    async def make() -> None:
        conn = await asyncpg.connect(server.dsn)
        try:
            async with conn.transaction():
                for statement in statements:
                    await conn.execute(statement)
            lines = [orjson.dumps(e).decode() for e in entries(0, 2)]
            args = ("default", "a", True, 0, lines, orjson.dumps(snapshot("old")).decode())
            assert await conn.fetchval(write, *args, *[None] * (nargs - 7), False) == 0
        finally:
            await conn.close()

    asyncio.run(make())

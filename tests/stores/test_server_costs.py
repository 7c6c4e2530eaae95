"""What one steady-state write costs a server store, counted on a real server (a count, never
a time): PostgreSQL statements the client sends (asyncpg's query logger on each pooled
connection), Redis commands the server runs (its own ``INFO commandstats``, which counts the
commands a script calls too). A steady-state write: an append with a snapshot to a listed
State that exists, no lease, no retention, no sealing, nothing else under way."""

from __future__ import annotations

from typing import Any

import pytest

from statekeep.testing import entries, snapshot
from tests.support.servers import PostgresServer, RedisServer, unique_name

TURNS = 5


def turn(n: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Turn ``n`` of a State: 3 entries and its snapshot."""
    return entries(3 * n, 3), snapshot(turn=n)


async def write_turns(store: Any, first: int, count: int) -> None:
    for n in range(first, first + count):
        await store.awrite("a", *turn(n), create=n == 0)


async def test_postgres_sends_one_statement_per_write(postgres_server: PostgresServer) -> None:
    pytest.importorskip("asyncpg")
    from statekeep.stores import PostgresStore

    sent: list[str] = []

    async def log_queries(conn: Any) -> None:
        conn.add_query_logger(lambda record: sent.append(record.query))

    store = PostgresStore(postgres_server.dsn, schema=unique_name("sk"), init=log_queries)
    try:
        await write_turns(store, 0, 3)
        sent.clear()
        await write_turns(store, 3, TURNS)
        assert len(sent) == TURNS, sent
        assert all('."write"(' in query for query in sent), sent
    finally:
        await store.aclose()


async def test_redis_runs_one_script_of_few_commands_per_write(redis_server: RedisServer) -> None:
    aioredis = pytest.importorskip("redis.asyncio")
    from statekeep.stores import RedisStore

    store = RedisStore(redis_server.url, prefix=unique_name("sk") + ":")
    stats = aioredis.Redis.from_url(redis_server.url)
    try:
        await write_turns(store, 0, 3)
        await stats.config_resetstat()
        await write_turns(store, 3, TURNS)
        counted = await stats.info("commandstats")
        calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in counted.items()}
        calls = {name: n for name, n in calls.items() if name.split("|")[0] not in ("config", "info")}
        assert calls.pop("evalsha") == TURNS, calls  # one round trip per write
        per_write = {name: n / TURNS for name, n in calls.items()}
        # TIME, the key types (7), the lease row, the State's fields, the append, the old
        # listing row, its member out of the 2 indexes, the State's new fields, the new
        # member in the 2 indexes, the new listing row.
        assert sum(per_write.values()) <= 18, per_write
    finally:
        await stats.aclose()
        await store.aclose()


async def test_redis_state_keys_keep_no_expiry_without_one(redis_server: RedisServer) -> None:
    """The write skips the native-expiry calls for a State that has no expiry: its keys
    stay without one (and a State given one later gets it, and loses it again)."""
    aioredis = pytest.importorskip("redis.asyncio")
    from statekeep.stores import RedisStore

    prefix = unique_name("sk") + ":"
    store = RedisStore(redis_server.url, prefix=prefix)
    client = aioredis.Redis.from_url(redis_server.url)
    keys = [f"{prefix}state:a", f"{prefix}entries:a"]
    try:
        await write_turns(store, 0, 2)
        assert [await client.pttl(k) for k in keys] == [-1, -1]
        far = "2999-01-01T00:00:00+00:00"
        await store.awrite("a", entries(6, 1), {**snapshot(turn=2), "expires_at": far})
        assert min([await client.pttl(k) for k in keys]) > 0
        await store.awrite("a", entries(7, 1), snapshot(turn=3))
        assert [await client.pttl(k) for k in keys] == [-1, -1]
        assert [s.id for s in await store.alist()] == ["a"]
    finally:
        await client.aclose()
        await store.aclose()

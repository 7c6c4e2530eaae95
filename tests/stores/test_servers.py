"""What PostgresStore and RedisStore share beyond the conformance suite, one test for both:
many processes, a server killed and restarted, fork, closing under load, dropped stores,
``create=False``, unreachable servers, missing drivers. Runs on throwaway servers
(tests/support/servers.py); what only one of them has: tests/stores/postgres/test_postgres.py, tests/stores/redis/test_redis.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from statekeep import NotAStoreError, Record, StateConflictError, Store
from statekeep._runtime.bridge import owner
from statekeep.testing import entries, snapshot
from tests.support import servers
from tests.support.servers import PostgresServer, Server, unique_name
from tests.support.settle import drop_and_collect

KINDS = ["postgres", "redis"]
DRIVERS = {"postgres": "asyncpg", "redis": "redis.asyncio"}


def where(server: Server) -> str:
    return server.dsn if isinstance(server, PostgresServer) else server.url  # type: ignore[attr-defined]


def namespace(kind: str) -> str:
    """A schema (postgres) or key prefix (redis) of its own."""
    return unique_name("sk") + (":" if kind == "redis" else "")


def make(kind: str, server: Server, ns: str, **options: Any) -> Any:
    if kind == "postgres":
        from statekeep.stores import PostgresStore

        return PostgresStore(where(server), schema=ns, **options)
    from statekeep.stores import RedisStore

    return RedisStore(where(server), prefix=ns, **options)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    pytest.importorskip(DRIVERS[request.param])
    return str(request.param)


@pytest.fixture
def server(kind: str) -> Server:
    return servers.shared_postgres() if kind == "postgres" else servers.shared_redis()


@pytest.fixture
def own_server(kind: str) -> Iterator[Server]:
    try:
        started: Server = servers.start_postgres() if kind == "postgres" else servers.start_redis()
    except servers.ServerMissing as exc:
        servers.need(exc)
        raise
    yield started
    started.remove()


@pytest.fixture
def ns(kind: str) -> str:
    return namespace(kind)


@pytest.fixture
def store(kind: str, server: Server, ns: str) -> Iterator[Any]:
    made = make(kind, server, ns)
    yield made
    made.close()


# -- many writers ------------------------------------------------------------------------


def test_four_processes_append_to_one_state(kind: str, server: Server, ns: str, store: Store) -> None:
    store.write("one", [], None, create=True)
    servers.run_writers(kind, where(server), ns, ["one"], workers=4, writes=60, pad=300)


def test_four_processes_append_to_a_hundred_states(kind: str, server: Server, ns: str, store: Store) -> None:
    ids = [f"st-{n}" for n in range(100)]
    for sid in ids:
        store.write(sid, [], None, create=True)
    servers.run_writers(kind, where(server), ns, ids, workers=4, writes=4)


@pytest.mark.parametrize("other", [1.0, True, "1", [1]])
async def test_resent_entry_with_a_value_of_another_json_type_is_a_conflict(store: Store, other: Any) -> None:
    await store.awrite("a", [{"seq": 0, "x": 1}], None, create=True)
    with pytest.raises(StateConflictError, match="seq 0"):
        await store.awrite("a", [{"x": other, "seq": 0}, {"seq": 1}], None)
    assert (await store.aread("a")).entries == [{"seq": 0, "x": 1}]  # type: ignore[union-attr]


async def test_resent_entry_with_keys_in_another_order_is_skipped(store: Store) -> None:
    await store.awrite("a", [{"seq": 0, "a": 1, "b": [1.0, {"x": None}]}], snapshot(), create=True)
    await store.awrite("a", [{"b": [1.0, {"x": None}], "a": 1, "seq": 0}, {"seq": 1}], snapshot(turn=1))
    record = await store.aread("a")
    assert record is not None and record.entries == [{"seq": 0, "a": 1, "b": [1.0, {"x": None}]}, {"seq": 1}]


async def test_many_concurrent_writers_on_many_states(store: Store) -> None:
    ids = [f"s{n}" for n in range(40)]

    async def turns(sid: str) -> None:
        await store.awrite(sid, entries(0, 1), snapshot(sid), create=True)
        for n in range(1, 10):
            await store.awrite(sid, entries(n, 1), snapshot(sid, turn=n))

    await asyncio.gather(*(turns(sid) for sid in ids))
    for sid in ids:
        assert await store.aread(sid) == Record(entries(0, 10), snapshot(sid, turn=9))
    assert [r.id for r in await store.alist()] == sorted(ids)


# -- a crashing server -------------------------------------------------------------------


async def test_server_killed_and_restarted_during_writes(kind: str, own_server: Server) -> None:
    ns = namespace(kind)
    secret = own_server.password or "?"  # type: ignore[attr-defined]
    with warnings.catch_warnings():
        if kind == "redis":
            warnings.simplefilter("error")  # the test server is durable: no warning
        counts = await servers.stream_through_outage(lambda: make(kind, own_server, ns), own_server, secret)
    assert counts["errors"] > 0 and counts["acked"] >= 80


# -- processes, closing ------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_its_own_connections(store: Store) -> None:
    store.write("parent", entries(0, 1), snapshot(), create=True)
    pid = os.fork()
    if pid == 0:  # the child: must not use the parent's connections
        code = 1
        try:
            store.write("child", entries(0, 1), snapshot(), create=True)
            assert store.read("parent") == Record(entries(0, 1), snapshot())
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    store.write("parent", entries(1, 1), None)  # the parent's connections still work
    assert store.read("child") == Record(entries(0, 1), snapshot())
    assert len(store.read("parent").entries) == 2  # type: ignore[union-attr]


async def test_closing_while_writes_are_under_way(kind: str, server: Server, ns: str, store: Any) -> None:
    ids = [f"s{n}" for n in range(20)]
    for sid in ids:
        await store.awrite(sid, [], None, create=True)
    writes = [asyncio.ensure_future(store.awrite(sid, entries(0, 1), snapshot())) for sid in ids]
    await asyncio.sleep(0)  # they have started
    await store.aclose()
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert store._state is None  # nothing was opened again
    fresh = make(kind, server, ns)
    try:
        for sid, result in zip(ids, results, strict=True):
            record = await fresh.aread(sid)
            assert record is not None
            if result is None:
                assert record.entries == entries(0, 1)
            else:
                assert isinstance(result, RuntimeError) and "closed" in str(result), result
    finally:
        await fresh.aclose()


async def until(expected: int, count: Callable[[], Awaitable[Any]]) -> int:
    """``await count()`` again until it is ``expected`` (a server ends a session a moment after
    its socket closed, later on a loaded machine), for at most a minute; the last count."""
    deadline = time.monotonic() + 60
    while True:
        got = int(await count())
        if got == expected or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.002)  # a poll of the server's own view, not a wait for a guess


def connections(server: Server, expected: int, name: str) -> int:
    """The server's sessions (postgres: those with application_name ``name``; redis: every
    client besides the one asking), once that is ``expected`` (a session ends a moment after
    its socket closed: ask again, bounded)."""

    async def postgres() -> int:
        import asyncpg

        conn = await asyncpg.connect(where(server))
        try:
            query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"
            return await until(expected, lambda: conn.fetchval(query, name))
        finally:
            await conn.close()

    async def redis() -> int:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(where(server))

        async def clients() -> int:
            return len(await client.client_list()) - 1

        try:
            return await until(expected, clients)
        finally:
            await client.aclose()

    return asyncio.run(postgres() if isinstance(server, PostgresServer) else redis())


def test_a_postgres_store_closed_after_writes_leaves_no_connection(postgres_server: Server) -> None:
    """The write queue keeps its connection between writes; close gives it back and
    closes the pool (no connection left, nothing waits for the pool's own timeout)."""
    pytest.importorskip("asyncpg")
    name = unique_name("writer")
    store = make(
        "postgres", postgres_server, namespace("postgres"), server_settings={"application_name": name}
    )
    store.write("a", entries(0, 1), snapshot(), create=True)
    store.write("a", entries(1, 1), snapshot(turn=1))
    assert connections(postgres_server, 1, name) == 1
    store.close()
    assert connections(postgres_server, 0, name) == 0
    store = make("postgres", postgres_server, store.schema, server_settings={"application_name": name})
    assert len(store.read("a").entries) == 2  # type: ignore[union-attr]
    store.close()


def test_dropped_stores_close_their_connections(
    kind: str, server: Server, request: pytest.FixtureRequest
) -> None:
    # Redis counts every client, so it gets a server of its own; PostgreSQL counts by name.
    name = unique_name("dropped")
    if kind == "postgres":
        count, at = 20, server
        stores = [
            make(kind, at, namespace(kind), table_prefix=f"p{i}_", server_settings={"application_name": name})
            for i in range(count)
        ]
    else:
        count, at = 50, request.getfixturevalue("own_server")
        stores = [make(kind, at, f"p{i}:") for i in range(count)]
    for store in stores:
        store.write("a", entries(0, 1), snapshot(), create=True)
    del store
    assert connections(at, count, name) == count
    drop_and_collect([])  # stores earlier tests dropped are collected now, not counted among these
    closers = len(owner().closers)
    warned = drop_and_collect(stores)
    assert connections(at, 0, name) == 0  # every connection closed, none left behind
    assert len(owner().closers) == closers - count
    prefix = "PostgresStore(" if kind == "postgres" else "RedisStore("
    assert len(warned) == count and all(w.startswith(prefix) for w in warned), "\n".join(
        w[:200] for w in warned
    )
    assert at.password and at.password not in " ".join(warned)  # type: ignore[attr-defined]


# -- create=False, unreachable servers, drivers ----------------------------------------------------


def holds_nothing(kind: str, server: Server, ns: str) -> bool:
    async def go() -> bool:
        if kind == "postgres":
            import asyncpg

            conn = await asyncpg.connect(where(server))
            try:
                return await conn.fetch("SELECT 1 FROM pg_namespace WHERE nspname = $1", ns) == []
            finally:
                await conn.close()
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(where(server))
        try:
            return await client.keys(ns + "*") == []
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_create_false_creates_nothing_and_refuses_storage_without_statekeep(
    kind: str, server: Server, ns: str
) -> None:
    message = (
        f"schema '{ns}' holds no statekeep tables" if kind == "postgres" else "no statekeep keys under prefix"
    )
    store = make(kind, server, ns, create=False)
    try:
        for attempt in (store.list, lambda: store.read("a"), lambda: store.delete("a")):
            with pytest.raises(NotAStoreError, match=message):
                attempt()
    finally:
        store.close()
    assert holds_nothing(kind, server, ns)
    with make(kind, server, ns) as made:
        made.write("a", entries(0, 1), snapshot(), create=True)
    with make(kind, server, ns, create=False) as existing:
        assert existing.read("a") == Record(entries(0, 1), snapshot())
        existing.delete("a")
        assert existing.list() == []


def test_connection_refused_is_a_connection_error_naming_the_server(kind: str) -> None:
    port = servers.free_port()
    if kind == "postgres":
        from statekeep.stores import PostgresStore

        store: Any = PostgresStore(f"postgresql://u:hidden@127.0.0.1:{port}/db")
        message = f"PostgreSQL at 127.0.0.1:{port} could not be reached"
    else:
        from statekeep.stores import RedisStore

        store = RedisStore(f"redis://:hidden@127.0.0.1:{port}/0")
        message = f"Redis at 127.0.0.1:{port}/0 could not be reached"
    try:
        with pytest.raises(ConnectionError, match=message) as info:
            store.write("a", [], None, create=True)
        assert "hidden" not in str(info.value)
    finally:
        store.close()


def test_equal_stores_name_the_same_storage(kind: str, server: Server) -> None:
    password = server.password or "?"  # type: ignore[attr-defined]
    suffix = ":" if kind == "redis" else ""
    a = make(kind, server, "one" + suffix)
    other_where = where(server).replace(password, "other")
    if kind == "postgres":
        from statekeep.stores import PostgresStore

        b = PostgresStore(other_where, schema="one")
    else:
        from statekeep.stores import RedisStore

        b = RedisStore(other_where, prefix="one:")
    c = make(kind, server, "two" + suffix)
    assert a == b and hash(a) == hash(b) and a != c
    assert password not in repr(a._storage_key())


def test_missing_driver_says_what_to_install(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, DRIVERS[kind], None)
    if kind == "postgres":
        from statekeep.stores import PostgresStore

        with pytest.raises(ImportError, match=r"pip install 'statekeep\[postgres\]'"):
            PostgresStore("postgresql://u@h/db")
    else:
        from statekeep.stores import RedisStore

        with pytest.raises(ImportError, match=r"pip install 'statekeep\[redis\]'"):
            RedisStore()


def test_importing_statekeep_does_not_import_the_drivers() -> None:
    code = (
        "import sys, statekeep; statekeep.PostgresStore; statekeep.RedisStore; "
        "print('asyncpg' in sys.modules, 'redis' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]

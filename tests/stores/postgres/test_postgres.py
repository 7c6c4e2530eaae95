"""PostgresStore beyond the conformance suite: row locks and batches, hostile names, passwords,
migrations, settings. Runs on throwaway servers (tests/support/servers.py); what it shares with
RedisStore (many processes, a crashing server, fork, dropped stores): tests/stores/test_servers.py."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from statekeep import Record, UnsupportedFormatError
from statekeep._runtime.bridge import owner
from statekeep.testing import entries, snapshot
from tests.support import servers
from tests.support.postgres import raw
from tests.support.servers import PostgresServer, unique_name

asyncpg = pytest.importorskip("asyncpg")

from statekeep.stores import PostgresStore  # noqa: E402
from statekeep.stores._postgres import SCHEMA_VERSION, quote_identifier, redact_dsn  # noqa: E402

# -- row locks and batches ----------------------------------------------------------------


async def test_writes_to_other_states_do_not_wait_for_a_locked_one(
    postgres_server: PostgresServer, pg: PostgresStore
) -> None:
    await pg.awrite("locked", [], snapshot(), create=True)
    await pg.awrite("free", [], snapshot(), create=True)
    conn = await asyncpg.connect(postgres_server.dsn)
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.execute(
            f"SELECT 1 FROM {quote_identifier(pg.schema)}.states WHERE id = $1 FOR UPDATE", "locked"
        )
        blocked = asyncio.ensure_future(pg.awrite("locked", entries(0, 1), None))
        await asyncio.sleep(0.2)
        for n in range(5):  # the other State is not held up
            await asyncio.wait_for(pg.awrite("free", entries(n, 1), None), 5)
        assert not blocked.done()
        await tx.rollback()
        await asyncio.wait_for(blocked, 5)
    finally:
        await conn.close()
    assert len((await pg.aread("locked")).entries) == 1
    assert len((await pg.aread("free")).entries) == 5


async def test_concurrent_writes_batched_around_a_locked_state(
    postgres_server: PostgresServer, pg: PostgresStore
) -> None:
    ids = [f"s{n}" for n in range(12)]
    for sid in ids:
        await pg.awrite(sid, [], snapshot(), create=True)
    conn = await asyncpg.connect(postgres_server.dsn)
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.execute(f"SELECT 1 FROM {quote_identifier(pg.schema)}.states WHERE id = 's0' FOR UPDATE")

        async def turns(sid: str) -> None:
            for n in range(5):
                await pg.awrite(sid, entries(n, 1), snapshot(turn=n))

        locked = asyncio.ensure_future(turns("s0"))
        await asyncio.wait_for(asyncio.gather(*(turns(sid) for sid in ids[1:])), 30)
        assert not locked.done()
        await tx.rollback()
        await asyncio.wait_for(locked, 30)
    finally:
        await conn.close()
    for sid in ids:
        assert await pg.aread(sid) == Record(entries(0, 5), snapshot(turn=4))


async def test_a_failing_write_in_a_batch_fails_alone(
    postgres_server: PostgresServer, pg: PostgresStore
) -> None:
    ids = [f"s{n}" for n in range(10)]
    for sid in ids:
        await pg.awrite(sid, [], None, create=True)
    schema = quote_identifier(pg.schema)
    conn = await asyncpg.connect(postgres_server.dsn)
    await conn.execute(
        f"""CREATE FUNCTION {schema}.poison() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.state_id = 's3' THEN RAISE EXCEPTION 'poisoned entry'; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER poison BEFORE INSERT ON {schema}.entries FOR EACH ROW EXECUTE FUNCTION {schema}.poison();"""
    )
    await conn.close()
    results = await asyncio.gather(
        *(pg.awrite(sid, entries(0, 2), None) for sid in ids), return_exceptions=True
    )
    assert [type(r).__name__ for r in results] == ["NoneType"] * 3 + ["RaiseError"] + ["NoneType"] * 6
    assert "poisoned entry" in str(results[3])
    for sid in ids:
        assert len((await pg.aread(sid)).entries) == (0 if sid == "s3" else 2)


async def test_concurrent_same_state_in_one_process(pg: PostgresStore) -> None:
    await pg.awrite("a", [], None, create=True)

    async def add(n: int) -> None:
        while True:
            rec = await pg.aread("a")
            try:
                await pg.awrite("a", [{"seq": len(rec.entries), "n": n}], None)
                return
            except ValueError:
                continue

    await asyncio.gather(*(add(n) for n in range(30)))
    rec = await pg.aread("a")
    assert sorted(e["n"] for e in rec.entries) == list(range(30))


# -- names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "prefix"),
    [
        ('a"; DROP TABLE x; --', ""),
        ("with space", "p r e"),
        ("Quote'd", 'x"; DROP TABLE x; --'),
        ("ünïcødé", "ü_"),
        ("sk_" + "s" * 60, "p" * 49),
    ],
)
def test_hostile_names_work_as_plain_names(postgres_server: PostgresServer, schema: str, prefix: str) -> None:
    raw(postgres_server, "CREATE TABLE IF NOT EXISTS public.x (v int)")
    store = PostgresStore(postgres_server.dsn, schema=schema, table_prefix=prefix)
    try:
        store.write("a", entries(0, 2), snapshot("hostile"), create=True)
        store.write("a", entries(2, 1), None)
        assert store.read("a") == Record(entries(0, 3), snapshot("hostile"))
        assert [r.id for r in store.list()] == ["a"]
        store.write(
            "b", entries(0, 1), {**snapshot("hostile"), "labels": {"k": "v"}, "agent": "x"}, create=True
        )
        assert [r.id for r in store.list(labels={"k": "v"}, agent="x", limit=1)] == ["b"]
        store.write(
            "c", entries(0, 1), {**snapshot(), "expires_at": "2000-01-01T00:00:00+00:00"}, create=True
        )
        assert store.gc() == 1
        store.delete("a")
        assert store.read("a") is None
    finally:
        store.close()
    assert raw(postgres_server, "SELECT to_regclass('public.x') IS NOT NULL AS there")[0]["there"]
    names = raw(
        postgres_server,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1",
        schema,
    )
    assert [r["table_name"] for r in names] == [
        prefix + "blob_refs",
        prefix + "blobs",
        prefix + "entries",
        prefix + "labels",
        prefix + "leases",
        prefix + "schema_version",
        prefix + "states",
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schema": "nul\x00"}, "NUL"),
        ({"schema": "s" * 64}, "64 bytes long; at most 63"),
        ({"schema": "é" * 32}, "64 bytes long"),
        ({"schema": ""}, "must not be empty"),
        ({"schema": "pg_mine"}, "reserved"),
        ({"table_prefix": "p" * 50}, "at most 49 bytes"),
        ({"table_prefix": "a\x00"}, "NUL"),
        ({"schema": "\udcff"}, "lone surrogate"),
    ],
)
def test_bad_names_are_refused_clearly(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PostgresStore("postgresql://u@127.0.0.1:1/db", **kwargs)


def test_name_types_are_checked() -> None:
    with pytest.raises(TypeError, match="schema must be a str"):
        PostgresStore("postgresql://u@127.0.0.1:1/db", schema=b"x")  # type: ignore[arg-type]


def test_quote_identifier() -> None:
    assert quote_identifier('a"b') == '"a""b"'
    assert quote_identifier("x") == '"x"'


# -- passwords ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://u:s3cr%40t@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgres://u:p@ss@h/db", "postgres://u:***@h/db"),
        ("postgresql://u:pa/ss@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:p?a#s@h:5432/db?sslmode=require", "postgresql://u:***@h:5432/db?sslmode=require"),
        (
            "postgresql://h/db?user=u&password=s3cret&sslmode=verify-full",
            "postgresql://h/db?user=u&password=***&sslmode=verify-full",
        ),
        ("postgresql://u@h/db", "postgresql://u@h/db"),  # a user name alone is no secret
        ("postgresql://h/db", "postgresql://h/db"),
        ("host=h password=s3cret user=u", "host=h password=*** user=u"),
        ("host=h password='s3 cret' user=u", "host=h password=*** user=u"),
        ("postgresql://u:s3cret@h1:1,h2:2/db", "postgresql://u:***@h1:1,h2:2/db"),
    ],
)
def test_redact_dsn(dsn: str, shown: str) -> None:
    assert redact_dsn(dsn) == shown


def test_password_is_in_no_repr_or_error(postgres_server: PostgresServer) -> None:
    secret = postgres_server.password
    base = f"postgresql://postgres:{secret}@127.0.0.1:{postgres_server.port}"
    store = PostgresStore(f"{base}/postgres", schema=unique_name("sk"))
    try:
        assert secret not in repr(store) and "***" in repr(store)
        store.write("a", [], None, create=True)
        assert secret not in repr(store)
    finally:
        store.close()

    failures = [
        PostgresStore(f"{base}/no_such_db"),  # the server refuses the database
        PostgresStore(
            f"postgresql://postgres:{secret}x@127.0.0.1:{postgres_server.port}/postgres"
        ),  # bad password
        PostgresStore(
            f"postgresql://postgres:{secret}@127.0.0.1:{servers.free_port()}/postgres"
        ),  # nobody there
        PostgresStore(f"{base}/postgres", password=secret, timeout=0.000001),  # a timeout
    ]
    servers.fail_without_secret(failures, secret)


# -- schema versions ---------------------------------------------------------------------


def test_newer_schema_version_is_refused(postgres_server: PostgresServer, pg: PostgresStore) -> None:
    pg.write("a", [], None, create=True)
    raw(postgres_server, f"UPDATE {quote_identifier(pg.schema)}.schema_version SET version = 99")
    newer = PostgresStore(postgres_server.dsn, schema=pg.schema)
    try:
        with pytest.raises(UnsupportedFormatError, match="schema version 99, made by a newer statekeep"):
            newer.read("a")
    finally:
        newer.close()


def test_stores_starting_together_migrate_once(postgres_server: PostgresServer) -> None:
    schema = unique_name("sk")
    stores = [PostgresStore(postgres_server.dsn, schema=schema) for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def first_use(store: PostgresStore, n: int) -> None:
        barrier.wait()
        try:
            store.write(f"s{n}", entries(0, 1), snapshot(), create=True)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first_use, args=(s, n)) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert errors == []
    versions = raw(postgres_server, f"SELECT version FROM {quote_identifier(schema)}.schema_version")
    assert [r["version"] for r in versions] == [SCHEMA_VERSION]


def test_tables_are_made_only_when_missing(postgres_server: PostgresServer, pg: PostgresStore) -> None:
    pg.write("a", entries(0, 1), snapshot(), create=True)
    again = PostgresStore(postgres_server.dsn, schema=pg.schema)
    try:
        assert again.read("a") == Record(entries(0, 1), snapshot())
    finally:
        again.close()


# -- settings, durability ----------------------------------------------------------------


async def test_writes_commit_synchronously_in_a_session_that_turned_it_off(
    postgres_server: PostgresServer, pg: PostgresStore
) -> None:
    await pg.awrite("a", [], None, create=True)  # makes the tables
    conn = await asyncpg.connect(postgres_server.dsn, server_settings={"synchronous_commit": "off"})
    try:
        async with conn.transaction():
            row = await conn.fetchrow(
                pg._sql.write,
                "default",
                "a",
                False,
                0,
                ['{"seq":0}'],
                None,
                *[None] * 13,
                None,
                None,
                None,
                None,  # expect_next: none
                True,  # a clear write
                None,  # no incarnation, and not bound to one
                False,
                None,  # no blobs
                None,
                None,
                False,
            )
            assert row["o_status"] == 0
            # The write set it for its own transaction, so the commit waits for the flush.
            assert await conn.fetchval("SHOW synchronous_commit") == "on"
        assert await conn.fetchval("SHOW synchronous_commit") == "off"  # the session's is untouched
    finally:
        await conn.close()
    assert (await pg.aread("a")).entries == [{"seq": 0}]


def test_corrupt_entry_is_reported_with_its_seq(postgres_server: PostgresServer, pg: PostgresStore) -> None:
    pg.write("a", entries(0, 3), snapshot(), create=True)
    raw(postgres_server, f"UPDATE {quote_identifier(pg.schema)}.entries SET data = '{{nope' WHERE seq = 1")
    from statekeep import CorruptStateError

    with pytest.raises(CorruptStateError, match="seq 1"):
        pg.read("a")


def test_a_closed_store_closes_its_pool(pg: PostgresStore) -> None:
    pg.write("a", [], None, create=True)
    pool = pg._state.pool
    closers = len(owner().closers)
    pg.close()
    assert pool._closed and len(owner().closers) == closers - 1


# -- threads -----------------------------------------------------------------------------


def test_sync_api_from_many_threads(pg: PostgresStore) -> None:
    for n in range(8):
        pg.write(f"t{n}", [], None, create=True)

    def work(n: int) -> None:
        for i in range(20):
            pg.write(f"t{n}", entries(i, 1), snapshot(turn=i))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - start < 60
    for n in range(8):
        assert pg.read(f"t{n}") == Record(entries(0, 20), snapshot(turn=19))

"""PostgresStore behind PgBouncer in transaction mode beyond the store contract
(test_pgbouncer_contract.py): writer processes with more connections than the pooler has for
them, and the errors that say what to set when the store is not told about the pooler."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from statekeep import open_store
from statekeep.testing import entries, snapshot
from tests.support import servers
from tests.support.servers import PgBouncerServer, PostgresServer, unique_name

pytest.importorskip("asyncpg")

from statekeep.stores import PostgresStore


@pytest.fixture
def one_connection(postgres_server: PostgresServer) -> Iterator[PgBouncerServer]:
    """A PgBouncer of its own in transaction mode, with one server connection for every client."""
    try:
        bouncer = servers.start_pgbouncer(postgres_server, pool_size=1)
    except servers.ServerMissing as exc:
        servers.need(exc)
        raise
    yield bouncer
    bouncer.remove()


def test_four_writer_processes_through_a_pool_of_three(pgbouncer_server: PgBouncerServer) -> None:
    """4 processes, each a pool of up to 10 connections (one kept by its writer), append to
    30 States through PgBouncer's 3 server connections: every entry once, seqs dense."""
    schema = unique_name("sk")
    where = f"{pgbouncer_server.dsn}?pooler=transaction"
    store = PostgresStore(where, schema=schema)
    ids = [f"st-{n}" for n in range(30)]
    for sid in ids:
        store.write(sid, [], None, create=True)
    store.close()
    assert pgbouncer_server.pool_size < 4
    servers.run_writers("postgres", where, schema, ids, workers=4, writes=3)


def test_a_store_not_told_about_the_pooler_says_what_to_set_and_loses_nothing(
    postgres_server: PostgresServer, pgbouncer_server: PgBouncerServer
) -> None:
    schema = unique_name("sk")
    direct = PostgresStore(postgres_server.dsn, schema=schema)
    direct.write("a", entries(0, 2), snapshot(), create=True)
    pooled = PostgresStore(pgbouncer_server.dsn, schema=schema)
    with pytest.raises(ConnectionError) as info:
        pooled.write("a", entries(2, 1), None)
    message = str(info.value)
    assert f"127.0.0.1:{pgbouncer_server.port}" in message
    assert "connection pooler" in message and "pooler='transaction'" in message
    assert "pooler=transaction" in message and pgbouncer_server.postgres.password not in message
    pooled.close()
    assert direct.read("a") == direct.read("a") and len(direct.read("a").entries) == 2  # type: ignore[union-attr]
    # Told, through the URL: the same store goes on where it was.
    told = open_store(f"{pgbouncer_server.dsn}?pooler=transaction", schema=schema)
    told.write("a", entries(2, 1), None)
    assert told.read("a").entries == entries(0, 3)  # type: ignore[union-attr]
    told.close()
    # asyncpg's own advice behind PgBouncer, statement_cache_size=0, means transaction mode.
    cacheless = open_store(pgbouncer_server.dsn, schema=schema, statement_cache_size=0)
    assert cacheless.pooler == "transaction"  # type: ignore[attr-defined]
    cacheless.write("a", entries(3, 1), None)
    assert cacheless.read("a").entries == entries(0, 4)  # type: ignore[union-attr]
    cacheless.close()
    direct.close()


#: A process that writes State "a" through a store with the pooler given, and prints what it met.
WRITER = """
import sys
from statekeep.stores import PostgresStore
from statekeep.testing import snapshot
dsn, schema, namespace, pooler = sys.argv[1:]
store = PostgresStore(dsn, schema=schema, namespace=namespace, pooler=pooler)
try:
    store.write("a", [], snapshot(), create=True)
except Exception as exc:
    print(type(exc).__name__, exc)
else:
    print("saved")
store.close()
"""


def write_in_a_process(dsn: str, schema: str, namespace: str, pooler: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", WRITER, dsn, schema, namespace, pooler],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=servers.REPO,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_prepared_statement_the_pooler_lost_says_what_to_set(one_connection: PgBouncerServer) -> None:
    """Told "session" (wrongly), a store keeps asyncpg's prepared statements, which are named
    alike in every process: a second process's meet the first's on PgBouncer's one server
    connection, and the error says to set pooler='transaction'; nothing of it was written."""
    schema = unique_name("sk")
    assert write_in_a_process(one_connection.dsn, schema, "first", "session") == "saved"
    met = write_in_a_process(one_connection.dsn, schema, "second", "session")
    assert met.startswith("ConnectionError ") and "prepared statement" in met, met
    assert "pooler='transaction'" in met and "did not run" in met
    assert write_in_a_process(one_connection.dsn, schema, "third", "transaction") == "saved"
    told = PostgresStore(one_connection.dsn, schema=schema, pooler="transaction", namespace="second")
    assert told.read("a") is None
    told.close()


def test_a_setting_the_pooler_refuses_at_login_says_what_to_do(pgbouncer_server: PgBouncerServer) -> None:
    store = PostgresStore(f"{pgbouncer_server.dsn}?statement_timeout=5000&pooler=transaction")
    with pytest.raises(ConnectionError) as info:
        store.read("a")
    message = str(info.value)
    assert "'statement_timeout'" in message and "ignore_startup_parameters" in message
    store.close()


@pytest.mark.parametrize(
    ("dsn_query", "keyword", "fragment"),
    [
        ("?pooler=transactions", None, "got 'transactions'"),
        ("", "statement", "got 'statement'"),
        ("?pooler=transaction&pooler=transaction", None, "pooler twice"),
        ("?pooler=session", "transaction", "says pooler=session and the pooler argument 'transaction'"),
    ],
)
def test_a_bad_pooler_is_a_value_error_before_anything_is_sent(
    dsn_query: str, keyword: str | None, fragment: str
) -> None:
    with pytest.raises(ValueError, match="pooler") as info:
        PostgresStore(f"postgresql://u:secret@127.0.0.1:1/db{dsn_query}", pooler=keyword)
    assert fragment in str(info.value) and "secret" not in str(info.value)


def test_transaction_mode_keeps_no_statement_cache() -> None:
    with pytest.raises(ValueError, match="statement_cache_size"):
        PostgresStore("postgresql://u@127.0.0.1:1/db", pooler="transaction", statement_cache_size=100)
    store = PostgresStore("postgresql://u@127.0.0.1:1/db?pooler=transaction", statement_cache_size=0)
    assert store.pooler == "transaction" and "pooler" not in repr(store)


async def test_copy_into_and_out_of_a_store_behind_pgbouncer(
    postgres_server: PostgresServer, pgbouncer_server: PgBouncerServer
) -> None:
    """``statekeep copy``'s copy (States and memory, several at once) from a direct store to one
    through PgBouncer, and back into another direct schema: equal everywhere."""
    from statekeep._transfer.transfer import acopy

    direct = PostgresStore(postgres_server.dsn, schema=unique_name("sk"))
    pooled = PostgresStore(f"{pgbouncer_server.dsn}?pooler=transaction", schema=unique_name("sk"))
    back = PostgresStore(postgres_server.dsn, schema=unique_name("sk"))
    ids = [f"s{n}" for n in range(12)]
    for n, sid in enumerate(ids):
        await direct.awrite(sid, entries(0, n + 1), snapshot(turn=n), create=True)
    await direct.memory("notes").aput("k", {"v": 1})
    for src, dst in ((direct, pooled), (pooled, back)):
        report = await acopy(src, dst, memory_scopes=["notes"])
        assert not report.failed
    for sid in ids:
        assert await back.aread(sid) == await direct.aread(sid) == await pooled.aread(sid)
    assert (await back.memory("notes").aget("k")).value == {"v": 1}  # type: ignore[union-attr]
    for store in (direct, pooled, back):
        await store.aclose()


def test_every_test_the_ci_run_names_is_in_the_contract() -> None:
    # A renamed contract test would otherwise drop out of the CI run through PgBouncer unseen.
    from tests.stores.postgres.test_pgbouncer_contract import CI_TESTS, TestPostgresThroughPgBouncer

    assert {name for name in dir(TestPostgresThroughPgBouncer) if name.startswith("test_")} >= CI_TESTS

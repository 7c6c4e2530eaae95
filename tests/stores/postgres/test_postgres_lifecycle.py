"""PostgresStore's schema version 2 beyond the conformance suite: the migration from version 1,
listings answered from indexes (EXPLAIN), expiry by the server's clock, gc from several
processes racing writers, the server-side fork, and namespaces. On throwaway servers
(tests/support/servers.py).

Run as a script, this module is the gc race's worker: ``python -m tests.stores.postgres.test_postgres_lifecycle
writer|collector DSN SCHEMA ...``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from statekeep import CorruptStateError, Record, State, StateConflictError, StateNotFoundError, agent_info
from statekeep.testing import entries, snapshot
from tests.support import REPO
from tests.support.postgres import raw
from tests.support.servers import PostgresServer, unique_name

asyncpg = pytest.importorskip("asyncpg")

from statekeep._core.query import make_query  # noqa: E402
from statekeep.stores import PostgresStore  # noqa: E402
from statekeep.stores._postgres._listing import page_query  # noqa: E402
from statekeep.stores._postgres._schema import SCHEMA_VERSION, bootstrap, migrations  # noqa: E402
from statekeep.stores._postgres._sql import Sql  # noqa: E402

ROOT = REPO


# How far ahead a test sets an expiry it then waits past: room for the writes and checks
# before it, on a loaded machine (300 ms was not).
MARGIN = 3


def server_now(server: PostgresServer) -> datetime:
    return raw(server, "SELECT now()")[0][0]  # type: ignore[no-any-return]


def wait_past(server: PostgresServer, when: datetime) -> None:
    """Poll the server's clock (no sleep) until ``when`` has passed on it."""
    while server_now(server) <= when:
        pass


def snap(task: str = "task", **extra: Any) -> dict[str, Any]:
    return {**snapshot(task), **extra}


# -- migration from version 1 --------------------------------------------------------------


def test_version_1_tables_migrate_to_the_default_namespace(postgres_server: PostgresServer) -> None:
    schema = unique_name("sk")
    sql = Sql(schema, "")
    old = {"v": 1, **snapshot("old", turn=3), "stopped_by": "max_turns"}
    statements = [*bootstrap(sql), *migrations(sql)[0], f"INSERT INTO {sql.version} (version) VALUES (1)"]

    async def make_version_1() -> None:
        conn = await asyncpg.connect(postgres_server.dsn)
        try:
            async with conn.transaction():
                for statement in statements:
                    await conn.execute(statement)
            # A write through version 1's own write function, as the released statekeep made it.
            row = await conn.fetchrow(
                f"SELECT * FROM {sql.write_fn}($1, true, 0, $2, $3, $4, $5, $6, 3, 'max_turns', false, "
                "NULL, NULL, false)",
                "a",
                [json.dumps(e) for e in entries(0, 2)],
                json.dumps(old),
                "old",
                datetime(2026, 1, 1, tzinfo=UTC),
                datetime(2026, 1, 1, tzinfo=UTC),
            )
            assert row["o_status"] == 0
        finally:
            await conn.close()

    asyncio.run(make_version_1())
    store = PostgresStore(postgres_server.dsn, schema=schema)
    other = PostgresStore(postgres_server.dsn, schema=schema, namespace="other")
    try:
        record = store.read("a")
        assert record is not None and record.entries == entries(0, 2) and record.snapshot == old
        [row] = store.list(status="max_turns")
        assert (row.id, row.task, row.turn, row.status, row.labels) == ("a", "old", 3, "max_turns", {})
        assert store.list(finished=True) == []
        assert other.read("a") is None and other.list() == []
        store.write("a", entries(2, 1), snap("old"))  # the migrated row takes new writes
        assert len(store.read("a").entries) == 3  # type: ignore[union-attr]
    finally:
        store.close()
        other.close()
    assert raw(postgres_server, f"SELECT version FROM {sql.version}")[0][0] == SCHEMA_VERSION


# -- listings from indexes -----------------------------------------------------------------


def fill(store: PostgresStore, count: int) -> None:
    """``count`` States: agents a0..a9, parents p0..p4, labels env=prod|dev, some finished."""

    async def one(i: int, gate: asyncio.Semaphore) -> None:
        at = (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i)).isoformat()
        s = {
            **snapshot(f"t{i}", updated=at),
            "agent": f"a{i % 10}",
            "parent": f"p{i % 5}",
            "labels": {"env": "prod" if i % 2 else "dev", "n": str(i)},
            "finished": i % 3 == 0,
            "stopped_by": "max_turns" if i % 7 == 0 else None,
        }
        async with gate:
            await store.awrite(f"s{i:05d}", entries(0, 1), s, create=True)

    async def main() -> None:
        gate = asyncio.Semaphore(64)
        await asyncio.gather(*(one(i, gate) for i in range(count)))

    asyncio.run(main())


def plan(server: PostgresServer, store: PostgresStore, **filters: Any) -> str:
    statement, args = page_query(store._sql, store.namespace, make_query(**filters))

    async def go() -> str:
        conn = await asyncpg.connect(server.dsn)
        try:
            await conn.execute("SET enable_seqscan = off")
            return "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + statement, *args))
        finally:
            await conn.close()

    return asyncio.run(go())


INDEXED = [
    ({}, "states_listing"),
    ({"agent": "a3"}, "states_agent"),
    ({"parent": "p1"}, "states_parent"),
    ({"status": "finished"}, "states_status"),
    ({"finished": True}, "states_status"),
    ({"finished": False}, "states_"),
    ({"stopped_by": "max_turns"}, "states_"),
    ({"labels": {"env": "prod"}}, "labels_order"),
    ({"labels": {"n": "17"}}, "labels_order"),
    ({"labels": {"env": "prod", "n": "17"}}, "labels_order"),
    ({"agent": "a3", "labels": {"env": "prod"}}, "_"),
    ({"updated_after": datetime(2026, 1, 1, 0, 30, tzinfo=UTC)}, "states_listing"),
    ({"updated_before": datetime(2026, 1, 1, 0, 30, tzinfo=UTC)}, "states_listing"),
    ({"id_prefix": "s001"}, "states_"),
]


def test_every_filter_is_answered_from_an_index(postgres_server: PostgresServer, pg: PostgresStore) -> None:
    fill(pg, 3000)
    # Both tables' statistics, as of now (autovacuum may not have run): plans follow them.
    raw(postgres_server, f"ANALYZE {pg._sql.states}")
    raw(postgres_server, f"ANALYZE {pg._sql.labels}")
    first = pg.list(limit=50)
    for filters, index in INDEXED:
        for page in ({"limit": 50}, {"limit": 50, "after": first.next}):
            steps = plan(postgres_server, pg, **filters, **page)
            # The listed rows come from an index in order (no sort of the namespace's rows),
            # except an id prefix answered from the key, which sorts only the rows it matched.
            main = steps.split("Append")[-1]
            assert "Seq Scan" not in steps, (filters, steps)
            assert index in main, (filters, steps)
            # A filter of one condition reads its index in order and stops when the page is
            # full. With two, the planner may rightly join both matches and sort those few rows
            # (labels n=17 and env=prod: 8 rows), whichever its statistics favour.
            conditions = len(filters.get("labels", {})) + len(set(filters) - {"labels"})
            if "id_prefix" not in filters and conditions <= 1:
                assert "Sort" not in steps, (filters, steps)
        # And the listing is right: the pages of the filter are the filtered listing.
        walked = [r.id for r in pg.iter_states(**filters, limit=500)]
        every = [r.id for r in pg.list() if make_query(**filters).matches(r)]
        assert walked == every and walked, filters


def test_label_rows_follow_each_write(postgres_server: PostgresServer, pg: PostgresStore) -> None:
    def labelled(**labels: str) -> list[str]:
        return [r.id for r in pg.list(labels=labels)]

    pg.write("a", entries(0, 1), snap(labels={"k": "x"}, updated_at="2026-01-01T00:00:01+00:00"), create=True)
    pg.write("b", entries(0, 1), snap(labels={"k": "x"}, updated_at="2026-01-01T00:00:02+00:00"), create=True)
    assert labelled(k="x") == ["b", "a"]
    pg.write("a", entries(1, 1), snap(labels={"k": "x"}, updated_at="2026-01-01T00:00:03+00:00"))
    assert labelled(k="x") == ["a", "b"]  # the label's order follows the State's updated_at
    page = pg.list(labels={"k": "x"}, limit=1)
    assert [r.id for r in page] == ["a"] and [r.id for r in pg.list(labels={"k": "x"}, after=page.next)] == [
        "b"
    ]
    pg.write("a", [], snap(labels={"k": "y", "j": "z"}))
    assert labelled(k="x") == ["b"] and labelled(k="y") == ["a"] and labelled(k="y", j="z") == ["a"]
    assert labelled(k="y", j="other") == []
    pg.write("a", [], snap())
    pg.delete("b")
    assert labelled(k="x") == labelled(k="y") == []
    assert raw(postgres_server, f"SELECT count(*) FROM {pg._sql.labels}")[0][0] == 0


# -- expiry by the server's clock ----------------------------------------------------------


def test_expiry_is_judged_by_the_server_clock(postgres_server: PostgresServer, pg: PostgresStore) -> None:
    soon = server_now(postgres_server) + timedelta(seconds=MARGIN)
    pg.write("a", entries(0, 1), snap(expires_at=soon.isoformat()), create=True)
    pg.write("b", entries(0, 1), snap(expires_at=soon.isoformat()), create=True)
    assert pg.read("a") is not None and [r.expires_at for r in pg.list()] == [soon, soon]
    wait_past(postgres_server, soon)
    assert pg.read("a") is None and pg.list() == []
    with pytest.raises(StateNotFoundError):
        pg.load("a")
    with pytest.raises(StateNotFoundError):
        pg.write("a", entries(1, 1), snap())
    with pytest.raises(StateNotFoundError):
        pg.fork("a")
    pg.write("a", entries(0, 2), snap("new"), create=True)  # replaces the expired remains
    assert pg.read("a").entries == entries(0, 2)  # type: ignore[union-attr]
    assert pg.gc() == 1  # b only
    assert [r.id for r in pg.list()] == ["a"] and pg.gc() == 0


def test_retention_is_stamped_by_the_server(postgres_server: PostgresServer) -> None:
    schema = unique_name("sk")
    store = PostgresStore(postgres_server.dsn, schema=schema, retention=timedelta(seconds=MARGIN))
    try:
        before = server_now(postgres_server)
        store.write("a", entries(0, 1), snap(), create=True)
        [row] = store.list()
        assert row.expires_at is not None
        assert (
            before + timedelta(seconds=MARGIN)
            <= row.expires_at
            <= server_now(postgres_server) + timedelta(seconds=MARGIN)
        )
        assert "expires_at" not in store.read("a").snapshot  # type: ignore[union-attr]
        explicit = server_now(postgres_server) + timedelta(hours=1)
        store.write("b", entries(0, 1), snap(expires_at=explicit.isoformat()), create=True)
        wait_past(postgres_server, row.expires_at)
        assert [r.id for r in store.list()] == ["b"] and store.read("a") is None
        assert store.gc() == 1
        assert store.list()[0].expires_at == explicit
    finally:
        store.close()


def count_rows(server: PostgresServer, store: PostgresStore) -> int:
    """The State rows of every namespace in ``store``'s tables, expired ones too."""
    return raw(server, f"SELECT count(*) FROM {store._sql.states}")[0][0]  # type: ignore[no-any-return]


def test_a_tree_delete_reaches_live_states_below_an_expired_one(
    postgres_server: PostgresServer, pg: PostgresStore
) -> None:
    soon = server_now(postgres_server) + timedelta(seconds=MARGIN)
    pg.write("root", entries(0, 1), snap(), create=True)
    pg.write("mid", entries(0, 1), snap(parent="root", expires_at=soon.isoformat()), create=True)
    pg.write("leaf", entries(0, 1), snap(parent="mid"), create=True)
    wait_past(postgres_server, soon)
    assert sorted(r.id for r in pg.list()) == ["leaf", "root"]  # the middle State is absent
    pg.delete("root", children=True)
    assert pg.list() == [] and pg.read("leaf") is None
    assert count_rows(postgres_server, pg) == 0


def test_gc_dry_run_counts_what_gc_removes_by_the_server_clock(
    postgres_server: PostgresServer, pg: PostgresStore
) -> None:
    other = PostgresStore(postgres_server.dsn, schema=pg.schema, namespace="other")
    try:
        # No race with the clock: the States expire when a write moves their expiry back.
        later = (server_now(postgres_server) + timedelta(hours=1)).isoformat()
        for i in range(3):
            pg.write(f"e{i}", entries(0, 1), snap(expires_at=later), create=True)
        pg.write("later", entries(0, 1), snap(expires_at=later), create=True)
        pg.write("never", entries(0, 1), snap(), create=True)
        other.write("e0", entries(0, 1), snap(expires_at=later), create=True)
        assert pg.gc(dry_run=True) == 0
        past = (server_now(postgres_server) - timedelta(seconds=1)).isoformat()
        for store, sid in [(pg, "e0"), (pg, "e1"), (pg, "e2"), (other, "e0")]:
            store.write(sid, [], snap(expires_at=past))
        assert pg.gc(dry_run=True) == 3 and other.gc(dry_run=True) == 1
        assert count_rows(postgres_server, pg) == 6  # a dry run removes nothing
        assert pg.gc() == 3 and pg.gc(dry_run=True) == 0 and other.gc(dry_run=True) == 1
    finally:
        other.close()


def test_a_snapshot_read_reads_no_entries(postgres_server: PostgresServer, pg: PostgresStore) -> None:
    soon = server_now(postgres_server) + timedelta(seconds=MARGIN)
    pg.write("a", entries(0, 3), snap("a"), create=True)
    pg.write("gone", entries(0, 1), snap(expires_at=soon.isoformat()), create=True)
    raw(postgres_server, f"DELETE FROM {pg._sql.entries} WHERE state_id = 'a'")
    with pytest.raises(CorruptStateError):  # a whole read finds the entries missing
        pg.read("a")
    assert asyncio.run(pg.aread_snapshot("a")) == snap("a")  # the snapshot alone is read
    assert asyncio.run(pg.aread_snapshot("missing")) is None
    assert asyncio.run(pg.aread_snapshot("gone")) is not None
    wait_past(postgres_server, soon)
    assert asyncio.run(pg.aread_snapshot("gone")) is None


# -- gc from several processes, racing writers ----------------------------------------------


ROUNDS = 3


def worker(argv: list[str]) -> None:
    """``writer DSN SCHEMA FIRST COUNT``: ROUNDS times over States s<FIRST>...: create=True
    over the expired State, extend it (which must find it), then expire it again (not in the
    last round). ``collector DSN SCHEMA STOPFILE``: gc until the stop file exists, then once
    more; prints the count removed."""
    role, dsn, schema = argv[:3]
    store = PostgresStore(dsn, schema=schema)
    far = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    try:
        if role == "writer":
            first, count = int(argv[3]), int(argv[4])
            for r in range(ROUNDS):
                for i in range(first, first + count):
                    by = f"round {r}"
                    store.write(f"s{i}", entries(0, 2, by=by), snap(expires_at=far), create=True)
                    store.write(f"s{i}", entries(2, 1, by=by), snap(expires_at=far))
                    if r < ROUNDS - 1:
                        store.write(f"s{i}", [], snap(expires_at=past))
            print(json.dumps({"written": count}))
        else:
            stop = Path(argv[3])
            removed = 0
            while not stop.exists():
                removed += store.gc(limit=7)
            removed += store.gc()
            print(json.dumps({"removed": removed}))
    finally:
        store.close()


def test_gc_from_several_processes_never_removes_a_state_a_writer_renewed(
    postgres_server: PostgresServer, pg: PostgresStore, tmp_path: Path
) -> None:
    n, doomed = 100, 50
    past = (server_now(postgres_server) - timedelta(seconds=1)).isoformat()

    async def setup() -> None:  # expired States: s<i> that writers renew, x<i> that nobody does
        await asyncio.gather(
            *(
                pg.awrite(f"s{i}", entries(0, 5, by="old"), snap(expires_at=past), create=True)
                for i in range(n)
            ),
            *(
                pg.awrite(f"x{i}", entries(0, 1), snap(expires_at=past, labels={"a": "b"}), create=True)
                for i in range(doomed)
            ),
        )

    asyncio.run(setup())
    stop = tmp_path / "stop"
    command = [sys.executable, "-m", "tests.stores.postgres.test_postgres_lifecycle"]
    collectors = [
        subprocess.Popen(
            [*command, "collector", postgres_server.dsn, pg.schema, str(stop)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    writers = [
        subprocess.Popen(
            [*command, "writer", postgres_server.dsn, pg.schema, str(k * n // 2), str(n // 2)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
        )
        for k in range(2)
    ]
    outs = [w.communicate(timeout=300) for w in writers]
    stop.touch()
    counts = [json.loads(c.communicate(timeout=300)[0])["removed"] for c in collectors]
    assert [w.returncode for w in writers] == [0, 0], outs
    assert [c.returncode for c in collectors] == [0, 0]
    # Every renewed State is there whole, with the writer's entries only; every other is gone.
    for i in range(n):
        record = pg.read(f"s{i}")
        assert record is not None and record.entries == entries(0, 3, by=f"round {ROUNDS - 1}"), i
    assert sorted(r.id for r in pg.list()) == sorted(f"s{i}" for i in range(n))
    gone = raw(postgres_server, f"SELECT count(*) FROM {pg._sql.states} WHERE id LIKE 'x%'")[0][0]
    assert gone == 0
    # No State counted twice: at least the x<i>, at most every expired State there was.
    print("gc removed", counts)
    assert doomed <= sum(counts) <= doomed + n * ROUNDS
    orphans = f"SELECT count(*) FROM {pg._sql.entries} e WHERE NOT EXISTS (SELECT 1 FROM {pg._sql.states} s WHERE s.ns = e.ns AND s.id = e.state_id)"
    assert raw(postgres_server, orphans)[0][0] == 0
    assert raw(postgres_server, f"SELECT count(*) FROM {pg._sql.labels}")[0][0] == 0


async def test_gc_leaves_a_state_whose_extension_commits_while_it_runs(
    postgres_server: PostgresServer, pg: PostgresStore
) -> None:
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    await pg.awrite("x", entries(0, 1), snap(expires_at=past), create=True)
    writer = await asyncpg.connect(postgres_server.dsn)
    watcher = await asyncpg.connect(postgres_server.dsn)
    try:
        tx = writer.transaction()
        await tx.start()  # a writer extending the expired State, not committed yet
        await writer.execute(
            f"UPDATE {pg._sql.states} SET expires_at = now() + interval '1 hour' WHERE id = 'x'"
        )
        gc = asyncio.ensure_future(pg.agc())
        # Until gc is done, or waits for the writer's row lock (a gc that would wait and then
        # delete what it found expired before).
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        while not gc.done() and not await watcher.fetchval(waiting):
            pass
        await tx.commit()
        assert await gc == 0
    finally:
        await writer.close()
        await watcher.close()
    assert await pg.aread("x") is not None and await pg.agc() == 0


# -- fork on the server ----------------------------------------------------------------------


def test_fork_copies_the_entries_on_the_server(postgres_server: PostgresServer, pg: PostgresStore) -> None:
    state = State("task", id="src")
    state.begin_run(agent_info("agent-1", "model-x"))
    state.add_user("hello ünïcode 1e20")
    pg.save(state)
    fork = pg.fork("src", at_seq=1, new_id="copy", labels={"k": "v"})
    assert fork.forked_from == {"id": "src", "seq": 1}
    texts = f"SELECT seq, data FROM {pg._sql.entries} WHERE state_id = $1 AND seq <= 1 ORDER BY seq"
    assert raw(postgres_server, texts, "copy") == raw(postgres_server, texts, "src")  # byte for byte
    [row] = pg.list(labels={"k": "v"})
    assert (row.id, row.forked_from, row.agent) == ("copy", {"id": "src", "seq": 1}, "agent-1")
    with pytest.raises(ValueError, match="exists"):
        pg.fork("src", new_id="copy")


async def test_fork_refuses_a_source_gone_or_replaced_since_it_was_read(pg: PostgresStore) -> None:
    from statekeep._run.lineage import fork_state

    def source(task: str) -> State:
        state = State(task, id="src")
        state.add_user("hi")
        return state

    await pg.asave(source("first"))
    record = await pg.aread("src")
    assert record is not None
    _, copied, snapshot_ = fork_state("src", record, 1, "copy", None)
    await pg.adelete("src")
    with pytest.raises(StateNotFoundError):
        await pg._afork_write("src", copied, snapshot_, "copy", None)
    await pg.asave(source("second"))  # the same id, other entries
    with pytest.raises(StateConflictError, match="written again"):
        await pg._afork_write("src", copied, snapshot_, "copy", None)
    assert await pg.aread("copy") is None  # nothing of a refused fork was written
    await pg._afork_write("src", (await pg.aread("src")).entries, snapshot_, "copy", None)  # type: ignore[union-attr]
    assert (await pg.aread("copy")).entries == (await pg.aread("src")).entries  # type: ignore[union-attr]


# -- namespaces ------------------------------------------------------------------------------


def test_namespaces_share_tables_and_never_see_each_other(
    postgres_server: PostgresServer, pg: PostgresStore
) -> None:
    past = (server_now(postgres_server) - timedelta(seconds=1)).isoformat()
    url = postgres_server.dsn + ("&" if "?" in postgres_server.dsn else "?") + "namespace=b&retention=3600"
    b = PostgresStore(url, schema=pg.schema)
    try:
        assert (b.namespace, b.retention) == ("b", timedelta(hours=1))
        assert b != pg and "namespace='b'" in repr(b)
        pg.write("same", entries(0, 1), snap("in default"), create=True)
        b.write("same", entries(0, 2), snap("in b"), create=True)
        pg.write("old", entries(0, 1), snap(expires_at=past), create=True)
        assert [r.task for r in pg.list()] == ["in default"] and [r.task for r in b.list()] == ["in b"]
        assert b.list()[0].expires_at is not None and pg.list()[0].expires_at is None
        assert b.gc() == 0 and pg.gc() == 1
        pg.memory().put("k", 1)
        assert b.memory().get("k") is None and pg.memory().get("k").value == 1  # type: ignore[union-attr]
        assert pg.memory("other").get("k") is None and [r.id for r in pg.list()] == ["same"]
        b.delete("same")
        assert pg.read("same") is not None
    finally:
        b.close()


def test_memory_shares_the_pool_and_closes_with_its_store(postgres_server: PostgresServer) -> None:
    store = PostgresStore(postgres_server.dsn, schema=unique_name("sk"))
    memory = store.memory()
    memory.put("k", {"v": 1})  # the memory opens the pool first
    store.write("a", entries(0, 1), snap(), create=True)
    assert memory._store._slot is store._slot  # type: ignore[attr-defined]
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        memory.get("k")


if __name__ == "__main__":
    worker(sys.argv[1:])


def test_a_range_read_scans_only_the_entries_it_returns(
    postgres_server: PostgresServer, pg: PostgresStore
) -> None:
    # read(id, since=N): an index range from seq N, never the history before it.
    pg.write("a", entries(0, 5), snap(), create=True)
    assert pg.read("a", since=3) == Record(entries(3, 2), snap())

    async def explain() -> str:
        conn = await asyncpg.connect(postgres_server.dsn)
        try:
            await conn.execute("SET enable_seqscan = off")
            rows = await conn.fetch("EXPLAIN " + pg._sql.read, pg.namespace, "a", 3)
            return "\n".join(r[0] for r in rows)
        finally:
            await conn.close()

    text = asyncio.run(explain())
    assert "Index" in text and "seq >= 3" in text.replace("'3'::bigint", "3").replace("$3", "3"), text

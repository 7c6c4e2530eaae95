"""PostgresStore across a failover: a multi-host DSN, writes resent after a lost connection
(``failover_timeout``), and a primary SIGKILLed under 4 writer processes while its
synchronous standby is promoted. Runs on throwaway servers (tests/support/servers.py:
``start_postgres_pair``, ``start_postgres_with``).

The resend rules are tested on one server whose commits wait for a synchronous standby
that never comes (``synchronous_standby_names=nobody``): such a commit is flushed to the
server's WAL and then waits, so killing the server then loses the answer of a write that
committed, every time, with no race. The server is restarted without the setting."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import REPO
from tests.support.children.failover_writer import own_entries
from tests.support.servers import (
    ReplicatedPostgres,
    ServerMissing,
    need,
    pair_dsn,
    start_postgres_pair,
    start_postgres_with,
    unique_name,
)

pytest.importorskip("asyncpg")

from statekeep import Record, open_store
from statekeep.stores import PostgresStore
from statekeep.testing import entries, snapshot

WRITER = (sys.executable, "-m", "tests.support.children.failover_writer")
SOAK = os.environ.get("STATEKEEP_SOAK") == "1"
HANG = ("synchronous_standby_names=nobody",)  # a commit is flushed, then waits for ever


# -- the option and the DSN: no server needed ----------------------------------------------


def test_failover_timeout_defaults_to_30_s_for_several_hosts_and_0_for_one() -> None:
    several = PostgresStore("postgresql://u:sekrit@10.0.0.1:5432,10.0.0.2:5433/db", schema="s")
    one = PostgresStore("postgresql://u:sekrit@10.0.0.1:5432/db", schema="s")
    given = PostgresStore("postgresql://u:sekrit@10.0.0.1/db?failover_timeout=2.5", schema="s")
    argument = PostgresStore("postgresql://u:sekrit@10.0.0.1/db", schema="s", failover_timeout=7)
    assert (several.failover_timeout, one.failover_timeout) == (30.0, 0.0)
    assert (given.failover_timeout, argument.failover_timeout) == (2.5, 7.0)
    assert "sekrit" not in repr(several) and "10.0.0.1:5432,10.0.0.2:5433" in repr(several)
    in_query = PostgresStore("postgresql://u:sekrit@/db?host=10.0.0.1,10.0.0.2&port=5432,5433", schema="s")
    assert in_query.failover_timeout == 30.0


def test_several_hosts_are_named_in_errors_without_the_password() -> None:
    dead = f"127.0.0.1:{_closed_port()}"
    store = PostgresStore(
        f"postgresql://postgres:sekrit@{dead},{dead}/db?failover_timeout=0.2", schema="s", timeout=2
    )
    try:
        with pytest.raises(ConnectionError) as info:
            store.read("a")
        text = str(info.value)
        assert f"{dead},{dead}" in text and "sekrit" not in text
        assert "read did not complete" in text and "failover_timeout=0.2" in text
    finally:
        store.close()


def test_a_bad_failover_timeout_is_refused_saying_what_to_give() -> None:
    with pytest.raises(ValueError, match=r"failover_timeout.*number of seconds"):
        PostgresStore("postgresql://u@h/db?failover_timeout=soon")
    with pytest.raises(ValueError, match=r"failover_timeout.*>= 0"):
        PostgresStore("postgresql://u@h/db", failover_timeout=-1)
    with pytest.raises(TypeError, match="failover_timeout"):
        PostgresStore("postgresql://u@h/db", failover_timeout="30")  # type: ignore[arg-type]


@pytest.mark.parametrize("url", ["sqlite:///x.db?failover_timeout=5", "memory://?failover_timeout=5"])
def test_a_local_store_url_refuses_failover_timeout(url: str, tmp_path: Any) -> None:
    with pytest.raises(ValueError, match=r"failover_timeout .*is for server stores.*remove it"):
        open_store(url)


def test_a_redis_url_takes_failover_timeout() -> None:
    pytest.importorskip("redis.asyncio")
    from statekeep.stores import RedisStore

    assert RedisStore("redis://127.0.0.1:1/0?failover_timeout=4").failover_timeout == 4.0
    assert RedisStore("redis://127.0.0.1:1/0").failover_timeout == 0.0


# -- the resend rules, on one server whose commits hang --------------------------------------


@pytest.fixture(scope="module")
def hanging() -> Iterator[ReplicatedPostgres]:
    """A server of this module's own, started without the hang; tests turn it on."""
    try:
        server = start_postgres_with(())
    except ServerMissing as missing:
        need(missing)
    yield server
    server.remove()


async def _until(server: ReplicatedPostgres, query: str, want: int) -> None:
    """Wait (up to 60 s) until ``query`` (a count) on ``server`` reaches ``want``."""
    deadline = time.monotonic() + 20
    while int(await asyncio.to_thread(server.sql, query)) < want:
        if time.monotonic() > deadline:
            seen = server.sql(
                "SELECT wait_event_type, wait_event, state, left(query, 60) FROM pg_stat_activity"
            )
            raise AssertionError(f"never reached {want}: {query}\n{seen}")
        await asyncio.sleep(0.02)


#: A process that appends a different entry at seq 1 of State ``s`` (argv: DSN, schema), resent
#: after a lost connection, and prints how it ended.
OTHER_WRITER = """
import sys
from statekeep.stores import PostgresStore
from statekeep.testing import entries
store = PostgresStore(sys.argv[1], schema=sys.argv[2], failover_timeout=60)
assert store.read("s") is not None  # connected before the write
try:
    store.write("s", entries(1, 1, who="b"), None)
    print("written")
except Exception as exc:
    print(type(exc).__name__, exc)
finally:
    store.close()
"""
SYNC_WAITS = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
LOCK_WAITS = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"


async def test_resent_writes_whose_first_attempt_committed(hanging: ReplicatedPostgres) -> None:
    """A create and an append whose commits were flushed but never answered come back as
    successes (the States hold exactly what was sent); writes queued behind them are sent
    again too; a write that then finds another's entry at its seq is a StateConflictError."""
    schema = unique_name("sk")
    setup = PostgresStore(hanging.dsn, schema=schema)
    await setup.awrite("s", entries(0, 1), snapshot("s"), create=True)
    await setup.aclose()
    a = PostgresStore(hanging.dsn, schema=schema, failover_timeout=60)
    a2 = PostgresStore(hanging.dsn, schema=schema, failover_timeout=60)
    mine = entries(1, 1, who="a")
    for store in (a, a2):  # connected and checked before commits hang
        assert await store.aread("s") is not None
    hanging.settings = HANG
    hanging.restart()  # from this thread: the server dies with the thread that started it
    try:
        append = asyncio.create_task(a.awrite("s", mine, snapshot("s", turn=1)))
        await _until(hanging, SYNC_WAITS, 1)  # committed, waiting for the standby
        queued = [asyncio.create_task(a.awrite(f"t{n}", entries(0, 2), None, create=True)) for n in range(3)]
        create = asyncio.create_task(a2.awrite("c", entries(0, 3), snapshot("c"), create=True))
        await _until(hanging, SYNC_WAITS, 2)
        # Another process appends a different entry at seq 1: it waits for the row lock.
        other = subprocess.Popen(
            [sys.executable, "-c", OTHER_WRITER, hanging.dsn, schema],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        await _until(hanging, LOCK_WAITS, 1)
        hanging.kill()
        hanging.settings = ()
        hanging.start()
        await append
        await create  # not "already exists": it was this write
        await asyncio.gather(*queued)
        out, err = await asyncio.to_thread(other.communicate, timeout=120)
        assert other.returncode == 0, err
        assert "StateConflictError" in out and "different entry at seq 1" in out, out  # resent, then refused
        assert await a.aread("s") == Record([*entries(0, 1), *mine], snapshot("s", turn=1))
        assert await a.aread("c") == Record(entries(0, 3), snapshot("c"))
        assert [await a.aread(f"t{n}") for n in range(3)] == [Record(entries(0, 2), None)] * 3
    finally:
        if hanging.settings:  # failed while commits hang: end them, so that the writes end
            hanging.settings = ()
            hanging.restart()  # from this thread: the server dies with the thread that started it
        for store in (a, a2):
            await store.aclose()


async def test_a_write_resent_until_the_timeout_says_its_outcome_is_unknown(
    hanging: ReplicatedPostgres,
) -> None:
    store = PostgresStore(hanging.dsn, schema=unique_name("sk"), failover_timeout=0.5)
    try:
        await store.awrite("a", entries(0, 1), None, create=True)
        hanging.kill()
        with pytest.raises(ConnectionError) as info:
            await store.awrite("a", entries(1, 1), None)
        text = str(info.value)
        assert "outcome is unknown" in text and "again is safe" in text and "failover_timeout=0.5" in text
        assert hanging.password not in text
        with pytest.raises(ConnectionError, match="read did not complete"):
            await store.aread("a")
        hanging.start()
        await store.awrite("a", entries(1, 1), None)  # the same store goes on
        assert await store.aread("a") == Record(entries(0, 2), None)
    finally:
        hanging.start()
        await store.aclose()


# -- a primary killed under 4 writer processes, its synchronous standby promoted --------------


def run_through_failover(sync: bool, *, workers: int, writes: int, kill_after: int) -> dict[str, Any]:
    """Start a primary and a standby, run ``workers`` writer processes
    (tests/support/children/failover_writer.py) through the pair's multi-host DSN, SIGKILL
    the primary once ``kill_after`` writes were acknowledged and promote the standby; the
    writers go on (the store resends). Returns what was acknowledged and what the promoted
    standby holds."""
    try:
        primary, standby = start_postgres_pair(sync)
    except ServerMissing as missing:
        need(missing)
    dsn, schema = pair_dsn(primary, standby), unique_name("sk")
    with contextlib.ExitStack() as stack:
        stack.callback(standby.remove)
        stack.callback(primary.remove)
        setup = PostgresStore(dsn, schema=schema)
        setup.write("shared", [], {"seq": -1}, create=True)
        setup.close()
        names = [f"w{n}" for n in range(workers)]
        errs = {name: stack.enter_context(tempfile.TemporaryFile("w+")) for name in names}
        procs = [
            subprocess.Popen(
                [*WRITER, "--where", dsn, "--schema", schema, "--name", name, "--writes", str(writes)],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=errs[name],
                stdin=subprocess.DEVNULL,
                text=True,
            )
            for name in names
        ]
        acked = dict.fromkeys(names, -2)
        enough = threading.Event()
        outs: dict[str, list[str]] = {name: [] for name in names}

        def follow(name: str, proc: subprocess.Popen[str]) -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                outs[name].append(line)
                if line.startswith("ack "):
                    acked[name] = int(line.split()[1])
                    if sum(max(n + 1, 0) for n in acked.values()) >= kill_after:
                        enough.set()
            enough.set()  # a writer that ended early: its error is reported below

        readers = [
            threading.Thread(target=follow, args=pair, daemon=True) for pair in zip(names, procs, strict=True)
        ]
        for thread in readers:
            thread.start()
        assert enough.wait(300), "the writers acknowledged nothing"
        before = dict(acked)
        primary.kill()
        standby.promote()
        for name, proc in zip(names, procs, strict=True):
            proc.wait(300)
            errs[name].seek(0)
            assert proc.returncode == 0, f"writer {name} failed:\n{errs[name].read()}"
        for thread in readers:
            thread.join(10)
        conflicts = sum(json.loads(outs[name][-1])["conflicts"] for name in names)
        check = PostgresStore(dsn, schema=schema)
        try:
            own = {name: check.read(f"own-{name}") for name in names}
            shared = check.read("shared")
        finally:
            check.close()
        return {"before": before, "acked": dict(acked), "own": own, "shared": shared, "conflicts": conflicts}


def _check_everything_acknowledged_is_there(result: dict[str, Any], writes: int) -> None:
    workers = len(result["own"])
    for name, record in result["own"].items():
        assert result["acked"][name] == writes - 1, name  # every write was acknowledged
        assert record is not None, name
        # Dense seqs, each write whole (both its entries) and exactly once.
        assert record.entries == [e for i in range(writes) for e in own_entries(name, i)], name
        assert record.snapshot == {"i": writes - 1}
    shared = result["shared"]
    assert [e["seq"] for e in shared.entries] == list(range(workers * writes))
    # The last write's snapshot: no resend put an older one back over it.
    assert shared.snapshot == {"seq": workers * writes - 1}
    seen = [(e["worker"], e["i"]) for e in shared.entries]
    assert sorted(seen) == sorted((name, i) for name in result["own"] for i in range(writes))
    for name in result["own"]:
        mine = [i for w, i in seen if w == name]
        assert mine == sorted(mine), name


def test_primary_killed_under_4_writer_processes_sync_standby_loses_nothing() -> None:
    writes = 400 if SOAK else 40
    result = run_through_failover(True, workers=4, writes=writes, kill_after=writes * 4 // 3)
    assert sum(n + 1 for n in result["before"].values()) < 4 * writes  # killed during the load
    _check_everything_acknowledged_is_there(result, writes)


def _closed_port() -> int:
    from tests.support.serverprocs import free_port

    return free_port()

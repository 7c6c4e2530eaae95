"""PostgresStore protection on a real server: what reaches the server's storage (pg_dump, and
the data directory after a CHECKPOINT) with redaction and encryption, tampered and swapped
records, key rotation, rekey's reseal, and fenced leases judged by the server's clock
(the fence atomic with the write, in batches too, across store objects and processes)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import statekeep as sk
from statekeep import DecryptionError, Keyring, LeaseHeldError, Redactor, StaleLeaseError, State
from statekeep._core.leases import ENDED
from statekeep._protect.protection import Protection
from statekeep._runtime.bridge import run_sync
from statekeep.testing import entries, snapshot
from tests.support import servers
from tests.support.postgres import old_tables, raw
from tests.support.servers import PostgresServer, unique_name

asyncpg = pytest.importorskip("asyncpg")
pytest.importorskip("cryptography")

from statekeep.stores import PostgresStore  # noqa: E402
from statekeep.stores._postgres import SCHEMA_VERSION, quote_identifier  # noqa: E402
from statekeep.stores._postgres._sql import Sql  # noqa: E402

K1, K2 = Keyring.generate_key(), Keyring.generate_key()


@pytest.fixture
def opened(postgres_server: PostgresServer) -> Iterator[Callable[..., PostgresStore]]:
    """Opens PostgresStores (closed at the end); ``schema`` defaults to one of this test's."""
    made: list[PostgresStore] = []
    schema = unique_name("sk")

    def open_store(**options: Any) -> PostgresStore:
        options.setdefault("schema", schema)
        store = PostgresStore(postgres_server.dsn, **options)
        made.append(store)
        return store

    yield open_store
    for store in made:
        store.close()


def dump(server: PostgresServer, schema: str) -> bytes:
    """pg_dump of ``schema``: every byte the server gives out of it."""
    done = subprocess.run(
        [str(servers.postgres_bindir() / "pg_dump"), "--schema", schema, "-d", server.dsn],
        capture_output=True,
        check=True,
    )
    return done.stdout


def data_files(server: PostgresServer) -> bytes:
    """Every file of the server's data directory (tables and WAL) after a CHECKPOINT."""
    raw(server, "CHECKPOINT")
    return b"".join(p.read_bytes() for p in server.data.rglob("*") if p.is_file() and not p.is_symlink())


def ring(*ids: str, current: str | None = None) -> Keyring:
    keys = {"k1": K1, "k2": K2}
    return Keyring({i: keys[i] for i in ids}, current=current or ids[0])


def saved(store: PostgresStore, sid: str, marker: str) -> State:
    """A State holding ``marker`` in an entry, the task and a data value, saved twice."""
    state = State(f"task {marker}", id=sid)
    state.add_user(f"the user says {marker}")
    state.set_data("found", {"note": marker, "api_key": f"key-{marker}"})
    store.save(state)
    state.add_user("and more")
    store.save(state)
    return state


def stored(server: PostgresServer, schema: str, sid: str, seq: int) -> str:
    table = f"{quote_identifier(schema)}.entries"
    return str(raw(server, f"SELECT data FROM {table} WHERE state_id = $1 AND seq = $2", sid, seq)[0][0])


def put(server: PostgresServer, schema: str, sid: str, seq: int, data: str) -> None:
    table = f"{quote_identifier(schema)}.entries"
    raw(server, f"UPDATE {table} SET data = $3 WHERE state_id = $1 AND seq = $2", sid, seq, data)


# -- what reaches the server ---------------------------------------------------------------


def test_redacted_secrets_never_reach_the_server(postgres_server: PostgresServer, opened: Any) -> None:
    secret, clear_secret = "sk-" + uuid.uuid4().hex, "sk-" + uuid.uuid4().hex
    red = opened(redact=Redactor(values=[secret, clear_secret]))
    clear = opened(schema=unique_name("sk"))
    state = State("redacted", id="a")
    state.add_user(f"my key is {secret}")
    state.set_data("creds", {"token": "tok-" + secret, "note": f"see {secret}"})
    red.save(state)
    red.save(state)  # saved again after a load: still no conflict
    red.save(red.load("a"))  # type: ignore[arg-type]
    other = State("clear", id="a")
    other.add_user(f"my key is {clear_secret}")
    clear.save(other)
    assert secret.encode() not in dump(postgres_server, red.schema)
    assert clear_secret.encode() in dump(postgres_server, clear.schema)  # the grep can fail
    files = data_files(postgres_server)
    assert secret.encode() not in files and clear_secret.encode() in files
    assert state.history[1]["text"] == f"my key is {secret}"  # the live State is unchanged
    assert red.read("a").entries[1]["text"] == "my key is [REDACTED]"  # type: ignore[union-attr]


def test_sealed_states_leave_no_plaintext_on_the_server(postgres_server: PostgresServer, opened: Any) -> None:
    marker, clear_marker = uuid.uuid4().hex, uuid.uuid4().hex
    sealed = opened(encrypt=ring("k1"))
    clear = opened(schema=unique_name("sk"))
    state = saved(sealed, "a", marker)
    saved(clear, "a", clear_marker)
    assert marker.encode() not in dump(postgres_server, sealed.schema)
    assert clear_marker.encode() in dump(postgres_server, clear.schema)
    files = data_files(postgres_server)
    assert marker.encode() not in files and clear_marker.encode() in files
    back = sealed.load("a")
    assert back is not None and back.history == state.history and back.task == f"task {marker}"
    assert [row.task for row in sealed.list()] == [f"task {marker}"]


def test_a_changed_byte_is_detected_naming_the_state_and_key(
    postgres_server: PostgresServer, opened: Any
) -> None:
    store = opened(encrypt=ring("k1"))
    saved(store, "a", "x")
    record = json.loads(stored(postgres_server, store.schema, "a", 1))
    kid, _, body = record["sk.sealed"].partition(":")
    at = len(body) // 2
    record["sk.sealed"] = f"{kid}:{body[:at]}{'A' if body[at] != 'A' else 'B'}{body[at + 1 :]}"
    put(postgres_server, store.schema, "a", 1, json.dumps(record))
    with pytest.raises(DecryptionError, match=r"State 'a' entry seq 1 \(key 'k1'\) fails authentication"):
        store.read("a")


def test_a_record_moved_to_another_state_or_seq_is_detected(
    postgres_server: PostgresServer, opened: Any
) -> None:
    store = opened(encrypt=ring("k1"))
    saved(store, "a", "x")
    saved(store, "b", "y")
    put(postgres_server, store.schema, "b", 1, stored(postgres_server, store.schema, "a", 1))
    with pytest.raises(DecryptionError, match="State 'b' entry seq 1"):
        store.read("b")
    first, second = (stored(postgres_server, store.schema, "a", seq) for seq in (1, 2))
    put(postgres_server, store.schema, "a", 1, second)
    put(postgres_server, store.schema, "a", 2, first)
    with pytest.raises(DecryptionError, match="State 'a' entry seq 1"):
        store.read("a")


def test_rotation_keeps_everything_readable(postgres_server: PostgresServer, opened: Any) -> None:
    state = saved(opened(encrypt=ring("k1")), "a", "x")
    rotated = opened(encrypt=ring("k2", "k1"))
    state.add_user("after rotation")
    rotated.save(state)
    assert rotated.load("a").history == state.history  # type: ignore[union-attr]
    table = f"{quote_identifier(rotated.schema)}.entries"
    kids = {orjson.loads(r[0])["sk.sealed"][:3] for r in raw(postgres_server, f"SELECT data FROM {table}")}
    assert kids == {"k1:", "k2:"}
    with pytest.raises(DecryptionError, match="key 'k1', which is not in the keyring"):
        opened(encrypt=ring("k2")).read("a")


def test_plaintext_and_sealed_states_are_refused_by_the_other_kind_of_store(opened: Any) -> None:
    clear = opened()
    clear.write("p", entries(0, 2), snapshot(), create=True)
    with pytest.raises(DecryptionError, match="State 'p' snapshot is plaintext"):
        opened(encrypt=ring("k1")).read("p")
    lenient = opened(encrypt=ring("k1"), allow_plaintext=True)
    assert lenient.read("p").entries == entries(0, 2)  # type: ignore[union-attr]
    lenient.write("p", entries(2, 1), None)  # written sealed, even here
    lenient.write("s", entries(0, 1), snapshot(), create=True)
    with pytest.raises(DecryptionError, match="State 's' snapshot is sealed with key 'k1'"):
        clear.read("s")
    with pytest.raises(DecryptionError, match="State 'p' entry seq 2 is sealed with key 'k1'"):
        clear.read("p", since=2)


def test_open_store_passes_protection_to_the_store(postgres_server: PostgresServer) -> None:
    store = sk.open_store(postgres_server.dsn, schema=unique_name("sk"), encrypt=ring("k1"))
    try:
        assert isinstance(store, PostgresStore) and store._keyring is not None
        memory = store.memory()
        memory.put("k", {"v": "memory-marker"})
        assert memory.get("k").value == {"v": "memory-marker"}  # type: ignore[union-attr]
        assert b"memory-marker" not in dump(postgres_server, store.schema)  # sealed as well
    finally:
        store.close()


def test_reseal_replaces_only_records_still_as_they_were_read(
    postgres_server: PostgresServer, opened: Any
) -> None:
    old = opened(encrypt=ring("k1"))
    old.write("a", entries(0, 3), snapshot("the task"), create=True)
    schema = old.schema
    incarnation = old.read("a").incarnation  # the records are sealed for it
    new = Protection(encrypt=ring("k2")).write(
        "default", "a", entries(0, 3), snapshot("the task"), False, incarnation
    )
    before = [stored(postgres_server, schema, "a", s).encode() for s in range(3)]
    row = raw(postgres_server, f"SELECT snapshot FROM {quote_identifier(schema)}.states WHERE id = 'a'")
    snap = row[0][0].encode()
    plan = {
        1: (before[1], new.lines[1][:-1]),
        2: (before[0], new.lines[2][:-1]),  # not what seq 2 holds: stays
    }
    assert new.snapshot is not None
    count = run_sync(old._locked("a", old._reseal("a", plan, (snap, new.snapshot))), "areseal")
    assert count == 2
    after = [stored(postgres_server, schema, "a", s) for s in range(3)]
    assert after[0] == before[0].decode() and after[2] == before[2].decode()
    assert after[1] == new.lines[1][:-1].decode()
    both = opened(encrypt=ring("k2", "k1"))
    assert both.read("a") == sk.Record(entries(0, 3), snapshot("the task"))
    only_k2 = opened(encrypt=ring("k2"))
    assert [row.task for row in only_k2.list()] == ["the task"]  # the task column too
    with pytest.raises(DecryptionError, match="entry seq 0 is sealed with key 'k1'"):
        only_k2.read("a")


# -- leases: the fence, in the write function --------------------------------------------


def wait_until_ended(store: PostgresStore, sid: str) -> None:
    """Poll the server's clock (through the store) until the State's lease has ended."""
    while store.current_lease(sid) is not None:
        threading.Event().wait(0.02)


def test_a_live_lease_refuses_writes_and_deletes_without_it(opened: Any) -> None:
    store = opened()
    store.write("a", entries(0, 1), snapshot(), create=True)
    lease = store.acquire("a", "worker-1", 60)
    assert store.current_lease("a") == lease and lease.token == 1
    with pytest.raises(LeaseHeldError, match="leased to 'worker-1'") as held:
        store.write("a", entries(1, 1), None)
    assert (held.value.owner, held.value.expires_at) == ("worker-1", lease.expires_at)
    with pytest.raises(LeaseHeldError, match="nothing was deleted"):
        store.delete("a")
    with pytest.raises(LeaseHeldError):
        store.write("a", entries(0, 1), snapshot(), create=True)
    assert store.read("a").entries == entries(0, 1)  # type: ignore[union-attr]
    store.write("a", entries(1, 1), None, lease=lease)
    assert store.renew(lease, 120).expires_at > lease.expires_at
    store.delete("a", lease=lease)
    assert store.read("a") is None


@pytest.mark.parametrize("sealed", [False, True], ids=["copied-on-the-server", "resealed"])
def test_a_fork_onto_a_leased_id_is_refused(opened: Any, sealed: bool) -> None:
    store = opened(encrypt=ring("k1")) if sealed else opened()
    state = saved(store, "a", "x")
    lease = store.acquire("b", "worker-1", 60)
    with pytest.raises(LeaseHeldError, match="State 'b' is leased to 'worker-1'"):
        store.fork("a", new_id="b")
    assert store.read("b") is None
    store.release(lease)
    assert store.fork("a", new_id="b").history == state.history


def test_tokens_only_grow_across_release_delete_and_reopening(
    postgres_server: PostgresServer, opened: Any
) -> None:
    store = opened()
    first = store.acquire("a", "w", 60)
    store.write("a", entries(0, 1), snapshot(), create=True, lease=first)
    store.release(first)
    assert store.current_lease("a") is None
    ended = raw(postgres_server, f"SELECT expires_at FROM {quote_identifier(store.schema)}.leases")
    assert [r[0] for r in ended] == [ENDED]  # the epoch: no clock stepping back revives it
    second = store.acquire("a", "w", 60)
    store.delete("a", lease=second)
    with pytest.raises(StaleLeaseError):
        store.write("a", [], snapshot(), create=True, lease=first)
    store.close()
    again = opened()
    assert again.current_lease("a") == second
    again.release(second)
    assert [first.token, second.token, again.acquire("a", "w", 60).token] == [1, 2, 3]


def test_gc_skips_an_expired_state_while_its_lease_lives(
    postgres_server: PostgresServer, opened: Any
) -> None:
    store = opened()
    gone = {**snapshot(), "expires_at": "2000-01-01T00:00:00+00:00"}
    lease = store.acquire("kept", "w", 60)
    store.write("kept", entries(0, 1), gone, create=True, lease=lease)
    store.write("other", entries(0, 1), gone, create=True)
    assert store.gc(dry_run=True) == 1
    assert store.gc() == 1
    rows = raw(postgres_server, f"SELECT id FROM {quote_identifier(store.schema)}.states")
    assert [r[0] for r in rows] == ["kept"]
    store.release(lease)
    assert store.gc() == 1


def test_a_taken_over_lease_cannot_write_from_another_store(opened: Any) -> None:
    first, second = opened(), opened()
    first.write("a", entries(0, 1), snapshot(), create=True)
    for round_ in range(5):
        old = first.acquire("a", "worker-1", 0.2)
        wait_until_ended(second, "a")
        start = threading.Barrier(2)
        outcome: dict[str, Any] = {}

        def stale(lease: sk.Lease, seq: int, start: threading.Barrier, outcome: dict[str, Any]) -> None:
            start.wait()
            try:
                first.write("a", [{"seq": seq, "by": "stale"}], None, lease=lease)
                outcome["stale"] = "written"
            except StaleLeaseError as exc:
                outcome["stale"] = exc

        thread = threading.Thread(target=stale, args=(old, 1 + round_, start, outcome))
        thread.start()
        start.wait()
        new = second.acquire("a", "worker-2", 60)
        thread.join()
        assert isinstance(outcome["stale"], StaleLeaseError) and new.token == old.token + 1
        second.write("a", [{"seq": 1 + round_, "by": "new"}], None, lease=new)
        second.release(new)
    assert [e.get("by") for e in first.read("a").entries] == [None] + ["new"] * 5  # type: ignore[union-attr]


def test_exactly_one_of_many_stores_takes_over(opened: Any) -> None:
    stores = [opened() for _ in range(4)]
    old = stores[0].acquire("a", "old", 0.2)
    wait_until_ended(stores[1], "a")
    start = threading.Barrier(len(stores))
    got: list[Any] = [None] * len(stores)

    def take(i: int) -> None:
        start.wait()
        try:
            got[i] = stores[i].acquire("a", f"w{i}", 60)
        except LeaseHeldError as exc:
            got[i] = exc

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [g for g in got if isinstance(g, sk.Lease)]
    assert len(winners) == 1 and winners[0].token == old.token + 1
    assert all(isinstance(g, LeaseHeldError) and g.owner == winners[0].owner for g in got if g not in winners)


async def test_a_fenced_out_write_in_a_batch_fails_alone(opened: Any) -> None:
    store = opened()
    ids = [f"s{n}" for n in range(10)]
    for sid in ids:
        await store.awrite(sid, [], None, create=True)
    held = await store.aacquire("s3", "holder", 60)
    await store.arelease(await store.aacquire("s6", "old", 60))
    stale = sk.Lease("s6", "old", 1, held.expires_at, namespace="default")
    sizes: list[int] = []
    send = store._send_batch

    async def counted(local: Any, batch: list[Any]) -> None:
        sizes.append(len(batch))
        await send(local, batch)

    store._send_batch = counted
    results = await asyncio.gather(
        *(store.awrite(sid, entries(0, 2), None, lease=stale if sid == "s6" else None) for sid in ids),
        return_exceptions=True,
    )
    assert max(sizes) > 1  # they went in batches
    kinds = [type(r).__name__ for r in results]
    assert (
        kinds
        == ["NoneType"] * 3 + ["LeaseHeldError"] + ["NoneType"] * 2 + ["StaleLeaseError"] + ["NoneType"] * 3
    )
    for sid in ids:
        assert len((await store.aread(sid)).entries) == (0 if sid in ("s3", "s6") else 2)


async def _waiting_on(mon: Any, pid: int, done: asyncio.Future[Any] | None = None) -> list[int]:
    """Poll the server until some backend waits for a lock ``pid`` holds (or ``done`` is);
    return the waiting backends' pids."""
    while True:
        pids = await mon.fetch("SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))", pid)
        if pids or (done is not None and done.done()):
            return [r[0] for r in pids]
        await asyncio.sleep(0.01)  # the next look at the server: polling, not synchronisation


# Another process (a store of this process would wait for the create at the State's lock of
# this process): releases the lease given, if any, then acquires and reads the State.
_TAKER = """
import json, sys
from datetime import datetime
import statekeep as sk
from statekeep.stores import PostgresStore
dsn, schema, old = sys.argv[1:4]
store = PostgresStore(dsn, schema=schema)
if old:
    o = json.loads(old)
    store.release(sk.Lease("job", o["owner"], o["token"], datetime.fromisoformat(o["expires_at"]), namespace="default"))
lease = store.acquire("job", "worker-B", 60)
state = store.read("job")
print(json.dumps([lease.token, None if state is None else state.entries]))
store.close()
"""


@pytest.mark.parametrize("leased", [False, True], ids=["unleased", "lease-released-meanwhile"])
async def test_a_create_and_the_first_acquire_of_its_id_are_exclusive(
    postgres_server: PostgresServer, opened: Any, leased: bool
) -> None:
    """A create of an id with no State row yet, held between its fence and its commit (a
    side transaction's SHARE lock on the entries table), and an acquire of the id in another
    process: the acquire waits for the create, so its holder sees the State the create wrote,
    never an unleased (or no longer leased) write landing under its lease after it."""
    store = opened()
    await asyncio.to_thread(store.write, "warm", [], snapshot(), create=True)  # migrated
    old = await asyncio.to_thread(store.acquire, "job", "worker-A", 60) if leased else None
    old_json = (
        ""
        if old is None
        else json.dumps({"owner": old.owner, "token": old.token, "expires_at": old.expires_at.isoformat()})
    )
    side = await asyncpg.connect(postgres_server.dsn)
    mon = await asyncpg.connect(postgres_server.dsn)
    try:
        blocker = side.transaction()
        await blocker.start()
        await side.execute(f"LOCK TABLE {store._sql.entries} IN SHARE MODE")
        create = asyncio.ensure_future(
            asyncio.to_thread(store.write, "job", entries(0, 1), snapshot(), create=True, lease=old)
        )
        side_pid = await side.fetchval("SELECT pg_backend_pid()")
        [create_pid] = await asyncio.wait_for(_waiting_on(mon, side_pid), 30)
        # The create has judged its fence and waits at its INSERT of the entries.
        taker = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _TAKER,
            postgres_server.dsn,
            store.schema,
            old_json,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(servers.REPO / "src")},
        )
        taken = asyncio.ensure_future(taker.communicate())
        waiting = await asyncio.wait_for(_waiting_on(mon, create_pid, taken), 30)
        await blocker.rollback()
        await create
        out, _ = await asyncio.wait_for(taken, 60)
    finally:
        await side.close()
        await mon.close()
    assert taker.returncode == 0
    token, seen = json.loads(out)
    assert seen == entries(0, 1)  # the holder saw the create: it came first
    assert waiting  # the acquire waited for the create to end (it did not just come after)
    assert token == (2 if leased else 1)
    assert (await asyncio.to_thread(store.read, "job")).entries == seen  # type: ignore[union-attr]


_CHILD = """
import json, sys
from datetime import datetime
import statekeep as sk
from statekeep.stores import PostgresStore
dsn, schema, name, old = sys.argv[1:5]
store = PostgresStore(dsn, schema=schema)
store.current_lease("a")  # connected and ready
print("ready", flush=True)
sys.stdin.readline()
try:
    lease = store.acquire("a", name, 60)
except sk.LeaseHeldError:
    o = json.loads(old)
    lease = sk.Lease("a", o["owner"], o["token"], datetime.fromisoformat(o["expires_at"]), namespace="default")
try:
    store.write("a", [{"seq": 1, "by": name}], None, lease=lease)
    print("wrote", lease.token, flush=True)
except sk.StaleLeaseError:
    print("refused", flush=True)
store.close()
"""


def test_two_processes_race_to_take_over(
    postgres_server: PostgresServer, opened: Any, tmp_path: Path
) -> None:
    store = opened()
    store.write("a", entries(0, 1), snapshot(), create=True)
    old = store.acquire("a", "old", 0.2)
    wait_until_ended(store, "a")
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    old_json = json.dumps({"owner": old.owner, "token": old.token, "expires_at": old.expires_at.isoformat()})
    env = {**os.environ, "PYTHONPATH": str(servers.REPO / "src")}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), postgres_server.dsn, store.schema, f"p{i}", old_json],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    for proc in procs:  # both go at once
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outs = sorted(proc.communicate(timeout=60)[0].strip() for proc in procs)
    assert all(proc.returncode == 0 for proc in procs)
    assert outs == ["refused", "wrote 2"]
    assert [e.get("by") for e in store.read("a").entries][1:] in (["p0"], ["p1"])  # type: ignore[union-attr]


# -- schema version 3 from version 2 ------------------------------------------------------


def test_version_2_tables_gain_leases(postgres_server: PostgresServer) -> None:
    schema = unique_name("sk")
    sql = Sql(schema, "")
    old_tables(postgres_server, sql, 2, 21)
    store = PostgresStore(postgres_server.dsn, schema=schema)
    try:
        assert store.read("a").entries == entries(0, 2)  # type: ignore[union-attr]
        lease = store.acquire("a", "w", 60)
        with pytest.raises(LeaseHeldError):
            store.write("a", entries(2, 1), None)
        store.write("a", entries(2, 1), None, lease=lease)
        assert len(store.read("a").entries) == 3  # type: ignore[union-attr]
    finally:
        store.close()
    assert raw(postgres_server, f"SELECT version FROM {sql.version}")[0][0] == SCHEMA_VERSION

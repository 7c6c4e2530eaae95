"""SQLiteStore's protection on a real database file: redaction and sealing seen in the raw
bytes of the file and its -wal/-shm files, tampering and swapping detected, key rotation,
rekey's in-place replacement, and fenced leases (atomic with the batched writes, kept
across release, delete, reopen and processes; gc leaves a leased State alone).
"""

from __future__ import annotations

import asyncio
import base64
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from statekeep import (
    DecryptionError,
    Keyring,
    Lease,
    LeaseHeldError,
    Record,
    Redactor,
    SQLiteStore,
    StaleLeaseError,
    State,
    open_store,
)
from statekeep._protect.sealing import seal_entry, seal_snapshot
from statekeep._runtime.bridge import run_sync
from statekeep.stores._sqlite import _sql as sql
from statekeep.stores._sqlite._schema import SCHEMA_VERSION
from statekeep.testing import entries, snapshot
from tests.stores.sqlite.test_sqlite import HeldCommits, raw, run_python, wait_until

SECRET = "hunter2-zx81-secret"
MARK = "plainmark-4417-qv"  # a unique plaintext marker
K1, K2 = Keyring.generate_key(), Keyring.generate_key()


class Clock:
    """A clock the test moves: what the stores judge lease and State expiry by. It notes
    the threads that read it."""

    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)
        self.readers: list[int] = []

    def __call__(self) -> datetime:
        self.readers.append(threading.get_ident())
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


def raw_bytes(db: Path) -> bytes:
    """Every byte SQLite keeps for the database: the file, its WAL, its shared memory and
    any rollback journal."""
    parts = [db, *(db.with_name(db.name + suffix) for suffix in ("-wal", "-shm", "-journal"))]
    return b"".join(p.read_bytes() for p in parts if p.exists())


def checkpoint(db: Path) -> None:
    with raw(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def marked_state(sid: str = "a") -> State:
    state = State(f"task {MARK}", id=sid)  # never redacted: a listing field
    state.add_user(f"my password is {SECRET}, remember {MARK}")
    state.set_data("creds", {"note": f"{MARK} {SECRET}", "n": 1})
    return state


def save_twice(store: SQLiteStore, state: State) -> None:
    store.save(state)
    state.add_user(f"again {MARK} {SECRET}")
    store.save(state)


def ring(*keys: str, current: str) -> Keyring:
    known = {"k1": K1, "k2": K2}
    return Keyring({k: known[k] for k in keys}, current=current)


# -- what reaches the file --------------------------------------------------------------------


def test_a_redacted_store_keeps_no_secret_in_any_file(tmp_path: Path) -> None:
    redacted = SQLiteStore(tmp_path / "r.db", redact=Redactor(values=[SECRET]))
    clear = SQLiteStore(tmp_path / "c.db")
    for store in (redacted, clear):
        state = marked_state()
        save_twice(store, state)
        assert SECRET in state.history[1]["text"]  # the live State is unchanged
    assert SECRET not in redacted.read("a").entries[1]["text"]
    assert redacted.read("a").entries[2]["value"]["note"] == f"{MARK} [REDACTED]"
    for when in ("in the WAL", "checkpointed"):
        assert SECRET.encode() not in raw_bytes(tmp_path / "r.db"), when
        assert SECRET.encode() in raw_bytes(tmp_path / "c.db"), when  # the grep can fail
        checkpoint(tmp_path / "r.db")
        checkpoint(tmp_path / "c.db")
    redacted.close()
    clear.close()


def test_a_sealed_store_keeps_no_plaintext_in_any_file(tmp_path: Path) -> None:
    sealed = SQLiteStore(tmp_path / "s.db", encrypt=ring("k1", current="k1"))
    clear = SQLiteStore(tmp_path / "c.db")
    for store in (sealed, clear):
        save_twice(store, marked_state())
        store.acquire("a", "worker-1", 60)
    record = sealed.read("a")
    assert record is not None and MARK in record.entries[1]["text"] and MARK in record.snapshot["task"]
    assert [row.task for row in sealed.list()] == [f"task {MARK}"]
    for when in ("in the WAL", "checkpointed"):
        assert MARK.encode() not in raw_bytes(tmp_path / "s.db"), when
        assert raw_bytes(tmp_path / "c.db").count(MARK.encode()) >= 3, when  # entry, task, data
        checkpoint(tmp_path / "s.db")
        checkpoint(tmp_path / "c.db")
    with raw(tmp_path / "s.db") as conn:  # what stays in clear: ids, seqs, times, listing fields
        data, task = conn.execute(
            "SELECT e.data, s.task FROM entries e JOIN states s ON s.id = e.state_id WHERE e.seq = 1"
        ).fetchone()
        assert set(orjson.loads(data)) == {"seq", "at", "sk.sealed"} and task.startswith("sk.sealed:k1:")
    sealed.close()
    clear.close()


# -- tampering, swapping, keys --------------------------------------------------------------------


def sealed_body(db: Path, sid: str, seq: int) -> bytes:
    with raw(db) as conn:
        (data,) = conn.execute(
            "SELECT data FROM entries WHERE state_id = ? AND seq = ?", (sid, seq)
        ).fetchone()
    return orjson.loads(data)["sk.sealed"].partition(":")[2].encode()


def test_one_byte_changed_in_the_file_is_detected(db: Path) -> None:
    store = SQLiteStore(db, encrypt=ring("k1", current="k1"))
    store.save(marked_state())
    store.close()
    checkpoint(db)
    body = sealed_body(db, "a", 1)
    box = bytearray(base64.b64decode(body))
    box[20] ^= 0x01  # one byte of the ciphertext
    changed = base64.b64encode(bytes(box))
    data = db.read_bytes()
    assert data.count(body) == 1 and len(changed) == len(body)
    db.write_bytes(data.replace(body, changed))  # the file itself, as a disk or an attacker would
    store = SQLiteStore(db, encrypt=ring("k1", current="k1"))
    with pytest.raises(DecryptionError, match=r"State 'a' entry seq 1 \(key 'k1'\) fails authentication"):
        store.read("a")
    store.close()


def test_records_swapped_between_states_or_seqs_are_detected(db: Path) -> None:
    store = SQLiteStore(db, encrypt=ring("k1", current="k1"))
    for sid in ("a", "b", "c"):
        state = State("task", id=sid)
        state.add_user("one")
        state.add_user("two")
        store.save(state)
    with raw(db) as conn:
        swap = "UPDATE entries SET data = (SELECT data FROM entries WHERE state_id = ? AND seq = ?) "
        swap += "WHERE state_id = ? AND seq = ?"
        conn.execute(swap, ("b", 1, "a", 1))  # b's seq 1 copied over a's
        conn.execute(swap, ("c", 2, "c", 1))  # c's seq 2 copied over its seq 1
        conn.execute(
            "UPDATE states SET snapshot = (SELECT snapshot FROM states WHERE id = 'a') WHERE id = 'b'"
        )
    with pytest.raises(DecryptionError, match=r"State 'a' entry seq 1 \(key 'k1'\)"):
        store.read("a")
    with pytest.raises(DecryptionError, match=r"State 'c' entry seq 1"):
        store.read("c")
    with pytest.raises(DecryptionError, match=r"State 'b' snapshot \(key 'k1'\)"):
        store.read("b")
    store.close()


def test_rotation_leaves_everything_readable_and_a_missing_key_is_named(db: Path) -> None:
    first = SQLiteStore(db, encrypt=ring("k1", current="k1"))
    state = marked_state()
    first.save(state)
    first.close()
    rotated = SQLiteStore(db, encrypt=ring("k2", "k1", current="k2"))
    loaded = rotated.load("a")
    loaded.add_user("after rotation")
    rotated.save(loaded)
    assert [e.get("text") for e in rotated.read("a").entries][1:] == [
        state.history[1]["text"],
        None,
        "after rotation",
    ]
    rotated.close()
    with raw(db) as conn:
        kids = [
            orjson.loads(d)["sk.sealed"][:3] for (d,) in conn.execute("SELECT data FROM entries ORDER BY seq")
        ]
    assert kids == ["k1:", "k1:", "k1:", "k2:"]
    only_new = SQLiteStore(db, encrypt=ring("k2", current="k2"))
    with pytest.raises(DecryptionError, match=r"State 'a' entry seq 0 is sealed with key 'k1'"):
        only_new.read("a")
    only_new.close()


def test_plaintext_and_sealed_states_are_refused_across_the_divide(db: Path) -> None:
    clear = SQLiteStore(db)
    clear.save(marked_state("plain"))
    sealed = SQLiteStore(db, encrypt=ring("k1", current="k1"))
    sealed.save(marked_state("sealed"))
    with pytest.raises(DecryptionError, match=r"State 'plain' .* is plaintext"):
        sealed.read("plain")
    with pytest.raises(DecryptionError, match=r"State 'sealed' .* is sealed with key 'k1'.* no keyring"):
        clear.read("sealed")
    lenient = SQLiteStore(db, encrypt=ring("k1", current="k1"), allow_plaintext=True)
    assert lenient.read("plain") == clear.read("plain")
    assert lenient.read("sealed") == sealed.read("sealed")
    for store in (clear, sealed, lenient):
        store.close()


def test_a_fork_of_a_sealed_state_is_sealed_for_its_new_id(db: Path) -> None:
    store = SQLiteStore(db, encrypt=ring("k1", current="k1"))
    store.save(marked_state())
    fork = store.fork("a", new_id="b")
    assert store.read("b").entries == store.read("a").entries == fork.history
    with raw(db) as conn:
        rows = dict(
            conn.execute(
                "SELECT state_id, data FROM entries WHERE seq = 1 AND state_id IN ('a', 'b')"
            ).fetchall()
        )
    assert rows["a"] != rows["b"]  # re-sealed, not copied inside the database
    store.close()


def test_options_pass_through_open_store(db: Path) -> None:
    store = open_store(f"sqlite:///{db}", encrypt=ring("k1", current="k1"), redact=Redactor(values=[SECRET]))
    store.save(marked_state())
    store.close()
    checkpoint(db)
    assert SECRET.encode() not in raw_bytes(db) and MARK.encode() not in raw_bytes(db)


# -- rekey's hook ---------------------------------------------------------------------------------


def test_reseal_replaces_only_records_still_as_read(db: Path) -> None:
    store = SQLiteStore(db, encrypt=ring("k1", current="k1"))
    store.save(marked_state())
    with raw(db) as conn:
        stored = [
            d.encode() for (d,) in conn.execute("SELECT data FROM entries WHERE state_id = 'a' ORDER BY seq")
        ]
        (old_snapshot,) = conn.execute("SELECT snapshot FROM states WHERE id = 'a'").fetchone()
    plain = store.read("a")
    new_ring = ring("k2", current="k2")

    def resealed(seq: int) -> bytes:
        line = orjson.dumps(plain.entries[seq]) + b"\n"
        return seal_entry(new_ring, line, plain.entries[seq], "default", "a", plain.incarnation).rstrip(b"\n")

    changed = orjson.dumps({**orjson.loads(stored[1]), "at": "changed meanwhile"})
    work = {0: (stored[0], resealed(0)), 1: (changed, resealed(1))}  # seq 1 is no longer as read
    snap = (old_snapshot.encode(), seal_snapshot(new_ring, plain.snapshot, "default", "a", plain.incarnation))
    assert run_sync(store._locked("a", store._reseal("a", work, snap)), "_reseal") == 2
    store.close()
    with raw(db) as conn:
        kids = [
            orjson.loads(d)["sk.sealed"][:3] for (d,) in conn.execute("SELECT data FROM entries ORDER BY seq")
        ]
    assert kids == ["k2:", "k1:", "k1:"]  # seq 2 was not asked for
    both = SQLiteStore(db, encrypt=ring("k2", "k1", current="k2"))
    assert both.read("a") == plain
    both.close()
    only_new = SQLiteStore(db, encrypt=ring("k2", current="k2"))
    assert [row.task for row in only_new.list()] == [plain.snapshot["task"]]  # the listing column too
    only_new.close()


# -- leases ---------------------------------------------------------------------------------------


TAKE_OVER = """
    import sys
    from statekeep import SQLiteStore
    store = SQLiteStore(sys.argv[1])
    lease = store.acquire("a", "worker-2", 120)
    store.write("a", [{"seq": 1, "kind": "note", "text": "new owner"}], None, lease=lease)
    print(lease.token)
    store.close()
"""


def test_a_takeover_while_a_write_waits_for_its_batch_refuses_it(db: Path) -> None:
    # The fence is checked in the transaction that writes, not when the write is sent: a
    # takeover by another process between the two refuses the write, and nothing of it lands.
    store = SQLiteStore(db)
    store.write("a", entries(0, 1), snapshot("a"), create=True)
    lease = store.acquire("a", "worker-1", 0.2)

    async def race() -> tuple[str, BaseException | None]:
        held = HeldCommits(store)
        first = asyncio.ensure_future(store.awrite("blocker", [], None, create=True))
        await wait_until(lambda: held.sizes == [1], "the first batch")
        stale = asyncio.ensure_future(store.awrite("a", entries(1, 1), snapshot("stale"), lease=lease))
        await wait_until(lambda: len(store._batches.queue) == 1, "the write to queue up")
        while await store.acurrent_lease("a") is not None:  # by the store's clock
            await asyncio.sleep(0.01)
        child = await asyncio.to_thread(run_python, TAKE_OVER, str(db))
        assert child.returncode == 0, child.stderr
        held.gate.set()
        await first
        return child.stdout.strip(), (await asyncio.gather(stale, return_exceptions=True))[0]

    token, error = asyncio.run(race())
    assert token == "2"
    assert isinstance(error, StaleLeaseError) and "now leased to 'worker-2' (token 2)" in str(error)
    assert store.read("a") == Record(entries(0, 1) + entries(1, 1, text="new owner"), snapshot("a"))
    store.close()


async def test_a_lease_that_ends_while_its_write_waits_for_the_lock_is_refused(db: Path) -> None:
    # The fence reads the clock once the transaction holds SQLite's write lock, not before
    # it waits for it: here another connection (as another process would) holds the lock.
    clock = Clock()
    store = SQLiteStore(db, clock=clock)
    await store.awrite("a", entries(0, 1), snapshot("a"), create=True)
    lease = await store.aacquire("a", "w", 10)
    store._commit_now = HeldCommits.in_a_worker  # type: ignore[method-assign]
    blocker = raw(db)
    blocker.execute("BEGIN IMMEDIATE")
    writer = store._conns.writer
    assert writer is not None
    tried: list[str] = []
    writer.set_trace_callback(tried.append)  # the batch's statements, from the thread running it
    write = asyncio.ensure_future(store.awrite("a", entries(1, 1), None, lease=lease))
    await wait_until(lambda: "BEGIN IMMEDIATE" in tried, "the batch to ask for the write lock")
    clock.advance(11)  # the lease ends while the write waits for the lock
    blocker.execute("ROLLBACK")
    blocker.close()
    with pytest.raises(StaleLeaseError, match="ended at"):
        await write
    assert await store.aread("a") == Record(entries(0, 1), snapshot("a"))
    await store.aclose()


async def test_a_fenced_out_write_fails_alone_in_its_batch(db: Path) -> None:
    clock = Clock()
    store = SQLiteStore(db, clock=clock)
    for sid in ("a", "b", "c", "d"):
        await store.awrite(sid, entries(0, 1), snapshot(sid), create=True)
    old, old_d = await store.aacquire("a", "w1", 10), await store.aacquire("d", "w1", 10)
    clock.advance(11)
    current = await store.aacquire("a", "w2", 10)
    await store.aacquire("d", "w2", 10)
    held_c = await store.aacquire("c", "w3", 10)
    held = HeldCommits(store)
    first = asyncio.ensure_future(store.awrite("blocker", [], None, create=True))
    await wait_until(lambda: held.sizes == [1], "the first batch")
    calls = {
        "a stale": store.awrite("a", entries(1, 1), snapshot("a stale"), lease=old),
        "b ok": store.awrite("b", entries(1, 1), snapshot("b2")),
        "c unleased": store.awrite("c", entries(1, 1), snapshot("c2")),
        "d delete stale": store.adelete("d", lease=old_d),
        "c2 ok": store.awrite("c2", entries(0, 1), snapshot("c2"), create=True),
    }
    tasks = {name: asyncio.ensure_future(call) for name, call in calls.items()}
    await wait_until(lambda: len(store._batches.queue) == len(calls), "the writes to queue up")
    held.gate.set()
    await first
    outcome = dict(zip(tasks, await asyncio.gather(*tasks.values(), return_exceptions=True), strict=True))
    assert held.sizes == [1, len(calls)]  # one transaction
    assert isinstance(outcome.pop("a stale"), StaleLeaseError)
    assert isinstance(outcome.pop("c unleased"), LeaseHeldError)
    error = outcome.pop("d delete stale")
    assert isinstance(error, StaleLeaseError) and "nothing was deleted" in str(error)
    assert outcome == {"b ok": None, "c2 ok": None}
    assert await store.aread("a") == Record(entries(0, 1), snapshot("a"))
    assert await store.aread("b") == Record(entries(0, 2), snapshot("b2"))
    assert await store.aread("c") == Record(entries(0, 1), snapshot("c"))
    assert await store.aread("d") is not None
    await store.awrite("a", entries(1, 1), snapshot("a2"), lease=current)
    await store.awrite("c", entries(1, 1), snapshot("c2"), lease=held_c)
    await store.aclose()


def test_without_a_lease_a_live_one_refuses_write_delete_and_fork(db: Path) -> None:
    store = SQLiteStore(db)
    store.save(State("a", id="a"))
    saved = store.read("a")
    lease = store.acquire("a", "worker-1", 60)
    for attempt in (
        lambda: store.write("a", entries(1, 1), None),
        lambda: store.delete("a"),
        lambda: store.fork("a", new_id="b"),
    ):
        with pytest.raises(LeaseHeldError, match="leased to 'worker-1'"):
            attempt()
    with pytest.raises(LeaseHeldError) as held:
        store.acquire("a", "worker-2", 60)
    assert (held.value.owner, held.value.expires_at) == ("worker-1", lease.expires_at)
    assert store.read("a") == saved
    store.fork("a", new_id="b", lease=lease)
    store.write(
        "a", [{"seq": 1, "kind": "user", "text": "hi", "at": "2026-01-01T00:00:00+00:00"}], None, lease=lease
    )
    store.delete("a", lease=lease)
    assert store.read("a") is None
    store.close()


def test_tokens_only_grow_across_release_delete_and_reopening(db: Path) -> None:
    store = SQLiteStore(db)
    store.write("a", entries(0, 1), snapshot("a"), create=True)
    first = store.acquire("a", "w", 60)
    store.release(first)
    assert store.current_lease("a") is None
    store.release(first)  # no longer current: a no-op
    second = store.acquire("a", "w", 60)
    store.delete("a", lease=second)
    assert reopen_and_read_lease(db) == second  # the lease outlives its State
    store.release(second)
    store.close()
    reopened = SQLiteStore(db)
    third = reopened.acquire("a", "w", 60)
    assert (first.token, second.token, third.token) == (1, 2, 3)
    assert reopened.current_lease("a") == third
    with pytest.raises(StaleLeaseError):
        reopened.renew(second)
    reopened.close()


def reopen_and_read_lease(db: Path) -> Lease | None:
    store = SQLiteStore(db)
    try:
        return store.current_lease("a")
    finally:
        store.close()


def test_an_expired_lease_is_refused_by_the_system_clock(db: Path) -> None:
    store = SQLiteStore(db)
    store.write("a", entries(0, 1), snapshot("a"), create=True)
    lease = store.acquire("a", "w", 0.05)
    renewed = store.renew(lease, 0.05)
    assert renewed.token == lease.token and renewed.expires_at >= lease.expires_at
    while store.current_lease("a") is not None:  # the store's clock passes expires_at
        pass
    with pytest.raises(StaleLeaseError, match="ended at"):
        store.write("a", entries(1, 1), None, lease=renewed)
    with pytest.raises(StaleLeaseError):
        store.renew(renewed)
    store.write("a", entries(1, 1), None)  # no live lease: a write without one goes through
    assert store.read("a") == Record(entries(0, 2), snapshot("a"))
    store.close()


def test_gc_skips_an_expired_state_while_it_is_leased(db: Path) -> None:
    clock = Clock()
    store = SQLiteStore(db, clock=clock, retention=timedelta(seconds=10))
    store.write("a", entries(0, 1), snapshot("a"), create=True)
    store.write("b", entries(0, 1), snapshot("b"), create=True)
    clock.advance(5)
    lease = store.acquire("a", "w", 60)
    clock.advance(6)  # both States expired; a's lease is live
    assert store.gc(dry_run=True) == 1
    assert store.gc() == 1
    with raw(db) as conn:
        assert [sid for (sid,) in conn.execute("SELECT id FROM states ORDER BY id")] == ["a"]
    store.release(lease)
    assert store.gc() == 1
    assert store.acquire("a", "w", 60).token == 2  # the lease row outlives the State
    store.close()


def test_a_lease_held_by_another_process_is_seen_here(db: Path) -> None:
    store = SQLiteStore(db)
    store.write("a", entries(0, 1), snapshot("a"), create=True)
    child = run_python(
        """
        import sys
        from statekeep import SQLiteStore
        store = SQLiteStore(sys.argv[1])
        lease = store.acquire("a", "child-worker", 120)
        store.write("a", [{"seq": 1, "kind": "user", "text": "child"}], None, lease=lease)
        print(lease.token)
        store.close()
        """,
        str(db),
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "1"
    with pytest.raises(LeaseHeldError, match="leased to 'child-worker'"):
        store.write("a", entries(1, 2), None)
    held = store.current_lease("a")
    assert held is not None and held.owner == "child-worker" and held.token == 1
    assert store.read("a").entries[1]["text"] == "child"
    store.close()


def test_a_version_2_database_gains_the_lease_table(db: Path) -> None:
    conn = raw(db)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(sql.CREATE_VERSION_TABLE)
    for step in sql.MIGRATIONS[:2]:
        for statement in step:
            conn.execute(statement)
    conn.execute(sql.INSERT_VERSION, (2,))
    conn.execute(
        "INSERT INTO states (namespace, id, next_seq, snapshot) VALUES ('default', 'old', 0, ?)",
        (orjson.dumps(snapshot("old")).decode(),),
    )
    conn.close()
    store = SQLiteStore(db)
    assert store.read("old") == Record([], snapshot("old"))
    lease = store.acquire("old", "w", 60)
    store.write("old", entries(0, 1), None, lease=lease)
    store.close()
    with raw(db) as check:
        assert check.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        assert check.execute("SELECT owner, token FROM leases").fetchall() == [("w", 1)]


def test_a_refused_acquire_changes_nothing(db: Path) -> None:
    store = SQLiteStore(db)
    lease = store.acquire("fresh", "w", 60)  # a State need not exist to be leased
    with raw(db) as conn:
        before = conn.execute("SELECT * FROM leases").fetchall()
    with pytest.raises(LeaseHeldError):
        store.acquire("fresh", "w2", 60)
    with raw(db) as conn:
        assert conn.execute("SELECT * FROM leases").fetchall() == before
    store.release(lease)
    store.close()


def test_reading_a_missing_file_makes_none(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "none.db")
    assert store.current_lease("a") is None
    assert not (tmp_path / "none.db").exists()
    store.close()


def test_the_loser_of_a_takeover_between_two_store_objects_never_writes(db: Path) -> None:
    # Two store objects on one file, each with its own connections.
    clock = Clock()
    one, two = SQLiteStore(db, clock=clock), SQLiteStore(db, clock=clock)
    one.write("a", entries(0, 1), snapshot("a"), create=True)
    first = one.acquire("a", "one", 10)
    clock.advance(11)
    winners = []
    for store, name in ((one, "one-again"), (two, "two")):
        try:
            winners.append(store.acquire("a", name, 10))
        except LeaseHeldError:
            pass
    assert [w.owner for w in winners] == ["one-again"] and winners[0].token == 2
    with pytest.raises(StaleLeaseError):
        one.write("a", entries(1, 1), None, lease=first)
    one.write("a", entries(1, 1, text="winner"), None, lease=winners[0])
    with pytest.raises(LeaseHeldError):
        two.write("a", entries(1, 1, text="winner"), None)
    with raw(db) as conn:
        assert conn.execute("SELECT count(*) FROM entries WHERE state_id = 'a'").fetchone() == (2,)
    one.close()
    two.close()

"""RedisStore's protection on a real server: what reaches Redis (every key's DUMP and the
append-only file) after redaction and sealing, tampered and swapped records, key rotation,
plaintext refused, and the lease fence that the write, delete and fork scripts apply in
the same step as the change, by the server's clock."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from statekeep import (
    DecryptionError,
    Keyring,
    LeaseHeldError,
    Redactor,
    StaleLeaseError,
    State,
)
from statekeep._protect.sealing import seal_entry, seal_snapshot
from statekeep._runtime.bridge import run_sync
from tests.stores.redis.test_redis import raw
from tests.support import servers
from tests.support.servers import RedisServer, unique_name

aioredis = pytest.importorskip("redis.asyncio")
pytest.importorskip("cryptography")

from statekeep.stores import RedisStore  # noqa: E402
from statekeep.stores._redis import _leases, _listing  # noqa: E402

K1, K2 = Keyring.generate_key(), Keyring.generate_key()
RING1 = Keyring({"k1": K1}, current="k1")


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    """A server of this module's own, so its append-only file holds only these tests'
    writes; no RDB compression, so DUMP shows values as stored."""
    try:
        got = servers.start_redis(extra=("--rdbcompression", "no"))
    except servers.ServerMissing as exc:
        servers.need(exc)
        raise
    yield got
    got.remove()


def store(server: RedisServer, prefix: str | None = None, **options: Any) -> RedisStore:
    return RedisStore(server.url, prefix=prefix or unique_name("sk") + ":", **options)


def dumps(server: RedisServer, prefix: str) -> bytes:
    """The DUMP of every key under ``prefix``, joined."""

    async def go() -> bytes:
        client = aioredis.Redis.from_url(server.url)
        try:
            keys = [key async for key in client.scan_iter(match=prefix + "*")]
            assert keys, f"no keys under {prefix!r}"
            return b"".join([await client.dump(key) for key in keys])
        finally:
            await client.aclose()

    return asyncio.run(go())


def aof(server: RedisServer) -> bytes:
    """Every append-only file of the server (fsync'd on each write: see tests/support/servers.py)."""
    reply = raw(server, "CONFIG", "GET", "appenddirname")
    folder = (reply[b"appenddirname"] if isinstance(reply, dict) else reply[1]).decode()
    files = sorted((server.root / folder).iterdir())
    assert files, "no append-only file"
    return b"".join(Path(f).read_bytes() for f in files)


def save_marked(target: RedisStore, sid: str, marker: str, in_task: bool = True) -> State:
    """Save a State holding ``marker`` in an entry, a data value and (``in_task``) its task."""
    state = State(f"task {marker}" if in_task else "a task", id=sid)
    state.add_user(f"my key is {marker}, keep it")
    state.set_data("note", {"deep": [f"x{marker}x"]})
    target.save(state)
    state.add_user("more")
    target.save(state)
    return state


# -- what reaches Redis ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["redact", "encrypt"])
def test_no_secret_in_dump_or_aof(server: RedisServer, kind: str) -> None:
    hidden, shown = f"S3CRET-{uuid.uuid4().hex}", f"S3CRET-{uuid.uuid4().hex}"
    options: dict[str, Any] = (
        {"redact": Redactor(values=[hidden])} if kind == "redact" else {"encrypt": RING1}
    )
    guarded, clear = store(server, **options), store(server)
    try:
        # Redaction leaves the listing's fields (the task) alone, by design.
        state = save_marked(guarded, "s1", hidden, in_task=kind == "encrypt")
        save_marked(clear, "s1", shown)
        assert hidden in state.messages[1]["content"]  # the live State is unchanged
        read = guarded.load("s1")
        assert (hidden in read.messages[1]["content"]) is (kind == "encrypt")
        for found in (dumps(server, guarded.prefix), aof(server)):
            assert hidden.encode() not in found
        # The same grep finds a clear store's marker: the check can fail.
        assert shown.encode() in dumps(server, clear.prefix)
        assert shown.encode() in aof(server)
    finally:
        guarded.close()
        clear.close()


# -- sealed records: tampered, swapped, rotated, plaintext ------------------------------


def test_a_changed_byte_is_detected(server: RedisServer) -> None:
    sealed = store(server, encrypt=RING1)
    try:
        save_marked(sealed, "t", "m")
        key = f"{sealed.prefix}entries:t"
        line = bytearray(raw(server, "LINDEX", key, 1))
        at = line.index(b'"k1:') + 10  # inside the base64 of nonce + ciphertext
        line[at] = ord("A") if line[at] != ord("A") else ord("B")
        raw(server, "LSET", key, 1, bytes(line))
        with pytest.raises(DecryptionError, match=r"State 't' entry seq 1 \(key 'k1'\) fails"):
            sealed.read("t")
        snapshot = bytearray(raw(server, "HGET", f"{sealed.prefix}state:t", "snapshot"))
        at = snapshot.index(b'"sk.sealed":"k1:') + 30
        snapshot[at] = ord("A") if snapshot[at] != ord("A") else ord("B")
        raw(server, "HSET", f"{sealed.prefix}state:t", "snapshot", bytes(snapshot))
        with pytest.raises(DecryptionError, match=r"State 't' snapshot \(key 'k1'\) fails"):
            sealed.read("t", since=2)
    finally:
        sealed.close()


def test_a_record_swapped_between_states_or_seqs_is_detected(server: RedisServer) -> None:
    sealed = store(server, encrypt=RING1)
    try:
        save_marked(sealed, "a", "m")
        save_marked(sealed, "b", "m")
        a, b = f"{sealed.prefix}entries:a", f"{sealed.prefix}entries:b"
        raw(server, "LSET", b, 1, raw(server, "LINDEX", a, 1))
        with pytest.raises(DecryptionError, match="State 'b' entry seq 1"):
            sealed.read("b")
        first, second = raw(server, "LINDEX", a, 1), raw(server, "LINDEX", a, 2)
        raw(server, "LSET", a, 1, second)
        raw(server, "LSET", a, 2, first)
        with pytest.raises(DecryptionError, match="State 'a' entry seq 1"):
            sealed.read("a")
        snap_a = raw(server, "HGET", f"{sealed.prefix}state:a", "snapshot")
        raw(server, "HSET", f"{sealed.prefix}state:b", "snapshot", snap_a)
        with pytest.raises(DecryptionError, match=r"State 'b' (task|snapshot)"):
            sealed.read("b", since=3)
    finally:
        sealed.close()


def test_rotation_keeps_everything_readable(server: RedisServer) -> None:
    prefix = unique_name("sk") + ":"
    with store(server, prefix, encrypt=RING1) as first:
        state = save_marked(first, "r", "m")
    ring2 = Keyring({"k2": K2, "k1": K1}, current="k2")
    with store(server, prefix, encrypt=ring2) as second:
        loaded = second.load("r")
        loaded.add_user("after rotation")
        second.save(loaded)
        assert raw(server, "LINDEX", f"{prefix}entries:r", -1).count(b'"k2:') == 1
        record = second.read("r")
        assert record is not None
        assert record.entries[: len(state.history)] == state.history
        assert [row.task for row in second.list()] == ["task m"]
    only_new = Keyring({"k2": K2}, current="k2")
    with store(server, prefix, encrypt=only_new) as reader, pytest.raises(DecryptionError, match="'k1'"):
        reader.read("r")


def test_plaintext_is_refused_unless_allowed_and_sealed_is_never_garbage(server: RedisServer) -> None:
    prefix = unique_name("sk") + ":"
    with store(server, prefix) as clear:
        clear.save(State("plain", id="p"))
    with store(server, prefix, encrypt=RING1) as sealed:
        with pytest.raises(DecryptionError, match=r"State 'p' .*plaintext"):
            sealed.read("p")
        sealed.save(State("sealed", id="s"))
        assert b'"sk.sealed"' in raw(server, "HGET", f"{prefix}state:s", "snapshot")
    with store(server, prefix, encrypt=RING1, allow_plaintext=True) as lenient:
        assert lenient.load("p").task == "plain"
    with store(server, prefix) as clear, pytest.raises(DecryptionError, match=r"State 's' .*key 'k1'"):
        clear.read("s")


def test_reseal_replaces_only_records_still_as_read(server: RedisServer) -> None:
    prefix = unique_name("sk") + ":"
    with store(server, prefix, encrypt=RING1) as old:
        save_marked(old, "z", "m")
    ring2 = Keyring({"k2": K2, "k1": K1}, current="k2")
    with store(server, prefix, encrypt=ring2) as rekeyed:
        plain = rekeyed.read("z")
        assert plain is not None and plain.snapshot is not None
        entries_key, state_key = f"{prefix}entries:z", f"{prefix}state:z"
        stored = raw(server, "LRANGE", entries_key, 0, -1)
        ns = rekeyed.namespace
        new = {
            seq: (stored[seq], seal_entry(ring2, orjson.dumps(e), e, ns, "z", plain.incarnation))
            for seq, e in enumerate(plain.entries[:2])
        }
        # Seq 1 changed since it was read: it must be left as it is.
        changed = stored[2]
        new[1] = (changed, new[1][1])
        snap = (
            raw(server, "HGET", state_key, "snapshot"),
            seal_snapshot(ring2, plain.snapshot, ns, "z", plain.incarnation),
        )
        done = run_sync(rekeyed._reseal("z", new, snap), "areseal")
        assert done == 2
        after = raw(server, "LRANGE", entries_key, 0, -1)
        assert after[0].count(b'"k2:') == 1 and after[1] == stored[1] and after[2] == stored[2]
        assert b'"k2:' in raw(server, "HGET", state_key, "snapshot")
        assert rekeyed.read("z") == plain
        # Sent again with the old bytes: the server no longer holds them, nothing changes.
        assert run_sync(rekeyed._reseal("z", {0: (stored[0], stored[0])}, None), "areseal") == 0
        assert raw(server, "LINDEX", entries_key, 0) == after[0]


def test_reseal_leaves_a_record_that_changes_after_it_was_compared(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with store(server, encrypt=RING1) as sealed:
        save_marked(sealed, "c", "m")
        key = f"{sealed.prefix}entries:c"
        before = raw(server, "LINDEX", key, 1)
        compare = _leases._same

        def changed_meanwhile(stored: bytes | None, old: bytes) -> bool:
            # Another writer replaces the record after this client compared it.
            change = (server, "LSET", key, 1, before.replace(b'"seq":1', b'"seq":1 '))
            with ThreadPoolExecutor(1) as pool:  # this runs on the store's loop: raw() has its own
                pool.submit(raw, *change).result()
            return compare(stored, old)

        monkeypatch.setattr(_leases, "_same", changed_meanwhile)
        assert run_sync(sealed._reseal("c", {1: (before, b'{"seq":1}')}, None), "areseal") == 0
        assert raw(server, "LINDEX", key, 1) == before.replace(b'"seq":1', b'"seq":1 ')


# -- leases -------------------------------------------------------------------------------


def wait_expired(target: RedisStore, sid: str) -> None:
    """Poll the store's own clock (the server's) until ``sid``'s lease has expired."""
    deadline = time.monotonic() + 30
    while target.current_lease(sid) is not None:
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.01)


@pytest.fixture
def two(server: RedisServer) -> Iterator[tuple[RedisStore, RedisStore]]:
    """Two store objects (two clients) on one prefix: two workers."""
    prefix = unique_name("sk") + ":"
    a, b = store(server, prefix), store(server, prefix)
    yield a, b
    a.close()
    b.close()


def test_a_stale_lease_is_refused_and_nothing_of_it_lands(two: tuple[RedisStore, RedisStore]) -> None:
    a, b = two
    a.save(State("job", id="j"))
    stale = a.acquire("j", "worker-a", 0.2)
    wait_expired(b, "j")
    with pytest.raises(StaleLeaseError, match="ended at"):
        a.write("j", [], {"task": "late"}, lease=stale)
    fresh = b.acquire("j", "worker-b", 30)
    assert fresh.token == stale.token + 1

    state = b.load("j")
    late = a.load("j")
    late.add_user("from the stalled worker")
    state.add_user("from the new owner")

    async def race() -> list[BaseException | None]:
        results = await asyncio.gather(
            a.asave(late, lease=stale), b.asave(state, lease=fresh), return_exceptions=True
        )
        return [r if isinstance(r, BaseException) else None for r in results]

    with pytest.raises(StaleLeaseError, match="no longer current"):  # its token, another owner
        a.write("j", [], {"task": "forged"}, lease=dataclasses.replace(fresh, owner="worker-a"))
    refused, ok = asyncio.run(race())
    assert isinstance(refused, StaleLeaseError) and "now leased to 'worker-b'" in str(refused)
    assert ok is None
    record = a.read("j")
    assert record is not None
    assert [e["text"] for e in record.entries if e["kind"] == "user"] == ["from the new owner"]
    assert a.delete("j", lease=fresh) is None
    with pytest.raises(StaleLeaseError):
        a.delete("j", lease=stale)


def test_a_fenced_out_write_fails_alone_in_its_batch(two: tuple[RedisStore, RedisStore]) -> None:
    a, b = two
    for sid in ("x0", "x1", "x2", "x3"):
        a.save(State("job", id=sid))
    held = b.acquire("x2", "worker-b", 30)

    async def batch() -> list[BaseException | None]:
        writes = [a.awrite(sid, [], {"task": f"new {sid}"}) for sid in ("x0", "x1", "x2", "x3")]
        results = await asyncio.gather(*writes, return_exceptions=True)
        return [r if isinstance(r, BaseException) else None for r in results]

    results = asyncio.run(batch())
    assert [type(r).__name__ for r in results] == ["NoneType", "NoneType", "LeaseHeldError", "NoneType"]
    assert "leased to 'worker-b'" in str(results[2])
    assert [a.read(sid).snapshot["task"] for sid in ("x0", "x1", "x2", "x3")] == [  # type: ignore[union-attr]
        "new x0",
        "new x1",
        "job",
        "new x3",
    ]
    a.write("x2", [], {"task": "leased"}, lease=held)
    assert a.read("x2").snapshot == {"task": "leased"}  # type: ignore[union-attr]


def test_without_a_lease_a_live_one_refuses_write_delete_and_fork_onto_it(
    two: tuple[RedisStore, RedisStore],
) -> None:
    a, b = two
    a.save(State("job", id="w"))
    lease = b.acquire("w", "worker-b", 30)
    with pytest.raises(LeaseHeldError, match="leased to 'worker-b'") as caught:
        a.write("w", [], {"task": "sneaky"})
    assert caught.value.owner == "worker-b" and caught.value.expires_at == lease.expires_at
    with pytest.raises(LeaseHeldError, match="nothing was deleted"):
        a.delete("w")
    assert a.load("w").task == "job"
    # A lease taken on an id before its State exists guards its creation, by fork too.
    b.acquire("fresh", "worker-b", 30)
    with pytest.raises(LeaseHeldError, match="nothing was forked"):
        a.fork("w", new_id="fresh", lease=lease)
    assert a.read("fresh") is None
    with pytest.raises(LeaseHeldError):
        a.save(State("new", id="fresh"))
    assert a.read("fresh") is None


def test_tokens_survive_release_delete_expiry_and_reopening(server: RedisServer) -> None:
    prefix = unique_name("sk") + ":"
    with store(server, prefix, retention=timedelta(hours=1)) as first:
        first.save(State("job", id="t"))
        one = first.acquire("t", "w", 30)
        first.release(one)
        assert first.current_lease("t") is None
        two = first.acquire("t", "w", 30)
        first.delete("t", lease=two)
        assert first.read("t") is None
        first.release(two)
        # The State's keys carry native expiry (retention); its lease row never does.
        first.save(State("job", id="t"))
        assert raw(server, "PTTL", f"{prefix}state:t") > 0
        assert raw(server, "PTTL", f"{prefix}lease:t") == -1
    with store(server, prefix) as reopened:
        assert reopened.current_lease("t") is None
        three = reopened.acquire("t", "other", 30)
        assert [one.token, two.token, three.token] == [1, 2, 3]
        assert reopened.current_lease("t") == three
        renewed = reopened.renew(three, 60)
        assert renewed.token == 3 and renewed.expires_at > three.expires_at


def test_gc_leaves_expired_states_with_a_live_lease(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_listing, "GC_BATCH", 2)  # leased States fill whole batches
    with store(server) as target:
        leases = []
        for i, sid in enumerate(["l0", "l1", "l2", "free0", "free1"]):
            state = State("job", id=sid)
            state.keep_for(timedelta(milliseconds=200 + 10 * i))  # leased ones expire first
            target.save(state)
            if sid.startswith("l"):
                leases.append(target.acquire(sid, "worker", 60))
        deadline = time.monotonic() + 30
        while target.gc(dry_run=True) < 2:  # the two without a lease expire last
            assert time.monotonic() < deadline, "the States never expired"
            time.sleep(0.01)
        assert target.gc() == 2
        assert target.gc(dry_run=True) == 0
        assert all(target.current_lease(lease.state_id) == lease for lease in leases)
        for lease in leases:
            target.release(lease)
        assert target.gc(dry_run=True) == 3
        assert target.gc() == 3
        assert target.gc(dry_run=True) == 0

"""RedisStore's blobs (issue 24, item 1), at the backend level, on the throwaway server: the
write script stores a write's blobs and makes the State a referrer, atomically with its
entries, once per name for every namespace of the prefix; ``_get_blobs``; gc of the
unreferenced ones in Lua (a dry run counts them), beside writers in another process; after
delete, gc and an AOF rewrite the bytes are gone from the server's files; layout 4, moved
to from layout 3 and refused by the last release; a write without blobs runs the same
commands as before."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from statekeep.testing import entries, snapshot
from tests.support import blob_trim
from tests.support import blobs as shared
from tests.support.blobs import blob, blob_write, gc_blobs, get_blobs, usage, write
from tests.support.older import run_older
from tests.support.servers import RedisServer, unique_name

aioredis = pytest.importorskip("redis.asyncio")

from statekeep.stores import RedisStore  # noqa: E402
from statekeep.stores._redis import LAYOUT_VERSION  # noqa: E402
from tests.stores.redis.test_redis import raw  # noqa: E402


@pytest.fixture
def prefix() -> str:
    return unique_name("sk") + ":"


def open_store(server: RedisServer, prefix: str, **options: Any) -> RedisStore:
    """A RedisStore on ``prefix``, quiet about the server's persistence settings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return RedisStore(server.url, prefix=prefix, **options)


def make_store(server: RedisServer, prefix: str) -> str:
    """Python that opens the store on ``prefix`` in another process."""
    return (
        "import warnings; warnings.simplefilter('ignore'); from statekeep.stores import RedisStore; "
        f"store = RedisStore({server.url!r}, prefix={prefix!r})"
    )


def referrers(server: RedisServer, prefix: str, name: str) -> set[bytes]:
    """The State keys that refer to blob ``name`` (each member without its generation)."""
    return {m.rpartition(b"#")[0] for m in raw(server, "SMEMBERS", prefix + "blobref:" + name)}


@pytest.fixture
def rs(redis_server: RedisServer, prefix: str) -> Iterator[RedisStore]:
    store = open_store(redis_server, prefix)
    yield store
    store.close()


def test_a_write_stores_its_blobs_once_across_states_and_namespaces(
    rs: RedisStore, redis_server: RedisServer, prefix: str
) -> None:
    name, _ = shared.check_stored_once_across_states_and_namespaces(rs)
    assert raw(redis_server, "ZCARD", prefix + "blobs") == 2
    assert raw(redis_server, "GET", prefix + "blob:" + name) == get_blobs(rs, [name])[name]
    assert referrers(redis_server, prefix, name) == {
        f"{prefix}state:a".encode(),
        f"{prefix}state:b".encode(),
        f"{prefix}ns:memory:state:a".encode(),
    }


def test_an_append_refers_to_a_stored_blob_without_its_bytes(rs: RedisStore) -> None:
    shared.check_an_append_refers_without_bytes(rs)
    rs.delete("a")
    assert gc_blobs(rs) == (0, 0)  # b still refers to it


def test_a_reference_to_a_blob_the_store_lacks_is_refused_whole(rs: RedisStore) -> None:
    shared.check_a_missing_blob_is_refused_whole(rs)


def test_gc_removes_only_unreferenced_blobs_and_a_dry_run_counts_them(
    rs: RedisStore, redis_server: RedisServer, prefix: str
) -> None:

    def b_still_refers(shared: str) -> None:
        assert f"{prefix}state:b".encode() in referrers(redis_server, prefix, shared)

    shared.check_gc_removes_only_unreferenced(rs, after_first=b_still_refers)
    # What is left: the generation counter alone (it never goes back, so no old referrer
    # can ever match a new State).
    assert raw(redis_server, "KEYS", prefix + "blob*") == [f"{prefix}blobgen".encode()]


def test_gc_walks_more_blobs_than_one_batch(rs: RedisStore) -> None:
    from statekeep.stores._redis import _blobs

    names = {}
    for i in range(_blobs.GC_BLOBS_BATCH + 20):
        name, data = blob(100, f"blob {i} ".encode())
        names[name] = data
    write(rs, blob_write("a", 0, list(names), names, create=True))
    assert gc_blobs(rs) == (0, 0)
    rs.delete("a")
    assert gc_blobs(rs, dry_run=True) == (len(names), 100 * len(names))
    assert gc_blobs(rs) == (len(names), 100 * len(names))
    assert usage(rs) == (0, 0)


def test_a_reference_in_another_namespace_keeps_the_blob(rs: RedisStore) -> None:
    shared.check_another_namespace_keeps_the_blob(rs)


def test_a_state_gone_by_native_expiry_no_longer_holds_its_blobs(
    rs: RedisStore, redis_server: RedisServer
) -> None:
    name, data = blob()
    write(rs, blob_write("a", 0, [name], {name: data}, create=True))
    raw(redis_server, "DEL", rs._keys_of.state + b"a", rs._keys_of.entries + b"a")  # as native expiry does
    assert gc_blobs(rs) == (1, 40_000)


def test_a_state_made_again_under_the_same_id_does_not_hold_the_old_ones_blobs(rs: RedisStore) -> None:
    name, data = blob()
    write(rs, blob_write("a", 0, [name], {name: data}, create=True))
    rs.delete("a")
    rs.write("a", entries(0, 1), snapshot(), create=True)  # the same key, another State
    assert gc_blobs(rs) == (1, 40_000)
    kept, kept_data = blob(10_000)
    write(rs, blob_write("a", 1, [kept], {kept: kept_data}))  # its own blob: held
    assert gc_blobs(rs) == (0, 0)
    assert get_blobs(rs, [kept]) == {kept: kept_data}


def test_a_fork_copied_on_the_server_refers_to_the_blobs_of_its_entries(rs: RedisStore) -> None:
    shared.check_fork_refers_to_the_blobs_of_its_entries(rs)


def test_gc_beside_writers_in_another_process_never_removes_a_referenced_blob(
    rs: RedisStore, redis_server: RedisServer, prefix: str
) -> None:
    shared.check_gc_beside_writer(rs, make_store(redis_server, prefix))


def test_deleted_and_collected_blob_bytes_leave_the_files_after_an_aof_rewrite(
    rs: RedisStore, redis_server: RedisServer
) -> None:
    name, data = blob(100_000)
    write(rs, blob_write("a", 0, [name], {name: data}, create=True))

    def on_disk() -> bytes:
        return b"".join(p.read_bytes() for p in redis_server.root.rglob("*") if p.is_file())

    rs.delete("a")
    assert gc_blobs(rs) == (1, 100_000)
    assert get_blobs(rs, [name]) == {}
    assert data[:1000] in on_disk()  # the append-only file still has the command that stored it
    raw(redis_server, "BGREWRITEAOF")
    deadline = time.monotonic() + 60
    while raw(redis_server, "INFO", "persistence").get("aof_rewrite_in_progress") or raw(
        redis_server, "INFO", "persistence"
    ).get("aof_rewrite_scheduled"):
        assert time.monotonic() < deadline, "the AOF rewrite did not finish"
        time.sleep(0.05)
    assert data[:1000] not in on_disk() and data[50_000:51_000] not in on_disk()


def test_a_write_without_blobs_runs_the_same_commands(redis_server: RedisServer, prefix: str) -> None:
    store = open_store(redis_server, prefix)

    def commands(work: Any) -> dict[str, int]:
        raw(redis_server, "CONFIG", "RESETSTAT")
        work()
        stats = raw(redis_server, "INFO", "commandstats")
        calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
        return {
            k: n
            for k, n in calls.items()
            if k.split("|")[0] not in ("config", "info", "hello", "auth", "client")
        }

    try:
        store.write("a", entries(0, 3), snapshot(), create=True)
        plain = commands(lambda: store.write("a", entries(3, 3), snapshot(turn=1)))
        assert not [c for c in plain if c in ("set", "sadd", "zadd|blobs", "incrby", "exists")], plain
        assert plain.pop("evalsha") == 1 and sum(plain.values()) <= 18, plain
        name, data = blob()
        with_blob = commands(lambda: write(store, blob_write("a", 6, [name], {name: data})))
        assert with_blob["evalsha"] == 1 and with_blob["set"] == 1 and with_blob["sadd"] == 1, with_blob
    finally:
        store.close()


def test_a_layout_3_prefix_moves_to_layout_4(redis_server: RedisServer, prefix: str, rs: RedisStore) -> None:
    rs.write("a", entries(0, 2), snapshot(), create=True)
    raw(redis_server, "SET", prefix + "layout", "3")  # as the last release leaves a prefix
    store = open_store(redis_server, prefix, create=False)
    try:
        assert store.read("a").entries == entries(0, 2)  # type: ignore[union-attr]
        assert raw(redis_server, "GET", prefix + "layout") == b"4" == str(LAYOUT_VERSION).encode()
        name, data = blob()
        write(store, blob_write("a", 2, [name], {name: data}))
        assert get_blobs(store, [name]) == {name: data}
    finally:
        store.close()


def test_the_last_release_refuses_a_prefix_at_layout_4(
    redis_server: RedisServer, prefix: str, rs: RedisStore
) -> None:
    name, data = blob()
    write(rs, blob_write("a", 0, [name], {name: data}, create=True))
    older = run_older(
        f"""
        import warnings
        warnings.simplefilter("ignore")
        from statekeep.stores import RedisStore
        try:
            print(RedisStore({redis_server.url!r}, prefix={prefix!r}).read("a"))
        except Exception as exc:
            print(type(exc).__name__, exc)
        """
    )
    assert "layout version 4, made by a newer statekeep" in older.stdout, older.stdout + older.stderr


def test_writes_batched_together_store_a_shared_blob_once(rs: RedisStore) -> None:
    shared.check_batched_writes(rs)


def test_a_writer_killed_mid_write_leaves_every_state_with_its_blobs(
    rs: RedisStore, redis_server: RedisServer, prefix: str
) -> None:
    assert len(shared.kill_a_writer(rs, make_store(redis_server, prefix))) >= 8


def test_a_trim_releases_the_blobs_only_its_removed_entries_referred_to(rs: RedisStore) -> None:
    blob_trim.check_trim_releases_blobs(rs)


def test_a_trim_of_a_sealed_state_keeps_the_references_its_kept_lines_list(rs: RedisStore) -> None:
    blob_trim.check_a_sealed_state_keeps_the_references_its_kept_lines_list(rs)

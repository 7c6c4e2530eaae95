"""RedisStore's layouts 3 and 4, beside the last release's statekeep on one prefix
(tests/support/older.py).

Layout 3 says every process on the prefix honours the lease rows, layout 4 that entries may
refer to blobs: the last release (layout 2) must refuse the current layout, and the first new
process upgrades a layout 2 prefix to it (layout 3 to 4: tests/stores/redis/test_redis_blobs.py).
"""

from __future__ import annotations

import json
import time
import warnings

import pytest
import redis

from statekeep import LeaseHeldError, State
from tests.stores.redis.test_redis import raw
from tests.support import servers
from tests.support.older import run_older
from tests.support.servers import RedisServer, unique_name

pytest.importorskip("redis.asyncio")

from statekeep.stores import RedisStore
from statekeep.stores._redis import LAYOUT_VERSION

# The older process tries a write and prints what happened: "refused <error>" or "wrote".
OLDER_WRITE = """
import warnings
warnings.simplefilter("ignore")
from statekeep import State, UnsupportedFormatError
from statekeep.stores import RedisStore
try:
    store = RedisStore({url!r}, prefix={prefix!r})
    store.save(State("from the older statekeep", id={sid!r}))
except UnsupportedFormatError as exc:
    print("refused", exc)
else:
    print("wrote")
"""


def older_write(server: RedisServer, prefix: str, sid: str) -> str:
    done = run_older(OLDER_WRITE.format(url=server.url, prefix=prefix, sid=sid))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_last_release_refuses_a_prefix_at_the_current_layout(redis_server: RedisServer) -> None:
    prefix = unique_name("sk") + ":"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the test server's durability settings
        store = RedisStore(redis_server.url, prefix=prefix)
    try:
        store.save(State("leased", id="job"))
        lease = store.acquire("job", "new-worker", 600)
        said = older_write(redis_server, prefix, "other")
        assert said.startswith("refused") and "layout version 4, made by a newer statekeep" in said, said
        assert raw(redis_server, "GET", prefix + "layout") == b"4" == str(LAYOUT_VERSION).encode()
        assert store.current_lease("job") == lease and store.read("other") is None
        assert [e["kind"] for e in store.read("job").entries] == ["task"]  # type: ignore[union-attr]
    finally:
        store.close()


def test_the_first_new_process_upgrades_a_layout_2_prefix(redis_server: RedisServer) -> None:
    prefix = unique_name("sk") + ":"
    made = run_older(
        f"""
        import json, warnings
        warnings.simplefilter("ignore")
        from statekeep import State
        from statekeep.stores import RedisStore
        store = RedisStore({redis_server.url!r}, prefix={prefix!r})
        store.save(State("saved at layout 2", id="job"))
        lease = store.acquire("job", "old-worker", 600)
        print(json.dumps([lease.owner, lease.token]))
        """
    )
    assert made.returncode == 0, made.stderr
    assert raw(redis_server, "GET", prefix + "layout") == b"2"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        store = RedisStore(redis_server.url, prefix=prefix, create=False)
    try:
        held = store.current_lease("job")
        assert held is not None and [held.owner, held.token] == json.loads(made.stdout)
        assert held.namespace == "default"
        assert raw(redis_server, "GET", prefix + "layout") == b"4"  # through 3, with nothing more to move
        assert store.load("job").task == "saved at layout 2"
        with pytest.raises(LeaseHeldError, match="old-worker"):
            store.save(State("over it", id="job"))
        assert older_write(redis_server, prefix, "other").startswith("refused")
        assert store.read("other") is None
    finally:
        store.close()


def replica_get(replica: RedisServer, key: str) -> object:
    """GET on a replica, None while it still loads the primary's dataset (BusyLoadingError):
    the shared server holds every test's keys, so loading them may take a while."""
    try:
        return raw(replica, "GET", key)
    except redis.exceptions.BusyLoadingError:
        return None


def test_a_replica_of_a_layout_2_prefix_reads_it_as_it_is(redis_server: RedisServer) -> None:
    prefix = unique_name("sk") + ":"
    raw(redis_server, "SET", prefix + "layout", "2")  # as the last release leaves a prefix
    replica = servers.start_redis(
        extra=(
            "--replicaof",
            "127.0.0.1",
            str(redis_server.port),
            "--masterauth",
            redis_server.password or "",
        )
    )
    try:
        deadline = time.monotonic() + 30
        while replica_get(replica, prefix + "layout") != b"2":  # the replica catches up
            assert time.monotonic() < deadline, "the replica never received the layout key"
            time.sleep(0.05)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            store = RedisStore(replica.url, prefix=prefix, create=False)
        try:
            assert store.read("job") is None and store.current_lease("job") is None
        finally:
            store.close()
        assert raw(replica, "GET", prefix + "layout") == b"2"
    finally:
        replica.stop()
        replica.remove()

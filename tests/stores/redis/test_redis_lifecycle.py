"""RedisStore's own side of issue 10: the indexes behind list(), namespaces, expiry by the
server's clock (native expiry, retention stamped in Lua), gc, the server-side fork, and the
upgrade of layout 1 keys. Runs on throwaway servers (tests/support/servers.py)."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from statekeep import State, StateExistsError, StateNotFoundError, open_store
from statekeep._core.query import make_query, select
from statekeep._core.records import SavedState, listing_order
from statekeep.testing import entries
from tests.support import servers
from tests.support.servers import RedisServer, unique_name

redis = pytest.importorskip("redis")

from statekeep.stores import RedisStore  # noqa: E402
from statekeep.stores._redis import LAYOUT_VERSION, _layout  # noqa: E402
from statekeep.stores._redis._keys import member  # noqa: E402


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[Any]:
    """A plain client of the test's own (not the store's)."""
    c = redis.Redis.from_url(redis_server.url)
    yield c
    c.close()


@pytest.fixture
def prefix() -> str:
    return unique_name("sk") + ":"


@pytest.fixture
def rs(redis_server: RedisServer, prefix: str) -> Iterator[RedisStore]:
    store = RedisStore(redis_server.url, prefix=prefix)
    yield store
    store.close()


def snap(task: str, updated: datetime, **extra: Any) -> dict[str, Any]:
    """A listable snapshot updated at ``updated``, with ``extra`` keys (agent, labels, ...)."""
    return {
        "task": task,
        "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": updated.isoformat(),
        "turn": 0,
        "stopped_by": None,
        "finished": False,
        **extra,
    }


# How far ahead a test sets an expiry it then waits past: room for the writes and checks
# before it, on a loaded machine (300 ms was not).
MARGIN = 3


def server_now(client: Any) -> datetime:
    secs, micros = client.time()
    return datetime.fromtimestamp(secs, UTC) + timedelta(microseconds=micros)


def wait_until_past(client: Any, when: datetime) -> None:
    """Poll the server's clock until it is past ``when`` (what judges expiry)."""
    while server_now(client) <= when:
        pass


def ns_keys(client: Any, prefix: str) -> list[bytes]:
    return sorted(client.keys(prefix.replace("*", "\\*") + "*"))


# -- listing from the indexes ------------------------------------------------------------------

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def fill_random(store: RedisStore, count: int, seed: int) -> list[SavedState]:
    """``count`` States with few distinct times (many ties) and mixed filters; their rows."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        extra: dict[str, Any] = {
            "agent": rng.choice([None, "planner", "coder"]),
            "parent": rng.choice([None, "p1", "p2"]),
            "labels": {
                k: v
                for k, v in (("env", rng.choice(["prod", "dev"])), ("user", rng.choice("ab")))
                if rng.random() < 0.7
            },
            "finished": rng.random() < 0.3,
            "stopped_by": rng.choice([None, None, "max_turns", "error"]),
        }
        s = snap(f"t{i}", T0 + timedelta(seconds=rng.randrange(8)), **extra)
        sid = f"s{i:03d}-{rng.randrange(100)}"
        store.write(sid, entries(0, 1), s, create=True)
        rows.append(SavedState.from_snapshot(sid, s))
    return listing_order(rows)


QUERIES: list[dict[str, Any]] = [
    {},
    {"agent": "planner"},
    {"parent": "p1"},
    {"labels": {"env": "prod"}},
    {"labels": {"env": "dev", "user": "a"}},
    {"finished": True},
    {"finished": False},
    {"stopped_by": "error"},
    {"status": "running"},
    {"status": "max_turns", "agent": "coder"},
    {"updated_after": T0 + timedelta(seconds=2)},
    {"updated_before": T0 + timedelta(seconds=5), "updated_after": T0},
    {"id_prefix": "s01"},
    {"agent": "nobody"},
]


@pytest.mark.parametrize("limit", [1, 3, 7, None])
def test_every_filter_pages_exactly_like_the_generic_listing(rs: RedisStore, limit: int | None) -> None:
    rows = fill_random(rs, 60, seed=limit or 0)
    for filters in QUERIES:
        query = make_query(limit=limit, **filters)
        pages, after = [], None
        while True:
            page = rs.list(limit=limit, after=after, **filters)
            expected = select(rows, make_query(limit=limit, after=after, **filters))
            assert list(page) == list(expected), filters
            assert page.next == expected.next, filters
            pages.extend(page)
            after = page.next
            if after is None:
                break
        assert pages == [r for r in rows if query.matches(r)], filters


def test_a_filtered_page_walks_the_smallest_index_it_names(prefix: str) -> None:
    """With 1,500 States, 750 labelled half=yes and 3 of agent "rare" (all labelled), a page
    of 2 by both walks the agent's index: 3 members checked against the label's index, 3
    snapshots read (2, and one to know there is more), not 750 or 1,500."""
    server = servers.start_redis()
    try:
        store = RedisStore(server.url, prefix=prefix)
        c = redis.Redis.from_url(server.url)
        try:
            for i in range(1500):
                extra = {
                    "agent": "rare" if i % 500 == 0 else "common",
                    "labels": {"half": "yes"} if i % 2 == 0 else {},
                }
                store.write(f"s{i}", [], snap("t", T0 + timedelta(seconds=i), **extra), create=True)
            c.config_resetstat()
            page = store.list(agent="rare", labels={"half": "yes"}, limit=2)
            stats = c.info("commandstats")
            assert [r.id for r in page] == ["s1000", "s500"] and page.next is not None
            assert stats["cmdstat_hmget"]["calls"] == 3
            assert stats["cmdstat_zscore"]["calls"] == 3
        finally:
            c.close()
            store.close()
    finally:
        server.remove()


def test_deleted_and_rewritten_states_leave_no_stale_index_entries(
    rs: RedisStore, client: Any, prefix: str
) -> None:
    rs.write("a", [], snap("t", T0, agent="x", labels={"k": "1"}, parent="p"), create=True)
    rs.write("a", [], snap("t", T0 + timedelta(1), agent="y", labels={"k": "2"}, parent="p"))
    assert [r.id for r in rs.list(agent="y")] == ["a"]
    assert rs.list(agent="x") == [] and rs.list(labels={"k": "1"}) == []
    assert [r.id for r in rs.list(parent="p")] == ["a"]
    rs.delete("a")
    assert ns_keys(client, prefix) == [prefix.encode() + b"layout"]


def test_an_unlisted_snapshot_warns_on_an_unfiltered_first_page_only(rs: RedisStore) -> None:
    rs.write("good", [], snap("t", T0), create=True)
    rs.write("bad", [], {"task": "no times"}, create=True)
    with pytest.warns(RuntimeWarning, match="'bad'"):
        assert [r.id for r in rs.list()] == ["good"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r.id for r in rs.list(agent="x")] == []


# -- namespaces ---------------------------------------------------------------------------------


def test_namespaces_never_see_each_other(redis_server: RedisServer, prefix: str) -> None:
    a = RedisStore(redis_server.url, prefix=prefix)
    b = RedisStore(redis_server.url + "?namespace=team-b", prefix=prefix)
    try:
        assert b.namespace == "team-b" and "namespace='team-b'" in repr(b) and a != b
        a.write("x", entries(0, 1), snap("in a", T0, expires_at=(T0 - timedelta(1)).isoformat()), create=True)
        b.write("x", entries(0, 2), snap("in b", T0), create=True)
        assert [r.task for r in b.list()] == ["in b"] and a.list() == []
        assert len(b.read("x").entries) == 2
        assert b.gc() == 0 and a.gc() == 1
        assert b.read("x") is not None
        a.memory().put("k", 1)
        b.memory().put("k", 2)
        assert a.memory().get("k").value == 1 and b.memory().get("k").value == 2
        assert a.memory("other").get("k") is None
        assert [r.task for r in b.list()] == ["in b"]  # memory is not listed
    finally:
        a.close()
        b.close()


def test_open_store_takes_the_namespace_from_the_url(redis_server: RedisServer, prefix: str) -> None:
    with (
        open_store(redis_server.url + "?namespace=a", prefix=prefix) as a,
        RedisStore(redis_server.url, prefix=prefix, namespace="a") as same,
    ):
        a.write("x", [], snap("t", T0), create=True)
        assert [r.id for r in same.list()] == ["x"] and a == same


def test_a_namespace_in_the_url_and_the_argument_must_agree(redis_server: RedisServer) -> None:
    with pytest.raises(ValueError, match="differs"):
        RedisStore(redis_server.url + "?namespace=a", namespace="b")
    with pytest.raises(ValueError, match="invalid namespace"):
        RedisStore(redis_server.url, namespace="Bad Name")


def test_memory_uses_the_stores_client(rs: RedisStore) -> None:
    memory = rs.memory("notes")
    memory.put("k", {"v": 1})
    assert rs._state is not None and memory._store._state is rs._state  # type: ignore[attr-defined]
    rs.close()
    with pytest.raises(RuntimeError, match="closed"):
        memory.get("k")


# -- expiry, by the server's clock ----------------------------------------------------------------


def test_an_expired_state_is_absent_everywhere_at_once(rs: RedisStore, client: Any, prefix: str) -> None:
    at = server_now(client) + timedelta(seconds=MARGIN)
    rs.write("e", entries(0, 2), snap("t", T0, labels={"k": "v"}, expires_at=at.isoformat()), create=True)
    rs.write("keep", entries(0, 1), snap("t", T0), create=True)
    assert rs.read("e") is not None and [r.id for r in rs.list()] == ["e", "keep"]
    wait_until_past(client, at)
    assert rs.read("e") is None
    assert [r.id for r in rs.list()] == ["keep"] and rs.list(labels={"k": "v"}) == []
    with pytest.raises(StateNotFoundError):
        rs.write("e", entries(2, 1), None)
    with pytest.raises(StateNotFoundError):
        rs.fork("e")
    # create=True replaces the remains whole: nothing of the old State is left
    rs.write("e", entries(0, 1, fresh=True), snap("new", T0), create=True)
    assert rs.read("e").entries == entries(0, 1, fresh=True)
    assert rs.list(labels={"k": "v"}) == [] and [r.task for r in rs.list(id_prefix="e")] == ["new"]
    assert rs.gc() == 0


def test_native_expiry_is_set_on_every_key_and_refreshed_by_each_write(
    rs: RedisStore, client: Any, prefix: str
) -> None:
    first = server_now(client) + timedelta(hours=1)
    rs.write("a", entries(0, 1), snap("t", T0, expires_at=first.isoformat()), create=True)
    keys = [prefix + "state:a", prefix + "entries:a"]
    want = -(-(first - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1))
    assert [client.pexpiretime(k) for k in keys] == [want, want]
    later = first + timedelta(hours=1)
    rs.write("a", entries(1, 1), snap("t", T0, expires_at=later.isoformat()))
    assert [client.pexpiretime(k) for k in keys] == [want + 3_600_000] * 2
    rs.write("a", entries(2, 1), snap("t", T0))  # no expiry any more
    assert [client.pexpiretime(k) for k in keys] == [-1, -1]


def test_retention_is_stamped_with_the_servers_time(
    redis_server: RedisServer, client: Any, prefix: str
) -> None:
    store = RedisStore(redis_server.url, prefix=prefix, retention=timedelta(minutes=5))
    try:
        before = server_now(client)
        store.write("a", entries(0, 1), snap("t", T0), create=True)
        after = server_now(client)
        stored = orjson.loads(client.hget(prefix + "state:a", "snapshot"))
        expires = datetime.fromisoformat(stored["expires_at"])
        assert before + timedelta(minutes=5) <= expires <= after + timedelta(minutes=5)
        assert stored["expiry"] == "retention" and next(iter(stored)) == "expires_at"
        assert store.list()[0].expires_at == expires
        assert client.pexpiretime(prefix + "entries:a") >= int(expires.timestamp() * 1000)
        # an explicit expiry is kept as given
        store.write("b", [], snap("t", T0, expires_at="2030-01-01T00:00:00+00:00"), create=True)
        assert store.read("b").snapshot["expires_at"] == "2030-01-01T00:00:00+00:00"
        # a State saved again is stamped again, later; its own snapshot never holds the stamp
        state = State("task")
        store.save(state)
        first = store.read(state.id).snapshot["expires_at"]
        state.labels["more"] = "yes"
        store.save(state)
        assert store.read(state.id).snapshot["expires_at"] > first
        assert store.load(state.id).snapshot()["expires_at"] is None
    finally:
        store.close()


def test_a_volatile_policy_is_warned_about_when_retention_is_on() -> None:
    server = servers.start_redis(extra=("--maxmemory-policy", "volatile-lru"))
    try:
        for retention, warned in ((None, False), (timedelta(days=1), True)):
            _layout._checked.clear()  # each server is checked once per process
            store = RedisStore(server.url, prefix=unique_name("sk") + ":", retention=retention)
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    store.list()
            finally:
                store.close()
            said = [str(w.message) for w in caught if "volatile-lru" in str(w.message)]
            assert bool(said) is warned, said
    finally:
        server.remove()


# -- gc ----------------------------------------------------------------------------------------


def test_gc_removes_expired_states_and_their_index_entries(rs: RedisStore, client: Any, prefix: str) -> None:
    at = server_now(client) + timedelta(milliseconds=200)
    for i in range(7):
        rs.write(
            f"e{i}",
            entries(0, 1),
            snap("t", T0, agent="a", labels={"x": "y"}, expires_at=at.isoformat()),
            create=True,
        )
    rs.write("keep", entries(0, 1), snap("t", T0, agent="a"), create=True)
    wait_until_past(client, at)
    assert rs.gc(limit=3) == 3
    assert rs.gc() == 4 and rs.gc() == 0
    p = prefix.encode()
    assert ns_keys(client, prefix) == sorted(
        [
            p + b"layout",
            p + b"state:keep",
            p + b"entries:keep",
            p + b"ix:all",
            p + b"ix:rows",
            p + b"ix:agent:a",
            p + b"ix:status:running",
        ]
    )
    assert client.hkeys(prefix + "ix:rows") == [b"keep"]


GC_WORKER = """
import sys
from statekeep.stores import RedisStore
store = RedisStore(sys.argv[1], prefix=sys.argv[2])
total = 0
while True:  # started once every doomed State has expired: none expires later
    removed = store.gc(limit=5)
    total += removed
    if removed == 0:
        break
print(total)
store.close()
"""


def test_gc_from_several_processes_racing_writers_removes_each_state_once(
    redis_server: RedisServer, rs: RedisStore, client: Any, prefix: str
) -> None:
    """Half the States are extended by a writer while gc runs in three processes: every
    extended State stays, every other one is removed by exactly one gc."""
    at = server_now(client) + timedelta(milliseconds=400)
    count = 120
    for i in range(count):
        rs.write(
            f"s{i}",
            entries(0, 1),
            snap("t", T0, labels={"doomed": "1"}, expires_at=at.isoformat()),
            create=True,
        )
    extended: set[str] = set()

    def writer() -> None:
        for i in range(0, count, 2):
            try:
                rs.write(f"s{i}", entries(1, 1), snap("t", T0, labels={"kept": "1"}))
            except StateNotFoundError:
                continue  # expired first: gc may take it
            extended.add(f"s{i}")

    thread = threading.Thread(target=writer)
    thread.start()
    wait_until_past(client, at)
    procs = [
        subprocess.Popen([sys.executable, "-c", GC_WORKER, redis_server.url, prefix], stdout=subprocess.PIPE)
        for _ in range(3)
    ]
    thread.join()
    removed = [int(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(removed) == count - len(extended)
    assert {r.id for r in rs.iter_states()} == extended
    assert all(rs.read(sid) is not None for sid in extended)
    assert set(client.hkeys(prefix + "ix:rows")) == {sid.encode() for sid in extended}


@pytest.mark.parametrize("keys_gone", [False, True])
def test_a_tree_delete_reaches_live_states_below_an_expired_one(
    rs: RedisStore, client: Any, prefix: str, keys_gone: bool
) -> None:
    """Also when Redis's native expiry has taken the middle State's keys (it does so within
    a millisecond of its expiry, once they are touched; ``keys_gone`` does it at once): the
    parent index, kept until gc, leads on."""
    at = server_now(client) + timedelta(seconds=MARGIN)
    rs.write("root", entries(0, 1), snap("t", T0), create=True)
    rs.write("mid", entries(0, 1), snap("t", T0, parent="root", expires_at=at.isoformat()), create=True)
    rs.write("leaf", entries(0, 1), snap("t", T0, parent="mid"), create=True)
    wait_until_past(client, at)
    if keys_gone:
        client.delete(prefix + "state:mid", prefix + "entries:mid")
    assert [r.id for r in rs.list()] == ["leaf", "root"]  # the middle State is absent
    rs.delete("root", children=True)
    assert rs.list() == [] and rs.read("leaf") is None
    assert ns_keys(client, prefix) == [prefix.encode() + b"layout"]


def test_gc_dry_run_counts_what_gc_removes_by_the_server_clock(
    redis_server: RedisServer, rs: RedisStore, client: Any, prefix: str
) -> None:
    other = RedisStore(redis_server.url, prefix=prefix, namespace="other")
    try:
        at = server_now(client) + timedelta(seconds=MARGIN)
        later = (server_now(client) + timedelta(hours=1)).isoformat()
        for i in range(3):
            rs.write(f"e{i}", entries(0, 1), snap("t", T0, expires_at=at.isoformat()), create=True)
        rs.write("later", entries(0, 1), snap("t", T0, expires_at=later), create=True)
        rs.write("never", entries(0, 1), snap("t", T0), create=True)
        other.write("e0", entries(0, 1), snap("t", T0, expires_at=at.isoformat()), create=True)
        assert rs.gc(dry_run=True) == 0
        wait_until_past(client, at)
        client.delete(prefix + "state:e2", prefix + "entries:e2")  # as native expiry does
        assert rs.gc(dry_run=True) == 3 and other.gc(dry_run=True) == 1
        # a dry run removes nothing: the expired States are still in the indexes, for gc
        assert len(client.hkeys(prefix + "ix:rows")) == 5 and client.zcard(prefix + "ix:expiry") == 4
        assert rs.gc() == 3 and rs.gc(dry_run=True) == 0 and other.gc(dry_run=True) == 1
    finally:
        other.close()


def test_a_snapshot_read_reads_no_entries(rs: RedisStore, client: Any, prefix: str) -> None:
    at = server_now(client) + timedelta(seconds=MARGIN)
    rs.write("a", entries(0, 3), snap("a", T0), create=True)
    rs.write("gone", entries(0, 1), snap("t", T0, expires_at=at.isoformat()), create=True)
    client.config_resetstat()
    assert asyncio.run(rs.aread_snapshot("a")) == snap("a", T0)
    assert "cmdstat_lrange" not in client.info("commandstats")  # the entries are not read
    assert asyncio.run(rs.aread_snapshot("missing")) is None
    assert asyncio.run(rs.aread_snapshot("gone")) is not None
    wait_until_past(client, at)
    assert asyncio.run(rs.aread_snapshot("gone")) is None


# -- fork, on the server ------------------------------------------------------------------------


def test_fork_copies_entries_on_the_server(rs: RedisStore, client: Any, prefix: str) -> None:
    state = State("task", id="src", labels={"a": "b"})
    for i in range(4):
        state.add_user(f"message {i}")
    rs.save(state)
    source = rs.read("src")
    before = client.dump(prefix + "entries:src")
    fork = rs.fork("src", at_seq=2, new_id="f")
    assert fork.forked_from == {"id": "src", "seq": 2}
    assert rs.read("f").entries == source.entries[:3]
    assert client.dump(prefix + "entries:src") == before
    assert {r.id for r in rs.list(labels={"a": "b"})} == {"f", "src"}
    with pytest.raises(StateExistsError):
        rs.fork("src", new_id="f")


async def test_fork_refuses_a_source_that_no_longer_holds_the_entries_read(rs: RedisStore) -> None:
    await rs.awrite("src", entries(0, 3), snap("t", T0), create=True)
    record = await rs.aread("src")
    await rs.adelete("src")
    await rs.awrite("src", entries(0, 3, other=True), snap("t", T0), create=True)
    with pytest.raises(StateNotFoundError, match="'src'"):
        await rs._afork_write("src", record.entries, snap("t", T0), "f", None)
    assert await rs.aread("f") is None
    await rs.adelete("src")
    with pytest.raises(StateNotFoundError):
        await rs._afork_write("src", record.entries, snap("t", T0), "f", None)


# -- layout 1 ---------------------------------------------------------------------------------


def test_layout_1_keys_are_upgraded_on_connect(redis_server: RedisServer, client: Any, prefix: str) -> None:
    """Keys as statekeep wrote them before namespaces: the default namespace, indexed on connect."""
    client.set(prefix + "layout", "1")
    rows = {"a": snap("t", T0, agent="x"), "b": snap("t", T0 + timedelta(1), labels={"k": "v"}), "c": None}
    for sid, s in rows.items():
        client.rpush(prefix + "entries:" + sid, *[orjson.dumps(e) for e in entries(0, 2)])
        client.hset(prefix + "state:" + sid, "next", 2)
        if s is not None:
            client.hset(prefix + "state:" + sid, "snapshot", orjson.dumps(s))
            client.zadd(prefix + "index", {sid: datetime.fromisoformat(s["updated_at"]).timestamp()})
    store = RedisStore(redis_server.url, prefix=prefix, create=False)
    try:
        assert [r.id for r in store.list()] == ["b", "a"]
        assert [r.id for r in store.list(agent="x")] == ["a"]
        assert [r.id for r in store.list(labels={"k": "v"})] == ["b"]
        assert store.read("c").entries == entries(0, 2)
        assert client.get(prefix + "layout") == str(LAYOUT_VERSION).encode()
        assert client.exists(prefix + "index") == 0
        assert client.zrange(prefix + "ix:all", 0, -1) == [member(T0 + timedelta(1), "b"), member(T0, "a")]
    finally:
        store.close()

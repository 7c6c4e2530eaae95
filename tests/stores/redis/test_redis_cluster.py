"""RedisStore on a Redis Cluster beyond the contract (test_redis_cluster_contract.py): where
namespaces' keys live, per-namespace blobs, the URL, ``wait_replicas`` (on one server too),
a master SIGKILLed under 4 writer processes, its replica promoted by the cluster, and a
namespace's slot moved to another master."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statekeep._runtime.bridge import run_sync
from statekeep.testing import entries, snapshot
from tests.support import REPO, servers
from tests.support.servers import RedisCluster, unique_name

pytest.importorskip("redis.asyncio")

from statekeep.stores import RedisStore

SOAK = os.environ.get("STATEKEEP_SOAK") == "1"


def own_cluster() -> RedisCluster:
    try:
        return servers.start_redis_cluster()
    except servers.ServerMissing as exc:
        servers.need(exc)
        raise


def namespaces_on_each_master(cluster: RedisCluster, prefix: str, per_master: int = 1) -> list[str]:
    """Namespace names whose keys (hash tag ``{name}``) fall on each master, ``per_master`` each."""
    found: dict[int, list[str]] = {m.port: [] for m in cluster.masters()}
    n = 0
    while any(len(v) < per_master for v in found.values()):
        name = f"ns{n}"
        n += 1
        port = cluster.node_of_slot(cluster.keyslot(f"{prefix}{{{name}}}:x")).port
        if len(found[port]) < per_master:
            found[port].append(name)
    return [name for names in found.values() for name in names]


def test_namespaces_spread_over_the_masters(redis_cluster: RedisCluster) -> None:
    prefix = unique_name("sk") + ":"
    names = [f"t{i}" for i in range(12)]
    holders = set()
    for name in names:
        store = RedisStore(redis_cluster.url, prefix=prefix, namespace=name)
        try:
            store.write("a", entries(0, 2), snapshot(), create=True)
            store.write("b", entries(0, 1), snapshot(), create=True)
            assert [s.id for s in store.list()] == ["a", "b"] or sorted(s.id for s in store.list()) == [
                "a",
                "b",
            ]
            keys = [store._keys_of.state + b"a", store._keys_of.entries + b"b", store._keys_of.common[0]]
            slots = {redis_cluster.keyslot(k) for k in keys}
            assert len(slots) == 1, f"namespace {name}: its keys are in slots {slots}"
            (slot,) = slots
            node = redis_cluster.node_of_slot(slot)
            held = int(redis_cluster.cli(node, "CLUSTER", "COUNTKEYSINSLOT", str(slot)).strip())
            assert held >= 5  # state and entries of each State, and the indexes
            holders.add(node.port)
            # the ids by SCAN (what `statekeep stats` counts): every master scanned
            assert run_sync(store._state_ids(), "state_ids") == ["a", "b"]
        finally:
            store.close()
    assert len(holders) >= 2, "twelve namespaces all hashed to one master"


def test_the_url_says_cluster_and_names_no_password(redis_cluster: RedisCluster) -> None:
    plain = redis_cluster.url.replace("redis+cluster://", "redis://").split(",")[0] + "/0?cluster=true"
    store = RedisStore(plain, prefix=unique_name("sk") + ":", namespace="x")
    try:
        store.write("a", entries(0, 1), snapshot(), create=True)
        assert store.read("a") is not None
        assert redis_cluster.password is None or redis_cluster.password not in repr(store)
    finally:
        store.close()
    from statekeep import open_store

    opened = open_store(redis_cluster.url + "?namespace=x&wait_replicas=1", prefix=store.prefix)
    try:
        got = opened.read("a")
        assert got is not None and got.entries == entries(0, 1)
    finally:
        opened.close()
    from redis.asyncio.cluster import RedisCluster as Client

    own = RedisStore(
        client=Client(host="127.0.0.1", port=redis_cluster.nodes[0].port, password=redis_cluster.password),
        prefix=store.prefix,
        namespace="x",
    )
    try:
        got = own.read("a")  # the same keys, through a client of the user's
        assert got is not None and got.entries == entries(0, 1)
    finally:
        own.close()
    with pytest.raises(ValueError, match="database 0 only"):
        RedisStore(redis_cluster.url.replace("/0", "/3"))
    with pytest.raises(ValueError, match="cluster=true or cluster=false"):
        RedisStore(plain.replace("cluster=true", "cluster=maybe"))
    with pytest.raises(ValueError, match="wait_replicas"):
        RedisStore(redis_cluster.url, wait_replicas=-1)


def test_blobs_are_each_namespaces_own_on_a_cluster(redis_cluster: RedisCluster) -> None:
    prefix = unique_name("sk") + ":"
    big = "v" * 40_000
    a = RedisStore(redis_cluster.url, prefix=prefix, namespace="one")
    b = RedisStore(redis_cluster.url, prefix=prefix, namespace="two")
    try:
        a.write("x", [{"seq": 0, "kind": "note", "v": big}], snapshot(), create=True)
        b.write("x", [{"seq": 0, "kind": "note", "v": big}], snapshot(), create=True)
        for store in (a, b):
            got = store.read("x")
            assert got is not None and got.entries[0]["v"] == big
        a.delete("x")
        # a's copy was a's alone: gc removes it though b holds the same bytes (one server
        # would keep the one blob both namespaces share).
        assert a.gc().blobs == 1
        got = b.read("x")
        assert got is not None and got.entries[0]["v"] == big  # b's blob is b's own
    finally:
        a.close()
        b.close()


# -- wait_replicas ---------------------------------------------------------------------------


def test_wait_replicas_without_enough_replicas_reports_the_write_failed(
    redis_server: servers.RedisServer,
) -> None:
    store = RedisStore(redis_server.url, prefix=unique_name("sk") + ":", wait_replicas=1, wait_timeout=0.2)
    try:
        with pytest.raises(ConnectionError, match=r"may or may not survive a failover.*again is safe"):
            store.write("a", entries(0, 1), snapshot(), create=True)
        # applied on the master (so a resend is a no-op there), never reported durable
        plain = RedisStore(redis_server.url, prefix=store.prefix)
        try:
            assert plain.read("a") is not None
        finally:
            plain.close()
    finally:
        store.close()


def test_wait_replicas_on_one_server_with_a_replica() -> None:
    try:
        primary = servers.start_redis()
        replica = servers.start_redis(
            extra=("--replicaof", "127.0.0.1", str(primary.port), "--masterauth", servers.REDIS_PASSWORD)
        )
    except servers.ServerMissing as exc:
        servers.need(exc)
        raise
    url = primary.url + "?wait_replicas=1&wait_timeout=30"
    store = RedisStore(url, prefix="sk:")
    try:
        store.write("a", entries(0, 3), snapshot(), create=True)
        store.write("a", entries(3, 2), snapshot(turn=1))
        store.write("a", entries(3, 2), snapshot(turn=1))  # a resend: nothing new, still waited for
    finally:
        store.close()
    primary.kill()  # acknowledged by the replica: it has every entry
    on_replica = RedisStore(replica.url, prefix="sk:", create=False)
    try:
        got = on_replica.read("a")
        assert got is not None and [e["seq"] for e in got.entries] == list(range(5))
    finally:
        on_replica.close()


# -- a master killed under load ---------------------------------------------------------------


def _acked(ledger: Path) -> list[tuple[str, str, int]]:
    if not ledger.exists():
        return []
    rows = []
    for line in ledger.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            rows.append((parts[0], parts[1], int(parts[2])))
    return rows


def test_a_master_killed_under_four_writers_loses_no_acknowledged_write(tmp_path: Path) -> None:
    cluster = own_cluster()
    try:
        prefix = "sk:"
        names = namespaces_on_each_master(cluster, prefix)
        writes = 200 if SOAK else 40
        ledgers = [tmp_path / f"w{n}.ledger" for n in range(4)]
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.support.children.cluster_writer",
                    "--url",
                    cluster.url,
                    "--prefix",
                    prefix,
                    "--name",
                    f"w{n}",
                    "--writes",
                    str(writes),
                    "--ledger",
                    str(ledgers[n]),
                    "--wait-replicas",
                    "1",
                    *names,
                ],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
            )
            for n in range(4)
        ]
        victim = cluster.node_of_slot(cluster.keyslot(f"{prefix}{{{names[0]}}}:x"))
        heir = cluster.replica_of(victim)
        deadline = time.monotonic() + 120
        while min(len(_acked(ledger)) for ledger in ledgers) < 3 * writes // 4:  # a quarter in
            assert all(p.poll() is None for p in procs), "a writer ended before the kill"
            assert time.monotonic() < deadline, "the writers made no progress"
            time.sleep(0.02)
        victim.kill()  # SIGKILL, mid-load
        cluster.wait_master(heir)  # the cluster promotes its replica after cluster-node-timeout
        victim.start()  # back, as the new master's replica: wait_replicas=1 can be met again
        cluster.wait_ok()
        cluster.wait_replicas(1)
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, f"writer failed:\n{err.decode(errors='replace')[-3000:]}"
            results.append(json.loads(out.decode().strip().splitlines()[-1]))
        assert sum(r["acked"] for r in results) == 4 * writes * len(names)
        for name in names:
            store = RedisStore(cluster.url, prefix=prefix, namespace=name)
            try:
                for n in range(4):
                    record = store.read(f"w{n}")
                    assert record is not None
                    assert [e["seq"] for e in record.entries] == list(range(writes)), (name, n)  # dense
                    assert [e["i"] for e in record.entries] == list(range(writes))
                    acked = {seq for ns, sid, seq in _acked(ledgers[n]) if ns == name}
                    assert acked <= {e["seq"] for e in record.entries}
            finally:
                store.close()
    finally:
        cluster.remove()


def test_failover_timeout_resends_a_write_whose_connection_was_lost() -> None:
    try:
        server = servers.start_redis()
    except servers.ServerMissing as exc:
        servers.need(exc)
        raise
    patient = RedisStore(server.url + "?failover_timeout=30", prefix="sk:")
    hasty = RedisStore(server.url, prefix="sk:")  # failover_timeout 0: raises at once, as before
    try:
        patient.write("a", entries(0, 1), snapshot(), create=True)
        hasty.write("b", entries(0, 1), snapshot(), create=True)
        server.restart()  # SIGKILL, then up again: both stores' connections are dead
        patient.write("a", entries(1, 1), snapshot(turn=1))  # resent on a new connection
        with pytest.raises(ConnectionError):
            hasty.write("b", entries(1, 1), snapshot(turn=1))
        got = patient.read("a")
        assert got is not None and [e["seq"] for e in got.entries] == [0, 1]
    finally:
        patient.close()
        hasty.close()


def test_a_namespace_moved_to_another_master_is_followed_and_nothing_half_written() -> None:
    cluster = own_cluster()
    try:
        slot = cluster.keyslot("m:{moving}:x")
        source = cluster.node_of_slot(slot)
        target = next(m for m in cluster.masters() if m is not source)
        store = RedisStore(cluster.url, prefix="m:", namespace="moving", wait_replicas=1, failover_timeout=0)
        try:
            store.write("a", entries(0, 1), snapshot(), create=True)
            cluster.cli(target, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", cluster.node_id(source))
            cluster.cli(source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", cluster.node_id(target))
            # half moved: Redis refuses the script (TRYAGAIN), so nothing of it is written
            with pytest.raises(ConnectionError, match=r"being moved.*did not run"):
                store.write("a", entries(1, 1), snapshot(turn=1))
            got = store.read("a")  # reads go on
            assert got is not None and got.entries == entries(0, 1)
            keys = cluster.cli(source, "CLUSTER", "GETKEYSINSLOT", str(slot), "100").split()
            auth = ["AUTH", cluster.password] if cluster.password else []
            cluster.cli(
                source, "MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", *auth, "KEYS", *keys
            )
            for node in cluster.masters():
                cluster.cli(node, "CLUSTER", "SETSLOT", str(slot), "NODE", cluster.node_id(target))
            store.write("a", entries(1, 2), snapshot(turn=2))  # MOVED: followed to the new master
            got = store.read("a")
            assert got is not None and got.entries == entries(0, 3)
            assert int(cluster.cli(target, "CLUSTER", "COUNTKEYSINSLOT", str(slot)).strip()) >= 3
        finally:
            store.close()
    finally:
        cluster.remove()

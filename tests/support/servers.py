"""Throwaway PostgreSQL and Redis servers for the tests and the benchmarks.

Each server runs from a fresh temporary folder on a free loopback port and is gone when
stopped. As plain functions (:func:`start_postgres`, :func:`start_redis`) they serve the
benchmarks and the tests that kill and restart a server of their own; the shared servers
(:func:`shared_postgres`, :func:`shared_redis`, and the session fixtures
``postgres_server`` and ``redis_server``) start on first use and stop at exit.

A missing server binary skips the tests that need it, saying what to install; under CI
(``CI=true``) it fails them instead, so that a CI machine without the servers cannot pass.

The server processes themselves: :mod:`tests.support.serverprocs`; test bodies that several
stores' tests share: :mod:`tests.support.server_checks`. Both are reached from here too.
"""

from __future__ import annotations

import atexit
import os
import pwd
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from tests.support import REPO as REPO
from tests.support.server_checks import fail_without_secret as fail_without_secret
from tests.support.server_checks import run_writers as run_writers
from tests.support.server_checks import stream_through_outage as stream_through_outage
from tests.support.serverprocs import PG_PASSWORD, PG_VERSION, REDIS_PASSWORD, ServerMissing, free_port, need
from tests.support.serverprocs import START_TIMEOUT as START_TIMEOUT
from tests.support.serverprocs import PostgresServer as PostgresServer
from tests.support.serverprocs import RedisServer as RedisServer
from tests.support.serverprocs import Server as Server
from tests.support.serverprocs import postgres_bindir as postgres_bindir
from tests.support.serverprocs import redis_binary as redis_binary

T = TypeVar("T")
S = TypeVar("S", bound=Server)


def _scratch(prefix: str) -> Path:
    # Not under pytest's tmp folders: those are 0700 root, which the postgres user cannot enter.
    return Path(tempfile.mkdtemp(prefix=prefix))


def _postgres_bindir() -> Path:
    """PostgreSQL's programs; ServerMissing if they are not installed, or if running as root
    without the 'postgres' user to run them as."""
    bindir = postgres_bindir()
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise ServerMissing(
                "running as root, PostgreSQL needs the 'postgres' user, which the postgresql "
                f"packages create: apt-get install postgresql-{PG_VERSION}"
            ) from None
    return bindir


def _launch(server: S, init: bool = True) -> S:
    """``server`` made (``init``) and started, stopped and removed at exit; removed at once if
    it does not start."""
    try:
        if init:
            server.init()  # type: ignore[attr-defined]
        server.start()
    except BaseException:
        server.remove()
        raise
    _started.append(server)
    return server


def start_postgres(password: str = PG_PASSWORD) -> PostgresServer:
    """Start a new PostgreSQL server; raises ServerMissing if it is not installed."""
    bindir = _postgres_bindir()
    root = _scratch("statekeep-pg-")
    os.chmod(root, 0o700)
    return _launch(PostgresServer(root, free_port(), bindir, password))


def start_redis(password: str | None = REDIS_PASSWORD, extra: tuple[str, ...] = ()) -> RedisServer:
    """Start a new Redis server (AOF with fsync always unless ``extra`` says otherwise)."""
    redis_binary()
    return _launch(RedisServer(_scratch("statekeep-redis-"), free_port(), password, extra), init=False)


_started: list[Server] = []
_shared: dict[str, Any] = {}  # kind -> the shared server, or the ServerMissing it met


def _shared_of(kind: str, start: Callable[[], T]) -> T:
    """The shared server of ``kind``, started by ``start`` on first use; skips (fails under
    CI) if it is not installed, every time it is asked for."""
    got = _shared.get(kind)
    if got is None:
        try:
            got = start()
        except ServerMissing as exc:
            got = exc
        _shared[kind] = got
    if isinstance(got, ServerMissing):
        need(got)
    return cast(T, got)


def _shared_server(kind: str) -> Server:
    return _shared_of(kind, start_postgres if kind == "postgres" else start_redis)


def shared_postgres() -> PostgresServer:
    """The PostgreSQL server the tests share (started on first use); skips if not installed."""
    server = _shared_server("postgres")
    assert isinstance(server, PostgresServer)
    return server


def shared_redis() -> RedisServer:
    """The Redis server the tests share (started on first use); skips if not installed."""
    server = _shared_server("redis")
    assert isinstance(server, RedisServer)
    return server


_started_by = os.getpid()


@atexit.register
def stop_all() -> None:
    """Stop and remove every server this process started (a forked child leaves them be)."""
    if os.getpid() != _started_by:
        return
    while _started:
        _started.pop().remove()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    yield shared_postgres()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    yield shared_redis()


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def postgres_store(tmp_path: Any = None, **options: Any) -> Any:
    """A PostgresStore on the shared server, in a schema of its own."""
    from statekeep.stores import PostgresStore

    options.setdefault("schema", unique_name("sk"))
    return PostgresStore(shared_postgres().dsn, **options)


def redis_store(tmp_path: Any = None, **options: Any) -> Any:
    """A RedisStore on the shared server, under a key prefix of its own."""
    from statekeep.stores import RedisStore

    options.setdefault("prefix", unique_name("sk") + ":")
    return RedisStore(shared_redis().url, **options)


# -- Postgres failover: a primary and a hot standby (issue 27) --------------------------

from tests.support.serverprocs import ReplicatedPostgres as ReplicatedPostgres  # noqa: E402


def start_postgres_pair(sync: bool = True) -> tuple[ReplicatedPostgres, ReplicatedPostgres]:
    """Start a PostgreSQL primary and a hot standby of it (``pg_basebackup -R``), the standby
    synchronous (``synchronous_standby_names='*'``, ``synchronous_commit=on``: a commit
    returns once the standby has flushed it) or asynchronous. Kill the primary with
    ``.kill()`` and promote the standby with ``.promote()``; both are removed at exit.
    Raises ServerMissing if PostgreSQL is not installed."""
    bindir = _postgres_bindir()
    settings = ("synchronous_standby_names=*",) if sync else ()
    primary = start_postgres_with(settings)
    standby = _replicated(bindir, ())  # it never waits for a standby of its own once promoted
    _started.append(standby)
    try:
        standby.base_backup(primary)
        standby.start()
        primary.wait_for_standby(sync)
    except BaseException:
        standby.remove()
        raise
    return primary, standby


def start_postgres_with(settings: tuple[str, ...]) -> ReplicatedPostgres:
    """Start a new PostgreSQL server run with ``settings`` (``name=value``, as ``-c`` options;
    change ``.settings`` and restart to run it with others)."""
    return _launch(_replicated(postgres_bindir(), settings))


def _replicated(bindir: Path, settings: tuple[str, ...]) -> ReplicatedPostgres:
    root = _scratch("statekeep-pgha-")
    os.chmod(root, 0o700)
    return ReplicatedPostgres(root, free_port(), bindir, PG_PASSWORD, settings)


def pair_dsn(primary: PostgresServer, standby: PostgresServer, query: str = "") -> str:
    """A multi-host DSN naming ``primary`` then ``standby`` (libpq's ``h1:p1,h2:p2`` form)."""
    hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
    return f"postgresql://postgres:{primary.password}@{hosts}/postgres{query}"


# -- PgBouncer (issue 27) -------------------------------------------------------------------------

from tests.support.serverprocs import PgBouncerServer as PgBouncerServer  # noqa: E402
from tests.support.serverprocs import pgbouncer_binary as pgbouncer_binary  # noqa: E402

#: Server connections the shared PgBouncer keeps per database and user: fewer than the client
#: connections its tests open (several stores, each a pool of up to 10, and child processes).
PGBOUNCER_POOL_SIZE = 3


def start_pgbouncer(
    postgres: PostgresServer, pool_size: int = PGBOUNCER_POOL_SIZE, pool_mode: str = "transaction"
) -> PgBouncerServer:
    """Start a PgBouncer in front of ``postgres`` (``pool_mode`` transaction, at most
    ``pool_size`` server connections); raises ServerMissing if pgbouncer is not installed."""
    pgbouncer_binary()
    return _launch(
        PgBouncerServer(_scratch("statekeep-pgbouncer-"), free_port(), postgres, pool_size, pool_mode)
    )


def shared_pgbouncer() -> PgBouncerServer:
    """The PgBouncer (transaction mode, a pool of PGBOUNCER_POOL_SIZE) in front of the shared
    PostgreSQL server (started on first use); skips if either is not installed."""
    return _shared_of("pgbouncer", lambda: start_pgbouncer(shared_postgres()))


@pytest.fixture(scope="session")
def pgbouncer_server() -> Iterator[PgBouncerServer]:
    yield shared_pgbouncer()


def pgbouncer_store(tmp_path: Any = None, **options: Any) -> Any:
    """A PostgresStore through the shared PgBouncer (``pooler="transaction"``), in a schema of its own."""
    from statekeep.stores import PostgresStore

    options.setdefault("schema", unique_name("sk"))
    options.setdefault("pooler", "transaction")
    return PostgresStore(shared_pgbouncer().dsn, **options)


# -- Redis Cluster (issue 27) ---------------------------------------------------------------


class RedisCluster:
    """A Redis Cluster of throwaway nodes on loopback (see :func:`start_redis_cluster`)."""

    def __init__(self, nodes: list[RedisServer], password: str | None) -> None:
        self.nodes = nodes
        self.password = password

    @property
    def url(self) -> str:
        """``redis+cluster://`` with every node as a seed."""
        auth = f":{self.password}@" if self.password else ""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"redis+cluster://{auth}{hosts}/0"

    def cli(self, node: RedisServer, *args: str) -> str:
        from tests.support.serverprocs import redis_cli

        return redis_cli(node.port, self.password, *args)

    def node_id(self, node: RedisServer) -> str:
        return self.cli(node, "CLUSTER", "MYID").strip()

    def role(self, node: RedisServer) -> str:
        """``master`` or ``slave`` (as ``ROLE`` says), "" if it does not answer."""
        try:
            return self.cli(node, "ROLE").split("\n", 1)[0].strip()
        except Exception:
            return ""

    def live(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def masters(self) -> list[RedisServer]:
        return [n for n in self.live() if self.role(n) == "master"]

    def node_of_slot(self, slot: int) -> RedisServer:
        """The live master serving ``slot`` (by ``CLUSTER SHARDS`` of a live node)."""
        import orjson

        for node in self.live():
            try:
                out = self.cli(node, "--json", "CLUSTER", "SLOTS")
            except Exception:
                continue
            for start, end, master, *_ in orjson.loads(out):
                if start <= slot <= end:
                    port = int(master[1])
                    return next(n for n in self.nodes if n.port == port)
        raise RuntimeError(f"no live node serves slot {slot}")

    def keyslot(self, key: str | bytes) -> int:
        text = key.decode() if isinstance(key, bytes) else key
        return int(self.cli(self.live()[0], "CLUSTER", "KEYSLOT", text).strip())

    def wait_ok(self, timeout: float = START_TIMEOUT) -> None:
        """Poll until every live node says ``cluster_state:ok`` and every slot is served by
        a live master (after a start or a failover)."""
        import time

        from tests.support.serverprocs import cluster_info

        deadline = time.monotonic() + timeout
        while True:
            infos = [cluster_info(n.port, self.password) for n in self.live()]
            if all(i.get("cluster_state") == "ok" and i.get("cluster_slots_ok") == "16384" for i in infos):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Redis Cluster did not become ok within {timeout:.0f} s: {infos}")
            time.sleep(0.05)

    def wait_master(self, node: RedisServer, timeout: float = START_TIMEOUT) -> None:
        """Poll until ``node`` is a master (a replica promoted by the cluster)."""
        import time

        deadline = time.monotonic() + timeout
        while self.role(node) != "master":
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {node.port} was not promoted within {timeout:.0f} s")
            time.sleep(0.05)

    def wait_replicas(self, replicas: int, timeout: float = START_TIMEOUT) -> None:
        """Poll until every live master has ``replicas`` replicas connected, in sync (its ``INFO
        replication``), and knows them in ``CLUSTER NODES``."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            masters = self.masters()
            if masters and all(self._synced(m) >= replicas for m in masters):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the masters did not get {replicas} replica(s) each within {timeout:.0f} s"
                )
            time.sleep(0.05)

    def _synced(self, master: RedisServer) -> int:
        try:
            info = self.cli(master, "INFO", "replication")
            nodes = self.cli(master, "CLUSTER", "NODES")
            me = self.node_id(master)
        except Exception:
            return 0
        online = sum(1 for ln in info.splitlines() if ln.startswith("slave") and "state=online" in ln)
        known = sum(1 for ln in nodes.splitlines() if len(ln.split()) > 3 and ln.split()[3] == me)
        return min(online, known)

    def replica_of(self, master: RedisServer) -> RedisServer:
        """A live replica of ``master`` (by ``CLUSTER NODES``)."""
        master_id = self.node_id(master)
        for line in self.cli(master, "CLUSTER", "NODES").splitlines():
            parts = line.split()
            if len(parts) > 3 and "slave" in parts[2] and "fail" not in parts[2] and parts[3] == master_id:
                port = int(parts[1].split("@")[0].rsplit(":", 1)[1])
                node = next(n for n in self.nodes if n.port == port)
                if node in self.live():
                    return node
        raise RuntimeError(f"master {master.port} has no live replica")

    def remove(self) -> None:
        for node in self.nodes:
            node.remove()


def start_redis_cluster(
    masters: int = 3, replicas: int = 1, password: str | None = REDIS_PASSWORD, node_timeout_ms: int = 1000
) -> RedisCluster:
    """Start a Redis Cluster of ``masters`` shards with ``replicas`` each (AOF fsync always,
    the password for clients and replicas), joined by ``redis-cli --cluster create``; returns
    once every node says ``cluster_state:ok``. Raises ServerMissing if Redis is not installed."""
    from tests.support.serverprocs import cluster_node_args, redis_cli, redis_cli_binary

    redis_binary()
    redis_cli_binary()
    extra = cluster_node_args(password, node_timeout_ms)
    nodes: list[RedisServer] = []
    cluster = RedisCluster(nodes, password)
    try:
        for _ in range(masters * (1 + replicas)):
            bus = ("--cluster-port", str(free_port()))  # not port + 10000, which may be above 65535
            node = RedisServer(_scratch("statekeep-rcluster-"), free_port(), password, (*extra, *bus))
            nodes.append(node)
            node.start()
        hosts = [f"127.0.0.1:{node.port}" for node in nodes]
        redis_cli(
            nodes[0].port, password, "--cluster", "create", *hosts,
            "--cluster-replicas", str(replicas), "--cluster-yes",
        )  # fmt: skip
        cluster.wait_ok()
        cluster.wait_replicas(replicas)
    except BaseException:
        cluster.remove()
        raise
    _started.extend(nodes)
    return cluster


def shared_redis_cluster() -> RedisCluster:
    """The Redis Cluster the tests share (3 masters, a replica each; started on first use);
    skips if Redis is not installed (fails under CI=true)."""
    return _shared_of("redis_cluster", start_redis_cluster)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    yield shared_redis_cluster()


def redis_cluster_store(tmp_path: Any = None, **options: Any) -> Any:
    """A RedisStore on the shared cluster, under a key prefix of its own."""
    from statekeep.stores import RedisStore

    options.setdefault("prefix", unique_name("sk") + ":")
    return RedisStore(shared_redis_cluster().url, **options)

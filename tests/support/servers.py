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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def _scratch(prefix: str) -> Path:
    # Not under pytest's tmp folders: those are 0700 root, which the postgres user cannot enter.
    return Path(tempfile.mkdtemp(prefix=prefix))


def start_postgres(password: str = PG_PASSWORD) -> PostgresServer:
    """Start a new PostgreSQL server; raises ServerMissing if it is not installed."""
    bindir = postgres_bindir()
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise ServerMissing(
                "running as root, PostgreSQL needs the 'postgres' user, which the postgresql "
                f"packages create: apt-get install postgresql-{PG_VERSION}"
            ) from None
    root = _scratch("statekeep-pg-")
    os.chmod(root, 0o700)
    server = PostgresServer(root, free_port(), bindir, password)
    try:
        server.init()
        server.start()
    except BaseException:
        server.remove()
        raise
    _started.append(server)
    return server


def start_redis(password: str | None = REDIS_PASSWORD, extra: tuple[str, ...] = ()) -> RedisServer:
    """Start a new Redis server (AOF with fsync always unless ``extra`` says otherwise)."""
    redis_binary()
    server = RedisServer(_scratch("statekeep-redis-"), free_port(), password, extra)
    try:
        server.start()
    except BaseException:
        server.remove()
        raise
    _started.append(server)
    return server


_started: list[Server] = []
_shared: dict[str, Server | ServerMissing] = {}


def _shared_server(kind: str) -> Server:
    got = _shared.get(kind)
    if got is None:
        try:
            got = start_postgres() if kind == "postgres" else start_redis()
        except ServerMissing as exc:
            got = exc
        _shared[kind] = got
    if isinstance(got, ServerMissing):
        need(got)
    assert isinstance(got, Server)
    return got


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
    bindir = postgres_bindir()
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise ServerMissing(
                f"running as root, PostgreSQL needs the 'postgres' user: apt-get install postgresql-{PG_VERSION}"
            ) from None
    settings = ("synchronous_standby_names=*",) if sync else ()
    primary = start_postgres_with(settings)
    standby = _replicated(bindir, ())  # it never waits for a standby of its own once promoted
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
    server = _replicated(postgres_bindir(), settings)
    try:
        server.init()
        server.start()
    except BaseException:
        server.remove()
        raise
    return server


def _replicated(bindir: Path, settings: tuple[str, ...]) -> ReplicatedPostgres:
    root = _scratch("statekeep-pgha-")
    os.chmod(root, 0o700)
    server = ReplicatedPostgres(root, free_port(), bindir, PG_PASSWORD, settings)
    _started.append(server)
    return server


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
    server = PgBouncerServer(_scratch("statekeep-pgbouncer-"), free_port(), postgres, pool_size, pool_mode)
    try:
        server.init()
        server.start()
    except BaseException:
        server.remove()
        raise
    _started.append(server)
    return server


def shared_pgbouncer() -> PgBouncerServer:
    """The PgBouncer (transaction mode, a pool of PGBOUNCER_POOL_SIZE) in front of the shared
    PostgreSQL server (started on first use); skips if either is not installed."""
    got = _shared.get("pgbouncer")
    if got is None:
        postgres = shared_postgres()
        try:
            got = start_pgbouncer(postgres)
        except ServerMissing as exc:
            got = exc
        _shared["pgbouncer"] = got
    if isinstance(got, ServerMissing):
        need(got)
    assert isinstance(got, PgBouncerServer)
    return got


@pytest.fixture(scope="session")
def pgbouncer_server() -> Iterator[PgBouncerServer]:
    yield shared_pgbouncer()


def pgbouncer_store(tmp_path: Any = None, **options: Any) -> Any:
    """A PostgresStore through the shared PgBouncer (``pooler="transaction"``), in a schema of its own."""
    from statekeep.stores import PostgresStore

    options.setdefault("schema", unique_name("sk"))
    options.setdefault("pooler", "transaction")
    return PostgresStore(shared_pgbouncer().dsn, **options)

"""RedisStore's connection: the redis-py client of each process with its scripts, making
and closing it, where the server is, and sending the write script pipelined."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from ..._core import passwords as redaction
from ..._runtime.bridge import Owner
from .._server import ServerLocal
from .._urlquery import check_names, query_of, take_ours
from . import _cluster
from ._blob_lua import GC_BLOBS
from ._lease_lua import ACQUIRE, RELEASE, RENEW, RESEAL
from ._lua import COUNT_EXPIRED, DELETE, FORK, GC, SELECT
from ._write_lua import WRITE, WRITE_KEYS

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

#: Where a Redis server is: (host or socket path, port or None, database).
ServerKey = tuple[Any, ...]
#: One call of the write script: its 7 keys, then its arguments.
ScriptCall = tuple[bytes | str, ...]


class ClientLocal(ServerLocal["Redis"]):
    """The client, its scripts and the write queue of a RedisStore in one process."""

    def __init__(self, own: Owner) -> None:
        super().__init__(own)
        self.write_script: AsyncScript | None = None
        self.select_script: AsyncScript | None = None
        self.delete_script: AsyncScript | None = None
        self.gc_script: AsyncScript | None = None
        self.fork_script: AsyncScript | None = None
        self.count_expired_script: AsyncScript | None = None
        self.acquire_script: AsyncScript | None = None
        self.renew_script: AsyncScript | None = None
        self.release_script: AsyncScript | None = None
        self.reseal_script: AsyncScript | None = None
        self.gc_blobs_script: AsyncScript | None = None
        #: The server's refusal of one command (redis-py's ResponseError): a reply, not a lost connection.
        self.refused: type[Exception] = Exception

    @property
    def client(self) -> Redis:
        """The redis-py client (opened by the time an operation gets this)."""
        assert self.conn is not None
        return self.conn

    def register(self, client: Redis) -> None:
        """Make the scripts ready to run on ``client``."""
        from redis.exceptions import ResponseError

        self.refused = ResponseError
        self.write_script = client.register_script(WRITE)
        self.select_script = client.register_script(SELECT)
        self.delete_script = client.register_script(DELETE)
        self.gc_script = client.register_script(GC)
        self.fork_script = client.register_script(FORK)
        self.count_expired_script = client.register_script(COUNT_EXPIRED)
        self.acquire_script = client.register_script(ACQUIRE)
        self.renew_script = client.register_script(RENEW)
        self.release_script = client.register_script(RELEASE)
        self.reseal_script = client.register_script(RESEAL)
        self.gc_blobs_script = client.register_script(GC_BLOBS)


def make_client(aioredis: ModuleType, url: str) -> Redis:
    """A client for ``url`` that does not retry commands by itself (errors surface at once;
    it reconnects on the next call)."""
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    client: Redis = aioredis.Redis.from_url(url, retry=Retry(NoBackoff(), 0))
    return client


async def close_client(client: Redis) -> None:
    """Close ``client``, waiting at most 5 seconds."""
    close = getattr(client, "aclose", None) or client.close  # aclose() since redis-py 5.0.1
    try:
        await asyncio.wait_for(close(), 5.0)
    except Exception:
        pass


def lost(aioredis: ModuleType, cluster: bool = False) -> tuple[type[BaseException], ...]:
    """The errors that mean the connection to the server was lost or refused (on a Redis
    Cluster also: no node could tell the slot map, or a slot has no master yet)."""
    if cluster:
        from redis.exceptions import (
            ClusterDownError,
            ClusterError,
            RedisClusterException,
            SlotNotCoveredError,
        )

        return (OSError, aioredis.ConnectionError, aioredis.TimeoutError, ClusterError, RedisClusterException,
                ClusterDownError, SlotNotCoveredError)  # fmt: skip
    return (OSError, aioredis.ConnectionError, aioredis.TimeoutError)


def refusal(errors: ModuleType, exc: BaseException, db: object) -> str | None:
    """What the server refused, and what to check, for an error with which it turned this
    client away at connect (redis-py's ``errors``; see ``ServerStore._refusal``)."""
    text = str(exc)
    if isinstance(exc, errors.AuthenticationError) or text.startswith(("NOAUTH", "WRONGPASS")):
        return "refused the password (or user name) the store URL gives, or needs one; check them"
    if isinstance(exc, errors.ResponseError) and "DB index is out of range" in text:
        return (
            f"has no database {db}; check the number at the end of the store URL (a server has "
            "16, 0 to 15, unless its 'databases' setting says more)"
        )
    return None


def server_key(url: str, client: Redis | None, cluster: bool = False) -> ServerKey:
    """Where the server of ``url`` (or of the user's ``client``) is, without the password."""
    if cluster and client is not None:
        seeds = getattr(client, "startup_nodes", None) or []
        names = sorted(getattr(node, "name", str(node)) for node in seeds)
        return (",".join(names) or f"client {id(client)}", "cluster", 0)
    if cluster:
        return _cluster.where(url)
    if client is not None:
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        return (kwargs.get("path") or kwargs.get("host"), kwargs.get("port"), kwargs.get("db", 0))
    parts = urlsplit(redaction.split_userinfo(url)[1])  # a password may hold '/', '?', '#'
    query = parse_qs(parts.query)
    if parts.scheme == "unix":
        return (parts.path, None, int(query.get("db", ["0"])[0] or 0))
    db = parts.path.lstrip("/") or query.get("db", ["0"])[0] or "0"
    try:
        port = parts.port or 6379
    except ValueError:
        port = None
    return ((parts.hostname or "localhost"), port, int(db) if db.isdigit() else db)


def where(server: ServerKey) -> str:
    """The server, as messages name it: ``host:port/db``, ``path (db N)`` for a socket, or
    ``cluster host:port,...``."""
    host, port, db = server
    if port == "cluster":
        return f"cluster {host}"
    return f"{host}:{port}/{db}" if port is not None else f"{host} (db {db})"


async def run_scripts(
    local: ClientLocal,
    calls: Sequence[ScriptCall],
    no_script: type[Exception],
    wait: tuple[int, int] | None = None,
    cluster: bool = False,
) -> list[Any]:
    """EVALSHA the write script once per call, pipelined. Errors of single calls come back
    in their place. Calls the server refused with NOSCRIPT (``no_script``: it lost its
    scripts in a restart) did not run: load the script and send those again. ``wait``
    (replicas, timeout in ms): ``WAIT`` on the same connection after them (see ``._cluster``);
    ``cluster``: per node, on a Redis Cluster."""
    if cluster:
        assert local.write_script is not None
        return await _cluster.run_scripts(local.client, local.write_script.sha, calls, wait)
    replies = await _evalsha(local, calls, wait)
    again = [i for i, reply in enumerate(replies) if isinstance(reply, no_script)]
    if again:
        await local.client.script_load(WRITE)
        for i, reply in zip(again, await _evalsha(local, [calls[i] for i in again], wait), strict=True):
            replies[i] = reply
    return replies


async def _evalsha(
    local: ClientLocal, calls: Sequence[ScriptCall], wait: tuple[int, int] | None
) -> list[Any]:
    assert local.write_script is not None
    sha = local.write_script.sha
    if wait is not None:  # one connection: the writes, then WAIT for them
        async with local.client.pipeline(transaction=False) as pipe:
            for call in calls:
                pipe.evalsha(sha, WRITE_KEYS, *call)
            pipe.set(_cluster.touch_key(calls[0]), "1")
            pipe.execute_command("WAIT", wait[0], wait[1])
            *replies, touched, acked = await pipe.execute(raise_on_error=False)
        return _cluster.waited(replies, _cluster.acked_after(touched, acked), wait)
    if len(calls) == 1:  # alone: one command, without a pipeline's own machinery
        try:
            return [await local.client.evalsha(sha, WRITE_KEYS, *calls[0])]
        except local.refused as exc:
            return [exc]
    async with local.client.pipeline(transaction=False) as pipe:
        for call in calls:
            pipe.evalsha(sha, WRITE_KEYS, *call)
        return list(await pipe.execute(raise_on_error=False))


#: The parameters of redis-py's a refusal names first (it takes many more).
COMMON_PARAMETERS = (
    "db",
    "client_name",
    "socket_timeout",
    "socket_connect_timeout",
    "ssl_cert_reqs",
    "protocol",
)


def take_options(url: str) -> tuple[str, dict[str, str]]:
    """``url`` without the store's own query options (``namespace``, ``retention``: redis-py
    would refuse them), and those options; ValueError naming a parameter redis-py does
    not take either (it would fail only at the first connection, as a TypeError)."""
    url, mine = _take_cluster_options(url)
    head, taken, others = take_ours(url)
    taken.update(mine)
    scheme = urlsplit(redaction.split_userinfo(url)[1]).scheme.lower().removesuffix("+cluster")
    known = _driver_parameters(scheme)
    check_names(url, others, f"{scheme}:// URL", theirs=known.__contains__, shown=(*COMMON_PARAMETERS, "..."))
    return head, taken


def _take_cluster_options(url: str) -> tuple[str, dict[str, str]]:
    """``url`` without the parameters of ``._cluster.OPTIONS``, and those (decoded)."""
    head, query = query_of(url)
    if query is None:
        return url, {}
    query, hash_mark, fragment = query.partition("#")
    kept: list[str] = []
    taken: dict[str, str] = {}
    for item in query.split("&"):
        key = unquote(item.partition("=")[0])
        if key in _cluster.OPTIONS:
            if key in taken:
                raise ValueError(f"the store URL gives {key} twice; give it once")
            taken[key] = unquote(item.partition("=")[2])
        elif item:
            kept.append(item)
    if not taken:
        return url, {}
    rest = "&".join(kept)
    return head + ("?" + rest if rest else "") + hash_mark + fragment, taken


def _driver_parameters(scheme: str) -> frozenset[str]:
    """The query parameters redis-py reads from a ``scheme`` URL: those it parses, and the
    keyword arguments of the connection class it makes (the others go to that class)."""
    from redis.asyncio import connection

    cls = {"rediss": connection.SSLConnection, "unix": connection.UnixDomainSocketConnection}.get(
        scheme, connection.Connection
    )
    names = set(connection.URL_QUERY_ARGUMENT_PARSERS)
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names.update(
                p.name
                for p in inspect.signature(init).parameters.values()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
            )
    return frozenset(names)

"""RedisStore's connection: the redis-py client of each process with its scripts, making
and closing it, where the server is, and sending the write script pipelined."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from ... import _redaction as redaction
from ..._bridge import _Owner
from .._server import ServerLocal
from ._lease_lua import ACQUIRE, RELEASE, RENEW, RESEAL
from ._lua import COUNT_EXPIRED, DELETE, FORK, GC, SELECT, WRITE, WRITE_KEYS

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

#: Where a Redis server is: (host or socket path, port or None, database).
ServerKey = tuple[Any, ...]
#: One call of the write script: its 7 keys, then its arguments.
ScriptCall = tuple[bytes | str, ...]


class ClientLocal(ServerLocal["Redis"]):
    """The client, its scripts and the write queue of a RedisStore in one process."""

    def __init__(self, own: _Owner) -> None:
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

    @property
    def client(self) -> Redis:
        """The redis-py client (opened by the time an operation gets this)."""
        assert self.conn is not None
        return self.conn

    def register(self, client: Redis) -> None:
        """Make the scripts ready to run on ``client``."""
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


def lost(aioredis: ModuleType) -> tuple[type[BaseException], ...]:
    """The errors that mean the connection to the server was lost or refused."""
    return (OSError, aioredis.ConnectionError, aioredis.TimeoutError)


def server_key(url: str, client: Redis | None) -> ServerKey:
    """Where the server of ``url`` (or of the user's ``client``) is, without the password."""
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
    """The server, as messages name it: ``host:port/db``, or ``path (db N)`` for a socket."""
    host, port, db = server
    return f"{host}:{port}/{db}" if port is not None else f"{host} (db {db})"


async def run_scripts(
    local: ClientLocal, calls: Sequence[ScriptCall], no_script: type[Exception]
) -> list[Any]:
    """EVALSHA the write script once per call, pipelined. Errors of single calls come back
    in their place. Calls the server refused with NOSCRIPT (``no_script``: it lost its
    scripts in a restart) did not run: load the script and send those again."""
    replies = await _evalsha(local, calls)
    again = [i for i, reply in enumerate(replies) if isinstance(reply, no_script)]
    if again:
        await local.client.script_load(WRITE)
        for i, reply in zip(again, await _evalsha(local, [calls[i] for i in again]), strict=True):
            replies[i] = reply
    return replies


async def _evalsha(local: ClientLocal, calls: Sequence[ScriptCall]) -> list[Any]:
    assert local.write_script is not None
    sha = local.write_script.sha
    async with local.client.pipeline(transaction=False) as pipe:
        for call in calls:
            pipe.evalsha(sha, WRITE_KEYS, *call)
        return list(await pipe.execute(raise_on_error=False))


def take_namespace(url: str) -> tuple[str, str | None]:
    """``url`` without its ``namespace=`` query option (statekeep's, not redis-py's), and
    that option's value (None if absent)."""
    query = urlsplit(redaction.split_userinfo(url)[1]).query
    if not query:
        return url, None
    pairs = [part for part in query.split("&") if part]
    found = [p.partition("=")[2] for p in pairs if p.partition("=")[0] == "namespace"]
    if not found:
        return url, None
    if len(found) > 1:
        raise ValueError(f"the store URL gives namespace= {len(found)} times; give it once")
    rest = "&".join(p for p in pairs if p.partition("=")[0] != "namespace")
    at = url.rfind("?" + query)
    return url[:at] + ("?" + rest if rest else "") + url[at + 1 + len(query) :], unquote(found[0])

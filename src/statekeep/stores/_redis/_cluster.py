"""RedisStore on a Redis Cluster, and the ``WAIT`` of ``wait_replicas``: the store's own URL
options (``cluster``, ``wait_replicas``, ``wait_timeout``, ``failover_timeout``), the cluster
client, and the write scripts sent per node, each node's batch on one connection.

On a cluster every key of a namespace carries the hash tag ``{<namespace>}`` (see
:meth:`._keys.Keys.of`), so a script's keys, and the keys it names at run time (blobs, index
members' States), are all in one slot: one EVALSHA on one node, atomic as on one server.
Blobs live under the namespace's keys there, not shared across namespaces; the layout key
(``<prefix>layout``, read and set only on connect) stays where it is on one server.

A batch of writes goes per node: for each master, one pipeline on one of its connections,
``[EVALSHA ..., (SET <ns>wait 1, WAIT n timeout)]``. ``WAIT`` counts the replicas that
acknowledged every write this connection made, so it follows the writes on the same
connection; the ``SET`` makes the connection's last write this batch's even when every script
of it wrote nothing (a resend of entries already stored). A reply ``MOVED``/``ASK``/
``TRYAGAIN``/``CLUSTERDOWN`` means the script did not run: the slot map is refreshed and the
call sent again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from ..._core import passwords as redaction
from .._server import OK, ConnectionLost
from ._write_lua import WRITE, WRITE_KEYS

if TYPE_CHECKING:
    from redis.asyncio.cluster import RedisCluster

#: The store's own query parameters of a Redis URL (redis-py would refuse them).
OPTIONS = ("cluster", "wait_replicas", "wait_timeout", "failover_timeout")
#: ``failover_timeout`` when none is given: one server, and a cluster.
FAILOVER_DEFAULT = 0.0
FAILOVER_CLUSTER = 30.0
#: Times a call is sent again after a redirection (MOVED, ASK, TRYAGAIN, CLUSTERDOWN).
REDIRECTS = 16


class NotReplicatedError(ConnectionLost):
    """A write the server applied, which fewer replicas than ``wait_replicas`` acknowledged
    within ``wait_timeout``: it may or may not survive a failover."""


def not_replicated(acked: int, wanted: int, timeout_ms: int) -> NotReplicatedError:
    return NotReplicatedError(
        f"the Redis master applied the write, but only {acked} of the {wanted} replicas asked for "
        f"(wait_replicas) acknowledged it within {timeout_ms} ms: it may or may not survive a "
        "failover, so it is not reported durable. Sending the same write again is safe (entries "
        "the store already has are skipped)"
    )


def take(options: dict[str, str], scheme: str) -> tuple[bool, dict[str, float | int]]:
    """Whether ``options`` (the store's own URL parameters) and ``scheme`` ask for a cluster,
    and the numbers they give; ValueError for a bad value."""
    cluster = scheme.endswith("+cluster")
    raw = options.get("cluster")
    if raw is not None:
        if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"cluster={raw!r} in the store URL: give cluster=true or cluster=false")
        cluster = cluster or raw.lower() in ("true", "1", "yes")
    numbers: dict[str, float | int] = {}
    for name in ("wait_replicas", "wait_timeout", "failover_timeout"):
        if name in options:
            try:
                value = float(options[name])
            except ValueError:
                raise ValueError(f"{name}={options[name]!r} in the store URL is not a number") from None
            numbers[name] = int(value) if name == "wait_replicas" and value.is_integer() else value
    return cluster, numbers


def settings(
    url: str,
    options: dict[str, str],
    client: object,
    wait_replicas: int | None,
    wait_timeout: float | None,
    failover_timeout: float | None,
) -> tuple[bool, tuple[int, int] | None, float]:
    """A store's cluster mode, its ``WAIT`` (replicas, timeout in ms; None: no WAIT) and its
    ``failover_timeout``, from its keywords, else its URL's parameters (``options``), else
    the defaults; ValueError for a bad one."""
    scheme = urlsplit(redaction.split_userinfo(url)[1]).scheme.lower()
    cluster, numbers = take(options, scheme)
    cluster = cluster or type(client).__name__ == "RedisCluster"
    replicas = wait_replicas if wait_replicas is not None else numbers.get("wait_replicas", 0)
    timeout = wait_timeout if wait_timeout is not None else numbers.get("wait_timeout", 1.0)
    default = FAILOVER_CLUSTER if cluster else FAILOVER_DEFAULT
    failover = failover_timeout if failover_timeout is not None else numbers.get("failover_timeout", default)
    check_wait(replicas, timeout, failover)
    wait = (int(replicas), max(int(timeout * 1000), 1)) if replicas else None
    return cluster, wait, float(failover)


def check_wait(wait_replicas: object, wait_timeout: object, failover_timeout: object) -> None:
    """ValueError/TypeError for a bad ``wait_replicas``, ``wait_timeout`` or ``failover_timeout``."""
    if type(wait_replicas) is not int or wait_replicas < 0:
        raise ValueError(f"wait_replicas must be a whole number >= 0 (0: do not wait), got {wait_replicas!r}")
    if isinstance(wait_timeout, int | float) and not isinstance(wait_timeout, bool) and wait_timeout == 0:
        raise ValueError("wait_timeout must be more than 0 seconds (Redis's WAIT 0 would wait for ever)")
    for name, value in (("wait_timeout", wait_timeout), ("failover_timeout", failover_timeout)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")


def split_hosts(url: str) -> tuple[str, list[tuple[str, int]]]:
    """A cluster URL as one redis-py URL (its first host; ``redis://`` or ``rediss://``) and
    every host given, as (host, port)."""
    userinfo, rest = redaction.split_userinfo(url)
    parts = urlsplit(rest)
    scheme = parts.scheme.lower().removesuffix("+cluster")
    if scheme not in ("redis", "rediss"):
        raise ValueError(
            f"a Redis Cluster URL starts with redis+cluster:// or rediss+cluster://, got {parts.scheme}://"
        )
    hosts: list[tuple[str, int]] = []
    for item in parts.netloc.split(","):
        host, _, port = item.rpartition(":") if ":" in item else (item, "", "6379")
        try:
            hosts.append((unquote(host.strip("[]")) or "localhost", int(port or 6379)))
        except ValueError:
            raise ValueError(f"the Redis Cluster URL names {item!r}, not host:port") from None
    db = parts.path.strip("/")
    if db not in ("", "0"):
        raise ValueError(f"a Redis Cluster has database 0 only; the store URL names database {db!r}")
    auth = f"{userinfo}@" if userinfo else ""
    query = f"?{parts.query}" if parts.query else ""
    first = f"{hosts[0][0]}:{hosts[0][1]}"
    return f"{scheme}://{auth}{first}/0{query}", hosts


def make_cluster_client(url: str) -> RedisCluster:
    """A cluster client for ``url`` with every host as a seed. redis-py follows MOVED and ASK
    and, after a lost node, reads the slot map again before the next command; the write
    scripts go through :func:`run_scripts`."""
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    single, hosts = split_hosts(url)
    seeds = [ClusterNode(host, port) for host, port in hosts[1:]]
    # No socket timeout unless the URL sets one (as the one-server client): a busy node that
    # fsyncs every write is slow, not gone; a dead one resets its connections.
    # No retries of its own (as the one-server client): a changing script sent again after a
    # lost reply could apply twice (a delete, a lease); statekeep resends what is safe to
    # (failover_timeout). A node that does not answer its connect is given up after 10 s
    # unless the URL says otherwise.
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    connect = {} if "socket_connect_timeout=" in single else {"socket_connect_timeout": 10.0}
    return RedisCluster.from_url(
        single, startup_nodes=seeds, socket_timeout=None, retry=Retry(NoBackoff(), 0), **connect
    )


def where(url: str) -> tuple[Any, ...]:
    """The cluster as messages and storage keys name it: its seed hosts."""
    _, hosts = split_hosts(url)
    return (",".join(f"{h}:{p}" for h, p in hosts), "cluster", 0)


async def run_scripts(
    client: Any,
    sha: str,
    calls: Sequence[tuple[Any, ...]],
    wait: tuple[int, int] | None,
) -> list[Any]:
    """EVALSHA the write script once per call, per node: each node's calls in one pipeline on
    one connection, then (``wait``: replicas, timeout in ms) ``WAIT`` on it. Replies in the
    calls' order; an error in place of a call whose outcome is unknown (lost connection) or
    that was refused; a write applied but not acknowledged by enough replicas gets a
    :class:`NotReplicatedError`."""
    from redis.asyncio.cluster import PipelineCommand
    from redis.exceptions import AskError, ClusterDownError, MovedError, NoScriptError, TryAgainError

    replies: list[Any] = [None] * len(calls)
    pending = list(range(len(calls)))
    for _ in range(REDIRECTS):
        await client.initialize()  # nothing to do unless the slot map is to be read again
        groups: dict[str, tuple[Any, list[int]]] = {}
        for i in pending:
            node = client.get_node_from_key(calls[i][0])
            groups.setdefault(node.name, (node, []))[1].append(i)
        results = await asyncio.gather(
            *(
                _on_node(node, sha, [calls[i] for i in part], wait, PipelineCommand)
                for node, part in groups.values()
            ),
            return_exceptions=True,
        )
        again: list[int] = []
        for (node, part), result in zip(groups.values(), results, strict=True):
            if isinstance(result, BaseException):  # the send failed: every outcome unknown
                client._initialize = True  # read the slot map again before the next command
                for i in part:
                    replies[i] = unknown(node.name, result) if _lost(result) else result
                continue
            for i, reply in zip(part, result, strict=True):
                if isinstance(reply, MovedError):
                    await client.nodes_manager.move_slot(reply)
                    again.append(i)
                elif isinstance(reply, AskError):  # the slot is moving: ASKING, then the call, there
                    replies[i] = await _asking(client, reply, sha, calls[i], wait, PipelineCommand)
                elif isinstance(reply, TryAgainError | ClusterDownError):
                    client._initialize = True
                    again.append(i)
                elif isinstance(reply, NoScriptError):
                    await node.execute_command("SCRIPT", "LOAD", WRITE)
                    again.append(i)
                elif _lost(reply):
                    client._initialize = True
                    replies[i] = unknown(node.name, reply)
                else:
                    replies[i] = reply
        pending = again
        if not pending:
            return replies
        await asyncio.sleep(0.05)  # a slot being moved or a master being elected
    for i in pending:
        replies[i] = ConnectionLost(
            "the Redis Cluster kept redirecting the write (its namespace's slot is being moved between "
            "masters: a script on a half-moved slot is refused with TRYAGAIN), so it did not run; "
            "sending it again is safe"
        )
    return replies


async def _on_node(
    node: Any, sha: str, calls: list[tuple[Any, ...]], wait: tuple[int, int] | None, command: Any
) -> list[Any]:
    commands = [command(i, "EVALSHA", sha, WRITE_KEYS, *call) for i, call in enumerate(calls)]
    if wait is not None:
        commands.append(command(len(commands), "SET", touch_key(calls[0]), "1"))
        commands.append(command(len(commands), "WAIT", wait[0], wait[1]))
    await node.execute_pipeline(commands)
    results = [c.result for c in commands]
    return (
        results
        if wait is None
        else waited(results[: len(calls)], acked_after(results[-2], results[-1]), wait)
    )


async def _asking(
    client: Any, ask: Any, sha: str, call: tuple[Any, ...], wait: tuple[int, int] | None, command: Any
) -> Any:
    """The call sent, after ``ASKING``, to the node a slot is moving to (an ASK reply), on one
    connection (with its WAIT); its reply, or the error that says its outcome is unknown."""
    from redis.exceptions import NoScriptError, TryAgainError

    node = client.get_node(host=ask.host, port=ask.port)
    if node is None:
        client._initialize = True
        return ConnectionLost(
            f"the Redis Cluster moves the slot to {ask.host}:{ask.port}, a node it does not list"
        )
    commands = [command(0, "ASKING"), command(1, "EVALSHA", sha, WRITE_KEYS, *call)]
    if wait is not None:
        commands += [command(2, "ASKING"), command(3, "SET", touch_key(call), "1"), command(4, "WAIT", *wait)]
    try:
        await node.execute_pipeline(commands)
    except Exception as exc:
        return unknown(node.name, exc) if _lost(exc) else exc
    reply = commands[1].result
    if _lost(reply):
        return unknown(node.name, reply)
    if isinstance(reply, TryAgainError):  # some of the State's keys are not moved yet: it did not run
        return ConnectionLost(
            f"the Redis Cluster is moving the State's slot ({reply}); the write did not run"
        )
    if isinstance(reply, NoScriptError):  # the node the slot moves to lacks the script: it did not run
        return ConnectionLost(
            f"the Redis Cluster node {node.name} the State's slot is moving to has no write script yet; "
            "the write did not run"
        )
    return (
        reply
        if wait is None
        else waited([reply], acked_after(commands[3].result, commands[4].result), wait)[0]
    )


def acked_after(touched: Any, acked: Any) -> Any:
    """WAIT's reply, or the error of the ``SET`` before it: a refused SET leaves WAIT
    counting the connection's older writes, vouching for none of these."""
    return touched if isinstance(touched, Exception) else acked


def touch_key(call: tuple[Any, ...]) -> bytes:
    """The namespace's ``wait`` key, in the slot of the call's State: the listing index (the
    call's third key, ``<base>ix:all``) with ``wait`` for ``ix:all``."""
    index = call[2] if isinstance(call[2], bytes) else str(call[2]).encode()
    return index[: -len(b"ix:all")] + b"wait"


class ShortReply(list[Any]):
    """A write script's reply (a refusal: the State already holds entries at those seqs) that
    came with too few replica acknowledgements: ``short`` is the error to raise should the
    store find the refusal explained by its own earlier attempt (a resend) and count it a
    success, which it then is not (not durable)."""

    short: NotReplicatedError


def waited(replies: list[Any], acked: Any, wait: tuple[int, int]) -> list[Any]:
    """``replies`` with each applied write replaced by :class:`NotReplicatedError` when
    ``acked`` (WAIT's reply) is fewer replicas than asked for, and each other script reply
    marked with that error (:class:`ShortReply`): a resend may find it its own."""
    if isinstance(acked, Exception):  # WAIT failed after the writes: not confirmed
        error = NotReplicatedError(
            f"the Redis server applied the write, but its WAIT for {wait[0]} replica(s) failed ({acked}): "
            "it may or may not survive a failover, so it is not reported durable. Sending the same "
            "write again is safe (entries the store already has are skipped)"
        )
    elif int(acked) >= wait[0]:
        return replies
    else:
        error = not_replicated(int(acked), wait[0], wait[1])
    return [error if _applied(r) else _short(r, error) for r in replies]


def _short(reply: Any, error: NotReplicatedError) -> Any:
    if not isinstance(reply, list):
        return reply
    marked = ShortReply(reply)
    marked.short = error
    return marked


def unknown(node: str, exc: BaseException) -> ConnectionLost:
    """The error of a write whose connection to ``node`` was lost: its outcome is unknown."""
    error = ConnectionLost(
        f"the connection to the Redis Cluster node {node} was lost during the write ({exc}); it may "
        "or may not have been applied. Sending the same write again is safe (entries the store "
        "already has are skipped)"
    )
    error.__cause__ = exc
    return error


def _applied(reply: Any) -> bool:
    return isinstance(reply, list) and bool(reply) and int(reply[0]) == OK


def _lost(reply: Any) -> bool:
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return isinstance(reply, RedisConnectionError | RedisTimeoutError | OSError | asyncio.TimeoutError)

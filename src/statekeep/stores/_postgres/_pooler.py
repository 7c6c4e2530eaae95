"""A PostgresStore behind a connection pooler (PgBouncer): the ``pooler`` setting, what it
changes in the pool's settings, how a pooler nobody mentioned is noticed, and the errors
that say what to set.

In transaction mode (PgBouncer's ``pool_mode = transaction``) a client's statements go to
whichever server connection is free at each transaction, so nothing may outlive one: the
store keeps no session state already (transaction-scoped advisory locks, ``set_config(...,
true)``, no reset query, no LISTEN, no temporary tables), and ``pooler="transaction"`` turns
off asyncpg's cache of named prepared statements (``statement_cache_size=0``), which would
live on one server connection only. asyncpg then sends every statement unnamed and parses it
again with its parameters, in the message that runs it, which a pooler in transaction mode
passes whole to one server connection (PgBouncer 1.18 has no prepared statements of its own).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from .._urlquery import query_of

#: What ``pooler`` takes: ``"transaction"`` (each transaction may get another server
#: connection: no prepared statements kept) and ``"session"`` (a client keeps its server
#: connection: as direct). None: no pooler, connected directly.
POOLERS = ("transaction", "session")

#: How to say it, in every message about it.
HOW = "pass pooler='transaction' to PostgresStore (or add pooler=transaction to the store URL's query)"


class PoolerUnset(Exception):
    """A pooler was noticed between the store and PostgreSQL, and ``pooler`` was not given."""


def check_pooler(value: object) -> str | None:
    """``value`` if ``pooler`` takes it (None, or one of :data:`POOLERS`), else ValueError."""
    if value is None or (isinstance(value, str) and value in POOLERS):
        return value
    raise ValueError(
        f"pooler is 'transaction' (a pooler such as PgBouncer with pool_mode = transaction), "
        f"'session' (pool_mode = session) or None (no pooler); got {value!r}"
    )


def take_pooler(dsn: str | None, given: object) -> tuple[str | None, str | None]:
    """``dsn`` without its ``pooler`` query parameter (asyncpg would send it to the server as
    a setting), and the pooler: ``given`` (the argument) or the URL's; ValueError for a bad
    one, one given twice, or the two disagreeing."""
    pooler = check_pooler(given)
    found = _in_url(dsn) if dsn is not None else None
    if found is None:
        return dsn, pooler
    dsn, in_url = found
    if pooler is not None and in_url != pooler:
        raise ValueError(f"the store URL says pooler={in_url} and the pooler argument {pooler!r}; give one")
    return dsn, in_url


def _in_url(dsn: str) -> tuple[str, str | None] | None:
    """``dsn`` without its ``pooler`` parameter and that parameter (checked); None if absent."""
    head, query = query_of(dsn)
    if query is None:
        return None
    query, hash_mark, fragment = query.partition("#")
    kept: list[str] = []
    found: list[str] = []
    for item in query.split("&"):
        key, _, value = item.partition("=")
        if unquote(key) == "pooler":
            found.append(unquote(value))
        elif item:
            kept.append(item)
    if not found:
        return None
    if len(found) > 1:
        raise ValueError("the store URL gives pooler twice; give it once")
    rest = ("?" + "&".join(kept) if kept else "") + hash_mark + fragment
    return head + rest, check_pooler(found[0])


def implied(pooler: str | None, kwargs: dict[str, Any]) -> str | None:
    """``pooler``, or "transaction" when it is not given and ``kwargs`` turn asyncpg's
    statement cache off (``statement_cache_size=0``: how asyncpg users run behind PgBouncer in
    transaction mode; on a direct connection it changes nothing more)."""
    if pooler is None and kwargs.get("statement_cache_size") == 0:
        return "transaction"
    return pooler


def pool_settings(pooler: str | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The asyncpg pool settings for ``pooler``: ``kwargs``, in transaction mode with
    ``statement_cache_size=0`` (ValueError if ``kwargs`` asks for a cache there) and each new
    connection's types learnt in one transaction (:func:`_learn_types`, then the ``init`` of
    ``kwargs``, if any)."""
    if pooler != "transaction":
        return kwargs
    if kwargs.get("statement_cache_size", 0) != 0:
        raise ValueError(
            "pooler='transaction' keeps no prepared statements (each transaction may run on another "
            "server connection): leave out statement_cache_size, or set it to 0"
        )
    return {**kwargs, "statement_cache_size": 0, "init": _learn_types(kwargs.get("init"))}


#: A parameter of each type the store sends that asyncpg does not know by itself (it asks the
#: server about those once per connection): ``bytea[]`` (the blobs of a write) and ``bigint[]``
#: (the seqs of a rekey's reseal).
_UNKNOWN_TYPES = "SELECT $1::bytea[] IS NULL, $2::int8[] IS NULL"


def _learn_types(then: Callable[[Any], Awaitable[None]] | None) -> Callable[[Any], Awaitable[None]]:
    """A pool's ``init``: make asyncpg learn the types it would ask the server about, in one
    transaction, then run ``then``. asyncpg turns PostgreSQL's ``jit`` off for its question and
    back after it, as session settings; outside a transaction a pooler may send the three
    statements to different server connections, leaving ``jit`` off on one that others use."""

    async def init(conn: Any) -> None:
        async with conn.transaction():
            await conn.fetchrow(_UNKNOWN_TYPES, None, None)
        if then is not None:
            await then(conn)

    return init


def check_direct(pooler: str | None, announced: int, backend: int) -> None:
    """Raise PoolerUnset when ``pooler`` is None and the server process this connection is
    talking to (``backend``, ``pg_backend_pid()``) is not the one it announced at login
    (``announced``): PostgreSQL announces its own process id, a pooler one of its own making."""
    if pooler is None and announced != backend:
        raise PoolerUnset()


def pooler_refusal(asyncpg: Any, exc: BaseException) -> str | None:
    """What to set, for an error that a pooler causes when the store does not know it is
    there (see :func:`statekeep.stores._postgres._pool.refusal`); None for any other error."""
    e = asyncpg.exceptions
    if isinstance(exc, PoolerUnset):
        return (
            "is reached through a connection pooler (the server process that answers is not the one "
            f"that announced itself at login); {HOW} if it pools by transaction (PgBouncer's "
            "pool_mode = transaction), or pooler='session' if each client keeps its server connection"
        )
    text = str(exc)
    if isinstance(exc, e.InvalidSQLStatementNameError | e.DuplicatePreparedStatementError) and (
        "prepared statement" in text
    ):
        return (
            f"answered with a prepared statement error ({text.splitlines()[0]}): a connection pooler in transaction "
            f"mode (PgBouncer's pool_mode = transaction) is between the store and PostgreSQL; {HOW}, "
            "and if you pass your own pool=, make it with statement_cache_size=0. "
            "The statement did not run"
        )
    if isinstance(exc, e.ProtocolViolationError) and text.startswith("unsupported startup parameter"):
        name = text.rpartition(":")[2].strip()
        return (
            f"refused the setting {name!r} the store URL gives at login, as a pooler (PgBouncer) does with "
            f"settings it does not know; set it on the server instead (ALTER ROLE ... SET {name} = ...), "
            "or list it in PgBouncer's ignore_startup_parameters"
        )
    return None

"""PostgresStore's connections: the asyncpg pool of each process, opening and closing it,
and running one statement on it (past connections asyncpg left broken)."""

from __future__ import annotations

import asyncio
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..._runtime.bridge import Owner
from .._server import ServerLocal
from ._pooler import pooler_refusal

if TYPE_CHECKING:
    from asyncpg import Connection, Pool
    from asyncpg.pool import PoolConnectionProxy


async def _keep_session(conn: Connection) -> None:
    """The pool's reset on release: none. The store leaves no session state behind (no
    transaction, lock, cursor or setting outlives a statement), and asyncpg's default
    reset costs a round trip per statement."""


#: Pool settings used unless ``pool_kwargs`` says otherwise.
DEFAULT_POOL: dict[str, Any] = {"min_size": 0, "max_size": 10, "reset": _keep_session}


#: Seconds the write queue's sender keeps its connection once writes stop.
WRITER_IDLE = 1.0


class PoolLocal(ServerLocal["Pool"]):
    """The pool and write queue of a PostgresStore in one process, and the connection the
    queue's sender keeps while writes keep coming (see :func:`run_writer`)."""

    def __init__(self, own: Owner) -> None:
        super().__init__(own)
        self.holds_writer = False  # set on open: a pool the store made, of 2 connections or more
        self.writer: PoolConnectionProxy[Any] | None = None
        self.writer_used = 0.0  # the loop's time of the writer's last statement
        self.idle_timer: asyncio.TimerHandle | None = None

    @property
    def pool(self) -> Pool:
        """The asyncpg pool (opened by the time an operation gets this)."""
        assert self.conn is not None
        return self.conn

    async def let_go(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        conn, self.writer = self.writer, None
        if conn is not None:
            await _give_back(self.pool, conn)

    def _idle(self) -> None:
        """The writer's idle check: give its connection back after WRITER_IDLE seconds without
        a write (never while a batch is being sent), else look again then."""
        self.idle_timer = None
        if self.writer is None:
            return
        loop = asyncio.get_running_loop()
        left = self.writer_used + WRITER_IDLE - loop.time()
        if left > 0 or self.writes.flushers:
            self.idle_timer = loop.call_later(max(left, 0.05), self._idle)
        else:
            conn, self.writer = self.writer, None
            self.spawn(_give_back(self.pool, conn))


def connection_errors(asyncpg: ModuleType) -> tuple[type[BaseException], ...]:
    """The errors that mean the connection to the server was lost or refused."""
    e = asyncpg.exceptions
    return (
        OSError,
        e.PostgresConnectionError,
        e.AdminShutdownError,
        e.CrashShutdownError,
        e.CannotConnectNowError,
        # No host of a multi-host DSN takes writes right now (a standby is being promoted).
        e.TargetServerAttributeNotMatched,
    )


def refusal(asyncpg: ModuleType, exc: BaseException, user: str | None, database: str | None) -> str | None:
    """What the server refused, and what to check, for an error with which it turned this
    client away at connect (see ``ServerStore._refusal``); None for any other error."""
    e = asyncpg.exceptions
    if isinstance(exc, e.InvalidCatalogNameError):
        return f"has no database {database!r}; check the database name in the store URL"
    if isinstance(exc, e.InvalidPasswordError | e.InvalidAuthorizationSpecificationError):
        who = f"the user {user!r}" if user else "the user (none given: your login name)"
        return (
            f"refused {who} (no such user, a wrong password, or not allowed to connect); "
            "check the user name and password in the store URL (or $PGUSER, $PGPASSWORD)"
        )
    if isinstance(exc, e.UndefinedObjectError) and "configuration parameter" in str(exc):
        name = str(exc).rpartition("parameter")[2].strip().strip('"')
        return (
            f"does not know the setting {name!r} the store URL gives; check its spelling: statekeep's "
            "own parameters are namespace and retention, any other goes to PostgreSQL as a setting"
        )
    return pooler_refusal(asyncpg, exc)


async def make_pool(
    asyncpg: ModuleType,
    own: Owner,
    user_pool: Pool | None,
    store: str,
    dsn: str | None,
    ssl: Any,
    **kwargs: Any,
) -> Pool:
    """The user's pool (refused if it belongs to another loop than ``own``'s), or a new one."""
    if user_pool is None:
        pool: Pool = await asyncpg.create_pool(dsn, ssl=ssl, **kwargs)
        return pool
    loop = getattr(user_pool, "_loop", None)
    if loop is not None and loop is not own.loop:
        raise RuntimeError(
            f"{store}: the asyncpg pool passed as pool= belongs to another event loop; "
            "statekeep runs all I/O on its own loop. Pass a DSN instead, or make the pool "
            "on statekeep._runtime.bridge.owner().loop"
        )
    return user_pool


async def close_pool(pool: Pool) -> None:
    """Close ``pool``, waiting at most 5 seconds for its connections to be given back."""
    try:
        await asyncio.wait_for(pool.close(), 5.0)
    except Exception:
        pool.terminate()


async def run_writer(asyncpg: ModuleType, local: PoolLocal, method: str, query: str, *args: Any) -> Any:
    """As :func:`run`, for the write queue's sender (one batch at a time per process), on a
    connection it keeps between batches while writes keep coming: a pool's acquire and
    release cost more client work than the statement itself. Given back to the pool after
    WRITER_IDLE seconds without writes, on close, and after any error (a broken one is
    left for :func:`run`, which sends the statement again on another)."""
    if not local.holds_writer:
        return await run(asyncpg, local.pool, method, query, *args)
    loop = asyncio.get_running_loop()
    conn = local.writer
    if conn is not None:
        try:
            closed = conn.is_closed()
        except asyncpg.exceptions.InterfaceError:  # the pool took it back when the server ended it
            local.writer = conn = None
        else:
            if closed:  # the server ended it meanwhile: as the pool would
                _drop(local, conn)
                conn = None
    if conn is None:
        conn = local.writer = await local.pool.acquire()
        if local.idle_timer is None:
            local.idle_timer = loop.call_later(WRITER_IDLE, local._idle)
    local.writer_used = loop.time()
    try:
        return await getattr(conn, method)(query, *args)
    except asyncpg.exceptions.InternalClientError as exc:
        _drop(local, conn, terminate=True)
        if str(exc).startswith("cannot switch to state"):  # refused before anything was sent
            return await run(asyncpg, local.pool, method, query, *args)
        raise broken(exc) from exc
    except BaseException:
        _drop(local, conn)
        raise


def _drop(local: PoolLocal, conn: PoolConnectionProxy[Any], terminate: bool = False) -> None:
    """Stop keeping ``conn`` as the writer, and give it back to the pool (closed first, if
    ``terminate``)."""
    if local.writer is conn:
        local.writer = None
    if terminate:
        _terminate(conn)
    local.spawn(_give_back(local.pool, conn))


def _terminate(conn: PoolConnectionProxy[Any]) -> None:
    """Close ``conn`` at once, unless the pool took it back already (when the server ended it)."""
    try:
        conn.terminate()
    except Exception:  # InterfaceError: released back to the pool, which closes it
        pass


def broken(exc: BaseException) -> BaseException:
    """A connection asyncpg left in a broken protocol state after a statement was sent (the
    server ended the session meanwhile): a lost connection, whose outcome is unknown."""
    if str(exc).startswith("cannot switch to state"):
        return exc
    return ConnectionResetError(f"the connection broke ({exc})")


async def _give_back(pool: Pool, conn: PoolConnectionProxy[Any]) -> None:
    """Release ``conn`` to ``pool``; an error doing so is not the statement's (the pool
    closes that connection)."""
    try:
        await pool.release(conn)
    except Exception:
        pass


async def run(asyncpg: ModuleType, pool: Pool, method: str, query: str, *args: Any) -> Any:
    """Run one statement on a connection of ``pool``, as ``conn.<method>(query, *args)``.

    A connection that asyncpg left in a broken protocol state (which it can do when the
    server ends a session; asyncpg issue #1069) is closed, and the statement is sent again
    on another connection, since such a connection refuses it before sending anything.
    Errors while giving a connection back to the pool are not the statement's: the pool
    closes that connection and the result stands.
    """
    tries = pool.get_max_size() + 1  # every connection of the pool may be broken
    for attempt in range(tries):
        conn = await pool.acquire()
        try:
            return await getattr(conn, method)(query, *args)
        except asyncpg.exceptions.InternalClientError as exc:
            _terminate(conn)
            if attempt < tries - 1 and str(exc).startswith("cannot switch to state"):
                continue  # refused before anything was sent
            raise broken(exc) from exc
        finally:
            await _give_back(pool, conn)
    raise AssertionError("unreachable")


async def run_in_transaction(pool: Pool, statements: list[tuple[str, str, tuple[Any, ...]]]) -> Any:
    """Run ``statements`` (each ``(method, query, args)``, as :func:`run` sends one) in one
    transaction on one connection of ``pool``; the last one's result. Each statement reads
    what had committed when it began (READ COMMITTED): one after a ``SELECT ... FOR UPDATE``
    sees what the transaction that held the row committed."""
    conn = await pool.acquire()
    try:
        async with conn.transaction():
            result = None
            for method, query, args in statements:
                result = await getattr(conn, method)(query, *args)
            return result
    finally:
        await _give_back(pool, conn)

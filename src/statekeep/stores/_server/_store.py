"""ServerStore: the base of the stores that talk to a server (PostgresStore, RedisStore).

It keeps this process's connection object (an asyncpg pool, a redis-py client) in a
:class:`statekeep._runtime.slot.ProcessSlot` of :class:`ServerLocal`, opens it on first use (again
in a forked child, leaving the parent's alone), counts the operations using it so that
close waits for them, turns errors into :class:`Talking`'s, and queues writes so that
those waiting at the same moment go to the server together. A store says how to open,
close and talk to its server through a few hooks. Nothing here imports a driver: each
store imports its own, when it is made.
"""

from __future__ import annotations

import functools
from abc import abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

from ..._core import passwords as redaction
from ..._core.writes import PreparedWrite
from ..._runtime.slot import ProcessSlot
from ..._store.backend import Backend
from . import _failover
from ._batches import Queued
from ._local import ServerLocal, close_local
from ._talking import Talking

C = TypeVar("C")  # the connection object: a pool, a client
L = TypeVar("L", bound=ServerLocal[Any])  # what the store keeps per process
A = TypeVar("A")  # what a write sends
R = TypeVar("R")  # what the server answers to a write
T = TypeVar("T")


class ServerStore(Backend, Generic[C, L, A, R]):
    """A store that talks to a server through one connection object per process.

    A subclass sets ``_local_type`` and ``_close_conn`` (close a connection the store made:
    a static function, which must not refer to the store), and in ``__init__``
    ``_server_name`` (the server, as error messages name it: ``"PostgreSQL at
    host:port"``), ``_lost`` (the
    errors of a lost or refused connection) and ``_user_conn`` (the pool or client the user
    passed in, never closed by the store, or None), then calls ``super().__init__()``.
    Hooks: :meth:`_open` (make the connection, check the server), :meth:`_send_batch`
    (send one batch of queued writes, settling each one's future) and :meth:`_refusal`
    (the server's refusals, in statekeep's words).
    """

    _eager = False  # redis-py and asyncpg use asyncio.timeout, which needs a Task of its own
    _local_type: type[L]
    _close_conn: Callable[[C], Coroutine[Any, Any, None]]
    _server_name: str
    _lost: tuple[type[BaseException], ...]
    _user_conn: C | None
    #: Seconds an operation that may be sent again keeps resending after a lost connection
    #: (see :mod:`._failover`); 0 raises at once.
    _failover_timeout = 0.0

    def __init__(self) -> None:
        self._slot = self._new_slot()

    def _new_slot(self) -> ProcessSlot[L]:
        # Made from the class, not from a method of the store: the store stays out of a
        # reference cycle, so a store dropped unclosed is collected (and closed) at once.
        return ProcessSlot(self._local_type)

    # -- hooks ----------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        """``text`` with the password of every URL or DSN in it masked."""
        return redaction.redact_text(text)

    def _refusal(self, exc: BaseException) -> str | None:
        """For an error with which the server refused this client (an unknown database,
        user or setting, a wrong password): what it refused and what to check, to follow
        the server's name in a message; None for any other error."""
        return None

    @abstractmethod
    async def _open(self, local: L) -> C:
        """Make (or take) the connection for ``local``, check the server, and return it."""

    @abstractmethod
    async def _send_batch(self, local: L, batch: list[Queued[A, R]]) -> None:
        """Send ``batch`` and give each write's future its outcome."""

    def _take_failover(self, given: object, in_url: str | None, several: bool) -> None:
        """Set ``failover_timeout``: the argument ``given`` (None: not given), else the URL's
        ``in_url``, else 30 s when the store names ``several`` servers, else 0."""
        if isinstance(given, str):  # a URL's text is parsed; an argument is a number
            raise TypeError(f"failover_timeout must be a number of seconds >= 0, got str {given!r}")
        if given is not None:
            self._failover_timeout = _failover.check_timeout(given)
        elif in_url is not None:
            self._failover_timeout = _failover.check_timeout(in_url, "failover_timeout in the store URL")
        else:
            self._failover_timeout = _failover.SEVERAL_SERVERS if several else 0.0

    @property
    def failover_timeout(self) -> float:
        """Seconds a write, read or listing keeps resending after the connection was lost
        before it raises ConnectionError (0: at once)."""
        return self._failover_timeout

    async def _resending(self, action: str, attempt: Callable[[bool], Awaitable[T]]) -> T:
        """``attempt(resent)``, sent again after a lost connection for ``failover_timeout``
        seconds (see :mod:`._failover`), counted as in use the whole time (close waits for
        it); a store closed meanwhile stops resending."""

        async def again(resent: bool) -> T:
            if resent and self._closed:
                raise ConnectionError(
                    f"{self._server_name}: the store was closed while the {action} was being sent again "
                    "after a lost connection; "
                    + (
                        "its outcome is unknown (sending the same write again is safe)"
                        if action == "write"
                        else f"the {action} did not complete"
                    )
                )
            return await attempt(resent)

        local = self._slot.get()
        local.busy += 1
        try:
            return await _failover.resending(self._failover_timeout, self._server_name, action, again)
        finally:
            local.busy -= 1

    async def _write(self, write: PreparedWrite) -> None:
        if self._failover_timeout:
            await self._resending("write", lambda resent: self._resend_once(write, resent))
        else:
            await self._write_once(write, False)

    async def _resend_once(self, write: PreparedWrite, resent: bool) -> None:
        """Send ``write``; when ``resent``, an append first as :func:`._failover.guarded`
        makes it, so that a first attempt that was applied is found, not applied again."""
        guarded = _failover.guarded(write) if resent else None
        if guarded is None or not await self._write_once(guarded, True, guarded=True):
            await self._write_once(write, resent)

    async def _write_once(self, write: PreparedWrite, resent: bool, guarded: bool = False) -> bool:
        """Send ``write`` (``resent``: again, after a lost connection left an earlier
        attempt's outcome unknown: a refusal its own commit explains is a success). False
        only for a ``guarded`` resend its guard refused (the State is not where it was)."""
        raise NotImplementedError

    async def _reading(self, action: str, read: Callable[[L], Awaitable[T]]) -> T:
        """``read(local)`` in :meth:`_using`, sent again after a lost connection for
        ``failover_timeout`` seconds (for operations that change nothing: reads, listings)."""

        async def once(_: bool) -> T:
            async with self._using(action) as local:
                return await read(local)

        if self._failover_timeout:
            return await self._resending(action, once)
        return await once(False)

    # -- the connection of this process ---------------------------------------------

    @property
    def _state(self) -> L | None:
        """This process's connection state, if it has one (none before first use or after close)."""
        return self._slot.current()

    def _talking(self, action: str) -> Talking:
        """The error translation for ``action`` (``"read"``, ``"write"``, ...)."""
        return Talking(action, self._server_name, self._scrub, self._lost, self._refusal)

    async def _local(self) -> L:
        """This process's connection and write queue, made on first use (again after a fork)."""
        local = self._slot.get()
        if local.conn is None:
            async with local.starting:
                if local.conn is None:
                    local.conn = await self._open(local)
        return local

    @asynccontextmanager
    async def _using(self, action: str) -> AsyncIterator[L]:
        """This process's connection state, counted as in use (close waits for it), with
        lost connections turned into ConnectionError and passwords kept out of errors."""
        async with self._talking(action):
            local = await self._local()
            local.busy += 1
            try:
                yield local
            finally:
                local.busy -= 1

    async def _checked_open(self, local: L, conn: C, check: Callable[[C], Awaitable[None]]) -> None:
        """Run ``check(conn)`` (the server's checks), closing ``conn`` if it fails and the
        store made it; else track it (see bridge.Closer)."""
        user = self._user_conn
        try:
            await check(conn)
        except BaseException:
            if conn is not user:
                await self._close_conn(conn)
            raise
        if conn is not user:
            # Closed by close(), at exit, or (with a ResourceWarning) when the store is dropped.
            local.closer = local.owner.track(
                self, functools.partial(close_local, local, self._close_conn, conn)
            )

    async def _close(self) -> None:
        local = self._slot.current()
        if local is None:  # never opened in this process
            return
        await local.drain(10.0)  # operations under way finish first, on this connection
        self._slot = self._new_slot()  # this process's connection is forgotten
        if local.closer is not None:
            local.closer.release()
        await local.let_go()
        if local.conn is not None and local.conn is not self._user_conn:
            await self._close_conn(local.conn)

    # -- writes: queued, and sent in batches ----------------------------------------

    async def _queued(self, args: A) -> R:
        """Queue a write of ``args`` and return the server's answer; if nobody is sending,
        send the queue, until this write is done (see :mod:`._batches`)."""
        async with self._talking("write"):
            local = await self._local()
        result: R = await local.writes.submit(args, functools.partial(self._send_batch, local), local.spawn)
        return result

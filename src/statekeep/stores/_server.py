"""What the server stores (PostgresStore, RedisStore) share: their connection on each owner
loop, their queue of writes, their error translation and the outcomes of their writes.

Each store keeps one connection object (an asyncpg pool, a redis-py client) per owner loop,
in a :class:`ServerLocal`. :class:`ServerStore` opens it on first use (again after a fork),
counts the operations using it so that close waits for them, and sends queued writes in
batches; a store says how to open, close and talk to its server through a few hooks.
:class:`Talking` turns a lost connection into ConnectionError and keeps passwords out of
errors. Nothing here imports a driver: each store imports its own, when it is made.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.metadata
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson

from .._backend import Backend
from .._bridge import _Owner, owner
from .._errors import CorruptStateError, StateConflictError
from .._loopstate import LoopState
from .._writes import PreparedWrite, exists_error, missing_error, plan_append

# Outcomes of a server-side write (the SQL function, the Lua script).
OK, MISSING, EXISTS, GAP, COMPARE = 0, 1, 2, 3, 4
OUTCOMES = (OK, MISSING, EXISTS, GAP, COMPARE)
#: Times a write compares its entries with a State that keeps changing, before giving up.
MAX_COMPARES = 8
#: Writes of one batch at most, and batches in flight at once, per store and process.
MAX_BATCH = 256
FLUSHERS = 1

# Connections of a parent process, found in a forked child: kept here, never touched
# (closing them would close the parent's sockets).
_abandoned: list[Any] = []

_Queued = tuple[tuple[Any, ...], "asyncio.Future[Any]"]


def import_driver(
    module: str, store: str, what: str, extra: str, minimum: tuple[str, tuple[int, ...]] | None = None
) -> Any:
    """Import a store's driver ``module`` when the store is made (never when statekeep is
    imported), or say which extra to install. ``minimum`` is (distribution, version): an
    older installed version is refused too, since it would work worse without saying so."""
    try:
        driver = importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{store} needs {what}: pip install 'statekeep[{extra}]' ({exc})") from exc
    if minimum is not None:
        dist, wanted = minimum
        try:
            found = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:  # vendored or built in place: no metadata
            found = str(getattr(driver, "__version__", ""))
            if not found:
                return driver  # nothing to check against; let it run
        numbers = tuple(int(part) for part in re.findall(r"\d+", found)[: len(wanted)])
        if numbers < wanted:
            need = ".".join(map(str, wanted))
            raise ImportError(
                f"{store} needs {dist} {need} or newer, found {found}: pip install -U 'statekeep[{extra}]'"
            )
    return driver


class ServerLocal(LoopState):
    """The connection (``conn``: a pool or a client) and write queue of a server store on
    one owner loop."""

    queue: list[_Queued]

    def __init__(self, own: _Owner) -> None:
        super().__init__(own)
        self.conn: Any = None


class Talking:
    """Turns a lost or refused connection into ConnectionError with a clear message, and
    keeps the password out of every error that leaves the store.

    A store subclasses it with :meth:`server` (who could not be reached), :meth:`scrub`
    (the text without passwords) and :meth:`lost` (the errors of a lost connection).
    """

    def __init__(self, store: Any, action: str) -> None:
        self.store, self.action = store, action

    def server(self) -> str:
        """The server, as error messages name it (``"PostgreSQL at host:port"``)."""
        raise NotImplementedError

    def scrub(self, text: str) -> str:
        """``text`` with the store's passwords taken out."""
        raise NotImplementedError

    def lost(self) -> tuple[type[BaseException], ...]:
        """The errors that mean the connection was lost or refused."""
        raise NotImplementedError

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None or not isinstance(exc, Exception):
            return
        text = str(exc)
        clean = self.scrub(text)
        if isinstance(exc, self.lost()):
            if self.action == "write":
                outcome = (
                    "the write may or may not have been saved; sending the same write again is "
                    "safe (entries the store already has are skipped)"
                )
            else:
                outcome = f"the {self.action} did not complete; try again"
            message = (
                f"{self.server()} could not be reached or the connection was lost "
                f"({type(exc).__name__}: {clean}); {outcome}"
            )
            if clean != text:
                raise ConnectionError(message) from None
            raise ConnectionError(message) from exc
        if clean != text:  # rare: keep the type's name, lose the password
            raise RuntimeError(f"{type(exc).__name__}: {clean}") from None


class ServerStore(Backend):
    """A store that talks to a server through one connection object per owner loop.

    Hooks: :meth:`_new_local`, :meth:`_user_conn`, :meth:`_open` (make the connection,
    check the server), :meth:`_close_conn`, :meth:`_talking` and :meth:`_send_batch` (send
    one batch of queued writes, settling each one's future).
    """

    # The connection of this process; replaced when owner() changes (after a fork).
    _state: ServerLocal | None

    def _new_local(self, own: _Owner) -> ServerLocal:
        """A fresh per-loop state for ``own``."""
        raise NotImplementedError

    def _user_conn(self) -> Any:
        """The pool or client the user passed in (never closed by the store), or None."""
        raise NotImplementedError

    async def _open(self, local: ServerLocal) -> Any:
        """Make (or take) the connection for ``local``, check the server, and return it."""
        raise NotImplementedError

    @staticmethod
    async def _close_conn(conn: Any) -> None:
        """Close a connection the store made."""
        raise NotImplementedError

    def _talking(self, action: str) -> Talking:
        """The error translation for ``action`` (``"read"``, ``"write"``, ...)."""
        raise NotImplementedError

    async def _send_batch(self, local: Any, batch: list[_Queued]) -> None:
        """Send ``batch`` and give each write's future its outcome."""
        raise NotImplementedError

    # -- the connection, per owner loop ---------------------------------------------

    async def _local(self) -> Any:
        """This process's connection and write queue, made on first use (again after a fork)."""
        own = owner()
        local = self._state
        if local is None or local.owner is not own:
            if local is not None and local.conn is not None:
                _abandoned.append(local.conn)  # the parent's: never touch it
            local = self._state = self._new_local(own)
        if local.conn is None:
            async with local.starting:
                if local.conn is None:
                    local.conn = await self._open(local)
        return local

    @asynccontextmanager
    async def _using(self, action: str) -> AsyncIterator[Any]:
        """This process's connection state, counted as in use (close waits for it), with
        lost connections turned into ConnectionError and passwords kept out of errors."""
        async with self._talking(action):
            local = await self._local()
            local.busy += 1
            try:
                yield local
            finally:
                local.busy -= 1

    async def _checked_open(
        self, local: ServerLocal, conn: Any, check: Callable[[Any], Awaitable[None]]
    ) -> None:
        """Run ``check(conn)`` (the server's checks), closing ``conn`` if it fails and the
        store made it; else track it (see bridge.Closer)."""
        user = self._user_conn()
        try:
            await check(conn)
        except BaseException:
            if conn is not user:
                await self._close_conn(conn)
            raise
        if conn is not user:
            # Closed by close(), at exit, or (with a ResourceWarning) when the store is dropped.
            local.closer = local.owner.track(self, functools.partial(self._close_conn, conn))

    async def _close(self) -> None:
        own = owner()
        local = self._state
        if local is None or local.owner is not own:
            return
        await local.drain(10.0)  # operations under way finish first, on this connection
        self._state = None
        if local.closer is not None:
            local.closer.release()
        if local.conn is not None and local.conn is not self._user_conn():
            await self._close_conn(local.conn)

    # -- writes: queued, and sent in batches ----------------------------------------

    async def _queued(self, args: tuple[Any, ...]) -> Any:
        """Queue a write of ``args`` and return its outcome; if nobody is sending, send
        the queue, until this write is done."""
        async with self._talking("write"):
            local = await self._local()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        local.queue.append((args, future))
        if local.flushers < FLUSHERS:
            # Nobody is sending: this caller sends, until its own write is done.
            local.flushers += 1
            await self._flush(local, until=future)
        return await future

    async def _flush(self, local: Any, until: asyncio.Future[Any] | None = None) -> None:
        """Send the queue, batch by batch (until ``until`` is done, if given; then a task
        takes over what is left). ``local.flushers`` was counted up for this call."""
        try:
            while local.queue and not (until is not None and until.done()):
                batch, local.queue = local.queue[:MAX_BATCH], local.queue[MAX_BATCH:]
                await self._send_batch(local, batch)
        finally:
            local.flushers -= 1
            if until is not None and local.queue and local.flushers < FLUSHERS:
                local.flushers += 1
                local.spawn(self._flush(local))


def check_outcome(status: int, write: PreparedWrite, next_seq: Any) -> None:
    """Raise the error of a refused write (MISSING, EXISTS, GAP); return for OK and COMPARE."""
    sid = write.state_id
    if status == MISSING:
        raise missing_error(sid)
    if status == EXISTS:
        raise exists_error(sid)
    if status == GAP:
        plan_append(write, int(next_seq or 0))  # raises the gap error
        raise AssertionError(f"the server reported a gap at {next_seq} that is none")


def decode_stored(stored: list[Any], sid: str, place: str) -> list[Any]:
    """The stored entries a write must compare with, decoded (``place`` names where they are)."""
    try:
        return [orjson.loads(data) for data in stored]
    except orjson.JSONDecodeError as exc:
        raise CorruptStateError(
            f"State {sid!r}: an entry stored in {place} is not valid JSON: {exc}"
        ) from None


def kept_changing(sid: str) -> StateConflictError:
    """The error of a write whose State changed at every one of its MAX_COMPARES compares."""
    return StateConflictError(
        f"State {sid!r} kept changing while this write compared its entries with it "
        f"({MAX_COMPARES} tries); nothing was written. Read the State again and retry"
    )

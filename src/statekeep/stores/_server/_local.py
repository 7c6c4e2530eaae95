"""What a server store keeps in one process, on its owner loop.

A connection pool or client is bound to the event loop that made it, so a server store
keeps it, its write queue and the tasks it started in one :class:`ServerLocal` per process,
held in a :class:`statekeep._runtime.slot.ProcessSlot`: a forked child makes a new one and leaves
the parent's alone (never closing it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

from ..._runtime.bridge import Closer, Owner
from ._batches import WriteQueue

C = TypeVar("C")


class ServerLocal(Generic[C]):
    """The connection (``conn``: a pool or a client), the write queue, the operations in
    flight and the tasks of one server store in one process."""

    def __init__(self, own: Owner) -> None:
        self.owner = own
        self.starting = asyncio.Lock()  # one connect at a time
        self.conn: C | None = None
        self.writes: WriteQueue[Any, Any] = WriteQueue()
        self.tasks: set[asyncio.Task[None]] = set()
        self.closer: Closer | None = None  # closes a connection the store made
        self.busy = 0  # operations using the connection right now

    async def drain(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until no operation uses this any more."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (self.busy or not self.writes.idle or self.tasks) and loop.time() < deadline:
            await asyncio.sleep(0.005)

    async def let_go(self) -> None:
        """Give back what this keeps between operations (a store's hook), before closing ``conn``."""

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task that :meth:`drain` waits for."""
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


async def close_local(local: ServerLocal[C], close: Callable[[C], Awaitable[None]], conn: C) -> None:
    """What closes a connection a store made (see bridge.Closer): ``local`` gives back what
    it keeps first, then ``close(conn)``."""
    await local.let_go()
    await close(conn)

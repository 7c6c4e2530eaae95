"""How a caller gets an operation's outcome from the owner loop without ever blocking it.

The owner loop settles a caller's wait with a step that never waits for a lock the caller
may hold: a signal handler can interrupt the caller anywhere and call statekeep, which then
needs the owner loop. A sync caller waits on a plain lock of its own (:class:`Waiter`); an
async caller on another loop is woken with ``call_soon_threadsafe`` (:class:`Call`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def retrieved(task: asyncio.Task[object]) -> None:
    """Mark a task's error as seen: its caller may have stopped waiting (cancelled, or
    interrupted by Ctrl-C), and asyncio would log "Task exception was never retrieved"."""
    if not task.cancelled():
        task.exception()


class Waiter(Generic[T]):
    """A sync caller's wait for one operation's outcome.

    Settling releases a plain lock, which never blocks the owner loop. (Not a
    concurrent.futures.Future: its set_result takes a lock that the waiting thread holds
    inside result(), and a signal handler may interrupt that thread there and call
    statekeep, which then waits on the loop, which would wait on that lock.)
    """

    __slots__ = ("_ready", "_task")

    def __init__(self) -> None:
        self._ready = threading.Lock()
        self._ready.acquire()
        self._task: asyncio.Task[T] | None = None

    def settle(self, task: asyncio.Task[T]) -> None:
        """On the owner loop: hand the finished task over (never blocks)."""
        self._task = task
        self._ready.release()

    def wait(self) -> T:
        """Block until settled (a signal handler may run meanwhile); return or raise its outcome."""
        self._ready.acquire()
        task = self._task
        assert task is not None
        if task.cancelled():
            raise concurrent.futures.CancelledError()
        return task.result()


class Call(Generic[T]):
    """An async caller's wait, on its own loop, for one operation on the owner loop.

    The owner loop hands the finished task over with ``call_soon_threadsafe``, which never
    blocks it. A cancelled caller reports only once the outcome is settled: if the owner
    loop has not started the operation yet, the caller drops it, and it never runs;
    otherwise the caller waits for it to end. Either way, CancelledError is raised after.
    Who goes first is decided by ``ticket``, a list of one item that the owner loop pops
    to start the operation and the caller pops to drop it: ``list.pop`` is atomic, so
    exactly one side gets it, and neither ever waits for the other.
    """

    __slots__ = ("_loop", "_task", "_wake", "ticket")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._wake: asyncio.Future[None] = loop.create_future()
        self._task: asyncio.Task[T] | None = None
        self.ticket: list[None] = [None]

    def done(self, task: asyncio.Task[T]) -> None:
        """On the owner loop: hand the finished task over to the caller's loop (never blocks)."""
        try:
            self._loop.call_soon_threadsafe(self._settle, task)
        except RuntimeError:
            pass  # the caller's loop is closed: nobody waits any more; the outcome stands

    def _settle(self, task: asyncio.Task[T]) -> None:
        self._task = task
        if not self._wake.done():
            self._wake.set_result(None)

    async def outcome(self, coro: Coroutine[Any, Any, T]) -> T:
        """On the caller's loop: the operation's result or error, or CancelledError (the
        caller's own) once the operation ended or was dropped before it started."""
        try:
            await self._wake
        except asyncio.CancelledError:
            if self._task is None:
                try:
                    self.ticket.pop()
                except IndexError:  # started: it runs to its end, and the caller waits for it
                    while self._task is None:
                        self._wake = self._loop.create_future()
                        try:
                            await self._wake
                        except asyncio.CancelledError:
                            pass  # cancelled again: the first cancellation is raised below
                else:
                    coro.close()  # dropped: the owner loop never starts it
            raise
        task = self._task
        assert task is not None
        return task.result()


async def finished(fut: asyncio.Future[Any]) -> None:
    """Wait until ``fut`` is done, whatever cancels the waiting task meanwhile."""
    while not fut.done():
        try:
            await asyncio.wait((fut,))
        except asyncio.CancelledError:
            pass  # the caller raises its own CancelledError once this returns

"""The write queue of a server store in one process: writes that wait at the same moment
go to the server together, each still with its own outcome.

This is a second group-commit engine beside :class:`statekeep._runtime.batching.GroupCommit`
(FileStore's and SQLiteStore's), on purpose. GroupCommit runs a blocking commit on a worker thread, one batch
at a time, and each caller learns only success or an error. A server store talks to its
server with async I/O on the owner loop itself (no thread), each write gets back a value
(the server's answer: its status, next seq and stored entries), and the first writer to
arrive sends the batches itself, until its own write is done, instead of waking a
flusher task: a write alone then costs no task switch. Whatever is left is sent by a task
of the store's, which :meth:`ServerLocal.drain` waits for on close.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

from ..._runtime.telemetry import Op, note_batch, recording

A = TypeVar("A")  # what a write sends
R = TypeVar("R")  # what the server answers

#: Writes of one batch at most, and batches in flight at once, per store and process.
MAX_BATCH = 256
FLUSHERS = 1

#: A queued write: its arguments, and the future that gets the server's answer.
Queued = tuple[A, asyncio.Future[R]]


class WriteQueue(Generic[A, R]):
    """The writes of one store waiting in one process, and how many callers send them."""

    __slots__ = ("flushers", "items", "noted")

    def __init__(self) -> None:
        self.items: list[Queued[A, R]] = []
        self.flushers = 0
        # The telemetry operation of each queued write that is recorded, told its batch's size.
        self.noted: dict[asyncio.Future[Any], Op] = {}

    @property
    def idle(self) -> bool:
        """Nothing waits and nobody sends."""
        return not (self.items or self.flushers)

    async def submit(
        self,
        args: A,
        send: Callable[[list[Queued[A, R]]], Awaitable[None]],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> R:
        """Queue a write of ``args`` and return the server's answer. If nobody is sending,
        this caller sends the queue with ``send(batch)`` (which settles each write's
        future) until its own write is done; ``spawn`` starts the task that sends the rest."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self.items.append((args, future))
        op = recording.get()
        if op is not None:
            self.noted[future] = op
        if self.flushers < FLUSHERS:
            self.flushers += 1
            await self._flush(send, spawn, until=future)
        return await future

    async def _flush(
        self,
        send: Callable[[list[Queued[A, R]]], Awaitable[None]],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        until: asyncio.Future[R] | None = None,
    ) -> None:
        """Send the queue, batch by batch (until ``until`` is done, if given; then a task
        takes over what is left). ``flushers`` was counted up for this call."""
        try:
            while self.items and not (until is not None and until.done()):
                batch, self.items = self.items[:MAX_BATCH], self.items[MAX_BATCH:]
                if self.noted:
                    for _, future in batch:
                        note_batch(self.noted.pop(future, None), len(batch))
                await send(batch)
        finally:
            self.flushers -= 1
            if until is not None and self.items and self.flushers < FLUSHERS:
                self.flushers += 1
                spawn(self._flush(send, spawn))

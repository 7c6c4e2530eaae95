"""Group commit: operations waiting at the same moment are committed together.

A store hands each operation to :meth:`GroupCommit.submit`; one flusher task on the owner
loop takes everything waiting, runs the store's blocking ``commit`` on a worker thread
(one batch at a time), and gives each caller its own outcome. While a batch commits, the
next one gathers, so concurrent callers share flushes without any waiting on purpose.

FileStore and SQLiteStore use it. The server stores have a second engine
(``stores._server._batches``): their writes are async I/O on the owner loop that each get a
value back from the server, not a blocking commit on a worker thread; its docstring says more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

from ._bridge import owner
from ._slot import ProcessSlot

T = TypeVar("T")


class _Queue(Generic[T]):
    """What waits to be committed in one process, and the task committing it."""

    __slots__ = ("flusher", "items")

    def __init__(self) -> None:
        self.items: list[tuple[T, asyncio.Future[None]]] = []
        self.flusher: asyncio.Task[None] | None = None


class GroupCommit(Generic[T]):
    """The queue of one store in one process; a forked child starts with an empty one."""

    def __init__(
        self,
        commit: Callable[[list[T]], list[BaseException | None]],
        *,
        max_batch: int | Callable[[], int] | None = None,
    ) -> None:
        """``max_batch``: most operations per commit (None: no cap), or a function that
        gives it when each batch is cut (for a cap that follows a limit that may change)."""
        self._commit = commit  # blocking: returns each operation's error, or None
        self._max = max_batch
        self._queues: ProcessSlot[_Queue[T]] = ProcessSlot(lambda own: _Queue())

    @property
    def queue(self) -> list[tuple[T, asyncio.Future[None]]]:
        """The operations waiting in this process (not yet taken into a batch)."""
        queue = self._queues.current()
        return [] if queue is None else queue.items

    async def submit(self, item: T) -> None:
        """Queue ``item`` (on the owner loop) and return once its batch is committed."""
        queue = self._queues.get()
        fut = asyncio.get_running_loop().create_future()
        queue.items.append((item, fut))
        if queue.flusher is None:
            queue.flusher = asyncio.get_running_loop().create_task(self._flush(queue))
        await fut

    async def drain(self) -> None:
        """Wait until everything queued in this process is committed."""
        queue = self._queues.current()
        while queue is not None and queue.flusher is not None:
            await asyncio.wait({queue.flusher})

    async def _flush(self, queue: _Queue[T]) -> None:
        try:
            while queue.items:
                cap = self._max() if callable(self._max) else self._max
                cut = len(queue.items) if cap is None else max(1, cap)
                batch, queue.items = queue.items[:cut], queue.items[cut:]
                try:
                    errors = await owner().io.run(self._commit, [item for item, _ in batch])
                except BaseException as exc:  # the whole batch failed
                    errors = [exc] * len(batch)
                for (_, fut), error in zip(batch, errors, strict=True):
                    if fut.done():
                        continue
                    if error is None:
                        fut.set_result(None)
                    else:
                        fut.set_exception(error)
        finally:
            queue.flusher = None

"""Group commit: operations waiting at the same moment are committed together.

A store hands each operation to :meth:`GroupCommit.submit`; one flusher task on the owner
loop takes everything waiting, runs the store's blocking ``commit`` on a worker thread
(one batch at a time), and gives each caller its own outcome. While a batch commits, the
next one gathers, so concurrent callers share flushes without any waiting on purpose.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

from ._bridge import owner

T = TypeVar("T")


class GroupCommit(Generic[T]):
    """The queue of one store in one process; it starts over after a fork."""

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
        self._owner: object = None
        self.queue: list[tuple[T, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def submit(self, item: T) -> None:
        """Queue ``item`` (on the owner loop) and return once its batch is committed."""
        own = owner()
        if self._owner is not own:  # first use, or a fork: the old queue is gone
            self._owner, self.queue, self._flusher = own, [], None
        fut = own.loop.create_future()
        self.queue.append((item, fut))
        if self._flusher is None:
            self._flusher = own.loop.create_task(self._flush())
        await fut

    async def drain(self) -> None:
        """Wait until everything queued in this process is committed."""
        while self._owner is owner() and self._flusher is not None:
            await asyncio.wait({self._flusher})

    async def _flush(self) -> None:
        try:
            while self.queue:
                cap = self._max() if callable(self._max) else self._max
                cut = len(self.queue) if cap is None else max(1, cap)
                batch, self.queue = self.queue[:cut], self.queue[cut:]
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
            self._flusher = None

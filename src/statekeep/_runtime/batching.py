"""Group commit: operations waiting at the same moment are committed together.

A store hands each operation to :meth:`GroupCommit.submit`; one flusher task on the owner
loop takes everything waiting, has the store's blocking ``commit`` run off the loop (one
batch at a time), and gives each caller its own outcome. While a batch commits, the next
one gathers, so concurrent callers share flushes without any waiting on purpose.

Where the commit runs, and who wakes whom, decides how many thread hand-offs a write
costs. The flusher grants the batch to a sync caller in it that may commit in its own
thread (:meth:`statekeep._runtime.handoff.Waiter.grant` says which may); else a worker thread
commits it. Either way, the committing thread wakes each direct caller of the batch
(:data:`statekeep._runtime.handoff.direct_caller`) itself, then reports to the loop, where the
operations' tasks end and release their locks with nobody waiting for that. A sync write:
caller -> loop -> caller (granted), or caller -> loop -> worker -> caller (main thread);
an async write from another loop: caller -> loop -> worker -> caller; both two hand-offs
when the store can commit on the loop (below).

A store may also give ``commit_now``: the same commit, but one that must not wait (for a
lock another process holds, say), raising :class:`WouldBlock` before it changes anything
if it would. A batch of one write is first tried that way on the loop itself, which then
wakes its caller directly: a sync write from any thread, or an async one from another
loop, costs two hand-offs (caller -> loop -> caller). It holds up the loop for one write's
I/O (one fsync), no longer: whatever would wait goes to a worker as above.

A write that finds the store's queue idle (nothing queued or committing) and no other
operation posted to the loop that has not begun yet commits alone, without the flusher:
in its own step (``commit_now`` on the loop, for a caller that may not commit in its
thread), or granted to its caller, or in a worker, its operation waiting on a
:class:`~statekeep._runtime.eager.Wakeup` that the commit's report resumes directly. Writes
submitted meanwhile queue behind it and go to the flusher once it is done. Without the
second condition, writes posted together would commit alone one after another instead of
in one batch.

FileStore and SQLiteStore use it. The server stores have a second engine
(``stores._server._batches``): their writes are async I/O on the owner loop that each get a
value back from the server, not a blocking commit on a worker thread; its docstring says more.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Generic, TypeVar

from .bridge import owner
from .eager import Wakeup
from .handoff import Direct, direct_caller
from .slot import ProcessSlot
from .telemetry import Op, note_batch, recording

T = TypeVar("T")
Errors = list[BaseException | None]


class WouldBlock(Exception):
    """Raised by a ``commit_now`` that cannot go on without waiting; nothing was changed."""


class _Queue(Generic[T]):
    """What waits to be committed in one process, and the task committing it (or the
    future of a lone write committing without one: see :meth:`GroupCommit.submit`)."""

    __slots__ = ("alone", "flusher", "items")

    def __init__(self) -> None:
        # Each with the telemetry operation it is part of (None: not recorded).
        self.items: list[tuple[T, asyncio.Future[None], Direct | None, Op | None]] = []
        self.flusher: asyncio.Task[None] | None = None
        self.alone: asyncio.Future[Errors] | None = None

    def idle(self) -> bool:
        """Nothing is queued or committing (a queue is only ever left empty when idle)."""
        return self.flusher is None and self.alone is None


class _Job(Generic[T]):
    """One batch: committed by whichever thread runs it, which then wakes the direct callers
    and reports each operation's error to the loop."""

    __slots__ = ("_callers", "_commit", "_items", "report")

    def __init__(
        self, commit: Callable[[list[T]], Errors], items: list[T], callers: list[Direct | None]
    ) -> None:
        self._commit = commit
        self._items = items
        self._callers = callers
        self.report: Callable[[Errors], None] | None = None

    def run(self, commit: Callable[[list[T]], Errors] | None = None) -> Errors:
        """Commit (with ``commit`` if given: WouldBlock from it passes through, nobody
        told), wake the direct callers, report."""
        try:
            errors = (commit or self._commit)(self._items)
        except WouldBlock:
            if commit is None:
                raise AssertionError("only commit_now may raise WouldBlock") from None
            raise
        except BaseException as exc:  # the whole batch failed
            errors = [exc] * len(self._items)
        for caller, error in zip(self._callers, errors, strict=True):
            if caller is not None:
                caller.deliver(error)
        if self.report is not None:
            self.report(errors)
        return errors


class GroupCommit(Generic[T]):
    """The queue of one store in one process; a forked child starts with an empty one."""

    def __init__(
        self,
        commit: Callable[[list[T]], Errors],
        *,
        max_batch: int | Callable[[], int] | None = None,
        commit_now: Callable[[list[T]], Errors] | None = None,
    ) -> None:
        """``max_batch``: most operations per commit (None: no cap), or a function that
        gives it when each batch is cut (for a cap that follows a limit that may change).
        ``commit`` blocks; it returns each operation's error, or None; it may run in any
        thread but the loop's, one call at a time per store and process."""
        self._commit = commit
        self._now = commit_now
        self._max = max_batch
        self._queues: ProcessSlot[_Queue[T]] = ProcessSlot(lambda own: _Queue())

    @property
    def queue(self) -> list[tuple[T, asyncio.Future[None]]]:
        """The operations waiting in this process (not yet taken into a batch)."""
        queue = self._queues.current()
        return [] if queue is None else [(item, fut) for item, fut, _, _ in queue.items]

    async def submit(self, item: T) -> None:
        """Queue ``item`` (on the owner loop) and return once its batch is committed.

        A write that finds nothing queued or committing, and no other operation posted to
        the loop that has not begun yet (which may bring a write to batch with it), is
        committed alone, in this step where it can be: no flusher, no future.
        """
        queue = self._queues.get()
        caller = direct_caller.get()
        op = recording.get()
        if caller is not None:
            direct_caller.set(None)  # its outcome is this item's; nothing else may claim it
        if queue.idle() and not owner().posted:
            note_batch(op, 1)
            now = self._now
            on_loop = now is not None and caller is not None and not caller.runs_batches
            if now is not None and on_loop and asyncio.current_task() is None:
                # In the operation's first step (no Task runs it): committed here if it need
                # not wait, and its caller gets the outcome when the step ends, its lock
                # released (not woken now, to wait for this thread).
                try:
                    errors = now([item])
                except WouldBlock:
                    pass
                else:
                    if errors[0] is not None:
                        raise errors[0]
                    return
                on_loop = False  # it would wait: not tried again
            await self._alone(queue, item, caller, on_loop)
            return
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        queue.items.append((item, fut, caller, op))
        if queue.idle():
            self._start_flusher(queue, loop)
        await fut

    def _start_flusher(self, queue: _Queue[T], loop: asyncio.AbstractEventLoop) -> None:
        queue.flusher = loop.create_task(self._flush(queue, loop))

    async def _alone(self, queue: _Queue[T], item: T, caller: Direct | None, on_loop: bool) -> None:
        """Commit ``item`` as a batch of one, as the flusher would (see the module's
        docstring for where), without it: writes submitted meanwhile queue behind it.
        ``on_loop``: try ``commit_now`` on the loop first (under a Task: the committing
        thread wakes the caller)."""
        job = _Job(self._commit, [item], [caller])
        errors = None
        if on_loop:
            try:
                errors = job.run(self._now)  # on the loop, if it need not wait
            except WouldBlock:
                pass
        if errors is None:
            # Woken by the committing thread's report, which resumes this operation at once
            # (see Wakeup): its lock is released before the loop begins the next one.
            loop = asyncio.get_running_loop()
            done: Wakeup[Errors] = Wakeup(loop=loop)
            queue.alone = done
            job.report = functools.partial(_report, loop, functools.partial(self._reported, queue, done))
            if caller is not None and caller.runs_batches:
                caller.grant(job)
            else:
                owner().io.submit(_run, job)
            errors = await done
        error = errors[0]
        if error is not None and caller is None:
            raise error  # a direct caller has it already (and it is not raised in two threads)

    def _reported(self, queue: _Queue[T], done: Wakeup[Errors], errors: Errors) -> None:
        """On the loop: a lone write's commit ended; what queued meanwhile goes next."""
        queue.alone = None
        if queue.items:
            self._start_flusher(queue, asyncio.get_running_loop())
        done.wake(errors)

    async def drain(self) -> None:
        """Wait until everything queued in this process is committed."""
        queue = self._queues.current()
        while queue is not None:
            busy: asyncio.Future[object] | None = queue.flusher or queue.alone  # type: ignore[assignment]
            if busy is None:
                return
            await asyncio.wait({busy})

    async def _flush(self, queue: _Queue[T], loop: asyncio.AbstractEventLoop) -> None:
        try:
            while queue.items:
                cap = self._max() if callable(self._max) else self._max
                cut = len(queue.items) if cap is None else max(1, cap)
                batch, queue.items = queue.items[:cut], queue.items[cut:]
                callers = [caller for _, _, caller, _ in batch]
                for *_, op in batch:
                    note_batch(op, len(batch))
                job = _Job(self._commit, [item for item, _, _, _ in batch], callers)
                runner = next((c for c in callers if c is not None and c.runs_batches), None)
                try:
                    errors = None
                    # On the loop only for a caller waiting in another thread or loop: one
                    # awaiting on this loop would be held up by its own write.
                    if (
                        runner is None
                        and self._now is not None
                        and len(callers) == 1
                        and callers[0] is not None
                    ):
                        try:
                            errors = job.run(self._now)  # on the loop, if it need not wait
                        except WouldBlock:
                            pass
                    if errors is not None:
                        pass
                    elif runner is None:
                        errors = await owner().io.run(job.run)
                    else:
                        reported: asyncio.Future[Errors] = loop.create_future()
                        job.report = functools.partial(_report, loop, functools.partial(_resolve, reported))
                        runner.grant(job)
                        errors = await reported
                except BaseException as exc:  # never for a job (run catches all), but be sure
                    errors = [exc] * len(batch)
                for (_, fut, caller, _), error in zip(batch, errors, strict=True):
                    if fut.done():
                        continue
                    if error is None or caller is not None:
                        # A direct caller has its outcome already; its task only ends,
                        # releasing the lock (and the error is not raised in two threads).
                        fut.set_result(None)
                    else:
                        fut.set_exception(error)
        finally:
            queue.flusher = None


def _report(loop: asyncio.AbstractEventLoop, settle: Callable[[Errors], None], errors: Errors) -> None:
    """From the committing thread: hand the errors to the loop (nobody waits for this)."""
    loop.call_soon_threadsafe(settle, errors)


def _run(job: _Job[T]) -> None:
    """In a worker thread: a lone write's job, which reports whatever happens."""
    try:
        job.run()
    except BaseException as exc:  # never (run catches all), but its report must come
        if job.report is not None:
            job.report([exc] * len(job._items))


def _resolve(fut: asyncio.Future[Errors], errors: Errors) -> None:
    if not fut.done():
        fut.set_result(errors)

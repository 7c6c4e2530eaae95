"""How a caller gets an operation's outcome from the owner loop without ever blocking it.

The owner loop settles a caller's wait with a step that never waits for a lock the caller
may hold: a signal handler can interrupt the caller anywhere and call statekeep, which then
needs the owner loop. A sync caller waits on a plain lock of its own (:class:`Waiter`); an
async caller on another loop is woken with ``call_soon_threadsafe`` (:class:`Call`).

A write's outcome is known as soon as its batch is committed (what is left on the loop is
releasing the State's lock). So a sync write or delete, and an async one from another loop,
is a *direct* caller (:data:`direct_caller`, set in its task's context): the thread that
committed the batch wakes it at once, and posts the rest to the loop, where nobody waits
for it. (A lone write committed on the loop in its operation's first step is settled when
that step ends, a moment later, its lock released: see :meth:`~statekeep._runtime.batching.GroupCommit.submit`.) A sync caller may even be *granted* the batch and commit it in its own thread (see
:meth:`Waiter.grant` for which threads may).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

if TYPE_CHECKING:
    from .eager import Outcome

T = TypeVar("T")


class Job(Protocol):
    """A batch the owner loop granted to a sync caller, to commit in the caller's thread."""

    def run(self) -> object:
        """Commit, deliver every direct caller's outcome, report back to the loop; never raises."""


class Direct(Protocol):
    """A caller whose operation's outcome is the outcome of the one batch item it submits."""

    @property
    def runs_batches(self) -> bool:
        """Whether the loop may grant it a batch to commit in its own thread."""

    def deliver(self, error: BaseException | None) -> None:
        """From any thread: the operation is settled (None: it succeeded). Never blocks."""

    def grant(self, job: Job) -> None:
        """On the owner loop: hand over a batch to commit (only if :attr:`runs_batches`)."""


#: In a task's context on the owner loop: the direct caller of the operation it runs, until
#: the operation submits its batch item (GroupCommit takes it then).
direct_caller: contextvars.ContextVar[Direct | None] = contextvars.ContextVar("direct_caller", default=None)


def retrieved(task: asyncio.Task[object]) -> None:
    """Mark a task's error as seen: its caller may have stopped waiting (cancelled, or
    interrupted by Ctrl-C), and asyncio would log "Task exception was never retrieved"."""
    if not task.cancelled():
        task.exception()


def _of_task(task: Outcome[T]) -> Callable[[], T]:
    if task.cancelled():
        return _raiser(concurrent.futures.CancelledError())
    return task.result


def _delivered(error: BaseException | None) -> Callable[[], Any]:
    return (lambda: None) if error is None else _raiser(error)


def _raiser(error: BaseException) -> Callable[[], Any]:
    def outcome() -> Any:
        raise error

    return outcome


class Waiter(Generic[T]):
    """A sync caller's wait for one operation's outcome.

    Settling releases a plain lock, which never blocks the owner loop. (Not a
    concurrent.futures.Future: its set_result takes a lock that the waiting thread holds
    inside result(), and a signal handler may interrupt that thread there and call
    statekeep, which then waits on the loop, which would wait on that lock.)
    """

    __slots__ = ("_job", "_outcome", "_ready", "runs_batches")

    def __init__(self, *, runs_batches: bool = False) -> None:
        self._ready = threading.Lock()
        self._ready.acquire()
        self._outcome: Callable[[], T] | None = None
        self._job: Job | None = None
        self.runs_batches = runs_batches

    def settle(self, task: Outcome[T]) -> None:
        """On the owner loop: the task ended (never blocks). Ignored if the outcome was
        delivered already: it always is before the task ends, when it is delivered at all."""
        if self._outcome is None:
            self._outcome = _of_task(task)
            self._ready.release()

    def deliver(self, error: BaseException | None) -> None:
        self._outcome = cast(Callable[[], T], _delivered(error))
        self._ready.release()

    def grant(self, job: Job) -> None:
        """On the owner loop: this caller commits ``job`` in its own thread, then returns.

        Only a thread where no code of the caller's can run in the middle of the commit may
        take one: the commit holds the State's lock and the store's turn to commit, so a
        call to the same store made from inside it (a signal handler that saves, say) would
        wait for the commit beneath it forever. Python runs signal handlers, and so
        KeyboardInterrupt, in the main thread only: the main thread never takes a batch
        (its write goes to a worker thread, which wakes it directly). In another thread,
        only a finalizer or trace function could call statekeep inside the commit: a read,
        or a write to another store, works (a batch of another store granted there is
        committed there, nested); a write to the same store would wait forever, as it
        would in a worker thread, where such finalizers may run as well.
        """
        self._job = job
        self._ready.release()

    def wait(self) -> T:
        """Block until settled (a signal handler may run meanwhile); return or raise its
        outcome. A granted batch is committed here first."""
        self._ready.acquire()
        job = self._job
        if job is not None:
            self._job = None
            job.run()  # delivers this caller's outcome too
        outcome = self._outcome
        assert outcome is not None
        return outcome()


class CallerWait(Generic[T]):
    """What an async caller's wait (:class:`Call`, or trio's in :mod:`statekeep._runtime.elsewhere`)
    does on the owner loop: take the first outcome, hand it to the caller's loop with that
    loop's thread-safe, non-blocking call (:meth:`_post`), and wake the caller there
    (:meth:`_wake_up`). ``ticket`` decides whether the operation starts (see :class:`Call`)."""

    __slots__ = ("_outcome", "ticket")

    runs_batches = False  # never commits in the caller's loop thread, which it would block

    def __init__(self) -> None:
        self._outcome: Callable[[], T] | None = None
        self.ticket: list[None] = [None]

    def done(self, task: Outcome[T]) -> None:
        """On the owner loop: hand the finished task over to the caller's loop (never blocks)."""
        self._send(_of_task(task))

    def deliver(self, error: BaseException | None) -> None:
        self._send(_delivered(error))

    def grant(self, job: Job) -> None:
        raise AssertionError("an async caller is never granted a batch")

    def _send(self, outcome: Callable[[], T]) -> None:
        try:
            self._post(self._settle, outcome)
        except RuntimeError:
            pass  # the caller's loop is closed (or its trio run ended): the outcome stands

    def _post(self, fn: Callable[[Callable[[], T]], None], outcome: Callable[[], T]) -> None:
        """From any thread: have ``fn(outcome)`` called on the caller's loop soon (never blocks)."""
        raise NotImplementedError

    def _settle(self, outcome: Callable[[], T]) -> None:
        if self._outcome is None:  # the first is the outcome; the task's end may follow
            self._outcome = outcome
            self._wake_up()

    def _wake_up(self) -> None:
        """On the caller's loop: the outcome is in."""
        raise NotImplementedError


class Call(CallerWait[T]):
    """An async caller's wait, on its own loop, for one operation on the owner loop.

    The owner loop hands the finished task over with ``call_soon_threadsafe``, which never
    blocks it. A cancelled caller reports only once the outcome is settled: if the owner
    loop has not started the operation yet, the caller drops it, and it never runs;
    otherwise the caller waits for it to end. Either way, CancelledError is raised after.
    Who goes first is decided by ``ticket``, a list of one item that the owner loop pops
    to start the operation and the caller pops to drop it: ``list.pop`` is atomic, so
    exactly one side gets it, and neither ever waits for the other.
    """

    __slots__ = ("_loop", "_wake")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._loop = loop
        self._wake: asyncio.Future[None] = loop.create_future()

    def _post(self, fn: Callable[[Callable[[], T]], None], outcome: Callable[[], T]) -> None:
        self._loop.call_soon_threadsafe(fn, outcome)

    def _wake_up(self) -> None:
        if not self._wake.done():
            self._wake.set_result(None)

    async def outcome(self, coro: Coroutine[Any, Any, T]) -> T:
        """On the caller's loop: the operation's result or error, or CancelledError (the
        caller's own) once the operation ended or was dropped before it started."""
        try:
            await self._wake
        except asyncio.CancelledError:
            if self._outcome is None:
                try:
                    self.ticket.pop()
                except IndexError:  # started: it runs to its end, and the caller waits for it
                    while self._outcome is None:
                        self._wake = self._loop.create_future()
                        try:
                            await self._wake
                        except asyncio.CancelledError:
                            pass  # cancelled again: the first cancellation is raised below
                else:
                    coro.close()  # dropped: the owner loop never starts it
            raise
        outcome = self._outcome
        assert outcome is not None
        return outcome()


async def finished(fut: asyncio.Future[Any]) -> None:
    """Wait until ``fut`` is done, whatever cancels the waiting task meanwhile."""
    while not fut.done():
        try:
            await asyncio.wait((fut,))
        except asyncio.CancelledError:
            pass  # the caller raises its own CancelledError once this returns

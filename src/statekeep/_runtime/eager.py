"""Starting an operation eagerly: its first step runs at once, a Task only if it waits.

Most operations of the built-in stores never wait on the owner loop (a read or a lone write
commits in the same step), so a Task for them is pure cost: its creation, a turn of the loop
for its first step and another for its done callbacks. :func:`first_step` runs the
coroutine up to its first wait in the caller's step; only then does :func:`rest` hand it to
a Task, which re-yields the future it waits on and from then on steps it like its own, in
the same context. (Python 3.12's ``eager_start`` does the same; 3.11 is the floor.)

An operation started by the owner loop (not by a caller already on it) that waits on a
:class:`Wakeup` needs no Task either: whoever settles it on the loop resumes the operation
right there (a write waiting for the commit granted to its caller's thread, say), so the
operation is done, its lock released, before the loop takes its next callback.

In the first step no Task is current (``asyncio.current_task()`` is None, or the caller's
own on the owner loop), so code that needs its own Task there (``asyncio.timeout``, which
redis-py and asyncpg use) must not be started eagerly: the stores that run it say so
(``Backend._eager``).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Outcome(Protocol[T_co]):
    """How an operation ended: its Task, or a :class:`Finished` when it needed none."""

    def cancelled(self) -> bool: ...

    def result(self) -> T_co: ...


class Finished(Generic[T]):
    """The outcome of an operation that ended in its first step (what its Task would hold)."""

    __slots__ = ("_error", "_value")

    def __init__(self, value: T | None, error: BaseException | None) -> None:
        self._value = value
        self._error = error

    def cancelled(self) -> bool:
        return isinstance(self._error, asyncio.CancelledError)

    def result(self) -> T:
        """The value, or the error raised as is (a cancellation as asyncio's, as a Task's
        result does; the sync caller's wait turns it into its own, see ``_handoff._of_task``)."""
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


#: What :func:`first_step` returns: the outcome if it ended, else what it waits on.
Step = tuple[Finished[T] | None, Any]


def first_step(coro: Coroutine[Any, Any, T], ctx: contextvars.Context) -> Step[T]:
    """Run ``coro`` in ``ctx`` up to its first wait: (its outcome, None) if it ended there,
    else (None, the future it yielded). KeyboardInterrupt and SystemExit propagate, as out
    of a Task (after the outcome is settled: see :func:`settled`)."""
    try:
        pending = ctx.run(coro.send, None)
    except StopIteration as stop:
        return Finished(stop.value, None), None
    except BaseException as exc:
        return Finished(None, exc), None
    return None, pending


def reraise_fatal(outcome: Finished[Any]) -> None:
    """As a Task does: KeyboardInterrupt and SystemExit also stop the loop."""
    if isinstance(outcome._error, (KeyboardInterrupt, SystemExit)):
        raise outcome._error


class Wakeup(asyncio.Future[T]):
    """A future that, settled with :meth:`wake`, also resumes the operation waiting on it
    when no Task runs that operation (see :meth:`~statekeep._runtime.bridge.Owner.start`); under a
    Task it is a plain future."""

    _resume: Callable[[], None] | None = None

    def free(self) -> bool:
        """Whether nobody resumes on it yet."""
        return self._resume is None and not self.done()

    def then(self, resume: Callable[[], None]) -> None:
        """Have :meth:`wake` call ``resume()`` (once), after settling the future."""
        self._resume = resume

    def wake(self, value: T) -> None:
        """On the loop: settle with ``value``, then resume the operation waiting, if any."""
        if not self.done():  # else its waiter was cancelled, and nobody resumes on it
            self.set_result(value)
            self._resumed()

    def fail(self, error: BaseException) -> None:
        """As :meth:`wake`, with ``error`` raised to the waiter."""
        if not self.done():
            self.set_exception(error)
            self._resumed()

    def _resumed(self) -> None:
        resume, self._resume = self._resume, None
        if resume is not None:
            resume()


async def rest(coro: Coroutine[Any, Any, T], pending: Any) -> T:
    """The rest of ``coro``, suspended on ``pending``, for a Task to run: it yields
    ``pending`` to the Task first, then passes every value and exception (a cancellation)
    through to ``coro``. (A coroutine, not a generator: asyncio 3.12 takes no generators.)"""
    while True:
        try:
            try:
                value = await _Yield(pending)
            except BaseException as exc:
                pending = coro.throw(exc)
            else:
                pending = coro.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


class _Yield:
    """Awaiting it yields ``pending`` to the Task as is (a future it then waits on)."""

    __slots__ = ("_pending",)

    def __init__(self, pending: Any) -> None:
        self._pending = pending

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield self._pending)

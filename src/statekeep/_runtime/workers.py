"""A small pool of daemon threads for blocking I/O (write, fsync, read).

Not ``concurrent.futures.ThreadPoolExecutor``: that one refuses new work once the
interpreter starts shutting down, before the non-daemon threads that may still be
saving are joined. These threads take work until the process ends. Jobs given to one
pool must never wait on other jobs of the same pool (use a second pool for that), or a
full pool could wait on itself.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar, TypeVarTuple

from .eager import Wakeup

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class Workers:
    """Threads started on demand, up to ``max_threads``, that stay for the next job."""

    def __init__(self, name: str, max_threads: int) -> None:
        self._name = name
        self._max = max_threads
        self._jobs: queue.SimpleQueue[tuple[Future[Any] | None, Callable[..., object], tuple[object, ...]]]
        self._jobs = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads waiting for a job
        self._pending = 0  # jobs no thread has taken yet

    def submit(self, fn: Callable[[*Ts], T], *args: *Ts) -> Future[T]:
        """Run ``fn(*args)`` on a pool thread; the returned future has its outcome."""
        fut: Future[T] = Future()
        self._put(fut, fn, args)
        return fut

    def run(self, fn: Callable[[*Ts], T], *args: *Ts) -> asyncio.Future[T]:
        """Like :meth:`submit`, as an awaitable for the running event loop: a
        :class:`~statekeep._runtime.eager.Wakeup`, so an operation that waits on it alone needs no
        Task (see :meth:`~statekeep._runtime.bridge.Owner.start`)."""
        loop = asyncio.get_running_loop()
        done: Wakeup[T] = Wakeup(loop=loop)
        self._put(None, functools.partial(_settle, loop, done, fn), args)
        return done

    def _put(self, fut: Future[Any] | None, fn: Callable[..., object], args: tuple[object, ...]) -> None:
        self._jobs.put((fut, fn, args))
        with self._lock:
            self._pending += 1
            if self._pending > self._idle and self._threads < self._max:
                self._threads += 1
                self._idle += 1
                threading.Thread(target=self._work, name=f"{self._name}-{self._threads}", daemon=True).start()

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            fut, fn, args = jobs.get()
            with self._lock:
                self._idle -= 1
                self._pending -= 1
            if fut is None:
                fn(*args)  # reports its own outcome (never raises)
            elif fut.set_running_or_notify_cancel():
                try:
                    result = fn(*args)
                except BaseException as exc:  # handed to the waiter, whatever it is
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)
            del fut, fn, args
            with self._lock:
                self._idle += 1


def _settle(loop: asyncio.AbstractEventLoop, done: Wakeup[T], fn: Callable[..., T], *args: object) -> None:
    """In a pool thread: run ``fn(*args)`` and hand its outcome to ``done`` on ``loop``."""
    try:
        result = fn(*args)
    except BaseException as exc:  # handed to the waiter, whatever it is
        settle, outcome = done.fail, exc
    else:
        settle, outcome = done.wake, result  # type: ignore[assignment]
    try:
        loop.call_soon_threadsafe(settle, outcome)
    except RuntimeError:
        pass  # the loop is closed: nobody waits any more

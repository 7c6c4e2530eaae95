"""The owner loop: one private event loop per process that runs every store operation.

Sync methods submit their coroutine to it and block on the result; async methods on
another loop submit the same way and await; on the owner loop itself they just run. So
a per-State ``asyncio.Lock`` that only this loop touches serialises every writer, sync or
async, from any thread. Blocking I/O never runs on this loop's thread, so one slow fsync
does not stall other States: it runs in worker threads, or, for a batch of writes the loop
granted to a sync caller, in that caller's thread (see :mod:`statekeep._runtime.batching`).

After ``os.fork()`` the child forgets the parent's loop, threads and locks (without
closing them) and starts fresh on first use. At exit, new work is refused, in-flight
operations get a bounded time to finish, and the loop stops: the process never hangs.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import functools
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .eager import Outcome, Wakeup, first_step, reraise_fatal, rest
from .handoff import Call, Direct, Waiter, direct_caller, finished, retrieved
from .statelocks import StateLocks
from .workers import Workers

T = TypeVar("T")

#: How long interpreter exit waits for operations already under way.
EXIT_GRACE_SECONDS = 10.0


class Owner(StateLocks):
    """The loop, its thread, the worker pools and the per-State locks of one process."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.io = Workers("statekeep-io", 64)
        # For jobs that io jobs wait on; they never wait themselves (see Workers).
        self.aux = Workers("statekeep-aux", 64)
        # What the exit drain waits for: operations' Tasks, and the Wakeups of those that wait without one.
        self.tasks: set[asyncio.Future[Any]] = set()
        self.stopping = False
        # The operations posted by start() that the loop has not begun yet: group commit
        # batches a write with them rather than committing it alone (see _batching). A
        # hint, never waited on: a set, so that a signal handler's interruption anywhere
        # can leave it off by one for a moment, never broken.
        self.posted: set[object] = set()
        self.closers: set[Closer] = set()  # of stores still open (see Closer)
        started = threading.Event()
        self.thread = threading.Thread(target=self._main, args=(started,), name="statekeep-loop", daemon=True)
        self.thread.start()
        started.wait()
        self.ident = self.thread.ident

    def _main(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
        self.loop.run_forever()

    def start(
        self,
        coro: Coroutine[Any, Any, T],
        done: Callable[[Outcome[T]], None],
        ticket: list[None] | None = None,
        direct: Direct | None = None,
        eager: bool = False,
    ) -> None:
        """Start ``coro`` as a task on the loop, in a copy of the caller's context, and call
        ``done(task)`` on the loop when it ends. ``eager``: run its first step at once, and
        make a Task only if it waits (see :mod:`statekeep._runtime.eager`); ``done`` then gets a
        :class:`~statekeep._runtime.eager.Finished` if it never waited.

        ``done`` must never block: it runs on the loop thread, and the caller it reports to
        may be a thread interrupted by a signal handler, holding whatever lock it held. A
        caller that stops waiting does not cancel the task: an operation that started runs
        to its end, so it either happened whole or not at all. With a ``ticket`` (a list of
        one item), the loop starts the task only if it takes the item first; a caller that
        takes it first has dropped the operation, which then never runs (see :class:`~statekeep._runtime.handoff.Call`).
        ``direct``: the caller to wake as soon as the operation's batch is committed (see
        :data:`~statekeep._runtime.handoff.direct_caller`); it must be the operation's whole outcome.
        """
        ctx = contextvars.copy_context()
        if direct is not None or direct_caller.get() is not None:  # never inherit another's
            ctx.run(direct_caller.set, direct)

        def begin() -> None:
            self.posted.discard(begin)
            if ticket is not None:
                try:
                    ticket.pop()
                except IndexError:
                    return  # the caller was cancelled before the loop got here: never started
            if eager:
                self._step(coro, ctx, done, None)
            else:
                task = self.task(coro, ctx)
                task.add_done_callback(retrieved)
                task.add_done_callback(done)

        # The guard makes "not stopping, so queued before the exit drain" one step. It is
        # reentrant: a signal handler that calls statekeep may interrupt this very thread here.
        with _guard:
            if self.stopping:
                coro.close()
                raise RuntimeError("statekeep is shutting down with the interpreter; no new work")
            try:
                self.posted.add(begin)
                self.loop.call_soon_threadsafe(begin)
            except BaseException:
                self.posted.discard(begin)
                raise

    def _step(
        self,
        coro: Coroutine[Any, Any, T],
        ctx: contextvars.Context,
        done: Callable[[Outcome[T]], None],
        woken: Wakeup[Any] | None,
    ) -> None:
        """Run ``coro`` on until it ends or waits: on a free :class:`Wakeup`, which calls
        this again when woken; on anything else, in a Task from there on."""
        if woken is not None:
            self.tasks.discard(woken)
        outcome, pending = first_step(coro, ctx)
        if outcome is not None:
            done(outcome)
            reraise_fatal(outcome)
            return
        if isinstance(pending, Wakeup) and pending.free():
            self.tasks.add(pending)  # the exit drain waits for the operation through it
            pending.then(functools.partial(self._step, coro, ctx, done, pending))
            return
        task = self.task(rest(coro, pending), ctx)
        task.add_done_callback(retrieved)
        task.add_done_callback(done)

    def task(self, coro: Any, ctx: contextvars.Context | None = None) -> asyncio.Task[Any]:
        """On the loop: run ``coro`` as a Task of an operation, which the exit drain waits for."""
        task = self.loop.create_task(coro, context=ctx)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """On the loop: run ``coro`` as a task that the exit drain waits for."""
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def track(self, store: object, close: Callable[[], Coroutine[Any, Any, None]]) -> Closer:
        """Have ``close()`` run on this loop when ``store`` is closed, dropped or left open at
        exit (see :class:`Closer`). ``close`` must not refer to ``store``."""
        return Closer(self, store, close)

    async def drain(self, timeout: float) -> None:
        # Again while any are left: an operation's task may start another (or a batch's).
        deadline = self.loop.time() + timeout
        while pending := {t for t in self.tasks if t is not asyncio.current_task()}:
            left = deadline - self.loop.time()
            if left <= 0:
                break
            await asyncio.wait(pending, timeout=left)
        for closer in list(self.closers):
            try:
                await asyncio.wait_for(closer.close(), timeout=1.0)
            except Exception:
                pass


class Closer:
    """Closes what one store holds (its connections) on the owner loop, once.

    While the store is open, its owner lists it in ``closers`` (closed at interpreter
    exit). ``store.close()`` calls :meth:`release` and closes them itself. A store dropped
    unclosed is only weakly referenced, so it is collected; then its connections are closed
    on the loop and a ResourceWarning says so, as for an unclosed file.
    """

    def __init__(self, own: Owner, store: object, close: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._own = own
        self._close = close
        self._name = repr(store)
        own.closers.add(self)
        self._finalizer = weakref.finalize(store, self._dropped)
        self._finalizer.atexit = False  # the exit drain closes what is still open

    def release(self) -> None:
        """Stop tracking: the store closes its connections itself."""
        self._finalizer.detach()
        self._own.closers.discard(self)

    async def close(self) -> None:
        """Close the connections now (at exit, or when a dropped store was collected)."""
        self.release()
        try:
            await self._close()
        except Exception:
            pass  # nobody is left to tell; the process or the store is going away

    def _dropped(self) -> None:
        # Runs in whichever thread collected the store, maybe in a signal handler: no waiting.
        own = self._own
        if own is not _owner or own.stopping:
            return  # a forked child never closes its parent's connections; at exit, drain does
        own.closers.discard(self)
        own.loop.call_soon_threadsafe(own.spawn, self.close())
        warnings.warn(
            f"{self._name} was dropped without close(); statekeep closed its connections. "
            "Call close() (or use 'with'/'async with') when done with a store",
            ResourceWarning,
            stacklevel=2,
        )


# Reentrant: a signal handler that calls statekeep may interrupt its own thread holding it.
_guard = threading.RLock()
_owner: Owner | None = None


def owner() -> Owner:
    """The owner loop of this process, started on first use."""
    global _owner
    current = _owner
    if current is None:
        with _guard:
            current = _owner
            if current is None:
                made = Owner()
                current = _made_meanwhile()
                if current is None:
                    current = _owner = made
                else:  # a signal handler on this thread made one meanwhile: keep that one
                    made.loop.call_soon_threadsafe(made.loop.stop)
    return current


def _made_meanwhile() -> Owner | None:
    """The owner as it is now: read afresh, since starting one runs code (a signal handler
    on this thread may call statekeep) that a check made before it cannot see."""
    return _owner


#: The note a KeyboardInterrupt that stopped a sync call's wait carries (Ctrl-C).
INTERRUPTED = (
    "statekeep: {name}() was interrupted while it waited; the operation goes on to its end on "
    "statekeep's private loop, whole or not at all, never half."
)
#: And for a write: how to go on, and to tell which.
INTERRUPTED_WRITE = (
    " A write to the same State waits for it: to go on, save the State again (it sends only what the "
    "store lacks) or send the same write again (entries that landed are skipped); to tell which "
    "happened, write(id, [], None) then read(id)"
)


#: The note of a KeyboardInterrupt that came before the loop took the operation.
NOT_BEGUN = "statekeep: {name}() was interrupted before it began; it was not done and will not be."


def run_sync(
    coro: Coroutine[Any, Any, T], async_name: str, *, direct: bool = False, eager: bool = False
) -> T:
    """Run ``coro`` on the owner loop and block until it is done (the sync API's path).

    Works from any thread, including one running its own event loop (which it blocks
    for the call), and from a signal handler that interrupted a sync call. On the owner
    loop's own thread it raises RuntimeError at once, since waiting there would deadlock.
    A caller interrupted (KeyboardInterrupt) once the loop took the operation leaves it
    running to its end, and the KeyboardInterrupt carries a note (:data:`INTERRUPTED`) saying
    so; one interrupted before that drops it (it never runs), noted :data:`NOT_BEGUN`.

    ``direct``: the operation's outcome is that of the one batch item it submits (a
    built-in store's write or delete); the caller is then woken as soon as that batch is
    committed, by the thread that committed it, or commits it itself (see
    :meth:`~statekeep._runtime.handoff.Waiter.grant`): two hand-offs instead of four.
    ``eager``: start it eagerly (see :meth:`Owner.start`).
    """
    # The loop starts the operation only if it takes the ticket first; a caller interrupted
    # before that takes it back, so the operation never runs and the note can say so.
    ticket: list[None] = [None]
    try:
        own = owner()
        ident = threading.get_ident()
        if ident == own.ident:
            coro.close()
            raise RuntimeError(
                f"this sync statekeep method was called from statekeep's own event loop "
                f"thread, where it would deadlock; use 'await {async_name}(...)' instead"
            )
        # The main thread is never granted a batch (see Waiter.grant).
        waiter: Waiter[T] = Waiter(runs_batches=direct and ident != threading.main_thread().ident)
        own.start(coro, waiter.settle, ticket, waiter if direct else None, eager)
        return waiter.wait()
    except KeyboardInterrupt as interrupt:
        name = async_name.removeprefix("a")
        try:
            ticket.pop()
        except IndexError:  # the loop has it: the operation goes on
            note = INTERRUPTED.format(name=name)
            interrupt.add_note(note + INTERRUPTED_WRITE if async_name in ("awrite", "asave") else note)
        else:
            coro.close()
            interrupt.add_note(NOT_BEGUN.format(name=name))
        raise


async def run_async(coro: Coroutine[Any, Any, T], *, direct: bool = False, eager: bool = False) -> T:
    """Await ``coro`` on the owner loop from any event loop (the async API's path).

    A cancelled caller (``task.cancel()``, ``asyncio.timeout``, ``wait_for``) gets its
    CancelledError only once the operation's outcome is settled: it ran to its end, or it
    had not started on the owner loop yet and never will. So what the caller reads next
    shows exactly what happened. Cancelling does not cut an operation under way short.
    ``direct``: as for :func:`run_sync`; the caller's loop is woken by the thread that
    committed the batch (three hand-offs instead of four). ``eager``: as for :func:`run_sync`.
    """
    own = owner()
    loop = _asyncio_loop()
    if loop is None:  # not asyncio's: trio, through anyio (see statekeep._runtime.elsewhere)
        return await _run_elsewhere(own, coro, direct, eager)
    if loop is own.loop:
        ctx = contextvars.copy_context()
        if direct_caller.get() is not None:  # the enclosing operation's caller, not this one's
            ctx.run(direct_caller.set, None)
        if eager:
            outcome, pending = first_step(coro, ctx)
            if outcome is not None:
                return outcome.result()
            task = own.task(rest(coro, pending), ctx)
        else:
            task = own.task(coro, ctx)
        task.add_done_callback(retrieved)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            await finished(task)
            raise
    call: Call[T] = Call(loop)
    own.start(coro, call.done, call.ticket, call if direct else None, eager)
    return await call.outcome(coro)


async def _run_elsewhere(own: Owner, coro: Coroutine[Any, Any, T], direct: bool, eager: bool) -> T:
    """:func:`run_async` for a caller on another event loop than asyncio's (trio)."""
    try:
        from .elsewhere import ElsewhereCall  # imports anyio: only callers off asyncio pay for it

        call: ElsewhereCall[T] = ElsewhereCall()
    except BaseException:
        coro.close()  # no event loop anyio knows runs here: the operation never starts
        raise
    own.start(coro, call.done, call.ticket, call if direct else None, eager)
    return await call.outcome(coro)


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The caller's asyncio event loop, or None when the caller is not asyncio code: trio
    (through anyio), also in trio's guest mode, where asyncio's loop runs trio's tasks but
    none of asyncio's. (Returned rather than raised, so that no error of the trio path is
    chained to asyncio's "no running event loop".)"""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    if asyncio.current_task(loop) is None and _in_trio_task():
        return None
    return loop


def _in_trio_task() -> bool:
    trio = sys.modules.get("trio")  # never imported here: only a caller running trio has it
    return trio is not None and bool(trio.lowlevel.in_trio_task())


def _on_asyncio() -> bool:
    """Whether the caller runs on an asyncio event loop (else trio, say, through anyio)."""
    return _asyncio_loop() is not None


def _forget_after_fork() -> None:
    # The parent's loop thread does not exist in the child: start over on first use.
    global _owner, _guard
    _owner = None
    _guard = threading.RLock()


def _shutdown() -> None:
    with _guard:
        own = _owner
        if own is None:
            return
        own.stopping = True
    if not own.thread.is_alive():
        return
    try:
        done = asyncio.run_coroutine_threadsafe(own.drain(EXIT_GRACE_SECONDS), own.loop)
        done.result(EXIT_GRACE_SECONDS + 5)
    except Exception:
        pass
    own.loop.call_soon_threadsafe(own.loop.stop)
    own.thread.join(5)


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(_shutdown)

"""Keeping a lease alive while an Agent runs a State, and stopping when it is lost.

A :class:`LeaseKeeper` holds the run's lease: it renews it once half its period has gone
by (checked before each save, model request and tool call, and by a heartbeat task while
a long model or tool call is in flight), hands it to every save, and remembers the
:class:`StaleLeaseError` that ends the run when another owner has taken the State over.
The heartbeat runs in the caller's loop: an asyncio task, or under trio a task of an anyio
task group, whose lost lease cancels the run's cancel scope.
Elapsed time is measured on this process's monotonic clock, so a skew between this host
and the server that judges expiry does not delay a renewal.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, TypeVar

from .._core.errors import StaleLeaseError
from .._core.leases import MAX_OWNER, Lease, check_lease
from .._runtime.bridge import _on_asyncio
from .._runtime.callerloop import new_lock, sleeper
from .api import offers_leases

T = TypeVar("T")


def default_owner(name: str) -> str:
    """This process as a lease owner: ``host/pid-N/agent-NAME`` (shown in errors)."""
    return f"{socket.gethostname()}/pid-{os.getpid()}/{name}"[:MAX_OWNER]


class LeaseKeeper:
    """The lease of one run: renewed while the run works, given to every save."""

    def __init__(self, store: Any, lease: Lease, *, release: bool) -> None:
        self.store = store
        self.lease = lease
        self.release = release  # acquired by the run itself: released when it ends
        self.lost: StaleLeaseError | None = None
        self._renewed = time.monotonic()
        self._lock = new_lock()  # made in the caller's loop, asyncio's or trio's

    @classmethod
    async def start(
        cls, store: Any, state_id: str, lease: Lease | None, ttl: timedelta | None, owner: str
    ) -> LeaseKeeper | None:
        """The keeper of a run: of the caller's ``lease``, of a lease acquired for ``ttl``,
        or None (no lease)."""
        if lease is None and ttl is None:
            return None
        if not offers_leases(store):
            what = "no store" if store is None else f"a {type(store).__name__}, which has no leases"
            raise ValueError(f"a leased run needs a built-in store to hold the lease; the Agent has {what}")
        if lease is not None:
            return cls(store, check_lease(lease, state_id) or lease, release=False)
        assert ttl is not None  # neither a lease nor a ttl returned above
        return cls(store, await store.aacquire(state_id, owner, ttl), release=True)

    @property
    def due(self) -> bool:
        """Has half the lease's period gone by since it was last taken or renewed?"""
        return time.monotonic() - self._renewed >= self.lease.ttl.total_seconds() / 2

    async def keep(self) -> Lease:
        """The lease, renewed first if due; the StaleLeaseError that lost it, if it is lost."""
        async with self._lock:
            if self.lost is not None:
                raise self.lost
            if self.due:
                started = time.monotonic()  # the new period counts from before the call
                try:
                    self.lease = await self.store.arenew(self.lease)
                except StaleLeaseError as exc:
                    self.lost = exc
                    raise
                self._renewed = started
            return self.lease

    def saw(self, exc: BaseException) -> bool:
        """Note a StaleLeaseError a save met; whether ``exc`` means the lease is lost."""
        if isinstance(exc, StaleLeaseError):
            self.lost = self.lost or exc
        return self.lost is not None

    async def _heartbeat(self, stop: Callable[[], object], sleep: Callable[[float], Awaitable[Any]]) -> None:
        """Renew on time while the run waits on a long call; ``stop`` the run if it is lost."""
        while True:
            wait = self._renewed + self.lease.ttl.total_seconds() / 2 - time.monotonic()
            await sleep(max(wait, 0.0))
            try:
                await self.keep()
            except StaleLeaseError:
                stop()
                return
            except Exception:  # a failed renewal (network): try again soon
                await sleep(self.lease.ttl.total_seconds() / 10)

    async def run(self, body: Callable[[], Awaitable[T]]) -> T:
        """Await the run's ``body`` with a heartbeat beside it, in the caller's loop (asyncio or
        trio); a lost lease ends it with StaleLeaseError, and a lease the run acquired is
        released at its end."""
        if _on_asyncio():
            async with self.running():
                return await body()
        return await self._run_elsewhere(body)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[LeaseKeeper]:
        """The run's body, on asyncio: a heartbeat task beside it; a lost lease ends it with
        StaleLeaseError, and a lease the run acquired is released at its end."""
        task = asyncio.current_task()
        assert task is not None
        beat = asyncio.create_task(
            self._heartbeat(task.cancel, asyncio.sleep), name="statekeep-lease-heartbeat"
        )
        try:
            yield self
        except StaleLeaseError as exc:  # a save was refused: the State was taken over
            self.lost = self.lost or exc
            raise
        except asyncio.CancelledError:
            if self.lost is None:
                raise
            task.uncancel()  # cancelled by the heartbeat, not by the caller
            raise self.lost from None
        finally:
            beat.cancel()
            await _settled(self._stop(beat))

    async def _stop(self, beat: asyncio.Task[None]) -> None:
        await asyncio.gather(beat, return_exceptions=True)
        await self._end()

    async def _run_elsewhere(self, body: Callable[[], Awaitable[T]]) -> T:
        """:meth:`run` under trio (through anyio): the body in the caller's task, inside a
        cancel scope the heartbeat (a task of a task group) cancels once the lease is lost."""
        import anyio

        scope = anyio.CancelScope()
        result: list[T] = []
        error: BaseException | None = None
        try:
            try:
                async with anyio.create_task_group() as beats:
                    beats.start_soon(self._heartbeat, scope.cancel, sleeper())
                    try:
                        with scope:
                            result.append(await body())
                    finally:
                        beats.cancel_scope.cancel()
            except BaseExceptionGroup as group:  # the body's own error, which trio wraps
                error = group.exceptions[0] if len(group.exceptions) == 1 else group
            if isinstance(error, StaleLeaseError):  # a save was refused: the State was taken over
                self.lost = self.lost or error
        finally:
            with anyio.CancelScope(shield=True):  # also when the caller was cancelled, as on asyncio
                await self._end()
        if error is not None:
            raise error  # here, outside the except block: not chained to the group
        if not result:  # cancelled by the heartbeat, not by the caller
            assert self.lost is not None
            raise self.lost
        return result[0]

    async def _end(self) -> None:
        """Release a lease the run acquired, unless it was lost."""
        if self.release and self.lost is None:
            try:
                await self.store.arelease(self.lease)
            except StaleLeaseError:
                pass


async def _settled(coro: Coroutine[Any, Any, None]) -> None:
    """Run ``coro`` to its end as a task of its own, whatever cancels the caller meanwhile
    (anyio's cancel scopes cancel again at every await, which would drop the lease's
    release before it started); then raise the caller's cancellation, if any, or its error."""
    task = asyncio.ensure_future(coro)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError:
            cancelled = True
    task.result()
    if cancelled:
        raise asyncio.CancelledError

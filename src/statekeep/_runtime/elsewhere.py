"""How an async caller that does not run on asyncio (trio, through anyio) waits for the owner loop.

The rules are those of :class:`~statekeep._runtime.handoff.Call`, kept with anyio primitives: the owner
loop hands the outcome over with the caller's loop's own thread-safe, non-blocking call (trio's
``TrioToken.run_sync_soon``, reached through anyio's low-level token), which sets an
:class:`anyio.Event` there. A cancelled caller (a trio cancel scope, ``anyio.move_on_after``,
``fail_after``) reports only once the outcome is settled: dropped before it started (it never
runs), or ended. Trio's cancellation is level-triggered, so that last wait is shielded.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

from .handoff import CallerWait

T = TypeVar("T")


def _poster() -> Callable[..., object]:
    """The running loop's thread-safe way to have a function called on it soon.

    Trio's ``run_sync_soon`` appends to a queue under a lock that is only ever held for that
    append, and wakes the loop through a non-blocking socket: the owner loop never waits on it.
    """
    token = anyio.lowlevel.current_token().native_token
    post: Callable[..., object] | None = getattr(token, "run_sync_soon", None)  # a TrioToken
    if post is None:
        post = getattr(token, "call_soon_threadsafe")  # noqa: B009  # an asyncio loop
    return post


class ElsewhereCall(CallerWait[T]):
    """An async caller's wait, on a loop that is not asyncio's, for one owner-loop operation.

    The same interface as :class:`~statekeep._runtime.handoff.Call` (``done``, ``deliver``, ``ticket``,
    ``outcome``), so the owner loop treats both alike.
    """

    __slots__ = ("_event", "_poster")

    def __init__(self) -> None:
        super().__init__()
        self._poster = _poster()
        self._event = anyio.Event()

    def _post(self, fn: Callable[[Callable[[], T]], None], outcome: Callable[[], T]) -> None:
        self._poster(fn, outcome)

    def _wake_up(self) -> None:
        self._event.set()

    async def outcome(self, coro: Coroutine[Any, Any, T]) -> T:
        """On the caller's loop: the operation's result or error, or the caller's own
        cancellation once the operation ended or was dropped before it started."""
        try:
            await self._event.wait()
        except anyio.get_cancelled_exc_class():
            if self._outcome is None:
                try:
                    self.ticket.pop()
                except IndexError:  # started: it runs to its end, and the caller waits for it
                    with anyio.CancelScope(shield=True):
                        await self._event.wait()
                else:
                    coro.close()  # dropped: the owner loop never starts it
            raise
        outcome = self._outcome
        assert outcome is not None
        return outcome()

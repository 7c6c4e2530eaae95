"""Writes an adapter finishes even when its caller is cancelled meanwhile (as ``SQLiteSession``'s).

A cancelled caller must never leave a write whose outcome it cannot know: the write runs to
its end (or fails), then the cancellation is raised; a write that retries after losing a race
stops between attempts instead (the attempt that lost wrote nothing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def stop_if_cancelled(stop: asyncio.Event, attempt: int) -> None:
    """Before a retry: raise CancelledError if the caller was cancelled meanwhile (the
    attempt that lost wrote nothing, so the outcome is known: nothing)."""
    if attempt:
        await asyncio.sleep(0)  # let a cancellation of the caller, if one is pending, reach it
    if stop.is_set():
        raise asyncio.CancelledError


async def finish_despite_cancel(operation: Callable[[asyncio.Event], Awaitable[T]]) -> T:
    """Run ``operation`` to its end even if the caller is cancelled meanwhile, then raise
    the cancellation: the caller never leaves a write whose outcome it cannot know. The
    operation is told of the cancellation (its event is set) so it stops between attempts."""
    stop = asyncio.Event()
    task = asyncio.ensure_future(operation(stop))
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
            stop.set()
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the loop must not report it as never retrieved
        raise cancelled
    return task.result()

"""Blocking calls awaited from the caller's loop (asyncio's, or trio's through the owner loop)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import TypeVar, cast

from .bridge import _asyncio_loop, _on_asyncio, run_async
from .handoff import finished

T = TypeVar("T")


async def to_thread(fn: Callable[[], T]) -> T:
    """``asyncio.to_thread(fn)``, awaited from asyncio or trio. Under trio, a cancelled caller
    reports once ``fn`` has returned (the thread runs on the owner loop's executor)."""
    if _on_asyncio():
        return await asyncio.to_thread(fn)
    return await run_async(asyncio.to_thread(fn))


async def in_thread(fn: Callable[[], T]) -> T:
    """``asyncio.to_thread(fn)``, except that a cancelled caller gets CancelledError (or
    trio's Cancelled) only once ``fn`` has returned or raised, or it had not started and
    never will."""
    loop = _asyncio_loop()
    if loop is None:  # trio: the owner loop runs this, and run_async keeps the rule
        return await run_async(in_thread(fn))
    ticket: list[None] = [None]
    ctx = contextvars.copy_context()

    def run() -> T:
        try:
            ticket.pop()
        except IndexError:
            return cast(T, None)  # dropped by the cancelled caller; nobody reads this
        return ctx.run(fn)

    fut = loop.run_in_executor(None, run)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        try:
            ticket.pop()
        except IndexError:  # it started: wait for it to end
            await finished(fut)
        raise

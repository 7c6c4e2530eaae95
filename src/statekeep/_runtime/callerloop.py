"""What the Agent's loop does in the caller's event loop, asyncio or trio (through anyio).

The Agent runs its model and tools, and its lease heartbeat, in the loop that awaits
:meth:`~statekeep.Agent.arun` (never on statekeep's private loop). On asyncio these are
asyncio's own primitives, as before; any other loop gets anyio's, and only then is anyio
imported.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from .bridge import _on_asyncio

T = TypeVar("T")


async def worker_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a worker thread of the caller's loop, so that a blocking
    model or tool does not hold it up. A cancelled caller stops waiting at once (the call
    runs on in its thread, its result dropped), under trio as ``asyncio.to_thread`` does."""
    if _on_asyncio():
        return await asyncio.to_thread(fn, *args, **kwargs)
    import anyio.to_thread

    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), abandon_on_cancel=True)


def new_lock() -> AbstractAsyncContextManager[Any]:
    """A lock for tasks of the caller's loop."""
    if _on_asyncio():
        return asyncio.Lock()
    import anyio

    return anyio.Lock()


def sleeper() -> Callable[[float], Awaitable[Any]]:
    """The caller's loop's ``sleep``."""
    if _on_asyncio():
        return asyncio.sleep
    import anyio

    return anyio.sleep

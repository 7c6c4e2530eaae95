"""Per-key asyncio locks that work from any number of event loops.

An ``asyncio.Lock`` belongs to the loop that first waits on it; a service may be used from
several loops (threads, successive ``asyncio.run`` calls), so each loop gets locks of its
own. A key's lock lives only while a task holds or waits for it, and a loop's map goes with
the loop (weakly held), so the maps stay as small as the work under way.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class _Held:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class LoopLocks:
    """``async with locks.hold(key):`` serialises the tasks of one loop that hold ``key``."""

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Held]] = (
            weakref.WeakKeyDictionary()
        )
        self._guard = threading.Lock()

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        with self._guard:  # threads, each with its loop, may come at once
            locks = self._by_loop.setdefault(asyncio.get_running_loop(), {})
        held = locks.setdefault(key, _Held())
        held.users += 1
        try:
            async with held.lock:
                yield
        finally:
            held.users -= 1
            if held.users == 0:
                del locks[key]

"""The per-State locks of the owner loop: a plain ``asyncio.Lock`` per key, only touched there.

A key's entry counts who holds or waits for its lock, and leaves the map when nobody does,
so the map never grows with the States a process ever wrote. Taking a free lock never waits
(``await lock.acquire()`` returns in the same step), so an uncontended operation pays two
calls, not an async context manager.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Hashable
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")


class LockEntry:
    """One key's lock and how many hold it or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class StateLocks:
    """The map of keys to their locks (the owner loop's; see :class:`~statekeep._bridge._Owner`)."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, LockEntry] = {}

    def hold(self, key: Hashable) -> LockEntry:
        """Count a user of ``key``'s lock (then ``await entry.lock.acquire()``); every
        call is paired with :meth:`let_go`."""
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = LockEntry()
        entry.users += 1
        return entry

    def let_go(self, key: Hashable, entry: LockEntry) -> None:
        """The user counted by :meth:`hold` is done (its lock released, or never taken)."""
        entry.users -= 1
        if entry.users == 0:
            del self._locks[key]

    async def locked(self, key: Hashable, work: Coroutine[Any, Any, T]) -> T:
        """Await ``work`` holding ``key``'s lock."""
        entry = self.hold(key)
        try:
            lock = entry.lock
            try:
                await lock.acquire()
            except BaseException:
                work.close()  # never started
                raise
            try:
                return await work
            finally:
                lock.release()
        finally:
            self.let_go(key, entry)

    def lock(self, key: Hashable) -> Held:
        """``async with`` this: hold the lock for ``key``."""
        return Held(self, key)


class Held:
    """``async with owner().lock(key)``: the lock for ``key`` held inside."""

    __slots__ = ("_entry", "_key", "_locks")

    def __init__(self, locks: StateLocks, key: Hashable) -> None:
        self._locks = locks
        self._key = key
        self._entry: LockEntry | None = None

    async def __aenter__(self) -> None:
        entry = self._entry = self._locks.hold(self._key)
        try:
            await entry.lock.acquire()
        except BaseException:
            self._locks.let_go(self._key, entry)
            raise

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        entry = self._entry
        assert entry is not None
        entry.lock.release()
        self._locks.let_go(self._key, entry)

"""The per-State locks of the owner loop: a plain ``asyncio.Lock`` per key, only touched there.

A key's entry counts who holds or waits for its lock, and leaves the map when nobody does,
so the map never grows with the States a process ever wrote. The entry itself stands for
the lock while only one user has it (an uncontended operation pays a dict entry, no Lock
object and no await): the second user to come makes the ``asyncio.Lock``, takes it for the
first (a free lock is taken in the same step) and waits for it; from then on whoever holds
the entry releases that lock when done, and the Lock serialises the users as it always did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Hashable
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")


class LockEntry:
    """One key's lock (made once a second user comes) and how many hold it or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock: asyncio.Lock | None = None
        self.users = 0


class StateLocks:
    """The map of keys to their locks (the owner loop's; see :class:`~statekeep._runtime.bridge.Owner`)."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, LockEntry] = {}

    def hold(self, key: Hashable) -> LockEntry:
        """Count a user of ``key``'s lock (then :meth:`take` it, unless it is the only user);
        every call is paired with :meth:`let_go`."""
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = LockEntry()
        entry.users += 1
        return entry

    @staticmethod
    async def take(entry: LockEntry) -> None:
        """Wait for the lock of an entry that others use too (``entry.users > 1``)."""
        lock = entry.lock
        if lock is None:  # the one other user holds it without a Lock: make it, taken for them
            lock = entry.lock = asyncio.Lock()
            await lock.acquire()  # free: taken in this step, never waits
        await lock.acquire()

    @staticmethod
    def release(entry: LockEntry) -> None:
        """Its holder is done: the next user waiting, if any, takes the lock."""
        lock = entry.lock
        if lock is not None:
            lock.release()

    def let_go(self, key: Hashable, entry: LockEntry) -> None:
        """The user counted by :meth:`hold` is done (its lock released, or never taken)."""
        entry.users -= 1
        if entry.users == 0:
            del self._locks[key]

    async def locked(self, key: Hashable, work: Coroutine[Any, Any, T]) -> T:
        """Await ``work`` holding ``key``'s lock."""
        entry = self.hold(key)
        try:
            if entry.users > 1:
                try:
                    await self.take(entry)
                except BaseException:
                    work.close()  # never started
                    raise
            try:
                return await work
            finally:
                self.release(entry)
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
        if entry.users > 1:
            try:
                await self._locks.take(entry)
            except BaseException:
                self._locks.let_go(self._key, entry)
                raise

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        entry = self._entry
        assert entry is not None
        self._locks.release(entry)
        self._locks.let_go(self._key, entry)

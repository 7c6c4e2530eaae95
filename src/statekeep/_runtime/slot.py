"""One value per process, bound to its owner loop: made on first use, made again after a fork.

What a store keeps on the owner loop (a write queue, connections, a pool) lives in a
:class:`ProcessSlot`. A forked child has a new owner loop, so the slot makes a fresh value
there. What the child inherited is its parent's: at the fork it is moved aside, kept
referenced until the child exits and never used or closed (closing would close the
parent's sockets and files), for every slot of the process in one place.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .bridge import Owner, owner

T = TypeVar("T")


class ProcessSlot(Generic[T]):
    """This process's ``T``, made by ``make(owner)`` the first time :meth:`get` is called."""

    __slots__ = ("__weakref__", "_make", "_owner", "_value")

    def __init__(self, make: Callable[[Owner], T]) -> None:
        self._make = make
        self._owner: Owner | None = None
        self._value: T | None = None
        _slots.add(self)

    def get(self) -> T:
        """This process's value, made now if this process has none yet."""
        own = owner()
        if self._owner is not own or self._value is None:
            self._value, self._owner = self._make(own), own
        return self._value

    def current(self) -> T | None:
        """This process's value if one was made, else None (nothing to drain or close)."""
        return self._value if self._owner is owner() else None


_slots: weakref.WeakSet[ProcessSlot[Any]] = weakref.WeakSet()
_inherited: list[object] = []  # a forked child's copies of its parent's values


def _set_aside_after_fork() -> None:
    for slot in list(_slots):
        if slot._value is not None:
            _inherited.append(slot._value)
        slot._value = slot._owner = None


os.register_at_fork(after_in_child=_set_aside_after_fork)

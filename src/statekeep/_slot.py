"""One value per process, bound to its owner loop: made on first use, made again after a fork.

What a store keeps on the owner loop (a write queue, connections, a pool) lives in a
:class:`ProcessSlot`. A forked child has a new owner loop, so the slot makes a fresh value
there and leaves the parent's alone: the child never uses or closes what its parent owns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from ._bridge import _Owner, owner

T = TypeVar("T")


class ProcessSlot(Generic[T]):
    """This process's ``T``, made by ``make(owner)`` the first time :meth:`get` is called.

    ``abandon(value)``, if given, is called with a value a forked child inherited before it
    is replaced (to note it, never to close it: it belongs to the parent).
    """

    __slots__ = ("_abandon", "_make", "_owner", "_value")

    def __init__(self, make: Callable[[_Owner], T], *, abandon: Callable[[T], None] | None = None) -> None:
        self._make = make
        self._abandon = abandon
        self._owner: _Owner | None = None
        self._value: T | None = None

    def get(self) -> T:
        """This process's value, made now if this process has none yet."""
        own = owner()
        if self._owner is not own or self._value is None:
            if self._value is not None and self._abandon is not None:
                self._abandon(self._value)
            self._value, self._owner = self._make(own), own
        return self._value

    def current(self) -> T | None:
        """This process's value if one was made, else None (nothing to drain or close)."""
        return self._value if self._owner is owner() else None

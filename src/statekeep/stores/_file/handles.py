"""The descriptors FileStore keeps open between writes: each State's folder and log.

A steady-state append then opens nothing. The cache is bounded (least recently used
States are closed first). A user takes a State's pair out and gives it back when done,
so no two threads ever use one pair. After a ``fork`` the child closes its copies at
once (before any code of its own runs, so the numbers are still the inherited ones): they
share their open files, and so their flocks, with the parent's, and a copy kept open
would keep a lock held after the parent died holding it.
"""

from __future__ import annotations

import os
import resource
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable

from .locking import unlock


def cache_cap() -> int:
    """How many States' descriptors to keep open: a sixteenth of the process's limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft > 1 << 16:
        soft = 1 << 16
    return max(4, soft // 32)


class Handles:
    """Open ``(folder, log)`` descriptors by key (a State id), for one store's folder; each
    namespace uses a :meth:`space` of it, so they share one bound."""

    def __init__(self) -> None:
        self._open: OrderedDict[Hashable, tuple[int, int]] = OrderedDict()
        self._lock = threading.Lock()
        _all.add(self)

    def space(self, namespace: str) -> SpaceHandles:
        """The handles of one namespace's States."""
        return SpaceHandles(self, namespace)

    def take(self, sid: Hashable) -> tuple[int, int] | None:
        """The State's pair, now the caller's alone; None if none is kept."""
        with self._lock:
            return self._open.pop(sid, None)

    def give(self, sid: Hashable, folder: int, log: int) -> None:
        """Keep the pair (the caller no longer uses it); closes the oldest beyond the cap."""
        with self._lock:
            old = self._open.pop(sid, None)
            self._open[sid] = (folder, log)
            extra = [self._open.popitem(last=False)[1] for _ in range(len(self._open) - cache_cap())]
        if old is not None:
            extra.append(old)
        for pair in extra:
            close_pair(*pair)

    def drop(self, sid: Hashable) -> None:
        """Close the State's pair, if kept (it was deleted)."""
        with self._lock:
            pair = self._open.pop(sid, None)
        if pair is not None:
            close_pair(*pair)

    def close(self, namespace: str | None = None) -> None:
        """Close every pair (of ``namespace`` only, if given)."""
        with self._lock:
            if namespace is None:
                pairs, self._open = list(self._open.values()), OrderedDict()
            else:
                keys = [k for k in self._open if type(k) is tuple and k[0] == namespace]
                pairs = [self._open.pop(k) for k in keys]
        for pair in pairs:
            close_pair(*pair)

    def _forget(self) -> None:
        pairs, self._open = list(self._open.values()), OrderedDict()
        self._lock = threading.Lock()
        for pair in pairs:
            for fd in pair:
                try:
                    os.close(fd)
                except OSError:
                    pass  # closed already by locking.py's own at-fork hook (it was locked)


class SpaceHandles:
    """The :class:`Handles` of one namespace: the same calls, by State id."""

    def __init__(self, shared: Handles, namespace: str) -> None:
        self._shared = shared
        self._namespace = namespace

    def take(self, sid: str) -> tuple[int, int] | None:
        return self._shared.take((self._namespace, sid))

    def give(self, sid: str, folder: int, log: int) -> None:
        self._shared.give((self._namespace, sid), folder, log)

    def drop(self, sid: str) -> None:
        self._shared.drop((self._namespace, sid))

    def close(self) -> None:
        self._shared.close(self._namespace)


def close_pair(folder: int, log: int) -> None:
    if log >= 0:
        os.close(log)
    if folder >= 0:
        unlock(folder)  # also forgets it in the fork bookkeeping of locking.py


_all: weakref.WeakSet[Handles] = weakref.WeakSet()


def _forget_inherited() -> None:
    for handles in list(_all):
        handles._forget()


os.register_at_fork(after_in_child=_forget_inherited)

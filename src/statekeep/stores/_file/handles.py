"""The descriptors FileStore keeps open between writes: each State's folder and log.

A steady-state append then opens nothing. The cache is bounded (least recently used
States are closed first). A user takes a State's pair out and gives it back when done,
so no two threads ever use one pair. A pair carries a mark: the tail (see
:mod:`.recovery`) its user last left its log at, so that the next append knows the log it
holds is the one that tail describes (held open since: its inode cannot have been reused).
After a ``fork`` the child closes its copies at
once (before any code of its own runs, so the numbers are still the inherited ones): they
share their open files, and so their flocks, with the parent's, and a copy kept open
would keep a lock held after the parent died holding it.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable

from .._fsio import OsIO
from .budget import soft_limit
from .locking import unlock

Pair = tuple[int, int, object]  # (folder, log, mark)


def cache_cap() -> int:
    """How many States' descriptors to keep open: a sixteenth of the process's limit."""
    return max(4, min(soft_limit(), 1 << 16) // 32)


class Handles:
    """Open ``(folder, log)`` descriptors by key (a State id), for one store's folder; each
    namespace uses a :meth:`space` of it, so they share one bound."""

    def __init__(self) -> None:
        self._open: OrderedDict[Hashable, Pair] = OrderedDict()
        self._lock = threading.Lock()
        _all.add(self)

    def space(self, namespace: str) -> SpaceHandles:
        """The handles of one namespace's States."""
        return SpaceHandles(self, namespace)

    def take(self, sid: Hashable) -> Pair | None:
        """The State's pair and its mark, now the caller's alone; None if none is kept."""
        with self._lock:
            return self._open.pop(sid, None)

    def give(self, sid: Hashable, folder: int, log: int, mark: object = None) -> None:
        """Keep the pair (the caller no longer uses it); closes the oldest beyond the cap."""
        with self._lock:
            old = self._open.pop(sid, None)
            self._open[sid] = (folder, log, mark)
            extra = self._trim()
        if old is not None:
            extra.append(old)
        for folder_, log_, _ in extra:
            close_pair(folder_, log_)

    def _trim(self) -> list[Pair]:
        if len(self._open) <= 4:  # never over the cap (see cache_cap)
            return []
        return [self._open.popitem(last=False)[1] for _ in range(len(self._open) - cache_cap())]

    def drop(self, sid: Hashable) -> None:
        """Close the State's pair, if kept (it was deleted)."""
        with self._lock:
            pair = self._open.pop(sid, None)
        if pair is not None:
            close_pair(pair[0], pair[1])

    def close(self, namespace: str | None = None) -> None:
        """Close every pair (of ``namespace`` only, if given)."""
        with self._lock:
            if namespace is None:
                pairs, self._open = list(self._open.values()), OrderedDict()
            else:
                keys = [k for k in self._open if type(k) is tuple and k[0] == namespace]
                pairs = [self._open.pop(k) for k in keys]
        for folder, log, _ in pairs:
            close_pair(folder, log)

    def _forget(self) -> None:
        pairs, self._open = list(self._open.values()), OrderedDict()
        self._lock = threading.Lock()
        for folder, log, _ in pairs:
            for fd in (folder, log):
                try:
                    os.close(fd)
                except OSError:
                    pass  # closed already by locking.py's own at-fork hook (it was locked)


class SpaceHandles:
    """The :class:`Handles` of one namespace: the same calls, by State id."""

    def __init__(self, shared: Handles, namespace: str) -> None:
        self._shared = shared
        self._namespace = namespace

    def take(self, sid: str) -> Pair | None:
        return self._shared.take((self._namespace, sid))

    def give(self, sid: str, folder: int, log: int, mark: object = None) -> None:
        self._shared.give((self._namespace, sid), folder, log, mark)

    def drop(self, sid: str) -> None:
        self._shared.drop((self._namespace, sid))

    def close(self) -> None:
        self._shared.close(self._namespace)


def close_pair(folder: int, log: int, io: OsIO | None = None) -> None:
    if io is None:
        io = OsIO()
    if log >= 0:
        io.close(log)
    if folder >= 0:
        unlock(folder, io)  # also forgets it in the fork bookkeeping of locking.py


_all: weakref.WeakSet[Handles] = weakref.WeakSet()


def _forget_inherited() -> None:
    for handles in list(_all):
        handles._forget()


os.register_at_fork(after_in_child=_forget_inherited)

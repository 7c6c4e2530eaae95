"""How many appends FileStore stages at once: a share of the process's descriptor limit.

A staged write holds three descriptors (folder, log, snapshot's temporary file) until its
batch is done. All the FileStores of a process together use at most a quarter of the
limit: the rest stays free for everything else it has open (sockets, reads, creates).
"""

from __future__ import annotations

import errno
import resource
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..._runtime.batching import WouldBlock

_FDS_PER_WRITE = 3
_FDS_SHARE = 4


_soft: int | None = None  # the soft descriptor limit, read once (again after EMFILE)


def soft_limit() -> int:
    """The process's soft limit of open descriptors (at most 2**20), read once: a
    ``getrlimit`` per write cost a system call. :func:`limit_hit` reads it again."""
    global _soft
    if _soft is None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        _soft = 1 << 20 if soft == resource.RLIM_INFINITY or soft > 1 << 20 else soft
    return _soft


def limit_hit(exc: BaseException) -> None:
    """After ``exc``: if it is EMFILE, the limit may have been lowered since it was read."""
    global _soft
    if isinstance(exc, OSError) and exc.errno == errno.EMFILE:
        _soft = None


def batch_cap() -> int:
    """Most appends staged at once in this process, from the descriptor limit."""
    return max(1, soft_limit() // _FDS_SHARE // _FDS_PER_WRITE)


class DescriptorBudget:
    """Keeps the appends staged at once by every FileStore of the process within
    :func:`batch_cap`: a batch waits until its whole size fits (or it is alone), so
    batches never wait on each other while holding part of the budget."""

    def __init__(self) -> None:
        self._used = 0
        self._cond = threading.Condition()

    @contextmanager
    def held(self, count: int, *, wait: bool = True) -> Iterator[None]:
        """Hold ``count`` writes' share; without ``wait``, WouldBlock if it is not free now."""
        with self._cond:
            while self._used and self._used + count > batch_cap():
                if not wait:
                    raise WouldBlock
                self._cond.wait()
            self._used += count
        try:
            yield
        finally:
            with self._cond:
                self._used -= count
                self._cond.notify_all()


BUDGET = DescriptorBudget()

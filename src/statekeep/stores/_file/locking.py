"""The flocks FileStore takes, safe across ``fork``.

Writers in other processes are kept apart with ``fcntl.flock`` on the State's folder;
a create or delete holds the lock of its ``.creating-``/``.deleting-`` folder for as long
as that exists, and the sweep takes the store folder's lock exclusively.

Every descriptor that holds a flock right now is listed in ``_locked``. A child forked
meanwhile gets copies that would keep the lock held (flock belongs to the open file,
which the copies share), and no thread of its own to release them: it closes them at once.
"""

from __future__ import annotations

import fcntl
import os

from .._fsio import OsIO

_locked: set[int] = set()
_OS = OsIO()


def lock(folder: int) -> None:
    """Take the State's lock (waiting for other processes); closes ``folder`` on failure."""
    _locked.add(folder)  # first: a fork from here on closes the child's copy
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
    except BaseException:
        _locked.discard(folder)
        os.close(folder)
        raise


def hold(fd: int, how: int, io: OsIO = _OS) -> bool:
    """flock ``fd`` (kept open); False if ``how`` has LOCK_NB and the lock is taken."""
    _locked.add(fd)
    try:
        io.flock(fd, how)
    except BlockingIOError:
        _locked.discard(fd)
        return False
    except BaseException:
        _locked.discard(fd)
        raise
    return True


def release(fd: int, io: OsIO = _OS) -> None:
    """Undo :func:`hold`; the descriptor stays open."""
    try:
        io.flock(fd, fcntl.LOCK_UN)
    finally:
        _locked.discard(fd)


def unlock(folder: int, io: OsIO = _OS) -> None:
    """Release the lock, then forget and close the descriptor (a copy made by a fork
    between these steps holds no lock, and the number is never reused while listed)."""
    try:
        release(folder, io)
    finally:
        io.close(folder)


def _close_inherited_locks() -> None:
    for fd in list(_locked):
        try:
            os.close(fd)
        except OSError:
            pass
    _locked.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)

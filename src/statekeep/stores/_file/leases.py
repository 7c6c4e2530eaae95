"""FileStore's lease rows: one small file per leased State, in ``.leases/`` beside the States.

A State's lease row ``.leases/{name}`` (``{"owner":...,"token":n,"expires_at":...,"ttl":s}``)
outlives the State's folder, so a delete never resets its token. It is replaced whole:
written to a temporary file (0600), fsync'd, renamed over, the folder fsync'd; a crash
leaves the old row or the new one. A missing file is no lease: a write of a State never
leased costs one failed ``open``.

Who may change a row, and when a write reads it (:func:`row_lock`): the namespace folder's
flock taken exclusively, which every create takes shared while it checks the fence and
renames its State into place (over an expired one too), and then the State's flock if the
State's folder exists -- the lock every append and delete holds while it checks the fence
and writes. So the fence is checked atomically with every write and delete, across
processes on one host. Both locks are taken in that order, namespace then State, as a
create over an expired State takes them.

The file name is the id lowered, and when the id has capitals, a dot and a mask of where
they are (``Run`` -> ``run.1``): two ids that differ only in case never share a row, even on
a case-insensitive file system.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import orjson

from ..._core.errors import CorruptStateError
from ..._core.labels import iso
from ..._core.leases import Lease
from ..._core.records import utc_time
from .._fsio import write_file
from .folder import StoreFolder, quietly, still_named
from .locking import hold, lock, unlock
from .trust import DIR, check_stat

LEASES = ".leases"  # a State id cannot start with a dot: never a State's folder
_TMP = ".tmp-"
_READ = os.O_RDONLY | os.O_NOFOLLOW


def row_name(sid: str) -> str:
    """The lease row's file name for the id ``sid`` (distinct for ids differing in case)."""
    mask = sum(1 << i for i, c in enumerate(sid) if "A" <= c <= "Z")
    return sid.lower() if not mask else f"{sid.lower()}.{mask:x}"


class LeaseRows:
    """The lease rows of one namespace's States (``root`` is its opened folder)."""

    def __init__(self, store: StoreFolder, namespace: str) -> None:
        self._store = store
        self._namespace = namespace  # the folder's: a row names no namespace of its own

    def read(self, root: int, sid: str) -> Lease | None:
        """The State's lease row (live or not), or None if it never had one."""
        return self._read(f"{LEASES}/{row_name(sid)}", root, sid)

    def read_path(self, sid: str, path: str) -> Lease | None:
        """:meth:`read`, by the row's full ``path`` (:meth:`where`; a steady append holds no
        store folder): one failed ``open`` on a State never leased."""
        return self._read(path, None, sid)

    def _read(self, name: str, root: int | None, sid: str) -> Lease | None:
        io = self._store.io
        try:
            fd = io.open(name, _READ, dir_fd=root)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise CorruptStateError(f"{self.where(sid)} is a symbolic link; not followed") from None
            raise
        try:
            st = io.fstat(fd)
            check_stat(st, self.where(sid))
            raw = io.read(fd, st.st_size + 1)  # replaced whole, never written in place
        finally:
            io.close(fd)
        return self._decode(sid, raw)

    def write(self, root: int, lease: Lease) -> None:
        """Replace the State's row with ``lease``, durably (the caller holds :func:`row_lock`)."""
        io = self._store.io
        folder = self._folder(root)
        try:
            row = {
                "owner": lease.owner,
                "token": lease.token,
                "expires_at": iso(lease.expires_at),
                "ttl": lease.ttl.total_seconds(),
            }
            tmp = f"{_TMP}{os.getpid()}-{secrets.token_hex(6)}"
            try:
                write_file(io, folder, tmp, orjson.dumps(row), exclusive=True)
                io.rename(tmp, row_name(lease.state_id), dir_fd=folder)
            except BaseException:
                quietly(lambda: io.unlink(tmp, dir_fd=folder))
                raise
            io.fsync(folder)
        finally:
            os.close(folder)

    def _folder(self, root: int) -> int:
        """``.leases``, opened (made 0700, durably, on the first lease)."""
        store = self._store
        try:
            return store.open_in(root, LEASES, LEASES, DIR)
        except FileNotFoundError:
            pass
        try:
            store.io.mkdir(LEASES, dir_fd=root)
        except FileExistsError:
            pass
        store.io.fsync(root)
        return store.open_in(root, LEASES, LEASES, DIR)

    def _decode(self, sid: str, raw: bytes) -> Lease:
        try:
            row = orjson.loads(raw)
            owner, token, ttl = row["owner"], row["token"], row["ttl"]
            if type(owner) is not str or type(token) is not int or type(ttl) not in (int, float):
                raise TypeError
            expires_at, period = utc_time(row["expires_at"]), timedelta(seconds=ttl)
            return Lease(sid, owner, token, expires_at, period, self._namespace)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise CorruptStateError(
                f"{self.where(sid)} is not a lease row statekeep wrote, so no write to State {sid!r} "
                "can be checked against its lease; move it aside only once no worker holds the State"
            ) from None

    def where(self, sid: str) -> str:
        """The full path of the State's lease row."""
        return self._store.where(LEASES, row_name(sid))


def guard(root: int) -> int:
    """A new descriptor of the namespace folder ``root``, for its flock: one of its own, so
    that it never shares (and releases) a lock another step takes on ``root``."""
    return os.open(".", DIR | os.O_CLOEXEC, dir_fd=root)


@contextmanager
def row_lock(store: StoreFolder, root: int, sid: str) -> Iterator[None]:
    """Hold what every write and delete of ``sid`` holds while it checks the fence: the
    namespace folder's flock, exclusively (a create holds it shared), and then the State's
    flock if it exists (an append or a delete holds that)."""
    held = guard(root)
    try:
        hold(held, fcntl.LOCK_EX)
    except BaseException:
        os.close(held)
        raise
    try:
        while True:
            folder = store.open_state(root, sid)
            if folder is None:  # none appears meanwhile: a create needs the namespace's lock
                yield
                return
            lock(folder)
            if not still_named(root, sid, folder):
                unlock(folder)  # deleted meanwhile: look again
                continue
            try:
                yield
            finally:
                unlock(folder)
            return
    finally:
        unlock(held)

"""Creating a State and deleting one, each atomic by one rename in the store's folder.

A create writes the State whole in a staging folder (``.creating-{pid}-{rand}``) and
renames it into place; a delete renames the State's folder away (``.deleting-...``) and
then removes it. Each holds the flock of its dot-folder for as long as that exists, so a
sweep (:meth:`.folder.StoreFolder._sweep`) removes only those whose process is gone.

A create whose id names an expired State replaces it: with the staging folder complete,
it takes the old State's lock, checks it is still expired, renames it away as a delete
does, and renames the new one into place. A crash between those two renames leaves no
State under the id (the expired one read as absent already) and two leftovers for the
sweep; the create had not returned, so nothing acknowledged is lost.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
from collections.abc import Callable
from functools import partial
from typing import Any

from ..._core.errors import CorruptStateError
from ..._core.labels import encoded_expiry
from ..._core.writes import PreparedWrite, exists_error
from ..._store.expect import sealed_after
from .._fsio import write_private
from .copies import current_snapshot, write_copy
from .folder import StoreFolder, quietly, remove_tree, still_named
from .leases import guard
from .locking import hold, lock, release, unlock
from .logformat import closing_record, frame
from .recovery import Tail
from .trust import CREATING, DELETING, DIR, LOG, foreign_files

#: Whether a State's current snapshot is expired (the store's clock judges).
Lapsed = Callable[[dict[str, Any] | None], bool]


#: Checks a write's lease against the State's lease row (raises if refused), given the
#: namespace folder; the caller holds what :func:`.leases.row_lock` takes.
Fence = Callable[[int], object]


def create(
    store: StoreFolder, tails: dict[str, Tail], write: PreparedWrite, lapsed: Lapsed, fence: Fence
) -> None:
    """Create the State ``write`` names, with its entries and snapshot, durably (over an
    expired State of that id), if ``fence`` lets it."""
    root = store.open_root(create=True)
    assert root is not None
    try:
        _create(store, tails, root, write, lapsed, fence)
    finally:
        os.close(root)


def _create(
    store: StoreFolder, tails: dict[str, Tail], root: int, write: PreparedWrite, lapsed: Lapsed, fence: Fence
) -> None:
    io, sid = store.io, write.state_id
    fence(root)  # first, as every store does; checked again below, atomically with the rename
    if _exists(root, sid) and not _expired(store, root, sid, lapsed):
        raise _exists_error(store, root, sid)
    staging = f"{CREATING}{os.getpid()}-{secrets.token_hex(6)}"
    folder = _make_staging(store, root, staging)
    trash: tuple[int, str] | None = None  # the expired State renamed away, locked
    locks: list[int] = []
    try:
        try:
            entries = b"".join([frame(line) for line in write.lines])
            record = closing_record(
                write.end_seq, entries, write.snapshot, None, write.incarnation, trimmed=write.first_seq > 0
            )  # (a fork, copy or import of a trimmed State starts with its base)
            log = io.open(LOG, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, dir_fd=folder)
            try:
                write_private(io, log, entries + record)
                at = None if write.snapshot is None else len(entries)
                expiry = (encoded_expiry(write.snapshot),)
                sealed = sealed_after(False, write.snapshot, at, write.lines)
                tail = Tail.of(
                    log, write.end_seq, at, expiry=expiry, incarnation=write.incarnation, sealed=sealed
                )
            finally:
                os.close(log)
            if write.snapshot is not None:
                write_copy(store, folder, staging, tail.size, write.end_seq, write.snapshot)
            io.fsync(folder)
            # The namespace folder share-locked from the fence to the rename: a lease changes
            # only under its exclusive lock (.leases.row_lock), whether or not a State (an
            # expired one, which this create replaces) exists.
            locks.append(guard(root))
            hold(locks[0], fcntl.LOCK_SH)
            fence(root)
            for attempt in range(3):
                try:
                    io.rename(staging, sid, dir_fd=root)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
                if attempt < 2 and not _exists(root, sid):
                    continue  # deleted meanwhile
                # Taken: by an expired State (renamed away here, then the rename is tried
                # again: a crash in between leaves the id with no State), else it exists.
                if trash is not None or (trash := _take_expired(store, tails, root, sid, lapsed)) is None:
                    raise _exists_error(store, root, sid) from None
            else:
                raise _exists_error(store, root, sid)
        except BaseException:
            quietly(lambda: remove_tree(io, root, staging))
            raise
        finally:
            if trash is not None:
                try:
                    io.fsync(root)  # the old State is gone durably before its files are
                    quietly(partial(remove_tree, io, root, trash[1]))
                finally:
                    unlock(trash[0])
            for held in locks:
                unlock(held)
    finally:
        unlock(folder)  # only now: a staging folder whose lock is free is a leftover
    io.fsync(root)
    tails[sid] = tail


def _expired(store: StoreFolder, root: int, sid: str, lapsed: Lapsed, folder: int | None = None) -> bool:
    """Is the State ``sid`` (in ``folder`` if given) expired? One that cannot be read is not:
    it stays."""
    opened = store.open_state(root, sid) if folder is None else folder
    if opened is None:
        return False
    try:
        return lapsed(current_snapshot(store, opened, sid))
    except (OSError, ValueError):
        return False
    finally:
        if folder is None:
            os.close(opened)


def _take_expired(
    store: StoreFolder, tails: dict[str, Tail], root: int, sid: str, lapsed: Lapsed
) -> tuple[int, str] | None:
    """If the State ``sid`` is expired, judged under its lock, rename it away and return its
    folder (still locked: the lock tells a sweep it is being removed) and new name."""
    folder = store.open_state(root, sid)
    if folder is None:
        return None  # gone meanwhile; whatever took the name now is not ours to replace
    lock(folder)
    try:
        if (
            not still_named(root, sid, folder)
            or not _expired(store, root, sid, lapsed, folder)
            or foreign_files(folder)
        ):
            unlock(folder)
            return None
        trash = f"{DELETING}{os.getpid()}-{secrets.token_hex(6)}"
        store.io.rename(sid, trash, dir_fd=root)
    except BaseException:
        unlock(folder)
        raise
    tails.pop(sid, None)
    return folder, trash


def _make_staging(store: StoreFolder, root: int, staging: str) -> int:
    """Make the staging folder and return it opened and locked.

    The store's folder is share-locked meanwhile: a sweep takes that lock exclusively,
    so it never sees a staging folder that exists but is not locked yet.
    """
    hold(root, fcntl.LOCK_SH)
    try:
        store.io.mkdir(staging, dir_fd=root)
        try:
            folder = store.open_in(root, staging, staging, DIR)
        except BaseException:
            quietly(lambda: store.io.rmdir(staging, dir_fd=root))
            raise
        lock(folder)
        return folder
    finally:
        release(root)


def _exists(root: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=root, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _exists_error(store: StoreFolder, root: int, sid: str) -> ValueError:
    if store.case_insensitive:
        twin = next((n for n in os.listdir(root) if n.lower() == sid.lower() and n != sid), None)
        if twin is not None:
            return ValueError(
                f"State id {sid!r} differs only in case from {twin!r}, which {store.path} holds; "
                "on this case-insensitive file system both would be one folder. Use another id"
            )
    return exists_error(sid)


def delete(
    store: StoreFolder,
    tails: dict[str, Tail],
    sid: str,
    only_if: Lapsed | None = None,
    keep: Callable[[int], bool] | None = None,
) -> bool:
    """Delete the State ``sid`` if it exists, durably; with ``only_if``, only if that says
    yes to its current snapshot, read with its lock held (gc: only if still expired).
    ``keep`` (given the namespace folder, called with the lock held, and also when there is
    no State) checks the lease: it raises to refuse, or says True to leave the State.
    Returns whether it was deleted."""
    root = store.open_root(create=False, writing=True)
    if root is None:
        return False
    io = store.io
    try:
        folder = store.open_state(root, sid)
        if folder is None:
            if keep is not None:
                keep(root)  # nothing to delete, but a refused lease is still refused
            return False
        lock(folder)  # let a writer in another process finish first
        try:
            if not still_named(root, sid, folder):
                return False
            if only_if is not None and not _expired(store, root, sid, only_if, folder):
                return False
            if keep is not None and keep(root):
                return False
            strangers = foreign_files(folder)
            if strangers:
                raise CorruptStateError(
                    f"{store.where(sid)} holds {', '.join(map(repr, strangers))}, which are not a "
                    "State's files; it is not deleted. Move them out, or remove the folder yourself"
                )
            trash = f"{DELETING}{os.getpid()}-{secrets.token_hex(6)}"
            io.rename(sid, trash, dir_fd=root)  # the atomic point: the State is gone
            tails.pop(sid, None)
            io.fsync(root)
            # A failure from here leaves a leftover; the lock held until it is removed
            # tells a sweep whether its deleter is still at work.
            quietly(lambda: remove_tree(io, root, trash))
            return True
        finally:
            unlock(folder)
    finally:
        os.close(root)

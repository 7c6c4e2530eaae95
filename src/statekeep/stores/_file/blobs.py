"""FileStore's blobs: large values stored once, in ``.blobs/`` in the store's folder.

Layout (shared by every namespace of the store)::

    .blobs/{NAME}        one blob: its bytes (sealed when the store encrypts), 0600
    .blobs/tmp-{pid}-{r} a blob being written (renamed to its NAME when complete)
    .blobs/lock          the blob lock (an empty file, flock'd)

Durability, as for logs (/work/shared/notes/durability.md, rules 1 and 2): a blob is written
to a temp file, fsync'd, renamed to its name, and the ``.blobs`` folder fsync'd, **before**
the log append that refers to it starts; a name already there is not written again (its
bytes are those of the same value). A cut at any step leaves either no file of that name
(the append had not started, so no entry refers to it) or the whole blob.

gc and writers in other processes (a shared/exclusive scheme on ``.blobs/lock``): a write
that refers to blobs holds the lock **shared** from before it looks for or places them until
its log append is durable (or failed); gc holds it **exclusively** while it reads every log
of every namespace for the names they list and removes the blobs none lists (and temp files,
which only a crashed writer leaves: no writer is at work while gc holds the lock), in rounds of
at most :data:`BATCH` removals, each reading the logs again under the lock. So a write's
blob is either placed (or found) after a round ends, or referred to by a durable line when
the round reads the logs (kept): no blob a write refers to is ever removed.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from collections.abc import Collection, Mapping
from pathlib import Path

from ..._core.blobs import NAME_RULE, names_in
from .._fsio import write_file
from .folder import StoreFolder
from .locking import hold, unlock
from .trust import CREATING, DELETING, DIR, LOG, NAMESPACE_DIR, check_owner

BLOBS = ".blobs"  # a State id cannot start with a dot: never a State's folder
LOCK = "lock"
TMP = "tmp-"
#: Blobs removed per round of gc (each round holds the blob lock; about 0.5 s of unlinks here).
BATCH = 1000
_ROOT = os.O_RDONLY | os.O_DIRECTORY  # the store's folder itself may be reached through a link


class BlobFolder:
    """The ``.blobs`` folder of one store folder (every namespace shares it)."""

    def __init__(self, store: StoreFolder) -> None:
        self.store, self.path, self.io = store, store.path, store.io

    def _open(self, create: bool) -> int | None:
        """The ``.blobs`` folder, checked (made durably if ``create``); None if absent."""
        io = self.io
        try:
            root = io.open(str(self.path), _ROOT)
        except FileNotFoundError:
            return None
        try:
            check_owner(root, self.path, io)
            try:
                return self._checked(io.open(BLOBS, DIR, dir_fd=root))
            except FileNotFoundError:
                if not create:
                    return None
            try:
                io.mkdir(BLOBS, dir_fd=root)
            except FileExistsError:
                pass
            io.fsync(root)  # the folder's name is durable before any blob in it
            return self._checked(io.open(BLOBS, DIR, dir_fd=root))
        finally:
            io.close(root)

    def _checked(self, fd: int) -> int:
        try:
            check_owner(fd, self.path / BLOBS, self.io)
        except BaseException:
            self.io.close(fd)
            raise
        return fd

    def _lock(self, folder: int, how: int) -> int:
        fd = self.io.open(LOCK, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, dir_fd=folder)
        try:
            hold(fd, how, self.io)
        except BaseException:
            self.io.close(fd)
            raise
        return fd

    # -- writers ------------------------------------------------------------------------

    def place(self, blobs: Mapping[str, bytes]) -> int:
        """Take the blob lock shared and make ``blobs`` durable (those not already there);
        returns the lock's descriptor: :meth:`done` once the write's append is durable."""
        self.io.close(self.store.open_root(create=True) or -1)  # the store's folder made and marked
        folder = self._open(create=True)
        assert folder is not None
        try:
            held = self._lock(folder, fcntl.LOCK_SH)
            try:
                placed = False
                for name, data in blobs.items():
                    if not self._has(folder, name):
                        self._write_one(folder, name, data)
                        placed = True
                if placed:
                    self.io.fsync(folder)  # their names durable before the append starts
            except BaseException:
                unlock(held, self.io)
                raise
            return held
        finally:
            self.io.close(folder)

    def reseal(self, blobs: Mapping[str, tuple[bytes, bytes]]) -> int:
        """Replace each blob NAME -> (old, new) still holding ``old`` by ``new`` (rekey):
        written to a temp file, fsync'd, renamed over it, the folder fsync'd."""
        folder = self._open(create=False)
        if folder is None:
            return 0
        done = 0
        try:
            held = self._lock(folder, fcntl.LOCK_SH)
            try:
                for name, (old, new) in blobs.items():
                    if self.get([name]).get(name) == old:
                        self._write_one(folder, name, new)
                        done += 1
                if done:
                    self.io.fsync(folder)
            finally:
                unlock(held, self.io)
        finally:
            self.io.close(folder)
        return done

    def done(self, held: int) -> None:
        """Release the blob lock :meth:`place` took."""
        unlock(held, self.io)

    def _has(self, folder: int, name: str) -> bool:
        try:
            self.io.stat(name, dir_fd=folder)
        except FileNotFoundError:
            return False
        return True

    def _write_one(self, folder: int, name: str, data: bytes) -> None:
        io = self.io
        tmp = f"{TMP}{os.getpid()}-{secrets.token_hex(6)}"
        try:
            write_file(io, folder, tmp, data, exclusive=True)
            io.rename(tmp, name, dir_fd=folder)
        except BaseException:
            try:
                io.unlink(tmp, dir_fd=folder)
            except OSError:
                pass
            raise

    # -- readers ------------------------------------------------------------------------

    def get(self, names: Collection[str]) -> dict[str, bytes]:
        """The bytes of the named blobs found."""
        folder = self._open(create=False)
        if folder is None:
            return {}
        io, found = self.io, {}
        try:
            for name in names:
                if not NAME_RULE.fullmatch(name):
                    continue
                try:
                    fd = io.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder)
                except FileNotFoundError:
                    continue
                try:
                    found[name] = io.read_all(fd)
                finally:
                    io.close(fd)
        finally:
            io.close(folder)
        return found

    def usage(self) -> tuple[int, int]:
        """(blobs, bytes) in the folder."""
        folder = self._open(create=False)
        if folder is None:
            return 0, 0
        try:
            sizes = self._sizes(folder)
        finally:
            self.io.close(folder)
        return len(sizes), sum(sizes.values())

    def _sizes(self, folder: int) -> dict[str, int]:
        sizes = {}
        with os.scandir(folder) as it:
            for entry in it:
                if NAME_RULE.fullmatch(entry.name):
                    try:
                        sizes[entry.name] = entry.stat(follow_symlinks=False).st_size
                    except FileNotFoundError:
                        pass
        return sizes

    # -- gc -----------------------------------------------------------------------------

    def collect(self, dry_run: bool) -> tuple[int, int]:
        """Remove (or, ``dry_run``, count) the blobs no log of the store lists: (blobs, bytes).
        In rounds of at most :data:`BATCH` removals, each a gc of its own (the blob lock held
        exclusively while it reads the logs and removes), so writers that refer to blobs wait
        for one round at most, not for the whole gc."""
        folder = self._open(create=False)
        if folder is None:
            return 0, 0
        count = size = 0
        try:
            while True:
                gone, freed, more = self._round(folder, dry_run)
                count, size = count + gone, size + freed
                if dry_run or not more:
                    return count, size
        finally:
            self.io.close(folder)

    def _round(self, folder: int, dry_run: bool) -> tuple[int, int, bool]:
        """One round of :meth:`collect`: (removed, their bytes, whether more may be left)."""
        io = self.io
        held = self._lock(folder, fcntl.LOCK_EX)
        try:
            sizes = self._sizes(folder)
            if not sizes:
                return 0, 0, False
            referred = self._referred()
            gone = [name for name in sizes if name not in referred]
            if dry_run:
                return len(gone), sum(sizes[name] for name in gone), False
            more = len(gone) > BATCH
            gone = gone[:BATCH]
            with os.scandir(folder) as it:
                leftovers = [e.name for e in it if e.name.startswith(TMP)]
            for name in gone + leftovers:
                try:
                    io.unlink(name, dir_fd=folder)
                except FileNotFoundError:
                    pass
            if gone or leftovers:
                io.fsync(folder)  # the removals durable before gc returns
            return len(gone), sum(sizes[name] for name in gone), more
        finally:
            unlock(held, io)

    def _referred(self) -> set[str]:
        """Every blob name any State's log lists, in every namespace of the store."""
        found: set[str] = set()
        spaces = [self.path]
        with os.scandir(self.path) as it:
            spaces += [Path(e.path) for e in it if e.name.startswith(NAMESPACE_DIR) and e.is_dir()]
        for space in spaces:
            with os.scandir(space) as it:
                folders = [
                    e.path
                    for e in it
                    if not e.name.startswith(".") or e.name.startswith((CREATING, DELETING))
                ]
            for folder in folders:
                found |= _names_in_log(os.path.join(folder, LOG))
        return found


def _names_in_log(path: str) -> set[str]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return set()
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            return names_in(f.read())
    finally:
        os.close(fd)

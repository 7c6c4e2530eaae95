"""The store's folder as a FileStore opens it: checked before it is trusted (owner, marker
or adoptable, see :mod:`.trust`), made and marked on the first write, swept of the
leftovers of crashed creates and deletes, and the State folders in it opened safely:
never through a link, and spelled exactly as the id on a case-insensitive file system.

A namespace other than the default keeps its States in a folder of its own in the store's
folder, ``.ns.{name}`` (a State id cannot start with a dot, so it is never a State's), made
on its first write and named in the store's marker first (see :mod:`.trust`). Everything
else below then works on that folder as on the store's: its States, its staging and
trash folders, its sweep.

Reads and listings never write anything: no folder, marker or clean-up of leftovers.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from ..._core.errors import CorruptStateError
from .._fsio import OsIO, make_folders, read_rest
from .locking import hold, release, unlock
from .trust import (
    CREATING,
    DELETING,
    DIR,
    LOG,
    LOG_TMP,
    MARKER_FORMAT,
    NAMESPACE_DIR,
    SNAPSHOT,
    SNAPSHOT_TMP,
    check_adoptable,
    check_owner,
    check_stat,
    euid,
    read_marker,
    write_marker,
)

_ROOT = os.O_RDONLY | os.O_DIRECTORY  # the store's folder itself may be reached through a link
#: A change stamp younger than this is not trusted: a change within one tick of the file
#: system's clock (a coarse kernel tick; whole seconds, or two, on some file systems) may
#: have left the folder's times as they were.
SETTLE_NS = 2_000_000_000
_OS = OsIO()
_IN_A_STATE = frozenset({LOG, LOG_TMP, SNAPSHOT, SNAPSHOT_TMP})  # the files in a State's folder


class StoreFolder:
    """One FileStore's folder, and what it learnt about it (once per instance)."""

    def __init__(
        self,
        path: Path,
        io: OsIO,
        *,
        read_only: bool,
        label: str,
        probe_case: Callable[[int], bool],
        namespace: str | None = None,
    ) -> None:
        self.path = path  # the store's folder
        self.namespace = namespace  # None: the default, whose States are in the store's folder
        self.space = None if namespace is None else NAMESPACE_DIR + namespace
        self._text = str(path if self.space is None else path / self.space)  # where the States are
        self.io = io
        self.case_insensitive = False  # known once opened
        self._read_only = read_only
        self._label = label  # the store's repr, for errors
        self._probe_case = probe_case
        self._swept = False
        self._checked = False  # the marker read, or the folder found to hold only States
        self._marked = False
        self._spelling: dict[str, tuple[int, int]] = {}  # case-insensitive folders: id -> folder

    @property
    def settled(self) -> bool:
        """Checked, marked and swept: a write's open of the folder does nothing more."""
        return self._checked and self._marked and self._swept

    def open_root(self, *, create: bool, writing: bool = False) -> int | None:
        """Open the folder of this namespace's States, checked; None if absent.

        ``create``: make the folder (0700, durably) if it is missing. ``create`` or
        ``writing``: mark the store's folder as a store if it is not yet.
        """
        writing = writing or create
        if writing and self._read_only:
            raise RuntimeError(f"{self._label} was opened with read_only=True; open it without to write")
        try:
            root = self.io.open(str(self.path), _ROOT)
        except FileNotFoundError:
            if not create:
                return None
            make_folders(self.io, self.path)
            root = self.io.open(str(self.path), _ROOT)
        try:
            check_owner(root, self.path, self.io)
            if not self._checked:
                self._check_root(root)
            if writing and not self._marked:
                self._mark(root, None)
                self._marked = True
                self.case_insensitive = self._probe_case(root)
        except BaseException:
            self.io.close(root)
            raise
        if self.space is not None:
            try:
                space = self._open_space(root, create)
            finally:
                self.io.close(root)
            if space is None:
                return None
            root = space
        if writing and not self._swept:  # reads never write, not even to clean up
            self._swept = True
            quietly(lambda: self._sweep(root))
        return root

    def _open_space(self, base: int, create: bool) -> int | None:
        """The namespace's folder in the store's folder ``base`` (made if ``create``)."""
        assert self.space is not None
        where = self._text
        for attempt in (1, 2):
            try:
                fd = self.io.open(self.space, DIR, dir_fd=base)
            except FileNotFoundError:
                if not create or attempt == 2:
                    return None
                self._add_space(base)
                continue
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise CorruptStateError(f"{where} is a symbolic link or a file; not followed") from None
                raise
            try:
                check_owner(fd, where, self.io)
            except BaseException:
                self.io.close(fd)
                raise
            return fd
        raise AssertionError("unreachable")

    def _add_space(self, base: int) -> None:
        """Name the namespace in the marker, then make its folder, both durably."""
        assert self.namespace is not None and self.space is not None
        self._mark(base, self.namespace)
        try:
            self.io.mkdir(self.space, dir_fd=base)
        except FileExistsError:
            pass
        self.io.fsync(base)

    def _mark(self, base: int, namespace: str | None) -> None:
        """Write the marker in this format, naming the namespaces it names now (read again
        under the store folder's lock, so that two processes never lose one) and
        ``namespace``."""
        hold(base, fcntl.LOCK_EX)
        try:
            marker = read_marker(self.io, base, str(self.path))
            named = [] if marker is None else list(marker.get("namespaces", []))
            if marker is None or marker["format"] != MARKER_FORMAT or namespace not in (None, *named):
                write_marker(self.io, base, named if namespace is None else sorted({*named, namespace}))
        finally:
            release(base)

    def _check_root(self, root: int) -> None:
        """Once per instance: the marker is ours, or the folder holds only States."""
        marker = read_marker(self.io, root, str(self.path))
        if marker is None:
            check_adoptable(self.io, root, str(self.path))
        else:
            # A store of an older format is marked again on its first write: its logs
            # are read as they are, and go on in this format.
            self._marked = marker["format"] == MARKER_FORMAT
            self.case_insensitive = self._probe_case(root)
        self._checked = True

    def _sweep(self, root: int) -> None:
        """Remove what crashed creates and deletes left behind: folders whose lock is free."""
        if not hold(root, fcntl.LOCK_EX | fcntl.LOCK_NB):
            self._swept = False  # a create is making its folder: the next operation sweeps
            return
        try:
            with os.scandir(root) as it:
                names = [e.name for e in it if e.name.startswith((CREATING, DELETING))]
            for name in names:
                try:
                    folder = self.io.open(name, DIR, dir_fd=root)
                except OSError:
                    continue
                try:
                    if hold(folder, fcntl.LOCK_EX | fcntl.LOCK_NB):  # else its process is at work
                        quietly(partial(remove_tree, self.io, root, name))
                finally:
                    unlock(folder)
        finally:
            release(root)

    def stamp(self) -> tuple[int, ...] | None:
        """The change stamp (see :mod:`statekeep._store.changes`): the modification and change
        times of this namespace's folder, which a create or a delete (a rename in it) and a
        refresh of a snapshot copy (.copies) move. None while younger than
        :data:`SETTLE_NS`, or if the folder cannot be looked at. Writes of a statekeep
        before this one, and one whose process died before its copy was refreshed, do not
        move it: pollers list now and then anyway."""
        try:
            st = os.stat(self._text)
        except FileNotFoundError:
            return (0,)  # no States yet; making the folder changes this
        except OSError:
            return None
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < SETTLE_NS:
            return None
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)

    def touch(self, root: int | None) -> None:
        """Move the change stamp: set the namespace folder's (``root``, else opened by its
        path) modification time to now."""
        if root is not None:
            self.io.touch(root)
            return
        fd = self.io.open(self._text, _ROOT if self.space is None else DIR)
        try:
            self.io.touch(fd)
        finally:
            self.io.close(fd)

    def open_state(self, root: int, sid: str) -> int | None:
        """The State's folder, opened and checked; None if there is none."""
        try:
            folder = self.open_in(root, sid, sid, DIR)
        except FileNotFoundError:
            return None
        if self.case_insensitive and not self._spelled(root, sid, folder):
            self.io.close(folder)
            return None  # the folder of an id spelled in another case
        return folder

    def _spelled(self, root: int, sid: str, folder: int) -> bool:
        """On a case-insensitive folder: is ``folder`` named exactly ``sid``?"""
        st = self.io.fstat(folder)
        if self._spelling.get(sid) == (st.st_dev, st.st_ino):
            return True
        if sid not in os.listdir(root):
            return False
        self._spelling[sid] = (st.st_dev, st.st_ino)
        return True

    def open_in(self, dir_fd: int, sid: str, name: str, flags: int) -> int:
        """Open ``name`` in ``dir_fd`` (a State's folder, or the store's for ``name == sid``),
        never through a link, and refuse it if another user could change it."""
        return self.open_stat(dir_fd, sid, name, flags)[0]

    def open_stat(self, dir_fd: int, sid: str, name: str, flags: int) -> tuple[int, os.stat_result]:
        """:meth:`open_in`, and what ``fstat`` said of the file opened."""
        io = self.io
        try:
            fd = io.open(name, flags | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise CorruptStateError(
                    f"{self._named(sid, name)} is a symbolic link or not what statekeep made; "
                    "links inside a store are never followed"
                ) from None
            raise
        try:
            st = io.fstat(fd)
            if st.st_uid != euid() or st.st_mode & 0o022:
                check_stat(st, self._named(sid, name))
        except BaseException:
            io.close(fd)
            raise
        return fd, st

    def _named(self, sid: str, name: str) -> str:
        return self.where(sid) if name == sid else self.where(sid, name)

    def read_file(self, folder: int, sid: str, name: str) -> bytes | None:
        """A State's file whole, or None if it has none."""
        try:
            fd, st = self.open_stat(folder, sid, name, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            return read_rest(self.io, fd, st.st_size)
        finally:
            self.io.close(fd)

    def name_paths(self, exc: OSError, sid: str | None = None) -> None:
        """Give ``exc`` the full paths of the files it names: the store opens them relative
        to a folder it holds open, so the system names them bare (``'log.jsonl'``). A name
        of a State's own files is in State ``sid``'s folder, any other in the States' folder."""
        for attr in ("filename", "filename2"):
            name = getattr(exc, attr, None)
            if not isinstance(name, str) or not name or os.path.isabs(name):
                continue
            if sid and name in _IN_A_STATE:
                setattr(exc, attr, self.where(sid, name))
            else:
                setattr(exc, attr, self._text if name == "." else f"{self._text}{os.sep}{name}")

    def where(self, sid: str, name: str | None = None) -> str:
        """The path of a State's folder, or of ``name`` in it, for messages (plain strings:
        this runs for every file a listing opens)."""
        return f"{self._text}{os.sep}{sid}{os.sep}{name}" if name else f"{self._text}{os.sep}{sid}"


def still_named(root: int, sid: str, folder: int, io: OsIO = _OS) -> bool:
    """Is ``folder`` still the State's folder (not renamed away or replaced)?"""
    try:
        named = io.stat(sid, dir_fd=root)
    except FileNotFoundError:
        return False
    held = io.fstat(folder)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def log_named(folder: int, log: int, io: OsIO = _OS) -> bool:
    """Is the open ``log`` still the State's ``log.jsonl`` (a rekey replaces it)?"""
    try:
        named = io.stat(LOG, dir_fd=folder)
    except FileNotFoundError:
        return False
    held = io.fstat(log)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def remove_tree(io: OsIO, root: int, name: str) -> None:
    """Remove a State folder (files only, no subfolders) that is no longer named as one."""
    folder = io.open(name, DIR, dir_fd=root)
    try:
        with os.scandir(folder) as it:
            files = [e.name for e in it]
        for file in files:
            try:
                io.unlink(file, dir_fd=folder)
            except FileNotFoundError:
                pass
    finally:
        os.close(folder)
    io.rmdir(name, dir_fd=root)


def quietly(action: Callable[[], object]) -> None:
    """Run a best-effort clean-up whose failure must not hide the error being raised."""
    try:
        action()
    except OSError:
        pass

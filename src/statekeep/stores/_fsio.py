"""The FileStore's seam to the operating system: every call that writes, syncs, renames,
creates, removes or changes a mode goes through one :class:`OsIO` object, so tests can
replace it to inject short writes, ENOSPC, EIO or a crash after any single operation.
So does every other system call of a steady append (open, stat, flock, close...), of the
general append's staging, and of a read or a listing's rows, so that a test can count them
(tests/stores/file/test_file_syscalls.py). Not yet: the reads of a log's tail during recovery
(``_logtail.reader``) and the checks after a failed fsync (``append.py``), which call ``os``.

Also the one way statekeep makes what it creates owner-only whatever the umask, and
durable, through the seam: :func:`write_private` for a file (0600, written, fsync'd),
:func:`make_folders` for folders (0700 by :meth:`OsIO.mkdir`, each name fsync'd in its
parent)."""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

_DIR = os.O_RDONLY | os.O_DIRECTORY


def _full_fsync(fd: int) -> None:
    try:
        fcntl.fcntl(fd, fcntl.F_FULLFSYNC)  # type: ignore[attr-defined,unused-ignore]
    except OSError:
        os.fsync(fd)  # a file system without it (e.g. some network shares)


if sys.platform == "darwin":
    _sync = _full_fsync
elif hasattr(os, "fdatasync"):
    _sync = os.fdatasync
else:  # pragma: no cover - no supported system lacks both
    _sync = os.fsync


def tree_bytes(*paths: Path) -> int:
    """The bytes of the files at ``paths`` and under them (what ``du --apparent-size``
    counts; a path that does not exist counts 0, a file removed meanwhile too)."""
    total = 0
    for path in paths:
        for folder, _, names in os.walk(path) if path.is_dir() else [(str(path.parent), [], [path.name])]:
            for name in names:
                try:
                    total += os.lstat(os.path.join(folder, name)).st_size
                except OSError:
                    pass
    return total


class OsIO:
    """The real operations. Subclass and override a method to inject faults."""

    def open(self, name: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None) -> int:
        return os.open(name, flags | os.O_CLOEXEC, mode, dir_fd=dir_fd)

    def write(self, fd: int, data: memoryview) -> int:
        """One ``os.write``: may write fewer bytes than given."""
        return os.write(fd, data)

    def write_all(self, fd: int, data: bytes) -> None:
        """Write every byte, looping over short writes (a later call raises the error)."""
        view = memoryview(data)
        while view:
            view = view[self.write(fd, view) :]

    def read_all(self, fd: int) -> bytes:
        """Read from the current offset to the end of the file: one ``read`` if it does
        not grow meanwhile (a regular file reads short only at its end)."""
        return read_rest(self, fd, self.fstat(fd).st_size)

    def fsync(self, fd: int) -> None:
        """Make what ``fd`` holds durable: its data, and the metadata needed to read it
        back (size, a folder's names). ``fdatasync`` where the system has it (Linux);
        ``fcntl(F_FULLFSYNC)`` on macOS, whose ``fsync`` leaves data in the drive's cache;
        else ``fsync``."""
        _sync(fd)

    def touch(self, fd: int) -> None:
        """Set an open file's or folder's modification time to now (``futimens``)."""
        os.utime(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def chmod(self, fd: int, mode: int) -> None:
        """``os.fchmod``: set an open file's mode."""
        os.fchmod(fd, mode)

    def rename(self, src: str, dst: str, *, dir_fd: int) -> None:
        os.rename(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    def mkdir(self, name: str, *, dir_fd: int) -> None:
        """Make a folder, owner-only (0700) whatever the umask."""
        os.mkdir(name, 0o700, dir_fd=dir_fd)
        os.chmod(name, 0o700, dir_fd=dir_fd)  # whatever the umask

    def unlink(self, name: str, *, dir_fd: int) -> None:
        os.unlink(name, dir_fd=dir_fd)

    def rmdir(self, name: str, *, dir_fd: int) -> None:
        os.rmdir(name, dir_fd=dir_fd)

    # What an append also asks of the system: through the seam too, so that a test can
    # count every system call of a write (tests/stores/file/test_file_syscalls.py).

    def close(self, fd: int) -> None:
        os.close(fd)

    def stat(self, name: str, *, dir_fd: int | None = None) -> os.stat_result:
        """``lstat``: a link is described, never followed (its last component)."""
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)

    def fstat(self, fd: int) -> os.stat_result:
        return os.fstat(fd)

    def flock(self, fd: int, how: int) -> None:
        fcntl.flock(fd, how)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def read(self, fd: int, size: int) -> bytes:
        return os.read(fd, size)


def read_rest(io: OsIO, fd: int, size: int) -> bytes:
    """Read from the current offset to the end of a file that was ``size`` bytes long:
    one ``read`` if it did not grow since (a regular file reads short only at its end)."""
    chunk = io.read(fd, size + 1)
    if len(chunk) <= size:
        return chunk
    chunks = [chunk]
    while chunk := io.read(fd, max(size, 1 << 16)):
        chunks.append(chunk)
    return b"".join(chunks)


def write_private(io: OsIO, fd: int, data: bytes, *, sync: bool = True) -> None:
    """Make the open file ``fd`` owner-only (0600, whatever the umask it was created
    under), write ``data`` whole and, with ``sync``, fsync it."""
    io.chmod(fd, 0o600)
    io.write_all(fd, data)
    if sync:
        io.fsync(fd)


def write_file(io: OsIO, dir_fd: int, name: str, data: bytes, *, exclusive: bool = False) -> None:
    """Create ``name`` in ``dir_fd`` (or, unless ``exclusive``, replace its contents) with
    ``data``, owner-only and fsync'd; never through a symbolic link."""
    how = os.O_EXCL if exclusive else os.O_TRUNC
    fd = io.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | how, dir_fd=dir_fd)
    try:
        write_private(io, fd, data)
    finally:
        os.close(fd)


def make_folders(io: OsIO, path: Path) -> None:
    """Make the folder ``path`` and whichever of its parents are missing, each owner-only
    and durable: its parent is fsync'd once it holds the new name (also when another
    process made it meanwhile: its fsync may not have happened yet)."""
    if path.exists():
        return
    make_folders(io, path.parent)
    parent = io.open(str(path.parent), _DIR)
    try:
        try:
            io.mkdir(path.name, dir_fd=parent)
        except FileExistsError:
            pass
        io.fsync(parent)
    finally:
        os.close(parent)

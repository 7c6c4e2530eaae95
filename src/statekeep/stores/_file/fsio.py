"""The FileStore's seam to the operating system: every call that writes, syncs, renames
or removes goes through one :class:`OsIO` object, so tests can replace it to inject
short writes, ENOSPC, EIO or a crash after any single operation."""

from __future__ import annotations

import os


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
        """Read from the current offset to the end of the file."""
        chunks = []
        size = max(os.fstat(fd).st_size, 1 << 16)
        while chunk := os.read(fd, size):
            chunks.append(chunk)
        return b"".join(chunks)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def rename(self, src: str, dst: str, *, dir_fd: int) -> None:
        os.rename(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    def mkdir(self, name: str, *, dir_fd: int) -> None:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
        os.chmod(name, 0o700, dir_fd=dir_fd)  # whatever the umask

    def unlink(self, name: str, *, dir_fd: int) -> None:
        os.unlink(name, dir_fd=dir_fd)

    def rmdir(self, name: str, *, dir_fd: int) -> None:
        os.rmdir(name, dir_fd=dir_fd)

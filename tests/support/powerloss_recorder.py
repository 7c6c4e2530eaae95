"""The recorder of the FileStore power-loss test: an :class:`~statekeep.stores.OsIO` that
performs every operation for real and logs each one a power cut could lose, for
:mod:`tests.support.powerloss` to replay.

Logged (as :class:`Op`): file and folder creates, writes with their offset and bytes,
truncates, fsyncs, renames, unlinks and rmdirs. Ops name *model inodes*, numbered at
creation, so an inode number the file system reuses is a new inode here. Opens without
``O_CREAT``, reads and ``chmod`` change nothing a power cut could lose (the model rebuilds
every file 0600 and every folder 0700).
"""

from __future__ import annotations

import fcntl
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from statekeep.stores import OsIO


@dataclass(frozen=True, slots=True)
class Op:
    """One recorded operation. ``kind``: create, write, trunc, fsync, rename, unlink."""

    index: int
    kind: str
    node: int = -1  # the inode it acts on (create: the new one; unlink: none)
    folder: int = -1  # create, rename, unlink: the folder whose names change
    name: str = ""
    new_name: str = ""  # rename
    is_dir: bool = False  # create
    offset: int = 0  # write
    data: bytes = b""  # write
    size: int = 0  # trunc
    where: str = ""  # the path it acted on when recorded (for messages; "" off Linux)

    def __str__(self) -> str:
        at = f" {self.where!r}" if self.where else f" (inode {self.node})"
        if self.kind == "write":
            return f"#{self.index} write {len(self.data)} B at {self.offset} to{at}"
        if self.kind == "trunc":
            return f"#{self.index} truncate{at} to {self.size}"
        if self.kind == "fsync":
            return f"#{self.index} fsync{at}"
        if self.kind == "rename":
            return f"#{self.index} rename {self.name} -> {self.new_name} in{at}"
        what = "mkdir" if self.is_dir else "create" if self.kind == "create" else "unlink"
        return f"#{self.index} {what} {self.name} in{at}"


class RecordingIO(OsIO):
    """Performs every operation for real, and logs those a power cut could lose in ``ops``."""

    def __init__(self, base: Path) -> None:
        self.ops: list[Op] = []
        self._lock = threading.Lock()  # held across each real call: the log is its real order
        self._ids: dict[tuple[int, int], int] = {}  # the inode a (dev, ino) names now
        self._count = 0
        self.base_path = base
        self.base = self._new(os.stat(base))  # the folder the store is made in; durable

    def mark(self) -> int:
        """How many ops are logged so far."""
        with self._lock:
            return len(self.ops)

    def _new(self, st: os.stat_result) -> int:
        self._count += 1
        self._ids[st.st_dev, st.st_ino] = self._count
        return self._count

    def _node(self, st: os.stat_result) -> int:
        return self._ids[st.st_dev, st.st_ino]

    def _log(self, kind: str, fd: int | None, **fields: object) -> None:
        where = ""
        if fd is not None:
            try:
                where = os.path.relpath(os.readlink(f"/proc/self/fd/{fd}"), self.base_path)
            except OSError:
                pass
        self.ops.append(Op(len(self.ops), kind, where=where, **fields))  # type: ignore[arg-type]

    def _where(self, name: str, dir_fd: int | None) -> tuple[int, str]:
        if dir_fd is None:
            return self._node(os.stat(os.path.dirname(os.path.abspath(name)))), os.path.basename(name)
        return self._node(os.fstat(dir_fd)), name

    def open(self, name: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None) -> int:
        if not flags & os.O_CREAT:
            return super().open(name, flags, mode, dir_fd=dir_fd)
        with self._lock:
            try:
                os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                existed = True
            except FileNotFoundError:
                existed = False
            fd = super().open(name, flags, mode, dir_fd=dir_fd)
            st = os.fstat(fd)
            if not existed:
                folder, base = self._where(name, dir_fd)
                self._log("create", dir_fd, node=self._new(st), folder=folder, name=base)
            elif flags & os.O_TRUNC:
                self._log("trunc", fd, node=self._node(st), size=0)
            return fd

    def write(self, fd: int, data: memoryview) -> int:
        with self._lock:
            st = os.fstat(fd)
            appending = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND
            offset = st.st_size if appending else os.lseek(fd, 0, os.SEEK_CUR)
            n = super().write(fd, data)
            self._log("write", fd, node=self._node(st), offset=offset, data=bytes(data[:n]))
            return n

    def fsync(self, fd: int) -> None:
        with self._lock:
            super().fsync(fd)
            self._log("fsync", fd, node=self._node(os.fstat(fd)))

    def truncate(self, fd: int, size: int) -> None:
        with self._lock:
            super().truncate(fd, size)
            self._log("trunc", fd, node=self._node(os.fstat(fd)), size=size)

    def rename(self, src: str, dst: str, *, dir_fd: int) -> None:
        with self._lock:
            node = self._node(os.stat(src, dir_fd=dir_fd, follow_symlinks=False))
            super().rename(src, dst, dir_fd=dir_fd)
            self._log(
                "rename", dir_fd, node=node, folder=self._node(os.fstat(dir_fd)), name=src, new_name=dst
            )

    def mkdir(self, name: str, *, dir_fd: int) -> None:
        with self._lock:
            super().mkdir(name, dir_fd=dir_fd)
            node = self._new(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
            self._log(
                "create", dir_fd, node=node, folder=self._node(os.fstat(dir_fd)), name=name, is_dir=True
            )

    def unlink(self, name: str, *, dir_fd: int) -> None:
        with self._lock:
            super().unlink(name, dir_fd=dir_fd)
            self._log("unlink", dir_fd, folder=self._node(os.fstat(dir_fd)), name=name)

    def rmdir(self, name: str, *, dir_fd: int) -> None:
        with self._lock:
            super().rmdir(name, dir_fd=dir_fd)
            self._log("unlink", dir_fd, folder=self._node(os.fstat(dir_fd)), name=name)

"""A model of what a power cut leaves of a folder tree, for the FileStore power-loss test.

It replays the operations :class:`tests.support.powerloss_recorder.RecordingIO` logged while a
FileStore ran on a real folder, and lists the trees a power cut after any of them could
leave.

The model of a power cut (POSIX, as ext4 may behave; nothing is assumed beyond it):

- ``OsIO.fsync`` is ``fdatasync``. On a file it makes its data and size durable; on a
  folder, its names (the creates, renames, unlinks and rmdirs inside it). Neither makes
  the other durable: a file fsync'd under a name whose folder was not is unreachable.
- Each write or truncate of a file since its last fsync may be lost or kept, and the
  write that was under way may be *torn*: any subset of its 4 KiB pages reached the disk.
  A page not kept reads back as what it held before (zeros past the old end) if the
  file's size covers it, or the file ends sooner (after its last kept page).
- Each create, rename, unlink and rmdir in a folder since its last fsync may or may not
  have happened, each on its own (a rename not made durable leaves the old name).

:meth:`Disk.crash_states` lists the trees a power cut after a given op could leave.
Where the choices explode it bounds them, as follows (``rng`` is seeded per crash point):

- a file's unsynced ops: every subset of them kept when there are at most 4, else
  every prefix; then each write torn after the ops before it were kept: every subset of
  its pages when it spans at most 4, else the single pages kept, the single pages missing
  and 6 random subsets; each with the file's full size and ended after its last kept
  page; and the write cut after 1 byte, half its bytes and all but 1;
- the folders' unsynced name ops: every subset when there are at most 6 (all folders
  together), else none, all, each one alone, all but each one, and 16 random subsets;
- the files reachable in such a tree: every combination of their versions when there
  are at most :data:`COMBOS` of them, else each file varied through all its versions
  with every other file at its oldest and at its newest, and 32 random combinations.

A *hole* is an unsynced write's bytes kept after bytes of it (or of an earlier unsynced
write to the file) that were lost: :attr:`CrashState.hole` says whether a tree has one.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.powerloss_recorder import Op, RecordingIO

PAGE = 4096
COMBOS = 128  # file-version combinations checked whole per tree of names, above: bounded


@dataclass(frozen=True, slots=True)
class Version:
    """One content a file may have after the cut."""

    data: bytes
    hole: bool  # bytes kept after bytes lost, within its unsynced writes
    how: str


@dataclass(frozen=True, slots=True)
class CrashState:
    """One tree a power cut may leave: path (from the base folder) -> bytes, None for a folder."""

    tree: dict[str, bytes | None]
    hole: bool  # some file kept an unsynced write's bytes after bytes it lost
    how: str  # which unsynced operations survived
    key: bytes  # the tree's digest: trees that come out the same are checked once


@dataclass(slots=True)
class _File:
    durable: bytes = b""
    pending: list[Op] = field(default_factory=list)


@dataclass(slots=True)
class _Folder:
    durable: dict[str, int] = field(default_factory=dict)
    pending: list[Op] = field(default_factory=list)


class Disk:
    """The model after some ops: per inode, what is durable and what is not yet."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.files: dict[int, _File] = {}
        self.folders: dict[int, _Folder] = {base: _Folder()}

    def apply(self, op: Op) -> None:
        if op.kind == "create":
            self.folders[op.folder].pending.append(op)
            if op.is_dir:
                self.folders[op.node] = _Folder()
            else:
                self.files[op.node] = _File()
        elif op.kind in ("rename", "unlink"):
            self.folders[op.folder].pending.append(op)
        elif op.kind in ("write", "trunc"):
            self.files[op.node].pending.append(op)
        elif op.node in self.files:  # fsync of a file: its data and size
            file = self.files[op.node]
            for done in file.pending:
                file.durable = _apply(file.durable, done)
            file.pending = []
        else:  # fsync of a folder: its names
            folder = self.folders[op.node]
            folder.durable, folder.pending = _names(folder.durable, folder.pending), []

    def crash_states(self, rng: random.Random) -> Iterator[CrashState]:
        """The trees a power cut now may leave (bounded as the module says)."""
        unsynced = [op for folder in self.folders.values() for op in folder.pending]
        versions: dict[int, list[Version]] = {}
        for mask in _subsets(len(unsynced), 6, 16, rng):
            kept = {op.index for op, keep in zip(unsynced, mask, strict=True) if keep}
            paths = self._paths(kept)
            changing = [(p, n) for p, n in paths.items() if n in self.files and self.files[n].pending]
            for _, n in changing:
                if n not in versions:
                    versions[n] = _versions(self.files[n], rng)
            options = [versions[n] for _, n in changing]
            names = "; ".join(f"{'kept' if op.index in kept else 'lost'} {op}" for op in unsynced)
            for combo in _combos([len(o) for o in options], rng):
                chosen = {n: o[i] for (_, n), o, i in zip(changing, options, combo, strict=True)}
                tree = {
                    p: None if n in self.folders else chosen[n].data if n in chosen else self.files[n].durable
                    for p, n in paths.items()
                }
                files = "; ".join(f"{p}: {chosen[n].how}" for p, n in changing)
                yield CrashState(
                    tree,
                    any(v.hole for v in chosen.values()),
                    f"{names or 'no unsynced names'}. {files}",
                    _digest(tree),
                )

    def now(self) -> dict[str, bytes | None]:
        """The tree as it is before any power cut: every operation done."""
        kept = {op.index for folder in self.folders.values() for op in folder.pending}
        tree: dict[str, bytes | None] = {}
        for path, node in self._paths(kept).items():
            if node in self.folders:
                tree[path] = None
                continue
            data = self.files[node].durable
            for op in self.files[node].pending:
                data = _apply(data, op)
            tree[path] = data
        return tree

    def _paths(self, kept: set[int]) -> dict[str, int]:
        """Every path under the base folder, with the unsynced name ops in ``kept`` done."""
        paths: dict[str, int] = {}

        def walk(folder: int, prefix: str) -> None:
            state = self.folders[folder]
            names = _names(state.durable, [op for op in state.pending if op.index in kept])
            for name, node in sorted(names.items()):
                paths[prefix + name] = node
                if node in self.folders:
                    walk(node, f"{prefix}{name}/")

        walk(self.base, "")
        return paths


def _names(durable: dict[str, int], ops: list[Op]) -> dict[str, int]:
    names = dict(durable)
    for op in ops:
        if op.kind == "rename":
            names.pop(op.name, None)
            names[op.new_name] = op.node
        elif op.kind == "create":
            names[op.name] = op.node
        else:
            names.pop(op.name, None)
    return names


def _apply(data: bytes, op: Op) -> bytes:
    if op.kind == "trunc":
        return data[: op.size].ljust(op.size, b"\0")
    return data[: op.offset].ljust(op.offset, b"\0") + op.data + data[op.offset + len(op.data) :]


def _versions(file: _File, rng: random.Random) -> list[Version]:
    """What the file may hold: its oldest version first, then its newest, then the rest."""
    ops = file.pending
    found: dict[bytes, Version] = {}
    n = len(ops)
    masks = (
        itertools.product((False, True), repeat=n)
        if n <= 4
        else ((True,) * i + (False,) * (n - i) for i in range(n + 1))
    )
    newest = None
    for mask in masks:
        data, lost, hole = file.durable, False, False
        for op, keep in zip(ops, mask, strict=True):
            if keep:
                data, hole = _apply(data, op), hole or (lost and op.kind == "write")
            else:
                lost = lost or op.kind == "write"
        kept = ",".join(f"#{op.index}" for op, keep in zip(ops, mask, strict=True) if keep)
        found.setdefault(data, Version(data, hole, f"unsynced ops kept: {kept or 'none'}"))
        if all(mask):
            newest = data
    data = file.durable
    for op in ops:
        if op.kind == "write" and op.data:
            for version in _torn(data, op, rng):
                old = found.get(version.data)
                if old is None or (old.hole and not version.hole):
                    found[version.data] = version
        data = _apply(data, op)
    out = list(found.values())
    out.sort(key=lambda v: (v.data != file.durable, v.data != newest))
    return out


def _torn(before: bytes, op: Op, rng: random.Random) -> Iterator[Version]:
    """``op`` (a write) torn, the ops before it kept: per 4 KiB page, or cut short."""
    after = _apply(before, op)
    old = before.ljust(len(after), b"\0")
    first, last = op.offset // PAGE, (op.offset + len(op.data) - 1) // PAGE
    for kept in _page_subsets(last - first + 1, rng):
        if all(kept) or not any(kept):
            continue  # the write kept or lost whole: a version already
        buf = bytearray(old)
        for i, keep in enumerate(kept):
            if keep:
                lo = (first + i) * PAGE
                buf[lo : lo + PAGE] = after[lo : lo + PAGE]
        top = max(i for i, keep in enumerate(kept) if keep)
        hole = not all(kept[:top])
        pages = "".join("1" if keep else "0" for keep in kept)
        yield Version(bytes(buf), hole, f"#{op.index} torn: pages {pages} kept, full size")
        short = max(len(before), min(len(after), (first + top + 1) * PAGE))
        if short < len(after):
            yield Version(bytes(buf[:short]), hole, f"#{op.index} torn: pages {pages} kept, ends at {short}")
    for cut in sorted({1, len(op.data) // 2, len(op.data) - 1}):
        if 0 < cut < len(op.data):
            data = _apply(before, Op(op.index, "write", offset=op.offset, data=op.data[:cut]))
            yield Version(data, False, f"#{op.index} cut after {cut} of {len(op.data)} B")


def _page_subsets(pages: int, rng: random.Random) -> Iterator[tuple[bool, ...]]:
    if pages <= 4:
        yield from itertools.product((False, True), repeat=pages)
        return
    for i in range(pages):
        yield tuple(j == i for j in range(pages))
        yield tuple(j != i for j in range(pages))
    for _ in range(6):
        yield tuple(rng.random() < 0.5 for _ in range(pages))


def _subsets(n: int, whole: int, sample: int, rng: random.Random) -> Iterator[tuple[bool, ...]]:
    if n <= whole:
        yield from itertools.product((False, True), repeat=n)
        return
    yield (False,) * n
    yield (True,) * n
    for i in range(n):
        yield tuple(j == i for j in range(n))
        yield tuple(j != i for j in range(n))
    for _ in range(sample):
        yield tuple(rng.random() < 0.5 for _ in range(n))


def _combos(sizes: list[int], rng: random.Random) -> Iterator[tuple[int, ...]]:
    """Which version of each file: all combinations, or (too many) the bounded set."""
    total = 1
    for size in sizes:
        total *= size
    if total <= COMBOS:
        yield from itertools.product(*(range(size) for size in sizes))
        return
    for base in (0, 1):
        at = [min(base, size - 1) for size in sizes]
        for f, size in enumerate(sizes):
            for v in range(size):
                yield (*at[:f], v, *at[f + 1 :])
    for _ in range(32):
        yield tuple(rng.randrange(size) for size in sizes)


def _digest(tree: dict[str, bytes | None]) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for path, data in sorted(tree.items()):
        h.update(path.encode() + (b"/\0" if data is None else b"\0%d\0" % len(data) + data))
    return h.digest()


def crash_points(io: RecordingIO) -> Iterator[tuple[int, Disk]]:
    """(k, the model after the first k ops) for k = 0 .. len(ops)."""
    disk = Disk(io.base)
    yield 0, disk
    for op in io.ops:
        disk.apply(op)
        yield op.index + 1, disk


def build(tree: dict[str, bytes | None], where: Path) -> None:
    """Make ``tree`` under the new folder ``where``: folders 0700, files 0600."""
    where.mkdir(mode=0o700)
    for path, data in sorted(tree.items()):  # a folder sorts before what it holds
        target = where / path
        if data is None:
            target.mkdir(mode=0o700)
            os.chmod(target, 0o700)
            continue
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


def read_tree(where: Path) -> dict[str, bytes | None]:
    """The tree under ``where`` as :func:`build` takes it."""
    tree: dict[str, bytes | None] = {}
    for path in sorted(where.rglob("*")):
        tree[path.relative_to(where).as_posix()] = None if path.is_dir() else path.read_bytes()
    return tree

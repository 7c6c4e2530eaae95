"""The writer processes tests/stores/file/test_filestore_kill.py SIGKILLs, and the content they write.

A writer is forked (multiprocessing's forkserver, which has statekeep imported already) and
appends to one State through the public API forever, until the test kills it. It reports
over its pipe, one short message per event, before the event happens:

- ``ready N``: it read the State (``N`` entries) and continues from there;
- ``start FIRST COUNT``: it calls ``write`` with entries FIRST..FIRST+COUNT-1;
- ``io OP ...``: the store is about to call ``OP`` on its I/O seam (each ``write`` of the
  seam sends at most :data:`CHUNK` bytes, a short write, so a large write is many steps);
- ``ack FIRST COUNT``: that ``write`` returned (the write is acknowledged);
- ``conflict``: another writer took those seqs (StateConflictError); it reads again;
- ``paused``: it reached the I/O step it was told to stop before, and waits to be killed;
- ``error TRACEBACK``: anything else went wrong; it exits.

What a writer ``tag`` writes at seq ``first`` is a pure function of (seed, tag, first), so
the test recomputes every entry and snapshot it finds and tells which write it belongs to.
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import traceback
from dataclasses import dataclass
from functools import lru_cache
from multiprocessing.connection import Connection
from typing import Any

from statekeep import FileStore, StateConflictError, StateExistsError
from statekeep.stores import OsIO

CHUNK = 128 * 1024  # the most one seam write sends: a 4 MB entry is 32 steps


@lru_cache(maxsize=64)
def _block(tag: str) -> str:
    return hashlib.shake_128(tag.encode()).hexdigest(8_192)


def _payload(tag: str, size: int) -> str:
    """``size`` characters, deterministic from ``tag`` (a 16 KiB block, repeated: cheap)."""
    block = _block(tag)
    return (block * (size // len(block) + 1))[:size]


def _size(rng: random.Random) -> int:
    """From a few bytes to several MB; most writes of a large entry are long enough for a
    kill to land in their middle."""
    roll = rng.random()
    if roll < 0.45:
        return rng.randint(1, 100)
    if roll < 0.85:
        return rng.randint(1_000, 100_000)
    return rng.randint(1_000_000, 4_000_000)


@dataclass(frozen=True)
class Planned:
    """One write: its entries and its snapshot (None: the write keeps the stored one)."""

    entries: list[dict[str, Any]]
    snapshot: dict[str, Any] | None


@lru_cache(maxsize=256)
def planned(seed: int, tag: str, first: int) -> Planned:
    """What writer ``tag`` writes when the State holds ``first`` entries. Every entry says
    which write it belongs to (``w``: tag, first seq, index in the write, count)."""
    rng = random.Random(f"{seed}:{tag}:{first}")
    count = rng.choice((1, 1, 2, 3))
    ents = [
        {
            "seq": first + i,
            "kind": "blob",
            "w": [tag, first, i, count],
            "data": _payload(f"{seed}:{tag}:{first + i}", _size(rng)),
        }
        for i in range(count)
    ]
    keep = first > 0 and rng.random() < 0.25  # a create always carries a snapshot
    snap = None
    if not keep:
        snap = {
            "task": "kill test",
            "created_at": "2026-01-01T00:00:00+00:00",
            "updated_at": "2026-01-01T00:00:00+00:00",
            "turn": first,
            "stopped_by": None,
            "finished": False,
            "w": [tag, first, count],
            "last_seq": first + count - 1,
            "notes": _payload(f"snap:{seed}:{tag}:{first}", rng.choice((0, 10, 5_000, 60_000))),
        }
    return Planned(ents, snap)


class _Reporter(OsIO):
    """The real I/O, each step announced to the test first; short writes of CHUNK bytes."""

    def __init__(self, say: Any, conn: Connection, pause_at: int | None) -> None:
        self._say = say
        self._conn = conn
        self.pause_at = pause_at
        self.armed = False  # steps count from the first write's start
        self.steps = 0

    def _step(self, what: str) -> None:
        if self.armed:
            if self.steps == self.pause_at:
                self._say("paused")
                self._conn.recv_bytes()  # never answered: the test kills this process now
            self.steps += 1
        self._say(f"io {what}")

    def open(self, name: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None) -> int:
        self._step("open")
        return super().open(name, flags, mode, dir_fd=dir_fd)

    def write(self, fd: int, data: memoryview) -> int:
        self._step(f"write {min(len(data), CHUNK)}")
        return super().write(fd, data[:CHUNK])

    def fsync(self, fd: int) -> None:
        self._step("fsync")
        super().fsync(fd)

    def truncate(self, fd: int, size: int) -> None:
        self._step("truncate")
        super().truncate(fd, size)

    def rename(self, src: str, dst: str, *, dir_fd: int) -> None:
        self._step("rename")
        super().rename(src, dst, dir_fd=dir_fd)

    def unlink(self, name: str, *, dir_fd: int) -> None:
        self._step("unlink")
        super().unlink(name, dir_fd=dir_fd)

    def mkdir(self, name: str, *, dir_fd: int) -> None:
        self._step("mkdir")
        super().mkdir(name, dir_fd=dir_fd)

    def rmdir(self, name: str, *, dir_fd: int) -> None:
        self._step("rmdir")
        super().rmdir(name, dir_fd=dir_fd)


def writer(conn: Connection, root: str, sid: str, seed: int, tag: str, pause_at: int | None) -> None:
    """Append to ``sid`` forever (see the module docstring). With ``pause_at``, stop before
    that I/O step (counted from the first write's start) and wait to be killed."""
    lock = threading.Lock()  # the store's I/O runs on its own thread

    def say(line: str) -> None:
        with lock:
            conn.send_bytes(line.encode())

    try:
        io = _Reporter(say, conn, pause_at)
        store = FileStore(root, io=io)
        while True:
            record = store.read(sid)
            exists = record is not None
            first = len(record.entries) if record is not None else 0
            say(f"ready {first}")
            while True:
                write = planned(seed, tag, first)
                say(f"start {first} {len(write.entries)}")
                io.armed = True
                try:
                    store.write(sid, write.entries, write.snapshot, create=not exists)
                except (StateConflictError, StateExistsError):
                    say("conflict")  # the other writer was first: continue from what it wrote
                    break
                say(f"ack {first} {len(write.entries)}")
                first += len(write.entries)
                exists = True
    except BaseException:
        say("error " + traceback.format_exc())
        os._exit(1)

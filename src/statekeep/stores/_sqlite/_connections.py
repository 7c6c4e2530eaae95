"""sqlite3 connections: how one is opened, and one store's connections in one process.

Each process has its own :class:`Connections` per store, in a :class:`ProcessSlot`: one
writer connection (used by one commit at a time) and a few idle reader connections. A
forked child opens its own. It never uses the parent's, nor closes them, not even by
letting them be garbage collected: closing runs a checkpoint and releases locks that are
the parent's. So a child keeps every inherited :class:`Connections` referenced until it
exits.

A store's connections are closed by ``close()``, at interpreter exit, or (with a
ResourceWarning) when the store is dropped unclosed: see :class:`statekeep._runtime.bridge.Closer`.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..._core.errors import NotAStoreError
from ..._runtime.bridge import Closer, Owner, owner
from ..._runtime.slot import ProcessSlot
from ..._store.expect import sealed_text
from . import _sql as sql

T = TypeVar("T")

#: How long SQLite itself waits for another connection's lock before giving up (busy_timeout).
BUSY_TIMEOUT_SECONDS = 30.0

# Reader connections kept open for reuse per store and process; more are closed after use.
_MAX_IDLE_READERS = 8
# After a checkpoint the WAL file is cut back to this size, so one big write does not
# leave a big file behind.
_WAL_SIZE_LIMIT = 64 * 1024 * 1024


def connect(path: Path, *, waits: bool = True) -> sqlite3.Connection:
    """A new connection to ``path`` with statekeep's settings (autocommit: transactions
    are begun explicitly). Refuses a file that is not a SQLite database.

    ``waits=False``: SQLite reports a lock held elsewhere at once (busy_timeout 0), for a
    connection whose caller must not wait (on the owner loop) or waits in Python (the writer).
    """
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False)
    conn.create_function("statekeep_sealed", 1, sealed_text, deterministic=True)
    with closed_on_error(conn):
        try:
            conn.execute(sql.BUSY_TIMEOUT.format(milliseconds=int(BUSY_TIMEOUT_SECONDS * 1000)))
            conn.execute(sql.SYNCHRONOUS_FULL)
            conn.execute(sql.FOREIGN_KEYS_ON)
            conn.execute(sql.JOURNAL_SIZE_LIMIT.format(size=_WAL_SIZE_LIMIT))
            if not waits:
                conn.execute(sql.BUSY_TIMEOUT.format(milliseconds=0))
        except sqlite3.DatabaseError as exc:
            refuse_not_a_database(path, exc)
            raise
    return conn


def refuse_not_a_database(path: Path, exc: sqlite3.DatabaseError) -> None:
    """Raise NotAStoreError if ``exc`` says the file is not a SQLite database."""
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_NOTADB:
        raise NotAStoreError(
            f"{path} is not a SQLite database ({exc}); nothing was changed",
            "Pass a statekeep SQLite database, or a folder for a FileStore",
        ) from None


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite reporting the database locked (worth a retry)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return (
        isinstance(exc, sqlite3.OperationalError)
        and code is not None
        and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    )


def retry_busy(path: Path, patience: float, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, run again (with backoff) while SQLite reports the database locked; after
    ``patience`` seconds, TimeoutError.

    ``fn`` must leave no transaction open when it raises, so a rerun starts clean.
    This is how the writer (busy_timeout 0) waits for another connection's write lock;
    for the readers, whose busy_timeout waits inside SQLite, it covers the cases where
    SQLite reports BUSY at once (a WAL recovery under way, a deadlock it detected).
    """
    deadline = time.monotonic() + patience
    delay = 0.001
    while True:
        try:
            return fn(*args, **kwargs)
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{path}: the database stayed locked by another connection for more "
                    f"than {patience:.0f} s; gave up ({exc})"
                ) from exc
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 0.1)  # as SQLite's own busy handler, at most


def quietly(action: Callable[[], object]) -> None:
    """Best-effort clean-up whose failure must not hide the error being raised."""
    try:
        action()
    except (sqlite3.Error, OSError):
        pass


class _on_error:  # a class, not a generator: it is on every commit's path
    """Call ``undo()`` if the block raises (the error goes on)."""

    __slots__ = ("_undo",)

    def __init__(self, undo: Callable[[], object]) -> None:
        self._undo = undo

    def __enter__(self) -> None:
        pass

    def __exit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> None:
        if kind is not None:
            self._undo()


def closed_on_error(conn: sqlite3.Connection) -> AbstractContextManager[None]:
    """Close ``conn`` if the block raises (the error goes on)."""
    return _on_error(conn.close)


def rolled_back_on_error(conn: sqlite3.Connection) -> AbstractContextManager[None]:
    """Roll back the open transaction if the block raises (the error goes on, whatever
    the rollback meets)."""

    def roll_back() -> None:
        if conn.in_transaction:
            quietly(lambda: conn.execute(sql.ROLLBACK))

    return _on_error(roll_back)


@dataclass(eq=False)
class Connections:
    """One store's sqlite3 connections in one process.

    The writer is used by one commit at a time; readers are taken from ``idle`` and given
    back. Once ``closed``, connections are closed as soon as they are given back.
    """

    closer: Closer | None = None
    schema_ok: bool = False
    closed: bool = False
    writer: sqlite3.Connection | None = None
    writer_busy: bool = False
    idle: list[sqlite3.Connection] = field(default_factory=list)
    #: The reader used on the owner loop's thread only (busy_timeout 0: it never waits).
    loop_reader: sqlite3.Connection | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    schema_lock: threading.Lock = field(default_factory=threading.Lock)

    def take_writer(self, connect: Callable[[], sqlite3.Connection]) -> sqlite3.Connection:
        with self.lock:  # busy before anything else, so that close() leaves it alone
            self.writer_busy = True
            writer = self.writer
        if writer is None:
            try:
                writer = self.writer = connect()
            except BaseException:
                self.writer_busy = False
                raise
        return writer

    def give_writer(self, conn: sqlite3.Connection) -> None:
        with self.lock:
            self.writer_busy = False
            if not self.closed:
                return
            self.writer = None
        quietly(conn.close)

    def take_reader(self) -> sqlite3.Connection | None:
        with self.lock:
            return self.idle.pop() if self.idle else None

    def give_reader(self, conn: sqlite3.Connection, *, reuse: bool) -> None:
        with self.lock:
            if reuse and not self.closed and len(self.idle) < _MAX_IDLE_READERS:
                self.idle.append(conn)
                return
        quietly(conn.close)

    def close(self) -> None:
        """Close every connection not in use now; those in use close when given back."""
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
            if not self.writer_busy and self.writer is not None:
                idle.append(self.writer)
                self.writer = None
        for conn in idle:
            quietly(conn.close)


def connections_slot(store: object) -> ProcessSlot[Connections]:
    """The slot holding ``store``'s connections in each process.

    Call its ``get()`` on the owner loop first (two worker threads must not both make
    them); worker threads then find them made. The slot refers to the store weakly, so
    a store dropped unclosed is collected, and its connections closed with a warning.
    """
    ref = weakref.ref(store)

    def make(own: Owner) -> Connections:
        conns = Connections()
        target = ref()
        if target is not None:  # it is: the store is asking
            conns.closer = own.track(target, _closer(conns))
        return conns

    return ProcessSlot(make)


def _closer(conns: Connections) -> Callable[[], Coroutine[Any, Any, None]]:
    """Closes ``conns`` on a worker thread (closing may checkpoint the WAL). It must not
    refer to the store, which is only weakly tracked."""

    async def close() -> None:
        await close_all(conns)

    return close


async def close_all(conns: Connections) -> None:
    """On the owner loop: close ``conns``. The loop's own reader is closed here, in this
    step, where no other step can be using it; the rest on a worker thread (closing may
    checkpoint the WAL), while the loop goes on with other operations."""
    with conns.lock:
        conns.closed = True  # from here, loop_reader() refuses to make another
        reader, conns.loop_reader = conns.loop_reader, None
    if reader is not None:
        quietly(reader.close)
    await owner().io.run(conns.close)

"""SQLiteStore: every State in one SQLite database file (stdlib ``sqlite3``, no server).

Schema (version 1; the version sits in ``schema_version`` and migrations run on open)::

    states(id PRIMARY KEY, next_seq, task, created_at, updated_at, turn, stopped_by,
           finished, unlisted, snapshot JSON text or NULL)
    entries(state_id -> states.id, seq, data JSON text; PRIMARY KEY (state_id, seq))
    index states_listing(updated_at DESC, id, <the other listing columns>)
                                    -- list() is one ordered scan of this index alone

The listing columns are filled from the snapshot when it is written, with
:meth:`SavedState.from_snapshot`; times are kept as fixed-width UTC ISO text so that text
order is time order. A snapshot that lacks a listing key leaves them NULL and keeps the
reason in ``unlisted``: ``list()`` leaves that State out and warns with the reason, as
every store does.

Every ``sqlite3`` call runs in a worker thread of the owner loop, never on the loop. One
writer connection per process commits batches of writes (group commit, see
:meth:`SQLiteStore._commit`); reads use a small pool of reader connections. In WAL mode
readers never wait for the writer, and writers in other processes wait their turn on
SQLite's own file locks.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson

from .._backend import Backend
from .._batching import GroupCommit
from .._bridge import Closer, owner
from .._errors import CorruptStateError, NotAStoreError
from .._records import Record, SavedState, decode_snapshot, left_out, utc_time
from .._writes import PreparedWrite, check_overlap, exists_error, missing_error, plan_append

T = TypeVar("T")

#: The schema this statekeep writes; databases with a higher version are refused.
SCHEMA_VERSION = 1

#: How long SQLite itself waits for another connection's lock before giving up (busy_timeout).
BUSY_TIMEOUT_SECONDS = 30.0
#: How long statekeep keeps retrying (with backoff) when SQLite still reports the database
#: locked, before it raises TimeoutError. Nothing was written when that happens.
BUSY_PATIENCE_SECONDS = 120.0

# Writes of one transaction at most; more wait for the next one (bounds a batch's latency).
_MAX_BATCH = 512
# Reader connections kept open for reuse per store and process; more are closed after use.
_MAX_IDLE_READERS = 8
# After a checkpoint the WAL file is cut back to this size, so one big write does not
# leave a big file behind.
_WAL_SIZE_LIMIT = 64 * 1024 * 1024

# Each step migrates from version i to i + 1; a step runs in the same transaction as the
# version update, so a crash mid-migration leaves the old version whole.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        # The snapshot last: reading the columns before it never reads a large snapshot.
        """CREATE TABLE states (
            id TEXT PRIMARY KEY NOT NULL,
            next_seq INTEGER NOT NULL,
            task TEXT,
            created_at TEXT,
            updated_at TEXT,
            turn,  -- no type: an int beyond 64-bit signed is kept as exact text
            stopped_by TEXT,
            finished INTEGER,
            unlisted TEXT,
            snapshot TEXT
        )""",
        """CREATE TABLE entries (
            state_id TEXT NOT NULL REFERENCES states (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (state_id, seq)
        )""",
        # Covering: list() reads this index alone, in order, and never the table.
        """CREATE INDEX states_listing ON states (updated_at DESC, id, task, created_at, turn, stopped_by,
            finished) WHERE updated_at IS NOT NULL""",
        "CREATE INDEX states_unlisted ON states (id) WHERE unlisted IS NOT NULL",
    ),
)
assert len(_MIGRATIONS) == SCHEMA_VERSION

# The encoded JSON is bound as bytes and stored as TEXT without a round trip through str
# (CAST re-labels UTF-8 bytes); reads CAST back to get bytes for orjson.
_INSERT_ENTRY = "INSERT INTO entries (state_id, seq, data) VALUES (?, ?, CAST(? AS TEXT))"
_INSERT_STATE = (
    "INSERT INTO states (id, next_seq, snapshot, task, created_at, updated_at, turn, stopped_by, "
    "finished, unlisted) VALUES (?, ?, CAST(? AS TEXT), ?, ?, ?, ?, ?, ?, ?)"
)
_UPDATE_STATE = (
    "UPDATE states SET next_seq = ?, snapshot = CAST(? AS TEXT), task = ?, created_at = ?, "
    "updated_at = ?, turn = ?, stopped_by = ?, finished = ?, unlisted = ? WHERE id = ?"
)
_LIST = (
    "SELECT id, task, created_at, updated_at, turn, stopped_by, finished FROM states "
    "WHERE updated_at IS NOT NULL ORDER BY updated_at DESC, id"
)
_UNLISTED = "SELECT id, unlisted FROM states WHERE unlisted IS NOT NULL ORDER BY id"

_INT64_MAX = 2**63 - 1

_Op = tuple[str, Any]  # ("write", PreparedWrite) or ("delete", state id)


class SQLiteStore(Backend):
    """Saves every State in one SQLite database file at ``path``, shared by any number of
    processes.

    Durable on return: when ``write``/``awrite`` (or ``delete``) returns, its transaction
    is committed in WAL mode with ``synchronous=FULL``, so the WAL was fsync'd and the
    write survives a crash or a power cut. A write's entries and snapshot commit together
    or not at all; a write that raises stored nothing.

    Several processes may use one file: SQLite's locks serialise their writes (each in
    ``BEGIN IMMEDIATE``), waiting up to :data:`BUSY_TIMEOUT_SECONDS` for a lock and then
    retrying with backoff; only after :data:`BUSY_PATIENCE_SECONDS` does a call give up
    with TimeoutError. Concurrent writes from one process (``asyncio.gather`` of
    ``awrite``) share one transaction and one fsync, each still failing or succeeding on
    its own.

    ``list()`` shows the States whose snapshot has the keys :class:`SavedState` needs; a
    State whose snapshot lacks one (or has none) is left out, with a RuntimeWarning naming
    the State and the key when the snapshot is there but incomplete.

    The file (0600) and missing parent folders (0700) are created on the first write (a
    read of a missing file finds nothing), when the schema is also created or migrated.
    A database written by a newer statekeep is refused with RuntimeError (upgrade
    statekeep to use it), and a file that is not a SQLite database with NotAStoreError;
    neither is written to.

    ``create=False`` opens an existing statekeep database only (what the command line's
    ``list``, ``show`` and ``delete`` do): the store then never creates the file or its
    tables, never switches the journal mode and never migrates; a database without
    statekeep's tables is refused with NotAStoreError, unchanged. Reads of a missing file
    still find nothing.

    Close the store to release its connections; they are also closed when the
    interpreter exits, or (with a ResourceWarning) when the store is dropped unclosed.
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True) -> None:
        self.path = Path(os.path.abspath(os.fspath(path)))
        self.create = create
        self._key = os.path.realpath(self.path)
        self._batches = GroupCommit(lambda ops: self._commit(ops), max_batch=_MAX_BATCH)  # late-bound
        # This process's connections, replaced when owner() changes (after a fork).
        self._conns = _Connections(None)

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    def _storage_key(self) -> Hashable:
        return ("sqlite", self._key)

    # -- the four operations --------------------------------------------------------

    async def _write(self, write: PreparedWrite) -> None:
        await self._submit(("write", write))

    async def _delete(self, state_id: str) -> None:
        await self._submit(("delete", state_id))

    async def _read(self, state_id: str) -> Record | None:
        return await owner().io.run(self._retry_busy, self._read_once, state_id)

    async def _list(self) -> tuple[list[SavedState], list[str]]:
        return await owner().io.run(self._retry_busy, self._list_once)

    async def _close(self) -> None:
        own = owner()
        await self._batches.drain()  # let queued writes commit first
        conns = self._conns
        if conns.owner is own:
            if conns.closer is not None:
                conns.closer.release()
            await own.io.run(conns.close)

    # -- group commit ---------------------------------------------------------------

    async def _submit(self, op: _Op) -> None:
        # Writes and deletes waiting at the same moment, to any State of this store, are
        # committed in one transaction; each caller returns once that transaction is
        # committed, with its own outcome.
        await self._batches.submit(op)

    def _commit(self, ops: list[_Op]) -> list[BaseException | None]:
        """Apply ``ops`` in one transaction (one fsync); return each one's error or None.

        Runs in a worker thread, one call at a time per store and process (the flusher
        awaits each), so the writer connection is never shared.
        """
        conns = self._connections()
        self._ensure_schema(conns)
        conn = conns.take_writer(self._connect)
        try:
            return self._retry_busy(self._commit_once, conn, ops)
        finally:
            conns.give_writer(conn)

    def _commit_once(self, conn: sqlite3.Connection, ops: list[_Op]) -> list[BaseException | None]:
        """One attempt at the batch; SQLITE_BUSY escapes (nothing committed) for a retry.

        Fast path: every write is checked against the seq rules first (reads only; a
        refused write changes nothing), then the changes of all accepted writes are made
        with one ``executemany`` per statement. Should SQLite refuse one of those (a
        damaged database, disk full), the transaction is rolled back and the batch redone
        with a SAVEPOINT per write, so that only the failing write is rolled back.
        """
        errors: list[BaseException | None] = [None] * len(ops)
        pending = list(range(len(ops)))
        one_by_one = len({_op_id(op) for op in ops}) < len(ops)  # the fast path needs distinct ids
        while pending:
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._check_version(conn)
                if one_by_one:
                    lost = self._apply_each(conn, ops, pending, errors)
                else:
                    changes = self._plan(conn, ops, pending, errors)
                    if not (conn.in_transaction and _try_apply(conn, changes)):
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        for i in pending:
                            errors[i] = None
                        one_by_one = True
                        continue
                    lost = False
                if lost:
                    pending = [i for i in pending if errors[i] is None]
                    continue
                conn.execute("COMMIT")
                return errors
            except BaseException:
                if conn.in_transaction:
                    _quietly(lambda: conn.execute("ROLLBACK"))
                raise
        return errors

    def _apply_each(
        self, conn: sqlite3.Connection, ops: list[_Op], pending: list[int], errors: list[BaseException | None]
    ) -> bool:
        """Apply the pending ops one by one, each in a SAVEPOINT rolled back alone if it
        fails. Returns True if SQLite rolled back the whole transaction meanwhile."""
        for i in pending:
            conn.execute("SAVEPOINT write")
            try:
                changes = self._plan(conn, ops, [i], errors)
                if errors[i] is None:
                    changes.apply(conn)
            except BaseException as exc:
                if _is_busy(exc):
                    raise  # the whole batch is retried
                errors[i] = exc
            if not conn.in_transaction:
                # SQLite rolled back the whole transaction (e.g. disk full): the writes
                # before this one are gone too; the caller runs them again.
                if errors[i] is None:
                    errors[i] = sqlite3.OperationalError("SQLite rolled back the transaction")
                return True
            if errors[i] is not None:
                conn.execute("ROLLBACK TO write")
            conn.execute("RELEASE write")
        return False

    def _plan(
        self, conn: sqlite3.Connection, ops: list[_Op], indexes: list[int], errors: list[BaseException | None]
    ) -> _Changes:
        """Check ``ops[i]`` for each i against the stored States (reads only) and collect
        the changes of those accepted; a refused op gets its error in ``errors[i]``."""
        ids = [_op_id(ops[i]) for i in indexes]
        marks = ",".join("?" * len(ids))
        known: dict[str, int] = dict(
            conn.execute(f"SELECT id, next_seq FROM states WHERE id IN ({marks})", ids).fetchall()
        )
        changes = _Changes()
        for i in indexes:
            try:
                self._plan_one(conn, ops[i], known, changes)
            except BaseException as exc:
                if _is_busy(exc):
                    raise
                errors[i] = exc
        return changes

    def _plan_one(self, conn: sqlite3.Connection, op: _Op, known: dict[str, int], changes: _Changes) -> None:
        # Raises before it adds anything to ``changes``: a refused op leaves no trace.
        kind, value = op
        if kind == "delete":
            changes.deletes.append((value,))
            return
        write: PreparedWrite = value
        sid = write.state_id
        next_seq = known.get(sid)
        if write.create:
            if next_seq is not None:
                raise exists_error(sid)
            changes.creates.append((sid, write.end_seq, write.snapshot, *_listing(sid, write.snapshot)))
            changes.add_entries(sid, write.first_seq, write.lines)
            return
        if next_seq is None:
            raise missing_error(sid)
        skip = plan_append(write, next_seq)
        if skip:
            stored = conn.execute(
                "SELECT CAST(data AS BLOB) FROM entries WHERE state_id = ? AND seq >= ? AND seq < ? "
                "ORDER BY seq",
                (sid, write.first_seq, write.first_seq + skip),
            ).fetchall()
            if len(stored) != skip:
                raise CorruptStateError(
                    f"{self.path}: State {sid!r} records next seq {next_seq} but lacks some of "
                    f"seqs {write.first_seq}-{write.first_seq + skip - 1} in its entries"
                )
            check_overlap(write, [self._decode(sid, write.first_seq + i, d) for i, (d,) in enumerate(stored)])
        new = write.lines[skip:]
        end = max(next_seq, write.end_seq)
        if write.snapshot is not None:
            changes.updates.append((end, write.snapshot, *_listing(sid, write.snapshot), sid))
        elif new:
            changes.seqs.append((end, sid))
        if new:
            changes.add_entries(sid, write.first_seq + skip, new)

    # -- read, list -----------------------------------------------------------------

    def _read_once(self, sid: str) -> Record | None:
        if self._absent():
            return None
        with self._reading() as conn:
            row = conn.execute(
                "SELECT next_seq, CAST(snapshot AS BLOB) FROM states WHERE id = ?", (sid,)
            ).fetchone()
            if row is None:
                return None
            data = conn.execute(
                "SELECT CAST(data AS BLOB) FROM entries WHERE state_id = ? ORDER BY seq", (sid,)
            ).fetchall()
        next_seq, snap = row
        if len(data) != next_seq:
            raise CorruptStateError(
                f"{self.path}: State {sid!r} records next seq {next_seq} but has {len(data)} entries"
            )
        loads = orjson.loads
        try:
            entries = [loads(d) for (d,) in data]
        except orjson.JSONDecodeError:
            entries = [self._decode(sid, seq, d) for seq, (d,) in enumerate(data)]  # names the bad one
        return Record(entries, decode_snapshot(snap, f"{self.path}: the snapshot of State {sid!r}"))

    def _list_once(self) -> tuple[list[SavedState], list[str]]:
        if self._absent():
            return [], []
        conns = self._connections()
        with self._reading() as conn:
            rows = conn.execute(_LIST).fetchall()
            unlisted = conn.execute(_UNLISTED).fetchall()
        # SavedState is immutable, so a row unchanged since the last listing reuses its
        # SavedState: building one (two datetimes, a frozen dataclass) costs more than the
        # query. The cache holds the rows of the last listing only.
        seen, cache = conns.listed, {}
        skipped = [left_out(sid, why) for sid, why in unlisted]
        for row in rows:
            item = seen.get(row)
            try:
                cache[row] = _saved_state(row) if item is None else item
            except ValueError as exc:  # columns edited by hand: leave the State out, as elsewhere
                skipped.append(left_out(row[0], exc))
        conns.listed = cache
        listing = list(cache.values())
        return listing, skipped

    def _absent(self) -> bool:
        """No database file yet: reads find nothing, and create nothing."""
        return not self._connections().schema_ok and not os.path.exists(self.path)

    def _decode(self, sid: str, seq: int, data: bytes) -> Any:
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise CorruptStateError(
                f"{self.path}: entry seq {seq} of State {sid!r} is not JSON: {exc}"
            ) from None
        if not isinstance(value, dict):
            raise CorruptStateError(f"{self.path}: entry seq {seq} of State {sid!r} is not a JSON object")
        return value

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """A reader connection inside a read transaction (one consistent view of the file)."""
        conns = self._connections()
        self._ensure_schema(conns)
        conn = conns.take_reader() or self._connect()
        healthy = False
        try:
            conn.execute("BEGIN")
            self._check_version(conn)  # another process may have upgraded the file meanwhile
            yield conn
            conn.execute("COMMIT")
            healthy = True
        finally:
            if not healthy and conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                    healthy = True
                except sqlite3.Error:
                    pass
            conns.give_reader(conn, reuse=healthy)

    # -- connections, schema --------------------------------------------------------

    def _connections(self) -> _Connections:
        own = owner()
        conns = self._conns
        if conns.owner is own:
            return conns
        with _making:  # a read and a commit may both come first, on two worker threads
            conns = self._conns
            if conns.owner is not own:
                # First use in this process, or the first after a fork. A child must never
                # use or close the parent's connections (SQLite's locks belong to the
                # parent): they stay referenced in _abandoned, untouched.
                if conns.owner is not None:
                    _abandoned.append(conns)
                conns = _Connections(own)
                # Closed by close(), at exit, or (with a ResourceWarning) when the store is dropped.
                conns.closer = own.track(self, _closer(conns))
                _live.add(conns)
                self._conns = conns
        return conns

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
            # FULL: in WAL mode NORMAL may lose committed transactions on power loss.
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(f"PRAGMA journal_size_limit = {_WAL_SIZE_LIMIT}")
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.DatabaseError):
                self._not_a_database(exc)
            raise
        return conn

    def _not_a_database(self, exc: sqlite3.DatabaseError) -> None:
        """Raise NotAStoreError if ``exc`` says the file is not a SQLite database."""
        if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_NOTADB:
            raise NotAStoreError(
                f"{self.path} is not a SQLite database ({exc}); nothing was changed. "
                "Pass a statekeep SQLite database, or a folder for a FileStore"
            ) from None

    def _ensure_schema(self, conns: _Connections) -> None:
        """Create or migrate the schema once per process (refusing a newer one)."""
        if conns.schema_ok:
            return
        with conns.schema_lock:
            if not conns.schema_ok:
                conn = self._retry_busy(self._migrate if self.create else self._inspect)
                conns.schema_ok = True
                conns.give_reader(conn, reuse=True)

    def _migrate(self) -> sqlite3.Connection:
        self._make_file()
        conn = self._connect()
        try:
            # The version first: a database this statekeep refuses is not written to, not
            # even to switch its journal mode.
            version = self._schema_version(conn)
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise RuntimeError(
                    f"{self.path}: SQLite could not switch the database to WAL mode (it reports "
                    f"{mode!r}); SQLiteStore needs WAL, which needs a local file system"
                )
            # A file that is up to date (the usual case) needs no write lock.
            if version == SCHEMA_VERSION:
                return conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = self._schema_version(conn)  # again, now that no one else can migrate
                if version == 0:
                    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
                for step in _MIGRATIONS[version:]:
                    for sql in step:
                        conn.execute(sql)
                if version == 0:
                    conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
                elif version < SCHEMA_VERSION:
                    conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    _quietly(lambda: conn.execute("ROLLBACK"))
                raise
        except BaseException:
            conn.close()
            raise
        return conn

    def _inspect(self) -> sqlite3.Connection:
        """Open an existing statekeep database without changing it (``create=False``)."""
        if not self.path.exists():
            raise FileNotFoundError(
                f"{self.path}: no database there (this store was opened with create=False, which makes none)"
            )
        conn = self._connect()
        try:
            version = self._schema_version(conn)
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if version == 0 or not {"states", "entries"} <= tables:
                found = f"its tables: {', '.join(sorted(tables))}" if tables else "it has no tables"
                raise NotAStoreError(
                    f"{self.path} is not a statekeep database ({found}); nothing was changed. "
                    "Pass the database statekeep saved to"
                )
            if version < SCHEMA_VERSION:
                raise NotAStoreError(
                    f"{self.path} has statekeep schema version {version}, older than this "
                    f"statekeep's {SCHEMA_VERSION}; open it once with SQLiteStore(path) to upgrade "
                    "it; nothing was changed"
                )
        except BaseException:
            conn.close()
            raise
        return conn

    def _schema_version(self, conn: sqlite3.Connection) -> int:
        """The file's schema version (0 if it has none yet); refuses a newer one, and a
        file that is not a SQLite database."""
        try:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
            ).fetchone()
        except sqlite3.DatabaseError as exc:
            self._not_a_database(exc)
            raise
        version = 0
        if found:
            version = conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] or 0
        self._refuse_newer(version)
        return version

    def _check_version(self, conn: sqlite3.Connection) -> None:
        row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
        self._refuse_newer(row[0] or 0)

    def _refuse_newer(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise RuntimeError(
                f"{self.path} was written by a newer statekeep (database schema version {version}; "
                f"this statekeep knows versions up to {SCHEMA_VERSION}). Upgrade statekeep to use "
                "this database; nothing was read or written"
            )

    def _make_file(self) -> None:
        """Create the database file (0600) and missing folders (0700), durably."""
        if self.path.exists():
            return
        missing = []
        folder = self.path.parent
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
        for made in reversed(missing):
            try:
                os.mkdir(made, 0o700)
                os.chmod(made, 0o700)  # whatever the umask
            except FileExistsError:
                pass
            _fsync_dir(made.parent)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            return  # another process made it
        try:
            os.fchmod(fd, 0o600)  # SQLite gives its -wal and -shm files the same mode
        finally:
            os.close(fd)
        _fsync_dir(self.path.parent)  # SQLite syncs the files; the new name is ours to sync

    def _retry_busy(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` again (with backoff) while SQLite reports the database locked.

        ``fn`` must leave no transaction open when it raises, so a rerun starts clean.
        busy_timeout already waits inside SQLite; this covers the cases where SQLite
        reports BUSY at once (a WAL recovery under way, a deadlock it detected).
        """
        deadline = time.monotonic() + BUSY_PATIENCE_SECONDS
        delay = 0.002
        while True:
            try:
                return fn(*args)
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"{self.path}: the database stayed locked by another connection for more "
                        f"than {BUSY_PATIENCE_SECONDS:.0f} s; gave up ({exc})"
                    ) from exc
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.25)


@dataclass(eq=False)
class _Connections:
    """One store's sqlite3 connections in one process (``owner`` is that process's owner).

    The writer is used by one commit at a time; readers are taken from ``idle`` and given
    back. Once ``closed``, connections are closed as soon as they are given back.
    """

    owner: object
    closer: Closer | None = None
    schema_ok: bool = False
    closed: bool = False
    writer: sqlite3.Connection | None = None
    writer_busy: bool = False
    idle: list[sqlite3.Connection] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    schema_lock: threading.Lock = field(default_factory=threading.Lock)
    listed: dict[tuple[Any, ...], SavedState] = field(default_factory=dict)  # the last listing

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
        _quietly(conn.close)

    def take_reader(self) -> sqlite3.Connection | None:
        with self.lock:
            return self.idle.pop() if self.idle else None

    def give_reader(self, conn: sqlite3.Connection, *, reuse: bool) -> None:
        with self.lock:
            if reuse and not self.closed and len(self.idle) < _MAX_IDLE_READERS:
                self.idle.append(conn)
                return
        _quietly(conn.close)

    def close(self) -> None:
        """Close every connection not in use now; those in use close when given back."""
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
            if not self.writer_busy and self.writer is not None:
                idle.append(self.writer)
                self.writer = None
        for conn in idle:
            _quietly(conn.close)


# Every _Connections made in this process; after a fork the child moves them to
# _abandoned, so that they are never closed (closing runs a checkpoint and releases locks
# that are the parent's) nor used.
_live: weakref.WeakSet[_Connections] = weakref.WeakSet()
_abandoned: list[_Connections] = []
_making = threading.Lock()


def _abandon_after_fork() -> None:
    global _making
    _abandoned.extend(_live)
    _live.clear()
    _making = threading.Lock()  # another thread of the parent may have held it


os.register_at_fork(after_in_child=_abandon_after_fork)


def _closer(conns: _Connections) -> Callable[[], Coroutine[Any, Any, None]]:
    """Closes ``conns`` on a worker thread (closing may checkpoint the WAL). It must not
    refer to the store, which is only weakly tracked."""

    async def close() -> None:
        await owner().io.run(conns.close)

    return close


@dataclass
class _Changes:
    """The rows a batch of accepted writes changes, applied with one executemany each."""

    deletes: list[tuple[str]] = field(default_factory=list)
    creates: list[tuple[Any, ...]] = field(default_factory=list)
    entries: list[tuple[str, int, memoryview]] = field(default_factory=list)
    updates: list[tuple[Any, ...]] = field(default_factory=list)  # snapshot and next_seq
    seqs: list[tuple[int, str]] = field(default_factory=list)  # next_seq only

    def add_entries(self, sid: str, first_seq: int, lines: tuple[bytes, ...]) -> None:
        # memoryview: the encoded line minus its newline, without copying a large entry.
        self.entries.extend((sid, first_seq + i, memoryview(line)[:-1]) for i, line in enumerate(lines))

    def apply(self, conn: sqlite3.Connection) -> None:
        if self.deletes:
            conn.executemany("DELETE FROM entries WHERE state_id = ?", self.deletes)
            conn.executemany("DELETE FROM states WHERE id = ?", self.deletes)
        if self.creates:  # before the entries, which refer to them
            conn.executemany(_INSERT_STATE, self.creates)
        if self.entries:
            conn.executemany(_INSERT_ENTRY, self.entries)
        if self.updates:
            conn.executemany(_UPDATE_STATE, self.updates)
        if self.seqs:
            conn.executemany("UPDATE states SET next_seq = ? WHERE id = ?", self.seqs)


def _try_apply(conn: sqlite3.Connection, changes: _Changes) -> bool:
    """Apply ``changes``; False if one was refused (the caller rolls back and retries them
    one by one, to find which)."""
    try:
        changes.apply(conn)
    except Exception as exc:
        if _is_busy(exc):
            raise
        return False
    return True


def _op_id(op: _Op) -> str:
    kind, value = op
    return value if kind == "delete" else value.state_id


def _saved_state(row: tuple[Any, ...]) -> SavedState:
    """A listing row, as read by the listing query."""
    sid, task, created, updated, turn, stopped_by, finished = row
    times = []
    for key, raw in (("created_at", created), ("updated_at", updated)):
        try:
            times.append(utc_time(raw))
        except ValueError as exc:
            raise ValueError(f"its {key} column holds {raw!r}, not {exc}") from None
    turn = turn if type(turn) is int else int(turn)
    return SavedState(sid, task, times[0], times[1], turn, stopped_by, bool(finished))


def _listing(sid: str, snapshot: bytes | None) -> tuple[Any, ...]:
    """The listing columns (task ... finished, unlisted) for a snapshot."""
    if snapshot is None:
        return (None,) * 7
    try:
        row = SavedState.from_snapshot(sid, orjson.loads(snapshot))
    except ValueError as exc:
        return (None,) * 6 + (str(exc),)
    return (
        row.task,
        row.created_at.isoformat(timespec="microseconds"),  # UTC, fixed width: sorts as text
        row.updated_at.isoformat(timespec="microseconds"),
        row.turn if row.turn <= _INT64_MAX else str(row.turn),  # SQLite integers are signed 64-bit
        row.stopped_by,
        int(row.finished),
        None,
    )


def _is_busy(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return (
        isinstance(exc, sqlite3.OperationalError)
        and code is not None
        and code & 0xFF
        in (
            sqlite3.SQLITE_BUSY,
            sqlite3.SQLITE_LOCKED,
        )
    )


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _quietly(action: Callable[[], object]) -> None:
    """Best-effort clean-up whose failure must not hide the error being raised."""
    try:
        action()
    except (sqlite3.Error, OSError):
        pass

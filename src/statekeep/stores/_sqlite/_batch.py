"""One batch of writes and deletes, applied in one transaction (one fsync), each op still
failing or succeeding on its own.

Fast path: every write is checked against its State's lease (the fence) and the seq rules
first (reads only; a refused write changes nothing), then the changes of all accepted writes are made with one
``executemany`` per statement. Should SQLite refuse one of those (a damaged database, disk
full), the transaction is rolled back and the batch redone with a SAVEPOINT per op, so
that only the failing op is rolled back.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from ..._core.errors import CorruptStateError, StateConflictError
from ..._core.labels import iso
from ..._core.leases import Lease, check_fence
from ..._core.writes import (
    PreparedWrite,
    check_overlap,
    exists_error,
    missing_error,
    plan_append,
)
from ..._store.expect import check_preconditions
from . import _sql as sql
from ._blobs import NAMES_PER_QUERY
from ._connections import is_busy, rolled_back_on_error
from ._known import Key, Known, read_known
from ._rows import decode_entry, listing_columns
from ._schema import check_version
from ._trim import FIRST_SEQ


@dataclass(frozen=True, slots=True)
class Fork:
    """A fork's create: ``write`` holds its snapshot (no entries); its first ``count``
    entries are copied from State ``source`` of the same namespace inside the database.
    ``lines``: those entries as the fork read them (encoded), which the source must still hold."""

    write: PreparedWrite
    source: str
    count: int
    lines: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Delete:
    """A delete of State ``state_id``, fenced by ``lease`` (None: no lease given)."""

    state_id: str
    lease: Lease | None = None


#: ``(kind, namespace, value)``: ``("write", ns, PreparedWrite)``, ``("delete", ns, Delete)``
#: or ``("fork", ns, Fork)``. The stores of one file share one batch (agent memory lives in
#: other namespaces of the same file).
Op = tuple[str, str, PreparedWrite | Delete | Fork]


def commit_batch(
    path: Path, conn: sqlite3.Connection, ops: list[Op], clock: Callable[[], datetime]
) -> list[BaseException | None]:
    """One attempt at the batch: each op's error, or None once committed. SQLITE_BUSY
    escapes with nothing committed (and no transaction left open), for a retry. ``clock``
    (the store's), read once the write lock is held, judges expiry (an expired State is
    absent) and leases."""
    return _Batch(path, conn, ops, clock).commit()


def gc_chunk(path: Path, conn: sqlite3.Connection, ns: str, now: str, chunk: int) -> int:
    """Remove at most ``chunk`` States of ``ns`` expired at ``now``, in one transaction that
    finds them under the write lock (so a State a write just extended is not among them),
    leaving out those with a live lease. SQLITE_BUSY escapes with nothing removed and no
    transaction open."""
    conn.execute(sql.BEGIN_IMMEDIATE)
    with rolled_back_on_error(conn):
        check_version(path, conn)
        ids = [(ns, sid) for (sid,) in conn.execute(sql.EXPIRED, (ns, now, now, chunk))]
        Changes(deletes=ids, unlabel=ids).apply(conn)
        conn.execute(sql.COMMIT)
    return len(ids)


@dataclass
class Changes:
    """The rows a batch of accepted writes changes, applied with one executemany each."""

    deletes: list[tuple[str, str]] = field(default_factory=list)
    unlabel: list[tuple[str, str]] = field(default_factory=list)  # deleted States that have labels
    creates: list[tuple[Any, ...]] = field(default_factory=list)
    entries: list[tuple[str, str, int, memoryview]] = field(default_factory=list)
    updates: list[tuple[Any, ...]] = field(default_factory=list)  # snapshot and next_seq
    seqs: list[tuple[int, str, str]] = field(default_factory=list)  # next_seq only
    relabel: list[tuple[str, str]] = field(default_factory=list)  # updated States: labels replaced
    labels: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    copies: list[tuple[str, str, str, str, int, int]] = field(default_factory=list)  # forks: end seq, rows
    blobs: list[tuple[str, bytes]] = field(default_factory=list)  # (name, bytes): kept if stored
    refs: list[tuple[str, str, str, int]] = field(default_factory=list)  # (ns, id, name, seq)

    def add_entries(self, ns: str, sid: str, first_seq: int, lines: tuple[bytes, ...]) -> None:
        # memoryview: the encoded line minus its newline, without copying a large entry.
        self.entries.extend((ns, sid, first_seq + i, memoryview(line)[:-1]) for i, line in enumerate(lines))

    def add_blobs(self, ns: str, write: PreparedWrite, seq: int) -> None:
        """The write's blobs, and its references (at ``seq``, its first new entry)."""
        if write.blobs:
            self.blobs.extend(write.blobs.items())
        if write.blob_refs:
            self.refs.extend((ns, write.state_id, name, seq) for name in write.blob_refs)

    def remove(self, ns: str, sid: str, stored: Known) -> None:
        """Delete a stored State (its label rows only if it has some)."""
        self.deletes.append((ns, sid))
        if stored.labelled:
            self.unlabel.append((ns, sid))

    def add_labels(self, ns: str, sid: str, columns: tuple[Any, ...], labels: dict[str, str]) -> None:
        if labels:
            self.labels.extend((ns, sid, k, v, columns[2]) for k, v in labels.items())

    def apply(self, conn: sqlite3.Connection) -> None:
        if self.deletes:
            conn.executemany(sql.DELETE_ENTRIES, self.deletes)
            if self.unlabel:
                conn.executemany(sql.DELETE_LABELS, self.unlabel)
            conn.executemany(sql.DELETE_STATE, self.deletes)
        if self.blobs:  # before the references to them, in the transaction of the entries
            conn.executemany(sql.INSERT_BLOB, self.blobs)
        if self.creates:  # before the entries and labels, which refer to them
            conn.executemany(sql.INSERT_STATE, self.creates)
        if self.refs:
            conn.executemany(sql.INSERT_BLOB_REF, self.refs)
        if self.entries:
            conn.executemany(sql.INSERT_ENTRY, self.entries)
        for ns, sid, source_ns, source, count, rows in self.copies:
            copied = conn.execute(sql.COPY_ENTRIES, (ns, sid, source_ns, source, count)).rowcount
            if copied != rows:  # (fewer than count for a trimmed source: from its base)
                raise CorruptStateError(
                    f"State {source!r} records at least {count} entries but {copied} were found to fork"
                )
            conn.execute(sql.COPY_BLOB_REFS, (ns, sid, source_ns, source, count))
        if self.updates:
            conn.executemany(sql.UPDATE_STATE, self.updates)
        if self.seqs:
            conn.executemany(sql.UPDATE_NEXT_SEQ, self.seqs)
        if self.relabel:
            conn.executemany(sql.DELETE_LABELS, self.relabel)
        if self.labels:
            conn.executemany(sql.INSERT_LABEL, self.labels)

    def try_apply(self, conn: sqlite3.Connection) -> bool:
        """Apply the changes; False if one was refused (the caller rolls back and retries
        them one by one, to find which)."""
        try:
            self.apply(conn)
        except Exception as exc:
            if is_busy(exc):
                raise
            return False
        return True


class _Batch:
    """The ops of one commit, and each one's error so far."""

    def __init__(
        self, path: Path, conn: sqlite3.Connection, ops: list[Op], clock: Callable[[], datetime]
    ) -> None:
        self.path = path
        self.conn = conn
        self.ops = ops
        self.clock = clock
        self._when: datetime | None = None  # see _time
        self._now = ""
        self.errors: list[BaseException | None] = [None] * len(ops)

    def commit(self) -> list[BaseException | None]:
        conn, errors = self.conn, self.errors
        pending = list(range(len(self.ops)))
        # The fast path needs distinct States; a fork reads its source, which an op before
        # it in the batch may change, so a batch with one goes op by op.
        ops = self.ops
        one_by_one = any(kind == "fork" for kind, _, _ in ops) if len(ops) > 1 else ops[0][0] == "fork"
        one_by_one = one_by_one or (len(ops) > 1 and len({_op_id(op) for op in ops}) < len(ops))
        while pending:
            conn.execute(sql.BEGIN_IMMEDIATE)
            self._when = None  # this transaction's time, read when first needed
            with rolled_back_on_error(conn):
                if one_by_one:
                    lost = self._apply_each(pending)
                else:
                    changes = self._plan(pending)
                    if not (conn.in_transaction and changes.try_apply(conn)):
                        if conn.in_transaction:
                            conn.execute(sql.ROLLBACK)
                        for i in pending:
                            errors[i] = None
                        one_by_one = True
                        continue
                    lost = False
                if lost:
                    pending = [i for i in pending if errors[i] is None]
                    continue
                conn.execute(sql.COMMIT)
                return errors
        return errors

    def _apply_each(self, pending: list[int]) -> bool:
        """Apply the pending ops one by one, each in a SAVEPOINT rolled back alone if it
        fails. Returns True if SQLite rolled back the whole transaction meanwhile."""
        conn, errors = self.conn, self.errors
        for i in pending:
            conn.execute(sql.SAVEPOINT)
            try:
                changes = self._plan([i])
                if errors[i] is None:
                    changes.apply(conn)
            except BaseException as exc:
                if is_busy(exc):
                    raise  # the whole batch is retried
                errors[i] = exc
            if not conn.in_transaction:
                # SQLite rolled back the whole transaction (e.g. disk full): the writes
                # before this one are gone too; the caller runs them again.
                if errors[i] is None:
                    errors[i] = sqlite3.OperationalError("SQLite rolled back the transaction")
                return True
            if errors[i] is not None:
                conn.execute(sql.ROLLBACK_TO_SAVEPOINT)
            conn.execute(sql.RELEASE_SAVEPOINT)
        return False

    def _plan(self, indexes: list[int]) -> Changes:
        """Check ``ops[i]`` for each i against the stored States (reads only) and collect
        the changes of those accepted; a refused op gets its error in ``errors[i]``."""
        ops = self.ops
        keys = [_op_id(ops[i]) for i in indexes]
        known, leases = read_known(self.path, self.conn, list(dict.fromkeys(keys)))
        changes = Changes()
        for i, key in zip(indexes, keys, strict=True):
            try:
                self._fence(ops[i], leases.get(key))
                self._plan_one(ops[i], known, changes)
            except BaseException as exc:
                if is_busy(exc):
                    raise
                self.errors[i] = exc
        return changes

    def _time(self) -> datetime:
        """The store's clock, read once per transaction, when a rule first needs it: always
        once the write lock is held, so no lease or expiry can change before the commit."""
        if self._when is None:
            self._when = self.clock()
            self._now = iso(self._when)
        return self._when

    def _fence(self, op: Op, held: Lease | None) -> None:
        """The lease rule (:func:`check_fence`), in the transaction that makes the change
        (nothing to check when the State never had a lease and the op names none)."""
        _, _, value = op
        if isinstance(value, Delete):
            if held is not None or value.lease is not None:
                check_fence(value.state_id, held, value.lease, self._time(), "nothing was deleted")
        else:
            write = value.write if isinstance(value, Fork) else value
            if held is not None or write.lease is not None:
                check_fence(write.state_id, held, write.lease, self._time())

    def _expired(self, expires: str | None) -> bool:
        if expires is None:
            return False
        self._time()
        return expires <= self._now

    def _plan_one(self, op: Op, known: dict[Key, Known], changes: Changes) -> None:
        # Raises before it adds anything to ``changes``: a refused op leaves no trace.
        _, ns, value = op
        if isinstance(value, Delete):
            gone = known.get((ns, value.state_id))
            if gone is not None:  # else there is nothing to delete
                changes.remove(ns, value.state_id, gone)
            return
        fork = value if isinstance(value, Fork) else None
        write = value.write if isinstance(value, Fork) else value
        sid = write.state_id
        stored = expired = known.get((ns, sid))
        if stored is not None and self._expired(stored.expires_at):
            stored = None  # expired is absent: a create replaces it, an update finds nothing
        else:
            expired = None
        if write.create:
            if stored is not None:
                raise exists_error(sid)
            if fork is not None:
                self._check_source(ns, fork)
            if write.blob_refs:
                self._check_blobs(write, changes)
            if expired is not None:
                changes.remove(ns, sid, expired)
            columns, labels = listing_columns(sid, write.snapshot)
            end = fork.count if fork is not None else write.end_seq
            changes.creates.append((ns, sid, end, write.snapshot, *columns, write.incarnation))
            changes.add_labels(ns, sid, columns, labels)
            if fork is not None:
                changes.copies.append((ns, sid, ns, fork.source, fork.count, len(fork.lines)))
            changes.add_entries(ns, sid, write.first_seq, write.lines)
            changes.add_blobs(ns, write, write.first_seq)
            return
        if stored is None:
            raise missing_error(sid)
        next_seq = stored.next_seq
        if write.bound or write.expect_next is not None or stored.sealed:  # else none can refuse it
            check_preconditions(write, stored.incarnation, next_seq, stored.sealed)
        skip = plan_append(write, next_seq)
        if skip:
            self._check_stored(ns, write, next_seq, skip)
        if write.blob_refs:
            self._check_blobs(write, changes)
        new = write.lines[skip:]
        end = max(next_seq, write.end_seq)
        if write.snapshot is not None:
            columns, labels = listing_columns(sid, write.snapshot)
            changes.updates.append((end, write.snapshot, *columns, ns, sid))
            if stored.labelled:  # a State without labels has no rows to replace
                changes.relabel.append((ns, sid))
            changes.add_labels(ns, sid, columns, labels)
        elif new:
            changes.seqs.append((end, ns, sid))
        if new:
            changes.add_entries(ns, sid, write.first_seq + skip, new)
        changes.add_blobs(ns, write, write.first_seq + skip)

    def _check_blobs(self, write: PreparedWrite, changes: Changes) -> None:
        """Every blob the write refers to and does not carry must be stored already, or
        carried by a write accepted before it in this transaction (a stored blob stays: gc
        takes this transaction's write lock too)."""
        carried = write.blobs or {}
        batch = {name for name, _ in changes.blobs} if changes.blobs else set()
        wanted = [name for name in write.blob_refs or () if name not in carried and name not in batch]
        found: set[str] = set()
        for at in range(0, len(wanted), NAMES_PER_QUERY):
            part = wanted[at : at + NAMES_PER_QUERY]
            text = sql.BLOB_NAMES_AMONG.format(marks=", ".join("?" * len(part)))
            found.update(name for (name,) in self.conn.execute(text, part))
        missing = sorted(set(wanted) - found)
        if missing:
            raise LookupError(
                f"State {write.state_id!r}: the write refers to {len(missing)} blob(s) this store does "
                f"not hold (e.g. {missing[0]!r}), and does not carry their bytes; nothing was written. "
                "Write the values themselves again"
            )

    def _check_source(self, ns: str, fork: Fork) -> None:
        """A fork's source must still be there, live, holding the entries the fork read
        (it may have been deleted and written again since: then nothing is written)."""
        row = self.conn.execute(sql.SOURCE, (ns, fork.source)).fetchone()
        if row is None or self._expired(row[1]) or row[0] < fork.count:
            raise missing_error(fork.source)
        stored = self.conn.execute(sql.STORED_ENTRIES, (ns, fork.source, 0, fork.count))
        if not all(_same_entry(data, line) for (data,), line in zip(stored, fork.lines, strict=False)):
            raise StateConflictError(
                f"State {fork.source!r} was deleted and written again while it was forked; nothing "
                "was written. Fork it again"
            )

    def _check_stored(self, ns: str, write: PreparedWrite, next_seq: int, skip: int) -> None:
        """The first ``skip`` entries of ``write`` are stored already: they must be the same."""
        sid, first = write.state_id, write.first_seq
        stored = self.conn.execute(sql.STORED_ENTRIES, (ns, sid, first, first + skip)).fetchall()
        if len(stored) != skip and not _trimmed(self.conn, ns, sid, first, first + skip, len(stored)):
            raise CorruptStateError(
                f"{self.path}: State {sid!r} records next seq {next_seq} but lacks some of "
                f"seqs {first}-{first + skip - 1} in its entries"
            )
        start = first + skip - len(stored)  # (above first for a trimmed State: from its base)
        check_overlap(write, [decode_entry(self.path, sid, start + i, d) for i, (d,) in enumerate(stored)])


def _trimmed(conn: sqlite3.Connection, ns: str, sid: str, first: int, end: int, held: int) -> bool:
    """Whether a State holds ``held`` of the seqs ``first`` to ``end - 1`` because it was trimmed
    (its entries start above ``first``, at its base), not because rows are missing."""
    (start,) = conn.execute(FIRST_SEQ, (ns, sid)).fetchone()
    return start is not None and start > first and held == end - start


def _same_entry(stored: bytes, line: bytes) -> bool:
    """Whether a stored entry is the one a fork read (``line``, encoded, with its newline):
    the same bytes, or (written by another encoder) the same value."""
    if stored == line[:-1]:
        return True
    try:
        return bool(orjson.loads(stored) == orjson.loads(line))
    except orjson.JSONDecodeError:
        return False


def _op_id(op: Op) -> tuple[str, str]:
    _, ns, value = op
    if isinstance(value, Delete):
        return ns, value.state_id
    return ns, (value.write if isinstance(value, Fork) else value).state_id

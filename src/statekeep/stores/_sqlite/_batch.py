"""One batch of writes and deletes, applied in one transaction (one fsync), each op still
failing or succeeding on its own.

Fast path: every write is checked against the seq rules first (reads only; a refused write
changes nothing), then the changes of all accepted writes are made with one
``executemany`` per statement. Should SQLite refuse one of those (a damaged database, disk
full), the transaction is rolled back and the batch redone with a SAVEPOINT per op, so
that only the failing op is rolled back.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._errors import CorruptStateError
from ..._writes import PreparedWrite, check_overlap, exists_error, missing_error, plan_append
from . import _sql as sql
from ._connections import is_busy, rolled_back_on_error
from ._rows import decode_entry, listing_columns
from ._schema import check_version

#: ``("write", PreparedWrite)`` or ``("delete", state id)``.
Op = tuple[str, PreparedWrite | str]


def commit_batch(path: Path, conn: sqlite3.Connection, ops: list[Op]) -> list[BaseException | None]:
    """One attempt at the batch: each op's error, or None once committed. SQLITE_BUSY
    escapes with nothing committed (and no transaction left open), for a retry."""
    return _Batch(path, conn, ops).commit()


@dataclass
class Changes:
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
            conn.executemany(sql.DELETE_ENTRIES, self.deletes)
            conn.executemany(sql.DELETE_STATE, self.deletes)
        if self.creates:  # before the entries, which refer to them
            conn.executemany(sql.INSERT_STATE, self.creates)
        if self.entries:
            conn.executemany(sql.INSERT_ENTRY, self.entries)
        if self.updates:
            conn.executemany(sql.UPDATE_STATE, self.updates)
        if self.seqs:
            conn.executemany(sql.UPDATE_NEXT_SEQ, self.seqs)

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

    def __init__(self, path: Path, conn: sqlite3.Connection, ops: list[Op]) -> None:
        self.path = path
        self.conn = conn
        self.ops = ops
        self.errors: list[BaseException | None] = [None] * len(ops)

    def commit(self) -> list[BaseException | None]:
        conn, errors = self.conn, self.errors
        pending = list(range(len(self.ops)))
        one_by_one = len({_op_id(op) for op in self.ops}) < len(self.ops)  # the fast path needs distinct ids
        while pending:
            conn.execute(sql.BEGIN_IMMEDIATE)
            with rolled_back_on_error(conn):
                check_version(self.path, conn)
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
        ids = [_op_id(self.ops[i]) for i in indexes]
        marks = ",".join("?" * len(ids))
        known: dict[str, int] = dict(self.conn.execute(sql.NEXT_SEQS.format(marks=marks), ids).fetchall())
        changes = Changes()
        for i in indexes:
            try:
                self._plan_one(self.ops[i], known, changes)
            except BaseException as exc:
                if is_busy(exc):
                    raise
                self.errors[i] = exc
        return changes

    def _plan_one(self, op: Op, known: dict[str, int], changes: Changes) -> None:
        # Raises before it adds anything to ``changes``: a refused op leaves no trace.
        _, write = op
        if isinstance(write, str):  # a delete
            changes.deletes.append((write,))
            return
        sid = write.state_id
        next_seq = known.get(sid)
        if write.create:
            if next_seq is not None:
                raise exists_error(sid)
            changes.creates.append(
                (sid, write.end_seq, write.snapshot, *listing_columns(sid, write.snapshot))
            )
            changes.add_entries(sid, write.first_seq, write.lines)
            return
        if next_seq is None:
            raise missing_error(sid)
        skip = plan_append(write, next_seq)
        if skip:
            self._check_stored(write, next_seq, skip)
        new = write.lines[skip:]
        end = max(next_seq, write.end_seq)
        if write.snapshot is not None:
            changes.updates.append((end, write.snapshot, *listing_columns(sid, write.snapshot), sid))
        elif new:
            changes.seqs.append((end, sid))
        if new:
            changes.add_entries(sid, write.first_seq + skip, new)

    def _check_stored(self, write: PreparedWrite, next_seq: int, skip: int) -> None:
        """The first ``skip`` entries of ``write`` are stored already: they must be the same."""
        sid, first = write.state_id, write.first_seq
        stored = self.conn.execute(sql.STORED_ENTRIES, (sid, first, first + skip)).fetchall()
        if len(stored) != skip:
            raise CorruptStateError(
                f"{self.path}: State {sid!r} records next seq {next_seq} but lacks some of "
                f"seqs {first}-{first + skip - 1} in its entries"
            )
        check_overlap(write, [decode_entry(self.path, sid, first + i, d) for i, (d,) in enumerate(stored)])


def _op_id(op: Op) -> str:
    _, value = op
    return value if isinstance(value, str) else value.state_id

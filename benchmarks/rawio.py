"""The raw baselines of one State's steady-state appends, written by hand: what a store's
write is measured against in bench_budget and bench_peers.

Each encodes the turn with orjson inside the call (as a store must), so a baseline pays
the same encoding a store does. ``sync=False`` drops the durability step (fdatasync, or
SQLite's synchronous=OFF): the CPU cost of the same work, to set beside a store whose
fsync is a no-op.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import orjson

_dumps = orjson.dumps


def encode_turn(entries: list[dict[str, Any]], snapshot: dict[str, Any]) -> bytes:
    """The entries as JSON lines, then the snapshot as one more line: the bytes appended."""
    return b"".join([_dumps(e) + b"\n" for e in entries]) + _dumps(snapshot) + b"\n"


class RawFile:
    """One State's log file: per write, encode, one ``os.write`` loop, ``fdatasync``."""

    def __init__(self, folder: Path, *, sync: bool = True) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        self.fd = os.open(folder / "log.jsonl", flags, 0o600)
        self.sync = sync

    def write(self, entries: list[dict[str, Any]], snapshot: dict[str, Any]) -> None:
        view = memoryview(encode_turn(entries, snapshot))
        while view:
            view = view[os.write(self.fd, view) :]
        if self.sync:
            os.fdatasync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


# A State row and its entries, as a hand-written app keeps them (no listing columns).
_SCHEMA = (
    "CREATE TABLE states (id TEXT PRIMARY KEY, next_seq INTEGER NOT NULL, snapshot TEXT)",
    "CREATE TABLE entries (state_id TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL, "
    "PRIMARY KEY (state_id, seq)) WITHOUT ROWID",
)
UPSERT = (
    "INSERT INTO states (id, next_seq, snapshot) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE "
    "SET next_seq = excluded.next_seq, snapshot = excluded.snapshot"
)
INSERT = "INSERT INTO entries (state_id, seq, data) VALUES (?, ?, ?)"


class RawSQLite:
    """One database, WAL, synchronous=FULL (OFF without ``sync``): per write one
    transaction, BEGIN IMMEDIATE, upsert the State's row, insert the entries, COMMIT."""

    def __init__(self, path: Path, sid: str = "s", *, sync: bool = True) -> None:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {'FULL' if sync else 'OFF'}")
        for sql in _SCHEMA:
            conn.execute(sql)
        self.conn, self.sid = conn, sid

    def write(self, entries: list[dict[str, Any]], snapshot: dict[str, Any]) -> None:
        sid, conn = self.sid, self.conn
        rows = [(sid, e["seq"], _dumps(e)) for e in entries]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(UPSERT, (sid, entries[-1]["seq"] + 1, _dumps(snapshot)))
        conn.executemany(INSERT, rows)
        conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()

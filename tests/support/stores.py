"""Stores for the tests: every built-in one by name, a URL another process can open, and ways
to change what a store holds through its own storage (as a hand edit or an older statekeep could)."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from statekeep import FileStore, MemoryStore, SQLiteStore, Store

# Every built-in store, for the tests that run on each (the contract itself runs through
# statekeep.testing.StoreContract in tests/store/test_conformance.py).
STORE_FACTORIES: dict[str, Callable[[Any], Store]] = {
    "memory": lambda tmp_path: MemoryStore(),
    "file": lambda tmp_path: FileStore(tmp_path / "store"),
    "sqlite": lambda tmp_path: SQLiteStore(tmp_path / "store.db"),
    # Throwaway servers (tests/support/servers.py), started on first use; a schema or key prefix per test.
    "postgres": lambda tmp_path: servers().postgres_store(tmp_path),
    "redis": lambda tmp_path: servers().redis_store(tmp_path),
}


def servers() -> Any:
    """tests.support.servers, imported once pytest has loaded it as a plugin (so its asserts are rewritten)."""
    from tests.support import servers

    return servers


async def plant_snapshot(store: Store, state_id: str, raw: bytes) -> None:
    """Put ``raw`` in place of a State's stored snapshot through the store's own storage,
    as a hand edit or an older statekeep could have left it (listing columns included)."""
    from statekeep.stores import PostgresStore, RedisStore
    from statekeep.stores._postgres import quote_identifier

    if isinstance(store, MemoryStore):
        store._snapshots[state_id] = raw
    elif isinstance(store, FileStore):
        # The log is the truth: a write that records ``raw``, and no copy to read instead.
        from statekeep.stores._file.logformat import closing_record

        record = await store.aread(state_id)
        assert record is not None
        with open(store.path / state_id / "log.jsonl", "ab") as log:
            log.write(closing_record(len(record.entries), b"", raw, None, record.incarnation))
        (store.path / state_id / "snapshot.json").unlink(missing_ok=True)
    elif isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute(
                "UPDATE states SET snapshot = ?, updated_at = ? WHERE id = ?",
                (raw.decode(), orjson.loads(raw).get("updated_at"), state_id),
            )
        conn.close()
    elif isinstance(store, PostgresStore):
        await _postgres_execute(  # the listing columns empty: list() reads the snapshot itself
            f"UPDATE {quote_identifier(store.schema)}.states SET snapshot = $2, task = NULL, "
            "created_at = NULL, updated_at = NULL, turn = NULL, stopped_by = NULL, "
            "finished = NULL, unlisted = NULL WHERE id = $1",
            state_id,
            raw.decode(),
        )
    elif isinstance(store, RedisStore):
        # the State's key in the store's own namespace (the default one: prefix + "state:")
        await _redis_call("hset", store._keys_of.state + state_id.encode(), "snapshot", raw)
    else:
        raise AssertionError(f"no way to plant a snapshot in {store!r}")


async def _postgres_execute(statement: str, *args: Any) -> None:
    """Run one statement on the shared PostgreSQL server, on a connection of its own."""
    import asyncpg

    conn = await asyncpg.connect(servers().shared_postgres().dsn)
    try:
        await conn.execute(statement, *args)
    finally:
        await conn.close()


async def _redis_call(command: str, *args: Any) -> None:
    """Run one command (a method of the redis client) on the shared Redis server."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(servers().shared_redis().url)
    try:
        await getattr(client, command)(*args)
    finally:
        await client.aclose()


def stored_record(store: Store, state_id: str) -> Any:
    """A State's records as its store holds them (sealed ones not opened), with its incarnation."""
    from statekeep._runtime.bridge import run_sync

    found = run_sync(store._read(state_id), "aread")  # type: ignore[attr-defined]
    return found() if callable(found) else found


async def plant_entry(store: Store, state_id: str, seq: int, raw: bytes) -> None:
    """Put ``raw`` (an encoded entry, as a store holds it) in place of a State's stored entry
    ``seq`` through the store's own storage, as someone who can write the storage but holds
    no key could (the FileStore's line checksums made right again)."""
    from statekeep.stores import PostgresStore, RedisStore
    from statekeep.stores._postgres import quote_identifier

    if isinstance(store, MemoryStore):
        store._space.lines[state_id][seq] = raw + b"\n"
    elif isinstance(store, FileStore):
        from statekeep.stores._file.logformat import closing_record, frame, scan_log

        log = store.path / state_id / "log.jsonl"
        scan = scan_log(log.read_bytes())
        entries = [orjson.dumps(e) + b"\n" for e in scan.entries]
        entries[seq] = raw + b"\n"
        lines = b"".join(frame(line) for line in entries)
        snapshot = None if scan.snapshot is None else orjson.dumps(scan.snapshot)
        log.write_bytes(lines + closing_record(len(entries), lines, snapshot, None, scan.incarnation))
        (store.path / state_id / "snapshot.json").unlink(missing_ok=True)
    elif isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute(
                "UPDATE entries SET data = ? WHERE state_id = ? AND seq = ?", (raw.decode(), state_id, seq)
            )
        conn.close()
    elif isinstance(store, PostgresStore):
        await _postgres_execute(
            f"UPDATE {quote_identifier(store.schema)}.entries SET data = $3 WHERE state_id = $1 AND seq = $2",
            state_id,
            seq,
            raw.decode(),
        )
    elif isinstance(store, RedisStore):
        await _redis_call("lset", store._keys_of.entries + state_id.encode(), seq, raw)
    else:
        raise AssertionError(f"no way to plant an entry in {store!r}")


def store_url(kind: str, tmp_path: Path, prefix: str) -> str:
    """A URL of a store another process can open: a folder or SQLite file under ``tmp_path``, or
    the shared PostgreSQL or Redis in a namespace of its own (named from ``prefix``)."""
    if kind == "file":
        return str(tmp_path / "store")
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    name = servers().unique_name(prefix)
    if kind == "postgres":
        return f"{servers().shared_postgres().dsn}?namespace={name}"
    return f"{servers().shared_redis().url}?namespace={name}"


def namespace(tmp_path: Path) -> str:
    """A schema or key prefix of its own for each folder, the same for the same folder."""
    return "sk_" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]


#: The kinds :func:`store_url` makes: every store a second process can open.
URL_KINDS = ["file", "sqlite", "postgres", "redis"]


def sqlite_looks(path: Path) -> tuple[bytes, str, list[str], list[str]]:
    """What a test compares before and after: the file's bytes, its journal mode, its
    tables, and the files next to it."""
    data = path.read_bytes()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        tables = [n for (n,) in conn.execute("SELECT name FROM sqlite_master ORDER BY name")]
    finally:
        conn.close()
    return data, mode, tables, sorted(os.listdir(path.parent))

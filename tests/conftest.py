"""Fixtures shared by the test suite: every store, driven through the sync or async API."""

from __future__ import annotations

import asyncio
import gc
import inspect
import os
import sqlite3
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from statekeep import FileStore, MemoryStore, SQLiteStore, Store
from statekeep._runtime import bridge
from statekeep.testing import Api as Api  # the kit's helpers, as the tests import them
from statekeep.testing import entries as entries
from statekeep.testing import snapshot as snapshot

pytest_plugins = [
    "tests.servers",
    "tests.browser",
]  # fixtures: postgres_server, redis_server; browser, page, serve

# Every built-in store, for the tests that run on each (the contract itself runs through
# statekeep.testing.StoreContract in tests/test_conformance.py).
STORE_FACTORIES: dict[str, Callable[[Any], Store]] = {
    "memory": lambda tmp_path: MemoryStore(),
    "file": lambda tmp_path: FileStore(tmp_path / "store"),
    "sqlite": lambda tmp_path: SQLiteStore(tmp_path / "store.db"),
    # Throwaway servers (tests/servers.py), started on first use; a schema or key prefix per test.
    "postgres": lambda tmp_path: servers().postgres_store(tmp_path),
    "redis": lambda tmp_path: servers().redis_store(tmp_path),
}


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Module | pytest.Class, name: str, obj: object) -> None:
    """Mark this repository's coroutine tests that carry neither an asyncio nor an anyio mark
    ``pytest.mark.asyncio``, as pytest-asyncio's auto mode would; the repository runs it in
    strict mode so that anyio-marked tests (the kit's trio twins) go to anyio's plugin."""
    if not collector.istestfunction(obj, name):
        return
    test = obj.__func__ if isinstance(obj, staticmethod) else obj
    inner = test.hypothesis.inner_test if hasattr(test, "hypothesis") else test
    if not (inspect.iscoroutinefunction(inner) or inspect.isasyncgenfunction(inner)):
        return
    if any(collector.get_closest_marker(mark) for mark in ("asyncio", "anyio")):
        return
    if any(mark.name in ("asyncio", "anyio") for mark in getattr(test, "pytestmark", ())):
        return
    pytest.mark.asyncio(test)  # on the function: the item pytest makes next carries it


def servers() -> Any:
    """tests.servers, imported once pytest has loaded it as a plugin (so its asserts are rewritten)."""
    from tests import servers

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


#: The kinds :func:`store_url` makes: every store a second process can open.
URL_KINDS = ["file", "sqlite", "postgres", "redis"]


@pytest.fixture(params=sorted(STORE_FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Store]:
    s = STORE_FACTORIES[request.param](tmp_path)
    yield s
    s.close()


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, store: Store) -> Api:
    return Api(store, request.param)


def is_root() -> bool:
    return os.geteuid() == 0


# -- dropped stores ------------------------------------------------------------------------


def drop_and_collect(stores: list[Store]) -> list[str]:
    """Drop the caller's ``stores`` (the list is emptied), collect garbage, and wait until
    statekeep's loop has closed what they held. Returns the ResourceWarnings raised."""
    # The loop may still be leaving the step that settled the caller's last call, its frame
    # holding that store: one more call through the loop waits until it has left.
    owner_loop_settled()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stores.clear()
        gc.collect()
    owner_loop_settled()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


def owner_loop_settled() -> None:
    """Wait until statekeep's owner loop has finished every task it was given."""

    async def others_done() -> None:
        me = asyncio.current_task()
        while others := [t for t in bridge.owner().tasks if t is not me]:
            await asyncio.wait(others)

    bridge.run_sync(others_done(), "others_done")


def warnings_once_settled() -> list[str]:
    """The warnings raised while the owner loop settles and garbage is collected: a dropped
    operation's coroutine left unawaited would show here ("coroutine ... was never awaited")."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        owner_loop_settled()
        gc.collect()
    return [str(w.message) for w in caught]


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

"""The store ``import`` and ``copy`` write to: created if missing, but never made inside a
SQLite database that holds other tables (an application's own database, given by mistake)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .._core.errors import NotAStoreError
from .._store.contract import Store
from ..stores import SQLiteStore
from ..stores._urls import open_store
from ._common import refuse_memory
from ._keys import load_keyring


def open_destination(url: str, keys_file: str | None, *, env: bool = True) -> Store:
    """The store to write to, created if it does not exist yet (a folder, a SQLite file,
    tables or keys), sealed with ``keys_file``'s keys (else ``$STATEKEEP_KEYS``'s, if
    ``env``) if given. A SQLite file that has tables but no statekeep store is refused
    (NotAStoreError, exit 3) before anything is written to it, as a folder that is not a
    store is; a memory:// store (gone when the command ends) exits 2."""
    keyring = load_keyring(keys_file, None if env else {})
    store = open_store(url, create=True, **({} if keyring is None else {"encrypt": keyring}))
    refuse_memory(store, "what this command writes to memory:// would be gone when it ends")
    if isinstance(store, SQLiteStore):
        try:
            _refuse_foreign_database(store.path)
        except BaseException:
            store.close()
            raise
    return store


def _refuse_foreign_database(path: Path) -> None:
    if not path.is_file() or path.stat().st_size == 0:
        return  # a new store: statekeep makes it
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return  # the store's own open says what is wrong with it
    try:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError:
        return  # not a database: the store's own open refuses it
    finally:
        conn.close()
    if tables and "schema_version" not in tables:
        raise NotAStoreError(
            f"{path} is a SQLite database with other tables ({', '.join(sorted(tables)[:5])}) and "
            "no statekeep store; nothing was written to it. Give a new file, or a statekeep database"
        )

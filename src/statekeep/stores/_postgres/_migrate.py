"""Bringing a schema's tables to this statekeep's version on first use, once per schema at
a time across processes and hosts; refusing tables of a newer statekeep, a database that
is not UTF8, and (with ``create=False``) a schema without statekeep's tables."""

from __future__ import annotations

import hashlib
from types import ModuleType
from typing import TYPE_CHECKING

from ..._core.errors import NotAStoreError, UnsupportedFormatError
from ._pooler import check_direct
from ._schema import SCHEMA_VERSION, bootstrap, migrations
from ._sql import Sql

if TYPE_CHECKING:
    from asyncpg import Pool


async def migrate(
    pool: Pool,
    asyncpg: ModuleType,
    sql: Sql,
    *,
    store: str,
    schema: str,
    create: bool,
    pooler: str | None = None,
) -> None:
    """Create or upgrade the tables of ``sql`` in ``schema`` (``store`` names the store in
    errors); with ``create`` False, change nothing and refuse a schema not at this version.
    A pooler found between the store and the server when ``pooler`` is None is refused
    (``_pooler.PoolerUnset``), before anything else is sent."""
    errors = asyncpg.exceptions
    async with pool.acquire() as conn:
        row = await conn.fetchrow("SELECT current_setting('server_encoding'), pg_backend_pid()")
        assert row is not None
        encoding, backend = row[0], row[1]
        check_direct(pooler, conn.get_server_pid(), backend)
        if encoding not in ("UTF8", "SQL_ASCII"):
            raise RuntimeError(
                f"{store}: the database's encoding is {encoding}; statekeep keeps JSON text and "
                "needs a UTF8 database (CREATE DATABASE ... ENCODING 'UTF8')"
            )
        try:
            version = await conn.fetchval(sql.read_version)
        except (errors.UndefinedTableError, errors.InvalidSchemaNameError):
            version = None
        if version == SCHEMA_VERSION:
            return
        check_version(version, store=store, schema=schema)
        if not create:
            found = "no statekeep tables" if version is None else f"statekeep schema version {version}"
            raise NotAStoreError(
                f"{store}: schema {schema!r} holds {found}; nothing was changed",
                "This store was opened with create=False, which creates and migrates nothing: "
                "pass the DSN, schema and table prefix statekeep saved to",
            )
        async with conn.transaction():
            # One migrator per schema at a time, in every process and host.
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _lock_key(schema))
            for statement in bootstrap(sql):
                await conn.execute(statement)
            version = await conn.fetchval(sql.read_version) or 0
            check_version(version, store=store, schema=schema)
            for steps in migrations(sql)[version:]:
                for statement in steps:
                    await conn.execute(statement)
            await conn.execute(sql.set_version, SCHEMA_VERSION)


def check_version(version: int | None, *, store: str, schema: str) -> None:
    """Refuse tables at a schema version newer than this statekeep's (UnsupportedFormatError)."""
    if version is not None and version > SCHEMA_VERSION:
        raise UnsupportedFormatError(
            f"{store}: the tables in schema {schema!r} are at statekeep schema version "
            f"{version}, made by a newer statekeep; this one understands version {SCHEMA_VERSION} "
            "and leaves them alone. Upgrade statekeep: pip install -U 'statekeep[postgres]'"
        )


def _lock_key(schema: str) -> int:
    digest = hashlib.blake2b(f"statekeep schema {schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)

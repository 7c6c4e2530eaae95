"""PostgresStore: every State in two PostgreSQL tables, through asyncpg (``statekeep[postgres]``).

Schema (version 1, in the schema ``schema``, every name prefixed with ``table_prefix``)::

    states(id PRIMARY KEY, next_seq, snapshot JSON text or NULL,
           task, created_at, updated_at, turn, stopped_by, finished,   -- the listing,
           unlisted, written_at)                                       -- from the snapshot
    entries(state_id, seq, data JSON text; PRIMARY KEY (state_id, seq))
    states_listing index (updated_at DESC, id)        -- list() is one ordered index scan
    schema_version(version)                           -- migrations run on first use
    write(...), delete(...)                           -- PL/pgSQL, one statement each

JSON is kept as text, byte for byte as statekeep encoded it: ``jsonb`` would reorder keys
and turn floats such as ``1e20`` into integers.

A write is one call of the ``write`` function: it locks the State's row (``SELECT ...
FOR UPDATE``), which serialises writers to one State across processes and hosts, applies
the seq rules and inserts the new entries. Writes that wait at the same moment in one
process, to different States, are sent together (group commit): one transaction, one
round trip, one WAL flush, each write with its own outcome. In such a batch a State
whose row another transaction holds is skipped (``SKIP LOCKED``) and written alone
afterwards, so a batch never waits for anyone's lock.

Skipping entries the store already has: the function compares the overlapping stored
entries with the sent ones byte for byte. When they differ, it writes nothing and returns
the stored ones; statekeep decodes and compares them (a real difference is a
StateConflictError) and sends the write again with the stored text it found equal, which
the function accepts only if the State still holds exactly that text.

The listing columns are filled from the snapshot on write, with
:meth:`SavedState.from_snapshot`; a snapshot that lacks a listing key keeps the reason in
``unlisted``, and ``list()`` leaves that State out with a warning, as every store does.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Awaitable, Hashable
from contextlib import AsyncExitStack
from itertools import islice
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson

from .. import _redaction as redaction
from .._bridge import _Owner
from .._errors import CorruptStateError, NotAStoreError
from .._records import Record, SavedState, decode_snapshot, left_out, listing_order
from .._writes import PreparedWrite, check_overlap
from . import _server as servercommon
from ._server import ServerLocal, ServerStore, Talking

#: The schema version this statekeep writes; tables at a higher version are refused.
SCHEMA_VERSION = 1


async def _keep_session(conn: Any) -> None:
    """The pool's reset on release: none. The store leaves no session state behind (no
    transaction, lock, cursor or setting outlives a statement), and asyncpg's default
    reset costs a round trip per statement."""


#: Pool settings used unless ``pool_kwargs`` says otherwise.
DEFAULT_POOL: dict[str, Any] = {"min_size": 0, "max_size": 10, "reset": _keep_session}

# PostgreSQL cuts longer identifiers (NAMEDATALEN - 1 bytes) without an error.
_MAX_IDENTIFIER = 63
# The longest name derived from the prefix.
_LONGEST_SUFFIX = max(len(s) for s in ("states", "entries", "schema_version", "states_listing", "write"))
_INT64_MAX = 2**63 - 1

# Outcomes of the write function: those of every server store, and one of its own.
_OK, _MISSING, _EXISTS, _GAP, _COMPARE = servercommon.OUTCOMES
_BUSY = 5
# In the write and delete functions: this transaction commits with the WAL flushed,
# whatever the session says (a session setting could be reset or come from a pooler).
_DURABLE = """IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;"""


def _import_asyncpg() -> Any:
    # 0.30: executemany that returns rows, which batched writes need.
    return servercommon.import_driver(
        "asyncpg", "PostgresStore", "the asyncpg driver", "postgres", ("asyncpg", (0, 30))
    )


def redact_dsn(dsn: str) -> str:
    """``dsn`` with its user information and every password replaced by ``***`` (see
    :mod:`statekeep._redaction`)."""
    return redaction.redact_url(dsn)


def quote_identifier(name: str) -> str:
    """``name`` as a quoted SQL identifier (``"`` doubled inside)."""
    return '"' + name.replace('"', '""') + '"'


def _check_name(value: object, what: str, limit: int) -> str:
    if type(value) is not str:
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    if "\x00" in value:
        raise ValueError(f"{what} {value!r} holds a NUL character, which PostgreSQL names cannot")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{what} {value!r} is not valid UTF-8 (a lone surrogate)") from None
    if size > limit:
        raise ValueError(
            f"{what} {value!r} is {size} bytes long; at most {limit} bytes fit in a PostgreSQL "
            f"name ({_MAX_IDENTIFIER} bytes{', with the longest table name added' if limit < 63 else ''})"
        )
    return value


class _Where:
    """Where the server is, for equality, ``repr`` and error messages; never the password."""

    def __init__(self, dsn: str | None, kwargs: dict[str, Any]) -> None:
        host: Any = None
        port: Any = None
        database: Any = None
        user: Any = None
        secrets: set[str] = set()
        if dsn:
            # The user information first: a password may hold '/', '?', '#' or '@'.
            userinfo, rest = redaction.split_userinfo(dsn)
            secrets.update(redaction.url_secrets(dsn))
            if userinfo:
                user = unquote(userinfo.partition(":")[0]) or None
            parts = urlsplit(rest)
            host, port = _split_hosts(parts.netloc)
            database = unquote(parts.path.lstrip("/")) or None
            for key, value in _query(parts.query):
                if key == "host":
                    host = value
                elif key == "port":
                    port = value
                elif key in ("dbname", "database"):
                    database = value
                elif key == "user":
                    user = value
        host = kwargs.get("host", host) or os.environ.get("PGHOST") or "localhost"
        port = kwargs.get("port", port) or os.environ.get("PGPORT") or 5432
        user = kwargs.get("user", user) or os.environ.get("PGUSER")
        database = kwargs.get("database", database) or os.environ.get("PGDATABASE") or user
        for secret in (kwargs.get("password"), os.environ.get("PGPASSWORD")):
            if isinstance(secret, str) and secret:
                secrets.add(secret)
        self.host = str(host)
        self.port = str(port)
        self.database: str | None = database
        self.secrets = sorted((s for s in secrets if len(s) >= 1), key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` with any password it holds replaced by ``***``."""
        return redaction.scrub(text, self.secrets)


def _split_hosts(hostlist: str) -> tuple[str | None, str | None]:
    if not hostlist:
        return None, None
    if "," in hostlist:  # several hosts: keep the list as it is
        return hostlist, None
    if hostlist.startswith("["):
        host, _, rest = hostlist[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else None
    host, colon, port = hostlist.rpartition(":")
    return (unquote(host), port) if colon else (unquote(hostlist), None)


def _query(query: str) -> list[tuple[str, str]]:
    pairs = []
    for item in query.split("&"):
        key, eq, value = item.partition("=")
        if eq:
            pairs.append((unquote(key).lower(), unquote(value)))
    return pairs


class _Sql:
    """Every statement of one (schema, table prefix), with the names quoted once."""

    def __init__(self, schema: str, prefix: str) -> None:
        s = quote_identifier(schema)
        self.schema = s

        def name(suffix: str) -> str:
            return f"{s}.{quote_identifier(prefix + suffix)}"

        self.states = states = name("states")
        self.entries = entries = name("entries")
        self.version = name("schema_version")
        self.write_fn = write_fn = name("write")
        self.delete_fn = delete_fn = name("delete")
        listing = quote_identifier(prefix + "states_listing")

        self.bootstrap = (
            f"CREATE SCHEMA IF NOT EXISTS {s}",
            f"""CREATE TABLE IF NOT EXISTS {self.version} (
                singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
                version integer NOT NULL
            )""",
        )
        write_body = f"""
DECLARE
    v_n integer := coalesce(cardinality(p_lines), 0);
    v_next bigint;
    v_skip integer := 0;
BEGIN
    {_DURABLE}
    IF p_create THEN
        INSERT INTO {states} (id, next_seq, snapshot, task, created_at, updated_at, turn,
                              stopped_by, finished, unlisted)
            VALUES (p_id, v_n, p_snapshot, p_task, p_created_at, p_updated_at, p_turn,
                    p_stopped_by, p_finished, p_unlisted)
            ON CONFLICT (id) DO NOTHING;
        IF NOT FOUND THEN
            o_status := {_EXISTS};
            RETURN;
        END IF;
        -- Nothing should be left from an earlier State of this id; be sure of it.
        DELETE FROM {entries} WHERE state_id = p_id;
        INSERT INTO {entries} (state_id, seq, data)
            SELECT p_id, u.o - 1, u.d FROM unnest(p_lines) WITH ORDINALITY AS u(d, o);
        o_status := {_OK};
        o_next := v_n;
        RETURN;
    END IF;
    IF p_nowait THEN
        -- In a batch: never wait for another transaction's lock (that would hold up the
        -- whole batch); the client sends this write again on its own.
        SELECT s.next_seq INTO v_next FROM {states} s WHERE s.id = p_id FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            o_status := CASE WHEN EXISTS (SELECT 1 FROM {states} s WHERE s.id = p_id)
                             THEN {_BUSY} ELSE {_MISSING} END;
            RETURN;
        END IF;
    ELSE
        SELECT s.next_seq INTO v_next FROM {states} s WHERE s.id = p_id FOR UPDATE;
        IF NOT FOUND THEN
            o_status := {_MISSING};
            RETURN;
        END IF;
    END IF;
    o_next := v_next;
    IF v_n > 0 THEN
        IF p_first > v_next THEN
            o_status := {_GAP};
            RETURN;
        END IF;
        v_skip := least(v_next - p_first, v_n);
    END IF;
    IF v_skip > 0 THEN
        SELECT array_agg(e.data ORDER BY e.seq) INTO o_stored FROM {entries} e
            WHERE e.state_id = p_id AND e.seq >= p_first AND e.seq < p_first + v_skip;
        IF o_stored IS DISTINCT FROM p_lines[1:v_skip] AND o_stored IS DISTINCT FROM p_approved THEN
            o_status := {_COMPARE};
            RETURN;
        END IF;
        o_stored := NULL;
    END IF;
    IF v_skip < v_n THEN
        INSERT INTO {entries} (state_id, seq, data)
            SELECT p_id, p_first + v_skip + u.o - 1, u.d
            FROM unnest(p_lines[v_skip + 1 : v_n]) WITH ORDINALITY AS u(d, o);
        o_next := p_first + v_n;
    END IF;
    IF v_skip < v_n OR p_snapshot IS NOT NULL THEN
        UPDATE {states} SET
            next_seq = o_next,
            snapshot = coalesce(p_snapshot, snapshot),
            task = CASE WHEN p_snapshot IS NULL THEN task ELSE p_task END,
            created_at = CASE WHEN p_snapshot IS NULL THEN created_at ELSE p_created_at END,
            updated_at = CASE WHEN p_snapshot IS NULL THEN updated_at ELSE p_updated_at END,
            turn = CASE WHEN p_snapshot IS NULL THEN turn ELSE p_turn END,
            stopped_by = CASE WHEN p_snapshot IS NULL THEN stopped_by ELSE p_stopped_by END,
            finished = CASE WHEN p_snapshot IS NULL THEN finished ELSE p_finished END,
            unlisted = CASE WHEN p_snapshot IS NULL THEN unlisted ELSE p_unlisted END,
            written_at = now()
        WHERE id = p_id;
    END IF;
    o_status := {_OK};
END
"""
        delete_body = f"""
BEGIN
    {_DURABLE}
    -- The row first: that waits for a writer holding it, whose entries the next
    -- statement then sees.
    DELETE FROM {states} WHERE id = p_id;
    DELETE FROM {entries} WHERE state_id = p_id;
END
"""
        self.migrations: tuple[tuple[str, ...], ...] = (
            (
                f"""CREATE TABLE {states} (
                    id text COLLATE "C" PRIMARY KEY,
                    next_seq bigint NOT NULL DEFAULT 0,
                    snapshot text,
                    task text,
                    created_at timestamptz,
                    updated_at timestamptz,
                    turn bigint,
                    stopped_by text,
                    finished boolean,
                    unlisted text,
                    written_at timestamptz NOT NULL DEFAULT now()
                )""",
                f"""CREATE TABLE {entries} (
                    state_id text COLLATE "C" NOT NULL,
                    seq bigint NOT NULL,
                    data text NOT NULL,
                    PRIMARY KEY (state_id, seq)
                )""",
                f"CREATE INDEX {listing} ON {states} (updated_at DESC, id) WHERE snapshot IS NOT NULL",
                f"""CREATE FUNCTION {write_fn}(
                    p_id text, p_create boolean, p_first bigint, p_lines text[], p_snapshot text,
                    p_task text, p_created_at timestamptz, p_updated_at timestamptz, p_turn bigint,
                    p_stopped_by text, p_finished boolean, p_unlisted text, p_approved text[],
                    p_nowait boolean,
                    OUT o_status integer, OUT o_next bigint, OUT o_stored text[]
                ) LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
                AS {_dollar_quote(write_body)}""",
                f"""CREATE FUNCTION {delete_fn}(p_id text) RETURNS void
                LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
                AS {_dollar_quote(delete_body)}""",
            ),
        )
        self.read_version = f"SELECT version FROM {self.version}"
        self.set_version = (
            f"INSERT INTO {self.version} (version) VALUES ($1) "
            "ON CONFLICT (singleton) DO UPDATE SET version = EXCLUDED.version"
        )
        self.write = (
            f"SELECT o_status, o_next, o_stored FROM {write_fn}({', '.join(f'${i}' for i in range(1, 15))})"
        )
        self.delete = f"SELECT {delete_fn}($1)"
        # One statement, so one consistent view of the row and its entries: the row first
        # (seq -1: its snapshot and next_seq), then the entries in seq order. (Joining the
        # entries into one JSON text on the server is slower than parsing them one by one.)
        self.read = f"""
            SELECT -1 AS seq, snapshot AS data, next_seq FROM {states} WHERE id = $1
            UNION ALL
            SELECT e.seq, e.data, NULL FROM {entries} e
            WHERE e.state_id = $1 AND e.seq >= 0 AND e.seq < (SELECT next_seq FROM {states} WHERE id = $1)
            ORDER BY seq"""
        self.list = f"""
            SELECT id, task, created_at, updated_at, turn, stopped_by, finished, unlisted,
                   CASE WHEN task IS NULL AND unlisted IS NULL THEN snapshot END
            FROM {states} WHERE snapshot IS NOT NULL
            ORDER BY updated_at DESC, id"""


def _dollar_quote(body: str) -> str:
    tag = "$statekeep$"
    n = 0
    while tag in body:
        n += 1
        tag = f"$statekeep{n}$"
    return f"{tag}{body}{tag}"


def _listing(state_id: str, snapshot: bytes | None) -> tuple[Any, ...]:
    """The listing columns for a snapshot: (task, created_at, updated_at, turn, stopped_by,
    finished, unlisted). All None with no snapshot; only ``unlisted`` (the reason) when
    the snapshot lacks a listing key; all None too when a value does not fit a column, and
    list() then reads it from the snapshot itself."""
    empty = (None,) * 7
    if snapshot is None:
        return empty
    try:
        row = SavedState.from_snapshot(state_id, orjson.loads(snapshot))
    except ValueError as exc:
        return (*empty[:6], str(exc).replace("\x00", "\\x00"))
    except Exception:
        return empty
    if (
        "\x00" in row.task
        or (row.stopped_by is not None and "\x00" in row.stopped_by)
        or row.turn > _INT64_MAX
    ):
        return empty
    return (row.task, row.created_at, row.updated_at, row.turn, row.stopped_by, row.finished, None)


class PostgresStore(ServerStore):
    """Saves States in PostgreSQL (needs ``pip install 'statekeep[postgres]'``).

    Durable on return: when ``write``/``awrite`` returns, its transaction has committed with
    ``synchronous_commit=on`` (the WAL is flushed to disk, and to synchronous standbys if
    the server has any), so the write survives a crash of the server or its machine. A
    connection that drops during the commit leaves the outcome unknown: the store then
    raises ConnectionError, and sending the same write again is safe, since entries the
    store already has are skipped when equal. (A ``create=True`` write sent again after an
    unknown outcome may find its own State and raise "already exists": read it to see.)
    A session whose ``synchronous_commit`` is ``off`` gets ``on`` for statekeep's writes.

    ``dsn`` is a libpq URI (``postgresql://user:password@host:5432/db?sslmode=verify-full``);
    None takes everything from the ``PG*`` environment variables, as libpq does. ``ssl``
    goes to asyncpg as it is: use ``"verify-full"`` (or an ``ssl.SSLContext`` that checks
    the certificate and host name) for servers you reach over a network, since asyncpg's
    default, ``prefer``, does not verify certificates. Other keyword arguments go to
    ``asyncpg.create_pool`` (defaults: ``min_size=0``, ``max_size=10``, and no reset query
    when a connection goes back to the pool, as the store leaves no session state).

    Writes to one State wait for each other, across processes and hosts, on a row lock.
    Writes to different States do not: those that come at the same moment share one
    transaction and its commit, and reads run in parallel on the pool's connections.

    ``pool``: an asyncpg pool to use instead of making one. asyncpg pools belong to the
    event loop that made them and statekeep runs all I/O on its own loop, so pass a pool
    only if it was made on that loop (``statekeep._bridge.owner().loop``); the store never
    closes a pool it did not make. Usually, leave it out.

    Tables live in ``schema`` (created if missing, with the tables, on first use), each
    name starting with ``table_prefix``; several stores can share one database with
    different schemas or prefixes. Both are quoted, never pasted into SQL; a NUL or a
    name longer than PostgreSQL's 63 bytes is refused. Tables made by a newer statekeep
    (a higher schema version) are refused with a message saying so. ``create=False``
    opens existing tables only (what the command line does): the store then creates and
    migrates nothing, and a schema without statekeep's tables is refused with
    NotAStoreError. The password never
    appears in ``repr()`` or in the store's error messages.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: Any = None,
        schema: str = "statekeep",
        table_prefix: str = "",
        ssl: Any = None,
        create: bool = True,
        **pool_kwargs: Any,
    ) -> None:
        self._asyncpg = _import_asyncpg()
        if dsn is not None and not isinstance(dsn, str):
            raise TypeError(f"dsn must be a str or None, got {type(dsn).__name__}")
        if dsn is not None:
            redaction.check_userinfo(dsn)
        self.schema = _check_name(schema, "schema", _MAX_IDENTIFIER)
        if not schema:
            raise ValueError("schema must not be empty")
        if schema.lower().startswith("pg_"):
            raise ValueError(f"schema {schema!r}: names starting with 'pg_' are reserved by PostgreSQL")
        self.table_prefix = _check_name(table_prefix, "table_prefix", _MAX_IDENTIFIER - _LONGEST_SUFFIX)
        self._dsn = dsn
        self._ssl = ssl
        self._user_pool = pool
        self._pool_kwargs = {**DEFAULT_POOL, **pool_kwargs}
        self._where = _Where(dsn, pool_kwargs)
        self._sql = _Sql(schema, table_prefix)
        # The pool of this process; replaced when owner() changes (after a fork).
        self._state: _Local | None = None
        self._migrated = False
        self._create = create

    def __repr__(self) -> str:
        if self._user_pool is not None:
            where = "pool=<asyncpg pool>"
        elif self._dsn is not None:
            where = repr(redact_dsn(self._dsn))
        else:
            where = f"host={self._where.host!r}, port={self._where.port!r}"
        return f"PostgresStore({where}, schema={self.schema!r}, table_prefix={self.table_prefix!r})"

    def _storage_key(self) -> Hashable:
        if self._user_pool is not None:
            return ("postgres", "pool", id(self._user_pool), self.schema, self.table_prefix)
        w = self._where
        return ("postgres", w.host, w.port, w.database, self.schema, self.table_prefix)

    # -- the four operations, on the owner loop -------------------------------------

    async def _write(self, write: PreparedWrite) -> None:
        sid = write.state_id
        lines = [line[:-1].decode() for line in write.lines]
        snapshot = None if write.snapshot is None else write.snapshot.decode()
        listing = _listing(sid, write.snapshot)
        approved: list[str] | None = None
        for _ in range(servercommon.MAX_COMPARES):
            args = (sid, write.create, write.first_seq, lines, snapshot, *listing, approved)
            status, next_seq, stored = await self._send(args)
            if status == _OK:
                return
            servercommon.check_outcome(status, write, next_seq)
            # The stored overlap is not byte-equal to this write: compare the decoded
            # values here, then send the write again with what was compared, which the
            # server checks byte for byte (the State may have changed in between).
            stored = stored or []
            check_overlap(write, servercommon.decode_stored(stored, sid, self._sql.entries))
            approved = stored
        raise servercommon.kept_changing(sid)

    async def _read(self, state_id: str) -> Record | None:
        rows = await self._query("read", "fetch", self._sql.read, state_id)
        if not rows:
            return None
        _, snapshot_text, next_seq = rows[0]
        if len(rows) - 1 != next_seq:
            raise CorruptStateError(
                f"State {state_id!r} in {self._sql.states} expects {next_seq} entries but "
                f"{self._sql.entries} holds {len(rows) - 1} of seq 0 to {next_seq - 1}"
            )
        loads = orjson.loads
        try:
            entries = [loads(row[1]) for row in islice(rows, 1, None)]
        except orjson.JSONDecodeError:
            entries = [self._entry(state_id, seq, data) for seq, data, _ in islice(rows, 1, None)]
        if not all(type(entry) is dict for entry in entries):
            seq = next(i for i, entry in enumerate(entries) if type(entry) is not dict)
            raise CorruptStateError(
                f"State {state_id!r}: the entry at seq {seq} in {self._sql.entries} is not a JSON object"
            )
        return Record(
            entries,
            decode_snapshot(snapshot_text, f"the snapshot of State {state_id!r} in {self._sql.states}"),
        )

    def _entry(self, state_id: str, seq: int, data: str) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise CorruptStateError(
                f"State {state_id!r}: the entry at seq {seq} in {self._sql.entries} is not valid JSON: {exc}"
            ) from None

    async def _list(self) -> tuple[list[SavedState], list[str]]:
        rows = await self._query("list", "fetch", self._sql.list)
        listed: list[SavedState] = []
        skipped: list[str] = []
        resort = False
        for sid, task, created_at, updated_at, turn, stopped_by, finished, unlisted, raw in rows:
            if task is not None:
                listed.append(SavedState(sid, task, created_at, updated_at, turn, stopped_by, finished))
                continue
            try:
                if unlisted is not None:
                    raise ValueError(unlisted)
                listed.append(SavedState.from_snapshot(sid, orjson.loads(raw)))
                resort = True  # ordered by the snapshot, not by the index
            except ValueError as exc:
                skipped.append(left_out(sid, exc))
        return (listing_order(listed) if resort else listed), skipped

    async def _delete(self, state_id: str) -> None:
        await self._query("delete", "execute", self._sql.delete, state_id)

    # -- writes: one at a time, or batched -----------------------------------------

    async def _send(self, args: tuple[Any, ...]) -> tuple[int, int | None, list[str] | None]:
        """Run the write function with ``args`` (all but ``p_nowait``); return its row.

        Group commit: writes that wait at the same moment, to different States of this
        store, go to the server together, as one transaction in one round trip, and share
        its commit (one WAL flush). A write alone goes as one statement. Each write still
        gets its own outcome. In a batch a State whose row another transaction holds is
        skipped at once and sent again alone, so a batch never waits for a lock.
        """
        row = await self._queued(args)
        return row[0], row[1], row[2]

    async def _write_one(self, local: _Local, args: tuple[Any, ...]) -> Any:
        """One write alone, waiting for the State's row lock if another transaction has it."""
        return await self._query("write", "fetchrow", self._sql.write, *args, False, local=local)

    async def _send_batch(self, local: _Local, batch: list[_Queued]) -> None:
        """Send ``batch`` as one transaction (one statement when it is one write), skipping
        States whose row is locked: those are sent again alone, in tasks of their own."""
        batch.sort(key=lambda item: item[0][0])  # row locks in id order, the same everywhere
        try:
            if len(batch) == 1:
                rows = [
                    await self._query("write", "fetchrow", self._sql.write, *batch[0][0], True, local=local)
                ]
            else:
                rows = await self._query(
                    "write", "fetchmany", self._sql.write, [(*a, True) for a, _ in batch], local=local
                )
        except ConnectionError as exc:
            for _, future in batch:  # the outcome is unknown for every one of them
                if not future.done():
                    future.set_exception(ConnectionError(*exc.args))
            return
        except Exception as exc:
            if len(batch) == 1:
                if not batch[0][1].done():
                    batch[0][1].set_exception(exc)
                return
            # The transaction failed whole, so nothing of it was saved: each write again
            # alone, so that each gets its own outcome.
            for args, future in batch:
                local.spawn(_settle(future, self._write_one(local, args)))
            return
        for (args, future), row in zip(batch, rows, strict=True):
            if row[0] == _BUSY:  # alone, in a task of its own: it may wait for the lock
                local.spawn(_settle(future, self._write_one(local, args)))
            elif not future.done():
                future.set_result(row)

    # -- talking to the server ------------------------------------------------------

    async def _query(
        self, action: str, method: str, query: str, *args: Any, local: _Local | None = None
    ) -> Any:
        """Run one statement on a connection of the pool, as ``conn.<method>(query, *args)``.

        A connection that asyncpg left in a broken protocol state (which it can do when the
        server ends a session; asyncpg issue #1069) is closed, and the statement is sent
        again on another connection, since such a connection refuses it before sending
        anything. Errors while giving a connection back to the pool are not the
        statement's: the pool closes that connection and the result stands.
        """
        async with AsyncExitStack() as stack:
            if local is None:  # else a flusher, already counted
                local = await stack.enter_async_context(self._using(action))
            else:
                await stack.enter_async_context(self._talking(action))
            pool = local.pool
            tries = pool.get_max_size() + 1  # every connection of the pool may be broken
            for attempt in range(tries):
                conn = await pool.acquire()
                try:
                    return await getattr(conn, method)(query, *args)
                except self._asyncpg.exceptions.InternalClientError as exc:
                    conn.terminate()
                    if attempt < tries - 1 and str(exc).startswith("cannot switch to state"):
                        continue  # refused before anything was sent
                    raise
                finally:
                    try:
                        await pool.release(conn)
                    except Exception:
                        pass
            raise AssertionError("unreachable")

    # -- the pool -------------------------------------------------------------------

    def _new_local(self, own: _Owner) -> _Local:
        return _Local(own)

    def _user_conn(self) -> Any:
        return self._user_pool

    def _talking(self, action: str) -> _Talking:
        return _Talking(self, action)

    @staticmethod
    async def _close_conn(conn: Any) -> None:
        await _close_pool(conn)

    async def _open(self, local: _Local) -> Any:
        own = local.owner
        if self._user_pool is not None:
            pool = self._user_pool
            loop = getattr(pool, "_loop", None)
            if loop is not None and loop is not own.loop:
                raise RuntimeError(
                    f"{self!r}: the asyncpg pool passed as pool= belongs to another event loop; "
                    "statekeep runs all I/O on its own loop. Pass a DSN instead, or make the pool "
                    "on statekeep._bridge.owner().loop"
                )
        else:
            pool = await self._asyncpg.create_pool(self._dsn, ssl=self._ssl, **self._pool_kwargs)
        await self._checked_open(local, pool, self._migrate_once)
        return pool

    async def _migrate_once(self, pool: Any) -> None:
        if not self._migrated:
            await self._migrate(pool)
            self._migrated = True

    async def _migrate(self, pool: Any) -> None:
        """Create or upgrade the tables; refuse tables of a newer statekeep."""
        errors = self._asyncpg.exceptions
        sql = self._sql
        async with pool.acquire() as conn:
            encoding = await conn.fetchval("SHOW server_encoding")
            if encoding not in ("UTF8", "SQL_ASCII"):
                raise RuntimeError(
                    f"{self!r}: the database's encoding is {encoding}; statekeep keeps JSON text and "
                    "needs a UTF8 database (CREATE DATABASE ... ENCODING 'UTF8')"
                )
            try:
                version = await conn.fetchval(sql.read_version)
            except (errors.UndefinedTableError, errors.InvalidSchemaNameError):
                version = None
            if version == SCHEMA_VERSION:
                return
            self._check_version(version)
            if not self._create:
                found = "no statekeep tables" if version is None else f"statekeep schema version {version}"
                raise NotAStoreError(
                    f"{self!r}: schema {self.schema!r} holds {found} (this store was opened with "
                    "create=False, which creates and migrates nothing); nothing was changed. Pass "
                    "the DSN, schema and table prefix statekeep saved to"
                )
            async with conn.transaction():
                # One migrator per schema at a time, in every process and host.
                await conn.execute("SELECT pg_advisory_xact_lock($1)", _lock_key(self.schema))
                for statement in sql.bootstrap:
                    await conn.execute(statement)
                version = await conn.fetchval(sql.read_version) or 0
                self._check_version(version)
                for steps in sql.migrations[version:]:
                    for statement in steps:
                        await conn.execute(statement)
                await conn.execute(sql.set_version, SCHEMA_VERSION)

    def _check_version(self, version: int | None) -> None:
        if version is not None and version > SCHEMA_VERSION:
            raise RuntimeError(
                f"{self!r}: the tables in schema {self.schema!r} are at statekeep schema version "
                f"{version}, made by a newer statekeep; this one understands version {SCHEMA_VERSION} "
                "and leaves them alone. Upgrade statekeep: pip install -U 'statekeep[postgres]'"
            )

    def _connection_errors(self) -> tuple[type[BaseException], ...]:
        e = self._asyncpg.exceptions
        return (
            OSError,
            e.PostgresConnectionError,
            e.AdminShutdownError,
            e.CrashShutdownError,
            e.CannotConnectNowError,
        )


_Queued = tuple[tuple[Any, ...], "asyncio.Future[Any]"]


class _Local(ServerLocal):
    """The pool and write queue of a PostgresStore on one owner loop."""

    queue: list[_Queued]

    @property
    def pool(self) -> Any:
        """The asyncpg pool (None until opened)."""
        return self.conn


async def _settle(future: asyncio.Future[Any], work: Awaitable[Any]) -> None:
    """Await ``work`` and hand its result or error to ``future``."""
    try:
        row = await work
    except Exception as exc:
        if not future.done():
            future.set_exception(exc)
        return
    except BaseException as exc:
        if not future.done():
            future.set_exception(exc)
        raise
    if not future.done():
        future.set_result(row)


class _Talking(Talking):
    """Errors of PostgreSQL: asyncpg's connection errors, the DSN's password scrubbed."""

    store: PostgresStore

    def server(self) -> str:
        w = self.store._where
        return f"PostgreSQL at {w.host}:{w.port}"

    def scrub(self, text: str) -> str:
        return self.store._where.scrub(text)

    def lost(self) -> tuple[type[BaseException], ...]:
        return self.store._connection_errors()


async def _close_pool(pool: Any) -> None:
    try:
        await asyncio.wait_for(pool.close(), 5.0)
    except Exception:
        pool.terminate()


def _lock_key(schema: str) -> int:
    digest = hashlib.blake2b(f"statekeep schema {schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


__all__ = ["SCHEMA_VERSION", "PostgresStore", "quote_identifier", "redact_dsn"]

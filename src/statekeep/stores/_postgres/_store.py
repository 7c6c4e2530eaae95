"""PostgresStore: the class, and each operation on the owner loop (the tables and SQL it
uses: :mod:`._schema`, :mod:`._sql`; its pool: :mod:`._pool`; the package docstring tells
how States are kept)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Hashable
from datetime import timedelta
from itertools import islice
from typing import TYPE_CHECKING, Any

import orjson

from ..._core import passwords as redaction
from ..._core.blobs import DEFAULT_OFFLOAD
from ..._core.errors import CorruptStateError
from ..._core.leases import Lease
from ..._core.records import Record, decode_snapshot
from ..._core.redactor import Redactor
from ..._core.writes import PreparedWrite, check_overlap
from ..._protect.sealing import Keyring
from .. import _server as servercommon
from .._server import Queued, ServerStore
from . import _pool
from ._blobs import Blobs
from ._dsn import Where, names_target, redact_dsn, seconds, take_options
from ._leasing import Leasing, lease_args, refused
from ._lifecycle import Lifecycle
from ._listing import listing
from ._migrate import migrate
from ._pool import DEFAULT_POOL, PoolLocal
from ._pooler import implied, pool_settings, take_pooler
from ._schema import BUSY, FENCED
from ._schema_v4 import precondition_args
from ._schema_v5 import blob_args
from ._sql import LONGEST_SUFFIX, MAX_IDENTIFIER, Sql, check_name
from ._trim import check_trimmed, lock_sql, trim_sql

if TYPE_CHECKING:
    from asyncpg import Pool
    from asyncpg import Record as Row

#: What the write function is called with (all its arguments but ``p_nowait``).
WriteArgs = tuple[Any, ...]

#: The statements sent again after a lost connection (with a ``failover_timeout``): they
#: change nothing. Writes are sent again by :meth:`PostgresStore._write`; delete, fork,
#: leases, gc and trim never.
RESENT = frozenset({"read", "list", "stats"})


class PostgresStore(Blobs, Lifecycle, Leasing, ServerStore["Pool", PoolLocal, WriteArgs, "Row"]):
    """Saves States in PostgreSQL (needs ``pip install 'statekeep[postgres]'``).

    Durable on return: when ``write``/``awrite`` returns, its transaction has committed with
    ``synchronous_commit=on`` (the WAL is flushed to disk, and to synchronous standbys if
    the server has any), so the write survives a crash of the server or its machine. A
    connection that drops during the commit leaves the outcome unknown: the store then
    raises ConnectionError, and sending the same write again is safe, since entries the
    store already has are skipped when equal. A session whose ``synchronous_commit`` is
    ``off`` gets ``on`` for statekeep's writes.

    Failover: ``dsn`` may name a primary and its standbys
    (``postgresql://h1:5432,h2:5432/db``); the store connects to the one that takes writes
    (``target_session_attrs=read-write`` unless the DSN says otherwise) and, after the
    primary dies, to the promoted standby. ``failover_timeout`` (seconds, also in the DSN;
    default 30 with several hosts, else 0): how long a write, read or listing keeps
    sending itself again after a lost connection before it raises ConnectionError saying
    the outcome is unknown. A resent write whose first attempt committed returns as a
    success (a ``create=True`` one too, never "already exists"; its snapshot is not sent
    again); one that finds a different entry is a StateConflictError; none is reported
    durable unless its commit was acknowledged. Delete, fork, leases, gc and trim are not
    resent (their ConnectionError says the outcome is unknown). What synchronous
    and asynchronous replication can lose: the docs' "Deploying across machines" page.

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
    only if it was made on that loop (``statekeep._runtime.bridge.owner().loop``); the store never
    closes a pool it did not make. Usually, leave it out.

    Tables live in ``schema`` (created if missing, with the tables, on first use), each
    name starting with ``table_prefix``; several stores can share one database with
    different schemas or prefixes. Both are quoted, never pasted into SQL; a NUL or a
    name longer than PostgreSQL's 63 bytes is refused. Tables made by a newer statekeep
    (a higher schema version) are refused with UnsupportedFormatError, a ValueError saying
    to upgrade. ``create=False``
    opens existing tables only (what the command line does): the store then creates and
    migrates nothing, and a schema without statekeep's tables is refused with
    NotAStoreError. The password never
    appears in ``repr()`` or in the store's error messages.

    ``namespace`` (default ``"default"``, where States of older statekeeps are): stores in
    different namespaces share the tables and never see each other's States, listings,
    memory or gc. ``retention`` (a timedelta, or seconds): a State with no ``expires_at`` of
    its own expires that long after its last write. Both can also be given in the DSN's
    query (``?namespace=a&retention=3600``); they are taken out before it reaches asyncpg.

    Expiry is judged by the server's clock (``now()``): the write function stamps
    ``now() + retention`` in the State's row (the snapshot is kept as it was given; listing
    rows show the effective ``expires_at``), and read, list, write and fork treat a State
    past its expiry as absent in the same statement that finds it. ``gc()`` deletes expired
    States in transactions of up to 1,000, skipping rows a writer holds and checking each
    row's expiry again once it is locked, so it is safe from many processes and never
    removes a State a concurrent write extended, nor one a live lease holds. ``fork()``
    copies the entries on the server (one ``INSERT ... SELECT``) in the transaction that
    creates the fork; with ``encrypt=`` they go through the client, re-sealed for the fork.

    Listings are answered from indexes, one page per statement (see
    :mod:`statekeep.stores._postgres._listing`), never by reading every State.

    Leases (``acquire``, ``renew``, ``release``) are rows of a ``leases`` table, judged by
    the server's clock (``clock_timestamp()``) when each statement runs, never the
    client's: they hold across processes and hosts. A write, delete or fork checks the
    State's lease in its own transaction, once it holds the State's row.

    ``trim(id, before=seq)``: see :meth:`~statekeep._store.backend.Backend.trim`; this store
    deletes the removed rows in one statement under the State's row lock.
    ``trim_compacted=True``: ``gc`` also trims every State up to its latest compaction.

    ``offload`` (default 32768): a value in an entry whose JSON encoding exceeds this many
    bytes is stored once, in the schema's ``blobs`` table (named by its SHA-256; by an HMAC
    under the keyring, per namespace, and sealed, when encrypted), and the entry refers to
    it; None keeps every value inline. See the docs' "Large values" page.

    ``redact``, ``encrypt`` and ``allow_plaintext``: see the docs' "Protection" page
    (:class:`~statekeep.Redactor`, :class:`~statekeep.Keyring`).

    ``pooler="transaction"`` (or ``?pooler=transaction``): behind PgBouncer in transaction mode
    (no prepared statements kept; no session state is ever relied on). ``"session"``: a pooler
    keeping each client's session. Left out, ``statement_cache_size=0`` among the pool's
    settings means "transaction" (asyncpg's own advice behind PgBouncer), and otherwise a
    pooler noticed at first use is refused with ConnectionError saying what to set, before
    anything is written (prepared statements shared through a pooler in transaction mode can
    run another client's statement). See the docs' "Deploying across machines" page.

    ``telemetry`` (default True): each operation is recorded with OpenTelemetry (a span and
    metrics) when a tracer or meter provider is set; False records nothing. ``trace_ids=True``:
    the spans carry the State id. See the docs' "Telemetry" page.
    """

    _local_type = PoolLocal
    _close_conn = staticmethod(_pool.close_pool)

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: Pool | None = None,
        schema: str = "statekeep",
        table_prefix: str = "",
        ssl: Any = None,
        create: bool = True,
        namespace: str | None = None,
        retention: timedelta | float | None = None,
        trim_compacted: bool = False,
        redact: Redactor | None = None,
        encrypt: Keyring | None = None,
        allow_plaintext: bool = False,
        telemetry: bool = True,
        trace_ids: bool = False,
        offload: int | None = DEFAULT_OFFLOAD,
        failover_timeout: float | None = None,
        pooler: str | None = None,
        **pool_kwargs: Any,
    ) -> None:
        self._asyncpg = servercommon.import_driver("postgres")
        if dsn is not None and not isinstance(dsn, str):
            raise TypeError(f"dsn must be a str or None, got {type(dsn).__name__}")
        dsn, pooler = take_pooler(dsn, pooler)
        options: dict[str, str] = {}
        if dsn is not None:
            redaction.check_userinfo(dsn)
            dsn, options = take_options(dsn)
            namespace = options.get("namespace") if namespace is None else namespace
            if retention is None and options.get("retention"):
                retention = seconds(options["retention"])
        self._lifecycle(
            "default" if namespace is None else namespace, retention, trim_compacted=trim_compacted
        )
        self._protect(redact, encrypt, allow_plaintext)
        self._observe(telemetry, trace_ids)
        self._take_offload(offload)
        self.schema = check_name(schema, "schema", MAX_IDENTIFIER)
        if not schema:
            raise ValueError("schema must not be empty")
        if schema.lower().startswith("pg_"):
            raise ValueError(f"schema {schema!r}: names starting with 'pg_' are reserved by PostgreSQL")
        self.table_prefix = check_name(table_prefix, "table_prefix", MAX_IDENTIFIER - LONGEST_SUFFIX)
        self._dsn = dsn
        self._ssl = ssl
        self._user_pool = pool
        self.pooler = pooler = implied(pooler, pool_kwargs)
        self._pool_kwargs = pool_settings(pooler, {**DEFAULT_POOL, **pool_kwargs})
        self._where = Where(dsn, pool_kwargs)
        self._take_failover(failover_timeout, options.get("failover_timeout"), self._where.several)
        if self._where.several and not names_target(dsn, pool_kwargs):
            # Several hosts: connect to the one that takes writes (the primary), whichever it is.
            self._pool_kwargs["target_session_attrs"] = "read-write"
        self._sql = Sql(schema, table_prefix)
        self._migrated = False
        self._create = create
        self._server_name = f"PostgreSQL at {self._where.address}"
        self._lost = _pool.connection_errors(self._asyncpg)
        self._user_conn = pool
        super().__init__()

    def __repr__(self) -> str:
        if self._user_pool is not None:
            where = "pool=<asyncpg pool>"
        elif self._dsn is not None:
            where = repr(redact_dsn(self._dsn))
        else:
            where = f"host={self._where.host!r}, port={self._where.port!r}"
        ns = "" if self.namespace == "default" else f", namespace={self.namespace!r}"
        return f"PostgresStore({where}, schema={self.schema!r}, table_prefix={self.table_prefix!r}{ns})"

    def _storage_key(self) -> Hashable:
        if self._user_pool is not None:
            return ("postgres", "pool", id(self._user_pool), self.schema, self.table_prefix, self.namespace)
        w = self._where
        return ("postgres", w.host, w.port, w.database, self.schema, self.table_prefix, self.namespace)

    # -- the four operations, on the owner loop -------------------------------------

    async def _write_once(self, write: PreparedWrite, resent: bool, guarded: bool = False) -> bool:
        """Send ``write`` (``resent``: again, after a lost connection left an earlier
        attempt's outcome unknown: a refusal its own commit explains is a success). False
        only for a ``guarded`` resend its guard refused (the State is not where it was)."""
        sid = write.state_id
        lines = [line[:-1].decode() for line in write.lines]
        snapshot = None if write.snapshot is None else write.snapshot.decode()
        columns = listing(sid, write.snapshot)
        head = (self.namespace, sid, write.create, write.first_seq, lines, snapshot, *columns, self.retention)
        approved: list[str] | None = None
        blobs = blob_args(write)
        for _ in range(servercommon.MAX_COMPARES):
            row = await self._send(
                (*head, approved, *lease_args(write.lease), *precondition_args(write), *blobs)
            )
            status, next_seq, stored = row[0], row[1], row[2]
            if status == servercommon.OK:
                return True
            if status == FENCED:
                refused(self.namespace, sid, row[3:], write.lease, servercommon.refused_write(resent))
            refused_again = resent and status in (servercommon.EXISTS, servercommon.UNEXPECTED)
            if refused_again and await servercommon.holds_write(self, write):
                return True  # the earlier attempt committed: its own entries refused this one
            if guarded and status == servercommon.UNEXPECTED:
                return False
            servercommon.check_outcome(status, write, next_seq)
            # The stored overlap is not byte-equal to this write: compare the decoded
            # values here, then send the write again with what was compared, which the
            # server checks byte for byte (the State may have changed in between).
            stored = stored or []
            check_overlap(write, servercommon.decode_stored(stored, sid, self._sql.entries))
            approved = stored
        raise servercommon.kept_changing(sid)

    async def _read(self, state_id: str, since: int = 0) -> Record | None:
        rows = await self._query("read", "fetch", self._sql.read, self.namespace, state_id, since)
        if not rows:
            return None
        _, snapshot_text, next_seq, incarnation = rows[0]
        if len(rows) > 1 and rows[1][0] > since:
            since = rows[1][0]  # a trimmed State read from below its base: from the base
        expected = max(0, next_seq - since)
        if len(rows) - 1 != expected:
            raise CorruptStateError(
                f"State {state_id!r} in {self._sql.states} expects {next_seq} entries but "
                f"{self._sql.entries} holds {len(rows) - 1} of seq {since} to {next_seq - 1}"
            )
        loads = orjson.loads
        try:
            entries = [loads(row[1]) for row in islice(rows, 1, None)]
        except orjson.JSONDecodeError:
            entries = []
        if len(entries) != expected or not all(type(entry) is dict for entry in entries):
            servercommon.raise_bad_entry(
                [row[1] for row in islice(rows, 1, None)],
                lambda i: f"State {state_id!r}: the entry at seq {since + i} in {self._sql.entries}",
            )
        return Record(
            entries,
            decode_snapshot(snapshot_text, f"the snapshot of State {state_id!r} in {self._sql.states}"),
            incarnation,
        )

    async def _trim(self, state_id: str, before: int, base: bytes, first: int) -> None:
        # The State's row locked, then one statement, in one transaction (see _trim).
        text = base[:-1].decode() if base.endswith(b"\n") else base.decode()
        lock = ("execute", lock_sql(self._sql), (self.namespace, state_id))
        trim = ("fetchrow", trim_sql(self._sql), (self.namespace, state_id, before, text, first))
        async with self._using("write") as used:
            row = await _pool.run_in_transaction(used.pool, [lock, trim])
        check_trimmed(state_id, before, row[0], row[1], first)

    async def _delete(self, state_id: str, lease: Lease | None = None) -> None:
        # Never resent: a resend would remove a State another client created meanwhile.
        row = await self._query(
            "delete", "fetchrow", self._sql.delete, self.namespace, state_id, *lease_args(lease)
        )
        if row[0] == FENCED:
            refused(self.namespace, state_id, row[1:], lease, "nothing was deleted")

    # -- writes: one at a time, or batched -----------------------------------------

    async def _send(self, args: WriteArgs) -> Row:
        """Run the write function with ``args`` (all but ``p_nowait``); return its row.

        Group commit: writes that wait at the same moment, to different States of this
        store, go to the server together, as one transaction in one round trip, and share
        its commit (one WAL flush). A write alone goes as one statement. Each write still
        gets its own outcome (a write its lease fences out fails alone). In a batch a State
        whose row another transaction holds is skipped at once and sent again alone, so a
        batch never waits for a lock.
        """
        return await self._queued(args)

    async def _write_one(self, local: PoolLocal, args: WriteArgs) -> Row:
        """One write alone, waiting for the State's row lock if another transaction has it."""
        row: Row = await self._query("write", "fetchrow", self._sql.write, *args, False, local=local)
        return row

    async def _send_batch(self, local: PoolLocal, batch: list[Queued[WriteArgs, Row]]) -> None:
        """Send ``batch`` as one transaction (one statement when it is one write), skipping
        States whose row is locked: those are sent again alone, in tasks of their own."""
        batch.sort(key=lambda item: item[0][:2])  # row locks in (ns, id) order, the same everywhere
        sql = self._sql.write
        try:
            async with self._talking("write"):
                if len(batch) == 1:
                    rows = [await _pool.run_writer(self._asyncpg, local, "fetchrow", sql, *batch[0][0], True)]
                else:
                    rows = await _pool.run_writer(
                        self._asyncpg, local, "fetchmany", sql, [(*a, True) for a, _ in batch]
                    )
        except ConnectionError as exc:
            for _, future in batch:  # the outcome is unknown for every one of them
                if not future.done():
                    future.set_exception(type(exc)(*exc.args))
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
            if row[0] == BUSY:  # alone, in a task of its own: it may wait for the lock
                local.spawn(_settle(future, self._write_one(local, args)))
            elif not future.done():
                future.set_result(row)

    # -- talking to the server ------------------------------------------------------

    async def _query(
        self,
        action: str,
        method: str,
        query: str,
        *args: Any,
        local: PoolLocal | None = None,
    ) -> Any:
        """Run one statement on a connection of the pool, as ``conn.<method>(query, *args)``
        (see :func:`._pool.run`), counted as in use unless ``local`` (a flusher's) is given.
        A read, listing or stats is sent again after a lost
        connection, for ``failover_timeout`` seconds (see :mod:`.._server._failover`)."""
        if local is None:  # else a flusher, already counted
            if self._failover_timeout and action in RESENT:
                return await self._resending(action, lambda _: self._run(action, method, query, args))
            async with self._using(action) as used:
                return await _pool.run(self._asyncpg, used.pool, method, query, *args)
        async with self._talking(action):  # no exit stack: this runs for every write
            return await _pool.run(self._asyncpg, local.pool, method, query, *args)

    async def _run(self, action: str, method: str, query: str, args: tuple[Any, ...]) -> Any:
        async with self._using(action) as used:
            return await _pool.run(self._asyncpg, used.pool, method, query, *args)

    # -- the pool -------------------------------------------------------------------

    def _refusal(self, exc: BaseException) -> str | None:
        return _pool.refusal(self._asyncpg, exc, self._where.user, self._where.database)

    async def _open(self, local: PoolLocal) -> Pool:
        pool = await _pool.make_pool(
            self._asyncpg, local.owner, self._user_pool, repr(self), self._dsn, self._ssl, **self._pool_kwargs
        )
        # Tracked (closed at exit or when dropped) with the store that owns it, never with a
        # memory sibling that shares it.
        root = self._root if isinstance(self._root, PostgresStore) else self
        await root._checked_open(local, pool, self._migrate_once)
        # The write queue keeps a connection of a pool it made between batches, leaving one
        # or more to reads (never one of a pool of yours, which others share).
        local.holds_writer = self._user_pool is None and pool.get_max_size() >= 2
        return pool

    async def _migrate_once(self, pool: Pool) -> None:
        if not self._migrated:
            await migrate(
                pool,
                self._asyncpg,
                self._sql,
                store=repr(self),
                schema=self.schema,
                create=self._create,
                pooler=self.pooler,
            )
            self._migrated = True


async def _settle(future: asyncio.Future[Row], work: Awaitable[Row]) -> None:
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

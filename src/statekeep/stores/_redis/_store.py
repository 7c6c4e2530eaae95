"""RedisStore: the class, and each operation on the owner loop (its scripts: :mod:`._lua`;
its client: :mod:`._client`; the package docstring tells how States are kept)."""

from __future__ import annotations

import copy
from collections.abc import Collection, Hashable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import orjson

from ..._core import passwords as redaction
from ..._core.blobs import DEFAULT_OFFLOAD
from ..._core.errors import CorruptStateError
from ..._core.labels import DEFAULT_NAMESPACE
from ..._core.leases import Lease
from ..._core.query import ListQuery, Page
from ..._core.records import Record, SavedState, Snapshot
from ..._core.redactor import Redactor
from ..._core.writes import (
    PreparedWrite,
    check_overlap,
    exists_error,
    missing_error,
    prepare_write,
    trimmed_meanwhile,
)
from ..._protect.sealing import Keyring
from ..._runtime.bridge import owner, run_async
from ..._store.saving import write_fork
from .. import _server as servercommon
from .._server import Queued, ServerStore
from .._urlquery import our_values
from . import _blobs, _client, _cluster, _leases, _listing, _reads
from ._args import fork_args, lease_args, write_args
from ._client import ClientLocal, ScriptCall
from ._keys import STAMP, Keys
from ._layout import check_server
from ._trim_lua import TRIM
from ._write_lua import WRONGTYPE

if TYPE_CHECKING:
    from redis.asyncio import Redis


def redact_url(url: str) -> str:
    """``url`` with its user information and every password replaced by ``***`` (see
    :mod:`statekeep._core.passwords`)."""
    return redaction.redact_url(url)


class RedisStore(ServerStore["Redis", ClientLocal, ScriptCall, Any]):
    """Saves States in Redis (needs ``pip install 'statekeep[redis]'``).

    Durability is the server's: a write is atomic (one Lua script), and when it returns
    the server has applied it, but it survives a crash of the server only if Redis logs
    every write to its append-only file and fsyncs it before answering: ``appendonly
    yes`` and ``appendfsync always``. With ``appendfsync everysec`` (Redis's default once
    AOF is on) up to a second of acknowledged writes can be lost; with no AOF, everything
    since the last RDB save. On first connect the store reads both settings and warns
    once (RuntimeWarning) if they are weaker, or if ``CONFIG GET`` is refused so that it
    cannot tell (on a cluster: every node's, the weakest warned about). It also warns when
    the server's ``maxmemory-policy`` may evict statekeep's keys (``allkeys-*``, or
    ``volatile-*`` when they have a TTL). Redis 7.0 has no ``WAITAOF``, so the store cannot
    confirm an fsync itself. A connection lost during a write raises ConnectionError with
    the outcome unknown: sending the same write again is safe, since entries the store
    already has are skipped when equal. (A ``create=True`` write you send again after an
    unknown outcome may find its own State and raise "already exists": read it to see;
    within ``failover_timeout``, below, the store recognises it itself.)

    Replicas are asynchronous: a write a master acknowledged and had not yet passed on is
    lost if the master dies and a replica takes over. ``wait_replicas=N`` (also
    ``?wait_replicas=N`` in the URL; on one server with replicas too): after each batch of
    writes the store runs ``WAIT N`` on the connection that ran them, for at most
    ``wait_timeout`` seconds (default 1); a write fewer replicas acknowledged raises
    ConnectionError saying it may or may not survive a failover, never returns as durable.
    So when a write returns: with ``wait_replicas=0`` (the default) the master applied it
    (and logged it, with AOF ``always``); with ``N`` also N replicas hold it in memory (not
    necessarily on their disks), so it survives the master's loss as long as one of them
    is the one promoted (a Redis Cluster promotes the replica with the most data).
    ``failover_timeout`` (seconds; ``?failover_timeout=`` too; default 0 on one server, 30
    on a cluster): a write whose outcome is unknown (a lost connection, too few replicas)
    is sent again, reconnecting (on a cluster: to the promoted master), until it succeeds
    or the time is up, then raises ConnectionError. A ``create=True`` write whose first
    attempt created the State is recognised (the State holds exactly what was sent) and
    succeeds.

    Redis Cluster: ``redis+cluster://:password@host:port,host:port/0`` (``rediss+cluster://``
    for TLS), or ``?cluster=true`` on a ``redis://`` URL, or a
    ``redis.asyncio.cluster.RedisCluster`` as ``client``. Every key of a namespace carries
    the hash tag ``{namespace}`` (``<prefix>{<namespace>}:state:<id>``, the default
    namespace too), so each script works on one node, atomic as on one server, and
    namespaces spread over the masters: put tenants in namespaces to spread the load. There,
    blobs are each namespace's own (under its tag, not shared across namespaces), the prefix
    may hold no ``{``, and a batch of writes goes to each master as one pipeline. Slot moves
    (MOVED, ASK) are followed; a script runs whole or not at all on one node.

    ``url`` is a redis-py URL (``redis://:password@host:6379/0``, ``rediss://`` for TLS,
    ``unix:///path.sock``). ``client``: a ``redis.asyncio.Redis`` to use instead; it must
    not have been used on another event loop (statekeep runs all I/O on its own), and the
    store does not close it. The store's own client does not retry commands by itself,
    so errors surface at once; it reconnects on the next call.

    ``create=False`` opens existing statekeep keys only (what the command line does): the
    store then writes nothing on connecting, and a prefix without statekeep's layout key
    is refused with NotAStoreError. Keys in a newer statekeep's layout are refused with
    UnsupportedFormatError, a ValueError saying to upgrade.

    All keys start with ``prefix``; stores with different prefixes share a database
    without seeing each other's States (keep prefixes from being prefixes of one
    another, and end them with ``:``). Runs on a single Redis server, a primary with
    replicas, or a Redis Cluster (above). The password never appears in ``repr()`` or
    in the store's error messages.

    ``namespace`` (also ``?namespace=`` in the URL): stores of two namespaces under one
    prefix never see each other's States, listings, memory or gc. The default namespace
    keeps the keys statekeep used before namespaces; another lives under
    ``<prefix>ns:<name>:``. Keys of an older statekeep (layouts 1 and 2) are upgraded on
    first connect, even with ``create=False`` (see :mod:`statekeep.stores._redis._layout`).

    ``list()`` answers from indexes kept by the write script (by agent, parent, label,
    status and stop reason, and one in listing order), never reading every State's
    snapshot: a page walks the smallest index the filters name, from the cursor, and checks
    the other filters on each member it meets, in script calls of at most 2,000 members.
    So a page costs the members it passes over: ``updated_after``/``updated_before`` bound
    the walk, but ``finished=False`` and ``id_prefix`` are checked member by member (with
    no other filter, an ``id_prefix`` page walks the namespace's listing index until it has
    its rows, so a rare prefix costs a walk of every State of the namespace).

    Expiry is judged by the server's clock (``TIME``, in the scripts): an expired State is
    absent for every operation at once. ``retention``: a State whose snapshot has no
    ``expires_at`` of its own is stamped by the write script with the server's time plus
    ``retention``. Every key of a State carries its expiry as native Redis expiry
    (``PEXPIREAT``), set again by each write; :meth:`gc` removes what is left of expired
    States in the indexes (Lua, in batches; safe from several processes, and a State a
    write just extended stays).

    Leases (:meth:`acquire`) are judged by the server's clock too (``TIME`` in the lease
    scripts; the fence runs in the write and delete scripts themselves), so they hold
    across processes and hosts whatever their clocks say; a State's lease row
    (``lease:{id}``) has no TTL and outlives the State, so its token only grows.
    ``trim(id, before=seq)`` removes a compacted State's entries before ``seq`` for a base record
    (see :meth:`~statekeep._store.backend.Backend.trim`): this store cuts the State's list in one script (``LTRIM``, ``LSET``); Redis frees them at once.
    ``trim_compacted=True``: ``gc`` also trims every State up to its latest compaction.

    ``offload`` (default 32768): a value in an entry whose JSON encoding exceeds this many
    bytes is stored once, under a ``blob:`` key of the prefix (named by its SHA-256; by an
    HMAC under the keyring, per namespace, and sealed, when encrypted), and the entry refers
    to it; None keeps every value inline. See the docs' "Large values" page.

    ``redact``, ``encrypt`` and ``allow_plaintext``: see the docs' "Protection" page
    (:class:`~statekeep.Redactor`, :class:`~statekeep.Keyring`).

    ``telemetry`` (default True): each operation is recorded with OpenTelemetry (a span and
    metrics) when a tracer or meter provider is set; False records nothing. ``trace_ids=True``:
    the spans carry the State id. See the docs' "Telemetry" page.
    """

    _local_type = ClientLocal
    _close_conn = staticmethod(_client.close_client)

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        prefix: str = "statekeep:",
        client: Redis | None = None,
        create: bool = True,
        namespace: str = DEFAULT_NAMESPACE,
        retention: timedelta | float | None = None,
        trim_compacted: bool = False,
        redact: Redactor | None = None,
        encrypt: Keyring | None = None,
        allow_plaintext: bool = False,
        telemetry: bool = True,
        trace_ids: bool = False,
        offload: int | None = DEFAULT_OFFLOAD,
        wait_replicas: int | None = None,
        wait_timeout: float | None = None,
        failover_timeout: float | None = None,
    ) -> None:
        self._aioredis = servercommon.import_driver("redis")
        import redis.exceptions

        self._errors = redis.exceptions
        if not isinstance(url, str):
            raise TypeError(f"url must be a str, got {type(url).__name__}")
        redaction.check_userinfo(url)
        url, in_url = _client.take_options(url)
        if "namespace" in in_url:
            if namespace != DEFAULT_NAMESPACE and namespace != in_url["namespace"]:
                raise ValueError(
                    f"namespace {namespace!r} differs from the URL's namespace={in_url['namespace']!r}"
                )
            namespace = in_url["namespace"]
        if retention is None and "retention" in in_url:
            retention = our_values({"retention": in_url["retention"]})["retention"]
        self._cluster, self._wait, self._failover_timeout = _cluster.settings(
            url, in_url, client, wait_replicas, wait_timeout, failover_timeout
        )
        self._lifecycle(namespace, retention, trim_compacted=trim_compacted)
        self._protect(redact, encrypt, allow_plaintext)
        self._observe(telemetry, trace_ids)
        self._take_offload(offload)
        if type(prefix) is not str:
            raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
        try:
            self._prefix = prefix.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"prefix {prefix!r} is not valid UTF-8 (a lone surrogate)") from None
        self.prefix = prefix
        self._url = url
        self._user_client = client
        self._create = create
        if self._cluster and b"{" in self._prefix:
            raise ValueError(
                f"prefix {prefix!r}: on a Redis Cluster a prefix holds no '{{' (the store adds the hash tag)"
            )
        self._server = _client.server_key(url, client, self._cluster)
        self._keys_of = Keys.of(self._prefix, self.namespace, self._cluster)
        self._server_name = f"Redis at {_client.where(self._server)}"
        self._lost = _client.lost(self._aioredis, self._cluster)
        self._user_conn = client
        super().__init__()

    def __repr__(self) -> str:
        where = "client=<redis client>" if self._user_client is not None else repr(redact_url(self._url))
        space = "" if self.namespace == DEFAULT_NAMESPACE else f", namespace={self.namespace!r}"
        return f"RedisStore({where}, prefix={self.prefix!r}{space})"

    def _storage_key(self) -> Hashable:
        return ("redis", *self._server, self.prefix, self.namespace)

    def _sibling(self, namespace: str) -> RedisStore:
        """This store's namespace ``namespace``, on the same client (agent memory)."""
        other = copy.copy(self)
        other._join(self, namespace)
        other._keys_of = Keys.of(self._prefix, namespace, self._cluster)
        other._parent = self
        return other

    # -- expiry: the server's clock judges, in the scripts ------------------------------

    def _expired(self, snapshot: dict[str, Any] | None) -> bool:
        return False  # the scripts and _read leave expired States out by the server's clock

    def _stamp(self, snapshot: Snapshot) -> Snapshot:
        """With a ``retention``, mark a snapshot without an expiry for the write script to
        stamp with the server's time (the marker comes first, where the script finds it)."""
        if self.retention is None or snapshot is None or snapshot.get("expires_at") is not None:
            return snapshot
        rest = {k: v for k, v in snapshot.items() if k != "expires_at"}
        return {"expires_at": STAMP, **rest, "expiry": "retention"}

    def _retention_us(self) -> str:
        return "" if self.retention is None else str(self.retention // timedelta(microseconds=1))

    # -- the four operations, on the owner loop -------------------------------------

    async def _write_once(self, write: PreparedWrite, resent: bool, guarded: bool = False) -> bool:
        """Send ``write`` (``resent``: again, after a lost connection left an earlier
        attempt's outcome unknown: a refusal its own commit explains is a success). False
        only for a ``guarded`` resend its guard refused (the State is not where it was)."""
        sid = write.state_id
        approved: list[bytes] = []
        for _ in range(servercommon.MAX_COMPARES):
            reply = await self._send(
                write_args(self._keys_of, write, approved, self._retention_us(), self._blob_prefix)
            )
            status = int(reply[0])
            if status == servercommon.OK:
                return True
            if _leases.is_refusal(reply):
                _leases.refuse(self._keys_of, sid, reply, write.lease, servercommon.refused_write(resent))
            if status == WRONGTYPE:
                key, held, wanted = (_as_bytes(part).decode("utf-8", "replace") for part in reply[1:4])
                raise CorruptStateError(
                    f"{self!r}: the key {key!r} holds a {held}, where statekeep keeps a {wanted}; "
                    f"nothing of the write to State {sid!r} was saved. Is the prefix used by something else?"
                )
            next_seq = reply[1] if status in (servercommon.GAP, servercommon.UNEXPECTED) else None
            refused_again = resent and status in (servercommon.EXISTS, servercommon.UNEXPECTED)
            if refused_again and await servercommon.holds_write(self, write):
                if isinstance(reply, _cluster.ShortReply):  # applied, but too few replicas have it
                    raise reply.short
                return True  # the earlier attempt was applied: its own entries refused this one
            if guarded and status == servercommon.UNEXPECTED:
                return False
            servercommon.check_outcome(status, write, next_seq)
            stored = [_as_bytes(b) for b in reply[2]]
            # a real difference raises StateConflictError
            check_overlap(write, servercommon.decode_stored(stored, sid, "Redis"))
            approved = stored
        raise servercommon.kept_changing(sid)

    async def _read(self, state_id: str, since: int = 0) -> Record | None:
        where = _client.where(self._server)
        return await self._reading(
            "read", lambda local: _reads.read(local, self._keys_of, state_id, where, since)
        )

    async def _read_snapshot(self, state_id: str) -> dict[str, Any] | None:
        return await self._reading("read", lambda local: _reads.read_snapshot(local, self._keys_of, state_id))

    async def _state_ids(self) -> list[str] | None:
        return await self._reading("list", lambda local: _reads.state_ids(local, self._keys_of))

    async def _server_now(self) -> datetime:
        return await self._reading("read", _reads.server_now)

    async def _child_ids(self, state_id: str) -> list[str]:
        """Every member of the parent index of ``state_id``: expired children too, even
        those whose keys native expiry took (their index entries stay until gc)."""
        return await self._reading("list", lambda local: _listing.child_ids(local, self._keys_of, state_id))

    async def _count_expired(self) -> int:
        async with self._using("gc") as local:
            return await _listing.count_expired(local, self._keys_of)

    async def _list(self) -> tuple[list[SavedState], list[str]]:
        page, skipped = await self._select(ListQuery())
        return list(page), skipped

    async def _select(self, query: ListQuery) -> tuple[Page, list[str]]:
        return await self._reading("list", lambda local: _listing.select(local, self._keys_of, query))

    async def _gc(self, limit: int | None) -> int:
        async with self._using("gc") as local:
            return await _listing.gc(local, self._keys_of, limit)

    async def _delete(self, state_id: str, lease: Lease | None = None) -> None:
        keys = self._keys_of
        async with self._using("delete") as local:
            assert local.delete_script is not None
            reply = await local.delete_script(
                keys=[*keys.state_keys(state_id), *keys.common, keys.lease_key(state_id)],
                args=[state_id, *lease_args(lease)],
            )
        if _leases.is_refusal(reply):
            _leases.refuse(self._keys_of, state_id, reply, lease, "nothing was deleted")

    # -- blobs: shared by every namespace of the prefix (see ._blob_lua) -------------------
    # (on a Redis Cluster, each namespace's own, under its hash tag: see ._cluster)

    @property
    def _blob_prefix(self) -> bytes:
        return self._keys_of.base if self._cluster else self._prefix

    async def _get_blobs(self, names: Collection[str]) -> dict[str, bytes]:
        """The stored bytes of the blobs ``names`` under the prefix (any namespace's)."""
        if not names:
            return {}
        return await self._reading("read", lambda local: _blobs.get_blobs(local, self._blob_prefix, names))

    async def _reseal_blobs(self, work: dict[str, tuple[bytes, bytes]]) -> int:
        """For rekey: replace each blob NAME -> (old, new) still holding ``old``."""
        async with self._using("write") as local:
            return await _blobs.reseal_blobs(local, self._blob_prefix, work)

    async def _gc_blobs(self, dry_run: bool) -> tuple[int, int]:
        """Remove (``dry_run``: count) the blobs no State of any namespace refers to; (blobs, bytes)."""
        async with self._using("gc") as local:
            return await _blobs.gc_blobs(local, self._blob_prefix, dry_run)

    async def _blob_usage(self) -> tuple[int, int]:
        """(blobs, bytes) stored under the prefix, every namespace counted."""
        async with self._using("stats") as local:
            return await _blobs.usage(local, self._blob_prefix)

    # -- leases: one script each, judged by the server's clock (see ._lease_lua) ----------

    async def _acquire(self, state_id: str, owner: str, ttl: timedelta) -> Lease:
        async with self._using("acquire") as local:
            return await _leases.acquire(local, self._keys_of, state_id, owner, ttl)

    async def _renew(self, lease: Lease, ttl: timedelta) -> Lease:
        async with self._using("renew") as local:
            return await _leases.renew(local, self._keys_of, lease, ttl)

    async def _release(self, lease: Lease) -> None:
        async with self._using("release") as local:
            await _leases.release(local, self._keys_of, lease)

    async def _current_lease(self, state_id: str) -> Lease | None:
        return await self._reading("read", lambda local: _leases.current(local, self._keys_of, state_id))

    async def _reseal(
        self, state_id: str, entries: dict[int, tuple[bytes, bytes]], snapshot: tuple[bytes, bytes] | None
    ) -> int:
        async with self._using("rekey") as local:
            return await _leases.reseal(local, self._keys_of, state_id, entries, snapshot)

    async def _trim(self, state_id: str, before: int, base: bytes, first: int) -> None:
        # One script: LTRIM, LSET of the base, the State's 'first' field (see _trim_lua).
        keys = list(self._keys_of.state_keys(state_id))
        base_line = base[:-1] if base.endswith(b"\n") else base
        async with self._using("write") as local:
            args = (str(before), base_line, self._blob_prefix, str(first))
            reply = await local.client.eval(TRIM, len(keys), *keys, *args)
        status = int(reply[0])
        if status == servercommon.MISSING:
            raise missing_error(state_id)
        if status == servercommon.COMPARE:
            raise trimmed_meanwhile(state_id, first, int(reply[1]))
        if status != servercommon.OK:
            first, nxt = int(reply[1]), int(reply[2])
            raise ValueError(f"State {state_id!r} holds seqs {first} to {nxt - 1}; nothing was trimmed")

    async def _afork_write(
        self, source_id: str, entries: list[dict[str, Any]], snapshot: dict[str, Any], new_id: str,
        incarnation: str | None,
    ) -> None:  # fmt: skip
        """One script copies the source's entries on the server (checking they are still
        the ones read: a SHA-1 of them) and creates the fork with its snapshot."""
        stored = [orjson.loads(line) for line in self._stored_lines(source_id, entries)]
        write = prepare_write(new_id, [], self._stamp(snapshot), True, incarnation)
        self._check_open(None)
        keys, args = fork_args(
            self._keys_of, source_id, stored, write, self._retention_us(), self._blob_prefix
        )
        reply = await run_async(self._fork(keys, args, new_id))
        if _leases.is_refusal(reply):
            _leases.refuse(self._keys_of, new_id, reply, None, "nothing was forked")
        status = int(reply[0])
        if status == servercommon.EXISTS:
            raise exists_error(new_id)
        if status == servercommon.MISSING:  # gone, replaced, or stored otherwise (another bound,
            if not await self._fork_source_unchanged(source_id, entries):  # an inline base)
                raise missing_error(source_id)
            await write_fork(self, entries, snapshot, new_id, incarnation)  # the entries as read

    async def _fork(self, keys: list[bytes], args: list[Any], new_id: str) -> Any:
        async with owner().lock((self._storage_key(), new_id)), self._using("fork") as local:
            assert local.fork_script is not None
            return await local.fork_script(keys=keys, args=args)

    # -- writes: one at a time, or pipelined ----------------------------------------

    async def _send(self, args: ScriptCall) -> Any:
        """Run the write script with ``args`` (its 7 keys, then its arguments); return its reply.

        Writes that wait at the same moment, to different States of this store, go to the
        server together in one pipeline (one round trip; the server fsyncs its log once for
        all it got in one go). Each is still its own atomic script with its own outcome.
        """
        return await self._queued(args)

    async def _send_batch(self, local: ClientLocal, batch: list[Queued[ScriptCall, Any]]) -> None:
        try:
            async with self._talking("write"):
                calls = [args for args, _ in batch]
                replies = await _client.run_scripts(
                    local, calls, self._errors.NoScriptError, self._wait, self._cluster
                )
        except Exception as exc:  # the connection: every outcome is unknown
            for _, future in batch:
                if not future.done():
                    future.set_exception(_copy(exc))
            return
        for (_, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    # -- the client -----------------------------------------------------------------

    _parent: RedisStore | None = None

    async def _local(self) -> ClientLocal:
        if self._parent is not None:  # a sibling namespace: the parent's client and queue
            self._parent._check_open(None)
            return await self._parent._local()
        return await super()._local()

    async def _close(self) -> None:
        if self._parent is None:  # a sibling leaves the parent's client alone
            await super()._close()

    def _refusal(self, exc: BaseException) -> str | None:
        return _client.refusal(self._errors, exc, self._server[2])

    async def _open(self, local: ClientLocal) -> Redis:
        if self._user_client is not None:
            client = self._user_client
        elif self._cluster:
            # The commands the store sends have the same names on both clients; writes go per
            # node (._cluster.run_scripts), reads whose TIME a cluster cannot pipeline by script.
            client = cast("Redis", _cluster.make_cluster_client(self._url))
        else:
            client = _client.make_client(self._aioredis, self._url)
        await self._checked_open(local, client, self._check_server)
        local.register(client)
        return client

    async def _check_server(self, client: Redis) -> None:
        await check_server(
            client,
            store=repr(self),
            prefix=self.prefix,
            index=Keys.of(self._prefix, DEFAULT_NAMESPACE, self._cluster).common[0],
            create=self._create,
            retention=self.retention is not None,
            server=self._server,
            where=_client.where(self._server),
            scrub=self._scrub,
        )


def _copy(exc: Exception) -> Exception:
    """A fresh exception like ``exc``, so that each waiting caller raises its own."""
    try:
        return type(exc)(*exc.args)
    except Exception:
        return exc


def _as_bytes(value: object) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()

"""RedisStore: the class, and each operation on the owner loop (its scripts: :mod:`._lua`;
its client: :mod:`._client`; the package docstring tells how States are kept)."""

from __future__ import annotations

import math
from collections.abc import Hashable
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import orjson

from ... import _redaction as redaction
from ..._errors import CorruptStateError
from ..._records import Record, SavedState, decode_snapshot, listing_order
from ..._writes import PreparedWrite, check_overlap
from .. import _server as servercommon
from .._server import Queued, ServerStore
from . import _client
from ._client import ClientLocal, ScriptCall
from ._layout import check_server
from ._lua import WRONGTYPE

if TYPE_CHECKING:
    from redis.asyncio import Redis


def redact_url(url: str) -> str:
    """``url`` with its user information and every password replaced by ``***`` (see
    :mod:`statekeep._redaction`)."""
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
    cannot tell. It also warns when the server's ``maxmemory-policy`` may evict
    statekeep's keys (``allkeys-*``, or ``volatile-*`` when they have a TTL). Replicas are
    asynchronous, and Redis 7.0 has no ``WAITAOF``, so the store
    cannot confirm an fsync itself. A connection lost during a write raises
    ConnectionError with the outcome unknown: sending the same write again is safe, since
    entries the store already has are skipped when equal. (A ``create=True`` write sent
    again after an unknown outcome may find its own State and raise "already exists":
    read it to see.)

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
    another, and end them with ``:``). Needs a single Redis server or a primary with
    replicas; Redis Cluster is not supported. The password never appears in ``repr()`` or
    in the store's error messages.
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
    ) -> None:
        self._aioredis = servercommon.import_driver("redis")
        import redis.exceptions

        self._errors = redis.exceptions
        if not isinstance(url, str):
            raise TypeError(f"url must be a str, got {type(url).__name__}")
        redaction.check_userinfo(url)
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
        self._server = _client.server_key(url, client)
        self._secrets = redaction.url_secrets(url)
        self._index = self._prefix + b"index"
        self._server_name = f"Redis at {_client.where(self._server)}"
        self._lost = _client.lost(self._aioredis)
        self._user_conn = client
        super().__init__()

    def __repr__(self) -> str:
        where = "client=<redis client>" if self._user_client is not None else repr(redact_url(self._url))
        return f"RedisStore({where}, prefix={self.prefix!r})"

    def _storage_key(self) -> Hashable:
        return ("redis", *self._server, self.prefix)

    def _keys(self, state_id: str) -> tuple[bytes, bytes, bytes]:
        sid = state_id.encode()
        return self._prefix + b"state:" + sid, self._prefix + b"entries:" + sid, self._index

    # -- the four operations, on the owner loop -------------------------------------

    async def _write(self, write: PreparedWrite) -> None:
        sid = write.state_id
        lines = [line[:-1] for line in write.lines]
        n = len(lines)
        head = [
            sid,
            "1" if write.create else "0",
            str(write.first_seq),
            str(n),
            "0" if write.snapshot is None else "1",
            b"" if write.snapshot is None else write.snapshot,
            _listing_score(write.snapshot),
        ]
        approved: list[bytes] = []
        for _ in range(servercommon.MAX_COMPARES):
            reply = await self._send((*self._keys(sid), *head, str(len(approved)), *lines, *approved))
            status = int(reply[0])
            if status == servercommon.OK:
                return
            if status == WRONGTYPE:
                key, found, wanted = (_as_bytes(part).decode("utf-8", "replace") for part in reply[1:4])
                raise CorruptStateError(
                    f"{self!r}: the key {key!r} holds a {found}, where statekeep keeps a {wanted}; "
                    f"nothing of the write to State {sid!r} was saved. Is the prefix used by something else?"
                )
            servercommon.check_outcome(status, write, reply[1] if status == servercommon.GAP else None)
            stored = [_as_bytes(b) for b in reply[2]]
            # a real difference raises StateConflictError
            check_overlap(write, servercommon.decode_stored(stored, sid, "Redis"))
            approved = stored
        raise servercommon.kept_changing(sid)

    async def _read(self, state_id: str) -> Record | None:
        state_key, entries_key, _ = self._keys(state_id)
        async with self._using("read") as local, local.client.pipeline(transaction=True) as pipe:
            pipe.hmget(state_key, "next", "snapshot")
            pipe.lrange(entries_key, 0, -1)
            (next_seq, snapshot_bytes), items = await pipe.execute()
        if next_seq is None:
            return None
        where = f"State {state_id!r} in Redis at {_client.where(self._server)}"
        if len(items) != int(next_seq):
            raise CorruptStateError(f"{where} expects {int(next_seq)} entries but holds {len(items)}")
        entries = _decode_entries(items, where)
        return Record(
            entries, decode_snapshot(snapshot_bytes, f"the snapshot of State {state_id!r} in Redis")
        )

    async def _list(self) -> tuple[list[SavedState], list[str]]:
        async with self._using("list") as local:
            assert local.list_script is not None
            reply = await local.list_script(keys=[self._index], args=[self._prefix + b"state:"])
        rows: list[SavedState] = []
        skipped: list[str] = []
        for i in range(0, len(reply), 2):
            snapshot = reply[i + 1]
            if snapshot is not None:  # else deleted meanwhile, or not ours
                sid = _as_bytes(reply[i]).decode("utf-8", "replace")
                servercommon.add_listed(sid, snapshot, rows, skipped)
        return listing_order(rows), skipped

    async def _delete(self, state_id: str) -> None:
        state_key, entries_key, index = self._keys(state_id)
        async with self._using("delete") as local, local.client.pipeline(transaction=True) as pipe:
            pipe.delete(state_key, entries_key)
            pipe.zrem(index, state_id)
            await pipe.execute()

    # -- writes: one at a time, or pipelined ----------------------------------------

    async def _send(self, args: ScriptCall) -> Any:
        """Run the write script with ``args`` (its 3 keys, then its arguments); return its reply.

        Writes that wait at the same moment, to different States of this store, go to the
        server together in one pipeline (one round trip; the server fsyncs its log once for
        all it got in one go). Each is still its own atomic script with its own outcome.
        """
        return await self._queued(args)

    async def _send_batch(self, local: ClientLocal, batch: list[Queued[ScriptCall, Any]]) -> None:
        try:
            async with self._talking("write"):
                calls = [args for args, _ in batch]
                replies = await _client.run_scripts(local, calls, self._errors.NoScriptError)
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

    async def _open(self, local: ClientLocal) -> Redis:
        if self._user_client is not None:
            client = self._user_client
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
            index=self._index,
            create=self._create,
            server=self._server,
            where=_client.where(self._server),
            scrub=self._scrub,
        )


def _listing_score(snapshot: bytes | None) -> str:
    """The index score: the snapshot's updated_at as epoch seconds, or -inf if it has none."""
    if snapshot is None:
        return "-inf"
    try:
        value = orjson.loads(snapshot).get("updated_at")
        when = datetime.fromisoformat(value)
        if when.tzinfo is None:
            return "-inf"
        score = when.timestamp()
    except Exception:
        return "-inf"
    return repr(score) if math.isfinite(score) else "-inf"


def _copy(exc: Exception) -> Exception:
    """A fresh exception like ``exc``, so that each waiting caller raises its own."""
    try:
        return type(exc)(*exc.args)
    except Exception:
        return exc


def _as_bytes(value: object) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _decode_entries(items: list[bytes], where: str) -> list[dict[str, Any]]:
    """The entries (JSON objects, by seq), or CorruptStateError naming the first bad one."""
    if not items:
        return []
    try:
        joined = b",".join(items)
    except TypeError:  # a client that decodes responses gives str
        joined = b",".join(_as_bytes(i) for i in items)
    try:
        entries = orjson.loads(b"[" + joined + b"]")
    except orjson.JSONDecodeError:
        entries = None
    if entries is None or len(entries) != len(items) or not all(isinstance(e, dict) for e in entries):
        servercommon.raise_bad_entry(items, lambda seq: f"{where}: the entry at seq {seq}")
    return cast(list[dict[str, Any]], entries)

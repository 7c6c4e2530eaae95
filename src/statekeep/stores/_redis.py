"""RedisStore: every State under a key prefix in Redis, through redis-py's asyncio client.

Keys, for a prefix ``P`` (default ``statekeep:``)::

    P state:{id}     hash: next (the seq expected next), snapshot (JSON, when there is one)
    P entries:{id}   list: the entries as JSON, index = seq
    P index          sorted set: ids of States with a snapshot, scored by its updated_at
    P layout         the key layout's version; a newer one is refused

Every write is one server-side Lua script, so it is atomic and serialised with every
other write to the State, from any process or host: it checks the seq rules, appends the
new entries, replaces the snapshot and updates the index, or changes nothing.

Skipping entries the store already has: the script compares each overlapping stored
entry with the sent one byte for byte. statekeep's encoder gives the same bytes for the
same dict, so a resent write normally matches there. When the bytes differ (equal dicts
whose keys are in another order), the script writes nothing and returns the stored
entries; statekeep decodes and compares them in Python with the rule every store uses
(a real difference is a StateConflictError) and sends the write again with the stored
bytes it found equal, which the script accepts only if the State still holds exactly
those bytes.
No JSON is decoded in Lua, and each compare happens in the same script as the append.

Writes that wait at the same moment in one process, to different States, go to the
server in one pipeline (one round trip; the server fsyncs its log once for the lot).

No command matches keys by pattern (no ``SCAN``, no ``KEYS``): ``list()`` reads the index,
``delete()`` names the State's keys. So glob characters in a prefix (``*?[]``) are plain
characters, and a store never sees another prefix's States.
"""

from __future__ import annotations

import asyncio
import math
import warnings
from collections.abc import Hashable
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from .. import _redaction as redaction
from .._bridge import _Owner
from .._errors import CorruptStateError, NotAStoreError
from .._records import Record, SavedState, decode_snapshot, left_out, listing_order
from .._writes import PreparedWrite, check_overlap
from . import _server as servercommon
from ._server import ServerLocal, ServerStore, Talking

#: The key layout this statekeep writes; a prefix holding a newer one is refused.
LAYOUT_VERSION = 1

# Outcomes of the write script.
_OK, _MISSING, _EXISTS, _GAP, _COMPARE = servercommon.OUTCOMES
# The script's own outcome: a key of the wrong type, nothing written.
_WRONGTYPE = 5
# ARGV slots before the entries.
_HEAD = 8

_WRITE_LUA = f"""
-- KEYS: state hash, entries list, index
-- ARGV: id, create, first seq, n entries, has snapshot, snapshot, index score,
--       n approved, then the n entries, then the approved stored entries
local id = ARGV[1]
local create = ARGV[2] == '1'
local first = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local has_snapshot = ARGV[5] == '1'
local napproved = tonumber(ARGV[8])
local base = {_HEAD}

-- Every key's type before the first write: a key of another type (the prefix shared with
-- something else) would fail half-way through, after some writes were made.
local want = {{'hash', 'list', 'zset'}}
for i = 1, 3 do
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= want[i] then return {{{_WRONGTYPE}, KEYS[i], t, want[i]}} end
end

local function push(from, to)
  local i = from
  while i <= to do
    local j = math.min(i + 999, to)
    redis.call('RPUSH', KEYS[2], unpack(ARGV, i, j))
    i = j + 1
  end
end

local function set_snapshot()
  if has_snapshot then
    redis.call('HSET', KEYS[1], 'snapshot', ARGV[6])
    redis.call('ZADD', KEYS[3], ARGV[7], id)
  end
end

if create then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {{{_EXISTS}}} end
  redis.call('DEL', KEYS[2])
  push(base + 1, base + n)
  redis.call('HSET', KEYS[1], 'next', string.format('%d', n))
  set_snapshot()
  return {{{_OK}, n}}
end
local nxt = redis.call('HGET', KEYS[1], 'next')
if not nxt then return {{{_MISSING}}} end
nxt = tonumber(nxt)
local skip = 0
if n > 0 then
  if first > nxt then return {{{_GAP}, nxt}} end
  skip = math.min(nxt - first, n)
end
if skip > 0 then
  local stored = redis.call('LRANGE', KEYS[2], first, first + skip - 1)
  local same = #stored == skip
  if same then
    for i = 1, skip do
      if stored[i] ~= ARGV[base + i] then same = false; break end
    end
  end
  if not same and napproved == skip and #stored == skip then
    same = true
    for i = 1, skip do
      if stored[i] ~= ARGV[base + n + i] then same = false; break end
    end
  end
  if not same then return {{{_COMPARE}, nxt, stored}} end
end
if skip < n then
  push(base + skip + 1, base + n)
  redis.call('HSET', KEYS[1], 'next', string.format('%d', first + n))
end
set_snapshot()
return {{{_OK}, math.max(nxt, first + n)}}
"""

# The listing in one call: [id, snapshot, id, snapshot, ...], newest first. It reads the
# State hashes by name, which a single server (not Redis Cluster) allows.
_LIST_LUA = """
local ids = redis.call('ZREVRANGE', KEYS[1], 0, -1)
local out = {}
for _, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', ARGV[1] .. id, 'snapshot') or false
end
return out
"""

# Servers already checked for durability settings, so that each is warned about once.
_checked: set[Hashable] = set()


def _import_redis() -> Any:
    # 6.0 checks the server's host name on rediss:// by default; 6.2 fixed its TLS options.
    return servercommon.import_driver(
        "redis.asyncio", "RedisStore", "the redis package", "redis", ("redis", (6, 2))
    )


def redact_url(url: str) -> str:
    """``url`` with its user information and every password replaced by ``***`` (see
    :mod:`statekeep._redaction`)."""
    return redaction.redact_url(url)


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


class RedisStore(ServerStore):
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
    is refused with NotAStoreError.

    All keys start with ``prefix``; stores with different prefixes share a database
    without seeing each other's States (keep prefixes from being prefixes of one
    another, and end them with ``:``). Needs a single Redis server or a primary with
    replicas; Redis Cluster is not supported. The password never appears in ``repr()`` or
    in the store's error messages.
    """

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        prefix: str = "statekeep:",
        client: Any = None,
        create: bool = True,
    ) -> None:
        self._aioredis = _import_redis()
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
        self._server = self._server_key(url, client)
        self._secrets = redaction.url_secrets(url)
        self._index = self._prefix + b"index"
        # The client of this process; replaced when owner() changes (after a fork).
        self._state: _Local | None = None

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
            if status == _OK:
                return
            if status == _WRONGTYPE:
                key, found, wanted = (_as_bytes(part).decode("utf-8", "replace") for part in reply[1:4])
                raise CorruptStateError(
                    f"{self!r}: the key {key!r} holds a {found}, where statekeep keeps a {wanted}; "
                    f"nothing of the write to State {sid!r} was saved. Is the prefix used by something else?"
                )
            servercommon.check_outcome(status, write, reply[1] if status == _GAP else None)
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
        where = f"State {state_id!r} in Redis at {self._where()}"
        if len(items) != int(next_seq):
            raise CorruptStateError(f"{where} expects {int(next_seq)} entries but holds {len(items)}")
        entries = _decode_entries(items, where)
        return Record(
            entries, decode_snapshot(snapshot_bytes, f"the snapshot of State {state_id!r} in Redis")
        )

    async def _list(self) -> tuple[list[SavedState], list[str]]:
        async with self._using("list") as local:
            reply = await local.list_script(keys=[self._index], args=[self._prefix + b"state:"])
        rows: list[SavedState] = []
        skipped: list[str] = []
        for i in range(0, len(reply), 2):
            sid = _as_bytes(reply[i]).decode("utf-8", "replace")
            snapshot = reply[i + 1]
            if snapshot is None:
                continue  # deleted meanwhile, or not ours
            try:
                rows.append(SavedState.from_snapshot(sid, orjson.loads(snapshot)))
            except ValueError as exc:
                skipped.append(left_out(sid, exc))
        return listing_order(rows), skipped

    async def _delete(self, state_id: str) -> None:
        state_key, entries_key, index = self._keys(state_id)
        async with self._using("delete") as local, local.client.pipeline(transaction=True) as pipe:
            pipe.delete(state_key, entries_key)
            pipe.zrem(index, state_id)
            await pipe.execute()

    # -- writes: one at a time, or pipelined ----------------------------------------

    async def _send(self, args: tuple[Any, ...]) -> Any:
        """Run the write script with ``args`` (its 3 keys, then its arguments); return its reply.

        Writes that wait at the same moment, to different States of this store, go to the
        server together in one pipeline (one round trip; the server fsyncs its log once for
        all it got in one go). Each is still its own atomic script with its own outcome.
        """
        return await self._queued(args)

    async def _send_batch(
        self, local: _Local, batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]]
    ) -> None:
        try:
            async with self._talking("write"):
                replies = await self._run_scripts(local, [args for args, _ in batch])
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

    async def _run_scripts(self, local: _Local, calls: list[tuple[Any, ...]]) -> list[Any]:
        """EVALSHA the write script once per call, pipelined. Errors of single calls come
        back in their place. Calls the server refused with NOSCRIPT (it lost its scripts
        in a restart) did not run: load the script and send those again."""
        replies = await self._evalsha(local, calls)
        lost = [i for i, reply in enumerate(replies) if isinstance(reply, self._errors.NoScriptError)]
        if lost:
            await local.client.script_load(_WRITE_LUA)
            for i, reply in zip(lost, await self._evalsha(local, [calls[i] for i in lost]), strict=True):
                replies[i] = reply
        return replies

    async def _evalsha(self, local: _Local, calls: list[tuple[Any, ...]]) -> list[Any]:
        async with local.client.pipeline(transaction=False) as pipe:
            for call in calls:
                pipe.evalsha(local.write_script.sha, 3, *call)
            return list(await pipe.execute(raise_on_error=False))

    # -- the client -----------------------------------------------------------------

    def _new_local(self, own: _Owner) -> _Local:
        return _Local(own)

    def _user_conn(self) -> Any:
        return self._user_client

    @staticmethod
    async def _close_conn(conn: Any) -> None:
        await _close_client(conn)

    async def _open(self, local: _Local) -> Any:
        if self._user_client is not None:
            client = self._user_client
        else:
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            client = self._aioredis.Redis.from_url(self._url, retry=Retry(NoBackoff(), 0))
        await self._checked_open(local, client, self._check_server)
        local.write_script = client.register_script(_WRITE_LUA)
        local.list_script = client.register_script(_LIST_LUA)
        return client

    async def _check_server(self, client: Any) -> None:
        """Check the key layout's version, and warn once per server about weak durability."""
        layout = self._prefix + b"layout"
        async with client.pipeline(transaction=False) as pipe:
            if self._create:
                pipe.set(layout, str(LAYOUT_VERSION), nx=True)
            pipe.get(layout)
            pipe.pttl(layout)
            pipe.pttl(self._index)
            for name in ("appendonly", "appendfsync", "maxmemory-policy"):
                pipe.config_get(name)
            replies = await pipe.execute(raise_on_error=False)
        version, *ttls, appendonly, appendfsync, policy = replies[-6:]
        if isinstance(version, Exception):
            raise version
        if version is None and not self._create:
            raise NotAStoreError(
                f"{self!r}: no statekeep keys under prefix {self.prefix!r} (the key "
                f"{layout.decode(errors='replace')!r} is missing); nothing was changed. Pass the "
                "URL and prefix statekeep saved to"
            )
        try:
            found = None if version is None else int(version)
        except ValueError:
            found = -1
        # None: no layout key, and a read-only server (a replica) would not take one.
        if found is not None and found != LAYOUT_VERSION:
            if found > LAYOUT_VERSION:
                raise RuntimeError(
                    f"{self!r}: the keys under prefix {self.prefix!r} are in statekeep's Redis layout "
                    f"version {found}, made by a newer statekeep; this one understands version "
                    f"{LAYOUT_VERSION} and leaves them alone. Upgrade statekeep: pip install -U 'statekeep[redis]'"
                )
            raise CorruptStateError(
                f"{self!r}: the key {layout.decode(errors='replace')!r} holds {version!r}, "
                "not a statekeep layout version; is the prefix used by something else?"
            )
        if self._server in _checked:
            return
        _checked.add(self._server)
        where = self._where()
        if isinstance(appendonly, Exception) or isinstance(appendfsync, Exception):
            error = appendonly if isinstance(appendonly, Exception) else appendfsync
            warnings.warn(
                f"statekeep: could not check the durability settings of Redis at {where} "
                f"(CONFIG GET was refused: {self._scrub(str(error))}); writes are durable only if the "
                "server runs with 'appendonly yes' and 'appendfsync always'",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        evicts = _config_value(policy, "maxmemory-policy")
        with_ttl = any(isinstance(ttl, int) and ttl >= 0 for ttl in ttls)
        if evicts.startswith("volatile-") and not with_ttl:
            with_ttl = await self._states_have_ttl(client)
        if evicts.startswith("allkeys-") or (evicts.startswith("volatile-") and with_ttl):
            warnings.warn(
                f"statekeep: Redis at {where} may evict statekeep's keys when it runs out of memory "
                f"(maxmemory-policy {evicts}{', and they have a TTL' if with_ttl else ''}): saved States "
                "can disappear. Use 'maxmemory-policy noeviction' (redis.conf, or CONFIG SET)",
                RuntimeWarning,
                stacklevel=2,
            )
        aof = _config_value(appendonly, "appendonly")
        fsync = _config_value(appendfsync, "appendfsync")
        if aof != "yes" or fsync != "always":
            warnings.warn(
                f"statekeep: Redis at {where} is not set up for durable writes (appendonly={aof}, "
                f"appendfsync={fsync}): a write that returned can be lost if the server crashes. "
                "Set 'appendonly yes' and 'appendfsync always' (redis.conf, or CONFIG SET)",
                RuntimeWarning,
                stacklevel=2,
            )

    async def _states_have_ttl(self, client: Any, sample: int = 5) -> bool:
        """Do the keys of the most recently updated States (a few) have a TTL, so that a
        ``volatile-*`` eviction policy may drop them? (A sample: statekeep never scans keys.)"""
        ids = await client.zrevrange(self._index, 0, sample - 1)
        if not ids:
            return False
        async with client.pipeline(transaction=False) as pipe:
            for sid in ids:
                for key in self._keys(sid.decode() if isinstance(sid, bytes) else sid)[:2]:
                    pipe.pttl(key)
            ttls = await pipe.execute(raise_on_error=False)
        return any(isinstance(ttl, int) and ttl >= 0 for ttl in ttls)

    # -- plumbing -------------------------------------------------------------------

    @staticmethod
    def _server_key(url: str, client: Any) -> tuple[Any, ...]:
        if client is not None:
            kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
            return (kwargs.get("path") or kwargs.get("host"), kwargs.get("port"), kwargs.get("db", 0))
        parts = urlsplit(redaction.split_userinfo(url)[1])  # a password may hold '/', '?', '#'
        query = parse_qs(parts.query)
        if parts.scheme == "unix":
            return (parts.path, None, int(query.get("db", ["0"])[0] or 0))
        db = parts.path.lstrip("/") or query.get("db", ["0"])[0] or "0"
        try:
            port = parts.port or 6379
        except ValueError:
            port = None
        return ((parts.hostname or "localhost"), port, int(db) if db.isdigit() else db)

    def _scrub(self, text: str) -> str:
        return redaction.scrub(text, self._secrets)

    def _where(self) -> str:
        host, port, db = self._server
        return f"{host}:{port}/{db}" if port is not None else f"{host} (db {db})"

    def _talking(self, action: str) -> _Talking:
        return _Talking(self, action)


class _Local(ServerLocal):
    """The client, its scripts and the write queue of a RedisStore on one owner loop."""

    def __init__(self, own: _Owner) -> None:
        super().__init__(own)
        self.write_script: Any = None
        self.list_script: Any = None

    @property
    def client(self) -> Any:
        """The redis-py client (None until opened)."""
        return self.conn


class _Talking(Talking):
    """Errors of Redis: redis-py's connection and timeout errors, the URL's password scrubbed."""

    store: RedisStore

    def server(self) -> str:
        return f"Redis at {self.store._where()}"

    def scrub(self, text: str) -> str:
        return self.store._scrub(text)

    def lost(self) -> tuple[type[BaseException], ...]:
        aioredis = self.store._aioredis
        return (OSError, aioredis.ConnectionError, aioredis.TimeoutError)


def _copy(exc: Exception) -> Exception:
    """A fresh exception like ``exc``, so that each waiting caller raises its own."""
    try:
        return type(exc)(*exc.args)
    except Exception:
        return exc


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _config_value(reply: Any, name: str) -> str:
    if isinstance(reply, dict):
        for key, value in reply.items():
            key_text = key.decode() if isinstance(key, bytes) else str(key)
            if key_text == name:
                return value.decode() if isinstance(value, bytes) else str(value)
    return "unknown"


def _decode_entries(items: list[Any], where: str) -> list[dict[str, Any]]:
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
        for seq, item in enumerate(items):
            try:
                value = orjson.loads(item)
            except orjson.JSONDecodeError as exc:
                raise CorruptStateError(f"{where}: the entry at seq {seq} is not valid JSON: {exc}") from None
            if not isinstance(value, dict):
                raise CorruptStateError(f"{where}: the entry at seq {seq} is not a JSON object")
    return entries  # type: ignore[return-value]


async def _close_client(client: Any) -> None:
    close = getattr(client, "aclose", None) or client.close  # aclose() since redis-py 5.0.1
    try:
        await asyncio.wait_for(close(), 5.0)
    except Exception:
        pass


__all__ = ["LAYOUT_VERSION", "RedisStore", "redact_url"]

"""RedisStore's reads, each judged by the server's clock (``TIME``, in the same
transaction): a State whole, its snapshot alone (what agent memory reads), and the time."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import orjson

from ..._core.errors import CorruptStateError
from ..._core.records import Record, decode_snapshot
from .. import _server as servercommon
from ._client import ClientLocal
from ._keys import Keys


async def read(local: ClientLocal, keys: Keys, state_id: str, server: str, since: int = 0) -> Record | None:
    """State ``state_id``'s entries of seq >= ``since`` and snapshot; None if absent or
    expired (``server`` names where it is in errors). LRANGE walks from the list's nearer
    end, so reading the end of a long history costs what it returns. A trimmed State's list
    starts at its base (seq ``first``): read again from the index that seq has, once known."""
    off = 0
    for _ in range(10):
        state_key, entries_key = keys.state_keys(state_id)
        fields = ("next", "snapshot", "exp", "inc", "first")
        if is_cluster(local):
            row, (secs, micros), size, items = await with_time(
                local, state_key, fields, entries_key, since - off
            )
            next_seq, snapshot, exp, inc, first = row
        else:
            async with local.client.pipeline(transaction=True) as pipe:
                pipe.hmget(state_key, *fields)
                pipe.llen(entries_key)
                pipe.lrange(entries_key, max(since - off, 0), -1)
                pipe.time()
                (next_seq, snapshot, exp, inc, first), size, items, (secs, micros) = await pipe.execute()
        if next_seq is None or (exp is not None and int(exp) <= secs * 1_000_000 + micros):
            return None  # none, or expired by the server's clock
        held = 0 if first is None else int(first)
        if held == off:
            break
        off = held  # trimmed (or trimmed further) since: read again from where its list starts
    else:
        raise CorruptStateError(f"State {state_id!r} in Redis at {server} kept being trimmed while read")
    where = f"State {state_id!r} in Redis at {server}"
    if size != int(next_seq) - off:
        raise CorruptStateError(f"{where} expects {int(next_seq) - off} entries but holds {size}")
    return Record(
        _decode_entries(items, where, max(since, off)),
        decode_snapshot(snapshot, f"the snapshot of State {state_id!r} in Redis"),
        None if inc is None else _as_bytes(inc).decode(),
    )


async def read_snapshot(local: ClientLocal, keys: Keys, state_id: str) -> dict[str, Any] | None:
    """The snapshot of ``state_id`` (fields of its hash only, never its entries); None if
    the State is absent or expired."""
    if is_cluster(local):
        (next_seq, snapshot, exp), (secs, micros) = await with_time(
            local, keys.state_keys(state_id)[0], ("next", "snapshot", "exp")
        )
    else:
        async with local.client.pipeline(transaction=True) as pipe:
            pipe.hmget(keys.state_keys(state_id)[0], "next", "snapshot", "exp")
            pipe.time()
            (next_seq, snapshot, exp), (secs, micros) = await pipe.execute()
    if next_seq is None or (exp is not None and int(exp) <= secs * 1_000_000 + micros):
        return None
    return decode_snapshot(snapshot, f"the snapshot of State {state_id!r} in Redis")


async def state_ids(local: ClientLocal, keys: Keys) -> list[str]:
    """Every State's id (its ``state:`` hash: those without a snapshot too), in id order,
    by SCAN (never KEYS, which blocks the server)."""
    prefix = keys.state
    pattern = re.sub(rb"([*?\[\]\\])", rb"\\\1", prefix) + b"*"
    ids = {key[len(prefix) :].decode() async for key in local.client.scan_iter(match=pattern, count=1000)}
    return sorted(ids)


async def server_now(local: ClientLocal) -> datetime:
    """The server's TIME, the clock the scripts judge expiry by."""
    secs, micros = await local.client.time()
    return datetime.fromtimestamp(secs, UTC) + timedelta(microseconds=micros)


#: On a Redis Cluster, a hash's fields and the server's TIME (and a list's length and items
#: from ARGV[1], when given) in one script: TIME names no key, so it cannot go in a
#: transaction there. KEYS: the hash (, the list); ARGV: the list's start or '', the fields.
_WITH_TIME = """
local h = redis.call('HMGET', KEYS[1], unpack(ARGV, 2))
local t = redis.call('TIME')
if ARGV[1] == '' then return {h, t} end
return {h, t, redis.call('LLEN', KEYS[2]), redis.call('LRANGE', KEYS[2], ARGV[1], -1)}
"""


def is_cluster(local: ClientLocal) -> bool:
    """Whether the client is a Redis Cluster's."""
    return hasattr(local.client, "get_nodes")


async def with_time(
    local: ClientLocal, key: bytes, fields: tuple[str, ...], entries: bytes | None = None, start: int = 0
) -> list[Any]:
    """[the fields of hash ``key`` (None where absent), (seconds, microseconds)] and, with
    ``entries``, that list's length and items from ``start``: one script, one node."""
    keys = [key] if entries is None else [key, entries]
    reply = await local.client.eval(
        _WITH_TIME, len(keys), *keys, "" if entries is None else max(start, 0), *fields
    )
    row = [None if v is None or v is False else v for v in reply[0]]
    row += [None] * (len(fields) - len(row))
    return [row, (int(reply[1][0]), int(reply[1][1])), *reply[2:]]


def _as_bytes(value: object) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _decode_entries(items: list[bytes], where: str, first: int = 0) -> list[dict[str, Any]]:
    """The entries (JSON objects, by seq), or CorruptStateError naming the first bad one.
    One by one: faster than joining them into one JSON array first (no copies of it all)."""
    loads = orjson.loads
    try:
        entries = [loads(item) for item in items]
    except orjson.JSONDecodeError:
        entries = None
    if entries is None or not all(type(entry) is dict for entry in entries):
        servercommon.raise_bad_entry(items, lambda i: f"{where}: the entry at seq {first + i}")
    return cast(list[dict[str, Any]], entries)

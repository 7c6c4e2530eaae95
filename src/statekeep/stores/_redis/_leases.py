"""RedisStore's leases, client side: the lease scripts' calls (:mod:`._lease_lua`), and the
errors of the scripts that refuse, raised by the pure rules of :mod:`statekeep._core.leases`
run on the lease row and server time the script returned. Also rekey's in-place re-seal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn

import orjson

from ..._core.leases import Lease, acquired, check_fence, is_live, renewed
from ..._core.writes import same_json
from . import _reads
from ._client import ClientLocal
from ._keys import Keys, from_us
from ._lease_lua import LEASE_HELD, STALE

_US = timedelta(microseconds=1)


def is_refusal(reply: Any) -> bool:
    """Whether a script's reply is a fence refusal (see :data:`._lease_lua.FENCE`)."""
    return isinstance(reply, list) and bool(reply) and int(reply[0]) in (LEASE_HELD, STALE)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _held(keys: Keys, state_id: str, reply: Sequence[Any]) -> tuple[Lease | None, datetime]:
    """The lease row (of the namespace of ``keys``) and the server's time a refusal carries."""
    owner, token, exp, ttl, now = (_text(part) for part in reply[1:6])
    held = None
    if token:
        period = int(ttl) * _US if ttl else timedelta(seconds=30)
        held = Lease(state_id, owner, int(token), from_us(int(exp)), period, keys.namespace)
    return held, from_us(int(now))


def refuse(keys: Keys, state_id: str, reply: Sequence[Any], lease: Lease | None, doing: str) -> NoReturn:
    """Raise the error of a fence refusal: :func:`check_fence` on the row the script saw."""
    held, now = _held(keys, state_id, reply)
    check_fence(state_id, held, lease, now, doing)
    raise AssertionError(f"Redis refused {doing!r} on State {state_id!r} by a lease the fence allows")


async def acquire(local: ClientLocal, keys: Keys, state_id: str, owner: str, ttl: timedelta) -> Lease:
    assert local.acquire_script is not None
    reply = await local.acquire_script(keys=[keys.lease_key(state_id)], args=[owner, ttl // _US])
    if is_refusal(reply):
        held, now = _held(keys, state_id, reply)
        acquired(state_id, owner, ttl, held, now, keys.namespace)  # raises LeaseHeldError
        raise AssertionError(f"Redis refused a lease on State {state_id!r} that is free")
    return Lease(state_id, owner, int(reply[1]), from_us(int(reply[2])), ttl, keys.namespace)


async def renew(local: ClientLocal, keys: Keys, lease: Lease, ttl: timedelta) -> Lease:
    assert local.renew_script is not None
    reply = await local.renew_script(
        keys=[keys.lease_key(lease.state_id)], args=[lease.owner, lease.token, ttl // _US]
    )
    if is_refusal(reply):
        held, now = _held(keys, lease.state_id, reply)
        renewed(lease, held, ttl, now)  # raises StaleLeaseError
        raise AssertionError(f"Redis refused to renew a current lease of State {lease.state_id!r}")
    return dataclasses.replace(lease, expires_at=from_us(int(reply[2])), ttl=ttl)


async def release(local: ClientLocal, keys: Keys, lease: Lease) -> None:
    assert local.release_script is not None
    await local.release_script(keys=[keys.lease_key(lease.state_id)], args=[lease.owner, lease.token])


async def current(local: ClientLocal, keys: Keys, state_id: str) -> Lease | None:
    """The live lease of ``state_id`` by the server's clock, or None."""
    if _reads.is_cluster(local):
        row, (secs, micros) = await _reads.with_time(
            local, keys.lease_key(state_id), ("owner", "token", "exp", "ttl")
        )
    else:
        async with local.client.pipeline(transaction=True) as pipe:
            pipe.hmget(keys.lease_key(state_id), "owner", "token", "exp", "ttl")
            pipe.time()
            row, (secs, micros) = await pipe.execute()
    if row[1] is None:
        return None
    held, now = _held(
        keys, state_id, [0, *(b"" if part is None else part for part in row), secs * 1_000_000 + micros]
    )
    return held if is_live(held, now) else None


async def reseal(
    local: ClientLocal,
    keys: Keys,
    state_id: str,
    entries: dict[int, tuple[bytes, bytes]],
    snapshot: tuple[bytes, bytes] | None,
) -> int:
    """Replace the records of ``state_id`` whose stored JSON still equals their ``old``: read
    them, compare as JSON here, then one script replaces each only where the server still
    holds the bytes read (a record changed meanwhile is left as it is). A trimmed State's
    list starts at its base (the hash's ``first``): seq ``s`` is at index ``s - first``."""
    assert local.reseal_script is not None
    state_key, entries_key = keys.state_keys(state_id)
    seqs = sorted(entries)
    first = int(await local.client.hget(state_key, "first") or 0)  # (the script checks again)
    async with local.client.pipeline(transaction=True) as pipe:
        pipe.hget(state_key, "snapshot")
        for seq in seqs:
            pipe.lindex(entries_key, seq - first)
        stored_snapshot, *stored = await pipe.execute()
    args: list[Any] = ["0", "", ""]
    if snapshot is not None and _same(stored_snapshot, snapshot[0]):
        args = ["1", stored_snapshot, _line(snapshot[1])]
    for seq, found in zip(seqs, stored, strict=True):
        old, new = entries[seq]
        if _same(found, old):
            args += [seq, found, _line(new)]
    if args[0] == "0" and len(args) == 3:
        return 0
    return int(await local.reseal_script(keys=[state_key, entries_key], args=args))


def _same(stored: bytes | None, old: bytes) -> bool:
    if stored is None:
        return False
    try:
        return same_json(orjson.loads(stored), orjson.loads(old))
    except orjson.JSONDecodeError:
        return False


def _line(record: bytes) -> bytes:
    """A record as Redis keeps it: no trailing newline."""
    return record[:-1] if record.endswith(b"\n") else record

"""What RedisStore checks on first connect: the key layout's version under its prefix
(refusing a newer statekeep's with UnsupportedFormatError, and keys that are not statekeep's), and, once per server,
settings that make writes less durable than they look."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from ..._errors import CorruptStateError, NotAStoreError, UnsupportedFormatError

if TYPE_CHECKING:
    from redis.asyncio import Redis

#: The key layout this statekeep writes; a prefix holding a newer one is refused.
LAYOUT_VERSION = 1

# Servers already checked for durability settings, so that each is warned about once.
_checked: set[Hashable] = set()


async def check_server(
    client: Redis,
    *,
    store: str,
    prefix: str,
    index: bytes,
    create: bool,
    server: Hashable,
    where: str,
    scrub: Callable[[str], str],
) -> None:
    """Check the key layout's version under ``prefix`` (writing it first if ``create``), and
    warn once per ``server`` about weak durability. ``store`` names the store in errors,
    ``where`` the server in warnings; ``index`` is the listing's key."""
    layout = prefix.encode("utf-8") + b"layout"
    async with client.pipeline(transaction=False) as pipe:
        if create:
            pipe.set(layout, str(LAYOUT_VERSION), nx=True)
        pipe.get(layout)
        pipe.pttl(layout)
        pipe.pttl(index)
        for name in ("appendonly", "appendfsync", "maxmemory-policy"):
            pipe.config_get(name)
        replies = await pipe.execute(raise_on_error=False)
    version, *ttls, appendonly, appendfsync, policy = replies[-6:]
    if isinstance(version, Exception):
        raise version
    if version is None and not create:
        raise NotAStoreError(
            f"{store}: no statekeep keys under prefix {prefix!r} (the key "
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
            raise UnsupportedFormatError(
                f"{store}: the keys under prefix {prefix!r} are in statekeep's Redis layout "
                f"version {found}, made by a newer statekeep; this one understands version "
                f"{LAYOUT_VERSION} and leaves them alone. Upgrade statekeep: pip install -U 'statekeep[redis]'"
            )
        raise CorruptStateError(
            f"{store}: the key {layout.decode(errors='replace')!r} holds {version!r}, "
            "not a statekeep layout version; is the prefix used by something else?"
        )
    if server in _checked:
        return
    _checked.add(server)
    if isinstance(appendonly, Exception) or isinstance(appendfsync, Exception):
        error = appendonly if isinstance(appendonly, Exception) else appendfsync
        warnings.warn(
            f"statekeep: could not check the durability settings of Redis at {where} "
            f"(CONFIG GET was refused: {scrub(str(error))}); writes are durable only if the "
            "server runs with 'appendonly yes' and 'appendfsync always'",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    evicts = _config_value(policy, "maxmemory-policy")
    with_ttl = any(isinstance(ttl, int) and ttl >= 0 for ttl in ttls)
    if evicts.startswith("volatile-") and not with_ttl:
        with_ttl = await _states_have_ttl(client, prefix.encode("utf-8"), index)
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


async def _states_have_ttl(client: Redis, prefix: bytes, index: bytes, sample: int = 5) -> bool:
    """Do the keys of the most recently updated States (a few) have a TTL, so that a
    ``volatile-*`` eviction policy may drop them? (A sample: statekeep never scans keys.)"""
    ids = [
        sid if isinstance(sid, bytes) else str(sid).encode()
        for sid in await client.zrevrange(index, 0, sample - 1)
    ]
    if not ids:
        return False
    async with client.pipeline(transaction=False) as pipe:
        for sid in ids:
            pipe.pttl(prefix + b"state:" + sid)
            pipe.pttl(prefix + b"entries:" + sid)
        ttls = await pipe.execute(raise_on_error=False)
    return any(isinstance(ttl, int) and ttl >= 0 for ttl in ttls)


def _config_value(reply: object, name: str) -> str:
    """The value of setting ``name`` in a CONFIG GET reply, or ``"unknown"``."""
    if isinstance(reply, dict):
        for key, value in reply.items():
            key_text = key.decode() if isinstance(key, bytes) else str(key)
            if key_text == name:
                return value.decode() if isinstance(value, bytes) else str(value)
    return "unknown"

"""What RedisStore checks on first connect: the key layout's version under its prefix
(refusing a newer statekeep's with UnsupportedFormatError, and keys that are not statekeep's;
upgrading layout 1), and, once per server, settings that make writes less durable than they look.

Layout 1 (statekeep before namespaces) kept ``state:{id}``, ``entries:{id}`` and one index
sorted set ``index`` scored by updated_at. Layout 2 keeps the first two as they are (they are
the default namespace's) and replaces ``index`` by the indexes of :mod:`._keys`: the first
store to connect builds them from the snapshots (:func:`upgrade`, safe to run from several
processes at once and to run again after a crash half-way), then sets ``layout`` to 2 and
removes ``index``. Layout 3 keeps every key of layout 2; it says that every process on the
prefix honours the lease rows (``lease:{id}``, checked by the write, delete and fork
scripts), which a statekeep of layout 2 may not, and it adds a State's incarnation (the
field ``inc`` of its ``state:`` hash, set by its create and by a fork, never by a later
write), which its sealed records are bound to (a State made at layout 2 has none). The
first store to connect sets it (:func:`upgrade_2_to_3`, which changes no other key), and an
older statekeep then refuses the prefix rather than write past a lease or append records
it cannot bind to a State's incarnation. Layout 4 keeps every key of layout 3 and adds blobs
(:mod:`._blob_lua`): keys under the prefix shared by its namespaces, and entries holding
references to them (``{"sk.blob": NAME}``), which a statekeep of layout 3 would show as
values, and would copy in a fork without making the fork a referrer. Moving to layout 4
changes only the layout key. Stop processes running an older statekeep first:
once the layout is new they refuse to start, but one already running would write States
the indexes miss, or past a lease.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from ..._core.errors import CorruptStateError, NotAStoreError, UnsupportedFormatError
from ..._core.labels import DEFAULT_NAMESPACE
from ._keys import WIDTH, Keys, indexed
from ._lua import COMMON

if TYPE_CHECKING:
    from redis.asyncio import Redis

#: The key layout this statekeep writes; a prefix holding a newer one is refused.
LAYOUT_VERSION = 4

#: Set the layout key ``KEYS[1]`` to ``ARGV[2]`` only if it still holds ``ARGV[1]`` (and
#: then delete ``KEYS[2..]``): an upgrade step that ends after another process's never
#: moves the layout back.
_BUMP = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2])
    for i = 2, #KEYS do redis.call('DEL', KEYS[i]) end
end
return 0
"""

#: Layout 1 -> 2: index one State of the default namespace, if its snapshot is still the one read.
REINDEX = (
    COMMON
    + """
-- KEYS: state, entries, then the namespace keys
-- ARGV: id, snapshot as read, member, exp, n index keys, then the index keys
if redis.call('HGET', KEYS[1], 'snapshot') ~= ARGV[2] then return 0 end
set_snapshot(ns_keys(3), ARGV[1], KEYS[1], ARGV[2], ARGV[3], 6, tonumber(ARGV[5]), ARGV[4], '')
expire(KEYS[1], KEYS[2])
return 1
"""
)

# Servers already checked for durability settings, so that each is warned about once.
_checked: set[Hashable] = set()


async def check_server(
    client: Redis,
    *,
    store: str,
    prefix: str,
    index: bytes,
    create: bool,
    retention: bool,
    server: Hashable,
    where: str,
    scrub: Callable[[str], str],
) -> None:
    """Check the key layout's version under ``prefix`` (writing it first if ``create``), and
    warn once per ``server`` about weak durability. ``store`` names the store in errors,
    ``where`` the server in warnings; ``index`` is the default namespace's listing index.
    With ``retention``, States get a TTL, so any ``volatile-*`` eviction policy is warned about."""
    layout = prefix.encode("utf-8") + b"layout"
    if hasattr(client, "get_nodes"):  # a Redis Cluster: keys on their nodes, settings on each node
        replies = await _cluster_reads(client, layout, index, create)
    else:
        async with client.pipeline(transaction=False) as pipe:
            if create:
                pipe.set(layout, str(LAYOUT_VERSION), nx=True)
            pipe.get(layout)
            pipe.pttl(layout)
            pipe.pttl(index)
            for name in _SETTINGS:
                pipe.config_get(name)
            replies = await pipe.execute(raise_on_error=False)
    version, *ttls, appendonly, appendfsync, policy = replies[-6:]
    if isinstance(version, Exception):
        raise version
    if version is None and not create:
        raise NotAStoreError(
            f"{store}: no statekeep keys under prefix {prefix!r} (the key "
            f"{layout.decode(errors='replace')!r} is missing); nothing was changed",
            "Pass the URL and prefix statekeep saved to",
        )
    try:
        found = None if version is None else int(version)
    except ValueError:
        found = -1
    if found == 1:
        await upgrade(client, prefix.encode("utf-8"))
        found = 2
    if found == 2:
        await upgrade_2_to_3(client, prefix.encode("utf-8"))
        found = 3
    if found == 3:
        await bump(client, prefix.encode("utf-8"), 3, 4)
        found = 4
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
    with_ttl = retention or any(isinstance(ttl, int) and ttl >= 0 for ttl in ttls)
    if evicts.startswith("volatile-") and not with_ttl:
        with_ttl = await _states_have_ttl(client, prefix.encode("utf-8"), index)
    if evicts.startswith("allkeys-") or (evicts.startswith("volatile-") and with_ttl):
        warnings.warn(
            f"statekeep: Redis at {where} may evict statekeep's keys when it runs out of memory "
            f"(maxmemory-policy {evicts}{', and they have a TTL' if with_ttl else ''}"
            f"{' (retention is on)' if retention else ''}): saved States "
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


#: The settings checked on connect, and the value that loses nothing of each.
_SETTINGS = ("appendonly", "appendfsync", "maxmemory-policy")
_SAFE = ("yes", "always", "noeviction")


async def _cluster_reads(client: Any, layout: bytes, index: bytes, create: bool) -> list[Any]:
    """On a Redis Cluster, what ``check_server`` reads in one pipeline on one server: the
    layout key, two TTLs, and each setting as the weakest node has it (every node, replicas
    too: one may become a master)."""
    if create:
        await client.set(layout, str(LAYOUT_VERSION), nx=True)
    replies: list[Any] = [await client.get(layout), await client.pttl(layout), await client.pttl(index)]
    nodes = client.get_nodes()
    for name, safe in zip(_SETTINGS, _SAFE, strict=True):
        found: Any = None
        for node in nodes:
            try:
                reply = await client.config_get(name, target_nodes=node)
            except Exception as exc:
                found = exc
                break
            if found is None or _config_value(reply, name) != safe:
                found = reply
                if _config_value(reply, name) != safe:
                    break
        replies.append(found)
    return replies


async def _states_have_ttl(client: Redis, prefix: bytes, index: bytes, sample: int = 5) -> bool:
    """Do the keys of the most recently updated States (a few) have a TTL, so that a
    ``volatile-*`` eviction policy may drop them? (A sample: statekeep never scans keys.)"""
    ids = [
        (m if isinstance(m, bytes) else str(m).encode())[WIDTH:]
        for m in await client.zrangebylex(index, "-", "+", 0, sample)
    ]
    if not ids:
        return False
    base = index.removesuffix(b"ix:all")  # the namespace's keys (on a cluster, under its hash tag)
    async with client.pipeline(transaction=False) as pipe:
        for sid in ids:
            pipe.pttl(base + b"state:" + sid)
            pipe.pttl(base + b"entries:" + sid)
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


async def upgrade(client: Redis, prefix: bytes, chunk: int = 500) -> None:
    """Layout 1 -> 2 under ``prefix``: index every State the old index lists (see the
    module's docstring). Each State is indexed by a script that first checks its snapshot
    is still the one read, so a write meanwhile (which indexes it itself) is never undone."""
    old = prefix + b"index"
    keys = Keys.of(prefix, DEFAULT_NAMESPACE)
    script = client.register_script(REINDEX)
    ids = [m if isinstance(m, bytes) else str(m).encode() for m in await client.zrange(old, 0, -1)]
    for at in range(0, len(ids), chunk):
        part = ids[at : at + chunk]
        async with client.pipeline(transaction=False) as pipe:
            for raw_id in part:
                pipe.hget(keys.state + raw_id, "snapshot")
            snapshots = await pipe.execute()
        for raw_id, snapshot in zip(part, snapshots, strict=True):
            if snapshot is None:
                continue
            sid = raw_id.decode("utf-8", "replace")
            found = indexed(keys, sid, snapshot)
            await script(
                keys=[keys.state + raw_id, keys.entries + raw_id, *keys.common],
                args=[raw_id, snapshot, found.member, found.expiry, len(found.indexes), *found.indexes],
            )
    await client.eval(_BUMP, 2, prefix + b"layout", old, "1", "2")


async def upgrade_2_to_3(client: Redis, prefix: bytes) -> None:
    """Layout 2 -> 3 under ``prefix``: the lease rows are already where layout 3 keeps them,
    so only the layout key changes (see the module's docstring)."""
    await bump(client, prefix, 2, 3)


async def bump(client: Redis, prefix: bytes, old: int, new: int) -> None:
    """Move the layout key from ``old`` to ``new`` (an upgrade that changes no other key).
    A read-only replica reads the keys as they are: its primary's first new process
    upgrades them."""
    from redis.exceptions import ReadOnlyError

    try:
        await client.eval(_BUMP, 1, prefix + b"layout", str(old), str(new))
    except ReadOnlyError:
        pass

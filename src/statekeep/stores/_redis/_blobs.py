"""RedisStore's blobs on the owner loop: reading them, counting them, gc (the keys and the
scripts: :mod:`._blob_lua`).

When a removed blob's bytes leave the server's files: gc's ``DEL`` frees them from memory at
once; the append-only file keeps the command that stored them until the AOF is rewritten
(``BGREWRITEAOF``, or automatically by ``auto-aof-rewrite-percentage``), and an RDB file
until the next save writes a new one (replicas and backups keep what they copied).
"""

from __future__ import annotations

from collections.abc import Collection

from ._client import ClientLocal

#: Names per MGET, and blobs per gc script call.
_CHUNK = 500
GC_BLOBS_BATCH = 500


async def get_blobs(local: ClientLocal, prefix: bytes, names: Collection[str]) -> dict[str, bytes]:
    wanted = list(dict.fromkeys(names))
    found: dict[str, bytes] = {}
    for at in range(0, len(wanted), _CHUNK):
        part = wanted[at : at + _CHUNK]
        values = await local.client.mget([prefix + b"blob:" + name.encode() for name in part])
        found.update((name, _as_bytes(v)) for name, v in zip(part, values, strict=True) if v is not None)
    return found


async def gc_blobs(local: ClientLocal, prefix: bytes, dry_run: bool) -> tuple[int, int]:
    """gc of the blobs (or a dry run), a batch per script call, in name order."""
    script = local.gc_blobs_script
    assert script is not None
    removed = size = 0
    start: bytes = b"-"
    while True:
        gone, freed, looked, last = await script(
            keys=[prefix + b"blobs", prefix + b"blobbytes"],
            args=[prefix, start, GC_BLOBS_BATCH, "1" if dry_run else "0"],
        )
        removed, size = removed + int(gone), size + int(freed)
        if int(looked) < GC_BLOBS_BATCH:
            return removed, size
        start = b"(" + (last if isinstance(last, bytes) else str(last).encode())


async def usage(local: ClientLocal, prefix: bytes) -> tuple[int, int]:
    async with local.client.pipeline(transaction=False) as pipe:
        pipe.zcard(prefix + b"blobs")
        pipe.get(prefix + b"blobbytes")
        count, size = await pipe.execute()
    return int(count), int(size or 0)


def _as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


_RESEAL = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2])
    return 1
end
return 0
"""


async def reseal_blobs(local: ClientLocal, prefix: bytes, work: dict[str, tuple[bytes, bytes]]) -> int:
    """For rekey: replace each blob NAME -> (old, new) still holding ``old`` (a script each:
    compare and set); how many were replaced."""
    done = 0
    for name, (old, new) in work.items():
        done += int(await local.client.eval(_RESEAL, 1, prefix + b"blob:" + name.encode(), old, new))
    return done

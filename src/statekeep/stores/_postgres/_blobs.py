"""PostgresStore's blobs: reading them, counting them, and gc of those no State refers to
(the tables and functions: :mod:`._schema_v5`, where the guarantees beside concurrent writers
are told).

When a removed blob's bytes leave the server's files: gc's DELETE leaves them in dead tuples
of the ``blobs`` table's TOAST relation until (auto)VACUUM marks that space free, and in free
space until it is written over; ``VACUUM FULL`` of the table rewrites it, and the old files
are removed when it commits. The WAL keeps them until its segments are recycled after
checkpoints (and archives, replicas and backups keep what they copied).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..._store.backend import Backend
from ._sql import Sql

#: Blobs gc removes per transaction.
GC_BLOBS_BATCH = 500


class Blobs(Backend):
    """The blob methods of :class:`PostgresStore` (a mixin; the store supplies ``_sql`` and ``_query``)."""

    _sql: Sql

    async def _query(self, action: str, method: str, query: str, *args: Any, local: Any = None) -> Any:
        raise NotImplementedError

    async def _get_blobs(self, names: Collection[str]) -> dict[str, bytes]:
        """The stored bytes of the blobs ``names`` the tables hold (any namespace's)."""
        if not names:
            return {}
        rows = await self._query("read", "fetch", self._sql.get_blobs, list(dict.fromkeys(names)))
        return {row[0]: bytes(row[1]) for row in rows}

    async def _reseal_blobs(self, work: dict[str, tuple[bytes, bytes]]) -> int:
        """For rekey: replace each blob NAME -> (old, new) still holding ``old`` (each an
        atomic statement); how many were replaced."""
        done = 0
        for name, (old, new) in work.items():
            done += (
                await self._query("write", "fetchval", self._sql.reseal_blob, new, name, old)
            ) is not None
        return done

    async def _gc_blobs(self, dry_run: bool) -> tuple[int, int]:
        """Remove (``dry_run``: count) the blobs no State of any namespace refers to, in
        transactions of at most :data:`GC_BLOBS_BATCH`; (blobs, bytes)."""
        if dry_run:
            row = await self._query("gc", "fetchrow", self._sql.gc_blobs, 0, True)
            return int(row[0]), int(row[1])
        removed = size = 0
        while True:
            row = await self._query("gc", "fetchrow", self._sql.gc_blobs, GC_BLOBS_BATCH, False)
            removed, size = removed + int(row[0]), size + int(row[1])
            if int(row[2]) < GC_BLOBS_BATCH:
                return removed, size

    async def _blob_usage(self) -> tuple[int, int]:
        """(blobs, bytes) the tables hold, every namespace counted."""
        row = await self._query("stats", "fetchrow", self._sql.blob_usage)
        return int(row[0]), int(row[1])

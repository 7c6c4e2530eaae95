"""The storage side of :class:`~statekeep.adapters.langgraph.StatekeepMemoryStore`: each
LangGraph store operation on one agent memory scope, async (the sync API runs them on the
owner loop). Embeddings arrive computed: nothing here calls a model.

Each item is one agent memory key (:mod:`._langgraph_memory_keys`) whose value is the item's
value, and whose snapshot's ``about`` holds ``{"ns": [...], "key": ..., "ttl": minutes or None,
"vec": {path: packed}, "norm": {path: its norm}}``: a store's ``redact=`` judges the value as
any memory value's, and never rewrites ``about`` (the namespace and key are spelled in the
memory key already; the vectors are numbers), so a redacting store still finds its items.
An item with a TTL has the store's own expiry (``expires_at`` on its record, set and judged by
the store's clock: a Postgres or Redis server's, asked once per batch, a local store's
``clock=``): an expired item is absent to every read and listing at once, and ``gc``
(``sweep_ttl``) removes it. A deleted item's record (its tombstone, which keeps a stale
revision from passing ``put(revision=N)``) expires :data:`TOMBSTONE_GRACE` after the delete,
so ``gc`` removes it too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from langgraph.store.base import GetOp, Item, ListNamespacesOp, PutOp, SearchItem, SearchOp

from .._core.errors import CorruptStateError, StateConflictError
from .._core.labels import iso
from .._core.records import utc_time
from .._runtime.bridge import run_async
from .._store.agentmemory import Memory, key_id
from .._store.contract import Store
from ._langgraph_memory_keys import memory_key, plain_namespace, scan_prefix
from ._langgraph_memory_match import cosine, fixed_prefix, matches, namespace_matches, norm, pack, unpack

#: Snapshot reads run at once while a search or listing reads its items.
_READS_AT_ONCE = 64
#: How long a deleted item's record (its tombstone) stays before ``gc`` may remove it. Until
#: then ``put(revision=N)`` with a revision read before the delete fails; once it is gone, the
#: item is as one never put: a put makes it anew at revision 1, so a revision read more than
#: this long ago may match again. The namespace and key leave the storage with it.
TOMBSTONE_GRACE = timedelta(days=7)


class RevisedItem(Item):
    """A LangGraph ``Item`` with the item's ``revision`` (its count of changes: 1 after its
    first put), for ``put(..., revision=N)``. It equals an ``Item`` with the same fields."""

    __slots__ = ("revision",)

    def __init__(self, *, revision: int, **fields: Any) -> None:
        super().__init__(**fields)
        self.revision = revision

    def dict(self) -> dict[str, Any]:
        return {**super().dict(), "revision": self.revision}


class RevisedSearchItem(SearchItem):
    """A LangGraph ``SearchItem`` (with its ``score``) and the item's ``revision``."""

    __slots__ = ("revision",)

    def __init__(self, *, revision: int, **fields: Any) -> None:
        super().__init__(**fields)
        self.revision = revision

    def dict(self) -> dict[str, Any]:
        return {**super().dict(), "revision": self.revision}


Snapshot = dict[str, Any]


class Clock:
    """The time of the clock that judges the store's expiry (a Postgres or Redis server's,
    else the store's ``clock=``), asked once when first needed and kept: one per batch, so
    expiries are set by the clock that judges them, whatever this host's clock says."""

    def __init__(self, records: object) -> None:
        self._records = records
        self._at: datetime | None = None

    async def __call__(self) -> datetime:
        if self._at is not None:
            return self._at
        server_now = getattr(self._records, "_server_now", None)
        # On the store's own loop, as its async API runs everything (this may be another).
        at: datetime = await run_async(server_now()) if callable(server_now) else datetime.now(UTC)
        self._at = at
        return at


class MemoryOps:
    """The operations on ``memory``, whose store's clock judges TTLs."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self._records = memory._store

    def clock(self) -> Clock:
        """A :class:`Clock` for one batch."""
        return Clock(self._records)

    # -- reads -------------------------------------------------------------------------

    async def get(self, op: GetOp, clock: Clock) -> RevisedItem | None:
        snapshot = await self.memory._snapshot(key_id(memory_key(op.namespace, op.key)))
        fields = _fields(snapshot)
        if fields is None or (fields["namespace"], fields["key"]) != (tuple(op.namespace), op.key):
            return None
        if op.refresh_ttl:
            await self.refresh(snapshot, clock)  # type: ignore[arg-type]  # fields said it is a record
        return RevisedItem(**fields)

    async def search(self, op: SearchOp, query: Sequence[float] | None, clock: Clock) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        # Without a filter or a query, only the window's items are read.
        stop = None if op.filter or query is not None else op.offset + op.limit
        found = [s for s in await self.scan(prefix, stop) if matches(s["value"], op.filter)]
        if query is not None:
            picked = _ranked(found, query, op.offset, op.limit)
        else:
            picked = [(s, None) for s in found[op.offset : op.offset + op.limit]]
        if op.refresh_ttl:
            for snapshot, _ in picked:
                await self.refresh(snapshot, clock)
        return [RevisedSearchItem(score=score, **_fields(s)) for s, score in picked]  # type: ignore[arg-type]

    async def list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        names: set[tuple[str, ...]] = set()
        hashed: list[str] = []
        for row in await self._rows(fixed_prefix(conditions)):
            name = plain_namespace(row.task)
            if name is None:
                hashed.append(row.id)
            else:
                names.add(name)
        for snapshot in await self._snapshots(hashed):
            if snapshot is not None and _fields(snapshot) is not None:
                names.add(tuple(snapshot["about"]["ns"]))
        kept = [n for n in names if namespace_matches(conditions, n)]
        if op.max_depth is not None:
            kept = list({n[: op.max_depth] for n in kept})
        return sorted(kept)[op.offset : op.offset + op.limit]

    async def scan(self, prefix: tuple[str, ...], stop: int | None = None) -> list[Snapshot]:
        """The live items whose namespace starts with ``prefix``, most recently changed first
        (the plain keys of other namespaces under the listed key prefix skipped unread, a
        hashed key's namespace read from its value); ``stop``: once that many are found."""
        ids = []
        for row in await self._rows(prefix):
            name = plain_namespace(row.task)
            if name is None or name[: len(prefix)] == prefix:
                ids.append(row.id)
        found: list[Snapshot] = []
        for at in range(0, len(ids), _READS_AT_ONCE):
            snapshots = await self._snapshots(ids[at : at + _READS_AT_ONCE])
            found.extend(
                s for s in snapshots if s is not None and _fields(s) is not None and _under(s, prefix)
            )
            if stop is not None and len(found) >= stop:
                break
        return found

    async def _rows(self, prefix: tuple[str, ...]) -> list[Any]:
        start = scan_prefix(prefix)
        filters: dict[str, Any] = {"finished": False, "limit": None}
        if start is not None:
            filters["id_prefix"] = key_id(start, "prefix")
        return list(await self._records.alist(**filters))

    async def _snapshots(self, ids: list[str]) -> list[Snapshot | None]:
        out: list[Snapshot | None] = []
        for at in range(0, len(ids), _READS_AT_ONCE):
            part = ids[at : at + _READS_AT_ONCE]
            out.extend(await asyncio.gather(*(self.memory._snapshot(i) for i in part)))
        return out

    async def refresh(self, snapshot: Snapshot, clock: Clock) -> None:
        """Move an item's expiry to a full TTL from now, only once less than half is left
        (so most reads write nothing); a change since its read wins."""
        ttl = snapshot["about"].get("ttl")
        expires = snapshot.get("expires_at")
        if ttl is None or type(expires) is not str:
            return
        now, period = await clock(), timedelta(minutes=ttl)
        if utc_time(expires) - now >= period / 2:
            return
        await self.memory._arefresh(snapshot["task"], snapshot, iso(now + period))

    # -- writes ------------------------------------------------------------------------

    async def put(
        self,
        op: PutOp,
        vectors: Mapping[str, Sequence[float]] | None,
        clock: Clock,
        revision: int | None = None,
    ) -> None:
        """Put or (value None) delete ``op``'s item; with ``revision``, only if the item is
        at that revision now (StateConflictError if not, and nothing is written)."""
        try:
            await self._put(op, vectors, clock, revision)
        except StateConflictError as exc:
            if revision is None:
                raise
            raise StateConflictError(
                f"store item {op.key!r} in namespace {tuple(op.namespace)} is not at revision {revision}: "
                "another writer changed it (or it is absent); nothing was written. Get it again and "
                "retry with its revision"
            ) from exc

    async def _put(
        self, op: PutOp, vectors: Mapping[str, Sequence[float]] | None, clock: Clock, revision: int | None
    ) -> None:
        mkey = memory_key(op.namespace, op.key)
        if op.value is None:
            gone = iso(await clock() + TOMBSTONE_GRACE)
            await self.memory._change(mkey, revision, deleted=True, expires_at=gone)
            return
        ttl = op.ttl
        about: dict[str, Any] = {"ns": list(op.namespace), "key": op.key, "ttl": ttl}
        if vectors:
            about["vec"] = {path: pack(v) for path, v in vectors.items()}
            about["norm"] = {path: norm(unpack(packed)) for path, packed in about["vec"].items()}
        expires = None if ttl is None else iso(await clock() + timedelta(minutes=ttl))
        await self.memory._change(mkey, revision, value=dict(op.value), expires_at=expires, about=about)

    async def sweep(self) -> int:
        """Remove the expired items now (the store's ``gc`` of this scope)."""
        records = self._records
        if not isinstance(records, Store):
            raise NotImplementedError(f"{type(records).__name__} has no gc(): its expired items stay stored")
        return int(await records.agc())


def _fields(snapshot: Snapshot | None) -> dict[str, Any] | None:
    """An item's fields from its key's snapshot (None: absent, deleted, or not an item)."""
    if not snapshot or snapshot.get("finished"):
        return None
    about, value = snapshot.get("about"), snapshot.get("value")
    if not isinstance(about, dict) or not isinstance(about.get("ns"), list) or "key" not in about:
        return None
    return {
        "namespace": tuple(about["ns"]),
        "key": about["key"],
        "value": value if isinstance(value, dict) else {},
        "created_at": utc_time(snapshot["created_at"]),
        "updated_at": utc_time(snapshot["updated_at"]),
        "revision": snapshot["turn"],
    }


def _under(snapshot: Snapshot, prefix: tuple[str, ...]) -> bool:
    return tuple(snapshot["about"]["ns"][: len(prefix)]) == prefix


def _ranked(
    found: list[Snapshot], query: Sequence[float], offset: int, limit: int
) -> list[tuple[Snapshot, float | None]]:
    """As LangGraph's ``InMemoryStore``: every vector of every item scored, an item counted
    once at its best score, the window ``[offset, offset + limit)`` of that order, then items
    without vectors (unscored) if the window is short."""
    query_norm = norm(query)
    scored: list[tuple[float, int]] = []
    scoreless: list[Snapshot] = []
    for n, snapshot in enumerate(found):
        packed = snapshot["about"].get("vec") or {}
        norms = snapshot["about"].get("norm") or {}
        if not packed:
            scoreless.append(snapshot)
        scored.extend(
            (cosine(query, query_norm, _vector(snapshot, p, v), norms.get(p)), n) for p, v in packed.items()
        )
    scored.sort(key=lambda pair: pair[0], reverse=True)
    seen: set[int] = set()
    kept: list[tuple[Snapshot, float | None]] = []
    for score, n in scored:
        if n in seen:
            continue
        rank = len(seen)
        seen.add(n)
        if rank >= offset + limit:
            break
        if rank >= offset:
            kept.append((found[n], score))
    if scoreless and len(kept) < limit:
        kept.extend((s, None) for s in scoreless[: limit - len(kept)])
    return kept


def _vector(snapshot: Snapshot, path: str, packed: object) -> Sequence[float]:
    """A stored vector, or CorruptStateError naming the item whose vector does not decode."""
    try:
        if not isinstance(packed, str):
            raise ValueError(f"it is a {type(packed).__name__}, not base64 text")
        return unpack(packed)
    except ValueError as exc:  # (binascii.Error is one)
        about = snapshot["about"]
        raise CorruptStateError(
            f"store item {about['key']!r} in namespace {tuple(about['ns'])}: its stored embedding "
            f"for {path!r} does not decode ({exc}); nothing was changed. Put the item again to "
            "embed it anew"
        ) from exc

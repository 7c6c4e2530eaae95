"""MemoryStore: the Store contract in this process's memory."""

from __future__ import annotations

from collections.abc import Collection, Hashable
from datetime import datetime, timedelta
from typing import Any, cast

import orjson

from .._core.blobs import DEFAULT_OFFLOAD, names_in
from .._core.labels import DEFAULT_NAMESPACE, check_period, encoded_expiry, iso
from .._core.leases import Lease, acquired, check_fence, is_live, released, renewed
from .._core.records import Record, SavedState, left_out, listing_order
from .._core.redactor import Redactor
from .._core.writes import (
    PreparedWrite,
    check_overlap,
    exists_error,
    missing_error,
    plan_append,
    same_json,
    trimmed_meanwhile,
)
from .._protect.sealing import Keyring
from .._store.backend import Backend
from .._store.engine import Clock
from .._store.expect import check_preconditions, sealed_text


class _Space:
    """One namespace's States: entry lines, encoded snapshot and expiry, by id."""

    __slots__ = ("changes", "expires", "incarnations", "leases", "lines", "snapshots", "starts")

    def __init__(self) -> None:
        self.changes = 0  # the change stamp: counts snapshots kept and States dropped
        self.lines: dict[str, list[bytes]] = {}
        self.snapshots: dict[str, bytes | None] = {}
        self.expires: dict[str, datetime] = {}  # only States that expire
        self.leases: dict[str, Lease] = {}  # each State's lease row; kept by drop()
        self.incarnations: dict[str, str | None] = {}
        self.starts: dict[str, int] = {}  # a trimmed State's first seq (its base's); 0 if absent

    def drop(self, sid: str) -> None:
        self.changes += 1
        self.lines.pop(sid, None)
        self.incarnations.pop(sid, None)
        self.starts.pop(sid, None)
        self.snapshots.pop(sid, None)
        self.expires.pop(sid, None)


class MemoryStore(Backend):
    """Keeps States in this process's memory, for tests and short-lived runs.

    Same contract as every store; nothing is durable: when ``write`` returns the data is
    in this process's memory only, and everything is gone when the process ends. Data is
    kept encoded, so readers always get fresh copies and the same values a file or
    database store would give back (tuples come back as lists).

    ``namespace`` (default ``"default"``): each namespace of one MemoryStore is a separate
    set of States (its agent memory too); a new MemoryStore shares nothing with another.
    ``retention``: a State without an explicit ``expires_at`` expires that long after its
    last write. ``ttl`` is retention that slides: a ``read``/``load`` of a State also moves
    its expiry to ``ttl`` from then (listings do not); give one of the two. Expiry is judged
    by ``clock`` (default: the system clock, UTC): an expired State is absent to reads,
    listings, forks and writes, and ``gc`` removes it. Leases are judged by that clock too.

    ``trim(id, before=seq)`` removes a compacted State's entries before ``seq`` for a base record
    (see :meth:`~statekeep._store.backend.Backend.trim`): this store drops the removed entries.
    ``trim_compacted=True``: ``gc`` also trims every State up to its latest compaction.

    ``redact``, ``encrypt`` and ``allow_plaintext``: see the docs' "Protection" page
    (:class:`~statekeep.Redactor`, :class:`~statekeep.Keyring`).

    ``telemetry`` (default True): each operation is recorded with OpenTelemetry (a span and
    metrics) when a tracer or meter provider is set; False records nothing. ``trace_ids=True``:
    the spans carry the State id. See the docs' "Telemetry" page.

    ``offload`` (default 32768): a value in an entry whose JSON encoding exceeds this many
    bytes is kept once as a blob, shared by every State and namespace of this store (per
    namespace when encrypted); None keeps every value inline. See the docs' "Large values"
    page. ``gc`` drops the blobs no State refers to.
    """

    def __init__(
        self,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        retention: timedelta | None = None,
        trim_compacted: bool = False,
        clock: Clock | None = None,
        ttl: timedelta | None = None,
        redact: Redactor | None = None,
        encrypt: Keyring | None = None,
        allow_plaintext: bool = False,
        telemetry: bool = True,
        trace_ids: bool = False,
        offload: int | None = DEFAULT_OFFLOAD,
    ) -> None:
        if ttl is not None:
            if retention is not None:
                raise ValueError("give MemoryStore either retention or ttl (retention that slides), not both")
            retention = check_period(ttl, "ttl")
        self._lifecycle(namespace, retention, clock, trim_compacted=trim_compacted)
        self._protect(redact, encrypt, allow_plaintext)
        self._observe(telemetry, trace_ids)
        self._take_offload(offload)
        self._sliding = ttl is not None
        self._spaces: dict[str, _Space] = {}  # shared with the siblings (agent memory)
        self._blobs: dict[str, bytes] = {}  # shared with the siblings too: NAME -> stored bytes
        self._space = self._spaces.setdefault(self.namespace, _Space())

    def __repr__(self) -> str:
        where = "" if self.namespace == DEFAULT_NAMESPACE else f"namespace={self.namespace!r}, "
        return f"MemoryStore({where}<{len(self._space.lines)} States>)"

    @property
    def _snapshots(self) -> dict[str, bytes | None]:
        """This namespace's encoded snapshots (tests plant hand-made ones here)."""
        return self._space.snapshots

    def _storage_key(self) -> Hashable:
        return ("memory", id(self._spaces), self.namespace)

    def _sibling(self, namespace: str) -> MemoryStore:
        sibling = cast(MemoryStore, MemoryStore.__new__(MemoryStore))
        sibling._join(self, namespace)
        sibling._sliding = False
        sibling._spaces = self._spaces
        sibling._blobs = self._blobs
        sibling._space = self._spaces.setdefault(namespace, _Space())
        return sibling

    def _gone(self, sid: str) -> bool:
        """Is the State expired (then it is absent, and a create may replace it)?"""
        when = self._space.expires.get(sid)
        return when is not None and when <= self._now()

    async def _write(self, write: PreparedWrite) -> None:
        sid, space = write.state_id, self._space
        check_fence(sid, space.leases.get(sid), write.lease, self._now())
        lines = space.lines.get(sid)
        if lines is not None and self._gone(sid):
            space.drop(sid)  # expired: absent, so a create replaces it
            lines = None
        if write.create:
            if lines is not None:
                raise exists_error(sid)
            self._keep_blobs(write)
            space.lines[sid] = list(write.lines)
            space.incarnations[sid] = write.incarnation
            if write.first_seq:  # a fork of a trimmed State starts with its base
                space.starts[sid] = write.first_seq
            self._keep_snapshot(sid, write.snapshot)
            return
        if lines is None:
            raise missing_error(sid)
        tail = space.snapshots[sid] or (lines[-1] if lines else None)
        sealed = write.opener is None and sealed_text(tail)
        start = space.starts.get(sid, 0)
        check_preconditions(write, space.incarnations.get(sid), start + len(lines), sealed)
        skip = plan_append(write, start + len(lines))
        first = max(write.first_seq - start, 0)
        check_overlap(write, [orjson.loads(b) for b in lines[first : write.first_seq + skip - start]])
        self._keep_blobs(write)
        lines.extend(write.lines[skip:])
        if write.snapshot is not None:
            self._keep_snapshot(sid, write.snapshot)

    def _keep_blobs(self, write: PreparedWrite) -> None:
        """Keep a write's new blobs (a name already held is not written again)."""
        if write.blobs:
            for name, data in write.blobs.items():
                self._blobs.setdefault(name, data)

    async def _get_blobs(self, names: Collection[str]) -> dict[str, bytes]:
        held = self._blobs
        return {name: held[name] for name in names if name in held}

    async def _gc_blobs(self, dry_run: bool) -> tuple[int, int]:
        # On the owner loop, with no await: no write interleaves, and each write keeps its
        # blobs and its lines in one step.
        referred: set[str] = set()
        for space in self._spaces.values():
            for lines in space.lines.values():
                for line in lines:
                    referred |= names_in(line)
        unreferred = [name for name in self._blobs if name not in referred]
        size = sum(len(self._blobs[name]) for name in unreferred)
        if not dry_run:
            for name in unreferred:
                del self._blobs[name]
        return len(unreferred), size

    async def _reseal_blobs(self, blobs: dict[str, tuple[bytes, bytes]]) -> int:
        done = 0
        for name, (old, new) in blobs.items():
            if self._blobs.get(name) == old:
                self._blobs[name] = new
                done += 1
        return done

    async def _blob_usage(self) -> tuple[int, int]:
        return len(self._blobs), sum(map(len, self._blobs.values()))

    def _keep_snapshot(self, sid: str, snapshot: bytes | None) -> None:
        space = self._space
        space.snapshots[sid] = snapshot
        space.changes += 1
        when = encoded_expiry(snapshot)
        if when is None:
            space.expires.pop(sid, None)
        else:
            space.expires[sid] = when

    async def _read(self, state_id: str, since: int = 0) -> Record | None:
        space = self._space
        lines = space.lines.get(state_id)
        if lines is None or self._gone(state_id):
            return None
        raw = space.snapshots[state_id]
        snapshot = None if raw is None else orjson.loads(raw)
        if self._sliding and state_id in space.expires and snapshot and snapshot.get("expiry") == "retention":
            assert self.retention is not None
            snapshot["expires_at"] = iso(self._now() + self.retention)  # a read slides it
            self._keep_snapshot(state_id, orjson.dumps(snapshot))
        entries = [orjson.loads(b) for b in lines[max(since - space.starts.get(state_id, 0), 0) :]]
        return Record(entries, snapshot, space.incarnations.get(state_id))

    async def _read_snapshot(self, state_id: str) -> dict[str, Any] | None:
        if self._sliding:
            return await super()._read_snapshot(state_id)  # a read slides the expiry
        raw = self._space.snapshots.get(state_id)
        return None if raw is None or self._gone(state_id) else cast(dict[str, Any], orjson.loads(raw))

    async def _change_stamp(self) -> Hashable | None:
        """A count of the snapshots kept and States dropped (see :mod:`statekeep._store.changes`)."""
        return self._space.changes

    async def _state_ids(self) -> list[str] | None:
        return sorted(self._space.lines)

    async def _list(self) -> tuple[list[SavedState], list[str]]:
        rows, skipped = [], []
        for sid, snapshot in self._space.snapshots.items():
            if snapshot is None:
                continue
            try:
                rows.append(SavedState.from_snapshot(sid, orjson.loads(snapshot)))
            except ValueError as exc:
                skipped.append(left_out(sid, exc))
        return listing_order(rows), skipped

    async def _delete(self, state_id: str, lease: Lease | None = None) -> None:
        check_fence(state_id, self._space.leases.get(state_id), lease, self._now(), "nothing was deleted")
        self._space.drop(state_id)

    async def _reseal(
        self, state_id: str, entries: dict[int, tuple[bytes, bytes]], snapshot: tuple[bytes, bytes] | None
    ) -> int:
        # On the owner loop under the State's lock: no write interleaves.
        space, done = self._space, 0
        lines = space.lines.get(state_id)
        if lines is None:
            return 0
        start = space.starts.get(state_id, 0)
        for seq, (old, new) in entries.items():
            at = seq - start
            if 0 <= at < len(lines) and same_json(orjson.loads(lines[at]), orjson.loads(old)):
                lines[at] = new + b"\n"
                done += 1
        held = space.snapshots.get(state_id)
        if (
            snapshot is not None
            and held is not None
            and same_json(orjson.loads(held), orjson.loads(snapshot[0]))
        ):
            self._keep_snapshot(state_id, snapshot[1])
            done += 1
        return done

    async def _trim(self, state_id: str, before: int, base: bytes, first: int) -> None:
        # On the owner loop, and no await here: no other view of the space interleaves.
        space = self._space
        lines = space.lines.get(state_id)
        if lines is None or self._gone(state_id):
            raise missing_error(state_id)
        start = space.starts.get(state_id, 0)
        if start != first:
            raise trimmed_meanwhile(state_id, first, start)
        if not start < before <= start + len(lines):
            raise ValueError(f"State {state_id!r} holds seqs {start} to {start + len(lines) - 1}")
        space.lines[state_id] = [base, *lines[before - start :]]
        space.starts[state_id] = before - 1

    # Leases: the rows live in the namespace's space, judged by the store's clock.

    async def _acquire(self, state_id: str, owner: str, ttl: timedelta) -> Lease:
        leases = self._space.leases
        lease = leases[state_id] = acquired(
            state_id, owner, ttl, leases.get(state_id), self._now(), self.namespace
        )
        return lease

    async def _renew(self, lease: Lease, ttl: timedelta) -> Lease:
        leases = self._space.leases
        new = leases[lease.state_id] = renewed(lease, leases.get(lease.state_id), ttl, self._now())
        return new

    async def _release(self, lease: Lease) -> None:
        leases = self._space.leases
        ended = released(lease, leases.get(lease.state_id), self._now())
        if ended is not None:
            leases[lease.state_id] = ended

    async def _current_lease(self, state_id: str) -> Lease | None:
        held = self._space.leases.get(state_id)
        return held if is_live(held, self._now()) else None

    async def _gc(self, limit: int | None) -> int:
        # Runs on the owner loop, as every write does: nothing can extend a State meanwhile.
        now = self._now()
        space = self._space
        expired = [
            sid
            for sid, when in space.expires.items()
            if when <= now and not is_live(space.leases.get(sid), now)
        ]
        for sid in expired[:limit]:
            space.drop(sid)
        return len(expired[:limit])

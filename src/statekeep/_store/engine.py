"""The storage engine interface: what a backend implements for the built-in stores' base.

A backend is one package under ``statekeep/stores/`` with a class that subclasses
:class:`~statekeep._store.backend.Backend` (this :class:`Engine` below the public methods)
and implements:

- **required**, on the owner loop: :meth:`~Engine._storage_key`, :meth:`~Engine._write`
  (the State's lock held), :meth:`~Engine._read`, :meth:`~Engine._list`,
  :meth:`~Engine._delete` (lock held); :meth:`~Engine._close` if it holds anything.
- **defaults it may override** where its storage does better: queries
  (:meth:`~Engine._select`, :meth:`~Engine._child_ids`), snapshot reads
  (:meth:`~Engine._read_snapshot`), expiry (:meth:`~Engine._gc`,
  :meth:`~Engine._count_expired`, :meth:`~Engine._server_now`, :meth:`~Engine._expired`),
  a fork copied on the server's side (``_afork_write``, see :class:`~statekeep.Store`).
- **optional capability groups**, offered by defining their methods
  (:mod:`~statekeep._store.capabilities`): namespaces, leases (the hooks of
  :class:`~statekeep._leases.api.LeaseHooks`, and ``check_fence`` in ``_write`` and
  ``_delete``), reseal, id walk, size, change stamp.

``_write`` returning means the write is as durable as the store promises (``save`` counts
it sent); raising ValueError, TypeError, LookupError, a StateConflictError (or its kin) or a
lease error means nothing was written; any other exception means it may have been, and
``save`` sends it again as an append, which the write rules make safe.

What it gets: ids and data validated and encoded in the caller's thread; each call run on
the owner loop under the per-State lock; closing; expiry judged by its clock; redaction and
sealing (:class:`~statekeep._protect.protection.Protection`). Its constructor calls
:meth:`~Engine._lifecycle` and :meth:`~Engine._protect`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from datetime import UTC, datetime, timedelta
from typing import Any

from .._core.blobs import check_offload
from .._core.ids import validate_id
from .._core.labels import DEFAULT_NAMESPACE, check_period, expired_at, iso, validate_namespace
from .._core.leases import Lease
from .._core.query import ListQuery, Page, select
from .._core.records import Record, SavedState, Snapshot, built
from .._core.writes import PreparedWrite
from .._protect.protection import Protection
from .._runtime.bridge import owner
from .blobs import Blobs

#: A clock: returns the current time as an aware datetime.
Clock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(UTC)


class Engine(ABC):
    """The hooks a backend implements, with the defaults it may override (see the module)."""

    _closed = False
    namespace: str = DEFAULT_NAMESPACE
    #: How long a State without an explicit ``expires_at`` lives after its last write.
    retention: timedelta | None = None
    #: Whether ``gc`` also trims each State up to its latest compaction (``trim``).
    trim_compacted: bool = False
    _clock: Clock = staticmethod(system_clock)
    _protection = Protection()
    #: The offload bound (bytes), None: values stay inline (see :meth:`_take_offload`).
    _offload: int | None = None
    #: Whether operations are recorded with OpenTelemetry when a provider is set, and whether
    #: their spans carry the State id (see :meth:`_observe`).
    _telemetry = True
    _trace_ids = False
    _eager = True  # operations start eagerly (statekeep._runtime.eager); not if the client needs its own Task

    def _lifecycle(
        self,
        namespace: str,
        retention: timedelta | float | None,
        clock: Clock | None = None,
        *,
        internal: bool = False,
        trim_compacted: bool = False,
    ) -> None:
        """Take the constructor's ``namespace``, ``retention``, ``clock`` and
        ``trim_compacted`` (checked)."""
        self.namespace = validate_namespace(namespace, internal=internal)
        if type(trim_compacted) is not bool:
            raise TypeError(f"trim_compacted must be True or False, got {trim_compacted!r}")
        self.trim_compacted = trim_compacted
        self.retention = None if retention is None else check_period(retention, "retention")
        if clock is not None:
            if not callable(clock):
                raise TypeError(f"clock must be a function returning an aware datetime, got {clock!r}")
            self._clock = clock

    def _protect(self, redact: object, encrypt: object, allow_plaintext: object) -> None:
        """Take the constructor's ``redact``, ``encrypt`` and ``allow_plaintext`` (checked)."""
        self._protection = Protection(redact, encrypt, allow_plaintext)

    def _observe(self, telemetry: object, trace_ids: object) -> None:
        """Take the constructor's ``telemetry`` and ``trace_ids`` (checked): whether the
        store's operations are recorded with OpenTelemetry (when a provider is set), and
        whether their spans name the State."""
        for name, value in (("telemetry", telemetry), ("trace_ids", trace_ids)):
            if type(value) is not bool:
                raise TypeError(f"{name} must be True or False, got {value!r}")
        self._telemetry = bool(telemetry)
        self._trace_ids = bool(trace_ids)

    def _take_offload(self, offload: object) -> None:
        """Take the constructor's ``offload`` (checked): values whose encoding exceeds it are
        stored once as blobs. Only a backend offering blobs may take a bound."""
        bound = check_offload(offload, type(self).__name__)
        if bound is not None and not isinstance(self, Blobs):
            raise ValueError(
                f"{type(self).__name__} stores no blobs (it lacks _get_blobs, _gc_blobs and _blob_usage): "
                "give offload=None"
            )
        self._offload = bound

    def _join(self, store: Engine, namespace: str) -> None:
        """Make this new instance ``store`` in another namespace of its storage (for a
        ``_sibling``): its clock, no retention, and its protection, so that agent memory and
        an adapter's States are redacted and sealed as the store's are."""
        self._lifecycle(namespace, None, store._clock, internal=True)
        self._protection = store._protection
        self._offload = store._offload
        self._telemetry, self._trace_ids = store._telemetry, store._trace_ids

    @property
    def _keyring(self) -> object:
        """The store's Keyring, or None: a store that copies on its side must not when set."""
        return self._protection.keyring

    def _now(self) -> datetime:
        """The time expiry is judged by (the store's clock; server stores override)."""
        return self._clock()

    def _check_open(self, value: Any) -> Any:
        """``value``, unless the store is closed (RuntimeError)."""
        if self._closed:
            raise RuntimeError(f"{self!r} is closed; open a new store to use it again")
        return value

    def _sid(self, state_id: str) -> str:
        """The opening of every call on one State: its id checked, the store open."""
        return self._check_open(validate_id(state_id))  # type: ignore[no-any-return]

    # -- required -------------------------------------------------------------------

    @abstractmethod
    def _storage_key(self) -> Hashable:
        """Equal for two instances that stand for the same storage."""
        raise NotImplementedError

    @abstractmethod
    async def _write(self, write: PreparedWrite) -> None:
        """Store a validated write (the State's lock is held). If it goes through a
        :class:`~statekeep._runtime.batching.GroupCommit`, submitting it must be the last thing it
        does: its caller is woken once the batch is committed (see ``direct`` in
        :func:`~statekeep._runtime.bridge.run_sync`). The same holds for ``_delete``."""
        raise NotImplementedError

    @abstractmethod
    async def _read(self, state_id: str, since: int = 0) -> Record | Callable[[], Record] | None:
        """The Record with the entries of seq >= ``since`` (checked: an int >= 0), or a
        function that builds it (called in the caller's thread). Its cost should grow with
        what it returns, not with the history."""
        raise NotImplementedError

    @abstractmethod
    async def _list(self) -> tuple[list[SavedState], list[str]]:
        """The listing, and a message for each State left out because it is unreadable."""
        raise NotImplementedError

    @abstractmethod
    async def _delete(self, state_id: str, lease: Lease | None = None) -> None:
        """Remove a State whole, if there is one (the State's lock is held), applying the
        fence (:func:`~statekeep._core.leases.check_fence`) atomically with the removal."""
        raise NotImplementedError

    async def _close(self) -> None:  # noqa: B027  # a backend that holds nothing needs no close
        """Release resources; runs on the owner loop. Nothing by default."""

    # -- defaults a backend may override ----------------------------------------------

    async def _select(self, query: ListQuery) -> tuple[Page, list[str]]:
        """One page of the listing: by default :meth:`_list` filtered and paged here
        (expired States left out); stores with indexes answer from them."""
        rows, skipped = await self._list()
        if not query.include_expired:
            now = self._now()
            rows = [row for row in rows if row.expires_at is None or row.expires_at > now]
        return select(rows, query), skipped

    async def _child_ids(self, state_id: str) -> list[str]:
        """The ids of ``state_id``'s children, expired ones too (a tree delete must reach
        the live States below an expired one)."""
        page, _ = await self._select(ListQuery(parent=state_id, include_expired=True))
        return [row.id for row in page]

    async def _read_snapshot(self, state_id: str) -> dict[str, Any] | None:
        """A State's snapshot alone (None if absent or expired); stores that can read it
        without the history override this (agent memory reads only snapshots)."""
        record = built(await self._read(state_id))
        if record is None or self._expired(record.snapshot):
            return None
        return record.snapshot

    async def _current_lease(self, state_id: str) -> Lease | None:
        """The State's live lease, or None (a store that cannot acquire has none)."""
        return None

    async def _server_now(self) -> datetime:
        """The time of the clock that judges expiry (server stores ask their server)."""
        return self._now()

    async def _count_expired(self) -> int:
        """How many States gc would remove now (a dry run)."""
        page, _ = await self._select(ListQuery(include_expired=True))
        now = await self._server_now()
        expired = [row.id for row in page if row.expires_at is not None and row.expires_at <= now]
        return sum([await self._current_lease(sid) is None for sid in expired])

    async def _gc(self, limit: int | None) -> int:
        """Remove expired States; by default each one found by :meth:`_list` is read again
        under its lock and deleted only if it is still expired."""
        rows, _ = await self._list()
        removed = 0
        for row in rows:
            if limit is not None and removed >= limit:
                break
            if row.expires_at is None or row.expires_at > self._now():
                continue
            async with owner().lock((self._storage_key(), row.id)):
                record = built(await self._read(row.id))
                if record is not None and self._expired(record.snapshot):
                    if await self._current_lease(row.id) is not None:
                        continue  # a live lease keeps an expired State: its worker is at it
                    await self._delete(row.id)
                    removed += 1
        return removed

    def _expired(self, snapshot: dict[str, Any] | None) -> bool:
        """Whether a read snapshot is past its expiry (then the State reads as absent)."""
        return expired_at(snapshot, self._now())

    def _stamp(self, snapshot: Snapshot) -> Snapshot:
        """With a ``retention``, stamp a snapshot that has no expiry of its own."""
        if self.retention is None or snapshot is None or snapshot.get("expires_at") is not None:
            return snapshot
        return {**snapshot, "expires_at": iso(self._now() + self.retention), "expiry": "retention"}

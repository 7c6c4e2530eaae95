"""What a store may offer beyond the :class:`~statekeep.Store` contract, each group asked
for by the features that use it (``isinstance(store, Reseal)``), never probed by name.

Each group is declared beside the feature that needs it, or here: :class:`Leases` in
:mod:`statekeep._leases.api`, :class:`Reseal` (for ``rekey``) in :mod:`statekeep._protect.rekey`.
The built-in stores offer every group, but :class:`ChangeStamps` and :class:`SizeOnDisk`
only on some (see :func:`capabilities`); a store of one's own (a :class:`~statekeep.Store`
subclass) offers none, and each feature says what it does then: it falls back (``copy
--all`` walks the listing, ``stats`` shows no size, agent memory reads whole records, the
viewer lists on every poll) or refuses clearly (``rekey``, ``memory()``, a lease). A group
is a set of methods; a backend offers it by defining them (these are runtime-checkable
protocols), so a base class must not define them with a default that says "no".

:class:`Records` is the part of the Store contract agent memory calls: it lives here, below
the Store class, so that agent memory need not import it (no import ring).
"""

from __future__ import annotations

from collections.abc import Hashable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, Self, Unpack, runtime_checkable

from .._leases.api import Leases, offers_leases
from .._protect.rekey import Reseal
from .blobs import Blobs

if TYPE_CHECKING:
    from .._core.query import ListFilters
    from .._core.records import Entries, Record, SavedState, Snapshot


class Records(Protocol):
    """The record operations of the Store contract (see :class:`~statekeep.Store`)."""

    async def awrite(
        self, state_id: str, entries: Entries, snapshot: Snapshot, *, create: bool = False
    ) -> None: ...

    async def aread(self, state_id: str, *, since: int = 0) -> Record | None: ...

    async def alist(self, **filters: Unpack[ListFilters]) -> list[SavedState]: ...


@runtime_checkable
class Namespaces(Protocol):
    """Other namespaces of the same storage: agent memory, the adapters' own namespaces,
    ``rekey`` and ``copy`` of agent memory."""

    namespace: str
    retention: timedelta | None

    def _sibling(self, namespace: str) -> Self:
        """This store in ``namespace`` of its storage: on its connections (closed with it),
        with its clock, redacted and sealed as it is, without retention. Build it with
        :meth:`~statekeep._store.engine.Engine._join`."""
        ...


@runtime_checkable
class IdWalk(Protocol):
    """Every State id the store holds, for ``copy --all``, ``export --all`` and ``stats``."""

    async def _state_ids(self) -> list[str] | None:
        """Every State id, in id order: those without a snapshot (which no listing shows)
        and expired ones too; None where the store cannot walk them now."""
        ...


@runtime_checkable
class SizeOnDisk(Protocol):
    """The space the store's data takes, for ``statekeep stats``."""

    async def _size_bytes(self) -> int | None:
        """The bytes the store takes where it keeps its data, every namespace counted, or
        None where that is not known."""
        ...


@runtime_checkable
class ChangeStamps(Protocol):
    """A cheap "nothing changed" for pollers (the viewer's runs feed;
    :mod:`~statekeep._store.changes`)."""

    async def _change_stamp(self) -> Hashable | None:
        """A value that differs after every create, delete, and write that changes a
        snapshot, read in constant time; or None when it cannot say now."""
        ...


@runtime_checkable
class Trims(Protocol):
    """Removing a State's first entries for a base record (``trim``, agent memory's keys)."""

    async def _trim(self, state_id: str, before: int, base: bytes, first: int) -> None:
        """Replace the entries of ``state_id`` before seq ``before`` with the encoded line
        ``base`` (ending in a newline) at seq ``before - 1``, keeping every later entry and the
        snapshot as they are, and reclaim the removed entries' space (the State's lock held).
        On return it is as durable as a write; a crash before leaves the State as it was or
        as trimmed, never between. LookupError if the State is gone, ValueError if it holds
        no seq ``before - 1``.

        ``first`` is the seq the State started at when the trim read it (0, or its base's
        seq): the State's lock is per process, so another process may have trimmed it since,
        and ``base`` (built from what was read) may refer to blobs that trim released.
        StateConflictError (:func:`~statekeep._core.writes.trimmed_meanwhile`), nothing
        changed, unless the State still starts at ``first``, checked atomically with the trim
        (in its transaction, script, or under its file lock)."""
        ...


@runtime_checkable
class SnapshotReads(Protocol):
    """A State's snapshot read without its history (agent memory, ``stats``)."""

    async def aread_snapshot(self, state_id: str) -> dict[str, Any] | None: ...


__all__ = [
    "GROUPS", "Blobs", "ChangeStamps", "IdWalk", "Leases", "Namespaces", "Records", "Reseal", "SizeOnDisk",
    "SnapshotReads", "Trims", "capabilities",
]  # fmt: skip

#: Each capability group by the name :func:`capabilities` gives it.
GROUPS: dict[str, type] = {
    "namespaces": Namespaces,
    "leases": Leases,
    "reseal": Reseal,
    "id_walk": IdWalk,
    "size": SizeOnDisk,
    "change_stamp": ChangeStamps,
    "snapshot_reads": SnapshotReads,
    "blobs": Blobs,
    "trim": Trims,
}


def capabilities(store: object) -> frozenset[str]:
    """The names of the capability groups ``store`` offers (see :data:`GROUPS`)."""
    return frozenset(
        name
        for name, group in GROUPS.items()
        if (offers_leases(store) if group is Leases else isinstance(store, group))
    )

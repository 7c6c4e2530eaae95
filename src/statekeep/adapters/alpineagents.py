"""``StatekeepStore``: an alpineagents ``Store`` that saves into any statekeep store.

Install with ``pip install 'statekeep[alpineagents]'`` (validated against alpineagents
0.7.1). Swap alpineagents' ``FileStore(path)`` for ``StatekeepStore(statekeep_store)``::

    agent = Agent(model=..., store=StatekeepStore(open_store("sqlite:///runs.db")))

Each alpineagents State is one statekeep State: its history entries (alpineagents' own
dicts, ``seq`` from 0) are statekeep's append-only entries, unchanged, and its info dict
(what alpineagents lists) is kept in the snapshot beside statekeep's listing keys, whose
``task`` is the alpineagents id (see :mod:`._alpine_snapshot`). Ids are mapped with
:func:`statekeep.adapters._ids.state_id_for` (``bug_1`` is stored as ``bug__1``).

Differences from alpineagents' FileStore:

- a string holding a lone surrogate is refused with a TypeError naming the entry and the
  place, and nothing is saved (FileStore writes it as a JSON escape);
- a *different* entry for a seq the store already holds raises ``StateConflictError`` (a
  ValueError) instead of being dropped: only two writers of one State cause that;
- ``list()`` shows only the States this adapter wrote, and reads each one's snapshot
  (not its history) to build its ``StateInfo``.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ._needs import framework_missing

try:
    from alpineagents.errors import fix_message  # type: ignore[import-untyped]  # no py.typed marker
    from alpineagents.state import check_id  # type: ignore[import-untyped]
    from alpineagents.store import Record, StateInfo, Store  # type: ignore[import-untyped]
except ImportError as exc:
    raise framework_missing("alpineagents", "alpineagents", "alpineagents", exc) from exc

from .._core.errors import StateExistsError, StateNotFoundError
from .._core.ranges import SNAPSHOT_ONLY
from .._core.records import SavedState
from .._store.contract import Store as StatekeepBase
from ._alpine_snapshot import LABELS, alpine_id_of, check_text, info_of, snapshot_for
from ._flow import Flow, Together, adrive, drive
from ._home import Home
from ._ids import state_id_for

__all__ = ["StatekeepStore"]

_EPOCH = datetime.min.replace(tzinfo=UTC)
#: How many snapshots ``alist`` reads at once.
_READS_AT_ONCE = 16


class StatekeepStore(Store):  # type: ignore[misc]  # alpineagents ships no type information
    """An alpineagents ``Store`` over a statekeep ``store`` (any backend, or your own).

    ``write``/``read``/``list``/``delete`` and their async twins ``awrite``/``aread``/
    ``alist``/``adelete`` follow alpineagents' Store contract; the async ones call
    statekeep's native coroutines, the sync ones statekeep's sync methods (usable from
    any thread). What is durable when a write returns is what ``store``'s ``write`` says
    (e.g. fsynced for FileStore and SQLite, committed for PostgreSQL).

    Two adapters over the same storage are equal (and hash alike), since alpineagents
    compares stores with ``==``: equality is the statekeep stores' own (built-in stores
    compare by storage: folder, database and namespace). The caller owns ``store``:
    closing it is the caller's business.

    Namespace: given a built-in store in its ``default`` namespace, the States are kept in
    its namespace ``alpineagents`` (:attr:`store`), apart from other frameworks and
    statekeep's own runs; a State saved in ``default`` before adapters had namespaces is
    still found and continued there. A store in a namespace you chose, or one without
    namespaces, is used as it is; ``namespace=`` picks another namespace.
    """

    def __init__(self, store: StatekeepBase, *, namespace: str | None = None) -> None:
        if not isinstance(store, StatekeepBase):
            raise TypeError(
                f"StatekeepStore needs a statekeep store (e.g. statekeep.open_store(url)), got {store!r}"
            )
        self._store = Home(store, namespace, "alpineagents", LABELS)

    @property
    def store(self) -> StatekeepBase:
        """The statekeep store the States are saved in: ``store`` in its namespace
        ``alpineagents`` (see the class), closed with it."""
        return self._store.store

    def __repr__(self) -> str:
        return f"StatekeepStore({self._store!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StatekeepStore):
            return NotImplemented
        return bool(self._store == other._store)

    def __hash__(self) -> int:
        return hash(self._store)

    # -- each method's body is a flow (see :mod:`._flow`), run by the sync method with the
    # statekeep store's sync methods and by its async twin awaiting its coroutines

    def write(
        self,
        state_id: str,
        entries: Sequence[dict[str, Any]],
        info: Mapping[str, Any],
        *,
        create: bool = False,
    ) -> None:
        """Append the entries the store lacks and replace the info (alpineagents' contract).

        Entries already held are skipped when equal; durable on return as the statekeep
        store's ``write`` says. ``create=True``: ValueError (``StateExistsError``) if the
        id exists, all or nothing. ``create=False``: LookupError (``StateNotFoundError``)
        for an unknown id. TypeError for a string with a lone surrogate, nothing saved.
        """
        drive(self._write(state_id, entries, info, create, "write"))

    async def awrite(
        self,
        state_id: str,
        entries: Sequence[dict[str, Any]],
        info: Mapping[str, Any],
        *,
        create: bool = False,
    ) -> None:
        """Async :meth:`write`, same contract and durability."""
        await adrive(self._write(state_id, entries, info, create, "awrite"))

    def _write(
        self,
        state_id: str,
        entries: Sequence[dict[str, Any]],
        info: Mapping[str, Any],
        create: bool,
        method: str,
    ) -> Flow[None]:
        check_id(state_id, f"StatekeepStore.{method}()")
        batch = list(entries)
        check_text(state_id, batch, info)
        snapshot = snapshot_for(state_id, info, datetime.now(UTC))
        try:
            yield from self._store.writing(state_id_for(state_id), batch, snapshot, create=create)
        except (StateExistsError, StateNotFoundError) as exc:
            raise self._advice(state_id, exc) from None

    def _advice(self, state_id: str, exc: Exception) -> Exception:
        if isinstance(exc, StateExistsError):
            return StateExistsError(
                fix_message(
                    f"a State with id {state_id!r} is already saved in {self!r}",
                    "continue it with store.load(id), or give the new State another id (or none, for a random one)",
                    f'state = store.load("{state_id}")\nagent.run(state)',
                )
            )
        return StateNotFoundError(f"no saved State with id {state_id!r} in {self!r} (was it deleted?)")

    def read(self, state_id: str) -> Record | None:
        """Every entry and the info saved for ``state_id``, or None if there is none.
        ValueError if a State of that id exists but was not written by this adapter."""
        return drive(self._read(state_id, "read"))

    async def aread(self, state_id: str) -> Record | None:
        """Async :meth:`read`."""
        return await adrive(self._read(state_id, "aread"))

    def _read(self, state_id: str, method: str) -> Flow[Record | None]:
        sid = state_id_for(check_id(state_id, f"StatekeepStore.{method}()"))
        found = yield from self._store.reading(sid)
        if found is None:
            return None
        info = info_of(state_id, found.snapshot)
        if info is None:
            raise ValueError(
                f"State {sid!r} in {self._store!r} is not an alpineagents State saved "
                f"by StatekeepStore, so it cannot be read as {state_id!r}"
            )
        return Record(found.entries, info)

    def list(self) -> builtins.list[StateInfo]:
        """Every alpineagents State in the store, most recently updated first (alpineagents'
        order: States with no history last). Reads one snapshot per State, no history."""
        return drive(self._list())

    async def alist(self) -> builtins.list[StateInfo]:
        """Async :meth:`list`; reads up to 16 snapshots at once."""
        return await adrive(self._list())

    def _list(self) -> Flow[builtins.list[StateInfo]]:
        rows = yield from self._store.listing(labels=LABELS)
        found: builtins.list[StateInfo | None] = []
        for start in range(0, len(rows), _READS_AT_ONCE):  # (the sync API reads one by one)
            chunk = rows[start : start + _READS_AT_ONCE]
            records = yield Together([self._store.reading(row.id, SNAPSHOT_ONLY) for row in chunk])
            found += [
                _info_row(row, None if rec is None else rec.snapshot)
                for row, rec in zip(chunk, records, strict=True)
            ]
        infos = [info for info in found if info is not None]
        infos.sort(key=lambda info: info.updated_at or _EPOCH, reverse=True)
        return infos

    def delete(self, state_id: str) -> None:
        """Delete one State; nothing happens if there is none. Durable on return as the
        statekeep store's ``delete`` says."""
        drive(self._delete(state_id, "delete"))

    async def adelete(self, state_id: str) -> None:
        """Async :meth:`delete`."""
        await adrive(self._delete(state_id, "adelete"))

    def _delete(self, state_id: str, method: str) -> Flow[None]:
        yield from self._store.deleting(state_id_for(check_id(state_id, f"StatekeepStore.{method}()")))


def _info_row(row: SavedState, snapshot: dict[str, Any] | None) -> StateInfo | None:
    """The StateInfo of a listed State, or None if it went away (or is not ours)."""
    alpine_id = alpine_id_of(snapshot)
    info = None if alpine_id is None else info_of(alpine_id, snapshot)
    if alpine_id is None or info is None or state_id_for(alpine_id) != row.id:
        return None
    return StateInfo.from_info(alpine_id, info)

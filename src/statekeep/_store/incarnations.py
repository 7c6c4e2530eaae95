"""A State's incarnation, as a store's client knows it: which one a write is sealed for.

Every State gets a random incarnation id when it is created (:func:`~._ids.new_incarnation`),
kept by the store beside it and never changed by a later write; a State deleted and
created again under the same id has a new one. Sealed records are bound to it (see
:mod:`._sealing`), so a record of an earlier State of the id fails to open.

A sealed append must be sealed for the State's current incarnation: the caller gives it
(``save`` passes the State's), or the store's client knows it from an earlier read or write
of this store object (:class:`Known`), or reads it (once). The write then carries it, and
the store refuses it in its atomic step if the State was created again meanwhile
(:func:`~._expect.check_incarnation`): nothing unreadable is ever written. Unsealed
appends carry none unless the caller gives one, and cost nothing more.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from .._core.errors import StateConflictError
from .._core.ids import new_incarnation, validate_id, validate_incarnation
from .._core.leases import Lease, check_lease
from .._core.ranges import SNAPSHOT_ONLY
from .._core.records import Entries, Record, Snapshot, built
from .._core.writes import PreparedWrite
from .._protect.protection import Protection
from .._runtime.bridge import run_async

#: How many States' incarnations a store object remembers (then it starts again).
_REMEMBERED = 4096

#: (incarnation, bound) of a write: what it is sealed for, and whether the store checks it.
Binding = tuple[str | None, bool]
_UNBOUND: Binding = (None, False)


def incarnated(store: Any, incarnation: str | None) -> dict[str, Any]:
    """``incarnation=`` for a store's write, only when given and its ``awrite`` takes it (a
    store of one's own written against the public API keeps working)."""
    return {} if incarnation is None or not takes_incarnation(type(store)) else {"incarnation": incarnation}


_TAKES: dict[Any, bool] = {}


def takes_incarnation(cls: Any) -> bool:
    """Whether a store class's ``awrite`` keeps incarnations (takes ``incarnation=``)."""
    found = _TAKES.get(cls)
    if found is None:
        found = _TAKES[cls] = "incarnation" in inspect.signature(cls.awrite).parameters
    return found


class Known:
    """The incarnations a store object saw, by State id (None: a State created before
    incarnations). Only a hint: the store checks the write's against its own."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: dict[str, str | None] = {}

    def binding(self, state_id: str, create: bool, given: object, sealed: bool) -> Binding | None:
        """The write's binding, or None when it must be learned first (:meth:`Incarnated._alearn`).

        A create stores ``given`` or a new one; an append given one is bound to it; a
        sealed append is bound to the one known, else to one read; an unsealed one to none.
        """
        validate_id(state_id)
        incarnation = validate_incarnation(given)
        if create:
            return (incarnation or new_incarnation(), False)
        if incarnation is not None:
            return (incarnation, True)
        if not sealed:
            return (None, False)
        if state_id in self._ids:
            return (self._ids[state_id], True)
        return None

    def put(self, state_id: str, incarnation: str | None) -> None:
        if len(self._ids) >= _REMEMBERED and state_id not in self._ids:
            self._ids.clear()
        self._ids[state_id] = incarnation

    def drop(self, state_id: str) -> None:
        self._ids.pop(state_id, None)

    def watching(self, write: PreparedWrite) -> Watching:
        """``with`` this around ``write``: remember the incarnation of a write that went
        through; forget the State's after a conflict (it may have been created again)."""
        return Watching(self, write)


class Watching:
    """:meth:`Known.watching` (a plain context manager: it is on every write's path)."""

    __slots__ = ("_known", "_write")

    def __init__(self, known: Known, write: PreparedWrite) -> None:
        self._known = known
        self._write = write

    def __enter__(self) -> None:
        pass

    def __exit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> None:
        write = self._write
        if kind is None:
            if write.create or write.bound:
                self._known.put(write.state_id, write.incarnation)
        elif issubclass(kind, StateConflictError):
            self._known.drop(write.state_id)


class Incarnated:
    """The part of the built-in stores' base that binds each write to an incarnation (a
    mixin: the store supplies the attributes declared here)."""

    namespace: str
    _protection: Protection
    _offload: int | None

    def _check_open(self, value: Any) -> Any:
        raise NotImplementedError

    def _stamp(self, snapshot: Snapshot) -> Snapshot:
        raise NotImplementedError

    async def _read(self, state_id: str, since: int = 0) -> Record | Callable[[], Record] | None:
        raise NotImplementedError

    @property
    def _known(self) -> Known:
        """The incarnations this store object saw (made on first use)."""
        known: Known | None = self.__dict__.get("_known_ids")
        if known is None:
            known = self.__dict__["_known_ids"] = Known()
        return known

    def _binding(self, state_id: str, create: bool, incarnation: object) -> Binding | None:
        """The binding of a write given ``incarnation=`` (with ``create=True``, the id the new
        State gets, default a new one; else the State's, :attr:`Record.incarnation`, this
        write continues: StateConflictError if it was deleted and created again), or None
        when it must be learned first (:meth:`_alearn`; see :meth:`Known.binding`)."""
        sealed = self._protection.keyring is not None
        if not (sealed or create or incarnation is not None):
            validate_id(self._check_open(state_id))  # an unsealed append given none: bound to none
            return _UNBOUND
        return self._known.binding(self._check_open(state_id), create, incarnation, sealed)

    async def _alearn(self, state_id: str) -> Binding:
        """A sealed append's binding: the State's incarnation, read (its snapshot, no entries)
        on the owner loop."""
        record = built(await run_async(self._read(state_id, SNAPSHOT_ONLY)))
        return (None if record is None else record.incarnation, True)

    def _prepared(
        self,
        state_id: str,
        entries: Entries,
        snapshot: Snapshot,
        create: bool,
        lease: Lease | None,
        binding: Binding = (None, False),
    ) -> PreparedWrite:
        """A write redacted, checked, encoded and sealed for its binding, in the caller's thread."""
        stamped = self._stamp(snapshot)
        write = self._protection.write(
            self.namespace, state_id, entries, stamped, create, *binding, offload=self._offload
        )
        if lease is not None:
            write = dataclasses.replace(write, lease=check_lease(lease, state_id, self.namespace))
        return write

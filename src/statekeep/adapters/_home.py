"""Where an adapter keeps its States: a namespace of its own, and ``default`` for older ones.

Given a built-in store in its ``default`` namespace, an adapter keeps its States in the
namespace named after its framework (``langgraph``, ``openai-agents``, ``alpineagents``) of
the same storage, so frameworks sharing one folder or database never meet, and never meet
the States of statekeep's own Agent. An id missing there is looked up in ``default``, where
adapters kept their States before they had namespaces: a State found there (one the adapter
wrote: it carries the adapter's label) is read, written and deleted there, so threads and
sessions saved earlier keep working. A store in a namespace you chose, or a store without
namespaces (one of your own), is used as it is; ``namespace=`` picks another one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, TypeVar

from .._core.errors import StateNotFoundError
from .._core.labels import DEFAULT_NAMESPACE, validate_namespace
from .._core.ranges import SNAPSHOT_ONLY
from .._core.records import Record, SavedState
from .._store.capabilities import Namespaces
from .._store.contract import Store
from ._flow import Call, Flow

S = TypeVar("S", bound=Namespaces)


def placed(store: Store, namespace: str | None, own: str) -> tuple[Store, Store | None]:
    """``(where the adapter keeps its States, where older ones may be)`` for ``store``."""
    if namespace is not None:
        validate_namespace(namespace)
        if not isinstance(store, Namespaces):
            raise TypeError(
                f"namespace={namespace!r} needs a store with namespaces (a built-in one); {store!r} has "
                "none: leave namespace out, and the adapter keeps its States in the store as it is"
            )
        return (store if namespace == store.namespace else _in_namespace(store, namespace)), None
    if isinstance(store, Namespaces) and store.namespace == DEFAULT_NAMESPACE:
        return _in_namespace(store, own), store
    return store, None


def _in_namespace(store: S, namespace: str) -> S:
    """``store`` in another namespace of its storage, with its retention and protections
    (closed with ``store``)."""
    other = store._sibling(namespace)
    other.retention = store.retention
    return other


class Home:
    """The store calls an adapter makes (``read``, ``write``, ``delete``, ``iter_states``), as
    flows (:mod:`._flow`) its sync and async methods both run, made in its namespace, or in ``default`` for a State the adapter
    wrote there before it had a namespace of its own. Safe to share between threads."""

    REMEMBERED = 1024

    def __init__(self, store: Store, namespace: str | None, own: str, labels: Mapping[str, str]) -> None:
        #: Where the adapter keeps its States (and creates new ones).
        self.store, self.older = placed(store, namespace, own)
        self._labels = dict(labels)
        self._there: dict[str, None] = {}  # ids found in ``older`` lately (bounded, oldest first)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return repr(self.store)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Home):
            return NotImplemented
        return bool(self.store == other.store)  # where States are saved: what alpineagents compares

    def __hash__(self) -> int:
        return hash(self.store)

    # -- which store holds an id --------------------------------------------------------

    def _found(self, state_id: str, record: Record | None) -> Record | None:
        """``record`` (read from ``older``) if the adapter wrote it; remembers where it is."""
        labels = (record.snapshot or {}).get("labels") if record is not None else None
        ours = isinstance(labels, dict) and all(labels.get(k) == v for k, v in self._labels.items())
        with self._lock:
            if not ours:
                self._there.pop(state_id, None)
                return None
            if len(self._there) >= self.REMEMBERED and state_id not in self._there:
                del self._there[next(iter(self._there))]
            self._there[state_id] = None
        return record

    def _forget(self, state_id: str) -> None:
        with self._lock:
            self._there.pop(state_id, None)

    def _target(self, state_id: str) -> Store:
        return self.older if self.older is not None and state_id in self._there else self.store

    # -- the calls ------------------------------------------------------------------------

    def reading(self, state_id: str, since: int = 0) -> Flow[Record | None]:
        found = yield Call(self.store, "read", (state_id,), {"since": since})
        if found is not None or self.older is None:
            self._forget(state_id)
            return found  # type: ignore[no-any-return]
        return self._found(state_id, (yield Call(self.older, "read", (state_id,), {"since": since})))

    def writing(
        self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False, **more: Any
    ) -> Flow[None]:
        target = self._target(state_id)
        if (
            create
            and self.older is not None
            and target is self.store
            and (yield from self._in_older(state_id))
        ):
            target = self.older  # taken there: the create is refused where it is
        kwargs = {"create": create, **more}
        try:
            yield Call(target, "write", (state_id, entries, snapshot), kwargs)
        except StateNotFoundError:
            if target is not self.store or not (yield from self._in_older(state_id)):
                raise
            assert self.older is not None
            yield Call(self.older, "write", (state_id, entries, snapshot), kwargs)

    def _in_older(self, state_id: str) -> Flow[bool]:
        if self.older is None:
            return False
        found = yield Call(self.older, "read", (state_id,), {"since": SNAPSHOT_ONLY})
        return self._found(state_id, found) is not None

    def deleting(self, state_id: str) -> Flow[None]:
        yield Call(self.store, "delete", (state_id,))
        if (yield from self._in_older(state_id)):
            assert self.older is not None
            yield Call(self.older, "delete", (state_id,))
        self._forget(state_id)

    def listing(self, **filters: Any) -> Flow[list[SavedState]]:
        """Every State in the adapter's namespace, then those of ``older`` it lacks."""
        rows: list[SavedState] = yield Call(self.store, "iter_states", (), filters, rows=True)
        if self.older is not None:
            seen = {row.id for row in rows}
            more: list[SavedState] = yield Call(self.older, "iter_states", (), filters, rows=True)
            rows += [row for row in more if row.id not in seen]
        return rows

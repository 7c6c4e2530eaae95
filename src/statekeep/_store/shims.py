"""What :class:`~statekeep.Store` fills in for a store of one's own written against an older
or smaller contract, and the keywords it passes such a store only when it takes them.

A subclass's ``read``/``aread`` without ``since`` reads whole and cuts (:func:`with_since`);
its ``list``/``alist`` without the query's filters lists all and filters and pages on this
side, by the same rules (:func:`with_query`); its ``delete``/``adelete`` without ``children``
deletes a tree one State at a time, deepest first (:func:`with_children`). ``expect_next``
cannot be filled in (it must be checked atomically with the write): a store without it is
never given it by ``save`` and the adapters, and refuses it when asked directly.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._core.query import takes_no_query, with_query
from .._core.ranges import with_since
from .._leases.api import offers_leases
from .._runtime.bridge import run_sync
from .expect import expecting, takes_expect_next
from .incarnations import incarnated

if TYPE_CHECKING:
    from .._core.leases import Lease
    from .._run.state import State

F = TypeVar("F", bound=Callable[..., Any])
__all__ = [
    "adelete_tree", "expected", "expecting", "fill_in", "leased", "no_leases", "save_options", "with_children",
]  # fmt: skip


def fill_in(cls: type) -> None:
    """Wrap the methods ``cls`` defines itself that lack a part of the contract."""
    for name in ("read", "aread"):
        method = cls.__dict__.get(name)
        if method is not None and "since" not in inspect.signature(method).parameters:
            setattr(cls, name, with_since(method))
    for name in ("list", "alist"):
        method = cls.__dict__.get(name)
        if method is not None and takes_no_query(method):
            setattr(cls, name, with_query(method))
    for name in ("delete", "adelete"):
        method = cls.__dict__.get(name)
        if method is not None and "children" not in inspect.signature(method).parameters:
            setattr(cls, name, with_children(method))


def with_children(method: F) -> F:
    """Wrap a store's ``delete(self, state_id)`` or ``adelete`` written without ``children``
    (and leases): ``children=True`` walks the tree with the store's listing (as
    :meth:`Store.adelete` does) and deletes each State with ``method``."""
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def adelete(
            self: Any, state_id: str, *, children: bool = False, lease: Lease | None = None
        ) -> None:
            if children:
                await adelete_tree(self, state_id, lease)  # each via this one
                return
            no_leases(self, lease)
            await method(self, state_id)

        return adelete  # type: ignore[return-value]

    @functools.wraps(method)
    def delete(self: Any, state_id: str, *, children: bool = False, lease: Lease | None = None) -> None:
        if children:
            run_sync(adelete_tree(self, state_id, lease), "adelete")
            return
        no_leases(self, lease)
        method(self, state_id)

    return delete  # type: ignore[return-value]


async def adelete_tree(store: Any, root: str, lease: Lease | None) -> None:
    """Delete ``root`` and every State below it, the deepest first, each with the store's
    ``adelete`` (``lease`` is the root's): :meth:`Store.adelete` with ``children=True``."""
    for sid in await store._atree(root):
        await store.adelete(sid, **leased(lease if sid == root else None))


def leased(lease: Lease | None) -> dict[str, Any]:
    """``lease=`` for a call, only when given (a store of one's own need not take it)."""
    return {} if lease is None else {"lease": lease}


def save_options(store: object, lease: Lease | None, state: State) -> dict[str, Any]:
    """What ``save`` passes ``store``'s write: the lease, the State's incarnation and its
    ``expect_next``, each only when there is one and the store takes it."""
    return {
        **leased(lease),
        **incarnated(store, state.incarnation),
        **expecting(store, state._expected_next()),
    }


def expected(store: object, expect_next: int | None, other: str) -> dict[str, Any]:
    """``expect_next=`` for the other side of a store of one's own: only when given, and
    NotImplementedError when that side does not take it (a precondition cannot be emulated)."""
    if expect_next is None:
        return {}
    if not takes_expect_next(store):
        raise NotImplementedError(
            f"{type(store).__name__}.{other}() does not take expect_next: add the parameter and "
            "check it atomically with the write, or write without it"
        )
    return {"expect_next": expect_next}


def no_leases(store: object, lease: Lease | None) -> None:
    """NotImplementedError for a lease given to a store without leases."""
    if lease is not None and not offers_leases(store):
        raise NotImplementedError(f"{type(store).__name__} does not support leases")

"""A store's change stamp: how a poller (the viewer's runs feed) tells cheaply that nothing
a listing shows has changed since it last looked, so that it need not list again.

A store offers it as ``async def _change_stamp(self) -> Hashable | None``
(:class:`~statekeep._store.capabilities.ChangeStamps`): a value that
differs after every create, delete, and write that changes a snapshot (a listing row), read
in constant time; or None when it cannot say now (then the poller lists). A stamp may move
when nothing changed (that costs one listing); where one can stay as it was across a change
the store says so in its docs, and pollers list now and then whatever the stamp says.
Stores without the method (the server stores, whose listing by ``updated_after`` is already
one index range read, and stores written against the public API) always give None.
"""

from __future__ import annotations

from collections.abc import Hashable

from .capabilities import ChangeStamps


async def change_stamp(store: object) -> Hashable | None:
    """``store``'s change stamp (see the module's docstring), None if it has none."""
    return await store._change_stamp() if isinstance(store, ChangeStamps) else None

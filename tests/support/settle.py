"""Waiting until statekeep's owner loop has settled, for the tests of dropped stores and of
what an operation leaves behind."""

from __future__ import annotations

import asyncio
import gc
import warnings

from statekeep import Store
from statekeep._runtime import bridge


def drop_and_collect(stores: list[Store]) -> list[str]:
    """Drop the caller's ``stores`` (the list is emptied), collect garbage, and wait until
    statekeep's loop has closed what they held. Returns the ResourceWarnings raised."""
    # The loop may still be leaving the step that settled the caller's last call, its frame
    # holding that store: one more call through the loop waits until it has left.
    owner_loop_settled()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stores.clear()
        gc.collect()
    owner_loop_settled()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


def owner_loop_settled() -> None:
    """Wait until statekeep's owner loop has finished every task it was given."""

    async def others_done() -> None:
        me = asyncio.current_task()
        while others := [t for t in bridge.owner().tasks if t is not me]:
            await asyncio.wait(others)

    bridge.run_sync(others_done(), "others_done")


def warnings_once_settled() -> list[str]:
    """The warnings raised while the owner loop settles and garbage is collected: a dropped
    operation's coroutine left unawaited would show here ("coroutine ... was never awaited")."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        owner_loop_settled()
        gc.collect()
    return [str(w.message) for w in caught]

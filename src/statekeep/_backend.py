"""What the built-in stores share: checks, the hop to the owner loop, per-State locks.

A built-in store implements four coroutines that run on the owner loop: ``_write`` (with
the State's lock held), ``_read``, ``_list`` and ``_delete`` (lock held). The public
methods validate the id and encode the data in the caller's thread first, so bad input
fails before any storage is touched.
"""

from __future__ import annotations

import warnings
from abc import abstractmethod
from collections.abc import Callable, Hashable
from typing import Any

from ._bridge import owner, run_async, run_sync
from ._ids import validate_id
from ._records import Entries, Record, SavedState, Snapshot
from ._store import Store
from ._writes import PreparedWrite, prepare_write


class Backend(Store):
    """The base of the built-in stores; private (third-party stores subclass :class:`Store`).

    On top of :class:`Store` it gives: ids and data validated and encoded in the caller's
    thread before any storage is touched; every call run on statekeep's owner loop; a lock
    per (storage, State id) held around ``_write`` and ``_delete``; a RuntimeError for any
    call after ``close()``; equality and hashing by the storage (``_storage_key``); and
    ``list()`` warnings for States it leaves out. A subclass implements the abstract
    coroutines below, which run on the owner loop.
    """

    _closed = False

    # -- to implement ---------------------------------------------------------------

    @abstractmethod
    def _storage_key(self) -> Hashable:
        """Equal for two instances that stand for the same storage."""
        raise NotImplementedError

    @abstractmethod
    async def _write(self, write: PreparedWrite) -> None:
        """Store a validated write (the State's lock is held). If it goes through a
        :class:`~statekeep._batching.GroupCommit`, submitting it must be the last thing it
        does: its caller is woken once the batch is committed (see ``direct`` in
        :func:`~statekeep._bridge.run_sync`). The same holds for ``_delete``."""
        raise NotImplementedError

    @abstractmethod
    async def _read(self, state_id: str) -> Record | Callable[[], Record] | None:
        """The Record, or a function that builds it (called in the caller's thread)."""
        raise NotImplementedError

    @abstractmethod
    async def _list(self) -> tuple[list[SavedState], list[str]]:
        """The listing, and a message for each State left out because it is unreadable."""
        raise NotImplementedError

    @abstractmethod
    async def _delete(self, state_id: str) -> None:
        """Remove a State whole, if there is one (the State's lock is held)."""
        raise NotImplementedError

    async def _close(self) -> None:
        """Release resources; runs on the owner loop. Nothing by default."""

    # -- the public API -------------------------------------------------------------

    async def awrite(
        self, state_id: str, entries: Entries, snapshot: Snapshot, *, create: bool = False
    ) -> None:
        write = prepare_write(state_id, entries, snapshot, create)
        await run_async(self._locked_write(self._check_open(write)), direct=True)

    def write(self, state_id: str, entries: Entries, snapshot: Snapshot, *, create: bool = False) -> None:
        write = prepare_write(state_id, entries, snapshot, create)
        run_sync(self._locked_write(self._check_open(write)), "awrite", direct=True)

    async def aread(self, state_id: str) -> Record | None:
        return _built(await run_async(self._read(self._check_open(validate_id(state_id)))))

    def read(self, state_id: str) -> Record | None:
        return _built(run_sync(self._read(self._check_open(validate_id(state_id))), "aread"))

    async def alist(self) -> list[SavedState]:
        self._check_open(None)
        return _warn_skipped(await run_async(self._list()))

    def list(self) -> list[SavedState]:
        self._check_open(None)
        return _warn_skipped(run_sync(self._list(), "alist"))

    async def adelete(self, state_id: str) -> None:
        await run_async(self._locked_delete(self._check_open(validate_id(state_id))), direct=True)

    def delete(self, state_id: str) -> None:
        run_sync(self._locked_delete(self._check_open(validate_id(state_id))), "adelete", direct=True)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await run_async(self._close())

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            run_sync(self._close(), "aclose")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Backend):
            return NotImplemented
        return type(self) is type(other) and self._storage_key() == other._storage_key()

    def __hash__(self) -> int:
        return hash((type(self), self._storage_key()))

    # -- plumbing -------------------------------------------------------------------

    def _check_open(self, value: Any) -> Any:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed; open a new store to use it again")
        return value

    async def _locked_write(self, write: PreparedWrite) -> None:
        async with owner().lock((self._storage_key(), write.state_id)):
            await self._write(write)

    async def _locked_delete(self, state_id: str) -> None:
        async with owner().lock((self._storage_key(), state_id)):
            await self._delete(state_id)


def _built(result: Record | Callable[[], Record] | None) -> Record | None:
    return result() if callable(result) else result


def _warn_skipped(result: tuple[list[SavedState], list[str]]) -> list[SavedState]:
    rows, skipped = result
    for message in skipped:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    return rows

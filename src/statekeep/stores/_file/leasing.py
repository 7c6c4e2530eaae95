"""FileStore's lease hooks and its reseal (``rekey``): rows in ``.leases/`` changed under
the namespace's and the State's flocks (see :mod:`.leases`), the fence for creates and deletes, a log
replaced whole (see :mod:`.reseal`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import cast

from ..._core.leases import Lease, acquired, check_fence, is_live, released, renewed
from ..._runtime.bridge import owner
from .copies import Copies
from .folder import StoreFolder
from .handles import SpaceHandles
from .leases import LeaseRows, row_lock
from .recovery import Tail
from .reseal import reseal

Change = Callable[[Lease | None, datetime], Lease | None]


class FileLeasing:
    """The lease and reseal hooks of :class:`~.store.FileStore`, mixed into it."""

    _folder: StoreFolder
    _leases: LeaseRows
    _tails: dict[str, Tail]
    _handles: SpaceHandles
    _copies: Copies
    _now: Callable[[], datetime]  # Backend's: the store's clock, which judges leases
    namespace: str

    def _fence(self, sid: str, lease: Lease | None, doing: str, root: int) -> bool:
        """Apply the fence to a create or delete of ``sid`` (raises if refused)."""
        check_fence(sid, self._leases.read(root, sid), lease, self._now(), doing)
        return False

    def _leased(self, sid: str, root: int) -> bool:
        """Does ``sid`` have a live lease? (gc leaves it: its worker is at it.)"""
        return is_live(self._leases.read(root, sid), self._now())

    # -- leases: rows in .leases/, under the namespace's and State's flocks (.leases) --

    async def _acquire(self, state_id: str, owner: str, ttl: timedelta) -> Lease:
        def take(held: Lease | None, now: datetime) -> Lease:
            return acquired(state_id, owner, ttl, held, now, self.namespace)

        return cast(Lease, await self._change_lease(state_id, take))

    async def _renew(self, lease: Lease, ttl: timedelta) -> Lease:
        def extend(held: Lease | None, now: datetime) -> Lease:
            return renewed(lease, held, ttl, now)

        return cast(Lease, await self._change_lease(lease.state_id, extend))

    async def _release(self, lease: Lease) -> None:
        def end(held: Lease | None, now: datetime) -> Lease | None:
            return released(lease, held, now)

        await self._change_lease(lease.state_id, end)

    async def _change_lease(
        self, sid: str, change: Callable[[Lease | None, datetime], Lease | None]
    ) -> Lease | None:
        return await owner().io.run(self._changed_lease, sid, change)

    def _changed_lease(
        self, sid: str, change: Callable[[Lease | None, datetime], Lease | None]
    ) -> Lease | None:
        root = self._folder.open_root(create=True)
        assert root is not None
        try:
            with row_lock(self._folder, root, sid):
                new = change(self._leases.read(root, sid), self._now())
                if new is not None:
                    self._leases.write(root, new)
                return new
        finally:
            os.close(root)

    async def _reseal(
        self, state_id: str, entries: dict[int, tuple[bytes, bytes]], snapshot: tuple[bytes, bytes] | None
    ) -> int:
        # A new log renamed over the old one, under the State's flock (see .reseal).
        self._handles.drop(state_id)
        self._copies.forget(state_id)
        try:
            return await owner().io.run(reseal, self._folder, self._tails, state_id, entries, snapshot)
        except OSError as exc:
            self._folder.name_paths(exc, state_id)
            raise

    async def _current_lease(self, state_id: str) -> Lease | None:
        return await owner().io.run(self._read_lease, state_id)

    def _read_lease(self, sid: str) -> Lease | None:
        root = self._folder.open_root(create=False)
        if root is None:
            return None
        try:
            held = self._leases.read(root, sid)  # one file, replaced whole: no lock needed
        finally:
            os.close(root)
        return held if is_live(held, self._now()) else None

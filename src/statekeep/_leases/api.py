"""The lease API of the built-in stores: acquire, renew, release, and who holds a State.

Each call runs on the owner loop under the State's lock, and each store implements the
four hooks against its storage (one lease row per State; see :mod:`statekeep._core.leases`).
"""

from __future__ import annotations

from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from .._core.ids import validate_id
from .._core.leases import Lease, check_owner, check_ttl, given_lease
from .._runtime.bridge import run_async, run_sync

T = TypeVar("T")


class Leasing:
    """Fenced leases, mixed into the built-in stores' base."""

    namespace: str

    def _check_open(self, value: Any) -> Any:
        raise NotImplementedError

    async def _locked(self, state_id: str, work: Coroutine[Any, Any, T]) -> T:
        raise NotImplementedError

    # -- the hooks each store implements (the State's lock is held) -----------------

    async def _acquire(self, state_id: str, owner: str, ttl: timedelta) -> Lease:
        """Take the State's lease (the lock is held); LeaseHeldError while one is live."""
        raise NotImplementedError(f"{type(self).__name__} does not support leases")

    async def _renew(self, lease: Lease, ttl: timedelta) -> Lease:
        """Extend a current, live lease; StaleLeaseError otherwise."""
        raise NotImplementedError(f"{type(self).__name__} does not support leases")

    async def _release(self, lease: Lease) -> None:
        """End the lease if it is current and live (keeping its token); else nothing."""
        raise NotImplementedError(f"{type(self).__name__} does not support leases")

    async def _reseal(
        self, state_id: str, entries: dict[int, tuple[bytes, bytes]], snapshot: tuple[bytes, bytes] | None
    ) -> int:
        """Replace stored records of ``state_id`` in place, for ``rekey`` (the lock is held).

        ``entries`` maps a seq to ``(old, new)``: the stored entry as read (encoded JSON,
        no newline) and what replaces it; ``snapshot`` likewise (or None). Each record is
        replaced only where the store still holds ``old`` (compared as JSON), all in one
        transaction (or one atomic file replacement) under the store's cross-process lock,
        so a writer appending meanwhile loses nothing. No fence: the plaintext is unchanged.
        Returns how many records were replaced.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support rekey")

    async def _current_lease(self, state_id: str) -> Lease | None:
        """The State's live lease, or None."""
        return None  # a store that cannot acquire has no live leases

    # -- the API ------------------------------------------------------------------------

    async def aacquire(self, state_id: str, owner: str, ttl: float | timedelta) -> Lease:
        """Take the lease of ``state_id`` (created or not) for ``owner``, for ``ttl``
        (seconds or a timedelta): the right to write it until ``expires_at``.

        :class:`LeaseHeldError` names the holder and its expiry while another live lease
        exists (the same owner too: renew instead). The new lease's ``token`` is greater
        than every token the State had before. Durable on return as the store's writes are:
        a crash after it returns never hands the same token out again.
        """
        sid = self._check_open(validate_id(state_id))
        period = check_ttl(ttl)
        return await run_async(self._locked(sid, self._acquire(sid, check_owner(owner), period)))

    def acquire(self, state_id: str, owner: str, ttl: float | timedelta) -> Lease:
        """Sync :meth:`aacquire`."""
        sid = self._check_open(validate_id(state_id))
        period = check_ttl(ttl)
        return run_sync(self._locked(sid, self._acquire(sid, check_owner(owner), period)), "aacquire")

    async def arenew(self, lease: Lease, ttl: float | timedelta | None = None) -> Lease:
        """Extend ``lease`` to ``ttl`` from now (default: the period it was taken for) and
        return it with its new ``expires_at`` (same token). :class:`StaleLeaseError` if it
        expired, was released or was taken over: stop the work it guarded. Durable on return
        as the store's writes are."""
        held = self._check_open(given_lease(lease, namespace=self.namespace))
        period = held.ttl if ttl is None else check_ttl(ttl)
        return await run_async(self._locked(held.state_id, self._renew(held, period)))

    def renew(self, lease: Lease, ttl: float | timedelta | None = None) -> Lease:
        """Sync :meth:`arenew`."""
        held = self._check_open(given_lease(lease, namespace=self.namespace))
        period = held.ttl if ttl is None else check_ttl(ttl)
        return run_sync(self._locked(held.state_id, self._renew(held, period)), "arenew")

    async def arelease(self, lease: Lease) -> None:
        """End ``lease`` now if it is still current (its token is kept: the next acquire
        gets a greater one); a lease already expired or taken over is left alone. Durable on
        return as the store's writes are."""
        held = self._check_open(given_lease(lease, namespace=self.namespace))
        await run_async(self._locked(held.state_id, self._release(held)))

    def release(self, lease: Lease) -> None:
        """Sync :meth:`arelease`."""
        held = self._check_open(given_lease(lease, namespace=self.namespace))
        run_sync(self._locked(held.state_id, self._release(held)), "arelease")

    async def acurrent_lease(self, state_id: str) -> Lease | None:
        """The live lease of ``state_id`` (who holds it, until when), or None."""
        sid = self._check_open(validate_id(state_id))
        return await run_async(self._current_lease(sid))

    def current_lease(self, state_id: str) -> Lease | None:
        """Sync :meth:`acurrent_lease`."""
        sid = self._check_open(validate_id(state_id))
        return run_sync(self._current_lease(sid), "acurrent_lease")

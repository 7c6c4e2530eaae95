"""The lease API of the built-in stores: acquire, renew, release, and who holds a State.

Each call runs on the owner loop under the State's lock, and each store implements the
four hooks against its storage (one lease row per State; see :mod:`statekeep._core.leases`).
"""

from __future__ import annotations

from collections.abc import Coroutine
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from .._core.leases import Lease, check_owner, check_ttl, given_lease
from .._runtime.bridge import run_async, run_sync

T = TypeVar("T")


@runtime_checkable
class Leases(Protocol):
    """Fenced leases as a capability: the public lease API. A store of your own offers it by
    defining these four methods; a backend (:class:`Leasing`) by defining :class:`LeaseHooks`.
    Ask with :func:`offers_leases`, which knows both."""

    async def aacquire(self, state_id: str, owner: str, ttl: float | timedelta) -> Lease: ...

    async def arenew(self, lease: Lease, ttl: float | timedelta | None = None) -> Lease: ...

    async def arelease(self, lease: Lease) -> None: ...

    async def acurrent_lease(self, state_id: str) -> Lease | None: ...


@runtime_checkable
class LeaseHooks(Protocol):
    """The hooks a backend defines to offer leases (each run on the owner loop with the
    State's lock held; ``_current_lease`` too); :class:`Leasing` gives the API over them.
    Its ``_write`` and ``_delete`` must then check ``check_fence`` atomically with the change."""

    async def _acquire(self, state_id: str, owner: str, ttl: timedelta) -> Lease:
        """Take the State's lease; LeaseHeldError while one is live."""
        ...

    async def _renew(self, lease: Lease, ttl: timedelta) -> Lease:
        """Extend a current, live lease; StaleLeaseError otherwise."""
        ...

    async def _release(self, lease: Lease) -> None:
        """End the lease if it is current and live (keeping its token); else nothing."""
        ...


_OFFERS: dict[type, bool] = {}


def offers_leases(store: object) -> bool:
    """Whether ``store`` offers fenced leases: a backend that defines :class:`LeaseHooks`, or
    any other store with the public API (:class:`Leases`). Answered once per class: a check
    against a runtime-checkable protocol costs microseconds, and writes ask it."""
    kind = type(store)
    found = _OFFERS.get(kind)
    if found is None:
        found = _OFFERS[kind] = isinstance(store, LeaseHooks if isinstance(store, Leasing) else Leases)
    return found


class Leasing:
    """Fenced leases, mixed into the built-in stores' base. Each sync/async pair shares one
    opening (``_*_call``: the checks, and the coroutine both sides run)."""

    namespace: str

    def _check_open(self, value: Any) -> Any:
        raise NotImplementedError

    def _sid(self, state_id: str) -> str:
        raise NotImplementedError

    def _locked(self, state_id: str, work: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
        raise NotImplementedError

    if TYPE_CHECKING:  # the hooks of LeaseHooks: a store that offers leases defines them

        async def _acquire(self, state_id: str, owner: str, ttl: timedelta) -> Lease: ...

        async def _renew(self, lease: Lease, ttl: timedelta) -> Lease: ...

        async def _release(self, lease: Lease) -> None: ...

    def _leasing(self) -> None:
        """NotImplementedError unless the store offers leases (defines the hooks)."""
        if not offers_leases(self):
            raise NotImplementedError(f"{type(self).__name__} does not support leases")

    async def _current_lease(self, state_id: str) -> Lease | None:
        """The State's live lease, or None (declared here; the engine's default has none)."""
        raise NotImplementedError

    # -- the API ------------------------------------------------------------------------

    async def aacquire(self, state_id: str, owner: str, ttl: float | timedelta) -> Lease:
        """Take the lease of ``state_id`` (created or not) for ``owner``, for ``ttl``
        (seconds or a timedelta): the right to write it until ``expires_at``.

        :class:`LeaseHeldError` names the holder and its expiry while another live lease
        exists (the same owner too: renew instead). The new lease's ``token`` is greater
        than every token the State had before. Durable on return as the store's writes are:
        a crash after it returns never hands the same token out again.
        """
        return await run_async(self._acquire_call(state_id, owner, ttl))

    def acquire(self, state_id: str, owner: str, ttl: float | timedelta) -> Lease:
        """Sync :meth:`aacquire`."""
        return run_sync(self._acquire_call(state_id, owner, ttl), "aacquire")

    def _acquire_call(self, state_id: str, owner: str, ttl: float | timedelta) -> Coroutine[Any, Any, Lease]:
        self._leasing()
        sid = self._sid(state_id)
        period = check_ttl(ttl)
        return self._locked(sid, self._acquire(sid, check_owner(owner), period))

    async def arenew(self, lease: Lease, ttl: float | timedelta | None = None) -> Lease:
        """Extend ``lease`` to ``ttl`` from now (default: the period it was taken for) and
        return it with its new ``expires_at`` (same token). :class:`StaleLeaseError` if it
        expired, was released or was taken over: stop the work it guarded. Durable on return
        as the store's writes are."""
        return await run_async(self._renew_call(lease, ttl))

    def renew(self, lease: Lease, ttl: float | timedelta | None = None) -> Lease:
        """Sync :meth:`arenew`."""
        return run_sync(self._renew_call(lease, ttl), "arenew")

    def _renew_call(self, lease: Lease, ttl: float | timedelta | None) -> Coroutine[Any, Any, Lease]:
        self._leasing()
        held = self._held(lease)
        period = held.ttl if ttl is None else check_ttl(ttl)
        return self._locked(held.state_id, self._renew(held, period))

    async def arelease(self, lease: Lease) -> None:
        """End ``lease`` now if it is still current (its token is kept: the next acquire
        gets a greater one); a lease already expired or taken over is left alone. Durable on
        return as the store's writes are."""
        self._leasing()
        held = self._held(lease)
        await run_async(self._locked(held.state_id, self._release(held)))

    def release(self, lease: Lease) -> None:
        """Sync :meth:`arelease`."""
        self._leasing()
        held = self._held(lease)
        run_sync(self._locked(held.state_id, self._release(held)), "arelease")

    async def acurrent_lease(self, state_id: str) -> Lease | None:
        """The live lease of ``state_id`` (who holds it, until when), or None."""
        return await run_async(self._current_lease(self._sid(state_id)))

    def current_lease(self, state_id: str) -> Lease | None:
        """Sync :meth:`acurrent_lease`."""
        return run_sync(self._current_lease(self._sid(state_id)), "acurrent_lease")

    def _held(self, lease: Lease) -> Lease:
        """The opening of a call on a held lease: the lease checked, for this namespace."""
        return self._check_open(given_lease(lease, namespace=self.namespace))  # type: ignore[no-any-return]

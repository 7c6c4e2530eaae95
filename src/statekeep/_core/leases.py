"""Fenced leases: who may write a State now, and the rule every store checks (pure, no I/O).

A lease gives one owner the right to write a State until ``expires_at``. Its ``token``
grows by one at every acquire of that State, and a store remembers the last token even
after a release or a delete of the State, so a token is never handed out twice. A write
carrying a lease is accepted only while that lease is the State's current one and live
(:func:`check_fence`): a worker that stalled past its expiry, and was replaced, can never
write again, whatever its own clock says.

Each store keeps one lease row per State of a namespace: ``(owner, token, expires_at)``.
Tokens start at 1 in every namespace, so a lease names its namespace too, and a lease of
another namespace (or of none: made before leases named one) is never this one. A release ends
the lease by setting ``expires_at`` to :data:`ENDED` (the Unix epoch, so no clock stepping
back can make it live again), keeping the token.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from .errors import LeaseHeldError, StaleLeaseError
from .passwords import redact_text

#: The longest lease: a worker that needs more renews.
MAX_TTL = timedelta(days=7)
MAX_OWNER = 200
#: The ``expires_at`` of a released lease.
ENDED = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to write one State (``state_id`` in ``namespace``) until ``expires_at``.

    ``token`` strictly increases for each State across takeovers, processes and hosts.
    Stores give leases of their own ``namespace``, and refuse one of another namespace
    (ValueError); a Lease without one (``None``: unpickled from an older statekeep, or
    made by hand without ``namespace=``) is refused as stale (:class:`StaleLeaseError`).
    ``expires_at`` is an aware UTC datetime by the clock that judges expiry: the system
    clock for Memory, File and SQLite stores (one host), the server's for PostgreSQL and
    Redis. Pass the lease as ``lease=`` to ``write``/``save``/``delete``/``fork``, and to
    ``renew``/``release``.
    """

    state_id: str
    owner: str
    token: int
    expires_at: datetime
    #: The period it was acquired for: what ``renew`` extends it by unless told otherwise.
    ttl: timedelta = field(default=timedelta(seconds=30), compare=False)
    #: The store namespace of the State (None: a lease from before leases named one).
    namespace: str | None = None

    def __repr__(self) -> str:
        return (
            f"Lease(state_id={self.state_id!r}, owner={shown_owner(self.owner)!r}, "
            f"token={self.token}, expires_at={self.expires_at.isoformat()!r}, "
            f"namespace={self.namespace!r})"
        )

    def __getstate__(self) -> list[Any]:
        return [self.state_id, self.owner, self.token, self.expires_at, self.ttl, self.namespace]

    def __setstate__(self, state: list[Any]) -> None:
        # A pickle from before leases named their namespace holds five fields: it gets None.
        names = ("state_id", "owner", "token", "expires_at", "ttl", "namespace")
        for name, value in zip(names, [*state, None] if len(state) == 5 else state, strict=True):
            object.__setattr__(self, name, value)


def shown_owner(owner: str) -> str:
    """An owner as errors and reprs show it: a URL's password in it is hidden."""
    return redact_text(owner)


def check_owner(owner: object) -> str:
    """``owner`` if it is a usable lease owner, else TypeError/ValueError saying why."""
    if not isinstance(owner, str):
        raise TypeError(f"a lease owner must be a str naming the worker, got {type(owner).__name__}")
    if not owner or len(owner) > MAX_OWNER or not owner.isprintable():
        raise ValueError(
            f"a lease owner must be 1 to {MAX_OWNER} printable characters (e.g. 'host-12/pid-345'), "
            f"got {shown_owner(owner)[:MAX_OWNER]!r}; it is shown in errors, so never put a secret in it"
        )
    return owner


def check_ttl(ttl: object, name: str = "ttl") -> timedelta:
    """``ttl`` (seconds or a timedelta) as a timedelta, else TypeError/ValueError."""
    if isinstance(ttl, timedelta):
        period = ttl
    elif isinstance(ttl, (int, float)) and not isinstance(ttl, bool):
        if not math.isfinite(ttl) or not 0 < ttl <= MAX_TTL.total_seconds():
            raise ValueError(f"{name} must be more than 0 and at most {MAX_TTL.days} days, got {ttl!r}")
        period = timedelta(seconds=ttl)
    else:
        raise TypeError(f"{name} must be seconds (int or float) or a timedelta, got {type(ttl).__name__}")
    if not timedelta(0) < period <= MAX_TTL:
        raise ValueError(f"{name} must be more than 0 and at most {MAX_TTL.days} days, got {period}")
    return period


def check_lease(lease: object, state_id: str | None = None, namespace: str | None = None) -> Lease | None:
    """``lease`` if it is None or a Lease (for ``state_id`` and ``namespace`` when given),
    else TypeError/ValueError (:func:`given_lease`)."""
    if lease is None:
        return None
    return given_lease(lease, state_id, namespace)


def given_lease(lease: object, state_id: str | None = None, namespace: str | None = None) -> Lease:
    """``lease`` if it is a Lease (for ``state_id`` and of ``namespace`` when given), else
    TypeError/ValueError; :class:`StaleLeaseError` for a lease that names no namespace.

    A store's namespace never changes, nor does a lease's: so this check, made before the
    store's own fence, is the fence's comparison of namespaces on every store (the lease
    row a fence reads is always the store's own namespace's)."""
    if not isinstance(lease, Lease):
        raise TypeError(f"lease= takes a Lease from store.acquire(), got {type(lease).__name__}")
    if state_id is not None and lease.state_id != state_id:
        raise ValueError(
            f"the lease is for State {lease.state_id!r}, not {state_id!r}; nothing was written. "
            "Acquire a lease on the State you write"
        )
    if namespace is not None and lease.namespace != namespace:
        if lease.namespace is None:
            raise StaleLeaseError(
                f"State {lease.state_id!r}: the lease of {shown_owner(lease.owner)!r} (token "
                f"{lease.token}) names no namespace (made before leases named theirs, or without "
                "namespace=), so no store takes it; nothing was written. Stop this worker: acquire "
                "a new lease and load the State again before going on"
            )
        raise ValueError(
            f"the lease is for State {lease.state_id!r} in namespace {lease.namespace!r}, not "
            f"{namespace!r}; nothing was written. Acquire the lease from the store you write to"
        )
    return lease


def is_live(held: Lease | None, now: datetime) -> bool:
    return held is not None and held.expires_at > now


def held_error(
    held: Lease, doing: str, advice: str = ", or pass the holder's lease as lease="
) -> LeaseHeldError:
    return LeaseHeldError(
        f"State {held.state_id!r} is leased to {shown_owner(held.owner)!r} until "
        f"{held.expires_at.isoformat()} (token {held.token}); {doing}. Wait for the lease to "
        f"expire or be released{advice}",
        held.state_id,
        held.owner,
        held.expires_at,
    )


def check_fence(
    state_id: str, held: Lease | None, lease: Lease | None, now: datetime, doing: str = "nothing was written"
) -> None:
    """The fence every store applies, atomically with the write or delete it guards.

    ``held`` is the State's lease row (None if it never had one), ``lease`` the one the
    caller passed, ``now`` the time by the store's judging clock. With a lease, it must be
    the held one (same token and owner) and live, else :class:`StaleLeaseError`. Without
    one, a live held lease is :class:`LeaseHeldError`.
    """
    if lease is None:
        if held is not None and is_live(held, now):
            raise held_error(held, doing)
        return
    if held is None or not _same(held, lease):
        now_held = (
            "it has no lease now"
            if held is None or not is_live(held, now)
            else f"it is now leased to {shown_owner(held.owner)!r} (token {held.token})"
        )
        raise StaleLeaseError(
            f"State {state_id!r}: the lease of {shown_owner(lease.owner)!r} (token {lease.token}) is no "
            f"longer current: {now_held}; {doing}. Stop this worker: acquire a new lease and load the "
            "State again before going on"
        )
    if not is_live(held, now):
        raise StaleLeaseError(
            f"State {state_id!r}: the lease of {shown_owner(lease.owner)!r} (token {lease.token}) "
            f"ended at {held.expires_at.isoformat()}; {doing}. Stop this worker: acquire a new lease "
            "and load the State again before going on"
        )


def _same(held: Lease, lease: Lease) -> bool:
    """Is ``lease`` the lease row ``held`` (same token, owner and namespace)?"""
    return held.token == lease.token and held.owner == lease.owner and held.namespace == lease.namespace


def acquired(
    state_id: str, owner: str, ttl: timedelta, held: Lease | None, now: datetime, namespace: str
) -> Lease:
    """The lease an acquire at ``now`` gets, given the State's lease row ``held``;
    :class:`LeaseHeldError` while ``held`` is live (even for the same owner: renew it)."""
    if held is not None and is_live(held, now):
        raise held_error(held, "it was not acquired", " (its holder renews it with renew())")
    return Lease(state_id, owner, (0 if held is None else held.token) + 1, now + ttl, ttl, namespace)


def renewed(lease: Lease, held: Lease | None, ttl: timedelta, now: datetime) -> Lease:
    """``lease`` extended to ``now + ttl``; :class:`StaleLeaseError` unless it is current and live."""
    check_fence(lease.state_id, held, lease, now, "it was not renewed")
    return dataclasses.replace(lease, expires_at=now + ttl, ttl=ttl)


def released(lease: Lease, held: Lease | None, now: datetime) -> Lease | None:
    """The lease row after releasing ``lease`` at ``now``: ended (``expires_at`` = now,
    token kept) if it was current and live; None (nothing to change) otherwise."""
    if held is None or not _same(held, lease) or not is_live(held, now):
        return None
    return dataclasses.replace(held, expires_at=ENDED)

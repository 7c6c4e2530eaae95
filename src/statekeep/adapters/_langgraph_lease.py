"""One rewrite of a LangGraph thread at a time: the store's lease on the thread's lock id.

``prune`` and ``delete_for_runs`` rewrite a thread by moving it to its other State
(:mod:`._langgraph_moves`). What a move cut short leaves there is removed by the next
rewrite; a copy another rewrite is writing right now must not be. So, on a store that
offers leases (every built-in one), a rewrite holds the lease of the thread's *lock id*
(a hashed id no State is ever written under, so the thread's writers are never fenced out)
for its whole duration: a second rewrite of the thread waits for it to end (or, if its
holder died, to expire: :data:`TTL` seconds after its last renewal), and whatever it then
finds in the other State is a leftover. A store without leases (one of your own that lacks
the capability) runs rewrites unserialised: run ``prune``/``delete_for_runs`` of one
thread from one process at a time there.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from .._core.errors import LeaseHeldError, StaleLeaseError, StateConflictError
from .._core.leases import Lease
from .._leases.api import offers_leases
from ._flow import Call, Flow
from ._home import Home
from ._ids import HASHED

#: Seconds a rewrite's lease lasts from its last renewal (it renews before each big step).
TTL = 60.0
#: The longest wait for another rewrite of the thread, in multiples of :data:`TTL`.
PATIENCE = 10


def lock_id(state_id: str) -> str:
    """The id whose lease serialises the rewrites of the thread kept in ``state_id``."""
    return HASHED + hashlib.sha256(("langgraph.rewrite:" + state_id).encode()).hexdigest()


class _Clock:
    """A wait as a flow step: ``sleep`` for the sync driver, ``asleep`` for the async one."""

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


CLOCK = _Clock()


@dataclass
class Hold:
    """The lease a rewrite holds (None on a store without leases)."""

    home: Home
    thread_id: str
    lease: Lease | None

    def renewed(self) -> Flow[None]:
        """Renew the lease (taken again if it lapsed and nobody took it meanwhile: the next
        token); StateConflictError if another rewrite may have had the thread since (this
        one must then commit nothing)."""
        if self.lease is None:
            return
        store = self.home.store
        try:
            self.lease = yield Call(store, "renew", (self.lease,))
            return
        except StaleLeaseError:
            pass
        lapsed = self.lease
        try:
            self.lease = yield Call(store, "acquire", (lapsed.state_id, lapsed.owner, TTL))
        except LeaseHeldError:
            self.lease = None
        if self.lease is None or self.lease.token != lapsed.token + 1:
            raise StateConflictError(
                f"thread {self.thread_id!r}: its rewrite took longer than its lease ({TTL:g} s between "
                "steps) and another one may have begun; this one stopped before its commit, leaving "
                "the thread as it was: call it again"
            )

    def released(self) -> Flow[None]:
        if self.lease is not None:
            yield Call(self.home.store, "release", (self.lease,))
            self.lease = None


def held(home: Home, thread_id: str, state_id: str) -> Flow[Hold]:
    """Take the thread's rewrite lease, waiting while another rewrite holds it."""
    store = home.store
    if not offers_leases(store):
        return Hold(home, thread_id, None)
    lock = lock_id(state_id)
    owner = "langgraph-rewrite-" + uuid.uuid4().hex
    give_up = time.monotonic() + PATIENCE * TTL
    while True:
        try:
            lease: Lease = yield Call(store, "acquire", (lock, owner, TTL))
            return Hold(home, thread_id, lease)
        except LeaseHeldError:
            holder: Lease | None = yield Call(store, "current_lease", (lock,))
            if time.monotonic() > give_up:
                raise StateConflictError(
                    f"thread {thread_id!r} has been rewritten by another prune or delete_for_runs for "
                    f"over {PATIENCE * TTL:g} s (lease holder {holder.owner if holder else '?'!r}); "
                    "nothing was changed: call it again later"
                ) from None
            yield Call(CLOCK, "sleep", (_pause(holder),))


def _pause(holder: Lease | None) -> float:
    """How long to wait before asking again: until the holder's lease ends, at most 1 s."""
    if holder is None:
        return 0.01
    left = (holder.expires_at - datetime.now(UTC)).total_seconds()
    return min(max(left, 0.01), 1.0)

"""Resending after a lost connection: a server store's ``failover_timeout``.

When the connection to the server is lost (the primary died, a standby is being promoted,
a cluster master failed over), an operation that may be sent again is sent again, after a
short pause that grows (from 50 ms to 1 s), reconnecting each time (which, with a
multi-host DSN or a cluster, finds the new primary), until ``failover_timeout`` seconds
have passed since the first loss; then it raises ConnectionError saying the outcome is
unknown. ``failover_timeout=0`` (the default for one server) raises at once, as before.

What is sent again:

- writes: always. The write contract makes it safe: entries the store already has are
  skipped when equal and refused (StateConflictError) when different. A write refused on
  a resend because its first attempt committed (a ``create=True`` write that finds the
  State, an ``expect_next`` write that finds the State moved on; an append is resent
  bound to its first seq, see :func:`guarded`) is checked against what the State holds
  (:func:`holds_write`): it is reported as a success only when the State holds its
  entries at their seqs (for a create, also the incarnation it made), and its snapshot is
  then not sent again: a later writer may have replaced it. A write that carries a
  snapshot alone sets it again. A lease that lapsed meanwhile refuses the resend (the
  error says the write may have been saved). A create whose State was deleted by another
  client between its first attempt and the resend is made again (the store cannot tell
  it from a first attempt that never arrived);
- reads and listings: they change nothing.

Never sent again (their ConnectionError says the outcome is unknown, and the caller
decides): delete (a resent delete would remove a State another client created
meanwhile), fork (a resent fork would find its own fork and say it exists), the lease
operations (a resent acquire would find its own lease held), gc and trim. An operation
resending is counted as in use, so ``close()`` waits for it (up to its 10 s), and a
store closed meanwhile stops resending. Cancelling the caller does not stop the resends
(the store's operations run shielded on its own loop): they end within
``failover_timeout``.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from ..._core.ranges import SNAPSHOT_ONLY
from ..._core.records import built
from ..._core.writes import PreparedWrite, check_overlap
from .._urlquery import check_timeout
from ._talking import CHECK_REACH, ConnectionLost

if TYPE_CHECKING:
    from ..._store.backend import Backend

T = TypeVar("T")

#: Set while a resend asks whether its earlier attempt was applied (:func:`holds_write`): the
#: reads it makes are sent once, the write's own loop owning the time left.
_ONCE: contextvars.ContextVar[bool] = contextvars.ContextVar("statekeep_resend_once", default=False)

__all__ = ["check_timeout", "guarded", "holds_write", "resending"]

#: ``failover_timeout`` when the store names several servers (a multi-host DSN, a cluster).
SEVERAL_SERVERS = 30.0
#: The pause before the first resend, and the longest one (each doubles the last).
FIRST_PAUSE, LONGEST_PAUSE = 0.05, 1.0


async def resending(timeout: float, server: str, action: str, attempt: Callable[[bool], Awaitable[T]]) -> T:
    """``attempt(resent)``, sent again after each ConnectionLost until ``timeout`` seconds
    have passed since the first (``resent`` is True once an earlier attempt may have been
    applied); then ConnectionError saying what is unknown. ``timeout`` 0: one attempt."""
    if timeout <= 0 or _ONCE.get():
        return await attempt(False)
    loop = asyncio.get_running_loop()
    deadline: float | None = None
    pause = FIRST_PAUSE
    tries = 0
    while True:
        try:
            return await attempt(tries > 0)
        except ConnectionLost as exc:
            now = loop.time()
            if deadline is None:
                deadline = now + timeout
            if now >= deadline:
                raise ConnectionError(gave_up(server, action, timeout, tries + 1, exc)) from exc
            await asyncio.sleep(min(pause, deadline - now))
            pause = min(pause * 2, LONGEST_PAUSE)
            tries += 1


def gave_up(server: str, action: str, timeout: float, tries: int, exc: BaseException) -> str:
    """The message of an operation that was sent ``tries`` times over ``timeout`` seconds."""
    if action == "write":
        outcome = (
            "its outcome is unknown: the write may or may not have been saved. Sending the same write "
            "again is safe (entries the store already has are skipped, and a create=True write that "
            "was saved is recognised as this one)"
        )
    else:
        outcome = f"the {action} did not complete; try again"
    last = str(exc).partition("(")[2].partition(")")[0] or "connection lost"
    return (
        f"{server}: the connection was lost and the {action} was sent {tries} times for "
        f"failover_timeout={timeout:g} s without reaching a server that takes it (last: {last}); "
        f"{outcome}; {CHECK_REACH} (or that a standby was promoted)"
    )


def guarded(write: PreparedWrite) -> PreparedWrite | None:
    """The form an append given no ``expect_next`` is sent again in: bound to the State's
    next seq being its first seq. A first attempt that committed is then found (refused,
    and :func:`holds_write` says so) rather than applied again, which would put its
    snapshot back over one a later writer saved meanwhile. When the guard refuses it
    otherwise, the store sends the write as it was given. None: sent as it is (a create, a
    write with its own ``expect_next``, a snapshot alone)."""
    if write.create or write.expect_next is not None or not write.lines:
        return None
    return dataclasses.replace(write, expect_next=write.first_seq)


async def holds_write(store: Backend, write: PreparedWrite) -> bool:
    """Whether the State already holds ``write``, for a resent write the store refused
    (a create that found the State, an ``expect_next`` that found it moved on): its
    entries at their seqs (StateConflictError if one differs) and, for a create, the
    incarnation the create made; for an append that ends the State, its snapshot). False
    when it does not (then the refusal stands, or the write is sent as it was given)."""
    since = write.first_seq if write.lines else SNAPSHOT_ONLY
    once = _ONCE.set(True)
    try:
        record = built(await store._read(write.state_id, since))
    finally:
        _ONCE.reset(once)
    if record is None:
        return False
    if write.create and (write.incarnation is None or record.incarnation != write.incarnation):
        return False
    if not write.lines:
        return write.create
    stored = record.entries[: len(write.lines)]
    if len(stored) < len(write.lines):
        return False
    # Every entry is there: held, and its snapshot is not sent again, since a later writer
    # may have replaced it meanwhile (a write id would tell whether these entries came from
    # this write's first attempt or were there before it; the store keeps none).
    check_overlap(write, stored)
    return True


def refused_write(resent: bool) -> str:
    """What a lease refusal says was written: nothing, or, for a resend, maybe everything
    (its earlier attempt's outcome was unknown, and the lease lapsed meanwhile)."""
    if not resent:
        return "nothing was written"
    return (
        "this resend wrote nothing, but its earlier attempt, whose outcome was unknown (a lost "
        "connection), may have been saved: read the State to see"
    )

"""The cancellation part of the Store contract: a cancelled ``awrite``, ``asave`` or ``adelete``
reports (``CancelledError``, or ``TimeoutError`` under ``asyncio.timeout``) only once its outcome
is settled: it happened whole, or not at all. So the caller's next ``aread`` shows which, and the
caller continues from what it shows without a ``StateConflictError``.

Async only, since cancelling is what async callers do; under trio too (the twins, see
:mod:`._backends`), with cancel scopes and their deadlines instead of ``task.cancel()`` and
``asyncio.timeout``. The cancellation points are turns of the
test's own event loop (``await asyncio.sleep(0)``), not waits: from before the call reaches the
store (0 turns) to while a large write (about 1 MB) is under way. For a write of several MB the
points double (0, 1, 2, 4, ...) until the write returns before its cancellation, so that they
span its whole course, from before it starts to after it ends, on a fast store or a slow one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import pytest

from .._core.records import Record
from .._run.state import State
from .._runtime.bridge import _on_asyncio
from .._store.contract import Store
from ._backends import asyncio_only
from ._helpers import entries, snapshot

asyncio_test = pytest.mark.asyncio


#: After how many turns of the caller's loop the operation is cancelled.
TURNS = (0, 1, 2, 3, 5, 8, 13, 21, 34)


def large_entries(start: int, tag: str, count: int = 150, size: int = 7_000) -> list[dict[str, Any]]:
    """``count`` entries from seq ``start`` of about ``size`` bytes each (1 MB in all)."""
    return [
        {"seq": s, "kind": "note", "tag": tag, "text": f"{tag}/{s} ".ljust(size, "x")}
        for s in range(start, start + count)
    ]


#: A watchdog for the doubling sweep: a write still not done after this many turns is stuck.
MAX_TURNS = 1 << 24


def several_mb(start: int, tag: str, count: int = 80) -> list[dict[str, Any]]:
    """``count`` entries from seq ``start``, of 10 KB and (every 20th) 1 MB: about 5 MB."""
    return [
        {
            "seq": s,
            "kind": "note",
            "tag": tag,
            "text": f"{tag}/{s} ".ljust(1_000_000 if s % 20 == 0 else 10_000, "x"),
        }
        for s in range(start, start + count)
    ]


def which(record: Record | None, before: Record | None, after: Record | None) -> str:
    """'before' or 'after' the operation, as ``record`` shows it; else what it holds instead
    (short: the records are large)."""
    if record == before:
        return "before"
    if record == after:
        return "after"
    if record is None:
        return "no State"
    return f"part: {len(record.entries)} entries, snapshot {record.snapshot!r:.80}"


async def cancel_after(turns: int, operation: Coroutine[Any, Any, None]) -> bool:
    """Run ``operation`` as a task, cancel it after ``turns`` turns of this loop, and wait for
    it; True if it returned anyway (it was done before the cancellation). Under trio: in a
    cancel scope cancelled after ``turns`` checkpoints."""
    if not _on_asyncio():
        return await interrupted_elsewhere(turns, operation, by_deadline=False)
    task = asyncio.ensure_future(operation)
    for _ in range(turns):
        await asyncio.sleep(0)  # one turn of the loop: moves the cancellation point, not a wait
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return False
    return True


async def expire_after(turns: int, timeout: asyncio.Timeout) -> None:
    """Make ``timeout`` expire after ``turns`` turns of this loop."""
    for _ in range(turns):
        await asyncio.sleep(0)
    timeout.reschedule(asyncio.get_running_loop().time())


async def time_out_after(turns: int, operation: Coroutine[Any, Any, None]) -> bool:
    """Await ``operation`` under an ``asyncio.timeout`` that expires after ``turns`` turns of
    this loop; True if it returned, False if TimeoutError. Under trio: in a cancel scope
    whose deadline passes after ``turns`` checkpoints (``anyio.move_on_after``'s way)."""
    if not _on_asyncio():
        return await interrupted_elsewhere(turns, operation, by_deadline=True)
    try:
        async with asyncio.timeout(None) as timeout:
            expiry = asyncio.ensure_future(expire_after(turns, timeout))
            await operation
        return True
    except TimeoutError:
        return False
    finally:
        expiry.cancel()
        await asyncio.gather(expiry, return_exceptions=True)


async def interrupted_elsewhere(turns: int, operation: Coroutine[Any, Any, None], by_deadline: bool) -> bool:
    """Under trio: await ``operation`` in a cancel scope that is cancelled (or whose deadline
    passes) after ``turns`` checkpoints of this run; True if it returned."""
    scope = anyio.CancelScope()

    async def interrupt() -> None:
        for _ in range(turns):
            await anyio.lowlevel.checkpoint()  # one turn of the run: moves the point, not a wait
        if by_deadline:
            scope.deadline = anyio.current_time()
        else:
            scope.cancel()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(interrupt)
        with scope:
            await operation
    return not scope.cancelled_caught


class CancellationContract:
    """Mixed into :class:`StoreContract`: what a cancelled write, save or delete leaves."""

    settles_cancelled: ClassVar[bool]
    supports_delete: ClassVar[bool]

    def needs(self, *flags: str) -> None:
        raise NotImplementedError  # StoreContract's

    async def continues(self, store: Store, state_id: str, record: Record | None) -> None:
        """A write that continues from ``record`` (what aread showed) succeeds."""
        more = entries(len(record.entries) if record else 0, 2, after="cancel")
        await store.awrite(state_id, more, snapshot("continued"), create=record is None)
        got = await store.aread(state_id)
        assert got is not None and got.entries == (record.entries if record else []) + more
        assert got.snapshot == snapshot("continued")

    @asyncio_test
    async def test_a_cancelled_large_awrite_is_whole_or_absent_and_the_caller_continues(
        self, store: Store
    ) -> None:
        self.needs("settles_cancelled")
        for turns in TURNS:
            for create in (False, True):
                sid = f"w{turns}{'c' if create else 'a'}"
                before = None if create else Record(entries(0, 2), snapshot("before"))
                if before is not None:
                    await store.awrite(sid, before.entries, before.snapshot, create=True)
                start = 0 if before is None else len(before.entries)
                after = Record(
                    (before.entries if before else []) + large_entries(start, sid), snapshot("after")
                )
                returned = await cancel_after(
                    turns, store.awrite(sid, after.entries[start:], after.snapshot, create=create)
                )
                record = await store.aread(sid)
                seen = which(record, before, after)
                context = f"awrite({'create' if create else 'append'}) cancelled after {turns} turns"
                assert seen in (("after",) if returned else ("before", "after")), (
                    f"{context}: aread shows {seen}"
                )
                await self.continues(store, sid, record)

    @asyncio_test
    @pytest.mark.parametrize("how", ["cancel", "timeout"])
    async def test_an_awrite_of_several_mb_cancelled_anywhere_in_its_course_is_whole_or_absent(
        self, store: Store, how: str
    ) -> None:
        """``task.cancel()`` or an expiring ``asyncio.timeout``, after 0, 1, 2, 4, ... turns of
        the caller's loop until the write is done first: the points fall before the write
        starts, while the store is busy with it, and after it ends. Each time, aread shows
        the write whole or not at all, and the caller continues from what it shows."""
        self.needs("settles_cancelled")
        interrupt = cancel_after if how == "cancel" else time_out_after
        turns, point, seen_at = 0, 0, []
        while True:
            create = point % 2 == 1  # appends and creates, in turn
            sid = f"big{point}"
            before = None if create else Record(entries(0, 2), snapshot("before"))
            if before is not None:
                await store.awrite(sid, before.entries, before.snapshot, create=True)
            start = 0 if before is None else len(before.entries)
            after = Record((before.entries if before else []) + several_mb(start, sid), snapshot("after"))
            returned = await interrupt(
                turns, store.awrite(sid, after.entries[start:], after.snapshot, create=create)
            )
            record = await store.aread(sid)
            seen = which(record, before, after)
            seen_at.append(f"{turns}: {'returned' if returned else seen}")
            context = f"awrite({'create' if create else 'append'}) of several MB, {how} after {turns} turns"
            assert seen in (("after",) if returned else ("before", "after")), f"{context}: aread shows {seen}"
            if how == "cancel" and turns == 0 and _on_asyncio():
                # Cancelled before its task first ran: the write never started. (A trio caller
                # is cancelled at its first checkpoint, once the write is handed over.)
                assert seen == "before", f"{context}: aread shows {seen}"
            await self.continues(store, sid, record)
            if self.supports_delete:
                await store.adelete(sid)  # the next point starts afresh; keeps the store small
            if returned:
                break
            assert turns < MAX_TURNS, f"the write was not done after {turns} turns: {seen_at}"
            turns, point = max(1, 2 * turns), point + 1

    @asyncio_only  # asyncio.timeout and wait_for; trio's deadlines: the tests above, under trio
    @asyncio_test
    async def test_asyncio_timeout_around_awrite_raises_timeout_error_once_settled(
        self, store: Store
    ) -> None:
        self.needs("settles_cancelled")
        for turns in TURNS:
            sid = f"t{turns}"
            before = Record(entries(0, 2), snapshot("before"))
            await store.awrite(sid, before.entries, before.snapshot, create=True)
            after = Record(before.entries + large_entries(2, sid), snapshot("after"))
            returned = await time_out_after(turns, store.awrite(sid, after.entries[2:], after.snapshot))
            record = await store.aread(sid)  # at once: the outcome is settled when TimeoutError is raised
            seen = which(record, before, after)
            assert seen in (("after",) if returned else ("before", "after")), f"after {turns} turns: {seen}"
            await self.continues(store, sid, record)
        # wait_for too: the write never starts, and wait_for says TimeoutError.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(store.awrite("t0", large_entries(4, "late"), snapshot("late")), 0)
        got = await store.aread("t0")
        assert got is not None and got.snapshot == snapshot("continued")

    @asyncio_test
    async def test_a_cancelled_asave_leaves_the_state_ready_to_save_again(self, store: Store) -> None:
        self.needs("settles_cancelled")
        for turns in TURNS:
            state = State("cancelled saves", id=f"s{turns}")
            for phase in ("create", "append"):
                stored = len(state.history) if phase == "append" else 0
                for i in range(150):
                    state.add_user(f"{phase} {i} ".ljust(7_000, "x"))
                returned = await cancel_after(turns, store.asave(state))
                record = await store.aread(state.id)
                lengths = (len(state.history),) if returned else (stored, len(state.history))
                shown = len(record.entries) if record else 0
                context = f"asave ({phase}) cancelled after {turns} turns"
                assert shown in lengths, f"{context}: aread shows {shown} entries of {lengths}"
                if record is not None:
                    assert record.entries == state.history[:shown], f"{context}: other entries"
                await store.asave(state)  # sends what the store lacks: no StateConflictError
                loaded = await store.aload(state.id)
                assert loaded.history == state.history, context
                assert loaded.snapshot() == state.snapshot(), context

    @asyncio_test
    async def test_a_cancelled_adelete_is_whole_or_absent_and_the_caller_continues(
        self, store: Store
    ) -> None:
        self.needs("settles_cancelled", "supports_delete")
        for turns in TURNS:
            sid = f"d{turns}"
            before = Record(large_entries(0, sid), snapshot("before"))
            await store.awrite(sid, before.entries, before.snapshot, create=True)
            returned = await cancel_after(turns, store.adelete(sid))
            record = await store.aread(sid)
            seen = which(record, before, None)  # after: no State
            expected = ("after",) if returned else ("before", "after")
            assert seen in expected, f"adelete cancelled after {turns} turns: aread shows {seen}"
            await self.continues(store, sid, record)

"""The cancellation part of the Store contract: a cancelled ``awrite``, ``asave`` or ``adelete``
reports (``CancelledError``, or ``TimeoutError`` under ``asyncio.timeout``) only once its outcome
is settled: it happened whole, or not at all. So the caller's next ``aread`` shows which, and the
caller continues from what it shows without a ``StateConflictError``.

Async only, since cancelling is what async callers do. The cancellation points are turns of the
test's own event loop (``await asyncio.sleep(0)``), not waits: from before the call reaches the
store (0 turns) to while a large write (about 1 MB) is under way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, ClassVar

import pytest

from .._records import Record
from .._state import State
from .._store import Store
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
    it; True if it returned anyway (it was done before the cancellation)."""
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
    async def test_asyncio_timeout_around_awrite_raises_timeout_error_once_settled(
        self, store: Store
    ) -> None:
        self.needs("settles_cancelled")
        for turns in TURNS:
            sid = f"t{turns}"
            before = Record(entries(0, 2), snapshot("before"))
            await store.awrite(sid, before.entries, before.snapshot, create=True)
            after = Record(before.entries + large_entries(2, sid), snapshot("after"))
            returned = False
            try:
                async with asyncio.timeout(None) as timeout:
                    expiry = asyncio.ensure_future(expire_after(turns, timeout))
                    await store.awrite(sid, after.entries[2:], after.snapshot)
                returned = True
            except TimeoutError:
                pass
            finally:
                expiry.cancel()
            await asyncio.gather(expiry, return_exceptions=True)
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

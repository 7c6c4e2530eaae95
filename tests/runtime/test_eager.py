"""What an operation costs the owner loop when nothing else is going on (statekeep._runtime.eager,
_batching): an operation that never waits runs in one step, with no Task; a lone write
commits without the batch machinery; writes posted together still share one batch.

Counted through the owner loop's task factory: which Tasks it made, by their coroutine's
name. Every wait is bounded by a timeout that only turns a hang into a failure.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeep import FileStore, MemoryStore, Record, SQLiteStore, Store
from statekeep._runtime import bridge, eager
from statekeep.testing import entries, snapshot
from tests.runtime.test_bridge import JOIN, join_all
from tests.support.settle import owner_loop_settled


@pytest.fixture
def tasks() -> Iterator[list[str]]:
    """The names of the coroutines the owner loop made Tasks for, from now on."""
    made: list[str] = []
    loop = bridge.owner().loop

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, context: Any = None) -> asyncio.Task[Any]:
        made.append(getattr(coro, "__qualname__", type(coro).__name__))
        return asyncio.Task(coro, loop=loop, context=context)

    owner_loop_settled()
    loop.call_soon_threadsafe(loop.set_task_factory, factory)
    owner_loop_settled()
    made.clear()  # owner_loop_settled's own
    yield made
    loop.call_soon_threadsafe(loop.set_task_factory, None)
    owner_loop_settled()


def make(kind: str, path: Path) -> Store:
    return SQLiteStore(path / "s.db") if kind == "sqlite" else FileStore(path / "files")


def test_operations_that_never_wait_make_no_task(tasks: list[str]) -> None:
    store = MemoryStore()
    store.write("a", entries(0, 2), snapshot(), create=True)
    store.write("a", entries(2, 1), snapshot(turn=1))
    assert store.read("a") == Record(entries(0, 3), snapshot(turn=1))
    assert [row.id for row in store.list(limit=50)] == ["a"]
    store.delete("a")
    assert tasks == []


def test_awaited_on_the_owner_loop_an_operation_that_never_waits_makes_no_task(tasks: list[str]) -> None:
    store = MemoryStore()

    async def on_the_loop() -> Record | None:
        await store.awrite("a", entries(0, 1), snapshot(), create=True)
        return await store.aread("a")

    future = asyncio.run_coroutine_threadsafe(on_the_loop(), bridge.owner().loop)
    assert future.result(JOIN) == Record(entries(0, 1), snapshot())
    assert [name.rpartition(".")[2] for name in tasks] == ["on_the_loop"]  # the test's own


def started(kind: str, path: Path) -> Store:
    """A store holding State "a", created and appended to once (which may wait for a
    worker: creating the State and the store's files)."""
    store = make(kind, path)
    store.write("a", entries(0, 1), snapshot(), create=True)
    store.write("a", entries(1, 1), snapshot(turn=1))
    return store


def appends(store: Store) -> None:
    """Four lone appends to "a", one after another."""
    for seq in range(2, 6):
        store.write("a", entries(seq, 1), snapshot(turn=seq))


@pytest.mark.parametrize("where", ["main", "thread"])
@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_a_lone_sync_write_makes_no_task(tmp_path: Path, kind: str, where: str, tasks: list[str]) -> None:
    # From the main thread it commits on the loop in its first step; from another thread,
    # in that thread, the commit's report resuming it on the loop. Neither makes a flusher.
    store = started(kind, tmp_path)
    tasks.clear()
    if where == "main":
        appends(store)
    else:
        thread = threading.Thread(target=appends, args=(store,))
        thread.start()
        join_all([thread])
    owner_loop_settled()  # the loop has ended what it had: the writes, and this wait's own Task
    assert [name for name in tasks if not name.endswith("others_done")] == []
    assert store.read("a") == Record(entries(0, 6), snapshot(turn=5))
    store.close()


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_a_lone_awrite_from_another_loop_makes_no_task(tmp_path: Path, kind: str, tasks: list[str]) -> None:
    # Two hand-offs, as asyncio.to_thread's: to the owner loop, which commits in the first
    # step, and back to the caller's loop.
    store = started(kind, tmp_path)
    tasks.clear()

    async def appending() -> None:
        for seq in range(2, 6):
            await store.awrite("a", entries(seq, 1), snapshot(turn=seq))

    asyncio.run(appending())
    owner_loop_settled()
    assert [name for name in tasks if not name.endswith("others_done")] == []
    assert store.read("a") == Record(entries(0, 6), snapshot(turn=5))
    store.close()


def counting(store: Any) -> list[int]:
    """The size of each batch ``store`` commits from now on (through either commit)."""
    sizes: list[int] = []
    for name in ("_commit", "_commit_now"):
        commit: Callable[[list[Any]], list[BaseException | None]] = getattr(store, name)

        def counted(items: list[Any], commit: Any = commit) -> list[BaseException | None]:
            errors = commit(items)  # a lone write's commit on the loop may raise WouldBlock
            sizes.append(len(items))
            return errors

        setattr(store, name, counted)
    return sizes


def loop_held() -> threading.Event:
    """Hold the owner loop until the returned event is set (so that operations posted
    meanwhile are all waiting to start when it goes on)."""
    entered, go = threading.Event(), threading.Event()

    def hold() -> None:
        entered.set()
        go.wait(JOIN)

    bridge.owner().loop.call_soon_threadsafe(hold)
    assert entered.wait(JOIN)
    return go


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_writes_posted_together_share_a_batch(tmp_path: Path, kind: str) -> None:
    # A write that finds others waiting to start does not commit alone: they batch.
    store = make(kind, tmp_path)
    for sid in "abc":
        store.write(sid, entries(0, 1), snapshot(), create=True)
        store.write(sid, entries(1, 1), snapshot(turn=1))
    sizes = counting(store)

    async def together() -> None:
        writes = [asyncio.ensure_future(store.awrite(sid, entries(2, 1), snapshot(turn=2))) for sid in "abc"]
        await asyncio.sleep(0)  # one turn of this loop: each write is posted to the owner loop
        go.set()
        await asyncio.gather(*writes)

    go = loop_held()
    asyncio.run(together())
    assert sizes == [3]
    for sid in "abc":
        assert store.read(sid) == Record(entries(0, 3), snapshot(turn=2))
    store.close()


def test_an_operation_cancelled_in_its_first_step_raises_asyncios_cancellation() -> None:
    """As a Task's result does: an awaiting caller on the owner loop gets asyncio's
    CancelledError, not concurrent.futures' (a different class), which it would not catch."""

    async def cancelled() -> None:
        raise asyncio.CancelledError

    outcome, pending = eager.first_step(cancelled(), contextvars.copy_context())
    assert outcome is not None and pending is None and outcome.cancelled()
    with pytest.raises(asyncio.CancelledError):
        outcome.result()

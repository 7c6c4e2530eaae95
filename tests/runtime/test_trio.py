"""The async API awaited from trio (through anyio), beside asyncio: every store, cancellation
that settles before it reports, sync calls made inside a trio run, the same error types, and
an asyncio path that never goes through anyio.

The conformance kit runs its async tests under trio too (``*_under_trio`` in
tests/store/test_conformance.py); these are what it does not cover. Every wait is bounded by a
generous deadline that only turns a hang into a failure; nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio

from statekeep import (
    FileStore,
    Keyring,
    LeaseHeldError,
    MemoryStore,
    Record,
    State,
    StateConflictError,
    StateExistsError,
    StateNotFoundError,
    Store,
    arekey,
)
from statekeep._runtime import bridge
from statekeep.testing import entries, snapshot
from tests.runtime.test_bridge import JOIN, HeldFsync
from tests.support.settle import warnings_once_settled

#: After how many checkpoints of the trio caller a write is cancelled.
TURNS = (0, 1, 2, 3, 5, 8, 13, 21, 34)


def under_trio(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    return anyio.run(fn, *args, backend="trio")


async def checkpoints(n: int) -> None:
    for _ in range(n):
        await trio.lowlevel.checkpoint()  # turns of the trio run, not a wait


def large(start: int, count: int, tag: str) -> list[dict[str, Any]]:
    """About 1 MB of entries: a write that is still under way after a few turns."""
    return [{**e, "blob": tag * 250_000} for e in entries(start, count)]


# -- cancellation ----------------------------------------------------------------------------


def test_a_write_cancelled_by_move_on_after_is_whole_or_absent_on_every_store(store: Store) -> None:
    async def main() -> None:
        await store.awrite("t", entries(0, 1), snapshot(), create=True)
        have = 1
        for n, turns in enumerate(TURNS):
            with anyio.move_on_after(None) as scope:  # expired by hand after ``turns`` checkpoints

                async def expire(scope: anyio.CancelScope = scope, turns: int = turns) -> None:
                    await checkpoints(turns)
                    scope.deadline = anyio.current_time()

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(expire)
                    await store.awrite("t", large(have, 4, str(n % 10)), snapshot(turn=n))
            # Reported only once settled: the write is whole or absent, and the caller goes on
            # from what it reads, without a conflict.
            record = await store.aread("t")
            assert record is not None
            assert len(record.entries) in (have, have + 4)
            if len(record.entries) == have + 4:
                assert record.entries[have:] == large(have, 4, str(n % 10))
                assert record.snapshot == snapshot(turn=n)
            else:
                assert scope.cancelled_caught
            have = len(record.entries)
            await store.awrite("t", entries(have, 1), None)
            have += 1

    under_trio(main)


def test_a_cancelled_trio_caller_reports_only_once_the_write_under_way_ended(tmp_path: Path) -> None:
    io = HeldFsync()
    store = FileStore(tmp_path, io=io)
    store.write("a", entries(0, 1), snapshot(), create=True)
    reported: list[str] = []

    async def main() -> None:
        scope = anyio.CancelScope()

        async def write() -> None:
            with scope:
                await store.awrite("a", entries(1, 2), snapshot(turn=1))
            reported.append("cancelled" if scope.cancelled_caught else "returned")

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(write)
            assert await anyio.to_thread.run_sync(io.entered.wait, JOIN)
            scope.cancel()
            await checkpoints(20)
            assert reported == [], "the cancelled caller reported while its write was under way"
            io.release.set()
        assert reported == ["cancelled"]
        # Reported only now: a read at once shows the write whole, and the caller goes on.
        assert await store.aread("a") == Record(entries(0, 3), snapshot(turn=1))
        await store.awrite("a", entries(3, 1), None)

    io.armed = True
    try:
        under_trio(main)
    finally:
        io.release.set()  # also when it failed, so that nothing is left waiting
    assert store.read("a").entries == entries(0, 4)


def test_a_cancelled_trio_write_the_owner_loop_has_not_started_never_runs() -> None:
    store = MemoryStore()
    store.write("a", entries(0, 1), snapshot(), create=True)
    busy, free = threading.Event(), threading.Event()
    bridge.owner().loop.call_soon_threadsafe(lambda: (busy.set(), free.wait(JOIN)))  # hold the loop

    async def main() -> None:
        assert await anyio.to_thread.run_sync(busy.wait, JOIN)
        with anyio.fail_after(JOIN):  # the caller reports at once, the owner loop still held
            with anyio.CancelScope() as scope:
                scope.cancel()
                await store.awrite("a", entries(1, 1), snapshot(turn=1))
        assert scope.cancelled_caught

    try:
        under_trio(main)
    finally:
        free.set()
    assert warnings_once_settled() == []  # no "coroutine ... was never awaited"
    assert store.read("a") == Record(entries(0, 1), snapshot())  # and it never ran


class SyncOnly(Store):
    """A store of one's own written with sync methods: its async side is Store's defaults."""

    def __init__(self) -> None:
        self.data: dict[str, Record] = {}
        self.entered, self.release = threading.Event(), threading.Event()
        self.hold = False

    def write(self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False) -> None:
        if self.hold:
            self.entered.set()
            assert self.release.wait(JOIN)
        old = self.data.get(state_id)
        if create and old is not None:
            raise StateExistsError(f"{state_id!r} exists")
        if not create and old is None:
            raise StateNotFoundError(f"no State {state_id!r}")
        held = [] if old is None else old.entries
        self.data[state_id] = Record([*held, *entries[len(held) - entries[0]["seq"] :]], snapshot)

    def read(self, state_id: str, *, since: int = 0) -> Record | None:
        rec = self.data.get(state_id)
        return None if rec is None else Record(rec.entries[since:], rec.snapshot)

    def list(self, **filters: Any) -> list[Any]:
        return []

    def delete(self, state_id: str) -> None:
        self.data.pop(state_id, None)


def test_store_defaults_work_under_trio_and_a_cancelled_awrite_reports_once_it_ended() -> None:
    store = SyncOnly()
    reported: list[bool] = []

    async def main() -> None:
        await store.awrite("a", entries(0, 1), snapshot(), create=True)
        assert await store.aread("a") == Record(entries(0, 1), snapshot())
        assert await store.alist() == []
        store.hold = True
        scope = anyio.CancelScope()

        async def write() -> None:
            with scope:
                await store.awrite("a", entries(1, 1), snapshot(turn=1))
            reported.append(scope.cancelled_caught)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(write)
            assert await anyio.to_thread.run_sync(store.entered.wait, JOIN)
            scope.cancel()
            await checkpoints(20)
            assert reported == []
            store.release.set()
        assert reported == [True]
        assert await store.aread("a") == Record(entries(0, 2), snapshot(turn=1))
        store.hold = False
        await store.adelete("a")
        assert await store.aread("a") is None

    try:
        under_trio(main)
    finally:
        store.release.set()


# -- every async method, sync calls inside trio, errors ------------------------------------------


def test_every_async_method_works_from_trio(store: Store) -> None:
    async def main() -> None:
        state = State("a task", id="run")
        state.add_user("hello")
        await store.asave(state)
        loaded = await store.aload("run")
        assert loaded.history == state.history
        assert [row.id for row in await store.alist()] == ["run"]
        assert [row.id async for row in store.aiter_states()] == ["run"]
        fork = await store.afork("run", new_id="fork")
        assert (await store.aread("fork")).entries == (await store.aread("run")).entries  # type: ignore[union-attr]
        lease = await store.aacquire("run", "worker-1", timedelta(minutes=1))
        assert await store.acurrent_lease("run") == lease
        with pytest.raises(LeaseHeldError):
            await store.awrite("run", [], snapshot())
        lease = await store.arenew(lease)
        await store.arelease(lease)
        assert await store.acurrent_lease("run") is None
        assert await store.agc(dry_run=True) == 0
        memory = store.memory("notes")
        item = await memory.aput("k", {"v": 1})
        assert (await memory.aget("k")) == item
        assert [i.key for i in await memory.aitems()] == ["k"]
        await memory.adelete("k", revision=1)
        assert await memory.aget("k") is None
        await store.adelete(fork.id)
        await store.adelete("run", children=True)
        assert await store.aread("run") is None

    under_trio(main)


def test_arekey_runs_under_trio(tmp_path: Path) -> None:
    old = Keyring({"k1": bytes([1]) * 32}, current="k1")
    new = Keyring({"k2": bytes([2]) * 32, "k1": bytes([1]) * 32}, current="k2")
    FileStore(tmp_path, encrypt=old).write("a", entries(0, 2), snapshot(), create=True)

    async def main() -> Any:
        async with FileStore(tmp_path, encrypt=new) as store:
            return await arekey(store)

    report = under_trio(main)
    assert (report.states, report.records) == (1, 3)
    assert FileStore(tmp_path, encrypt=Keyring({"k2": bytes([2]) * 32}, current="k2")).read("a") == Record(
        entries(0, 2), snapshot()
    )


def test_sync_methods_work_inside_a_trio_run(store: Store) -> None:
    async def main() -> None:
        await trio.lowlevel.checkpoint()
        store.write("s", entries(0, 2), snapshot(), create=True)  # blocks this run, as in asyncio
        assert store.read("s") == Record(entries(0, 2), snapshot())
        assert [row.id for row in store.list()] == ["s"]
        state = State("a task", id="saved")
        store.save(state)
        state = store.load("saved")
        state.add_user("more")
        store.save(state)
        assert store.load("saved").history == state.history
        assert store.memory().put("k", 1).revision == 1
        store.delete("s")
        assert store.read("s") is None

    under_trio(main)


def conflict(store: Store) -> Callable[[], Awaitable[Any]]:
    return lambda: store.awrite("e", entries(0, 1, other=True), None)


ERRORS: dict[str, tuple[type[BaseException], Callable[[Store], Callable[[], Awaitable[Any]]]]] = {
    "exists": (StateExistsError, lambda s: lambda: s.awrite("e", entries(0, 1), None, create=True)),
    "conflict": (StateConflictError, conflict),
    "not found": (StateNotFoundError, lambda s: lambda: s.awrite("nobody", entries(0, 1), None)),
    "gap": (ValueError, lambda s: lambda: s.awrite("e", entries(5, 1), None)),
    "bad id": (ValueError, lambda s: lambda: s.aread("a/b")),
    "bad data": (TypeError, lambda s: lambda: s.awrite("e", [{"seq": 1, "x": {1, 2}}], None)),
}


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_carry_the_same_types_under_both_backends(store: Store, backend: str, case: str) -> None:
    kind, call = ERRORS[case]
    store.write("e", entries(0, 1), snapshot(), create=True)

    async def main() -> None:
        with pytest.raises(kind) as raised:
            await call(store)()
        # Not chained to asyncio's "no running event loop" the trio path once came through.
        assert raised.value.__context__ is None

    anyio.run(main, backend=backend)
    assert store.read("e") == Record(entries(0, 1), snapshot())


def test_trio_in_guest_mode_on_an_asyncio_loop_writes_and_reads(tmp_path: Path) -> None:
    """asyncio's loop runs trio's tasks there, but they are trio's: they take the trio path
    (once, the write ran and its caller got trio's TypeError for an asyncio future)."""
    store = FileStore(tmp_path)
    seen: list[Record | None] = []

    async def guest() -> None:
        await store.awrite("g", entries(0, 2), snapshot(), create=True)
        seen.append(await store.aread("g"))

    async def host() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        trio.lowlevel.start_guest_run(
            guest,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            done_callback=done.set_result,
            host_uses_signal_set_wakeup_fd=True,
        )
        (await done).unwrap()  # the guest's outcome: its error, if it failed

    asyncio.run(host())
    assert seen == [Record(entries(0, 2), snapshot())]
    store.close()


def test_a_closed_store_refuses_trio_callers_with_runtime_error(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.close()

    async def main() -> None:
        with pytest.raises(RuntimeError, match="closed"):
            await store.aread("a")

    under_trio(main)


def test_the_asyncio_path_never_goes_through_anyio(tmp_path: Path) -> None:
    # A fresh process: statekeep's trio support (and anyio) is loaded only for a trio caller.
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from statekeep import FileStore
        async def main():
            store = FileStore({str(tmp_path)!r})
            await store.awrite("a", [{{"seq": 0}}], {{}}, create=True)
            assert (await store.aread("a")).entries == [{{"seq": 0}}]
            await store.aclose()
        asyncio.run(main())
        print(sorted(m for m in ("anyio", "statekeep._runtime.elsewhere") if m in sys.modules))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=JOIN)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# -- the conformance kit's trio twins, in a store author's project ------------------------------

KIT = """
from statekeep import FileStore
from statekeep.testing import StoreContract

class TestKitStore(StoreContract):
    def make_store(self, tmp_path):
        return FileStore(tmp_path / "store")
"""
PYTEST = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider"]
KIT_TESTS = ["test_async_tests_run_on_the_backend_they_name", "test_create_then_read_round_trips"]


@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_the_kits_trio_twins_run_under_trio_in_either_pytest_asyncio_mode(mode: str, tmp_path: Path) -> None:
    # A project of its own, outside this repository's configuration: in strict mode anyio's
    # plugin runs the twins; in auto mode pytest-asyncio takes them and they run trio themselves.
    (tmp_path / "test_kit_store.py").write_text(KIT)
    proc = subprocess.run(
        [*PYTEST, "-o", f"asyncio_mode={mode}", "test_kit_store.py", "-k", " or ".join(KIT_TESTS)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert f"mode=Mode.{mode.upper()}" in out
    outcomes = dict(re.findall(r"::TestKitStore::(\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL)", out))
    expected = [
        *(name + twin for name in KIT_TESTS[:1] for twin in ("", "_under_trio")),
        *(f"{KIT_TESTS[1]}{twin}[{api}]" for twin in ("", "_under_trio") for api in ("sync", "async")),
    ]
    assert outcomes == dict.fromkeys(expected, "PASSED"), out
    assert "never awaited" not in out and "not natively supported" not in out, out


# -- adapters ------------------------------------------------------------------------------------


def test_the_langgraph_savers_async_methods_work_awaited_from_trio(store: Store) -> None:
    # Its async path only awaits the store's (LangGraph's graphs themselves run on asyncio).
    from langgraph.checkpoint.base import ERROR

    from statekeep.adapters.langgraph import StatekeepSaver
    from tests.adapters.test_langgraph_saver import checkpoint, shape

    saver = StatekeepSaver(store)
    thread = {"configurable": {"thread_id": "a"}}

    async def main() -> Any:
        second = await saver.aput(
            {"configurable": {"thread_id": "a", "checkpoint_ns": ""}},
            checkpoint({"k": "v"}),
            {"step": 1},
            {"k": 1},
        )
        await saver.aput_writes(second, [("k", "w"), (ERROR, "e")], "task")
        return shape(await saver.aget_tuple(thread)), [shape(t) async for t in saver.alist(None)]

    seen, listed = under_trio(main)
    assert seen == shape(saver.get_tuple(thread))
    assert seen[5] == [("task", ERROR, "e"), ("task", "k", "w")]
    assert listed == [shape(t) for t in saver.list(None)]
    under_trio(saver.adelete_thread, "a")
    assert saver.get_tuple(thread) is None

"""StatekeepSessionService's ``app:`` and ``user:`` state under failure and load: an event's
shared deltas are saved with it and applied once, in the session's order, whatever fails
or crashes in between; many concurrent appends in one process all go in."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions

from statekeep import FileStore, MemoryStore, SQLiteStore, Store
from statekeep.adapters._adk_layout import app_id_of, session_id_of, user_id_of
from statekeep.adapters.adk import StatekeepSessionService
from tests.support import REPO

from .conftest import SPACE

SHARED = {app_id_of("a"), user_id_of("a", "u")}


def event(i: int | str, **delta: Any) -> Event:
    return Event(id=f"e{i}", author="user", invocation_id="i", actions=EventActions(state_delta=delta))


def faulty(base: type[Store]) -> type[Store]:
    """``base`` whose writes to the app and user States of app ``a``, user ``u`` raise
    OSError while ``failing`` is set (a store error after the session's write)."""

    class Faulty(base):  # type: ignore[valid-type, misc]
        failing = False

        async def awrite(
            self, state_id: str, entries: Any, snapshot: Any, *, expect_next: int | None = None, **kwargs: Any
        ) -> None:
            if self.failing and state_id in SHARED:
                raise OSError("injected: the disk is full")
            await super().awrite(state_id, entries, snapshot, expect_next=expect_next, **kwargs)

    return Faulty


FAULTY: dict[str, Callable[[Path], Any]] = {
    "memory": lambda tmp: faulty(MemoryStore)(namespace=SPACE),
    "sqlite": lambda tmp: faulty(SQLiteStore)(tmp / "s.db", namespace=SPACE),
    "file": lambda tmp: faulty(FileStore)(tmp / "store", namespace=SPACE),
}


async def stored_ids(service: StatekeepSessionService, sid: str = "s") -> list[str]:
    session = await service.get_session(app_name="a", user_id="u", session_id=sid)
    assert session is not None
    return [e.id for e in session.events]


@pytest.mark.parametrize("store", ["memory", "sqlite", "file", "postgres"], indirect=True)
async def test_many_concurrent_appends_in_one_process_all_apply_their_shared_state(store: Store) -> None:
    """160 appends at once, each to a session of its own, each changing the app's and the
    user's state: every one returns, every key is there. (Not on Redis: 160 reads at once
    exceed its client's connection pool, MaxConnectionsError, whatever the adapter does.)"""
    service = StatekeepSessionService(store)
    n = 160
    sessions = [await service.create_session(app_name="a", user_id="u", session_id=f"s{i}") for i in range(n)]
    await asyncio.gather(
        *(service.append_event(sessions[i], event(i, **{f"app:k{i}": i, f"user:k{i}": i})) for i in range(n))
    )
    state = await service.get_session(app_name="a", user_id="u", session_id="s0")
    assert state is not None
    assert {k: v for k, v in state.state.items() if k.startswith("app:")} == {
        f"app:k{i}": i for i in range(n)
    }
    assert await service.get_user_state(app_name="a", user_id="u") == {f"k{i}": i for i in range(n)}
    assert [await stored_ids(service, f"s{i}") for i in range(n)] == [[f"e{i}"] for i in range(n)]


def test_a_service_used_from_several_event_loops_at_once(tmp_path: Path) -> None:
    """Two threads, each with its own loop, append through one service (its locks are per
    loop): every append goes in, every app key is there."""
    with SQLiteStore(tmp_path / "s.db", namespace=SPACE) as store:
        service = StatekeepSessionService(store)

        async def appends(t: int) -> None:
            made = [
                await service.create_session(app_name="a", user_id="u", session_id=f"t{t}-{i}")
                for i in range(30)
            ]
            await asyncio.gather(
                *(service.append_event(made[i], event(f"{t}-{i}", **{f"app:t{t}-{i}": i})) for i in range(30))
            )

        errors: list[BaseException] = []

        def thread(t: int) -> None:
            try:
                asyncio.run(appends(t))
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=thread, args=(t,)) for t in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == []
        session = asyncio.run(service.get_session(app_name="a", user_id="u", session_id="t0-0"))
        assert session is not None
        assert sorted(k for k in session.state if k.startswith("app:")) == sorted(
            f"app:t{t}-{i}" for t in range(2) for i in range(30)
        )


@pytest.mark.parametrize("kind", sorted(FAULTY))
async def test_a_store_error_after_the_event_is_written_leaves_its_shared_deltas_pending(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The event is saved with its deltas: append_event returns (and logs); the next read of
    the session, by another service, applies them; the natural retry is refused."""
    store = FAULTY[kind](tmp_path)
    try:
        service = StatekeepSessionService(store)
        session = await service.create_session(app_name="a", user_id="u", session_id="s")
        store.failing = True
        with caplog.at_level(logging.WARNING, logger="statekeep.adapters.adk"):
            await service.append_event(session, event(1, k=1, **{"user:lang": "fr", "app:v": 7}))
        assert "not applied yet" in caplog.text and "disk is full" in caplog.text
        assert [e.id for e in session.events] == ["e1"]
        assert await service.get_user_state(app_name="a", user_id="u") == {}  # not yet

        store.failing = False
        other = StatekeepSessionService(store)  # as another process
        got = await other.get_session(app_name="a", user_id="u", session_id="s")
        assert got is not None and got.state == {"k": 1, "user:lang": "fr", "app:v": 7}
        assert await other.get_user_state(app_name="a", user_id="u") == {"lang": "fr"}
        record = await store.aread(session_id_of("a", "u", "s"))
        assert record is not None and record.snapshot["adk"]["pending"] == []  # finished, cleared

        with pytest.raises(AlreadyExistsError, match="e1"):  # the retry of a saved event
            await other.append_event(got, event(1, k=1, **{"user:lang": "fr", "app:v": 7}))
        assert await stored_ids(other) == ["e1"]
    finally:
        await store.aclose()


@pytest.mark.parametrize("kind", sorted(FAULTY))
async def test_create_session_saves_its_shared_state_with_the_session(kind: str, tmp_path: Path) -> None:
    """A store error after the session is written: create_session returns the session with
    its state; the retry says it exists; a listing applies the app and user keys."""
    store = FAULTY[kind](tmp_path)
    try:
        service = StatekeepSessionService(store)
        store.failing = True
        made = await service.create_session(
            app_name="a", user_id="u", session_id="s", state={"k": 1, "user:plan": "pro", "app:x": 2}
        )
        assert made.state == {"k": 1, "user:plan": "pro", "app:x": 2}
        store.failing = False
        with pytest.raises(AlreadyExistsError):
            await service.create_session(
                app_name="a", user_id="u", session_id="s", state={"user:plan": "pro"}
            )
        listed = await StatekeepSessionService(store).list_sessions(app_name="a")
        assert [s.state for s in listed.sessions] == [{"k": 1, "user:plan": "pro", "app:x": 2}]
        assert await service.get_user_state(app_name="a", user_id="u") == {"plan": "pro"}
    finally:
        await store.aclose()


@pytest.mark.parametrize("kind", ["sqlite", "file"])
@pytest.mark.parametrize("mode", ["append", "create"])
def test_a_process_killed_between_the_session_and_the_user_state(
    kind: str, mode: str, tmp_path: Path
) -> None:
    """SIGKILL after the session's write, before the user state's: nothing is lost, the next
    reader applies the deltas, a retry is refused."""
    path = tmp_path / ("s.db" if kind == "sqlite" else "store")
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.children.adk_shared_child", kind, str(path), mode],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "HANG"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL

    async def check() -> None:
        store = SQLiteStore(path, namespace=SPACE) if kind == "sqlite" else FileStore(path, namespace=SPACE)
        try:
            service = StatekeepSessionService(store)
            got = await service.get_session(app_name="a", user_id="u", session_id="s")
            assert got is not None
            if mode == "create":
                assert got.state == {"k": 1, "user:plan": "pro"}
                assert await service.get_user_state(app_name="a", user_id="u") == {"plan": "pro"}
                with pytest.raises(AlreadyExistsError):
                    await service.create_session(app_name="a", user_id="u", session_id="s")
            else:
                assert got.state == {"k": 1, "user:lang": "fr", "app:v": 7}
                assert await service.get_user_state(app_name="a", user_id="u") == {"lang": "fr"}
                with pytest.raises(AlreadyExistsError):
                    await service.append_event(got, event(1, k=1, **{"user:lang": "fr", "app:v": 7}))
                assert await stored_ids(service) == ["e1"]
        finally:
            await store.aclose()

    asyncio.run(check())


def gated(base: type[Store]) -> type[Store]:
    """``base`` whose first write to user ``u``'s state waits for ``gate`` (a process
    descheduled between the session's write and the user state's), ``reached`` set then."""

    class Gated(base):  # type: ignore[valid-type, misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.gate, self.reached, self.held = asyncio.Event(), asyncio.Event(), False

        async def awrite(
            self, state_id: str, entries: Any, snapshot: Any, *, expect_next: int | None = None, **kwargs: Any
        ) -> None:
            if state_id == user_id_of("a", "u") and not self.held:
                self.held = True
                self.reached.set()
                await self.gate.wait()
            await super().awrite(state_id, entries, snapshot, expect_next=expect_next, **kwargs)

    return Gated


@pytest.mark.parametrize("kind", ["sqlite", "file"])
async def test_user_state_ends_at_the_newest_events_value_between_processes(
    kind: str, tmp_path: Path
) -> None:
    """A saves e1 (user:step=1) and is held before its user state write; B appends e2
    (user:step=2); A's write then comes last, and changes nothing: the state is e2's."""
    path = tmp_path / ("s.db" if kind == "sqlite" else "store")
    opened = {"sqlite": SQLiteStore, "file": FileStore}[kind]
    slow, plain = gated(opened)(path, namespace=SPACE), opened(path, namespace=SPACE)
    try:
        a, b = StatekeepSessionService(slow), StatekeepSessionService(plain)
        session = await a.create_session(app_name="a", user_id="u", session_id="s")
        first = asyncio.create_task(a.append_event(session, event(1, step=1, **{"user:step": 1})))
        await slow.reached.wait()
        seen = await b.get_session(app_name="a", user_id="u", session_id="s")
        assert seen is not None
        await b.append_event(seen, event(2, step=2, **{"user:step": 2}))
        slow.gate.set()
        await first
        got = await a.get_session(app_name="a", user_id="u", session_id="s")
        assert got is not None and [e.id for e in got.events] == ["e1", "e2"]
        assert got.state == {"step": 2, "user:step": 2}
        assert await b.get_user_state(app_name="a", user_id="u") == {"step": 2}
    finally:
        await slow.aclose()
        await plain.aclose()

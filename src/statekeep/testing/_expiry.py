"""The expiry part of the Store contract: ``expires_at``, a store's ``retention`` and ``gc``.

Time is the test's to move. A local store takes a ``clock=`` (a function returning an aware
datetime): the tests pass a :class:`FakeClock` and move it. A server store judges expiry by
its server's clock: the tests give a State a short expiry and ask the server for its time
(:meth:`ExpiryContract.server_now`) until that time has come; nothing waits a fixed time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import pytest

from .._core.errors import StateNotFoundError
from .._core.labels import iso
from .._core.records import Record
from .._run.state import State
from .._store.contract import Store
from ._backends import on_asyncio
from ._helpers import Api, entries, snapshot

asyncio_test = pytest.mark.asyncio

#: How long a server's clock is polled for a short expiry to pass before the test fails.
POLL_LIMIT = 60.0


class FakeClock:
    """A clock the test moves (``clock.at``, :meth:`advance`); pass it as a store's ``clock=``."""

    def __init__(self, at: datetime | None = None) -> None:
        self.at = datetime.now(UTC) if at is None else at

    def __call__(self) -> datetime:
        return self.at

    def advance(self, by: timedelta) -> None:
        self.at += by


class Timeline:
    """The time one test's store judges expiry by, and the way to let it pass."""

    def __init__(self, contract: ExpiryContract, store: Store, clock: FakeClock | None) -> None:
        self.contract, self.store, self.clock = contract, store, clock
        #: An expiry short enough to wait for (a server store), or any period (a moved clock).
        self.span = timedelta(hours=1) if clock is not None else contract.server_span

    async def now(self) -> datetime:
        if self.clock is not None:
            return self.clock()
        return await on_asyncio(lambda: self.contract.server_now(self.store))

    async def reach(self, when: datetime) -> None:
        """Return once the store's clock is past ``when``."""
        if self.clock is not None:
            self.clock.at = max(self.clock.at, when + timedelta(microseconds=1))
            return
        deadline = time.monotonic() + POLL_LIMIT
        while await self.now() <= when:  # polled: the server's clock is the judge
            assert time.monotonic() < deadline, f"the server clock never reached {when}"
            await anyio.sleep(0.05)


def expiring(
    task: str, expires_at: datetime | None, updated: str = "2026-01-01T00:00:00+00:00"
) -> dict[str, Any]:
    """A snapshot with an explicit ``expires_at`` (None: none)."""
    snap = snapshot(task, updated=updated)
    return snap if expires_at is None else {**snap, "expires_at": iso(expires_at)}


class ExpiryContract:
    """Mixed into :class:`StoreContract`: expired States are absent; ``gc`` removes them."""

    #: A snapshot's ``expires_at`` expires the State; the store takes ``retention`` and has ``gc``.
    supports_expiry: ClassVar[bool] = True
    supports_list: ClassVar[bool]
    #: The store judges expiry by its server's clock: define :meth:`server_now`.
    server_clock: ClassVar[bool] = False
    #: The short expiry the tests give a server store's States, and wait out.
    server_span: ClassVar[timedelta] = timedelta(seconds=1)

    if TYPE_CHECKING:

        def needs(self, *flags: str) -> None: ...

    def make_store_with(self, tmp_path: Path, **options: Any) -> Store:
        """A store on the same storage as ``make_store(tmp_path)``, made with ``options``:
        ``namespace``, ``retention`` (a timedelta) and, for a local store, ``clock``."""
        raise NotImplementedError(f"{type(self).__name__} must define make_store_with(tmp_path, **options)")

    async def server_now(self, store: Store) -> datetime:
        """The time ``store``'s server judges expiry by (for ``server_clock`` stores)."""
        raise NotImplementedError(f"{type(self).__name__} must define server_now(store)")

    @contextlib.asynccontextmanager
    async def timed(self, tmp_path: Path, mode: str, **options: Any) -> AsyncIterator[tuple[Api, Timeline]]:
        """A store made with ``options`` whose time the test controls, and its timeline."""
        self.needs("supports_expiry")
        clock = None if self.server_clock else FakeClock()
        if clock is not None:
            options["clock"] = clock
        store = self.make_store_with(tmp_path, **options)
        try:
            yield Api(store, mode), Timeline(self, store, clock)
        finally:
            await store.aclose()

    @pytest.mark.parametrize("mode", ["sync", "async"])
    @asyncio_test
    async def test_expiry_an_expired_state_is_absent_everywhere(self, tmp_path: Path, mode: str) -> None:
        async with self.timed(tmp_path, mode) as (api, line):
            start = await line.now()
            soon, later = start + line.span, start + line.span + timedelta(days=1)
            await api.write(
                "short", entries(0, 2), expiring("short", soon, "2026-01-03T00:00:00+00:00"), create=True
            )
            await api.write(
                "long", entries(0, 1), expiring("long", later, "2026-01-02T00:00:00+00:00"), create=True
            )
            await api.write("never", entries(0, 1), expiring("never", None), create=True)
            task = State("forkable", id="src")
            task.expire_at(soon)
            await api.save(task)
            await line.reach(soon)
            assert await api.read("short") is None and await api.read("src") is None
            with pytest.raises(StateNotFoundError):
                await api.load("src")
            with pytest.raises(StateNotFoundError):
                await api.fork("src")
            with pytest.raises(StateNotFoundError):
                await api.write("short", entries(2, 1), None)
            if self.supports_list:
                assert [r.id for r in await api.list()] == ["long", "never"]
            assert await api.read("long") == Record(
                entries(0, 1), expiring("long", later, "2026-01-02T00:00:00+00:00")
            )
            # A create over the expired remains replaces them whole.
            await api.write("short", entries(0, 1, other=True), snapshot("again"), create=True)
            assert await api.read("short") == Record(entries(0, 1, other=True), snapshot("again"))
            await api.save(State("new life", id="src"))
            assert len((await api.load("src")).history) == 1

    @pytest.mark.parametrize("mode", ["sync", "async"])
    @asyncio_test
    async def test_expiry_gc_removes_expired_states_and_counts_them(self, tmp_path: Path, mode: str) -> None:
        async with self.timed(tmp_path, mode) as (api, line):
            start = await line.now()
            soon, later = start + line.span, start + line.span + timedelta(days=1)
            for n in range(3):
                await api.write(f"old{n}", entries(0, 1), expiring("old", soon), create=True)
            await api.write("young", entries(0, 1), expiring("young", later), create=True)
            await api.write("forever", entries(0, 1), expiring("forever", None), create=True)
            if line.clock is not None:  # a server's clock may have passed ``soon`` already
                assert await api.gc() == 0
            await line.reach(soon)
            assert await api.gc(limit=2) == 2
            assert await api.gc() == 1
            assert await api.gc() == 0
            assert [await api.read(f"old{n}") for n in range(3)] == [None, None, None]
            assert await api.read("young") is not None and await api.read("forever") is not None
            await api.write("old0", entries(0, 1), snapshot("again"), create=True)  # the id is free again
            for bad in (0, -1, "2", 1.5):
                with pytest.raises(ValueError, match="limit"):
                    await api.gc(limit=bad)

    @pytest.mark.parametrize("mode", ["sync", "async"])
    @asyncio_test
    async def test_expiry_retention_stamps_states_without_their_own(self, tmp_path: Path, mode: str) -> None:
        retention = self.server_span if self.server_clock else timedelta(hours=2)
        async with self.timed(tmp_path, mode, retention=retention) as (api, line):
            before = await line.now()
            await api.write("kept", entries(0, 1), snapshot("kept"), create=True)
            after = await line.now()
            far = before + timedelta(days=30)
            own = State("own expiry", id="own")
            own.expire_at(far)
            await api.save(own)
            if self.supports_list:
                rows = {r.id: r for r in await api.list()}
                if "kept" in rows:
                    stamped = rows["kept"].expires_at
                    assert stamped is not None and before + retention <= stamped <= after + retention
                else:  # a server store: only its retention can have removed it already
                    assert await line.now() >= before + retention
                assert rows["own"].expires_at == far
            await line.reach(after + retention)
            assert await api.read("kept") is None
            assert (await api.load("own")).expires_at == far
            assert await api.gc() == 1
            if self.supports_list:
                assert [r.id for r in await api.list()] == ["own"]

    @asyncio_test
    async def test_expiry_each_write_extends_retention(self, tmp_path: Path) -> None:
        if self.server_clock:
            pytest.skip("needs a clock the test moves: a server store's writes cannot be timed exactly")
        async with self.timed(tmp_path, "sync", retention=timedelta(hours=1)) as (api, line):
            assert line.clock is not None
            await api.write("busy", entries(0, 1), snapshot("busy"), create=True)
            await api.write("idle", entries(0, 1), snapshot("idle"), create=True)
            line.clock.advance(timedelta(minutes=50))
            await api.write("busy", entries(1, 1), snapshot("busy", turn=1))
            line.clock.advance(timedelta(minutes=20))  # idle is 70 minutes old, busy 20
            assert await api.read("idle") is None
            busy = await api.read("busy")
            assert busy is not None and busy.entries == entries(0, 2)
            assert await api.gc() == 1
            assert await api.read("busy") is not None

    @pytest.mark.parametrize("mode", ["sync", "async"])
    @asyncio_test
    async def test_expiry_keep_for_expires_a_saved_state(self, tmp_path: Path, mode: str) -> None:
        async with self.timed(tmp_path, mode) as (api, line):
            state = State("short-lived", id="brief")
            state.keep_for(line.span)
            await api.save(state)
            assert state.expires_at is not None
            await line.reach(state.expires_at)
            assert await api.read("brief") is None
            with pytest.raises(StateNotFoundError):
                await api.load("brief")

    @pytest.mark.parametrize("mode", ["sync", "async"])
    @asyncio_test
    async def test_expiry_a_fork_does_not_inherit_its_sources_expiry(self, tmp_path: Path, mode: str) -> None:
        async with self.timed(tmp_path, mode) as (api, line):
            state = State("source", id="source")
            state.expire_at(await line.now() + timedelta(days=1))
            await api.save(state)
            fork = await api.fork("source", new_id="copy")
            assert fork.expires_at is None
            assert (await api.load("copy")).expires_at is None
            assert (await api.load("source")).expires_at == state.expires_at

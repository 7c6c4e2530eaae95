"""The fenced-lease part of the contract: acquire, renew, release, and writes, deletes and
forks refused for a stale or missing lease. Time passes as in the expiry tests: a moved
:class:`FakeClock` for a local store, the server's clock polled for a server store."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from .._core.errors import LeaseHeldError, StaleLeaseError, StateConflictError
from .._core.leases import Lease
from .._core.records import Record
from .._run.state import State
from .._store.contract import Store
from ._expiry import Timeline, expiring
from ._helpers import Api, entries, snapshot

if TYPE_CHECKING:
    import contextlib

asyncio_test = pytest.mark.asyncio
#: A lease that outlives any test: only a release or a takeover ends it.
LONG = timedelta(days=1)
modes = pytest.mark.parametrize("mode", ["sync", "async"])


class Leases:
    """A store's lease calls (and writes that carry ``lease=``) through one API side."""

    def __init__(self, api: Api) -> None:
        self.store: Any = api.store
        self.mode = api.mode

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.mode == "async":
            return await getattr(self.store, "a" + name)(*args, **kwargs)
        return getattr(self.store, name)(*args, **kwargs)

    async def acquire(self, state_id: str, owner: str, ttl: float | timedelta) -> Lease:
        lease: Lease = await self.call("acquire", state_id, owner, ttl)
        return lease

    async def current(self, state_id: str) -> Lease | None:
        held: Lease | None = await self.call("current_lease", state_id)
        return held


class LeaseContract:
    """Mixed into :class:`StoreContract`; runs when ``supports_leases`` is True."""

    #: The store has acquire/renew/release/current_lease and takes ``lease=``.
    supports_leases: ClassVar[bool] = False
    durable: ClassVar[bool]
    server_clock: ClassVar[bool]
    supports_namespaces: ClassVar[bool]

    if TYPE_CHECKING:

        def needs(self, *flags: str) -> None: ...
        def timed(
            self, tmp_path: Path, mode: str, **options: Any
        ) -> contextlib.AbstractAsyncContextManager[tuple[Api, Timeline]]: ...
        def make_store_with(self, tmp_path: Path, **options: Any) -> Store: ...

    def short(self, line: Timeline) -> timedelta:
        """A lease period the test waits out (nothing relies on it lasting)."""
        return line.span

    @modes
    @asyncio_test
    async def test_lease_acquire_fences_writes_without_it(self, tmp_path: Path, mode: str) -> None:
        self.needs("supports_leases")
        async with self.timed(tmp_path, mode) as (api, line):
            leases = Leases(api)
            before = await line.now()
            lease = await leases.acquire("run", "worker-1", LONG)
            assert (lease.state_id, lease.owner, lease.token) == ("run", "worker-1", 1)
            assert lease.expires_at > before
            assert await leases.current("run") == lease
            with pytest.raises(LeaseHeldError) as held:
                await leases.acquire("run", "worker-2", LONG)
            assert (held.value.state_id, held.value.owner) == ("run", "worker-1")
            assert held.value.expires_at == lease.expires_at
            await leases.call("write", "run", entries(0, 2), snapshot("leased"), create=True, lease=lease)
            for refused in (
                api.write("run", entries(2, 1), None),
                api.delete("run"),
                api.fork("run", new_id="copy"),
                api.save(State("another", id="run")),
            ):
                with pytest.raises(LeaseHeldError, match="worker-1"):
                    await refused
            assert await api.read("run") == Record(entries(0, 2), snapshot("leased"))
            assert await api.read("copy") is None

    @modes
    @asyncio_test
    async def test_lease_stale_after_expiry_and_takeover(self, tmp_path: Path, mode: str) -> None:
        self.needs("supports_leases")
        async with self.timed(tmp_path, mode) as (api, line):
            leases = Leases(api)
            await api.write("run", entries(0, 1), snapshot("one"), create=True)
            first = await leases.acquire("run", "worker-1", self.short(line))
            await line.reach(first.expires_at)
            assert await leases.current("run") is None
            with pytest.raises(StaleLeaseError, match="token 1"):
                await leases.call("write", "run", entries(1, 1), None, lease=first)
            second = await leases.acquire("run", "worker-2", LONG)
            assert second.token > first.token
            for stale in (
                leases.call("write", "run", entries(1, 1), None, lease=first),
                leases.call("renew", first),
                leases.call("delete", "run", lease=first),
                leases.call("fork", "run", new_id="copy", lease=first),
            ):
                with pytest.raises(StaleLeaseError):
                    await stale
            await leases.call("release", first)  # no longer current: nothing happens
            assert await leases.current("run") == second
            await leases.call("write", "run", entries(1, 1), snapshot("two"), lease=second)
            assert await api.read("run") == Record(entries(0, 2), snapshot("two"))
            assert issubclass(StaleLeaseError, StateConflictError)

    @modes
    @asyncio_test
    async def test_lease_renew_and_release_keep_the_token_growing(self, tmp_path: Path, mode: str) -> None:
        self.needs("supports_leases")
        async with self.timed(tmp_path, mode) as (api, _line):
            leases = Leases(api)
            lease = await leases.acquire("run", "w", LONG)
            longer = await leases.call("renew", lease, timedelta(days=2))
            assert (longer.token, longer.owner) == (lease.token, lease.owner)
            assert longer.expires_at > lease.expires_at
            assert await leases.current("run") == longer
            await leases.call("release", longer)
            assert await leases.current("run") is None
            await leases.call("release", longer)  # twice: nothing happens
            with pytest.raises(StaleLeaseError):
                await leases.call("renew", longer)
            await api.write("run", entries(0, 1), snapshot(), create=True)  # no lease: free now
            again = await leases.acquire("run", "w", LONG)
            assert again.token == lease.token + 1
            await leases.call("delete", "run", lease=again)
            assert await api.read("run") is None
            await leases.call("release", again)
            after_delete = await leases.acquire("run", "w", LONG)
            assert after_delete.token == again.token + 1

    @modes
    @asyncio_test
    async def test_lease_save_is_fenced(self, tmp_path: Path, mode: str) -> None:
        self.needs("supports_leases")
        async with self.timed(tmp_path, mode) as (api, _line):
            leases = Leases(api)
            lease = await leases.acquire("job", "w1", LONG)
            state = State("leased job", id="job")
            await leases.call("save", state, lease=lease)
            state.add_user("more")
            await leases.call("release", lease)
            taken = await leases.acquire("job", "w2", LONG)
            with pytest.raises(StaleLeaseError, match="no longer current"):
                await leases.call("save", state, lease=lease)
            fresh = await api.load("job")
            assert len(fresh.history) == 1
            fresh.add_user("from w2")
            await leases.call("save", fresh, lease=taken)
            assert [e["kind"] for e in (await api.read("job") or Record()).entries] == ["task", "user"]

    @modes
    @asyncio_test
    async def test_lease_gc_skips_a_leased_state(self, tmp_path: Path, mode: str) -> None:
        self.needs("supports_leases")
        async with self.timed(tmp_path, mode) as (api, line):
            leases = Leases(api)
            soon = await line.now() + line.span
            await api.write("kept", entries(0, 1), expiring("kept", soon), create=True)
            await api.write("gone", entries(0, 1), expiring("gone", soon), create=True)
            lease = await leases.acquire("kept", "w", LONG)
            await line.reach(soon)
            assert await api.gc() == 1
            await leases.call("release", lease)
            assert await api.gc() == 1

    @modes
    @asyncio_test
    async def test_lease_bad_arguments(self, tmp_path: Path, mode: str) -> None:
        self.needs("supports_leases")
        async with self.timed(tmp_path, mode) as (api, _line):
            leases = Leases(api)
            for ttl in (0, -1, float("nan"), timedelta(0), timedelta(days=8)):
                with pytest.raises(ValueError, match="ttl"):
                    await leases.acquire("run", "w", ttl)
            with pytest.raises(TypeError, match="ttl"):
                await leases.acquire("run", "w", "10")  # type: ignore[arg-type]
            for owner in ("", "a\nb", "x" * 201):
                with pytest.raises(ValueError, match="owner"):
                    await leases.acquire("run", owner, 5)
            lease = await leases.acquire("run", "w", LONG)
            with pytest.raises(ValueError, match="lease is for State 'run'"):
                await leases.call("write", "other", entries(0, 1), snapshot(), create=True, lease=lease)
            with pytest.raises(TypeError, match="lease="):
                await leases.call("write", "run", entries(0, 1), snapshot(), create=True, lease="token-1")
            assert await api.read("other") is None and await api.read("run") is None

    @asyncio_test
    async def test_lease_is_kept_by_the_storage(self, tmp_path: Path) -> None:
        self.needs("supports_leases", "durable")
        first = self.make_store_with(tmp_path)
        try:
            lease = await first.aacquire("run", "w", LONG)  # type: ignore[attr-defined]
        finally:
            await first.aclose()
        again = self.make_store_with(tmp_path)
        try:
            assert await again.acurrent_lease("run") == lease  # type: ignore[attr-defined]
            with pytest.raises(LeaseHeldError):
                await again.awrite("run", entries(0, 1), snapshot(), create=True)
        finally:
            await again.aclose()

    @modes
    @asyncio_test
    async def test_lease_of_one_namespace_passes_no_other_namespaces_fence(
        self, tmp_path: Path, mode: str
    ) -> None:
        self.needs("supports_leases", "supports_namespaces")
        a = Leases(Api(self.make_store_with(tmp_path, namespace="a"), mode))
        b = Leases(Api(self.make_store_with(tmp_path, namespace="b"), mode))
        try:
            in_a = await a.acquire("run", "w", LONG)
            in_b = await b.acquire("run", "w", LONG)
            # Tokens start at 1 in every namespace: owner and token coincide.
            assert (in_a.owner, in_a.token) == (in_b.owner, in_b.token)
            assert (in_a.namespace, in_b.namespace) == ("a", "b") and in_a != in_b
            await b.call("write", "run", entries(0, 1), snapshot("b's"), create=True, lease=in_b)
            for crossing in (
                b.call("write", "run", entries(1, 1), None, lease=in_a),
                b.call("save", State("from a", id="run"), lease=in_a),
                b.call("delete", "run", lease=in_a),
                b.call("fork", "run", new_id="copy", lease=in_a),
                b.call("renew", in_a),
                b.call("release", in_a),
            ):
                with pytest.raises(ValueError, match="namespace 'a', not 'b'"):
                    await crossing
            # A lease naming no namespace (pickled by an older statekeep) is refused as stale.
            legacy = dataclasses.replace(in_b, namespace=None)
            for old in (
                b.call("write", "run", entries(1, 1), None, lease=legacy),
                b.call("renew", legacy),
                b.call("release", legacy),
            ):
                with pytest.raises(StaleLeaseError, match="names no namespace"):
                    await old
            assert await b.current("run") == in_b
            assert await b.call("read", "run") == Record(entries(0, 1), snapshot("b's"))
            assert await b.call("read", "copy") is None
        finally:
            await a.store.aclose()
            await b.store.aclose()

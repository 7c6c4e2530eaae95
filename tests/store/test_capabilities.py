"""Features ask a store for each capability they use (``statekeep.stores.engine``): every
built-in store offers its groups; a store of your own, and a backend with only the required
hooks, get each feature's fallback or a clear refusal, before anything is touched."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from statekeep import Keyring, Lease, MemoryStore, State, Store, rekey
from statekeep._store.changes import change_stamp
from statekeep._transfer.transfer import memory_view, source_ids
from statekeep.adapters._home import placed
from statekeep.cli._stats import count
from statekeep.stores.engine import (
    Backend,
    PreparedWrite,
    Record,
    SavedState,
    capabilities,
    check_overlap,
    check_preconditions,
    exists_error,
    left_out,
    listing_order,
    missing_error,
    plan_append,
    sealed_text,
)
from statekeep.testing import StoreContract

EVERY = {"namespaces", "leases", "reseal", "id_walk", "snapshot_reads", "trim"}
#: What each built-in store offers, by the name the ``store`` fixture gives it.
OFFERED = {
    "memory": EVERY | {"change_stamp", "blobs"},
    "file": EVERY | {"change_stamp", "size", "blobs"},
    "sqlite": EVERY | {"change_stamp", "size", "blobs"},
    "postgres": EVERY | {"size", "blobs"},
    "redis": EVERY | {"blobs"},
}


class DictBackend(Backend):
    """A backend with only the required hooks: States in a dict, as statekeep encodes them."""

    def __init__(self, *, namespace: str = "default", encrypt: Keyring | None = None) -> None:
        self._lifecycle(namespace, None)
        self._protect(None, encrypt, False)
        self.states: dict[str, list[Any]] = {}  # id -> [lines, snapshot, incarnation]

    def _storage_key(self) -> object:
        return ("dict", id(self.states), self.namespace)

    async def _write(self, write: PreparedWrite) -> None:
        sid, held = write.state_id, self.states.get(write.state_id)
        if write.create:
            if held is not None:
                raise exists_error(sid)
            self.states[sid] = [list(write.lines), write.snapshot, write.incarnation]
            return
        if held is None:
            raise missing_error(sid)
        lines, snapshot, incarnation = held
        check_preconditions(write, incarnation, len(lines), sealed_text(snapshot or (lines or [None])[-1]))
        skip = plan_append(write, len(lines))
        check_overlap(write, [orjson.loads(b) for b in lines[write.first_seq : write.first_seq + skip]])
        lines.extend(write.lines[skip:])
        held[1] = write.snapshot or snapshot

    async def _read(self, state_id: str, since: int = 0) -> Record | None:
        held = self.states.get(state_id)
        if held is None:
            return None
        lines, snapshot, incarnation = held
        return Record(
            [orjson.loads(b) for b in lines[since:]], snapshot and orjson.loads(snapshot), incarnation
        )

    async def _list(self) -> tuple[list[SavedState], list[str]]:
        rows, skipped = [], []
        for sid, (_, snapshot, _) in self.states.items():
            try:
                rows += [SavedState.from_snapshot(sid, orjson.loads(snapshot))] if snapshot else []
            except ValueError as exc:
                skipped.append(left_out(sid, exc))  # list() warns with it
        return listing_order(rows), skipped

    async def _delete(self, state_id: str, lease: Lease | None = None) -> None:
        self.states.pop(state_id, None)


class OwnStore(Store):
    """A store of one's own: the public contract alone."""

    def __init__(self) -> None:
        self.records: dict[str, tuple[list[dict[str, Any]], Any]] = {}

    def write(self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False) -> None:
        held, old = self.records.get(state_id, ([], None))
        self.records[state_id] = (held + [e for e in entries if e["seq"] >= len(held)], snapshot or old)

    def read(self, state_id: str) -> Record | None:
        return Record(*self.records[state_id]) if state_id in self.records else None

    def list(self) -> list[SavedState]:
        return [SavedState.from_snapshot(k, snap) for k, (_, snap) in self.records.items() if snap]


def saved(store: Store, state_id: str = "run-1") -> State:
    state = State("say hello", id=state_id)
    state.finish("hello")
    store.save(state)
    return state


def test_each_built_in_store_offers_its_capabilities(store: Store, request: pytest.FixtureRequest) -> None:
    kind = request.node.callspec.params["store"]
    assert capabilities(store) == OFFERED[kind]
    saved(store)
    assert asyncio.run(source_ids(store, {})) == ["run-1"]  # walked, not listed
    assert memory_view(store, "default") is not None
    assert store.memory().put("k", 1).revision == 1


def test_a_store_of_your_own_offers_none_and_each_feature_falls_back(tmp_path: Path) -> None:
    store = OwnStore()
    assert capabilities(store) == frozenset()
    saved(store)
    stats = count(store, lambda done, total: None)
    assert (stats.states, stats.bytes, stats.not_listed) == (1, None, None)
    assert asyncio.run(source_ids(store, {})) == ["run-1"]  # from the listing
    assert asyncio.run(change_stamp(store)) is None  # a poller lists every time
    assert memory_view(store, "default") is None
    assert placed(store, None, "langgraph") == (store, None)  # used as it is
    with pytest.raises(NotImplementedError, match="memory"):
        store.memory()
    with MemoryStore() as other:
        lease = other.acquire("run-1", "worker", 30)
    with pytest.raises(NotImplementedError, match="does not support leases"):
        store.delete("run-1", lease=lease)
    with pytest.raises(TypeError, match="rekey works on the built-in stores, not on a OwnStore"):
        rekey(store)


def test_a_backend_with_only_the_required_hooks_gets_fallbacks_and_clear_refusals() -> None:
    ring = Keyring({"k1": bytes(32)}, current="k1")
    with DictBackend(encrypt=ring) as store:
        assert capabilities(store) == {"snapshot_reads"}
        state = saved(store)
        assert store.load("run-1") == state and store.list()[0].id == "run-1"
        assert store.fork("run-1", new_id="run-2").history == state.history
        # An adapter keeps its States in the store as it is: it has no other namespace.
        assert placed(store, None, "langgraph") == (store, None)
        with pytest.raises(TypeError, match="needs a store with namespaces"):
            placed(store, "mine", "langgraph")
        with pytest.raises(NotImplementedError, match="has no namespaces"):
            store.memory()
        assert memory_view(store, "default") is None
        with pytest.raises(NotImplementedError, match="does not support leases"):
            store.acquire("run-1", "worker", 30)
        before = {k: list(v[0]) for k, v in store.states.items()}
        with pytest.raises(TypeError, match="rekey works on the built-in stores, not on a DictBackend"):
            rekey(store)  # refused before any State is read
        assert {k: v[0] for k, v in store.states.items()} == before
        stats = count(store, lambda done, total: None)
        assert (stats.states, stats.bytes, stats.not_listed) == (2, None, None)


class TestDictBackend(StoreContract):
    """The conformance kit passes a backend that implements only the required hooks."""

    durable = False
    supports_expiry = False  # no expiry judged on writes (a create over an expired State)
    supports_namespaces = supports_memory = supports_leases = False

    def make_store(self, tmp_path: Path) -> Store:
        return DictBackend()


class LeasedOwnStore(OwnStore):
    """A store of one's own that offers the public lease API over a MemoryStore's leases,
    and remembers which lease each delete was given."""

    def __init__(self) -> None:
        super().__init__()
        self.leases = MemoryStore()
        self.deleted: list[tuple[str, Lease | None]] = []

    async def aacquire(self, state_id: str, owner: str, ttl: float | Any) -> Lease:
        return await self.leases.aacquire(state_id, owner, ttl)

    async def arenew(self, lease: Lease, ttl: float | Any = None) -> Lease:
        return await self.leases.arenew(lease, ttl)

    async def arelease(self, lease: Lease) -> None:
        await self.leases.arelease(lease)

    async def acurrent_lease(self, state_id: str) -> Lease | None:
        return await self.leases.acurrent_lease(state_id)

    async def adelete(self, state_id: str, *, children: bool = False, lease: Lease | None = None) -> None:
        self.deleted.append((state_id, lease))
        self.records.pop(state_id, None)


def test_a_store_of_your_own_with_the_lease_api_offers_leases_and_gets_its_lease() -> None:
    store = LeasedOwnStore()
    assert "leases" in capabilities(store) and "leases" not in capabilities(OwnStore())
    saved(store)
    lease = store.leases.acquire("run-1", "worker", 30)
    store.delete("run-1", lease=lease)  # fenced: the store is given the lease to check
    assert store.deleted == [("run-1", lease)]


def test_a_backend_with_reseal_but_no_namespaces_is_rekeyed() -> None:
    class ResealingBackend(DictBackend):
        async def _reseal(self, state_id: str, entries: Any, snapshot: Any) -> int:
            held = self.states[state_id]
            for seq, (_, new) in entries.items():
                held[0][seq] = new + b"\n"
            if snapshot is not None:
                held[1] = snapshot[1]
            return len(entries) + (snapshot is not None)

    with ResealingBackend(encrypt=Keyring({"k1": bytes(32)}, current="k1")) as store:
        assert "reseal" in capabilities(store) and "namespaces" not in capabilities(store)
        state = saved(store)
        report = rekey(store)  # no agent memory to re-seal: it has none
        assert report.states == 1
        assert store.load("run-1") == state

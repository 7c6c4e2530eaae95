"""The lease rules on a MemoryStore with a clock the test moves."""

from __future__ import annotations

import base64
import pickle
from datetime import UTC, datetime, timedelta

import pytest

from statekeep import LeaseHeldError, MemoryStore, StaleLeaseError, State
from statekeep.testing import FakeClock
from tests.support.older import run_older


def test_a_released_lease_stays_ended_when_the_clock_steps_back() -> None:
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    store = MemoryStore(clock=clock)
    lease = store.acquire("x", "w1", 60)
    store.release(lease)
    clock.advance(timedelta(seconds=-30))
    assert store.current_lease("x") is None
    with pytest.raises(StaleLeaseError):
        store.write("x", [], None, create=True, lease=lease)
    store.write("x", [], None, create=True)


@pytest.mark.parametrize("ttl", [1e300, 10**20, float("inf"), -0.5])
def test_a_ttl_out_of_range_is_a_value_error(ttl: float) -> None:
    with pytest.raises(ValueError, match="at most 7 days"):
        MemoryStore().acquire("x", "w", ttl)


def test_renew_and_release_need_a_lease() -> None:
    store = MemoryStore()
    for call in (store.renew, store.release):
        with pytest.raises(TypeError, match="Lease"):
            call(None)  # type: ignore[arg-type]


def test_a_tree_delete_checks_every_lease_before_removing_anything() -> None:
    store = MemoryStore()
    root = State("root", id="r")
    store.save(root)
    for cid in ("c1", "c2"):
        store.save(State("child", id=cid, parent="r"))
    lease = store.acquire("r", "w", 60)
    other = store.acquire("c2", "someone", 60)
    with pytest.raises(LeaseHeldError, match="'c2' is leased to 'someone'"):
        store.delete("r", children=True, lease=lease)
    with pytest.raises(TypeError):
        store.delete("r", children=True, lease="bogus")  # type: ignore[arg-type]
    assert sorted(r.id for r in store.list()) == ["c1", "c2", "r"]
    store.release(other)
    store.delete("r", children=True, lease=lease)
    assert store.list() == []


def test_gc_dry_run_leaves_leased_states_out_of_its_count() -> None:
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    store = MemoryStore(clock=clock, retention=timedelta(seconds=10))
    for sid in ("a", "b"):
        store.save(State("t", id=sid))
    store.acquire("a", "w", 600)
    clock.advance(timedelta(seconds=20))
    assert store.gc(dry_run=True) == 1
    assert store.gc() == 1


def test_a_lease_pickles_with_its_namespace_and_one_from_the_last_release_is_refused() -> None:
    store = MemoryStore(namespace="team")
    lease = store.acquire("x", "w1", 60)
    assert pickle.loads(pickle.dumps(lease)) == lease and lease.namespace == "team"
    assert repr(lease).endswith(", namespace='team')")
    # The last release's statekeep pickles its Lease (no namespace), and reads ours.
    older = run_older(
        f"""
        import base64, pickle, sys
        from datetime import datetime, UTC
        from statekeep import Lease
        ours = pickle.loads(base64.b64decode({base64.b64encode(pickle.dumps(lease)).decode()!r}))
        assert (ours.state_id, ours.owner, ours.token) == ("x", "w1", {lease.token}), ours
        theirs = Lease("x", "w1", {lease.token}, datetime.fromisoformat({lease.expires_at.isoformat()!r}))
        sys.stdout.write(base64.b64encode(pickle.dumps(theirs)).decode())
        """
    )
    assert older.returncode == 0, older.stderr
    legacy = pickle.loads(base64.b64decode(older.stdout))
    assert legacy.namespace is None and legacy.token == lease.token and legacy.owner == lease.owner
    with pytest.raises(StaleLeaseError, match="names no namespace"):
        store.write("x", [], None, create=True, lease=legacy)
    assert store.current_lease("x") == lease and store.read("x") is None

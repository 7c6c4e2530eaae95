"""Rekey: records sealed with an old key re-sealed with the current one, resumable, with
counts and progress; the stored bytes checked, not just the reads.

The ``statekeep rekey`` command: tests/cli/test_cli_protect.py.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from statekeep import DecryptionError, FileStore, Keyring, MemoryStore, SQLiteStore, State, Store, rekey
from statekeep._runtime.bridge import run_sync
from tests.support import servers
from tests.support.stores import STORE_FACTORIES, namespace

K0, K1, K2 = (bytes([n]) * 32 for n in (7, 1, 2))
OLD = Keyring({"k1": K1}, current="k1")
ROTATED = Keyring({"k2": K2, "k1": K1}, current="k2")
NEW_ONLY = Keyring({"k2": K2}, current="k2")


@pytest.fixture(params=sorted(STORE_FACTORIES))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def opened(kind: str, tmp_path: Any, shared: list[Store], **protect: Any) -> Any:
    """A store on the same storage each time (one per test), opened with ``protect``."""
    if kind == "memory":
        store: Any = MemoryStore(**protect)
        if shared:  # the same States: MemoryStore keeps them per instance
            first: Any = shared[0]
            store._spaces, store._space = first._spaces, first._space
    elif kind == "file":
        store = FileStore(tmp_path / "store", **protect)
    elif kind == "sqlite":
        store = SQLiteStore(tmp_path / "store.db", **protect)
    elif kind == "postgres":
        store = servers.postgres_store(schema=namespace(tmp_path), **protect)
    else:
        store = servers.redis_store(prefix=namespace(tmp_path) + ":", **protect)
    shared.append(store)
    return store


@pytest.fixture
def shared() -> Any:
    """The stores a test opened (on one storage), closed at its end."""
    stores: list[Store] = []
    yield stores
    for store in stores:
        store.close()


def stored(store: Any, state_id: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """What the store holds for a State, as stored (sealed or not)."""
    raw = run_sync(store._read(state_id), "aread")
    record = raw() if callable(raw) else raw
    assert record is not None
    return record.entries, record.snapshot


def key_ids(store: Any, state_id: str) -> set[str]:
    entries, snapshot = stored(store, state_id)
    sealed = [e["sk.sealed"] for e in entries] + [snapshot["sk.sealed"], snapshot["task"][10:]]  # type: ignore[index]
    return {s.partition(":")[0] for s in sealed}


def make(store: Store, state_id: str, turns: int) -> State:
    state = State(f"task of {state_id}", id=state_id)
    for n in range(turns):
        state.add_user(f"secret message {n} of {state_id}")
        store.save(state)
    return state


def contents(store: Store, state_id: str) -> Any:
    record = store.read(state_id)
    assert record is not None
    return record.entries, {k: v for k, v in record.snapshot.items() if k != "updated_at"}


def test_rotation_then_rekey_leaves_everything_on_the_current_key(
    kind: str, tmp_path: Any, shared: list[Store]
) -> None:
    old = opened(kind, tmp_path, shared, encrypt=OLD)
    for n in range(3):
        make(old, f"s{n}", 4)
    before = {sid: contents(old, sid) for sid in ("s0", "s1", "s2")}
    store = opened(kind, tmp_path, shared, encrypt=ROTATED)
    newer = make(store, "s3", 2)  # written after the rotation: already on k2
    assert key_ids(store, "s0") == {"k1"} and key_ids(store, "s3") == {"k2"}

    seen: list[tuple[int, int]] = []
    report = rekey(store, progress=lambda done, total: seen.append((done, total)))

    per_state = len(stored(store, "s0")[0]) + 1  # every entry and the snapshot
    assert (report.states, report.records, report.current) == (4, 3 * per_state, 1)
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert all(key_ids(store, f"s{n}") == {"k2"} for n in range(4))
    fresh = opened(kind, tmp_path, shared, encrypt=NEW_ONLY)  # k1 can go now
    assert {sid: contents(fresh, sid) for sid in before} == before
    assert fresh.load("s3").history == newer.history
    again = rekey(store)  # run again: nothing left to do
    assert (again.states, again.records, again.current) == (4, 0, 4)


def test_a_rekey_stopped_part_way_resumes_where_it_stopped(
    kind: str, tmp_path: Any, shared: list[Store]
) -> None:
    old = opened(kind, tmp_path, shared, encrypt=OLD)
    for n in range(3):
        make(old, f"s{n}", 2)
    store = opened(kind, tmp_path, shared, encrypt=ROTATED)

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt  # stopped after the first State

    with pytest.raises(KeyboardInterrupt):
        rekey(store, progress=interrupt)
    assert sorted(len(key_ids(store, f"s{n}")) for n in range(3)) == [1, 1, 1]
    assert sum(key_ids(store, f"s{n}") == {"k2"} for n in range(3)) == 1
    report = rekey(store)
    per_state = len(stored(store, "s0")[0]) + 1
    assert (report.states, report.current, report.records) == (3, 1, 2 * per_state)
    assert all(key_ids(store, f"s{n}") == {"k2"} for n in range(3))


def test_a_record_whose_key_is_missing_names_the_key_and_changes_nothing_of_its_state(
    kind: str, tmp_path: Any, shared: list[Store]
) -> None:
    lost = opened(kind, tmp_path, shared, encrypt=Keyring({"k0": K0}, current="k0"))
    make(lost, "s0", 2)
    store = opened(kind, tmp_path, shared, encrypt=ROTATED)
    before = stored(store, "s0")
    with pytest.raises(DecryptionError, match="'k0'") as caught:
        rekey(store)
    assert K0.hex() not in str(caught.value) and stored(store, "s0") == before


def test_plaintext_is_sealed_only_with_allow_plaintext(kind: str, tmp_path: Any, shared: list[Store]) -> None:
    clear = opened(kind, tmp_path, shared)
    make(clear, "p", 2)
    strict = opened(kind, tmp_path, shared, encrypt=ROTATED)
    report = rekey(strict)
    assert (report.states, report.records, report.current, report.plaintext) == (1, 0, 0, 1)
    assert "sk.sealed" not in stored(strict, "p")[1]  # type: ignore[operator]
    lenient = opened(kind, tmp_path, shared, encrypt=ROTATED, allow_plaintext=True)
    report = rekey(lenient)
    assert (report.records, report.plaintext) == (len(stored(strict, "p")[0]) + 1, 0)
    assert key_ids(strict, "p") == {"k2"}
    assert strict.load("p").messages[-1]["content"] == "secret message 1 of p"
    assert b"secret message" not in orjson.dumps(stored(strict, "p"))


def test_reseal_replaces_only_what_is_still_as_read(kind: str, tmp_path: Any, shared: list[Store]) -> None:
    """The hook's compare-and-replace: a record changed since it was read is left alone."""
    store = opened(kind, tmp_path, shared, encrypt=OLD)
    make(store, "s", 2)
    entries, snapshot = stored(store, "s")
    other = orjson.dumps({**entries[1], "sk.sealed": "k1:AAAA"})
    changed = {
        1: (other, b'{"seq":1,"sk.sealed":"k9:x"}'),
        0: (orjson.dumps(entries[0]), orjson.dumps(entries[0])),
    }
    done = run_sync(store._locked("s", store._reseal("s", changed, (b'{"other":1}', b"{}"))), "x")
    assert done == 1 and stored(store, "s") == (entries, snapshot)


def test_agent_memory_is_re_sealed_too(kind: str, tmp_path: Any, shared: list[Store]) -> None:
    old = opened(kind, tmp_path, shared, encrypt=OLD)
    old.memory().put("profile", {"name": "Ada", "card": "4111 1111"})
    old.memory("team").put("plan", "sell")
    store = opened(kind, tmp_path, shared, encrypt=ROTATED)
    report = rekey(store, memory_scopes=["default", "team"])
    assert report.states == 2 and report.records > 0 and report.current == 0
    fresh = opened(kind, tmp_path, shared, encrypt=NEW_ONLY)
    assert fresh.memory().get("profile").value == {"name": "Ada", "card": "4111 1111"}
    assert fresh.memory("team").get("plan").value == "sell"


def test_rekey_needs_a_keyring() -> None:
    with pytest.raises(ValueError, match="encrypt="):
        rekey(MemoryStore())


def test_states_the_listing_leaves_out_are_reported_not_reached(
    kind: str, tmp_path: Any, shared: list[Store]
) -> None:
    old = opened(kind, tmp_path, shared, encrypt=OLD)
    make(old, "listed", 1)
    old.write("raw", [{"seq": 0, "kind": "note"}], {"task": "raw", "v": 1}, create=True)  # not a listing row
    store = opened(kind, tmp_path, shared, encrypt=ROTATED)
    with pytest.warns(RuntimeWarning, match="'raw' left out"):
        store.list()
    report = rekey(store)
    assert (report.states, report.unlisted) == (1, 1)
    assert "1 States the listing leaves out were NOT reached" in str(report)

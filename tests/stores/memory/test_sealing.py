"""Sealed records in a MemoryStore's storage: what a change to the stored bytes does. Each
backend's own tests do the same on its raw storage (files, pages, dumps)."""

from __future__ import annotations

import orjson
import pytest

from statekeep import DecryptionError, Keyring, MemoryStore, State

KEY = bytes(range(32))


def sealed_store(**options: object) -> MemoryStore:
    return MemoryStore(encrypt=Keyring({"k1": KEY}, current="k1"), **options)  # type: ignore[arg-type]


def saved(store: MemoryStore, state_id: str = "a", *users: str) -> State:
    state = State("a secret task", id=state_id, labels={"team": "x"})
    for text in users or ("hello", "world"):
        state.add_user(text)
    store.save(state)
    return state


def restore(store: MemoryStore, state_id: str, change: dict[str, object]) -> None:
    raw = orjson.loads(store._space.snapshots[state_id] or b"{}")
    store._space.snapshots[state_id] = orjson.dumps({**raw, **change})


@pytest.mark.parametrize(
    "change",
    [{"labels": {"team": "evil"}}, {"finished": True}, {"seq": 1}, {"injected": 1}, {"turn": 9}],
    ids=["labels", "finished", "seq", "injected", "turn"],
)
def test_a_changed_clear_snapshot_field_is_detected(change: dict[str, object]) -> None:
    store = sealed_store()
    saved(store)
    restore(store, "a", change)
    with pytest.raises(DecryptionError, match="differs from the sealed copy"):
        store.load("a")


def test_one_changed_byte_anywhere_is_detected() -> None:
    store = sealed_store()
    saved(store)
    line = bytearray(store._space.lines["a"][1])
    at = line.index(b'"sk.sealed":"k1:') + 20
    line[at] = ord("A") if line[at] != ord("A") else ord("B")
    store._space.lines["a"][1] = bytes(line)
    with pytest.raises(DecryptionError, match=r"State 'a' entry seq 1 \(key 'k1'\) fails authentication"):
        store.read("a")


def test_records_swapped_between_states_or_seqs_are_detected() -> None:
    store = sealed_store()
    saved(store, "a")
    saved(store, "b")
    a, b = store._space.lines["a"], store._space.lines["b"]
    a[1], b[1] = b[1], a[1]
    with pytest.raises(DecryptionError, match="'a' entry seq 1"):
        store.read("a")
    b[1], b[2] = b[2].replace(b'"seq":2', b'"seq":1'), b[1]
    with pytest.raises(DecryptionError):
        store.read("b")


def test_the_expiry_a_store_stamps_stays_readable() -> None:
    from datetime import timedelta

    store = sealed_store(ttl=timedelta(hours=1))  # a read slides the clear expiry
    saved(store)
    first = store.read("a")
    again = store.read("a")
    assert first is not None and again is not None
    assert again.snapshot["expires_at"] >= first.snapshot["expires_at"]


def test_a_listing_shows_a_task_the_ring_cannot_open_as_sealed() -> None:
    store = sealed_store()
    saved(store, "a")
    other = MemoryStore(encrypt=Keyring({"k2": bytes(32)}, current="k2"))
    other._spaces, other._space = store._spaces, store._space
    saved(other, "b")
    assert sorted((r.id, r.task) for r in store.list()) == [("a", "a secret task"), ("b", "[sealed]")]
    clear = MemoryStore()
    clear._spaces, clear._space = store._spaces, store._space
    assert {r.task for r in clear.list()} == {"[sealed]"}


def test_a_clear_store_never_returns_sealed_records() -> None:
    store = sealed_store()
    store.write("m", [{"seq": 0, "kind": "note"}], None, create=True)
    clear = MemoryStore()
    clear._spaces, clear._space = store._spaces, store._space
    with pytest.raises(DecryptionError, match="no keyring"):
        clear.read("m")


def test_a_snapshot_cannot_pose_as_a_sealed_one() -> None:
    store = MemoryStore()
    with pytest.raises(ValueError, match="sealed record"):
        store.write("x", [], {"sk.sealed": "k1:abc"}, create=True)
    with pytest.raises(ValueError, match="sealed record"):
        store.write("x", [], {"task": "sk.sealed:k1:abc"}, create=True)
    assert store.read("x") is None


def test_keyring_errors_never_show_a_key() -> None:
    key = Keyring.generate_key()
    for bad in (lambda: Keyring({"k1": key}, current=key), lambda: Keyring({key: key}, current="k1")):  # type: ignore[dict-item, arg-type]
        with pytest.raises(ValueError) as err:
            bad()
        assert repr(key) not in str(err.value) and key.hex() not in str(err.value)
    with pytest.raises(ValueError, match="32 bytes"):
        Keyring({"k1": b"short"}, current="k1")
    assert repr(Keyring({"k1": key, "k0": key}, current="k1")) == "Keyring(keys=['k0', 'k1'], current='k1')"

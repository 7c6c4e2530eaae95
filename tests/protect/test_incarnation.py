"""A State's incarnation on every store: sealed records bound to it, and a sealed
snapshot's clear fields authenticated (issue 21, items 2 and 3).

The attacks are made as someone who can write the storage but holds no key would make
them: through each store's own storage (tests/support/stores.py ``plant_entry``/``plant_snapshot``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

import statekeep as sk
from statekeep import DecryptionError, FileStore, Keyring, MemoryStore, SQLiteStore, StateConflictError, Store
from statekeep.stores import RedisStore
from tests.support.stores import plant_entry, plant_snapshot, servers, stored_record

pytest.importorskip("cryptography")

RING = Keyring({"k1": bytes(range(32))}, current="k1")

#: Every store, opened on the same storage again by calling the factory again.
Opener = Callable[..., Store]


def _openers(tmp_path: Path) -> dict[str, Opener]:
    schema, prefix = servers().unique_name("sk"), servers().unique_name("sk") + ":"
    memory = MemoryStore(encrypt=RING)
    return {
        "memory": lambda **o: memory if not o else MemoryStore(**{"encrypt": RING, **o}),
        "file": lambda **o: FileStore(tmp_path / "store", **{"encrypt": RING, **o}),
        "sqlite": lambda **o: SQLiteStore(tmp_path / "store.db", **{"encrypt": RING, **o}),
        "postgres": lambda **o: servers().postgres_store(schema=schema, **{"encrypt": RING, **o}),
        "redis": lambda **o: servers().redis_store(prefix=prefix, **{"encrypt": RING, **o}),
    }


KINDS = ["memory", "file", "sqlite", "postgres", "redis"]


@pytest.fixture(params=KINDS)
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    opened: list[Store] = []
    make = _openers(tmp_path)[request.param]

    def open_store(**options: Any) -> Store:
        store = make(**options)
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()


def job(task: str = "the job", users: int = 2) -> sk.State:
    state = sk.State(task, id="job", labels={"team": "blue"})
    for i in range(users):
        state.add_user(f"message {i} of {task}")
    return state


# -- item 2: sealed records are bound to the State's incarnation ------------------------


def test_a_record_of_an_earlier_state_of_the_same_id_fails_to_open(opener: Opener) -> None:
    store = opener()
    store.save(job("first"))
    old = orjson.dumps(stored_record(store, "job").entries[1])
    store.delete("job")
    store.save(job("second"))
    asyncio.run(plant_entry(store, "job", 1, old))
    with pytest.raises(DecryptionError, match="entry seq 1"):
        store.load("job")


def test_every_state_gets_an_incarnation_a_fork_a_new_one(opener: Opener) -> None:
    store = opener(encrypt=None)
    state = job()
    store.save(state)
    first = store.read("job")
    assert first is not None and first.incarnation == state.incarnation
    assert len(state.incarnation or "") == 32
    store.write("job", [{"seq": 3, "kind": "user", "at": state.updated_at, "text": "raw"}], None)
    assert store.load("job").incarnation == state.incarnation  # a plain write never changes it
    fork = store.fork("job", new_id="fork")
    assert fork.incarnation not in (None, state.incarnation)
    assert store.load("fork").incarnation == fork.incarnation
    store.delete("job")
    again = job()
    store.save(again)
    assert store.load("job").incarnation == again.incarnation != state.incarnation


def test_a_save_made_for_an_earlier_state_of_the_id_is_refused_whole(opener: Opener) -> None:
    store = opener()
    store.save(job("first"))
    stale = store.load("job")
    store.delete("job")
    store.save(job("second", users=3))
    stale.add_user("written on the old view")
    with pytest.raises(StateConflictError, match="deleted and created again"):
        store.save(stale)
    assert [e.get("text") for e in store.load("job").history][-1] == "message 2 of second"


def test_a_raw_sealed_append_learns_the_incarnation_and_is_refused_once_stale(opener: Opener) -> None:
    store = opener()
    store.save(job("first"))
    entry = {"seq": 3, "kind": "user", "at": "2026-01-01T00:00:00+00:00", "text": "raw"}
    store.write("job", [entry], None)  # learned (read) and sealed for the State's incarnation
    assert store.load("job").history[3]["text"] == "raw"
    other = opener() if not isinstance(store, MemoryStore) else store
    other.delete("job")
    other.save(job("second"))
    if other is not store:  # the first store object still knows the first incarnation
        with pytest.raises(StateConflictError, match="deleted and created again"):
            store.write("job", [{**entry, "seq": 3}], None)
    store.write("job", [{**entry, "seq": 3}], None)  # learned again: goes through
    assert store.load("job").history[3]["text"] == "raw"


def test_a_raw_write_names_the_incarnation_it_creates_or_continues(opener: Opener) -> None:
    store = opener(encrypt=None)
    mine, other = "a" * 32, "b" * 32
    entry = {"seq": 0, "kind": "task", "at": "2026-01-01T00:00:00+00:00", "text": "t"}
    store.write("raw", [entry], None, create=True, incarnation=mine)
    assert store.read("raw").incarnation == mine
    with pytest.raises(StateConflictError, match="deleted and created again"):
        store.write("raw", [{**entry, "seq": 1}], None, incarnation=other)
    with pytest.raises(ValueError, match="32 lowercase hex digits"):
        store.write("raw", [{**entry, "seq": 1}], None, incarnation="not-one")
    store.write("raw", [{**entry, "seq": 1}], None, incarnation=mine)
    assert len(store.read("raw").entries) == 2  # refused writes wrote nothing


# -- item 3: a sealed snapshot's clear fields are authenticated -------------------------


def _tampered(store: Store, change: Callable[[dict[str, Any]], None]) -> None:
    raw = stored_record(store, "job").snapshot
    change(raw)
    asyncio.run(plant_snapshot(store, "job", orjson.dumps(raw)))


def test_a_clear_field_taken_out_of_a_sealed_snapshot_is_detected(opener: Opener) -> None:
    store = opener()
    store.save(job())
    _tampered(store, lambda snap: snap.pop("labels"))
    with pytest.raises(DecryptionError, match="'labels' was removed"):
        store.load("job")


def test_a_states_own_expiry_rewritten_in_clear_is_detected(opener: Opener) -> None:
    store = opener()
    state = job()
    state.expire_at(datetime(2999, 1, 1, tzinfo=UTC))
    store.save(state)

    def expire(snap: dict[str, Any]) -> None:
        snap["expires_at"] = "2998-01-01T00:00:00+00:00"

    _tampered(store, expire)
    with pytest.raises(DecryptionError, match="'expires_at' differs"):
        store.load("job")


@pytest.mark.parametrize("moved, opens", [(timedelta(days=1), True), (-timedelta(hours=1), False)])
def test_a_retention_stamp_may_only_move_later(opener: Opener, moved: timedelta, opens: bool) -> None:
    store = opener(retention=timedelta(days=2))
    store.save(job())
    raw = stored_record(store, "job").snapshot
    if raw.get("expiry") != "retention":
        pytest.skip("this store keeps the retention stamp beside the snapshot, not in it")
    if isinstance(store, RedisStore):
        pytest.skip("Redis stamps its server's time in place of a placeholder: no sealed time bounds it")

    def move(snap: dict[str, Any]) -> None:
        when = datetime.fromisoformat(snap["expires_at"]) + moved
        snap["expires_at"] = when.isoformat()

    _tampered(store, move)
    if opens:
        assert store.load("job").labels == {"team": "blue"}
    else:
        with pytest.raises(DecryptionError, match="'expires_at' differs"):
            store.load("job")


# -- what keeps the incarnation: copy, export and import, rekey -----------------------------


def test_copy_export_import_and_rekey_keep_the_incarnation(opener: Opener, tmp_path: Path) -> None:
    from statekeep._transfer.exporting import aexport, aimport
    from statekeep._transfer.transfer import acopy

    source = opener()
    state = job()
    source.save(state)
    copied = MemoryStore(encrypt=Keyring({"k9": bytes(range(1, 33))}, current="k9"))
    asyncio.run(acopy(source, copied))
    assert copied.load("job").incarnation == state.incarnation
    asyncio.run(aexport(source, tmp_path / "out.jsonl"))
    head = orjson.loads((tmp_path / "out.jsonl").read_bytes().split(b"\n")[0])
    assert head["version"] == 3  # older statekeeps, which would drop it, refuse the file
    imported = MemoryStore()
    asyncio.run(aimport(imported, tmp_path / "out.jsonl"))
    assert imported.load("job").incarnation == state.incarnation
    rotated = Keyring({"k1": bytes(range(32)), "k2": bytes(range(32, 64))}, current="k2")
    rekeyed = opener(encrypt=rotated) if not isinstance(source, MemoryStore) else source
    if rekeyed is source:
        source._protection.keyring = rotated  # type: ignore[attr-defined]  # one memory, a new ring
    assert sk.rekey(rekeyed).records > 0
    again = rekeyed.load("job")
    assert again.incarnation == state.incarnation and again.history == state.history

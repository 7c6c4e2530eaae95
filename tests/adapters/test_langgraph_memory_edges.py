"""StatekeepMemoryStore at its edges: a redacting store (the namespace, key and vectors are
never masked), expiry set by the clock that judges it (a server's, whatever this host's clock
says), a batch with a value JSON cannot hold (nothing written), deleted items' records removed
by gc after their grace, and the errors for a mixed filter, a bad ``index`` and a key that is
no valid text."""

from __future__ import annotations

import asyncio
import string
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from statekeep import CorruptStateError, FileStore, MemoryStore, SQLiteStore, StateConflictError, Store
from statekeep._core.records import utc_time
from statekeep._core.redactor import Redactor
from statekeep._runtime.bridge import run_sync
from statekeep._store.agentmemory import key_id
from statekeep.adapters._langgraph_memory_keys import memory_key
from statekeep.adapters._langgraph_memory_ops import TOMBSTONE_GRACE
from statekeep.adapters.langgraph import StatekeepMemoryStore
from statekeep.testing import FakeClock
from tests.adapters.conftest import FACTORIES

#: A generic "long token" pattern, as users add for API keys: it matches a hex user id, a
#: 40-letter key and the base64 of an embedding alike.
TOKENS = r"[A-Za-z0-9]{24,}"


def letters(texts: list[str]) -> list[list[float]]:
    return [[t.count(c) + 0.123456 * i for i, c in enumerate(string.ascii_lowercase)] for t in texts]


def records(lg: StatekeepMemoryStore) -> Any:
    """The store's records of ``lg``'s items (agent memory's storage)."""
    return lg._ops.memory._store


# -- redaction -----------------------------------------------------------------------------


def test_a_redacting_store_keeps_namespaces_keys_and_vectors_whole() -> None:
    lg = StatekeepMemoryStore(
        MemoryStore(redact=Redactor(patterns=[TOKENS])),
        index={"embed": letters, "dims": 26, "fields": ["text"]},
    )
    uid = "0f3a9c1b7d2e4f6a8b0c1d2e3f4a5b6c"
    lg.put(("users", uid), "prefs", {"text": "likes lentil soup", "note": "sk" + "x" * 30})
    lg.put(("users", "u1"), "k" * 40, {"text": "hates soup"})
    item = lg.get(("users", uid), "prefs")
    assert item is not None and item.value == {"text": "likes lentil soup", "note": "[REDACTED]"}
    assert lg.get(("users", "u1"), "k" * 40) is not None
    assert [i.key for i in lg.search(("users", uid))] == ["prefs"]
    assert lg.list_namespaces() == [("users", uid), ("users", "u1")]
    found = lg.search(("users",), query="lentil")
    assert found[0].key == "prefs" and all(i.score is not None for i in found)


def test_a_vector_that_does_not_decode_is_a_clear_corruption_error() -> None:
    lg = StatekeepMemoryStore(MemoryStore(), index={"embed": letters, "dims": 26, "fields": ["text"]})
    lg.put(("m",), "a", {"text": "soup"})
    sid = key_id(memory_key(("m",), "a"))
    snapshot = records(lg).read(sid).snapshot
    damaged = {**snapshot, "about": {**snapshot["about"], "vec": {"text": "[REDACTED]"}}}
    records(lg).write(sid, [], damaged)  # a damaged record (a masked vector, say)
    with pytest.raises(
        CorruptStateError, match=r"store item 'a' in namespace \('m',\).*'text' does not decode"
    ):
        lg.search(("m",), query="soup")


# -- expiry by the server's clock ----------------------------------------------------------


@pytest.mark.parametrize("kind", ["postgres", "redis"])
@pytest.mark.parametrize(("skew", "api"), [(-10, "sync"), (10, "async")])
def test_a_skewed_client_sets_expiry_by_the_servers_clock(
    kind: str, skew: int, api: str, tmp_path: Path
) -> None:
    store = FACTORIES[kind](tmp_path)
    # This host's clock `skew` minutes off the server's (no NTP in a container, a VM resumed).
    store._clock = lambda: datetime.now(UTC) + timedelta(minutes=skew)  # type: ignore[attr-defined]
    try:
        lg = StatekeepMemoryStore(store, ttl={"default_ttl": 5})
        server_now = lambda: run_sync(store._server_now(), "aread")  # type: ignore[attr-defined]  # noqa: E731
        before = server_now()
        if api == "sync":
            lg.put(("u",), "k", {"v": 1})
        else:
            asyncio.run(lg.aput(("u",), "k", {"v": 1}))  # from a loop of its own
        after = server_now()
        expires = utc_time(records(lg).read(key_id(memory_key(("u",), "k"))).snapshot["expires_at"])
        assert before + timedelta(minutes=5) <= expires <= after + timedelta(minutes=5)
        assert lg.get(("u",), "k", refresh_ttl=False) is not None
        lg.get(("u",), "k")  # 5 of 5 minutes left by the server: the read writes nothing
        assert utc_time(records(lg).read(key_id(memory_key(("u",), "k"))).snapshot["expires_at"]) == expires
    finally:
        store.close()


# -- batches -------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_batch_with_a_value_json_cannot_hold_writes_nothing(api: str) -> None:
    lg = StatekeepMemoryStore(MemoryStore())
    ops = [PutOp(("m",), "ok", {"a": 1}), PutOp(("m",), "bad", {"a": {1, 2}})]
    with pytest.raises(TypeError, match=r"store item 'bad' in namespace \('m',\): value\['a'\] is a set"):
        lg.batch(ops) if api == "sync" else run_sync(lg.abatch(ops), "abatch")
    with pytest.raises(TypeError, match=r"value\['when'\] is a datetime"):
        lg.put(("m",), "k", {"when": datetime(2024, 1, 1)})
    assert lg.get(("m",), "ok") is None and lg.search(("m",)) == []


# -- deleted items -------------------------------------------------------------------------

CLOCKED: dict[str, Callable[[Path, FakeClock], Store]] = {
    "memory": lambda tmp_path, clock: MemoryStore(clock=clock),
    "file": lambda tmp_path, clock: FileStore(tmp_path / "store", clock=clock),
    "sqlite": lambda tmp_path, clock: SQLiteStore(tmp_path / "store.db", clock=clock),
}


@pytest.mark.parametrize("kind", sorted(CLOCKED))
def test_gc_removes_a_deleted_items_record_after_its_grace(kind: str, tmp_path: Path) -> None:
    clock = FakeClock()
    store = CLOCKED[kind](tmp_path, clock)
    try:
        lg = StatekeepMemoryStore(store)
        for n in range(5):
            lg.put(("tmp",), f"k{n}", {"v": n})
            lg.delete(("tmp",), f"k{n}")
        lg.put(("tmp",), "kept", {"v": 1})
        lg.delete(("tmp",), "back")  # absent: nothing written
        lg.put(("tmp",), "back", {"v": 1})
        lg.delete(("tmp",), "back")
        lg.put(("tmp",), "back", {"v": 2})  # put again within the grace: no expiry left
        assert lg.sweep_ttl() == 0  # within the grace: a stale revision still fails
        with pytest.raises(StateConflictError):
            lg.put(("tmp",), "k0", {"v": 9}, revision=1)
        clock.advance(TOMBSTONE_GRACE + timedelta(seconds=1))
        assert lg.sweep_ttl() == 5
        assert [r.id for r in records(lg).list(limit=None, finished=True)] == []
        assert sorted(i.key for i in lg.search(("tmp",))) == ["back", "kept"]
        back = lg.get(("tmp",), "back")
        assert back is not None and back.value == {"v": 2} and back.revision == 3  # type: ignore[attr-defined]
        lg.put(("tmp",), "k0", {"v": 2}, revision=0)  # as one never put
        item = lg.get(("tmp",), "k0")
        assert item is not None and item.value == {"v": 2} and item.revision == 1  # type: ignore[attr-defined]
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["postgres", "redis"])
def test_a_server_store_keeps_no_expiry_on_an_item_put_again_after_its_delete(
    kind: str, tmp_path: Path
) -> None:
    store = FACTORIES[kind](tmp_path)
    try:
        lg = StatekeepMemoryStore(store)
        lg.put(("u",), "k", {"v": 1})
        lg.delete(("u",), "k")
        (gone,) = records(lg).list(limit=None, finished=True)
        assert gone.expires_at is not None  # the delete's record goes after its grace
        lg.put(("u",), "k", {"v": 2})
        (row,) = records(lg).list(limit=None)
        assert row.expires_at is None and records(lg).list(limit=None, finished=True) == []
    finally:
        store.close()


def test_agent_memory_keeps_its_own_deleted_keys_as_before() -> None:
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    memory = store.memory("notes")
    memory.put("k", 1)
    memory.delete("k")
    clock.advance(TOMBSTONE_GRACE * 2)
    assert memory._store.gc() == 0  # type: ignore[attr-defined]
    assert memory.put("k", 2).revision == 3  # its revisions go on


# -- bad input -----------------------------------------------------------------------------


def test_a_filter_mixing_an_operator_and_a_plain_key_is_refused_as_langgraph_does() -> None:
    lg = StatekeepMemoryStore(MemoryStore())
    lg.put(("e",), "k", {"v": 1})
    mixed = {"v": {"$gt": 0, "x": 1}}
    ims = InMemoryStore()
    ims.put(("e",), "k", {"v": 1})
    with pytest.raises(ValueError, match="Unsupported operator: x"):
        ims.search(("e",), filter=mixed)
    with pytest.raises(ValueError, match=r"unsupported operator 'x' in the filter of 'v'"):
        lg.search(("e",), filter=mixed)


@pytest.mark.parametrize("index", [["x"], {"dims": 3}, "embed"])
def test_a_bad_index_is_refused_with_what_it_needs(index: Any) -> None:
    with pytest.raises(ValueError, match='index must be a dict with "embed"') as refused:
        StatekeepMemoryStore(MemoryStore(), index=index)
    assert str(refused.value).endswith(f"got {index!r}")


def test_a_key_or_label_with_a_lone_surrogate_is_refused() -> None:
    lg = StatekeepMemoryStore(MemoryStore())
    lg.put(("a",), "k", {"v": 1})
    for call in (
        lambda: lg.put(("a",), "bad\ud800", {"x": 1}),
        lambda: lg.get(("a",), "bad\ud800"),
        lambda: lg.delete(("a",), "bad\ud800"),
        lambda: lg.search(("a\ud800",)),
    ):
        with pytest.raises(ValueError, match="lone surrogate"):
            call()
    assert [i.key for i in lg.search(("a",))] == ["k"]

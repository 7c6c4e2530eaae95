"""Blob storage at the backend level (``PreparedWrite.blobs`` / ``blob_refs``, ``_get_blobs``,
``_gc_blobs``, ``_blob_usage``), shared by the SQLite, PostgreSQL and Redis tests: writes that
carry blobs, driven through the store's owner loop as ``Protection`` does, and a writer
process that refers to a blob over and over while gc runs in another process."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Collection, Iterable
from typing import Any

import pytest

from statekeep._core.writes import PreparedWrite, prepare_write
from statekeep._runtime.bridge import run_sync
from tests.support import REPO


def blob(size: int = 40_000, seed: bytes | None = None) -> tuple[str, bytes]:
    """A blob's name (hex SHA-256) and bytes: random, or made from ``seed``."""
    data = os.urandom(size) if seed is None else (seed * (size // len(seed) + 1))[:size]
    return hashlib.sha256(data).hexdigest(), data


def ref(name: str) -> dict[str, Any]:
    return {"sk.blob": name}


def blob_write(
    sid: str,
    seq: int,
    names: Iterable[str],
    carried: dict[str, bytes] | None,
    *,
    create: bool = False,
    snapshot: dict[str, Any] | None = None,
) -> PreparedWrite:
    """A write of one entry at ``seq`` referring to the blobs ``names`` (``carried``: the
    bytes it brings along), as Protection prepares it."""
    names = list(names)
    entry = {"seq": seq, "kind": "tool", "out": [ref(n) for n in names]}
    write = prepare_write(sid, [entry], {"task": sid, "turn": seq} if snapshot is None else snapshot, create)
    write.blobs = dict(carried) if carried else None
    write.blob_refs = frozenset(names) or None
    return write


def write(store: Any, prepared: PreparedWrite) -> None:
    """Run ``prepared`` through the store's ``_write`` on its owner loop, under the State's lock."""
    run_sync(store._locked_write(prepared), "awrite")


def write_together(store: Any, writes: list[PreparedWrite]) -> None:
    """Run ``writes`` (to different States) at the same moment, so that the store batches
    them (one transaction, one pipeline)."""
    import asyncio

    async def all_of() -> None:
        await asyncio.gather(*(store._locked_write(w) for w in writes))

    run_sync(all_of(), "awrite")


def check_batched_writes(store: Any) -> None:
    """Twenty writes at once, every one carrying the same blob and one of its own: one copy
    of the shared blob, every reference in place."""
    shared_name, shared = blob(40_000, b"batched ")
    writes, names = [], [shared_name]
    for i in range(20):
        own_name, own = blob(1_000, f"batched {i} ".encode())
        names.append(own_name)
        writes.append(
            blob_write(
                f"t{i:02d}", 0, [shared_name, own_name], {shared_name: shared, own_name: own}, create=True
            )
        )
    write_together(store, writes)
    assert usage(store) == (21, 40_000 + 20 * 1_000)
    assert set(get_blobs(store, names)) == set(names)
    for i in range(19):
        store.delete(f"t{i:02d}")
    assert gc_blobs(store) == (19, 19_000)
    store.delete("t19")
    assert gc_blobs(store) == (2, 41_000)


def get_blobs(store: Any, names: Collection[str]) -> dict[str, bytes]:
    found: dict[str, bytes] = run_sync(store._get_blobs(names), "aread")
    return found


def gc_blobs(store: Any, dry_run: bool = False) -> tuple[int, int]:
    counted: tuple[int, int] = run_sync(store._gc_blobs(dry_run), "agc")
    return counted


def usage(store: Any) -> tuple[int, int]:
    counted: tuple[int, int] = run_sync(store._blob_usage(), "astats")
    return counted


def referred(entries: list[dict[str, Any]]) -> set[str]:
    """The blob names the entries (as stored, references unresolved) refer to."""
    return {item["sk.blob"] for e in entries for item in e.get("out", []) if isinstance(item, dict)}


#: A writer process: ``argv[1]`` is Python that makes the store (``store = ...``), ``argv[2]``
#: how many rounds. Each round writes a State that refers to the shared blob (its bytes carried)
#: and deletes it again, so the shared blob is unreferenced between rounds and gc (in another
#: process) races the next write to it; every 5th State is kept. Prints each kept State's id
#: once its write returned.
WRITER = """
    import sys
    from tests.support.blobs import blob, blob_write, write
    exec(sys.argv[1])
    shared_name, shared = blob(40_000, b"shared blob ")
    for i in range(int(sys.argv[2])):
        sid = f"w{i:04d}"
        own_name, own = blob(2_000, f"own {i} ".encode())
        write(store, blob_write(sid, 0, [shared_name, own_name], {shared_name: shared, own_name: own}, create=True))
        if i % 5 == 0:
            print(sid, flush=True)
        else:
            store.delete(sid)
    store.close()
"""


#: A writer killed with SIGKILL: ``argv[1]`` makes the store, as for :data:`WRITER`. It writes
#: State k0, k1, ... each referring to a blob of its own of 2 MB and to the shared one, and
#: prints each id once its write returned, until it is killed.
KILLED_WRITER = """
    import sys
    from tests.support.blobs import blob, blob_write, write
    exec(sys.argv[1])
    shared_name, shared = blob(40_000, b"shared blob ")
    i = 0
    while True:
        sid = f"k{i:04d}"
        own_name, own = blob(2_000_000, f"own {i} ".encode())
        write(store, blob_write(sid, 0, [shared_name, own_name], {shared_name: shared, own_name: own}, create=True))
        print(sid, flush=True)
        i += 1
"""


def kill_a_writer(store: Any, make_store: str, acknowledged: int = 8) -> list[str]:
    """SIGKILL :data:`KILLED_WRITER` once it has had ``acknowledged`` writes return (the next
    is under way); then every acknowledged State is there with both its blobs, a State
    the kill cut short is there whole or not at all, and gc keeps every blob a State refers
    to. Returns the ids of the States found."""
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(KILLED_WRITER), make_store],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    acked: list[str] = []
    try:
        while len(acked) < acknowledged:
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else "the writer ended"
            acked.append(line.strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    found: list[str] = []
    for i in range(acknowledged + 2):
        sid = f"k{i:04d}"
        record = run_sync(store._read(sid), "aread")
        record = record() if callable(record) else record
        if record is None:
            assert sid not in acked, f"acknowledged State {sid} is gone"
            continue
        found.append(sid)
        names = referred(record.entries)
        assert len(names) == 2 and set(get_blobs(store, names)) == names, f"{sid} lacks a blob"
    gc_blobs(store)
    for sid in found:
        record = run_sync(store._read(sid), "aread")
        record = record() if callable(record) else record
        names = referred(record.entries)
        assert set(get_blobs(store, names)) == names, f"gc took a blob of {sid}"
    return found


def start_writer(make_store: str, rounds: int) -> subprocess.Popen[str]:
    """Start :data:`WRITER` in a process of its own."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WRITER), make_store, str(rounds)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def gc_beside_writer(store: Any, make_store: str, rounds: int = 200) -> int:
    """Run gc over and over in this process while a writer process races it (see
    :data:`WRITER`); then check that every State the writer kept has all its blobs, and that
    gc removed every blob of the deleted States. Returns how many gc calls removed something."""
    writer = start_writer(make_store, rounds)
    busy = 0
    while writer.poll() is None:
        removed, _ = gc_blobs(store)
        busy += removed > 0
    out, err = writer.communicate(timeout=300)
    assert writer.returncode == 0, err
    kept = out.split()
    assert len(kept) == (rounds + 4) // 5
    for sid in kept:
        record = run_sync(store._read(sid), "aread")
        record = record() if callable(record) else record
        assert record is not None, sid
        names = referred(record.entries)
        assert len(names) == 2
        assert set(get_blobs(store, names)) == names, f"{sid} lost a blob"
    gc_blobs(store)
    # What is left: the shared blob and the kept States' own ones.
    assert usage(store)[0] == 1 + len(kept)
    return busy


def check_fork_refers_to_the_blobs_of_its_entries(store: Any) -> None:
    """A fork copied on the server's side (``store.fork``) refers to the blobs of the entries
    it copies, and only those: after the source is deleted, gc keeps the fork's and removes
    the rest; after the fork is deleted too, gc removes them."""
    from statekeep import State

    kept, dropped = "k" * 40_000, "d" * 50_000
    state = State("fork me", id="a")
    state.set_data("kept", kept)
    store.save(state)  # a store may note a reference at its write's first seq: two writes
    state.set_data("dropped", dropped)
    store.save(state)
    assert usage(store)[0] == 2
    fork = store.fork("a", at_seq=1, new_id="f")
    assert fork.data == {"kept": kept}
    store.delete("a")
    assert gc_blobs(store)[0] == 1
    assert store.load("f").data == {"kept": kept}
    store.delete("f")
    assert gc_blobs(store)[0] == 1 and usage(store) == (0, 0)


# -- behaviours every store with blobs shares: each store's test calls one of these with its
# store, then checks what it can see of its own tables or keys.


def check_stored_once_across_states_and_namespaces(store: Any) -> tuple[str, str]:
    """Two blobs written by State a, one of them again by b and by a of namespace "memory":
    two stored (in both namespaces' counts), the entry holds the references, ``_get_blobs``
    finds the stored ones only. Returns the two names (the shared one first)."""
    name, data = blob()
    other_name, other = blob(50_000)
    write(store, blob_write("a", 0, [name, other_name], {name: data, other_name: other}, create=True))
    write(store, blob_write("b", 0, [name], {name: data}, create=True))
    sibling = store._sibling("memory")
    write(sibling, blob_write("a", 0, [name], {name: data}, create=True))
    assert usage(store) == usage(sibling) == (2, 90_000)
    assert store.read("a").entries[0]["out"] == [{"sk.blob": name}, {"sk.blob": other_name}]
    assert get_blobs(store, [name, other_name, "f" * 64]) == {name: data, other_name: other}
    assert get_blobs(sibling, []) == {}
    return name, other_name


def check_an_append_refers_without_bytes(store: Any) -> str:
    """A write, then an append and another State that refer to its blob without its bytes:
    one copy stored. Returns the blob's name."""
    name, data = blob()
    write(store, blob_write("a", 0, [name], {name: data}, create=True))
    write(store, blob_write("a", 1, [name], None))  # refers to it, brings no bytes
    write(store, blob_write("b", 0, [name], None, create=True))
    assert usage(store) == (1, len(data))
    return name


def check_a_missing_blob_is_refused_whole(store: Any) -> None:
    """An append, and a new State, that refer to a blob the store lacks are refused with
    a clear error, and nothing of them is written."""
    name, _ = blob()
    write(store, blob_write("a", 0, [], None, create=True))
    with pytest.raises(LookupError, match="does not hold"):
        write(store, blob_write("a", 1, [name], None))
    with pytest.raises(LookupError, match="does not hold"):
        write(store, blob_write("b", 0, [name], None, create=True))
    assert len(store.read("a").entries) == 1
    assert store.read("b") is None
    assert usage(store) == (0, 0)


def check_gc_removes_only_unreferenced(store: Any, after_first: Callable[[str], None] | None = None) -> None:
    """gc (and its dry run, which removes nothing) removes a blob once no State refers to
    it, the shared one last. ``after_first`` (given the shared blob's name) runs after the
    first gc that removed something, for a store's own checks."""
    shared, shared_data = blob()
    own, own_data = blob(10_000)
    write(store, blob_write("a", 0, [shared, own], {shared: shared_data, own: own_data}, create=True))
    write(store, blob_write("b", 0, [shared], {shared: shared_data}, create=True))
    assert gc_blobs(store, dry_run=True) == (0, 0)
    assert gc_blobs(store) == (0, 0)
    store.delete("a")
    assert gc_blobs(store, dry_run=True) == (1, 10_000)
    assert usage(store) == (2, 50_000)  # a dry run removes nothing
    assert gc_blobs(store) == (1, 10_000)
    assert get_blobs(store, [shared, own]) == {shared: shared_data}
    if after_first is not None:
        after_first(shared)
    store.delete("b")
    assert gc_blobs(store) == (1, 40_000)
    assert usage(store) == (0, 0) and gc_blobs(store) == (0, 0)


def check_another_namespace_keeps_the_blob(store: Any) -> None:
    """A blob that a State of another namespace refers to stays until that one goes too."""
    name, data = blob()
    write(store, blob_write("a", 0, [name], {name: data}, create=True))
    write(store._sibling("other"), blob_write("x", 0, [name], {name: data}, create=True))
    store.delete("a")
    assert gc_blobs(store) == (0, 0)
    store._sibling("other").delete("x")
    assert gc_blobs(store) == (1, 40_000)


def write_expiring(store: Any, expires_at: str) -> None:
    """State a, expiring at ``expires_at``, referring to a blob of 40,000 bytes only it has."""
    name, data = blob()
    snapshot = {"task": "a", "expires_at": expires_at}
    write(store, blob_write("a", 0, [name], {name: data}, create=True, snapshot=snapshot))


def check_gc_collects_the_expired_state_and_its_blob(store: Any) -> None:
    """After :func:`write_expiring` (and its time passed): ``gc`` removes the State, then
    the blob only it referred to, and counts both."""
    collected = store.gc()
    assert (collected, collected.blobs, collected.blob_bytes) == (1, 1, 40_000)
    assert gc_blobs(store) == (0, 0)


def check_gc_beside_writer(store: Any, make_store: str) -> None:
    """:func:`gc_beside_writer`, printing how often gc found something to remove."""
    busy = gc_beside_writer(store, make_store)
    print(f"{busy} gc calls removed blobs while the writer ran")

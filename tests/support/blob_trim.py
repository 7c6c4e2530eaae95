"""Trim and blob references, shared by the SQLite, PostgreSQL and Redis tests: a trim
recomputes the State's references from what it keeps (the base record and the kept
entries), so gc then removes a blob only the trimmed entries referred to, and keeps one
that a kept entry or the base refers to."""

from __future__ import annotations

from typing import Any

import orjson

from statekeep._core.blobs import with_refs
from statekeep._runtime.bridge import run_sync
from tests.support.blobs import blob, blob_write, gc_blobs, get_blobs, ref, write


def trim(store: Any, sid: str, before: int, base: dict[str, Any], first: int = 0) -> None:
    """The store's ``_trim`` on its owner loop, with ``base`` encoded as a stored line (the
    State starting at seq ``first``)."""
    run_sync(store._trim(sid, before, orjson.dumps(base) + b"\n", first), "atrim")


def check_trim_releases_blobs(store: Any) -> None:
    gone, gone_data = blob(10_000)
    kept, kept_data = blob(20_000)
    based, based_data = blob(30_000)
    carried = {gone: gone_data, kept: kept_data, based: based_data}
    write(store, blob_write("a", 0, [gone, kept, based], carried, create=True))
    write(store, blob_write("a", 1, [gone], None))  # replaced by the base
    write(store, blob_write("a", 2, [kept], None))  # kept
    write(store, blob_write("a", 3, [], None))
    write(store, blob_write("other", 0, [], None, create=True))
    trim(store, "a", 2, {"seq": 1, "kind": "base", "data": {"x": ref(based)}, "trimmed": 2})
    assert [e["seq"] for e in store.read("a").entries] == [1, 2, 3]
    assert gc_blobs(store, dry_run=True) == (1, 10_000)
    assert gc_blobs(store) == (1, 10_000)
    assert get_blobs(store, [gone, kept, based]) == {kept: kept_data, based: based_data}
    # A trim that keeps every reference removes none; the State's delete then frees them.
    write(store, blob_write("a", 4, [kept], None))
    trim(store, "a", 3, {"seq": 2, "kind": "base", "data": {"x": ref(based)}, "out": [ref(kept)]}, first=1)
    assert gc_blobs(store) == (0, 0)
    store.delete("a")
    assert gc_blobs(store) == (2, 50_000)
    check_a_nested_blob_survives_a_trim(store)


def listed(prepared: Any, body: list[str], names: list[str]) -> Any:
    """``prepared`` (one entry) with its line's body referring to ``body`` and its top-level
    list ``"sk.blobs"`` naming ``names``, as Protection writes a nested value."""
    entry = {"seq": prepared.first_seq, "kind": "tool", "out": [ref(n) for n in body]}
    prepared.lines = (with_refs(orjson.dumps(entry) + b"\n", names),)
    prepared.blob_refs = frozenset(names)
    return prepared


def check_a_nested_blob_survives_a_trim(store: Any) -> None:
    """A kept line whose body shows only the outer blob (the inner one named in its list):
    a trim that removes a line naming the inner one directly leaves both to the State."""
    inner, inner_data = blob(11_000)
    outer, outer_data = blob(12_000)
    carried = {inner: inner_data, outer: outer_data}
    write(store, listed(blob_write("n", 0, [], carried, create=True), [inner], [inner]))  # removed
    write(store, blob_write("n", 1, [], None))  # replaced by the base
    write(store, listed(blob_write("n", 2, [], None), [outer], [outer, inner]))  # kept
    trim(store, "n", 2, {"seq": 1, "kind": "base", "trimmed": 1})
    assert gc_blobs(store) == (0, 0)
    assert get_blobs(store, [inner, outer]) == carried
    store.delete("n")
    assert gc_blobs(store) == (2, 23_000)


def check_a_sealed_state_keeps_the_references_its_kept_lines_list(store: Any) -> None:
    """A State whose lines are sealed (an encrypted store's: they list their blob names in
    clear, as :class:`~statekeep._protect.protection.Protection` writes them) keeps, through a
    trim, the references its kept lines list: a blob only a removed line listed goes at gc,
    one a kept line lists stays; a sealed base that lists none refers to none."""
    gone, gone_data = blob(10_000)
    kept, kept_data = blob(20_000)
    prepared = blob_write("s", 0, [gone, kept], {gone: gone_data, kept: kept_data}, create=True)
    names = {0: [gone], 1: [], 2: [kept]}
    prepared.lines = tuple(
        with_refs(orjson.dumps({"seq": seq, "sk.sealed": f"c2VhbGVk{seq}"}) + b"\n", names[seq])
        for seq in range(3)
    )
    write(store, prepared)
    trim(store, "s", 2, {"seq": 1, "sk.sealed": "YmFzZQ"})
    assert gc_blobs(store) == (1, 10_000)
    assert get_blobs(store, [gone, kept]) == {kept: kept_data}
    store.delete("s")
    assert gc_blobs(store) == (1, 20_000)

"""rekey re-seals blobs (large values stored once) with the current key, under the same names,
so the old key can leave the ring; the names and the values read back unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeep import DecryptionError, FileStore, Keyring, MemoryStore, SQLiteStore, Store, open_store, rekey
from statekeep.testing import snapshot
from tests.support.stores import store_url

K1, K2 = bytes(range(32)), bytes(range(32, 64))
PAGE = "a large tool output " * 3000  # 60 KB


@pytest.mark.parametrize("kind", ["memory", "file", "sqlite", "postgres", "redis"])
def test_rekey_reseals_blobs_so_the_old_key_can_go(tmp_path: Path, kind: str) -> None:
    shared = MemoryStore(encrypt=Keyring({"k1": K1}, "k1"))
    url = store_url(kind, tmp_path, "rekey") if kind in ("postgres", "redis") else ""

    def opened(ring: Keyring) -> Store:
        if kind == "file":
            return FileStore(tmp_path / "store", encrypt=ring)
        if kind == "sqlite":
            return SQLiteStore(tmp_path / "store.db", encrypt=ring)
        if kind in ("postgres", "redis"):
            return open_store(url, encrypt=ring)
        view = MemoryStore(encrypt=ring)
        view._spaces, view._space, view._blobs = shared._spaces, shared._space, shared._blobs
        return view

    old = opened(Keyring({"k1": K1}, "k1"))
    old.write("r", [{"seq": 0, "kind": "note", "v": PAGE}], snapshot(), create=True)
    old.write("r", [{"seq": 1, "kind": "note", "v": [PAGE, "small"]}], snapshot())
    old.close()

    both = opened(Keyring({"k1": K1, "k2": K2}, "k2"))
    report = rekey(both)
    assert report.blobs == 1 and report.records >= 3
    assert rekey(both).blobs == 0  # done: nothing left on the old key
    both.close()

    new = opened(Keyring({"k2": K2}, "k2"))
    got = new.read("r")
    assert got is not None and [e["v"] for e in got.entries] == [PAGE, [PAGE, "small"]]
    new.close()
    gone = opened(Keyring({"k1": K1}, "k1"))
    with pytest.raises(DecryptionError):
        gone.read("r")
    gone.close()

"""Export, import and copy carry large values stored once (blobs): the target holds the same
values, stored once there too; a sealed source copies into a sealed or a clear target."""

from __future__ import annotations

import asyncio
from pathlib import Path

from statekeep import FileStore, Keyring, MemoryStore
from statekeep._runtime.bridge import run_sync
from statekeep._transfer.exporting import aexport, aimport
from statekeep._transfer.transfer import acopy
from statekeep.testing import snapshot

PAGE = "a page fetched again and again " * 2000  # about 62 KB: above the default bound
RING = Keyring({"k1": bytes(range(32))}, "k1")


def fill(store: FileStore | MemoryStore) -> None:
    for sid in ("a", "b"):
        ents = [{"seq": 0, "kind": "note", "v": PAGE}, {"seq": 1, "kind": "note", "v": {"again": PAGE}}]
        store.write(sid, ents, snapshot(sid), create=True)


def blobs_of(store: FileStore | MemoryStore) -> tuple[int, int]:
    return run_sync(store._blob_usage(), "stats")


def same_values(src: FileStore | MemoryStore, dst: FileStore | MemoryStore) -> None:
    for sid in ("a", "b"):
        assert dst.read(sid) == src.read(sid)


def test_copy_carries_blobs_stored_once(tmp_path: Path) -> None:
    src, dst = FileStore(tmp_path / "src", encrypt=RING), FileStore(tmp_path / "dst")
    fill(src)
    report = asyncio.run(acopy(src, dst))
    assert not report.failed
    same_values(src, dst)
    assert blobs_of(dst)[0] == 1  # the page, once, in the clear target
    sealed = MemoryStore(encrypt=Keyring({"k2": bytes(range(1, 33))}, "k2"))
    asyncio.run(acopy(src, sealed))
    same_values(src, sealed)
    assert blobs_of(sealed)[0] == 1
    src.close()
    dst.close()


def test_export_and_import_carry_blobs(tmp_path: Path) -> None:
    src, dst = FileStore(tmp_path / "src"), FileStore(tmp_path / "dst")
    fill(src)
    out = tmp_path / "runs.export"
    asyncio.run(aexport(src, out))
    asyncio.run(aimport(dst, out))
    same_values(src, dst)
    assert blobs_of(dst) == blobs_of(src)
    src.close()
    dst.close()

"""rekey of States whose history was trimmed (it starts at its base's seq, not 0), of agent
memory keys put often enough to be trimmed, and of a rekey stopped between a State's records
and its blobs; and a sealed line that lists blobs still counts as sealed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeep import DecryptionError, FileStore, Keyring, SQLiteStore, Store, rekey
from statekeep.testing import snapshot
from statekeep.testing._trim import compacted_run

K1, K2 = bytes(range(32)), bytes(range(32, 64))
OLD = Keyring({"k1": K1}, "k1")
BOTH = Keyring({"k1": K1, "k2": K2}, "k2")
NEW = Keyring({"k2": K2}, "k2")
PAGE = "a large tool output " * 3000  # 60 KB: stored once, as a blob


def opened(tmp_path: Path, kind: str, ring: Keyring | None) -> Store:
    protect: dict[str, Any] = {} if ring is None else {"encrypt": ring}
    if kind == "file":
        return FileStore(tmp_path / "store", **protect)
    return SQLiteStore(tmp_path / "store.db", **protect)


KINDS = pytest.mark.parametrize("kind", ["file", "sqlite"])


@KINDS
def test_rekey_re_seals_a_trimmed_state(tmp_path: Path, kind: str) -> None:
    old = opened(tmp_path, kind, OLD)
    state, through = compacted_run("t1")
    old.save(state)
    old.trim("t1", before=through + 1)
    kept = old.load("t1").history
    assert kept[0]["seq"] > 0  # trimmed: the history starts at its base
    old.close()

    both = opened(tmp_path, kind, BOTH)
    report = rekey(both)
    assert report.records >= len(kept)
    assert rekey(both).records == 0
    both.close()

    new = opened(tmp_path, kind, NEW)
    assert new.load("t1").history == kept
    new.close()


@KINDS
def test_rekey_re_seals_a_memory_key_put_often(tmp_path: Path, kind: str) -> None:
    old = opened(tmp_path, kind, OLD)
    for i in range(40):
        old.memory().put("count", i)
    old.close()

    both = opened(tmp_path, kind, BOTH)
    rekey(both)
    both.close()

    new = opened(tmp_path, kind, NEW)
    item = new.memory().get("count")
    assert item is not None and item.value == 39 and item.revision == 40
    new.close()


class Stop(Exception):
    """Raised from the blob step once: the rekey stops between records and blobs."""


def test_a_rekey_stopped_before_the_blobs_finishes_them_when_run_again(tmp_path: Path) -> None:
    kind = "file"  # (SQLiteStore does not re-seal blobs in place)
    old = opened(tmp_path, kind, OLD)
    old.write("r", [{"seq": 0, "kind": "note", "v": PAGE}], snapshot(), create=True)
    old.close()

    both = opened(tmp_path, kind, BOTH)
    reseal = both._reseal_blobs  # type: ignore[attr-defined]
    calls = 0

    async def stopping(blobs: dict[str, tuple[bytes, bytes]]) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise Stop
        return int(await reseal(blobs))

    both._reseal_blobs = stopping  # type: ignore[attr-defined]
    with pytest.raises(Stop):
        rekey(both)
    report = rekey(both)  # the records are done; the blobs are not
    assert report.blobs == 1
    both.close()

    new = opened(tmp_path, kind, NEW)
    got = new.read("r")
    assert got is not None and got.entries[0]["v"] == PAGE
    new.close()


@KINDS
def test_a_sealed_state_whose_last_line_lists_blobs_refuses_plaintext(tmp_path: Path, kind: str) -> None:
    sealed = opened(tmp_path, kind, OLD)
    sealed.write("r", [{"seq": 0, "kind": "note", "v": PAGE}], None, create=True)
    sealed.close()

    clear = opened(tmp_path, kind, None)
    with pytest.raises(DecryptionError, match="is sealed"):
        clear.write("r", [{"seq": 1, "kind": "note", "v": "in clear"}], None)
    clear.close()

    again = opened(tmp_path, kind, OLD)
    got = again.read("r")
    assert got is not None and [e["v"] for e in got.entries] == [PAGE]
    again.close()


@pytest.mark.parametrize("server", ["postgres", "redis"])
def test_a_sealed_state_whose_last_line_lists_blobs_refuses_plaintext_on_servers(
    tmp_path: Path, server: str
) -> None:
    from tests.protect.test_rekey import opened as opened_on

    stores: list[Store] = []
    try:
        sealed = opened_on(server, tmp_path, stores, encrypt=OLD)
        sealed.write("r", [{"seq": 0, "kind": "note", "v": PAGE}], None, create=True)
        clear = opened_on(server, tmp_path, stores)
        with pytest.raises(DecryptionError, match="is sealed"):
            clear.write("r", [{"seq": 1, "kind": "note", "v": "in clear"}], None)
        got = sealed.read("r")
        assert got is not None and [e["v"] for e in got.entries] == [PAGE]
    finally:
        for store in stores:
            store.close()

"""A memory key put often enough to be bounded (its history trimmed to its latest changes)
travels exactly: export then import, and copy, leave its value and revision equal."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest

from statekeep import FileStore, Keyring, SQLiteStore, Store
from statekeep._transfer.exporting import aexport, aimport
from statekeep._transfer.transfer import acopy

PUTS = 40  # past one round of KEEP (32): the key's history starts above seq 0
KEYS = Keyring({"k1": base64.b64decode(base64.b64encode(b"k" * 32))}, current="k1")
KINDS = [("file", "sqlite"), ("sqlite", "file"), ("sealed", "file"), ("file", "sealed")]


def made(kind: str, path: Path) -> Store:
    if kind == "file":
        return FileStore(path)
    return SQLiteStore(path.with_suffix(".db"), encrypt=KEYS if kind == "sealed" else None)


def filled(store: Store) -> Any:
    memory = store.memory("agent")
    for i in range(PUTS):
        item = memory.put("profile", {"n": i})
    assert item.revision == PUTS
    return item


@pytest.mark.parametrize("kinds", KINDS)
def test_a_bounded_memory_key_survives_export_and_import(kinds: tuple[str, str], tmp_path: Path) -> None:
    with made(kinds[0], tmp_path / "src") as src, made(kinds[1], tmp_path / "dst") as dst:
        item = filled(src)
        asyncio.run(aexport(src, tmp_path / "runs.jsonl", memory_scopes=["agent"]))
        asyncio.run(aimport(dst, tmp_path / "runs.jsonl"))
        got = dst.memory("agent").get("profile")
        assert got is not None and (got.value, got.revision) == (item.value, item.revision)
        assert dst.memory("agent").put("profile", "next", revision=PUTS).revision == PUTS + 1


@pytest.mark.parametrize("kinds", KINDS)
def test_a_bounded_memory_key_is_copied_exactly(kinds: tuple[str, str], tmp_path: Path) -> None:
    with made(kinds[0], tmp_path / "src") as src, made(kinds[1], tmp_path / "dst") as dst:
        item = filled(src)
        report = asyncio.run(acopy(src, dst, memory_scopes=["agent"]))
        assert report.memory["agent"].copied == 1 and not report.memory["agent"].failed, str(report)
        got = dst.memory("agent").get("profile")
        assert got is not None and (got.value, got.revision) == (item.value, item.revision)
        assert dst.memory("agent").put("profile", "next", revision=PUTS).revision == PUTS + 1

"""pytest plugin: alpineagents' own tests/test_store.py, run against StatekeepStore.

Loaded in the child pytest with ``-p tests.adapters._alpineagents_plugin``. Those tests build
their store as ``FileStore(path)`` (imported from ``alpineagents``), so before the test module
is imported, ``alpineagents.FileStore`` becomes :class:`FileStore` below: a StatekeepStore on
the statekeep store named by ``$STATEKEEP_TEST_STORE``, in a namespace of its own per folder
(two objects for one folder share it, as two alpineagents FileStores for one folder do).
Their ``crash_copy(store, id, into)`` helper, which copies a FileStore folder mid-run (what a
process that died then leaves), becomes a copy of the State's saved record into the store for
``into``: what the statekeep store holds at that moment.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import alpineagents
import pytest

from statekeep import open_store
from statekeep.adapters.alpineagents import StatekeepStore

_OPENED: dict[Path, Any] = {}


def _statekeep_store(folder: Path) -> Any:
    """The statekeep store standing for an alpineagents FileStore folder (one per folder)."""
    if folder not in _OPENED:
        url = os.environ["STATEKEEP_TEST_STORE"]
        head, _, query = url.partition("?")
        params = parse_qsl(query, keep_blank_values=True)
        prefix = dict(params).get("namespace", "aa")[:40]
        rest = [(key, value) for key, value in params if key != "namespace"]
        base = head + ("?" + urlencode(rest) if rest else "")
        space = f"{prefix}-{hashlib.sha256(str(folder).encode()).hexdigest()[:16]}"
        _OPENED[folder] = open_store(base, namespace=space)
    return _OPENED[folder]


class FileStore(StatekeepStore):
    """Stands in for ``alpineagents.FileStore(path)`` in alpineagents' tests."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._root = Path(path)
        super().__init__(_statekeep_store(Path(path).resolve()))


def crash_copy(store: StatekeepStore, state_id: str, into: Path) -> FileStore:
    """What ``store`` holds of ``state_id`` right now, in the store for ``into``."""
    copy = FileStore(into)
    record = store.read(state_id)
    assert record is not None
    copy.write(state_id, record.entries, record.info, create=copy.read(state_id) is None)
    return copy


alpineagents.FileStore = FileStore


@pytest.fixture(autouse=True)
def _statekeep_crash_copy(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    module = getattr(request, "module", None)
    if module is not None and hasattr(module, "crash_copy"):
        monkeypatch.setattr(module, "crash_copy", crash_copy)


def pytest_sessionfinish(session: pytest.Session) -> None:
    for store in _OPENED.values():
        store.close()
    _OPENED.clear()

"""Public names at public paths: each imports from where the docs say, reports that path as its
``__module__`` (reprs, tracebacks and pickles name it), and 0.1's private paths still import."""

from __future__ import annotations

import importlib
import pickle
import typing
import warnings

import pytest

import statekeep
from statekeep import _oldpaths

#: The engine interface for a backend of one's own (``statekeep.stores.engine``), its own names.
ENGINE = [
    *(
        "Backend",
        "Blobs",
        "ChangeStamps",
        "IdWalk",
        "Leases",
        "Namespaces",
        "PreparedWrite",
        "Reseal",
        "SizeOnDisk",
    ),
    *("SnapshotReads", "capabilities", "check_fence", "check_overlap", "check_preconditions", "exists_error"),
    *("left_out", "listing_order", "missing_error", "plan_append", "sealed_text"),
]
#: The documented import paths, and the names each exports that report it as their home.
PUBLIC = {
    "statekeep": statekeep.__all__,
    "statekeep.stores": ["OsIO"],
    "statekeep.stores.engine": ENGINE,
    "statekeep.testing": ["Api", "FakeClock", "StoreContract", "StoreMachine", "entries", "snapshot"],
    "statekeep.web": ["Viewer", "create_app", "serve", "start"],
    "statekeep.adapters.langgraph": [
        "RevisedItem",
        "RevisedSearchItem",
        "StatekeepMemoryStore",
        "StatekeepSaver",
        "tool_call_key",
    ],
    "statekeep.adapters.openai_agents": ["StatekeepSession"],
    "statekeep.adapters.alpineagents": ["StatekeepStore"],
    "statekeep.adapters.adk": ["StatekeepSessionService"],
}
#: Names a second public path exports too (it reports the first).
ALSO = {
    "statekeep.stores": ["FileStore", "MemoryStore", "PostgresStore", "RedisStore", "SQLiteStore"],
    "statekeep.stores.engine": ["Lease", "Record", "SavedState"],
}


def documented() -> list[tuple[str, str]]:
    return [(path, name) for path, names in PUBLIC.items() for name in names]


@pytest.mark.parametrize(("path", "name"), documented())
def test_each_public_name_reports_its_public_path(path: str, name: str) -> None:
    obj = getattr(importlib.import_module(path), name)
    if isinstance(obj, type) or callable(obj):
        assert (obj.__module__, obj.__qualname__) == (path, name)


@pytest.mark.parametrize(("path", "name"), [(p, n) for p, names in ALSO.items() for n in names])
def test_names_exported_twice_are_one_object(path: str, name: str) -> None:
    assert getattr(importlib.import_module(path), name) is getattr(statekeep, name)


def test_every_exported_name_is_listed() -> None:
    for path, names in PUBLIC.items():
        module = importlib.import_module(path)
        assert sorted(getattr(module, "__all__", names)) == sorted(names + ALSO.get(path, []))


def test_an_error_pickles_by_its_public_path() -> None:
    data = pickle.dumps(statekeep.StateConflictError("seq 3 taken"))
    assert b"statekeep\nStateConflictError" in pickle.dumps(statekeep.StateConflictError, protocol=0)
    assert str(pickle.loads(data)) == "seq 3 taken"


#: Public classes whose annotations name something imported only for type checkers: no
#: ``typing.get_type_hints`` can resolve those, wherever the class reports it lives.
HINTS_FOR_TYPE_CHECKERS_ONLY = {"PostgresStore", "StoreContract", "StoreMachine"}


@pytest.mark.parametrize(("path", "name"), documented())
def test_type_hints_of_public_classes_resolve(path: str, name: str) -> None:
    # pydantic, cattrs and dacite read a class's hints in the module it reports.
    obj = getattr(importlib.import_module(path), name)
    if isinstance(obj, type) and name not in HINTS_FOR_TYPE_CHECKERS_ONLY:
        typing.get_type_hints(obj)


@pytest.mark.parametrize("old", sorted(_oldpaths.MOVED))
def test_old_private_paths_import_as_the_new_modules(old: str) -> None:
    new = importlib.import_module("statekeep." + _oldpaths.MOVED[old])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert importlib.import_module("statekeep." + old) is new
    # The module keeps its own spec: its relative imports and importlib.reload still work.
    assert new.__spec__ is not None and new.__spec__.name == new.__name__
    # A fresh import warns where the module moved (an import already done is not repeated).
    assert all(issubclass(w.category, DeprecationWarning) for w in caught)


@pytest.mark.parametrize(
    ("pickled", "name"),
    [
        (b"cstatekeep._errors\nStateConflictError\n.", "StateConflictError"),
        (b"cstatekeep._records\nRecord\n.", "Record"),
        (b"cstatekeep._state\nState\n.", "State"),
        (b"cstatekeep._store\nStore\n.", "Store"),
        (b"cstatekeep._agent\nReply\n.", "Reply"),
        (b"cstatekeep._leases\nLease\n.", "Lease"),
        (b"cstatekeep._sealing\nKeyring\n.", "Keyring"),
    ],
)
def test_pickles_made_by_0_1_still_load(pickled: bytes, name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert pickle.loads(pickled) is getattr(statekeep, name)

"""A pytest plugin that runs openai-agents' own session tests against StatekeepSession.

Loaded with ``-p`` into a child pytest by tests/adapters/test_openai_agents_suite.py
(``run_suite`` of tests/support/frameworks.py). The framework's test
modules build their sessions with ``SQLiteSession(session_id, db_path, ...)``; an autouse
fixture replaces that name in each test module with :class:`SQLiteSession` below, a
StatekeepSession that takes the same arguments. Each database path (and each in-memory
database) becomes a store of its own, in a namespace of its own of the store named by
``$STATEKEEP_TEST_STORE``, so sessions that would share a SQLite file share a store.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest
from agents.memory import sqlite_session

from statekeep import Store, open_store
from statekeep.adapters.openai_agents import StatekeepSession
from statekeep.stores._urls import split_lifecycle

_stores: dict[str, Store] = {}
_opened: list[Store] = []
_numbers = itertools.count()


def store_for(db_path: str | Path) -> Store:
    """The store standing for the SQLite database ``db_path`` (``":memory:"``: a new one)."""
    key = str(db_path)
    if key != ":memory:":
        key = str(Path(db_path).expanduser().resolve())
        if key in _stores:
            return _stores[key]
    head, options = split_lifecycle(os.environ["STATEKEEP_TEST_STORE"])
    options["namespace"] = f"{options.get('namespace', 'oa')}-db{next(_numbers)}"
    store = open_store(head, **options)
    _opened.append(store)
    if key != ":memory:":
        _stores[key] = store
    return store


class SQLiteSession(StatekeepSession):
    """StatekeepSession built with SQLiteSession's arguments (named as the class it
    stands in for, so the messages the tests match name it)."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        super().__init__(session_id, store_for(db_path), session_settings=session_settings)


@pytest.fixture(autouse=True)
def _statekeep_sessions(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    module = getattr(request, "module", None)
    if module is not None and hasattr(module, "SQLiteSession"):
        monkeypatch.setattr(module, "SQLiteSession", SQLiteSession)
    # So that no test can pass on the real thing by building it some other way.
    monkeypatch.setattr(sqlite_session.SQLiteSession, "__init__", _refused)


def _refused(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("the real SQLiteSession was built: the plugin did not replace it")


def pytest_unconfigure(config: pytest.Config) -> None:
    for store in _opened:
        store.close()

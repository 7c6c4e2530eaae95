"""statekeep: keep the state of AI agent runs outside the process.

A saved State is, per id, an append-only history of entries (dense ``seq`` from 0) plus
one snapshot dict that every write replaces. Stores are async-first; every async method
has a sync twin that works from scripts, threads and running event loops.
"""

from typing import TYPE_CHECKING

from .agent import Agent, Reply, ScriptedModel
from .errors import CorruptStateError, NotAStoreError, StateConflictError, UnsafeStoreError
from .filestore import FileStore
from .history import FORMAT_VERSION
from .ids import ID_RULE, validate_id
from .memory import MemoryStore
from .records import Record, SavedState
from .resume import ResumeWarning
from .sqlite import SQLiteStore
from .state import State, agent_info
from .store import Store
from .tools import Tool
from .urls import open_store

if TYPE_CHECKING:  # loaded on first use by __getattr__ below
    from .postgres import PostgresStore
    from .redisstore import RedisStore

__all__ = [
    "FORMAT_VERSION",
    "ID_RULE",
    "Agent",
    "CorruptStateError",
    "FileStore",
    "MemoryStore",
    "NotAStoreError",
    "PostgresStore",
    "Record",
    "RedisStore",
    "Reply",
    "ResumeWarning",
    "SQLiteStore",
    "SavedState",
    "ScriptedModel",
    "State",
    "StateConflictError",
    "Store",
    "Tool",
    "UnsafeStoreError",
    "agent_info",
    "open_store",
    "validate_id",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The server stores load on first use, so that importing statekeep never needs their drivers.
    if name == "PostgresStore":
        from .postgres import PostgresStore

        return PostgresStore
    if name == "RedisStore":
        from .redisstore import RedisStore

        return RedisStore
    raise AttributeError(f"module 'statekeep' has no attribute {name!r}")

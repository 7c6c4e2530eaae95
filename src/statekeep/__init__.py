"""statekeep: keep the state of AI agent runs outside the process.

A saved State is, per id, an append-only history of entries (dense ``seq`` from 0) plus
one snapshot dict that every write replaces. Stores are async-first; every async method
has a sync twin that works from scripts, threads and running event loops.
"""

from typing import TYPE_CHECKING

from ._agent import Agent, Reply, ScriptedModel
from ._agentcheck import ResumeWarning
from ._errors import (
    CorruptStateError,
    DecryptionError,
    LeaseHeldError,
    NotAStoreError,
    StaleLeaseError,
    StateConflictError,
    StateExistsError,
    StatekeepError,
    StateNotFoundError,
    UnsafeStoreError,
    UnsupportedFormatError,
)
from ._history import FORMAT_VERSION
from ._ids import ID_RULE, validate_id
from ._kv import Item, Memory
from ._labels import LABEL_RULE, NAMESPACE_RULE
from ._leases import Lease
from ._query import Page
from ._records import Record, SavedState
from ._redactor import DEFAULT_KEYS, Redactor
from ._rekey import RekeyReport, arekey, rekey
from ._sealing import Keyring
from ._state import State, agent_info
from ._store import Store
from ._tools import Tool
from ._urls import open_store
from .stores import FileStore, MemoryStore, SQLiteStore

if TYPE_CHECKING:  # loaded on first use by __getattr__ below
    from .stores import PostgresStore, RedisStore

__all__ = [
    "DEFAULT_KEYS",
    "FORMAT_VERSION",
    "ID_RULE",
    "LABEL_RULE",
    "NAMESPACE_RULE",
    "Agent",
    "CorruptStateError",
    "DecryptionError",
    "FileStore",
    "Item",
    "Keyring",
    "Lease",
    "LeaseHeldError",
    "Memory",
    "MemoryStore",
    "NotAStoreError",
    "Page",
    "PostgresStore",
    "Record",
    "Redactor",
    "RedisStore",
    "RekeyReport",
    "Reply",
    "ResumeWarning",
    "SQLiteStore",
    "SavedState",
    "ScriptedModel",
    "StaleLeaseError",
    "State",
    "StateConflictError",
    "StateExistsError",
    "StateNotFoundError",
    "StatekeepError",
    "Store",
    "Tool",
    "UnsafeStoreError",
    "UnsupportedFormatError",
    "agent_info",
    "arekey",
    "open_store",
    "rekey",
    "validate_id",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The server stores load on first use, so that importing statekeep never needs their drivers.
    if name in ("PostgresStore", "RedisStore"):
        from . import stores

        return getattr(stores, name)
    raise AttributeError(f"module 'statekeep' has no attribute {name!r}")

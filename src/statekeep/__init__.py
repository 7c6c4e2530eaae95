"""statekeep: keep the state of AI agent runs outside the process.

A saved State is, per id, an append-only history of entries (dense ``seq`` from 0) plus
one snapshot dict that every write replaces. Stores are async-first; every async method
has a sync twin that works from scripts, threads and running event loops.
"""

from typing import TYPE_CHECKING

from . import _oldpaths
from ._agent.compaction import Compactor
from ._agent.context import NotRun, ToolContext
from ._agent.loop import Agent, Reply, ScriptedModel
from ._agent.tools import Tool, tool
from ._core.errors import (
    CorruptStateError,
    DecryptionError,
    LeaseHeldError,
    NotAStoreError,
    StaleLeaseError,
    StateConflictError,
    StateExistsError,
    StatekeepError,
    StateNotFoundError,
    StepFailedError,
    StepInDoubtError,
    UnsafeStoreError,
    UnsupportedFormatError,
)
from ._core.ids import ID_RULE, validate_id
from ._core.keys import idempotency_key
from ._core.labels import LABEL_RULE, NAMESPACE_RULE
from ._core.leases import Lease
from ._core.publish import publish
from ._core.query import Page
from ._core.records import Record, SavedState
from ._core.redactor import DEFAULT_KEYS, Redactor
from ._protect.rekey import RekeyReport, arekey, rekey
from ._protect.sealing import Keyring
from ._run.history import FORMAT_VERSION
from ._run.resumecheck import ResumeWarning
from ._run.state import State, agent_info
from ._store.agentmemory import Item, Memory
from ._store.blobs import Collected
from ._store.contract import Store
from .stores import FileStore, MemoryStore, SQLiteStore
from .stores._urls import open_store

if TYPE_CHECKING:  # loaded on first use by __getattr__ below
    from .stores import PostgresStore, RedisStore

__all__ = [
    "DEFAULT_KEYS",
    "FORMAT_VERSION",
    "ID_RULE",
    "LABEL_RULE",
    "NAMESPACE_RULE",
    "Agent",
    "Collected",
    "Compactor",
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
    "NotRun",
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
    "StepFailedError",
    "StepInDoubtError",
    "Store",
    "Tool",
    "ToolContext",
    "UnsafeStoreError",
    "UnsupportedFormatError",
    "agent_info",
    "arekey",
    "idempotency_key",
    "open_store",
    "rekey",
    "tool",
    "validate_id",
]

__version__ = "0.1.0"

publish(__name__, globals(), __all__)
_oldpaths.install()


def __getattr__(name: str) -> object:
    # The server stores load on first use, so that importing statekeep never needs their drivers.
    if name in ("PostgresStore", "RedisStore"):
        from . import stores

        found: object = getattr(stores, name)
        publish(__name__, {name: found}, [name])
        return found
    raise AttributeError(f"module 'statekeep' has no attribute {name!r}")

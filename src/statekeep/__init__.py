"""statekeep: keep the state of AI agent runs outside the process.

A saved State is, per id, an append-only history of entries (dense ``seq`` from 0) plus
one snapshot dict that every write replaces. Stores are async-first; every async method
has a sync twin that works from scripts, threads and running event loops.
"""

from .errors import CorruptStateError, StateConflictError
from .filestore import FileStore
from .ids import ID_RULE, validate_id
from .memory import MemoryStore
from .records import Record, SavedState
from .store import Store

__all__ = [
    "ID_RULE",
    "CorruptStateError",
    "FileStore",
    "MemoryStore",
    "Record",
    "SavedState",
    "StateConflictError",
    "Store",
    "validate_id",
]

__version__ = "0.1.0"

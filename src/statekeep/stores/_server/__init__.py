"""What the server stores (PostgresStore, RedisStore) share.

- :mod:`._store`: :class:`ServerStore`, their base: the connection of each process, close,
  and writes queued in batches;
- :mod:`._local`: :class:`ServerLocal`, what a store keeps in one process;
- :mod:`._batches`: :class:`WriteQueue`, the write batching (and why it is not GroupCommit);
- :mod:`._talking`: :class:`Talking`, lost connections and passwords in errors;
- :mod:`._failover`: resending after a lost connection (``failover_timeout``);
- :mod:`._outcomes`: the outcomes of a server-side write;
- :mod:`._decode`: reading back stored entries and snapshots;
- :mod:`._driver`: importing a driver when a store is made.
"""

from ._batches import Queued
from ._decode import add_listed, decode_stored, raise_bad_entry
from ._driver import import_driver
from ._failover import guarded, holds_write, refused_write
from ._local import ServerLocal
from ._outcomes import (
    BLOB_MISSING,
    COMPARE,
    EXISTS,
    GAP,
    MAX_COMPARES,
    MISSING,
    OK,
    REBORN,
    SEALED_STATE,
    UNEXPECTED,
    check_outcome,
    kept_changing,
)
from ._store import ServerStore
from ._talking import ConnectionLost

__all__ = [
    "BLOB_MISSING",
    "COMPARE",
    "EXISTS",
    "GAP",
    "MAX_COMPARES",
    "MISSING",
    "OK",
    "REBORN",
    "SEALED_STATE",
    "UNEXPECTED",
    "ConnectionLost",
    "Queued",
    "ServerLocal",
    "ServerStore",
    "add_listed",
    "check_outcome",
    "decode_stored",
    "guarded",
    "holds_write",
    "import_driver",
    "kept_changing",
    "raise_bad_entry",
    "refused_write",
]

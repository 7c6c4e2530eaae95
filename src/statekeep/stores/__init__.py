"""The built-in stores, and the I/O seam FileStore takes.

``PostgresStore`` and ``RedisStore`` load on first use, so importing statekeep never needs
their drivers (extras ``statekeep[postgres]`` and ``statekeep[redis]``).
"""

from typing import TYPE_CHECKING

from .._core.publish import publish
from . import engine as engine  # its names report statekeep.stores.engine from the start
from ._file import FileStore
from ._fsio import OsIO
from ._memory import MemoryStore
from ._sqlite import SQLiteStore

if TYPE_CHECKING:  # loaded on first use by __getattr__ below
    from ._postgres import PostgresStore
    from ._redis import RedisStore

__all__ = ["FileStore", "MemoryStore", "OsIO", "PostgresStore", "RedisStore", "SQLiteStore"]

# The stores report ``statekeep`` (statekeep/__init__.py publishes them); OsIO is this package's own.
publish(__name__, globals(), ["OsIO"])


def __getattr__(name: str) -> object:
    if name == "PostgresStore":
        from ._postgres import PostgresStore

        publish("statekeep", {name: PostgresStore}, [name])
        return PostgresStore
    if name == "RedisStore":
        from ._redis import RedisStore

        publish("statekeep", {name: RedisStore}, [name])
        return RedisStore
    raise AttributeError(f"module 'statekeep.stores' has no attribute {name!r}")

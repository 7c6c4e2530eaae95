"""FileStore, the embedded default: one folder per State (see :mod:`.store`), and the I/O
seam it takes, :class:`OsIO`."""

from .fsio import OsIO
from .store import FileStore

__all__ = ["FileStore", "OsIO"]

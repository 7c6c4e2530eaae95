"""FileStore, the embedded default: one folder per State, and the I/O seam it takes.

- :mod:`.store`: the FileStore class, the four operations' wiring, reads and listings;
- :mod:`.append`: appends as group commits (stage, flush, finish, undo; failed undos);
- :mod:`.recovery`: the tail cache, scanning a log's tail, cutting a torn last line;
- :mod:`.create`: create (staging folder, renamed into place) and delete (renamed away);
- :mod:`.folder`: the store's folder opened, made, marked and swept; State folders in it;
- :mod:`.trust`: what is checked before a folder is trusted (owners, modes, the marker);
- :mod:`.locking`: the flocks, safe across fork;
- ``statekeep.stores._fsio``: :class:`OsIO`, the seam every write goes through (shared with
  SQLiteStore), and owner-only folders and files.
"""

from .._fsio import OsIO
from .store import FileStore

__all__ = ["FileStore", "OsIO"]

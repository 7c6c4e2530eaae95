"""FileStore, the embedded default: one folder per State, and the I/O seam it takes.

- :mod:`.store`: the FileStore class, the operations' wiring, namespaces (siblings), gc;
- :mod:`.reads`: reads and listings (scans);
- :mod:`.append`: appends as group commits (stage, flush, finish, undo; failed undos),
  with :mod:`.staged`, what an append carries between those steps, and :mod:`.steady`, the
  appender's base class: a lone append to a State this process appended to last, in six
  system calls;
- :mod:`.expiry`: a snapshot's expiry read cheaply, for the checks made under a State's lock;
- :mod:`.recovery`: the tail cache, scanning a log's tail, cutting a torn last line;
- :mod:`.create`: create (staging folder, renamed into place; over an expired State) and
  delete (renamed away; gc's only if still expired);
- :mod:`.folder`: the store's folder opened, made, marked and swept; a namespace's folder
  in it; State folders in them;
- :mod:`.trust`: what is checked before a folder is trusted (owners, modes, the marker);
- :mod:`.locking`: the flocks, safe across fork;
- ``statekeep.stores._fsio``: :class:`OsIO`, the seam every write goes through (shared with
  SQLiteStore), and owner-only folders and files.
"""

from .._fsio import OsIO
from .store import FileStore

__all__ = ["FileStore", "OsIO"]

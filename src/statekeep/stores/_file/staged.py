"""What an append of a group commit carries between its steps (:mod:`.append`), and what a
failed undo leaves for the next write to settle."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..._core.writes import PreparedWrite
from .._fsio import OsIO
from .locking import release
from .recovery import Tail


@dataclass(slots=True)
class Append:
    """One write of a group commit, with what it opened and how far it got."""

    write: PreparedWrite
    folder: int = -1
    log: int = -1
    locked: bool = False
    size: int = 0  # the log's size before this write
    next_seq: int = 0  # the seq after the log's last entry once this write is in
    snapshot_at: int | None = None  # where the current snapshot record is once it is in
    snapshot: bytes | None = None  # the snapshot this write records, if any
    framed: bool = True  # the log holds a format 2 write once this one is in
    expires_at: datetime | None = None  # the current snapshot's expiry once this write is in
    incarnation: str | None = None  # the State's, as its log carries it
    sealed: bool | None = None  # the State is sealed once this write is in (None: not known)
    new: bytes = b""
    sync_log: bool = False  # the log holds bytes not known durable: fsync it
    sync_root: bool = False  # a State this process never wrote: fsync the store's folder
    durable: int = 0  # how much of the log is known durable (its start) before this write
    appended: bool = False
    error: BaseException | None = None
    mark: object = None  # the pair's mark (.handles): the tail its log was left at, if known

    def unlock(self, io: OsIO | None = None) -> None:
        if self.locked:
            self.locked = False
            if io is None:
                release(self.folder)
            else:
                release(self.folder, io)


@dataclass(frozen=True, slots=True)
class Doubt:
    """A log whose undo failed: it may hold bytes of a failed append past ``cut_to``."""

    left: Tail  # the log as the failed write left it
    cut_to: int  # the log's size before that append

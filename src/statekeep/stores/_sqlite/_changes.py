"""SQLiteStore's change stamp (:mod:`statekeep._store.changes`): ``PRAGMA data_version`` on the
reader the owner loop keeps, which moves whenever another connection, in this process or
any other, commits to the file (every namespace's writes move it: a listing too many)."""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING

from ..._runtime.bridge import run_async
from ..._runtime.slot import ProcessSlot
from ._connections import Connections, is_busy
from ._listing import loop_reader


class ChangeStamp:
    """The ``_change_stamp`` hook of SQLiteStore."""

    if TYPE_CHECKING:
        path: Path
        _slot: ProcessSlot[Connections]

        def _absent(self, conns: Connections) -> bool: ...

    async def _change_stamp(self) -> Hashable | None:
        return await run_async(self._data_version())

    async def _data_version(self) -> Hashable | None:
        conns = self._slot.get()  # on the owner loop, as the loop reader must be
        if self._absent(conns):
            return (0,)  # no file yet: making it changes this
        conn = loop_reader(self.path, conns)
        try:
            (version,) = conn.execute("PRAGMA data_version").fetchone()
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                return None  # cannot say now: list
            raise
        # A connection's versions compare only with its own: a new loop reader is a change.
        return (id(conn), version)

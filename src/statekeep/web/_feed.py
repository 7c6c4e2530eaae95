"""The runs feed's one poller: it lists the States updated lately and hands them to every
open runs page of the app.

A listing by ``updated_after`` is a scan of every State on a FileStore, so each open tab
polling on its own cost a core on a large store. One :class:`Changes` per app polls every
:data:`POLL_MIN` seconds while States change, backing off to :data:`POLL_MAX` while none
do, and only while a runs page is open. Each feed then filters the rows itself.

Each poll first asks the store's change stamp (:mod:`statekeep._store.changes`: one ``stat`` on a
FileStore) and lists only when it moved, so an idle page costs the store next to nothing;
at least every :data:`RESYNC` seconds it lists whatever the stamp says, so a change the
stamp missed (a writer of an older statekeep, one killed before its copy was refreshed)
still reaches the page. Stores without a stamp are listed on every poll.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .._core.passwords import redact_text
from .._core.records import SavedState
from .._store.changes import change_stamp
from .._store.contract import Store
from ._children import children_counts
from ._render import render, row_view
from ._statuses import Statuses

POLL_MIN = 2.0  # seconds between two listings while States change
POLL_MAX = 5.0  # ... and at most, while none does
#: Writers' clocks differ from the server's: each listing reaches this far back, and what
#: was already handed out (the same id and updated_at) is not handed out again.
OVERLAP = timedelta(seconds=30)
ROWS = 500  # the most rows one listing hands out (the newest)
RESYNC = 60.0  # seconds: a listing at least this often, whatever the change stamp says

_log = logging.getLogger("statekeep.web")


@dataclass(frozen=True, slots=True)
class Change:
    """A State updated: its listing row and its ``<tr>`` (escaped, rendered once for all)."""

    row: SavedState
    html: str


class Changes:
    """The poller shared by the app's open runs feeds (see the module's docstring)."""

    def __init__(self, store: Store, stopping: threading.Event, statuses: Statuses) -> None:
        self.store = store
        self.statuses = statuses  # told of each row handed out: a new stop reason is offered
        self.stopping = stopping
        self.queues: set[asyncio.Queue[list[Change]]] = set()
        self.task: asyncio.Task[None] | None = None

    def subscribe(self) -> asyncio.Queue[list[Change]]:
        """A queue that gets each batch of changes from now on (unsubscribe when done)."""
        queue: asyncio.Queue[list[Change]] = asyncio.Queue()
        self.queues.add(queue)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._poll(), name="statekeep-feed")
        return queue

    def unsubscribe(self, queue: asyncio.Queue[list[Change]]) -> None:
        self.queues.discard(queue)

    async def _poll(self) -> None:
        handed: dict[str, datetime] = {}  # id -> the updated_at last handed out
        since = datetime.now(UTC) - OVERLAP
        wait = POLL_MIN
        listed: tuple[Hashable | None, float] = (None, 0.0)  # the stamp at the last listing, and when
        while self.queues and not self.stopping.is_set():
            now = datetime.now(UTC)
            changes: list[Change] = []
            try:
                stamp = await change_stamp(self.store)
                if stamp is None or stamp != listed[0] or time.monotonic() - listed[1] >= RESYNC:
                    # Read before the listing: a change made during it moves the next one.
                    listed = (stamp, time.monotonic())
                    changes = await self._changes(since, handed)
                    since = now - OVERLAP  # the server's clock: a writer's clock ahead cannot skip ours
                    for stale in [sid for sid, at in handed.items() if at <= since]:
                        del handed[stale]  # older than the next listing reaches: never listed again
            except Exception as exc:  # a store gone for a while: try again later
                _log.error("statekeep: the runs feed failed: %s", redact_text(f"{type(exc).__name__}: {exc}"))
                listed = (None, 0.0)
            if changes:
                for queue in self.queues:
                    queue.put_nowait(changes)
                wait = POLL_MIN
            else:
                wait = min(POLL_MAX, wait * 1.5)
            await asyncio.sleep(wait)

    async def _changes(self, since: datetime, handed: dict[str, datetime]) -> list[Change]:
        rows = await self.store.alist(updated_after=since, limit=ROWS)
        fresh = [row for row in rows if handed.get(row.id) != row.updated_at]
        for row in fresh:
            handed[row.id] = row.updated_at
        self.statuses.note(fresh)
        return rendered(fresh, await children_counts(self.store, fresh))


def rendered(rows: list[SavedState], counts: dict[str, int]) -> list[Change]:
    now = datetime.now(UTC)
    return [Change(row, render("_row.html", r=row_view(row, counts[row.id], now))) for row in rows]

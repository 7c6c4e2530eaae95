"""How many children each run of a runs page has, without a listing per row.

A listing by ``parent=`` is one query per row, and on a FileStore each listing reads every
State: 50 of them made a page of a 10,000-State store take half a minute. Instead, one
listing of the States updated since the oldest row of the page was created (a child is
saved after its parent is created, so that is where every child is), grouped by parent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta

from .._core.records import SavedState
from .._store.contract import Store

#: Writers' clocks differ: a child saved by a machine whose clock runs behind its parent's
#: is still counted within this much.
SKEW = timedelta(hours=1)
#: The most rows the one listing returns; past it (a busy store, an old page), each row's
#: children are listed on their own, which stores with an index answer cheaply.
MAX_SCAN = 10_000


async def children_counts(
    store: Store,
    rows: Sequence[SavedState],
    seen: Callable[[Iterable[SavedState]], object] | None = None,
    every: Sequence[SavedState] | None = None,
) -> dict[str, int]:
    """The number of States whose parent is each of ``rows`` (by id). ``seen`` is shown the
    rows the one listing found (the runs page gathers its status choices from them).
    ``every``: a listing of every State of the store, just made (the runs page's summary):
    counted in place of the one listing."""
    if not rows:
        return {}
    ids = {row.id for row in rows}
    if every is not None:
        recent: Sequence[SavedState] = every
    else:
        since = min(row.created_at for row in rows) - SKEW
        recent = await store.alist(updated_after=since, limit=MAX_SCAN)
    if seen is not None:
        seen(recent)
    if getattr(recent, "next", None) is None:
        found = Counter(row.parent for row in recent if row.parent in ids)
        return {sid: found.get(sid, 0) for sid in ids}
    return {sid: len(await store.alist(parent=sid)) for sid in ids}

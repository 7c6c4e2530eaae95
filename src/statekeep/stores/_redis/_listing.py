"""RedisStore's listing pages and gc, answered from the indexes (see :mod:`._keys`).

A page is one or more calls of the select script, each looking at no more than
``BUDGET`` index members, so that a sparse filter never holds the server for long: the
next call goes on from the last member the previous one looked at.
"""

from __future__ import annotations

from typing import Any

from ..._core.query import ListQuery, Page, encode_cursor
from ..._core.records import SavedState
from .._server import add_listed
from ._client import ClientLocal
from ._keys import Keys, down

#: Index members one select call looks at, at most.
BUDGET = 2000
#: Expired States one gc call removes, at most.
GC_BATCH = 500
#: Unlisted States (snapshots that are no listing row) an unfiltered first page warns about.
WARN_AT_MOST = 100


def bounds(query: ListQuery) -> tuple[bytes, bytes]:
    """The ``ZRANGEBYLEX`` bounds of ``query``: its cursor and its ``updated_before`` (the
    tighter of the two) to its ``updated_after``."""
    start = b"-"
    if query.after is not None:
        at, sid = query.after
        start = b"(" + (down(at) + sid).encode()
    if query.updated_before is not None:
        # updated_at < T: the members from the microsecond before T
        before = b"[" + f"{int(down(query.updated_before)) + 1:018d}".encode()
        if start == b"-" or before[1:] > start[1:]:
            start = before
    end = b"+"
    if query.updated_after is not None:
        end = b"(" + down(query.updated_after).encode()  # updated_at > T
    return start, end


async def select(local: ClientLocal, keys: Keys, query: ListQuery) -> tuple[Page, list[str]]:
    """One page of ``query``; warnings for unlisted States on an unfiltered first page."""
    script = local.select_script
    assert script is not None
    must, must_not = keys.filters(query)
    start, end = bounds(query)
    want = None if query.limit is None else query.limit + 1
    rows: list[SavedState] = []
    skipped: list[str] = []
    warn = WARN_AT_MOST if query.after is None and not query.filtered else 0
    while want is None or len(rows) < want:
        asked = BUDGET if want is None else want - len(rows)
        reply = await script(
            keys=[keys.common[0], keys.common[2]],
            args=[
                keys.state, start, end, asked, BUDGET, query.id_prefix or "",
                len(must), *must, len(must_not), *must_not, warn, "1" if query.include_expired else "0",
            ],
        )  # fmt: skip
        done, last, unlisted = int(reply[0]), reply[1], reply[2]
        for i in range(0, len(unlisted), 2):  # left out: only their warnings are kept
            add_listed(_text(unlisted[i]), unlisted[i + 1], [], skipped)
        warn = 0
        for i in range(3, len(reply), 2):
            add_listed(_text(reply[i]), reply[i + 1], rows, skipped)
        if done or not last:
            break
        start = b"(" + _bytes(last)
    page = Page(rows)
    if want is not None and len(rows) >= want:
        del page[query.limit :]
        page.next = encode_cursor(page[-1])
    return page, skipped


async def gc(local: ClientLocal, keys: Keys, limit: int | None) -> int:
    """Remove expired States, at most ``limit``, ``GC_BATCH`` per script call; those with
    a live lease stay (see :data:`._lua.GC`)."""
    script = local.gc_script
    assert script is not None
    removed = leased = 0
    while limit is None or removed < limit:
        batch = GC_BATCH if limit is None else min(GC_BATCH, limit - removed)
        # The States a live lease keeps stay first in the expiry index: pass over them.
        args: list[bytes | int] = [keys.state, keys.entries, batch, keys.lease, leased]
        gone, looked, kept = await script(keys=list(keys.common), args=args)
        removed += int(gone)
        leased += int(kept)
        if int(looked) < batch:
            break
    return removed


async def child_ids(local: ClientLocal, keys: Keys, state_id: str) -> list[str]:
    """The ids in the parent index of ``state_id`` (its members are time + id)."""
    members = await local.client.zrange(keys.index("parent", state_id), 0, -1)
    return [_text(m)[18:] for m in members]


async def count_expired(local: ClientLocal, keys: Keys) -> int:
    """What gc would remove now (a dry run): the States of the expiry index up to the
    server's TIME without a live lease, ``GC_BATCH`` per script call (see
    :data:`._lua.COUNT_EXPIRED`)."""
    script = local.count_expired_script
    assert script is not None
    counted = looked = 0
    while True:
        args: list[bytes | int] = [keys.lease, looked, GC_BATCH]
        found, seen = await script(keys=[keys.common[3]], args=args)
        counted += int(found)
        looked += int(seen)
        if int(seen) < GC_BATCH:
            return counted


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

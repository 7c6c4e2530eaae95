"""bench_sqlite's section (6): the first page of a listing out of many States.

``store.list(limit=50)`` unfiltered, by agent and by label, against a hand-written indexed
query that reads the same 50 rows and builds the same rows (ListedRow) in plain Python.
The States are filled with raw bulk inserts of the store's own listing columns
(``_rows.listing_columns``): the store's write path is too slow to make 100,000 here.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

import common
from common import ListedRow, Scratch
from statekeep import SQLiteStore
from statekeep.stores._sqlite import _sql as sql
from statekeep.stores._sqlite._rows import listing_columns
from statekeep.stores._sqlite._schema import migrate

PAGE = 50
AGENTS = 10  # the agent filter matches 1 State in 10
USERS = 20  # the label filter (user=...) matches 1 State in 20
# Each sample is the mean of this many pages (one page is well under a millisecond).
CALLS = 20

_COLUMNS = (
    "s.id, s.task, s.created_at, s.updated_at, s.turn, s.stopped_by, s.finished, s.agent, s.parent, "
    "s.labels, s.expires_at, s.forked_from"
)
_LIVE = "(s.expires_at IS NULL OR s.expires_at > ?)"
RAW_PAGE = {
    "all": f"SELECT {_COLUMNS} FROM states s WHERE s.namespace = 'default' AND s.updated_at IS NOT NULL "
    f"AND {_LIVE} ORDER BY s.updated_at DESC, s.id LIMIT {PAGE}",
    "agent": f"SELECT {_COLUMNS} FROM states s WHERE s.namespace = 'default' AND s.agent = ? AND {_LIVE} "
    f"ORDER BY s.updated_at DESC, s.id LIMIT {PAGE}",
    "label": f"SELECT {_COLUMNS} FROM labels l JOIN states s ON s.namespace = l.namespace AND s.id = l.state_id "
    f"WHERE l.namespace = 'default' AND l.key = ? AND l.value = ? AND {_LIVE} "
    f"ORDER BY l.updated_at DESC, l.state_id LIMIT {PAGE}",
}
FILTERS: dict[str, dict[str, Any]] = {
    "all": {},
    "agent": {"agent": "agent-3"},
    "label": {"labels": {"user": "u7"}},
}
RAW_ARGS: dict[str, tuple[Any, ...]] = {"all": (), "agent": ("agent-3",), "label": ("user", "u7")}


def page_rows(rows: Sequence[tuple[Any, ...]]) -> list[ListedRow]:
    """Listing rows as tuples (``_sql.ROW_COLUMNS``) made into rows with SavedState's fields."""
    when, loads = datetime.fromisoformat, orjson.loads
    return [
        ListedRow(
            i,
            t,
            when(c),
            when(u),
            n,
            s,
            bool(f),
            a,
            p,
            {} if lab is None else loads(lab),
            None if e is None else when(e),
            None if fk is None else loads(fk),
        )
        for i, t, c, u, n, s, f, a, p, lab, e, fk in rows
    ]


def fill(path: Path, count: int) -> None:
    """``count`` States of one entry each, in one transaction of bulk inserts."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    states, entries, labels = [], [], []
    for i in range(count):
        sid = common.state_id(i)
        at = (start + timedelta(seconds=i)).isoformat()
        snapshot = orjson.dumps(
            {
                "task": f"task {i}",
                "created_at": at,
                "updated_at": at,
                "turn": i % 97,
                "stopped_by": None,
                "finished": i % 3 == 0,
                "agent": f"agent-{i % AGENTS}",
                "labels": {"user": f"u{i % USERS}", "env": "prod"},
            }
        )
        columns, pairs = listing_columns(sid, snapshot)
        states.append(("default", sid, 1, snapshot, *columns, None))  # no incarnation
        entries.append(("default", sid, 0, b'{"seq":0,"kind":"task"}'))
        labels.extend(("default", sid, k, v, columns[2]) for k, v in pairs.items())
    conn = migrate(path)
    try:
        conn.execute("BEGIN")
        conn.executemany(sql.INSERT_STATE, states)
        conn.executemany(sql.INSERT_ENTRY, entries)
        conn.executemany(sql.INSERT_LABEL, labels)
        conn.execute("COMMIT")
    finally:
        conn.close()


def per_call(fn: Any) -> float:
    """Milliseconds per call of ``fn``, the mean of CALLS calls."""
    common.timed(lambda: None)  # the collection before timing
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    return (time.perf_counter() - start) / CALLS * 1e3


def measure_pages(scratch: Scratch, sizes: Sequence[int], reps: int, samples: dict[str, list[float]]) -> None:
    """Keys ``page_<kind>_<size>`` (the store) and ``page_raw_<kind>_<size>`` (raw), in ms."""
    for size in sizes:
        path = scratch.new(f"pages-{size}") / "store.db"
        fill(path, size)
        store = SQLiteStore(path)
        raw = sqlite3.connect(path, isolation_level=None)
        now = datetime.now(UTC).isoformat(timespec="microseconds")
        try:
            for kind, filters in FILTERS.items():
                mine = store.list(limit=PAGE, **filters)
                theirs = page_rows(raw.execute(RAW_PAGE[kind], (*RAW_ARGS[kind], now)).fetchall())
                assert len(theirs) == PAGE and common.same_rows(mine, theirs), kind
            for _ in range(reps):
                for kind, filters in FILTERS.items():
                    query, args = RAW_PAGE[kind], (*RAW_ARGS[kind], now)
                    samples.setdefault(f"page_raw_{kind}_{size}", []).append(
                        per_call(lambda q=query, a=args, c=raw: page_rows(c.execute(q, a).fetchall()))
                    )
                    samples.setdefault(f"page_{kind}_{size}", []).append(
                        per_call(lambda f=filters, s=store: s.list(limit=PAGE, **f))
                    )
        finally:
            raw.close()
            store.close()

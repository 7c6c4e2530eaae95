"""Benchmarks of PostgresStore and RedisStore, each next to a raw baseline on the same server.

Run from the repository::

    .venv/bin/python benchmarks/bench_servers.py            # the full run (a minute or two)
    .venv/bin/python benchmarks/bench_servers.py --quick    # a small run, for the smoke test
    .venv/bin/python benchmarks/bench_servers.py --json out.json

It starts its own throwaway servers (tests/support/servers.py): PostgreSQL with ``fsync=on`` and
``synchronous_commit=on``, Redis with ``appendonly yes`` and ``appendfsync always``, so
every write is durable on return, for the store and for the baseline alike.

The workload (from the issue): 20 States x 50 turns; each turn adds 3 entries (text fields
of about 800 B, 200 B and 2 KB) and replaces the snapshot, in one write. Measures, per
server:

- sequential: the store's turns/s, States one after another, against a raw client doing
  one transaction per turn (asyncpg: BEGIN, INSERT the entries, UPDATE the snapshot,
  COMMIT; redis-py: one MULTI/EXEC with RPUSH and HSET). Target: at least 0.7 x raw.
- concurrent: the 20 States at once (asyncio.gather) against the store's own sequential
  rate. Target: at least 3 x.
- list: listing 1,000 States against a raw query of the same rows, each made into a row with
  SavedState's fields (PostgreSQL: the store's listing columns in index order, target at most
  1.3 x raw's time; Redis: the snapshots in index order, parsed).
- load: reading a State of 10,000 entries against a raw fetch of its entries, parsed.
  Target: at most 1.5 x raw's time.
- (pg) first page: the first page of 50 of 1,000, 10,000 and 100,000 States (COPY-filled;
  20 agents, 100 users), unfiltered, by agent and by label, against the same indexed query
  by hand building the same rows. Target: at most 1.5 x raw's time; the time per page
  should not grow with the number of States.

Each repetition measures store and baseline side by side; the report gives medians, and
each ratio is the median of the repetitions' ratios: the numbers are noisy on a small VM
(and more so when other work shares it), the ratios much less so. The raw baselines get their
JSON already encoded; the store's times include validating and encoding it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support import servers  # noqa: E402

import common  # noqa: E402
from common import ListedRow, make_entry, make_snapshot, state_id  # noqa: E402
from statekeep import Store  # noqa: E402


@dataclass(frozen=True)
class Config:
    states: int  # States written in the turn benchmarks
    turns: int  # turns per State
    reps: int  # repetitions of each turn benchmark (median reported)
    list_states: int  # States listed
    load_entries: int  # entries of the State loaded whole
    read_reps: int  # repetitions of the list and load timings


FULL = Config(states=20, turns=50, reps=5, list_states=1_000, load_entries=10_000, read_reps=9)
QUICK = Config(states=4, turns=8, reps=1, list_states=40, load_entries=600, read_reps=2)


# -- the workload ------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One turn: what a store is given, and the same JSON, encoded, for the raw baselines."""

    entries: list[dict[str, Any]]
    snapshot: dict[str, Any]
    seqs: list[int]
    lines: list[bytes]
    snap: bytes


def make_workload(states: int, turns: int) -> list[list[Turn]]:
    def turn(entries: list[dict[str, Any]], snapshot: dict[str, Any]) -> Turn:
        return Turn(
            entries,
            snapshot,
            [e["seq"] for e in entries],
            [orjson.dumps(e) for e in entries],
            orjson.dumps(snapshot),
        )

    return common.make_workload(states, turns, turn)


def ns() -> str:
    return f"bench_{uuid.uuid4().hex[:10]}"


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    gc.collect()
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


# -- the store side (the same for both servers) -------------------------------------------


async def store_sequential(store: Store, work: list[list[Turn]]) -> float:
    """Turns/s, States one after another."""

    async def run() -> None:
        for i, turns in enumerate(work):
            for t, turn in enumerate(turns):
                await store.awrite(state_id(i), turn.entries, turn.snapshot, create=t == 0)

    return sum(map(len, work)) / await timed(run)


async def store_concurrent(store: Store, work: list[list[Turn]]) -> float:
    """Turns/s, every State at once (each State's turns in order)."""

    async def one(i: int, turns: list[Turn]) -> None:
        for t, turn in enumerate(turns):
            await store.awrite(state_id(i), turn.entries, turn.snapshot, create=t == 0)

    async def run() -> None:
        await asyncio.gather(*(one(i, turns) for i, turns in enumerate(work)))

    return sum(map(len, work)) / await timed(run)


async def fill_many(store: Store, count: int) -> None:
    async def one(i: int) -> None:
        await store.awrite(f"list-{i:05d}", [make_entry(0)], make_snapshot(i, i % 97), create=True)

    for start in range(0, count, 100):
        await asyncio.gather(*(one(i) for i in range(start, min(count, start + 100))))


async def fill_big(store: Store, sid: str, count: int) -> None:
    for start in range(0, count, 500):
        batch = [make_entry(seq) for seq in range(start, min(count, start + 500))]
        await store.awrite(sid, batch, make_snapshot(0, start), create=start == 0)


# -- PostgreSQL -------------------------------------------------------------------------


class PostgresBench:
    name = "postgres"

    def __init__(self, server: servers.PostgresServer) -> None:
        import asyncpg

        self.asyncpg = asyncpg
        self.server = server

    def store(self, schema: str) -> Store:
        from statekeep.stores._postgres import PostgresStore

        return PostgresStore(self.server.dsn, schema=schema)

    async def open(self) -> None:
        self.pool = await self.asyncpg.create_pool(self.server.dsn, min_size=1, max_size=10)

    async def close(self) -> None:
        await self.pool.close()

    async def _raw_tables(self) -> str:
        schema = ns()
        await self.pool.execute(
            f"""CREATE SCHEMA {schema};
            CREATE TABLE {schema}.states (id text PRIMARY KEY, snapshot text NOT NULL);
            CREATE TABLE {schema}.entries (state_id text, seq bigint, data text NOT NULL,
                                           PRIMARY KEY (state_id, seq));"""
        )
        return schema

    async def _raw_turn(self, conn: Any, schema: str, sid: str, turn: Turn, first: bool) -> None:
        async with conn.transaction():
            if first:
                await conn.execute(f"INSERT INTO {schema}.states VALUES ($1, $2)", sid, turn.snap.decode())
            else:
                await conn.execute(
                    f"UPDATE {schema}.states SET snapshot = $2 WHERE id = $1", sid, turn.snap.decode()
                )
            await conn.execute(
                f"INSERT INTO {schema}.entries SELECT $1, s, d FROM unnest($2::bigint[], $3::text[]) AS u(s, d)",
                sid,
                turn.seqs,
                [line.decode() for line in turn.lines],
            )

    async def raw_sequential(self, work: list[list[Turn]]) -> float:
        schema = await self._raw_tables()
        async with self.pool.acquire() as conn:

            async def run() -> None:
                for i, turns in enumerate(work):
                    for t, turn in enumerate(turns):
                        await self._raw_turn(conn, schema, state_id(i), turn, t == 0)

            return sum(map(len, work)) / await timed(run)

    async def raw_concurrent(self, work: list[list[Turn]]) -> float:
        schema = await self._raw_tables()

        async def one(i: int, turns: list[Turn]) -> None:
            for t, turn in enumerate(turns):
                async with self.pool.acquire() as conn:
                    await self._raw_turn(conn, schema, state_id(i), turn, t == 0)

        async def run() -> None:
            await asyncio.gather(*(one(i, turns) for i, turns in enumerate(work)))

        return sum(map(len, work)) / await timed(run)

    async def raw_list(self, schema: str) -> Any:
        """The store's listing columns through its index, in the order the database gives,
        each row made into a row with SavedState's fields: what PostgresStore.alist returns,
        built by hand."""
        rows = await self.pool.fetch(
            f"SELECT {PG_COLUMNS} FROM \"{schema}\".states WHERE ns = 'default' AND task IS NOT NULL "
            f"AND {PG_LIVE} ORDER BY updated_at DESC, id"
        )
        return [pg_row(r) for r in rows]

    async def raw_load(self, schema: str, sid: str) -> Any:
        rows = await self.pool.fetch(
            f'SELECT data FROM "{schema}".entries WHERE state_id = $1 ORDER BY seq', sid
        )
        return [orjson.loads(r[0]) for r in rows]

    def settings(self) -> str:
        return "fsync=on, synchronous_commit=on"


PG_COLUMNS = "id, task, created_at, updated_at, turn, stopped_by, finished, agent, parent, labels, expires_at, forked_from"
PG_LIVE = "(expires_at IS NULL OR expires_at > now())"


def pg_row(r: Any) -> ListedRow:
    """A listing row of PostgresStore's columns, built by hand."""
    i, t, c, u, n, s, f, a, p, labels, e, fork = r
    return ListedRow(
        i, t, c, u, n, s, f, a, p, {} if labels is None else orjson.loads(labels), e,
        None if fork is None else orjson.loads(fork),
    )  # fmt: skip


#: States in the store when a first page is timed (issue 10: time per page at each size).
PAGE_SIZES = (1_000, 10_000, 100_000)
PAGE_SIZES_QUICK = (500, 1_000)
#: The first page's filters: (name, store filters, raw condition, raw argument).
PAGE_FILTERS: tuple[tuple[str, dict[str, Any], str, Any], ...] = (
    ("unfiltered", {}, "", None),
    ("by agent", {"agent": "agent-3"}, " AND agent = $1", "agent-3"),
    ("by label", {"labels": {"user": "u42"}}, "label", "u42"),
)


async def pg_fill_pages(pool: Any, schema: str, start: int, stop: int) -> None:
    """States ``start`` to ``stop`` (20 agents, 100 users, updated in an order unrelated to
    their ids), copied into the store's tables (COPY) as its writes would have made them."""
    base = common.BASE_TIME
    records = []
    labels = []
    for i in range(start, stop):
        updated = base + timedelta(seconds=(i * 7919) % 1_000_003)
        snap = {
            **make_snapshot(i, 3),
            "updated_at": updated.isoformat(),
            "agent": f"agent-{i % 20}",
            "labels": {"user": f"u{i % 100}", "env": "prod" if i % 2 else "dev"},
        }
        records.append(
            (
                "default", state_id(i), 1, orjson.dumps(snap).decode(), snap["task"], base, updated, 3, None,
                False, "running", snap["agent"], orjson.dumps(snap["labels"]).decode(),
            )
        )  # fmt: skip
        labels += [("default", state_id(i), k, v, updated) for k, v in snap["labels"].items()]
    await pool.copy_records_to_table(
        "states",
        schema_name=schema,
        records=records,
        columns=[
            "ns", "id", "next_seq", "snapshot", "task", "created_at", "updated_at", "turn",
            "stopped_by", "finished", "status", "agent", "labels",
        ],
    )  # fmt: skip
    await pool.copy_records_to_table(
        "labels", schema_name=schema, records=labels, columns=["ns", "state_id", "key", "value", "updated_at"]
    )
    await pool.execute(f'ANALYZE "{schema}".states, "{schema}".labels')


async def bench_pages(kind: PostgresBench, cfg: Config, quick: bool) -> list[Row]:
    """The first page of 50 of 1k, 10k and 100k States, unfiltered, by agent and by label:
    PostgresStore.alist against the same indexed query by hand (same rows built)."""
    await kind.open()
    schema = ns()
    store = kind.store(schema)
    rows: list[Row] = []
    try:
        await store.alist()  # make the tables
        have = 0
        for size in PAGE_SIZES_QUICK if quick else PAGE_SIZES:
            await pg_fill_pages(kind.pool, schema, have, size)
            have = size
            for name, filters, condition, arg in PAGE_FILTERS:
                query = (
                    f"SELECT {PG_COLUMNS} FROM \"{schema}\".states WHERE ns = 'default' AND task IS NOT "
                    f"NULL{condition} AND {PG_LIVE} ORDER BY updated_at DESC, id LIMIT 50"
                )
                if condition == "label":  # the label's rows in order, joined to their States
                    columns = ", ".join(f"s.{c}" for c in PG_COLUMNS.split(", "))
                    query = (
                        f'SELECT {columns} FROM "{schema}".labels l JOIN "{schema}".states s ON s.ns = l.ns '
                        "AND s.id = l.state_id WHERE l.ns = 'default' AND l.key = 'user' AND l.value = $1 "
                        "AND s.task IS NOT NULL AND (s.expires_at IS NULL OR s.expires_at > now()) "
                        "ORDER BY l.updated_at DESC, l.state_id LIMIT 50"
                    )
                args = () if arg is None else (arg,)

                async def raw(query: str = query, args: tuple[Any, ...] = args) -> list[ListedRow]:
                    return [pg_row(r) for r in await kind.pool.fetch(query, *args)]

                async def listed(filters: dict[str, Any] = filters) -> Any:
                    return await store.alist(limit=50, **filters)

                got = await listed()
                assert got and common.same_rows(got, await raw()), name
                times_store, times_raw = [], []
                for _ in range(cfg.read_reps * 3):
                    times_store.append(await timed(listed))
                    times_raw.append(await timed(raw))
                ts, tr = statistics.median(times_store), statistics.median(times_raw)
                ratio = statistics.median(s / r for s, r in zip(times_store, times_raw, strict=True))
                rows.append(
                    Row(
                        f"(pg) first page of 50 of {size:,} States, {name}",
                        ts * 1000,
                        "ms",
                        [x * 1000 for x in times_store],
                        tr * 1000,
                        ratio,
                        "<= 1.5 x raw's time",
                        ratio <= 1.5,
                    )
                )
    finally:
        await store.aclose()
        await kind.close()
    return rows


# -- Redis ------------------------------------------------------------------------------


class RedisBench:
    name = "redis"

    def __init__(self, server: servers.RedisServer) -> None:
        import redis.asyncio as aioredis

        self.aioredis = aioredis
        self.server = server

    def store(self, prefix: str) -> Store:
        from statekeep.stores._redis import RedisStore

        return RedisStore(self.server.url, prefix=prefix + ":")

    async def open(self) -> None:
        self.client = self.aioredis.Redis.from_url(self.server.url)

    async def close(self) -> None:
        await self.client.aclose()

    async def _raw_turn(self, prefix: str, sid: str, turn: Turn) -> None:
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.rpush(f"{prefix}:e:{sid}", *turn.lines)
            pipe.hset(f"{prefix}:s:{sid}", "snapshot", turn.snap)
            await pipe.execute()

    async def raw_sequential(self, work: list[list[Turn]]) -> float:
        prefix = ns()

        async def run() -> None:
            for i, turns in enumerate(work):
                for turn in turns:
                    await self._raw_turn(prefix, state_id(i), turn)

        return sum(map(len, work)) / await timed(run)

    async def raw_concurrent(self, work: list[list[Turn]]) -> float:
        prefix = ns()

        async def one(i: int, turns: list[Turn]) -> None:
            for turn in turns:
                await self._raw_turn(prefix, state_id(i), turn)

        async def run() -> None:
            await asyncio.gather(*(one(i, turns) for i, turns in enumerate(work)))

        return sum(map(len, work)) / await timed(run)

    async def raw_list(self, prefix: str) -> Any:
        return await self.raw_page(f"{prefix}:ix:all".encode(), f"{prefix}:state:".encode(), None)

    async def raw_page(self, index: bytes, states: bytes, limit: int | None) -> list[ListedRow]:
        """The first ``limit`` rows (all with None) of a listing index (``ix:all``, or one
        filter's): its members by ZRANGEBYLEX, then the snapshots in one pipeline, parsed
        into rows. The member's first 18 characters are its time, the rest its id."""
        if limit is None:
            members = await self.client.zrangebylex(index, b"-", b"+")
        else:
            members = await self.client.zrangebylex(index, b"-", b"+", start=0, num=limit)
        async with self.client.pipeline(transaction=False) as pipe:
            for m in members:
                pipe.hget(states + m[18:], "snapshot")
            snaps = await pipe.execute()
        return [raw_row(m[18:].decode(), orjson.loads(s)) for m, s in zip(members, snaps, strict=True) if s]

    async def raw_load(self, prefix: str, sid: str) -> Any:
        items = await self.client.lrange(f"{prefix}:entries:{sid}", 0, -1)
        return [orjson.loads(i) for i in items]

    def settings(self) -> str:
        return "appendonly yes, appendfsync always"


def raw_row(sid: str, snap: dict[str, Any]) -> ListedRow:
    """A listing row from a snapshot, as a raw client builds it."""
    expires = snap.get("expires_at")
    return ListedRow(
        sid, snap["task"], utc(snap["created_at"]), utc(snap["updated_at"]), snap["turn"],
        snap["stopped_by"], snap["finished"], snap.get("agent"), snap.get("parent"),
        snap.get("labels") or {}, None if expires is None else utc(expires), snap.get("forked_from"),
    )  # fmt: skip


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


#: The store sizes of the Redis page benchmark (full run, --quick).
REDIS_PAGE_SIZES = {False: (1_000, 10_000, 50_000), True: (600, 1_200)}
PAGE = 50
AGENTS = LABELS = 10


def page_snapshot(i: int) -> dict[str, Any]:
    """A snapshot with an agent (1 in 10) and a label (1 in 10), for the page benchmark."""
    return {
        **make_snapshot(i, i % 997),
        "agent": f"agent-{i % AGENTS}",
        "labels": {"user": f"u{i % LABELS}", "env": "prod"},
        "parent": None,
    }


async def redis_pages(kind: RedisBench, cfg: Config, quick: bool, number: int) -> list[Row]:
    """The first page of 50, unfiltered, by agent and by label, as the store grows: the
    store's list() against a raw pipeline over the same index building the same rows
    (measured side by side, many times each; target: at most 1.5 x raw's time)."""
    from statekeep.stores._redis import RedisStore

    space = ns()
    store = RedisStore(kind.server.url, prefix=space + ":")
    states = f"{space}:state:".encode()
    queries: list[tuple[str, dict[str, Any], bytes]] = [
        ("unfiltered", {}, f"{space}:ix:all".encode()),
        ("by agent", {"agent": "agent-3"}, f"{space}:ix:agent:agent-3".encode()),
        ("by label", {"labels": {"user": "u7"}}, f"{space}:ix:label:user=u7".encode()),
    ]
    reps = 5 if quick else 41
    rows: list[Row] = []
    await kind.open()
    try:
        held = 0
        for size in REDIS_PAGE_SIZES[quick]:

            async def one(i: int) -> None:
                await store.awrite(f"page-{i:06d}", [make_entry(0)], page_snapshot(i), create=True)

            for start in range(held, size, 500):
                await asyncio.gather(*(one(i) for i in range(start, min(size, start + 500))))
            held = size
            for what, filters, index in queries:
                mine, raw = [], []
                for _ in range(reps):
                    mine.append(await timed(lambda f=filters: store.alist(limit=PAGE, **f)))  # type: ignore[misc]
                    raw.append(await timed(lambda i=index: kind.raw_page(i, states, PAGE)))  # type: ignore[misc]
                got = await store.alist(limit=PAGE, **filters)
                same = common.same_rows(got, await kind.raw_page(index, states, PAGE))
                assert got.next is not None and same, what
                ratio = statistics.median(m / r for m, r in zip(mine, raw, strict=True))
                rows.append(
                    Row(
                        f"({number}) redis page of {PAGE}, {what}, {size:,} States",
                        statistics.median(mine) * 1000,
                        "ms",
                        [x * 1000 for x in mine],
                        statistics.median(raw) * 1000,
                        ratio,
                        "<= 1.5 x raw's time",
                        ratio <= 1.5,
                    )
                )
                number += 1
    finally:
        await store.aclose()
        await kind.close()
    return rows


# -- running and reporting -----------------------------------------------------------------


@dataclass
class Row:
    measure: str
    value: float
    unit: str
    samples: list[float] = field(default_factory=list)
    baseline: float | None = None
    ratio: float | None = None
    target: str = ""
    met: bool | None = None


async def bench(kind: PostgresBench | RedisBench, cfg: Config, number: int) -> list[Row]:
    """Rows (number), (number+1), ... for one server."""
    work = make_workload(cfg.states, cfg.turns)
    await kind.open()
    rows: list[Row] = []
    try:
        seq_store: list[float] = []
        seq_raw: list[float] = []
        con_store: list[float] = []
        con_raw: list[float] = []
        for _ in range(cfg.reps):
            # One repetition measures all four side by side, so that each ratio compares
            # numbers taken within seconds of each other (the machine's speed drifts).
            store = kind.store(ns())
            await store.alist()  # connect and make the tables first
            try:
                seq_store.append(await store_sequential(store, work))
            finally:
                await store.aclose()
            seq_raw.append(await kind.raw_sequential(work))
            store = kind.store(ns())
            await store.alist()
            try:
                con_store.append(await store_concurrent(store, work))
            finally:
                await store.aclose()
            con_raw.append(await kind.raw_concurrent(work))

        # Ratios: the median of each repetition's ratio.
        def ratio(top: list[float], bottom: list[float]) -> float:
            return statistics.median(t / b for t, b in zip(top, bottom, strict=True))

        name = kind.name
        s, r = statistics.median(seq_store), statistics.median(seq_raw)
        seq_ratio = ratio(seq_store, seq_raw)
        rows.append(
            Row(
                f"({number}) {name} sequential writes",
                s,
                "turns/s",
                seq_store,
                r,
                seq_ratio,
                ">= 0.7 x raw",
                seq_ratio >= 0.7,
            )
        )
        c = statistics.median(con_store)
        con_ratio = ratio(con_store, seq_store)
        rows.append(
            Row(
                f"({number + 1}) {name} {cfg.states} States concurrent",
                c,
                "turns/s",
                con_store,
                s,
                con_ratio,
                ">= 3 x own sequential",
                con_ratio >= 3,
            )
        )
        cr = statistics.median(con_raw)
        rows.append(
            Row(
                f"({number + 2}) {name} raw concurrent (info)",
                cr,
                "turns/s",
                con_raw,
                c,
                ratio(con_raw, con_store),
            )
        )

        space = ns()
        store = kind.store(space)
        prefix_or_schema = space
        try:
            await fill_many(store, cfg.list_states)
            list_store, list_raw = [], []
            for _ in range(cfg.read_reps):
                list_store.append(await timed(store.alist))
                list_raw.append(await timed(lambda: kind.raw_list(prefix_or_schema)))
            got = await store.alist()
            assert len(got) == cfg.list_states, len(got)
            assert common.same_rows(got, await kind.raw_list(prefix_or_schema))
            ls, lr = statistics.median(list_store), statistics.median(list_raw)
            same = name == "postgres"  # Redis: the baseline builds the same rows, no target set
            rows.append(
                Row(
                    f"({number + 3}) {name} list {cfg.list_states} States",
                    ls * 1000,
                    "ms",
                    [x * 1000 for x in list_store],
                    lr * 1000,
                    ls / lr,
                    "<= 1.3 x raw's time" if same else "(time vs raw)",
                    ls / lr <= 1.3 if same else None,
                )
            )

            await fill_big(store, "big", cfg.load_entries)
            load_store, load_raw = [], []
            for _ in range(cfg.read_reps):
                load_store.append(await timed(lambda: store.aread("big")))
                load_raw.append(await timed(lambda: kind.raw_load(prefix_or_schema, "big")))
            record = await store.aread("big")
            assert record is not None and len(record.entries) == cfg.load_entries
            ds, dr = statistics.median(load_store), statistics.median(load_raw)
            rows.append(
                Row(
                    f"({number + 4}) {name} load {cfg.load_entries} entries",
                    ds * 1000,
                    "ms",
                    [x * 1000 for x in load_store],
                    dr * 1000,
                    ds / dr,
                    "<= 1.5 x raw's time",
                    ds / dr <= 1.5,
                )
            )
        finally:
            await store.aclose()
    finally:
        await kind.close()
    return rows


def fmt(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def print_table(rows: list[Row]) -> None:
    header = ["measure", "value", "spread", "baseline", "ratio", "target", "met"]
    table = [header]
    for row in rows:
        spread = f"{fmt(min(row.samples))}-{fmt(max(row.samples))}" if len(row.samples) > 1 else ""
        met = "" if row.met is None else ("yes" if row.met else "NO")
        table.append(
            [
                row.measure,
                f"{fmt(row.value)} {row.unit}",
                spread,
                fmt(row.baseline),
                "" if row.ratio is None else f"{row.ratio:.2f}",
                row.target,
                met,
            ]
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for n, r in enumerate(table):
        print(" | ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
        if n == 0:
            print("-+-".join("-" * w for w in widths))


async def run_all(cfg: Config, which: Sequence[str], quick: bool = False) -> list[Row]:
    rows: list[Row] = []
    number = 1
    for name in which:
        if name == "postgres":
            server: Any = servers.start_postgres()
            kind: Any = PostgresBench(server)
        else:
            server = servers.start_redis()
            kind = RedisBench(server)
        try:
            print(f"{name}: {kind.settings()}, port {server.port}", file=sys.stderr)
            rows += await bench(kind, cfg, number)
            if name == "postgres":
                rows += await bench_pages(kind, cfg, cfg is QUICK)
            if name == "redis":
                rows += await redis_pages(kind, cfg, quick, number + 5)
        finally:
            await asyncio.to_thread(server.remove)
        number += 5
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run, for the smoke test")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--only", choices=["postgres", "redis"], help="one server only")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    which = [args.only] if args.only else ["postgres", "redis"]
    try:
        rows = asyncio.run(run_all(cfg, which, args.quick))
    except servers.ServerMissing as exc:
        print(f"cannot run: {exc}", file=sys.stderr)
        return 2
    print(
        f"statekeep server benchmarks ({'quick' if args.quick else 'full'}): {cfg.states} States x "
        f"{cfg.turns} turns, {cfg.reps} rep(s); Python {platform.python_version()}, {platform.machine()}"
    )
    print_table(rows)
    if args.json:
        Path(args.json).write_bytes(
            orjson.dumps({"quick": args.quick, "config": asdict(cfg), "rows": [asdict(r) for r in rows]})
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

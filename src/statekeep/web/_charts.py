"""The runs page's summary: how many runs have each status, and a chart of the runs created
over time, recomputed only when the store's change signal moves (at most every few seconds) and
cached in between.

:func:`run_stats` is pure (listing rows in, counts and bar geometry out; ``_runs_chart.html``
draws it). :class:`StatsCache` holds the last one, and lists the store again at most once
every :data:`EVERY` seconds, however often pages ask: a busy store's stamp (a SQLite store's
``data_version`` moves on every commit) would otherwise cost each page a listing of up to
:data:`MOST` rows. Once the summary is that old, a runs page asks the store's change stamp
(:mod:`statekeep._store.changes`, one ``stat`` on a FileStore) and lists again only when it
moved, when the store cannot say now (a FileStore's stamp, for two seconds after a change), or
when the last listing is :data:`RESYNC` seconds old (as the runs feed does, for a change the
stamp missed). A store with no stamp at all (the server stores, whose listing is an index read)
is listed again whenever it is asked after those :data:`EVERY` seconds.

The summary covers the :data:`MOST` most recently updated runs of the store (every run of a
smaller store), whatever the page's filters: it says so when there are more.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .._core.records import SavedState
from .._store.changes import change_stamp
from .._store.contract import Store
from ._feed import RESYNC

MOST = 10_000  # runs the summary covers at most (the most recently updated)
EVERY = 5.0  # seconds a summary is kept at least, whatever the store's change stamp says
BUCKETS = 48  # bars of the chart at most
LEAST = 24  # bars at least (a new store's chart still reads as a day of hours)
#: The bucket sizes tried, smallest first: the first that covers the runs' span in BUCKETS bars.
SIZES = ((3600, "hour"), (6 * 3600, "6 hours"), (86400, "day"), (7 * 86400, "week"))
WIDTH, HEIGHT, AXIS = 960, 120, 18  # the chart's size in user units; the axis band below it
GAP = 2.0  # between two bars
FIXED = ("running", "finished")
#: How the counts name a status (others show as the stop reason they are).
NAMES = {"approval": "waiting for approval", "limit": "stopped by the limit"}


@dataclass(frozen=True)
class Count:
    status: str
    name: str
    count: int


@dataclass(frozen=True)
class Bucket:
    """One bar: the runs created from ``start`` for one bucket size, with its geometry."""

    start: datetime
    label: str  # the start, as the title and the axis say it
    count: int
    x: float
    y: float
    width: float
    height: float
    title: str


@dataclass(frozen=True)
class RunStats:
    """The runs page's summary (see the module's docstring)."""

    total: int
    more: bool  # the store holds more runs than the summary covers
    counts: list[Count]
    unit: str  # the bucket size's name: "hour", "day", ...
    buckets: list[Bucket]
    older: int  # runs created before the chart's first bar
    first: str  # the first and last bars' labels, for the axis
    last: str

    @property
    def summary(self) -> str:
        """The chart's text alternative."""
        if not self.buckets:
            return "No runs."
        busiest = max(self.buckets, key=lambda b: b.count)
        text = (
            f"Runs created per {self.unit}, from {self.first} to {self.last}: "
            f"{sum(b.count for b in self.buckets)} in all, at most {busiest.count} in one {self.unit} "
            f"({busiest.label})."
        )
        if self.older:
            text += f" {self.older} older runs are not drawn."
        return text


def counts_of(rows: Sequence[SavedState]) -> list[Count]:
    """Runs by status: running and finished (even when none), then each stop reason, most first."""
    found = Counter(row.status for row in rows)
    order = [*FIXED, *sorted((s for s in found if s not in FIXED), key=lambda s: (-found[s], s))]
    return [
        Count(s, NAMES.get(s, f"stopped by {s}" if s not in FIXED else s), found.get(s, 0)) for s in order
    ]


def _label(when: datetime, size: int) -> str:
    return when.strftime("%Y-%m-%d %H:%M UTC" if size < 86400 else "%Y-%m-%d")


def run_stats(rows: Sequence[SavedState], now: datetime, *, more: bool = False) -> RunStats:
    """Counts by status and the created-over-time chart of ``rows`` (the chart ends with the
    bucket holding ``now``; ``more``: the store holds runs beyond ``rows``)."""
    counts = counts_of(rows)
    if not rows:
        return RunStats(0, more, counts, "hour", [], 0, "", "")
    oldest = min(row.created_at for row in rows)
    span = max(0.0, (now - oldest).total_seconds())
    size, unit = next(((s, u) for s, u in SIZES if span < s * BUCKETS), SIZES[-1])
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    last = int((now - epoch).total_seconds() // size)
    first = max(min(int((oldest - epoch).total_seconds() // size), last - LEAST + 1), last - BUCKETS + 1)
    per = Counter(int((row.created_at - epoch).total_seconds() // size) for row in rows)
    older = sum(n for b, n in per.items() if b < first)
    most = max((per.get(b, 0) for b in range(first, last + 1)), default=0) or 1
    step = WIDTH / (last - first + 1)
    buckets = []
    for i, b in enumerate(range(first, last + 1)):
        start, n = epoch + timedelta(seconds=b * size), per.get(b, 0)
        height = (HEIGHT - AXIS - 4) * n / most
        label = _label(start, size)
        title = f"{label}: {n} run{'s' * (n != 1)} created"
        x, y = i * step + GAP / 2, HEIGHT - AXIS - height
        buckets.append(Bucket(start, label, n, x, y, step - GAP, height, title))
    return RunStats(len(rows), more, counts, unit, buckets, older, buckets[0].label, buckets[-1].label)


class StatsCache:
    """The last :class:`RunStats` of one app, and the change stamp it was computed at."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.stats: RunStats | None = None
        self.stamp: Hashable | None = None
        self.clock = clock  # seconds, only ever growing (the tests' seam)
        self.at = 0.0  # the clock's time of the listing
        self.computed = 0  # how many times it listed (the tests' seam)
        self.hits = 0  # how many times a page got the cached summary

    async def get(self, store: Store) -> tuple[RunStats, list[SavedState] | None]:
        """The summary of ``store``: the cached one while it is younger than :data:`EVERY`
        seconds or the store's change stamp has not moved (see the module's docstring), else a
        new listing's; and that listing when it holds every State of the store (the runs page
        counts children in it: no second scan)."""
        age = self.clock() - self.at
        if self.stats is not None and age < EVERY:
            self.hits += 1
            return self.stats, None
        stamp = await change_stamp(store)
        if self.stats is not None and stamp is not None and stamp == self.stamp and age < RESYNC:
            self.hits += 1
            return self.stats, None
        at = self.clock()  # before the listing: a change made during it moves the next one
        listed = await store.alist(limit=MOST)
        rows, more = list(listed), getattr(listed, "next", None) is not None
        self.computed += 1
        self.stats = run_stats(rows, datetime.now(UTC), more=more)
        self.stamp, self.at = stamp, at
        return self.stats, None if more else rows

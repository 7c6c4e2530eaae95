"""``statekeep stats``: how many States a store holds, by status and agent, their entries, bytes."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field

import click

from .._runtime.bridge import run_sync
from .._store.capabilities import Blobs, IdWalk, SizeOnDisk, SnapshotReads
from .._store.contract import Store
from ._common import open_store_at, reporting, say, store_option
from ._group import main
from ._keys import ProgressBar, keys_option


@dataclass
class Stats:
    """What ``statekeep stats`` counts; ``bytes`` is None where the store cannot tell."""

    states: int = 0
    entries: int = 0
    bytes: int | None = None
    by_status: Counter[str] = field(default_factory=Counter)
    by_agent: Counter[str] = field(default_factory=Counter)
    without_agent: int = 0
    #: States the store holds that no listing shows (no snapshot, or expired and not yet
    #: removed by gc); None where the store cannot walk its ids.
    not_listed: int | None = None
    #: Large values stored once (blobs): how many and their bytes (None: the store keeps none).
    #: ``bytes`` counts them too where it is the size on disk.
    blobs: int | None = None
    blob_bytes: int | None = None

    def as_json(self) -> str:
        return json.dumps(
            {
                "states": self.states,
                "entries": self.entries,
                "bytes": self.bytes,
                "by_status": dict(self.by_status.most_common()),
                "by_agent": dict(self.by_agent.most_common()),
                "without_agent": self.without_agent,
                "not_listed": self.not_listed,
                "blobs": self.blobs,
                "blob_bytes": self.blob_bytes,
            },
            ensure_ascii=True,
        )

    def lines(self) -> list[str]:
        size = "unknown" if self.bytes is None else f"{self.bytes} ({_human(self.bytes)})"
        lines = [f"States   {self.states}", f"entries  {self.entries}", f"bytes    {size}"]
        if self.blobs and self.blob_bytes is not None:
            lines.append(
                f"blobs    {self.blobs}, {self.blob_bytes} bytes ({_human(self.blob_bytes)}; large values "
                "stored once, counted in bytes too where it is known)"
            )
        if self.not_listed:
            lines.append(
                f"not listed {self.not_listed} (States without a snapshot, or expired and not yet "
                "removed by gc; not counted above)"
            )
        if self.by_status:
            lines.append("by status:")
            lines += [f"  {status:<24} {n}" for status, n in self.by_status.most_common()]
        if self.by_agent or self.without_agent:
            lines.append("by agent:")
            lines += [f"  {agent:<24} {n}" for agent, n in self.by_agent.most_common()]
            if self.without_agent:
                lines.append(f"  {'(no agent)':<24} {self.without_agent}")
        return lines


def count(store: Store, progress: Callable[[int, int], None]) -> Stats:
    """Count the States ``store.list`` shows, and their entries; ``progress(done, total)``
    after each State. A State deleted meanwhile is left out."""
    stats = Stats()
    # One listing without a limit: a folder's listing is a scan of every State, so paging
    # (a scan per page) was quadratic; the rows were all held at once either way.
    rows = store.list()
    for done, row in enumerate(rows, 1):
        entries = entry_count(store, row.id)
        if entries is not None:
            stats.states += 1
            stats.entries += entries
            stats.by_status[row.status] += 1
            if row.agent is None:
                stats.without_agent += 1
            else:
                stats.by_agent[row.agent] += 1
        progress(done, len(rows))
    held = run_sync(store._state_ids(), "stats") if isinstance(store, IdWalk) else None
    if held is not None:
        listed = {row.id for row in rows}
        stats.not_listed = sum(sid not in listed for sid in held)
    # A store of your own may offer neither: then these stay None ("not known").
    stats.bytes = run_sync(store._size_bytes(), "stats") if isinstance(store, SizeOnDisk) else None
    if isinstance(store, Blobs):
        stats.blobs, stats.blob_bytes = run_sync(store._blob_usage(), "stats")
    return stats


def entry_count(store: Store, state_id: str) -> int | None:
    """How many entries a State has (None if it is gone): the snapshot's ``seq`` names the
    last entry, so a range read from it returns one entry, or the few saved since; without
    one (a raw write), or when it is not where the history ends, the whole history is read."""
    snapshot = run_sync(store.aread_snapshot(state_id), "aread") if isinstance(store, SnapshotReads) else None
    seq = (snapshot or {}).get("seq")
    since = seq if type(seq) is int and seq > 0 else 0
    record = store.read(state_id, since=since)
    if record is not None and not record.entries and since:
        record = store.read(state_id)
    if record is None:
        return None
    last = record.entries[-1].get("seq") if record.entries else None
    return last + 1 if type(last) is int else since + len(record.entries)


def _human(size: int) -> str:
    amount = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024:
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} TiB"


@main.command()
@store_option
@click.option(
    "--json", "as_json", is_flag=True, help="one JSON object (bytes is null where the store cannot tell)"
)
@click.option("--quiet", "-q", is_flag=True, help="no progress bar")
@keys_option
def stats(store_url: str, as_json: bool, quiet: bool, keys_file: str | None) -> None:
    """Count a store's States by status and by agent, their entries, and the bytes it takes.

    It costs one listing (all rows at once), then per State its snapshot and a range read from the last entry
    the snapshot names (a whole read for a State saved without one). Bytes: the folder's
    files (FileStore), the database file with its WAL (SQLite), pg_total_relation_size of the
    tables (PostgreSQL), all namespaces together; unknown on Redis. Blobs (large values stored
    once) are counted apart too: how many, and their bytes. A progress bar shows on
    a terminal (stderr) unless --quiet. An encrypted store needs --keys (the entries are
    counted from sealed records).
    """
    with (
        reporting(),
        closing(ProgressBar.on_terminal("counting", quiet=quiet)) as bar,  # closed before any message
        open_store_at(store_url, keys_file) as store,
    ):
        result = count(store, bar)
    if as_json:
        click.echo(result.as_json())
    else:
        for line in result.lines():
            say(line)

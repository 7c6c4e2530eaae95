"""``statekeep show ID --follow``: a run's timeline, then its new entries as they are saved.

When the follow ends: when the run stops, as the history says it (the rule the State's
``stopped_by`` follows): a ``stop`` or ``error`` entry that no later ``run_start`` follows.
A run already stopped when the follow starts prints its timeline and ends at once; a run
stopped on a limit that is resumed later is not waited for (the follow ends at the stop;
follow it again). The history decides, not the snapshot, which a raw ``store.write`` may
leave out or leave behind. Ctrl-C ends a follow too (exit status 130, no traceback), and so
does a reader that goes away (``| head``: exit status 0); a State deleted while followed is
one line on stderr and exit status 1.

Why polling: nothing tells another process that a State grew on every backend (a folder, a
SQLite file, and writers that publish nothing on PostgreSQL or Redis), while a range read
``aread(id, since=last + 1)`` costs only what it returns on each. So the follow reads the
new entries every :data:`FIRST_WAIT` seconds, waiting up to :data:`LONGEST_WAIT` while the
run is quiet (x1.5 per empty read), and again at once after a read that found entries.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import click

from .._records import Record
from .._render import entry_json, entry_line, heading
from .._store import Store
from ._common import NOT_FOUND, OK, fail

FIRST_WAIT = 0.2
LONGEST_WAIT = 1.0
_SLOWER = 1.5


def stopped_after(entries: Iterable[dict[str, Any]], stopped: bool = False) -> bool:
    """Whether the run is stopped after ``entries`` (those that follow a history whose run
    was ``stopped``): a stop or error entry stops it, a run_start starts another run."""
    for entry in entries:
        kind = entry.get("kind")
        if kind in ("stop", "error"):
            stopped = True
        elif kind == "run_start":
            stopped = False
    return stopped


def follow(
    store: Store,
    state_id: str,
    record: Record,
    *,
    as_json: bool,
    missing: str,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Print ``record`` (read from ``store``), then every entry saved after it, until the run
    stops. ``missing``: the message when the State is deleted meanwhile (exit status 1)."""
    if not as_json:
        _echo(heading(state_id, record))
    _print(record.entries, as_json)
    stopped = stopped_after(record.entries)
    following = _next_seq(record, 0)
    wait = FIRST_WAIT
    while not stopped:
        sleep(wait)
        newer = store.read(state_id, since=following)
        if newer is None:
            fail(missing, NOT_FOUND)
        if not newer.entries:
            wait = min(wait * _SLOWER, LONGEST_WAIT)
            continue
        _print(newer.entries, as_json)
        stopped = stopped_after(newer.entries, stopped)
        following = _next_seq(newer, following)
        wait = FIRST_WAIT


def _next_seq(record: Record, since: int) -> int:
    """The seq after the last entry read (``since`` when none were)."""
    last = record.entries[-1].get("seq") if record.entries else None
    return last + 1 if type(last) is int else since + len(record.entries)


def _print(entries: list[dict[str, Any]], as_json: bool) -> None:
    _echo(entry_json(e) if as_json else entry_line(e) for e in entries)


def _echo(lines: Iterable[str]) -> None:
    text = "\n".join(lines)
    if not text:
        return
    try:
        click.echo(text)  # one write and one flush per batch: a pipe sees each batch at once
    except BrokenPipeError:
        # The reader went away (``| head``): the follow is over, quietly. Later writes
        # (the interpreter's last flush) go nowhere instead of failing again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(OK)

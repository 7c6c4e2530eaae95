"""``statekeep show ID --follow``: a run's timeline, then its new entries as they are saved.

When the follow ends: when the run stops, as the history says it (the rule the State's
``stopped_by`` follows): a ``stop`` or ``error`` entry that no later ``run_start`` follows.
A run already stopped when the follow starts prints its timeline and ends at once; a run
stopped on a limit that is resumed later is not waited for (the follow ends at the stop;
follow it again). The history decides, not the snapshot, which a raw ``store.write`` may
leave out or leave behind. Ctrl-C ends a follow too (exit status 130, no traceback), and so
does a reader that goes away (``| head``: exit status 0).

A State deleted while followed, or deleted and saved again under its id (another State:
seen because the last entry printed is no longer there as it was, or the snapshot's
``created_at`` changed), ends the follow with one line on stderr and exit status 1, as
``tail -f`` keeps to the file it opened. With ``wait=True`` (``--wait``, as ``tail -F``)
the follow waits for the id to be saved again instead and follows the new State from its
seq 0, after one line on stderr; it also waits for a State that does not exist yet.

Why polling: nothing tells another process that a State grew on every backend (a folder, a
SQLite file, and writers that publish nothing on PostgreSQL or Redis), while a range read
``aread(id, since=last)`` costs only what it returns on each. So the follow reads the
entries from the last one printed every :data:`FIRST_WAIT` seconds, waiting up to
:data:`LONGEST_WAIT` while the run is quiet (x1.5 per read without news), and again at once
after a read that found entries. The last printed entry comes back each time: that is how a
re-created State is told from the followed one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from .._core.records import Record
from .._store.contract import Store
from ._common import NOT_FOUND, emit, fail, say
from ._render import entry_json, heading, lines

FIRST_WAIT = 0.2
LONGEST_WAIT = 1.0
_SLOWER = 1.5

Sleep = Callable[[float], None]


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


def wait_for(store: Store, state_id: str, sleep: Sleep = time.sleep) -> Record:
    """The State ``state_id`` once it is saved (polled as a quiet follow is)."""
    wait = FIRST_WAIT
    while (record := store.read(state_id)) is None:
        sleep(wait)
        wait = min(wait * _SLOWER, LONGEST_WAIT)
    return record


def follow(
    store: Store,
    state_id: str,
    record: Record,
    *,
    as_json: bool,
    wait: bool = False,
    sleep: Sleep = time.sleep,
) -> None:
    """Print ``record`` (read from ``store``), then every entry saved after it, until the run
    stops. A State deleted (or deleted and re-created) meanwhile ends it with exit status 1,
    or with ``wait`` is waited for and followed from seq 0 (see the module docstring)."""
    while True:
        if not as_json:
            emit(heading(state_id, record))
        emit(_lines(record.entries, record.snapshot, as_json))
        gone, recreated = _tail(store, state_id, record, as_json, sleep)
        if not gone:
            return
        if not wait:
            what = "deleted and re-created" if recreated is not None else "deleted"
            fail(
                f"State {state_id!r} was {what} while it was followed; "
                "pass --wait to wait for it and follow the new one",
                NOT_FOUND,
            )
        if recreated is None:
            say(f"statekeep: State {state_id!r} was deleted; waiting for it to be saved again", err=True)
            recreated = wait_for(store, state_id, sleep)
            say(f"statekeep: State {state_id!r} was re-created; following the new one from seq 0", err=True)
        else:
            say(
                f"statekeep: State {state_id!r} was deleted and re-created; following the new one from seq 0",
                err=True,
            )
        record = recreated


def _tail(
    store: Store, state_id: str, record: Record, as_json: bool, sleep: Sleep
) -> tuple[bool, Record | None]:
    """Print the entries saved after ``record`` until the run stops: ``(False, None)``; or
    until the State is gone: ``(True, None)``, or re-created: ``(True, the new State)``."""
    stopped = stopped_after(record.entries)
    last = record.entries[-1] if record.entries else None
    created = (record.snapshot or {}).get("created_at")
    wait = FIRST_WAIT
    while not stopped:
        sleep(wait)
        since = last["seq"] if last is not None and type(last.get("seq")) is int else 0
        newer = store.read(state_id, since=since)
        if newer is None:
            return True, None
        if _replaced(newer, last, created):
            return True, store.read(state_id) or None
        fresh = newer.entries[1:] if last is not None else newer.entries
        if not fresh:
            wait = min(wait * _SLOWER, LONGEST_WAIT)
            continue
        emit(_lines(fresh, newer.snapshot, as_json))
        stopped = stopped_after(fresh, stopped)
        last = fresh[-1]
        wait = FIRST_WAIT
    return False, None


def _replaced(newer: Record, last: dict[str, Any] | None, created: Any) -> bool:
    """Whether ``newer`` (read from the last printed entry on) is another State's: that entry
    is gone or differs (a history only grows), or the snapshot's creation time changed."""
    if last is not None and (not newer.entries or newer.entries[0] != last):
        return True
    now = (newer.snapshot or {}).get("created_at")
    return created is not None and now is not None and now != created


def _lines(entries: list[dict[str, Any]], snapshot: object, as_json: bool) -> list[str]:
    return [entry_json(e) for e in entries] if as_json else lines(entries, snapshot)

"""ADK's app and user state (``app:`` and ``user:`` keys) as States of their own.

Each is a history of deltas (one entry per change) whose snapshot is the state they add up
to; a change is a read-modify-write checked by the store's seq rule and ``expect_next``, so
concurrent writers (tasks or processes) never lose each other's keys. The tasks of one
process take turns per State (a lock); between processes a lost write is retried after a
random, growing pause. The history grows by one entry per change (nothing reads it back: the
snapshot holds the state); a store's ``trim`` does not apply to it (it needs a compaction).

A delta comes from one session's event (or its creation): it is applied once, in the
session's order. The snapshot remembers, for the ``APPLIED_KEPT`` sessions that changed the
state last, the seq of the newest event of theirs applied (by the session's creation token),
so applying an event's delta again, or an older event's after a newer one, changes nothing.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from .._core.errors import StateConflictError, StateExistsError, StateNotFoundError
from .._core.ranges import SNAPSHOT_ONLY
from .._store.contract import Store
from .._store.expect import expecting
from ._adk_layout import MAX_TRIES, META, iso, labels_for, now

#: Sessions whose newest applied event each app or user state remembers.
APPLIED_KEPT = 1024
#: The longest pause (seconds) between two tries of a change that lost to another process.
MAX_PAUSE = 0.05


def state_of(snapshot: dict[str, Any] | None) -> dict[str, Any]:
    """The state a shared State's snapshot holds ({} for none)."""
    meta = None if snapshot is None else snapshot.get(META)
    state = meta.get("state") if type(meta) is dict else None
    return dict(state) if type(state) is dict else {}


async def read_shared(store: Store, state_id: str) -> dict[str, Any]:
    """The app or user state kept in ``state_id`` ({} if none was ever written)."""
    record = await store.aread(state_id, since=SNAPSHOT_ONLY)
    return {} if record is None else state_of(record.snapshot)


def _applied(meta: dict[str, Any]) -> list[list[Any]]:
    applied = meta.get("applied")
    return [list(pair) for pair in applied] if type(applied) is list else []


async def apply_shared(
    store: Store,
    state_id: str,
    delta: dict[str, Any],
    *,
    task: str,
    app: str,
    user: str | None,
    source: tuple[str, int],
    hold: Callable[[str], AbstractAsyncContextManager[None]],
) -> None:
    """Add ``delta``, from the event at seq ``source[1]`` of the session whose token is
    ``source[0]``, to the app (``user`` None) or user state in ``state_id``, unless that
    session's delta at this seq or a later one was applied already. Durable on return as
    the store's ``awrite``; StateConflictError after ``MAX_TRIES`` writes in a row lost to
    other processes (nothing of this one was written)."""
    token = uuid.uuid4().hex
    labels = labels_for("app" if user is None else "user", app, user)
    key, seq_of_source = source
    async with hold(state_id):
        for attempt in range(MAX_TRIES):
            if attempt:
                await asyncio.sleep(random.uniform(0, min(MAX_PAUSE, 0.0005 * 2**attempt)))
            record = await store.aread(state_id, since=SNAPSHOT_ONLY)
            if record is None:
                head = {"seq": 0, "kind": "adk_" + labels["adk.kind"], "app": app, "user": user, "w": token}
                entries = [head, {"seq": 1, "kind": "delta", "delta": delta, "w": token}]
                meta = {
                    "kind": labels["adk.kind"],
                    "state": dict(delta),
                    "next": 2,
                    "applied": [list(source)],
                }
                try:
                    await store.awrite(state_id, entries, _snapshot(task, labels, meta), create=True)
                except StateExistsError:
                    continue
                return
            assert record.snapshot is not None
            old = record.snapshot.get(META)
            seq = old["next"] if type(old) is dict and type(old.get("next")) is int else None
            if seq is None or type(old) is not dict:
                raise ValueError(
                    f"State {state_id!r} is not ADK {labels['adk.kind']} state: it was written by "
                    "something else; use another namespace"
                )
            applied = _applied(old)
            done = next((pair[1] for pair in applied if pair[0] == key), -1)
            if done >= seq_of_source:
                return  # applied already, or a newer event of that session was
            state = state_of(record.snapshot)
            state.update(delta)
            kept = [pair for pair in applied if pair[0] != key][-(APPLIED_KEPT - 1) :]
            applied = [*kept, [key, seq_of_source]]
            meta = {"kind": labels["adk.kind"], "state": state, "next": seq + 1, "applied": applied}
            entry = {"seq": seq, "kind": "delta", "delta": delta, "w": token}
            try:
                await store.awrite(
                    state_id, [entry], _snapshot(task, labels, meta, record.snapshot), **expecting(store, seq)
                )
            except (StateConflictError, StateNotFoundError):
                continue
            return
    raise StateConflictError(
        f"ADK {labels['adk.kind']} state {task!r}: {MAX_TRIES} writes in a row lost to other "
        "writers; nothing of this change was written"
    )


def _snapshot(
    task: str, labels: dict[str, str], meta: dict[str, Any], old: dict[str, Any] | None = None
) -> dict[str, Any]:
    stamp = iso(now())
    return {
        "task": task,
        "created_at": stamp if old is None else old.get("created_at", stamp),
        "updated_at": stamp,
        "turn": meta["next"] - 1,
        "stopped_by": None,
        "finished": False,
        "labels": labels,
        META: meta,
    }

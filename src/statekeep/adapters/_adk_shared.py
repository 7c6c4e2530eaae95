"""ADK's app and user state (``app:`` and ``user:`` keys) as States of their own.

Each is a history of deltas (one entry per change) whose snapshot is the state they add up
to; a change is a read-modify-write checked by the store's seq rule and ``expect_next``, so
concurrent writers (tasks or processes) never lose each other's keys.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from .._core.errors import StateConflictError, StateExistsError, StateNotFoundError
from .._core.ranges import SNAPSHOT_ONLY
from .._store.contract import Store
from .._store.expect import expecting
from ._adk_layout import MAX_TRIES, META, iso, labels_for, now


def state_of(snapshot: dict[str, Any] | None) -> dict[str, Any]:
    """The state a shared State's snapshot holds ({} for none)."""
    meta = None if snapshot is None else snapshot.get(META)
    state = meta.get("state") if type(meta) is dict else None
    return dict(state) if type(state) is dict else {}


async def read_shared(store: Store, state_id: str) -> dict[str, Any]:
    """The app or user state kept in ``state_id`` ({} if none was ever written)."""
    record = await store.aread(state_id, since=SNAPSHOT_ONLY)
    return {} if record is None else state_of(record.snapshot)


async def update_shared(
    store: Store, state_id: str, delta: dict[str, Any], task: str, app: str, user: str | None
) -> dict[str, Any]:
    """Add ``delta`` to the app (``user`` None) or user state in ``state_id``; the state after.
    Durable on return as the store's ``awrite``; StateConflictError after ``MAX_TRIES``
    writes in a row lost to other writers (nothing of this one was written)."""
    token = uuid.uuid4().hex
    labels = labels_for("app" if user is None else "user", app, user)
    for attempt in range(MAX_TRIES):
        if attempt:
            await asyncio.sleep(0)
        record = await store.aread(state_id, since=SNAPSHOT_ONLY)
        if record is None:
            state = dict(delta)
            head = {"seq": 0, "kind": "adk_" + labels["adk.kind"], "app": app, "user": user, "w": token}
            entries = [head, {"seq": 1, "kind": "delta", "delta": delta, "w": token}]
            meta = {"kind": labels["adk.kind"], "state": state, "next": 2}
            try:
                await store.awrite(state_id, entries, _snapshot(task, labels, meta), create=True)
            except StateExistsError:
                continue
            return state
        assert record.snapshot is not None
        old = record.snapshot.get(META)
        seq = old["next"] if type(old) is dict and type(old.get("next")) is int else None
        if seq is None:
            raise ValueError(
                f"State {state_id!r} is not ADK {labels['adk.kind']} state: it was written by "
                "something else; use another namespace"
            )
        state = state_of(record.snapshot)
        state.update(delta)
        meta = {"kind": labels["adk.kind"], "state": state, "next": seq + 1}
        entry = {"seq": seq, "kind": "delta", "delta": delta, "w": token}
        try:
            await store.awrite(
                state_id, [entry], _snapshot(task, labels, meta, record.snapshot), **expecting(store, seq)
            )
        except (StateConflictError, StateNotFoundError):
            continue
        return state
    raise StateConflictError(
        f"ADK {labels['adk.kind']} state {task!r}: {MAX_TRIES} writes in a row lost to other "
        "writers; nothing of this change was written. Try again, or have fewer writers at once"
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

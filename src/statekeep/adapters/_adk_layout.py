"""How ADK sessions and their app and user state live in statekeep States (pure, no I/O).

Three kinds of State, each with an id from :func:`._ids.state_id_for` of a JSON list (whose
length tells the kinds apart, so no two ever share an id):

- a **session**, ``["s", app, user, session]``: seq 0 is ``{"kind": "adk_session", ...}``
  (the framework's ids), every later entry one event, ``{"kind": "event", "event": {...}}``
  (``Event.model_dump(exclude_none=True, mode="json")``, as ADK's database stores it). The
  snapshot keeps, under :data:`META`, the session-scoped state, ``next`` (the seq the next
  event takes), the last update time, a token made at creation (with ``next``, the revision
  marker of the stale-session check), and a sparse index of the events' timestamps:
  ``[seq, newest timestamp before seq]`` every ``stride`` events, so a read ``after`` a time
  starts near the first event it wants instead of at the start (or, while ``ordered``, no
  event's timestamp older than one before it, reads back from the end); the ids of the newest
  :data:`RECENT_IDS` events (an event appended again is refused); and ``pending``, the
  ``app:`` and ``user:`` deltas of its events (``[seq, app delta, user delta]``, seq 0 for
  those given at creation) that may not be applied to the shared states yet: written in the
  same write as their event, applied after it, cleared once applied;
- the **user** state of ``(app, user)``, ``["u", app, user]``, and the **app** state,
  ``["a", app]``: each entry after seq 0 one delta (``{"kind": "delta", "delta": {...}}``),
  the snapshot the state they add up to.

Every State carries the labels ``framework=adk``, ``adk.kind`` and the escaped app (and
user) ids, so a listing is a store query.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from pydantic_core import to_jsonable_python

from ._ids import state_id_for

META = "adk"
APP, USER, TEMP = "app:", "user:", "temp:"
#: Writes one call makes before it gives up (each lost one to another writer).
MAX_TRIES = 100
#: Index points kept at most; past it every other one goes and the stride doubles.
MAX_POINTS = 64
FIRST_STRIDE = 32
#: Event ids a session remembers (its newest), to refuse an event appended again.
RECENT_IDS = 32


def session_id_of(app: str, user: str, session: str) -> str:
    for value, what in ((app, "app_name"), (user, "user_id"), (session, "session_id")):
        if type(value) is not str:
            raise TypeError(f"{what} must be a str, got {type(value).__name__}: {value!r}")
    return state_id_for(json.dumps(["s", app, user, session]))


def user_id_of(app: str, user: str) -> str:
    return state_id_for(json.dumps(["u", app, user]))


def app_id_of(app: str) -> str:
    return state_id_for(json.dumps(["a", app]))


def labels_for(kind: str, app: str, user: str | None = None) -> dict[str, str]:
    labels = {"framework": "adk", "adk.kind": kind, "adk.app": _label(app, "app_name")}
    if user is not None:
        labels["adk.user"] = _label(user, "user_id")
    return labels


def _label(name: str, what: str) -> str:
    """An app or user id as a label value: escaped (at most 128 characters), "" for ""."""
    if type(name) is not str:
        raise TypeError(f"{what} must be a str, got {type(name).__name__}: {name!r}")
    return state_id_for(name) if name else ""


def now() -> float:
    return time.time()


def iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).isoformat()


def instant(stamp: float) -> datetime:
    """A timestamp as ADK's database compares it: a datetime, to the microsecond."""
    return datetime.fromtimestamp(stamp, UTC)


def json_safe(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` as JSON data (datetimes, models, ...), as ADK's database keeps state."""
    safe = to_jsonable_python(state, fallback=repr)
    assert isinstance(safe, dict)
    return safe


def split(delta: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A state delta as ``(app, user, session)`` deltas, prefixes removed; ``temp:`` keys dropped."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in json_safe(dict(delta or {})).items():
        if key.startswith(APP):
            app[key.removeprefix(APP)] = value
        elif key.startswith(USER):
            user[key.removeprefix(USER)] = value
        elif not key.startswith(TEMP):
            session[key] = value
    return app, user, session


def merged(app: dict[str, Any], user: dict[str, Any], session: dict[str, Any]) -> dict[str, Any]:
    """The state a Session shows: its own keys, then ``app:`` and ``user:`` ones."""
    out: dict[str, Any] = json.loads(json.dumps(session))
    out.update({APP + key: value for key, value in app.items()})
    out.update({USER + key: value for key, value in user.items()})
    return out


def session_meta(snapshot: dict[str, Any] | None, state_id: str) -> dict[str, Any]:
    """The session fields of a snapshot; ValueError if the State is not an ADK session."""
    meta = None if snapshot is None else snapshot.get(META)
    if not (type(meta) is dict and meta.get("kind") == "session" and type(meta.get("next")) is int):
        raise ValueError(
            f"State {state_id!r} is not an ADK session (its snapshot has no valid {META!r}): it "
            "was written by something else; use another session id or namespace"
        )
    return meta


def marker(meta: dict[str, Any]) -> str:
    """The session's revision: it changes with every event, and when the session is made again."""
    return f"{meta['token']}:{meta['next']}"


def snapshot_of(meta: dict[str, Any], task: str, labels: dict[str, str], created_at: str) -> dict[str, Any]:
    return {
        "task": task,
        "created_at": created_at,
        "updated_at": iso(now()),
        "turn": meta.get("next", 1) - 1,
        "stopped_by": None,
        "finished": False,
        "labels": labels,
        META: meta,
    }


def new_session_meta(
    app: str, user: str, session: str, state: dict[str, Any], token: str, pending: list[Any]
) -> dict[str, Any]:
    return {
        "kind": "session",
        "app": app,
        "user": user,
        "id": session,
        "state": state,
        "next": 1,
        "updated": now(),
        "token": token,
        "stride": FIRST_STRIDE,
        "newest": None,
        "index": [],
        "ids": [],
        "pending": pending,
        "ordered": True,
    }


def after_event(
    meta: dict[str, Any], stamp: float, delta: dict[str, Any], event_id: str, pending: list[Any]
) -> dict[str, Any]:
    """The session fields once the event ``event_id`` at ``meta["next"]`` (at ``stamp``,
    with the session delta ``delta``) is appended, its shared deltas and older ones not
    known to be applied in ``pending``."""
    seq = meta["next"]
    stride = meta["stride"]
    index = list(meta["index"])
    newest = meta["newest"]
    if seq % stride == 0 and newest is not None:
        index.append([seq, newest])
        if len(index) > MAX_POINTS:
            index, stride = index[1::2], stride * 2  # the points at multiples of the new stride
    state = dict(meta["state"])
    state.update(delta)
    return {
        **meta,
        "state": state,
        "next": seq + 1,
        "updated": stamp,
        "stride": stride,
        "index": index,
        "newest": stamp if newest is None else max(newest, stamp),
        "ids": [*meta.get("ids", [])[-(RECENT_IDS - 1) :], event_id],
        "pending": pending,
        "ordered": bool(meta.get("ordered")) and (newest is None or stamp >= newest),
    }


def first_after(meta: dict[str, Any], after: float) -> int:
    """The first seq that may hold an event at or after ``after``: every event before it is older."""
    start = 1
    limit = instant(after)
    for seq, newest in meta["index"]:
        if instant(newest) >= limit:
            break
        start = seq
    return start

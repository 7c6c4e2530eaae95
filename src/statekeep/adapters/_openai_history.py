"""How an OpenAI Agents session lives in a statekeep State (no I/O here).

The history is append-only. Its entries:

- seq 0, ``{"kind": "session", "session_id": ...}``: the framework's own id;
- ``{"kind": "item", "item": {...}}``: one item ``add_items`` added;
- ``{"kind": "pop", "of": seq}``: ``pop_item`` removed the item at ``seq`` (a tombstone);
- ``{"kind": "clear"}``: ``clear_session``; the next generation starts after it;
- ``{"kind": "run_state", "run_state": {...} | null}``: ``save_run_state`` kept the SDK's
  ``RunState.to_json()`` of a run paused for approvals (null: ``clear_run_state``, or
  ``take_run_state`` with ``"taken": seq``, the seq of the state it took). Items ignore these
  entries, and ``clear`` leaves them alone.

Every entry carries ``"w"``, a token of the call that wrote it: two writers adding the same
item at the same seq write *different* entries, so the store refuses the second
(StateConflictError, and it retries) instead of skipping it as a resend of the first.
Every write to an existing session starts with the last entry its writer saw, sent again:
the store skips it if the history still has it, and refuses the write if another entry
took that seq (the session was deleted and started again meanwhile), so no write lands
on a history its writer did not see.

Live items form a stack: a tombstone always removes the newest live item. So reading
backwards from the end, each tombstone hides the next item not already hidden, and the
current generation ends at a ``clear`` (or the ``session`` entry).

The snapshot carries the listing keys (``task`` is the session id, ``turn`` the number of
items) and, under :data:`META`, ``next`` (the seq after the last entry it covers),
``start`` (the first seq of the current generation), ``items`` (live items) and ``run_state``
(the seq of the saved run state, None when there is none), so the end of a long history,
and the run state, can be read without replaying it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .._core.codec import check
from .._core.errors import CorruptStateError

META = "openai_session"
#: Writes one call makes before it gives up (each lost one to another writer), as LangGraph's.
MAX_TRIES = 100
#: The label every session's State carries.
LABELS = {"framework": "openai-agents"}
SESSION, ITEM, POP, CLEAR, RUN_STATE = "session", "item", "pop", "clear", "run_state"


@dataclass(frozen=True, slots=True)
class Tail:
    """Where a session's history stands: enough to append to it."""

    end: int  # the seq the next entry takes
    start: int  # the first seq of the current generation
    items: int  # live items in the current generation
    created_at: str
    last: dict[str, Any] | None = None  # the entry at seq end - 1, when it was read
    paused: int | None = None  # the seq of the saved run state (None: none saved)


def now() -> str:
    return datetime.now(UTC).isoformat()


def tail_of(state_id: str, snapshot: dict[str, Any] | None) -> Tail:
    """The :class:`Tail` a session's snapshot records; ValueError if the State is not a session."""
    meta = None if snapshot is None else snapshot.get(META)
    if not (
        type(meta) is dict
        and all(type(meta.get(key)) is int and meta[key] >= 0 for key in ("next", "start", "items"))
        and snapshot is not None
        and type(snapshot.get("created_at")) is str
    ):
        raise ValueError(
            f"State {state_id!r} is not an OpenAI Agents session (its snapshot has no valid "
            f"{META!r}): it was written by something else; use another session id"
        )
    paused = meta.get("run_state")
    if paused is not None and not (type(paused) is int and 0 < paused < meta["next"]):
        raise CorruptStateError(
            f"State {state_id!r}: its snapshot says the session's run state is at seq {paused!r}, "
            f"outside its history (seq 1 to {meta['next'] - 1})"
        )
    return Tail(meta["next"], meta["start"], meta["items"], snapshot["created_at"], paused=paused)


def fold(tail: Tail, entries: list[dict[str, Any]]) -> Tail:
    """``tail`` moved past the entries from its ``end`` on (earlier ones are ignored)."""
    end, start, items, paused = tail.end, tail.start, tail.items, tail.paused
    for entry in entries:
        seq = entry["seq"]
        if seq < end:
            continue
        kind = entry.get("kind")
        if kind == ITEM:
            items += 1
        elif kind == POP:
            items = max(items - 1, 0)
        elif kind == CLEAR:
            start, items = seq + 1, 0
        elif kind == RUN_STATE:
            paused = None if entry.get(RUN_STATE) is None else seq
        end = seq + 1
    return Tail(end, start, items, tail.created_at, tail.last, paused)


def window(tail: Tail, want: int | None, since: int | None) -> int:
    """Where to read from next: enough for ``want`` items if nothing hides any, then
    twice as far back each time (``since``: the last read's start)."""
    if want is None or want >= tail.items:
        return tail.start
    if since is None or since > tail.end:
        return max(tail.start, tail.end - want)
    return max(tail.start, tail.end - 2 * max(tail.end - since, want))


def item_entries(items: list[dict[str, Any]], seq: int, token: str) -> list[dict[str, Any]]:
    return [{"seq": seq + i, "kind": ITEM, "item": item, "w": token} for i, item in enumerate(items)]


def newest(entries: list[dict[str, Any]], want: int | None) -> tuple[list[dict[str, Any]], bool]:
    """The newest live item entries among ``entries`` (a run of the history up to its end),
    oldest first, at most ``want`` (None: all), and whether that is the whole answer (False:
    older entries, not read, may hold more)."""
    found: list[dict[str, Any]] = []
    hidden = 0
    for entry in reversed(entries):
        kind = entry.get("kind")
        if kind in (CLEAR, SESSION):
            found.reverse()
            return found, True
        if kind == POP:
            hidden += 1
        elif kind == ITEM:
            if hidden:
                hidden -= 1
                continue
            found.append(entry)
            if want is not None and len(found) >= want:
                found.reverse()
                return found, True
    found.reverse()
    return found, False


def checked_items(items: object) -> list[dict[str, Any]]:
    """``items`` as they will be stored; TypeError naming the first one statekeep's codec refuses."""
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"add_items takes a list of items (dicts), got {type(items).__name__}")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise TypeError(f"add_items: items[{index}] must be a dict, got {type(item).__name__}")
        check(item, f"add_items: items[{index}]", 1)
    return list(items)


def header(session_id: str, token: str) -> dict[str, Any]:
    return {"seq": 0, "kind": SESSION, "session_id": session_id, "w": token}


def snapshot_for(session_id: str, tail: Tail) -> dict[str, Any]:
    """The snapshot stored with a write that leaves the history at ``tail``."""
    return {
        "task": session_id,
        "created_at": tail.created_at,
        "updated_at": now(),
        "turn": tail.items,
        "stopped_by": None,
        "finished": False,
        "labels": dict(LABELS),  # as every adapter marks its States
        META: {"next": tail.end, "start": tail.start, "items": tail.items, "run_state": tail.paused},
    }

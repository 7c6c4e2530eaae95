"""Which State holds a LangGraph thread: its own id, or its other one after a rewrite.

A thread is kept in the State :func:`~._ids.state_id_for` gives (``P``). ``prune`` and
``delete_for_runs`` reclaim space by writing the thread's new history whole into its other
State (``A``, :func:`other_id`), then moving it there in one write, then removing the old one
(see :mod:`._langgraph_moves`). Two marks in a snapshot (under ``langgraph``) say where it is:

- ``pending``: a token: this State was written whole by a move not known to be done; it
  holds the thread only once the other State is ``moved`` with the same token;
- ``moved``: a token: the thread has left this State for the other one (the commit of a
  move: one append, refused if anything was written since the move read the thread).

So the thread is in ``P`` unless ``P`` is missing, moved, or pending without its commit,
and then in ``A``; a read of an unmarked ``P`` (every thread never pruned) costs what it
always did. A cut at any step of a move leaves the thread where it was or where it goes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from .._core.errors import UnsupportedFormatError
from .._core.ranges import SNAPSHOT_ONLY
from .._core.records import Record
from ._flow import Flow
from ._home import Home
from ._ids import HASHED, state_id_for
from ._langgraph_history import FORMAT, MARK, is_thread, not_a_thread


def other_id(state_id: str) -> str:
    """The thread's other State id: a hashed id (``_h`` and 64 hex digits) no thread id maps to
    (its hash is of the State id with a prefix, not of a thread id)."""
    return HASHED + hashlib.sha256(("langgraph.moved:" + state_id).encode()).hexdigest()


def checked(record: Record | None, state_id: str, thread_id: str) -> Record | None:
    """``record`` if it is a LangGraph thread's (or None); ValueError for another State."""
    if record is None:
        return None
    if not is_thread(record.snapshot):
        raise not_a_thread(state_id, thread_id)
    assert record.snapshot is not None
    if record.snapshot[MARK].get("format", FORMAT) > FORMAT:
        raise UnsupportedFormatError(
            f"thread {thread_id!r} was written by a newer statekeep (format "
            f"{record.snapshot[MARK]['format']}): upgrade statekeep to read it"
        )
    return record


def mark(record: Record | None, key: str) -> Any:
    if record is None or record.snapshot is None:
        return None
    return record.snapshot[MARK].get(key)


def marked(snapshot: Mapping[str, Any]) -> bool:
    """Whether a snapshot carries a move's mark (the thread may not be, or no longer be, there)."""
    return bool(snapshot[MARK].get("moved") or snapshot[MARK].get("pending"))


def located(home: Home, thread_id: str, since: int) -> Flow[tuple[str, Record | None]]:
    """``(state id, record read from since)`` of the State that holds the thread, or of the
    one where a new thread is created (with None)."""
    own = state_id_for(thread_id)
    there = checked((yield from home.reading(own, since)), own, thread_id)
    if there is not None and not marked(there.snapshot or {}):
        return own, there
    other = other_id(own)
    elsewhere = checked((yield from home.reading(other, since)), other, thread_id)
    if there is None:
        return (other, elsewhere) if elsewhere is not None else (own, None)
    pending = mark(there, "pending")
    if pending and mark(elsewhere, "moved") == pending:
        return own, there  # the move here is done (its end, clearing the mark, may be to come)
    return other, elsewhere


def snapshot_only(home: Home, thread_id: str) -> Flow[tuple[str, Record | None]]:
    return (yield from located(home, thread_id, SNAPSHOT_ONLY))

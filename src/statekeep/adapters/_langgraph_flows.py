"""The steps StatekeepSaver's methods are made of, as flows (:mod:`._flow`): written once
for the sync and the async API, they make their store calls through the adapter's
:class:`~._home.Home`."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from .._core.errors import (
    CorruptStateError,
    StateConflictError,
    StateExistsError,
    StateNotFoundError,
    UnsupportedFormatError,
)
from .._core.ranges import SNAPSHOT_ONLY
from .._core.records import Record
from .._store.expect import expecting
from ._flow import Flow
from ._home import Home
from ._ids import state_id_for
from ._langgraph_history import (
    FORMAT,
    LABELS,
    MARK,
    Stored,
    Thread,
    advance,
    is_thread,
    not_a_thread,
    now_iso,
    proof,
    renumbered,
    snapshot_for,
    thread_early,
    thread_heads,
    tip_entry,
)
from ._langgraph_tuples import Build
from ._langgraph_values import Lists, body_size

#: How many times a write is tried again after another writer got there first.
MAX_TRIES = 100


def thread_ids(home: Home) -> Flow[list[str]]:
    """The thread id of every LangGraph thread in the store."""
    rows = yield from home.listing(labels=LABELS)
    return [row.task for row in rows]


def _write(
    home: Home, sid: str, entries: list[dict[str, Any]], snapshot: dict[str, Any], expect: int | None
) -> Flow[None]:
    """Write to the thread; ``expect``: its next seq as the flow saw it (None: create it),
    passed to a store that takes ``expect_next``."""
    more = expecting(home.store, expect)
    yield from home.writing(sid, entries, snapshot, create=expect is None, **more)


class Heads:
    """The last snapshot seen per State (a hint: a stale one costs a retry, never a wrong write,
    since each write sends the snapshot's tip again first, which conflicts, or leaves a gap,
    unless the history still ends with it). Bounded; safe to share between threads."""

    SIZE = 1024

    def __init__(self) -> None:
        self._seen: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()  # LangGraph's sync API writes from worker threads

    def get(self, state_id: str) -> dict[str, Any] | None:
        return self._seen.get(state_id)

    def remember(self, state_id: str, snapshot: dict[str, Any]) -> None:
        with self._lock:
            if len(self._seen) >= self.SIZE and state_id not in self._seen:
                del self._seen[next(iter(self._seen))]
            self._seen[state_id] = snapshot

    def forget(self, state_id: str) -> None:
        with self._lock:
            self._seen.pop(state_id, None)


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


def fixed(bodies: list[dict[str, Any]]) -> Build:
    """A :data:`Build` for entries that depend on nothing stored (pending writes)."""
    return lambda first, gen, known, at: (bodies, known, [])


def append(home: Home, heads: Heads, thread_id: str, build: Build, lists: Lists | None = None) -> Flow[None]:
    """Append the entries ``build`` makes (without seqs) to the thread, creating it if need
    be; on a conflict with another writer, read the thread's end again and retry. The lists
    the entries store are put in ``lists`` once written."""
    sid = state_id_for(thread_id)
    for _ in range(MAX_TRIES):
        old = heads.get(sid)
        cached = old is not None
        if old is None:
            record = checked((yield from home.reading(sid, SNAPSHOT_ONLY)), sid, thread_id)
            old = None if record is None else record.snapshot
        first = 0 if old is None else old["seq"] + 1
        mark = old[MARK] if old else {}
        gen = mark.get("gen") or uuid.uuid4().hex  # a format 1 thread gets one now
        known = mark.get("known") or {} if mark.get("gen") else {}
        at = mark.get("bytes") or 0
        bodies, known, remember = build(first, gen, known, at)
        added = sum(1 for body in bodies if body["kind"] == "lg.checkpoint")
        entries = [dict(body, seq=first + i) for i, body in enumerate(bodies)]
        moved, early = advance(
            thread_heads(old) if old else {}, thread_early(old) if old else {}, bodies, first
        )
        tip = tip_entry(first + len(bodies))
        more = {"gen": gen, "known": known, "bytes": at + sum(body_size(body) for body in bodies)}
        snapshot = snapshot_for(thread_id, old, tip, moved, early, added, more)
        try:  # the old tip first: a stale ``old`` (another history at its seq) conflicts
            yield from _write(
                home, sid, [*proof(old), *entries, tip], snapshot, None if old is None else first
            )
        except (StateConflictError, StateExistsError, StateNotFoundError):
            heads.forget(sid)  # another writer appended, created or deleted it: read again
            continue
        except ValueError:
            if not cached:
                raise
            heads.forget(sid)  # a gap: the thread was deleted and written again elsewhere
            continue
        heads.remember(sid, snapshot)
        if lists is not None:
            for item in remember:
                lists.put(*item)
        return
    raise StateConflictError(f"thread {thread_id!r}: {MAX_TRIES} writes in a row lost to other writers")


def rewrite(
    home: Home, heads: Heads, thread_id: str, change: Callable[[Thread], dict[str, Any] | None]
) -> Flow[None]:
    """Append the entry ``change`` makes from the whole thread (None: nothing to do), with
    the snapshot's heads computed from the result; retried from a fresh read on a conflict."""
    sid = state_id_for(thread_id)
    for _ in range(MAX_TRIES):
        record = checked((yield from home.reading(sid, 0)), sid, thread_id)
        if record is None:
            heads.forget(sid)
            return
        assert record.snapshot is not None
        thread = Thread.fold(record.entries)
        body = change(thread)
        if body is None:
            heads.remember(sid, record.snapshot)
            return
        seq = record.snapshot["seq"] + 1
        thread.apply(dict(body, seq=seq))
        tip = tip_entry(seq + 1)
        mark = record.snapshot[MARK]
        more = {key: mark[key] for key in ("gen", "known", "bytes") if key in mark}
        more["bytes"] = more.get("bytes", 0) + body_size(body)
        snapshot = snapshot_for(thread_id, record.snapshot, tip, thread.heads(), thread.early(), 0, more)
        try:
            yield from _write(home, sid, [*proof(record.snapshot), dict(body, seq=seq), tip], snapshot, seq)
        except StateConflictError:
            heads.forget(sid)
            continue
        except StateNotFoundError:  # deleted meanwhile: nothing left to change
            heads.forget(sid)
            return
        heads.remember(sid, snapshot)
        return
    raise StateConflictError(f"thread {thread_id!r}: {MAX_TRIES} writes in a row lost to other writers")


def whole(home: Home, heads: Heads, thread_id: str) -> Flow[Thread | None]:
    """The thread folded from its whole history, or None if there is no such thread."""
    sid = state_id_for(thread_id)
    record = checked((yield from home.reading(sid, 0)), sid, thread_id)
    if record is None:
        heads.forget(sid)
        return None
    assert record.snapshot is not None
    heads.remember(sid, record.snapshot)
    return Thread.fold(record.entries)


def newest(
    home: Home, heads: Heads, thread_id: str, ns: str, checkpoint_id: str | None
) -> Flow[tuple[Thread | None, Stored | None] | None]:
    """``(thread, stored)`` for the newest checkpoint of ``ns`` (or for ``checkpoint_id`` if
    it is the newest), read from the seq where it starts; ``None`` if there is none; and
    ``(None, None)`` when ``checkpoint_id`` is an older one (the caller reads it all).
    With nothing cached, the snapshot alone is read first: it says where the newest starts."""
    sid = state_id_for(thread_id)
    seen = heads.get(sid)
    hint = thread_heads(seen).get(ns) if seen else None
    if checkpoint_id is not None and hint is not None and hint[1] != checkpoint_id:
        return None, None  # an older one, as far as this saver knows: no need to look
    since = hint[0] if hint else SNAPSHOT_ONLY
    for _ in range(MAX_TRIES):
        record = checked((yield from home.reading(sid, since)), sid, thread_id)
        if record is None:
            heads.forget(sid)
            return None
        assert record.snapshot is not None
        heads.remember(sid, record.snapshot)
        head = thread_heads(record.snapshot).get(ns)
        if checkpoint_id is not None and (head is None or head[1] != checkpoint_id):
            return None, None
        if head is None:
            return None
        if head[0] >= since:  # what was read starts at or before the newest checkpoint
            thread = Thread.fold(entry for entry in record.entries if entry["seq"] >= head[0])
            stored = thread.get(ns, head[1])
            if stored is None:
                raise CorruptStateError(
                    f"thread {thread_id!r}: its snapshot names checkpoint {head[1]!r} at seq "
                    f"{head[0]}, which its history lacks"
                )
            return thread, stored
        since = head[0]
    raise StateConflictError(f"thread {thread_id!r}: it kept changing while being read")


def drop_runs(run_ids: Sequence[str]) -> Callable[[Thread], dict[str, Any] | None]:
    wanted = set(run_ids)

    def change(thread: Thread) -> dict[str, Any] | None:
        drop = [
            [ns, cid]
            for ns, held in thread.checkpoints.items()
            for cid, stored in held.items()
            if stored.entry.get("run") in wanted
        ]
        return {"kind": "lg.drop", "at": now_iso(), "drop": drop} if drop else None

    return change


def keep_newest(thread: Thread) -> dict[str, Any] | None:
    keep = [[ns, head[1]] for ns, head in thread.heads().items()]
    # Writes already stored for a checkpoint still to come (a run under way) stay too.
    keep += [[ns, cid] for ns, ids in thread.early().items() for cid in ids]
    kept = {(ns, cid) for ns, cid in keep}
    held = {(ns, cid) for ns, ids in thread.checkpoints.items() for cid in ids}
    if held <= kept and set(thread.writes) <= kept:
        return None  # nothing but the newest checkpoints: already pruned
    return {"kind": "lg.prune", "at": now_iso(), "keep": keep}


def copy(home: Home, heads: Heads, source: str, target: str) -> Flow[None]:
    """Append the source thread's live checkpoints and writes to the target, in one write."""
    thread = yield from whole(home, heads, source)
    if thread is None:
        return
    bodies = thread.materialized()
    if bodies:
        # the copies refer to each other, not to what the target held: nothing of it is known
        build: Build = lambda first, gen, known, at: (renumbered(bodies, first), {}, [])  # noqa: E731
        yield from append(home, heads, target, build)

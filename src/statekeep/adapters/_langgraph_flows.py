"""The steps StatekeepSaver's methods are made of, as flows (:mod:`._flow`): written once
for the sync and the async API, they make their store calls through the adapter's
:class:`~._home.Home`."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from .._core.errors import (
    CorruptStateError,
    StateConflictError,
    StateExistsError,
    StateNotFoundError,
)
from .._core.ids import new_incarnation
from .._core.ranges import SNAPSHOT_ONLY
from .._store.expect import expecting
from ._flow import Flow
from ._home import Home
from ._ids import state_id_for
from ._langgraph_history import (
    LABELS,
    LIFE,
    MARK,
    Stored,
    Thread,
    advance,
    proof,
    renumbered,
    snapshot_for,
    thread_early,
    thread_heads,
    tip_entry,
)
from ._langgraph_tuples import Build
from ._langgraph_values import Lists, body_size
from ._langgraph_where import located, snapshot_only

#: How many times a write is tried again after another writer got there first.
MAX_TRIES = 100


def thread_ids(home: Home) -> Flow[list[str]]:
    """The thread id of every LangGraph thread in the store (once, though a thread that is
    being moved is in two States)."""
    rows = yield from home.listing(labels=LABELS)
    return list(dict.fromkeys(row.task for row in rows if row.task is not None))


def _write(
    home: Home, sid: str, entries: list[dict[str, Any]], snapshot: dict[str, Any], expect: int | None
) -> Flow[None]:
    """Write to the thread; ``expect``: its next seq as the flow saw it (None: create it),
    passed to a store that takes ``expect_next``."""
    more = expecting(home.store, expect)
    yield from home.writing(sid, entries, snapshot, create=expect is None, **more)


class Heads:
    """Per thread (its own State id), the State that held it last and that State's last
    snapshot seen (a hint: a stale one costs a retry, never a wrong write, since each write
    sends the snapshot's tip again first, which conflicts, or leaves a gap, unless the
    history still ends with it). Bounded; safe to share between threads.

    Also the life token (:data:`~._langgraph_history.LIFE`) promised to a thread not created
    yet: a tool may ask for its key before the graph's first checkpoint of the thread is
    stored (``durability="exit"``, or a put still under way); the write that creates the
    thread stores the same token (:meth:`born`)."""

    SIZE = 1024

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, dict[str, Any]]] = {}
        self._born: dict[str, str] = {}  # state id -> life token of a thread not created yet
        self._lock = threading.Lock()  # LangGraph's sync API writes from worker threads

    def get(self, state_id: str) -> tuple[str, dict[str, Any]] | None:
        return self._seen.get(state_id)

    def snapshot(self, state_id: str) -> dict[str, Any] | None:
        seen = self._seen.get(state_id)
        return None if seen is None else seen[1]

    def remember(self, state_id: str, holder: str, snapshot: dict[str, Any]) -> None:
        with self._lock:
            if len(self._seen) >= self.SIZE and state_id not in self._seen:
                del self._seen[next(iter(self._seen))]
            self._seen[state_id] = (holder, snapshot)
            self._born.pop(state_id, None)  # the thread exists: its snapshot has its token

    def forget(self, state_id: str, *, deleted: bool = False) -> None:
        """Forget the snapshot seen; ``deleted`` (the thread is being deleted): the token
        promised to it too, so that the thread written again gets a new one."""
        with self._lock:
            self._seen.pop(state_id, None)
            if deleted:
                self._born.pop(state_id, None)

    def born(self, state_id: str) -> str | None:
        """The life token of a thread found absent: the one of a snapshot seen since (the
        thread was created meanwhile), else the one promised to it, made now if need be."""
        with self._lock:
            seen = self._seen.get(state_id)
            if seen is not None:
                life: str | None = seen[1][MARK].get(LIFE)
                return life
            if state_id not in self._born and len(self._born) >= self.SIZE:
                del self._born[next(iter(self._born))]
            return self._born.setdefault(state_id, new_incarnation())


def fixed(bodies: list[dict[str, Any]]) -> Build:
    """A :data:`Build` for entries that depend on nothing stored (pending writes)."""
    return lambda first, gen, known, at: (bodies, known, [])


def append(home: Home, heads: Heads, thread_id: str, build: Build, lists: Lists | None = None) -> Flow[None]:
    """Append the entries ``build`` makes (without seqs) to the thread, creating it if need
    be; on a conflict with another writer, read the thread's end again and retry. The lists
    the entries store are put in ``lists`` once written."""
    own = state_id_for(thread_id)
    for _ in range(MAX_TRIES):
        seen = heads.get(own)
        cached = seen is not None
        old: dict[str, Any] | None
        if seen is not None:
            sid, old = seen
        else:
            sid, record = yield from snapshot_only(home, thread_id)
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
        if old is None:  # a new thread: the token a tool may have been given already
            more[LIFE] = heads.born(own)
        snapshot = snapshot_for(thread_id, old, tip, moved, early, added, more)
        try:  # the old tip first: a stale ``old`` (another history at its seq) conflicts
            yield from _write(
                home, sid, [*proof(old), *entries, tip], snapshot, None if old is None else first
            )
        except (StateConflictError, StateExistsError, StateNotFoundError):
            heads.forget(own)  # another writer appended, created, moved or deleted it: read again
            continue
        except ValueError:
            if not cached:
                raise
            heads.forget(own)  # a gap: the thread was deleted and written again elsewhere
            continue
        heads.remember(own, sid, snapshot)
        if lists is not None:
            for item in remember:
                lists.put(*item)
        return
    raise StateConflictError(f"thread {thread_id!r}: {MAX_TRIES} writes in a row lost to other writers")


def whole(home: Home, heads: Heads, thread_id: str) -> Flow[Thread | None]:
    """The thread folded from its whole history, or None if there is no such thread."""
    own = state_id_for(thread_id)
    sid, record = yield from located(home, thread_id, 0)
    if record is None:
        heads.forget(own)
        return None
    assert record.snapshot is not None
    heads.remember(own, sid, record.snapshot)
    return Thread.fold(record.entries)


def newest(
    home: Home, heads: Heads, thread_id: str, ns: str, checkpoint_id: str | None
) -> Flow[tuple[Thread | None, Stored | None] | None]:
    """``(thread, stored)`` for the newest checkpoint of ``ns`` (or for ``checkpoint_id`` if
    it is the newest), read from the seq where it starts; ``None`` if there is none; and
    ``(None, None)`` when ``checkpoint_id`` is an older one (the caller reads it all).
    With nothing cached, the snapshot alone is read first: it says where the newest starts."""
    own = state_id_for(thread_id)
    seen = heads.snapshot(own)
    hint = thread_heads(seen).get(ns) if seen else None
    if checkpoint_id is not None and hint is not None and hint[1] != checkpoint_id:
        return None, None  # an older one, as far as this saver knows: no need to look
    since = hint[0] if hint else SNAPSHOT_ONLY
    for _ in range(MAX_TRIES):
        sid, record = yield from located(home, thread_id, since)
        if record is None:
            heads.forget(own)
            return None
        assert record.snapshot is not None
        heads.remember(own, sid, record.snapshot)
        head = thread_heads(record.snapshot).get(ns)
        if checkpoint_id is not None and (head is None or head[1] != checkpoint_id):
            return None, None
        if head is None:
            return None
        if head[0] >= since:  # what was read starts at or before the newest checkpoint
            thread = Thread.fold(
                (entry for entry in record.entries if entry["seq"] >= head[0]), (ns, head[1])
            )
            stored = thread.get(ns, head[1])
            if stored is None:
                raise CorruptStateError(
                    f"thread {thread_id!r}: its snapshot names checkpoint {head[1]!r} at seq "
                    f"{head[0]}, which its history lacks"
                )
            return thread, stored
        since = head[0]
    raise StateConflictError(f"thread {thread_id!r}: it kept changing while being read")


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

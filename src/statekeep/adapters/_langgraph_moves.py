"""``prune`` and ``delete_for_runs``: a thread's history rewritten without what they drop,
its space reclaimed, crash-safely, with the store's own writes and deletes.

A store has no call that replaces a State's history, so a rewrite moves the thread to its
other State (:mod:`._langgraph_where`), in five steps, each one store call:

1. remove the other State if it holds anything (what a move cut short left there);
2. create it whole with the new history: the live checkpoints, their writes, and the
   values they refer to (``lg.values`` entries where their checkpoint was dropped), marked
   ``pending``;
3. **commit**: append ``lg.moved`` to the thread's State, marking it ``moved`` with the same
   token, refused (a conflict: all is redone from a new read, step 1 removing step 2's copy)
   if anything was written to it since it was read;
4. clear the ``pending`` mark (skipped if a writer was first: its write clears it);
5. delete the old State: its space is reclaimed.

Then it moves home the same way (the new history is small: writing it twice costs little),
so a thread is always kept in the State named for it, where ``statekeep show`` looks and
where an older statekeep finds it (and refuses its format), but for the moment of a move.

Cut after any step, the thread reads as before (up to the first commit) or as after (from
it on): readers and writers look where the marks say, and the next rewrite of the thread (or
a ``prune`` with nothing to drop) finishes the way home and removes what was left behind.
Rewrites of one thread are serialised by a lease (:mod:`._langgraph_lease`), so what step 1
finds is a leftover, never another rewrite's copy; writers beside a rewrite need no lease (a
write the rewrite did not see makes its commit conflict). Steps 1 and 5 delete only a State
seen there (5: still marked moved by this move), so a rewrite with nothing to do deletes
nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from .._core.errors import StateConflictError, StateNotFoundError
from .._core.ranges import SNAPSHOT_ONLY
from ._flow import Flow
from ._home import Home
from ._ids import state_id_for
from ._langgraph_flows import MAX_TRIES, Heads, _write
from ._langgraph_history import (
    MARK,
    Thread,
    advance,
    now_iso,
    proof,
    renumbered,
    snapshot_for,
    tip_entry,
    unpack,
)
from ._langgraph_lease import Hold, held
from ._langgraph_values import body_size, channels
from ._langgraph_where import located, marked, other_id

#: What a rewrite drops: the ``lg.drop`` or ``lg.prune`` entry that says so (applied to the
#: thread in memory, never written), or None when there is nothing to drop.
Change = Callable[[Thread], dict[str, Any] | None]


def drop_runs(run_ids: Sequence[str]) -> Change:
    """Drop the checkpoints whose metadata ``run_id`` is one of ``run_ids``, and their writes."""
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


def keep_newest(serde: SerializerProtocol) -> Change:
    """Keep the newest checkpoint of each namespace and its writes, the writes already
    stored for a checkpoint still to come, and, for LangGraph's ``DeltaChannel`` channels
    (those the newest checkpoint's metadata counts in ``counters_since_delta_snapshot``)
    that it holds no value of, its ancestors and their writes back to the nearest that holds
    one: what LangGraph's walk rebuilds them from."""

    def change(thread: Thread) -> dict[str, Any] | None:
        keep = [[ns, head[1]] for ns, head in thread.heads().items()]
        for ns, head in thread.heads().items():
            stored = thread.get(ns, head[1])
            assert stored is not None
            metadata = serde.loads_typed(unpack(stored.entry["metadata"]))
            counted = metadata.get("counters_since_delta_snapshot") if isinstance(metadata, dict) else None
            missing = set(counted or ()) - set(channels(stored.entry))
            cursor = stored.entry["parent"]
            while missing and cursor is not None:
                ancestor = thread.get(ns, cursor)
                if ancestor is None:
                    break
                keep.append([ns, cursor])
                missing -= set(channels(ancestor.entry))
                cursor = ancestor.entry["parent"]
        # Writes already stored for a checkpoint still to come (a run under way) stay too.
        keep += [[ns, cid] for ns, ids in thread.early().items() for cid in ids]
        kept = {(ns, cid) for ns, cid in keep}
        held = {(ns, cid) for ns, ids in thread.checkpoints.items() for cid in ids}
        if held <= kept and set(thread.writes) <= kept:
            return None  # nothing to drop
        return {"kind": "lg.prune", "at": now_iso(), "keep": keep}

    return change


def rewrite(home: Home, heads: Heads, thread_id: str, change: Change) -> Flow[bool]:
    """Rewrite the thread without what ``change`` drops (see the module): moved to its
    other State, then home again, so that it is kept where it always was (where ``statekeep
    show`` and an older statekeep look for it). False if there was nothing to drop (or no
    such thread): then only what a rewrite cut short left behind is tidied up.

    A thread with nothing to drop, kept in its own State, no other one beside it, costs two
    reads (no write, delete or lease). Else the rewrite holds the thread's rewrite lease
    (:mod:`._langgraph_lease`) throughout, waiting for another rewrite of it to end."""
    own = state_id_for(thread_id)
    here, record = yield from located(home, thread_id, 0)
    if record is None:
        heads.forget(own)
        return False
    assert record.snapshot is not None
    idle = here == own and not marked(record.snapshot) and change(Thread.fold(record.entries)) is None
    if idle and (yield from home.reading(other_id(own), SNAPSHOT_ONLY)) is None:
        heads.remember(own, here, record.snapshot)
        return False  # nothing to drop, nothing left behind
    hold = yield from held(home, thread_id, own)
    try:
        return (yield from _rewrite(home, heads, thread_id, change, hold))
    finally:
        yield from hold.released()


def _rewrite(home: Home, heads: Heads, thread_id: str, change: Change, hold: Hold) -> Flow[bool]:
    """:func:`rewrite`, its lease held: whatever another State holds that the marks do not
    make the thread's is what a rewrite cut short left (none is under way)."""
    own = state_id_for(thread_id)
    dropped = False
    for _ in range(MAX_TRIES):
        here, record = yield from located(home, thread_id, 0)
        if record is None:
            heads.forget(own)
            return dropped
        assert record.snapshot is not None
        if record.snapshot[MARK].get("pending"):
            # moved here by a rewrite cut short before it cleared the mark: clear it first,
            # as the other State (about to be removed) is what says the move was done
            yield from _settle(home, heads, thread_id, here, record.snapshot)
            continue
        thread = Thread.fold(record.entries)
        body = change(thread)
        there = other_id(own) if here == own else own
        if body is None and here == own:
            # nothing (more) to drop; what a move cut short left in the other State goes
            # (the thread is here, and no other rewrite is under way: it is no part of it)
            yield from _tidied(home, there)
            heads.remember(own, here, record.snapshot)
            return dropped
        if body is not None:
            thread.apply(dict(body, seq=record.snapshot["seq"] + 1))  # in memory: what is left
        bodies = renumbered(thread.materialized(), 0)
        moved = yield from _move(home, heads, thread_id, here, record.snapshot, there, bodies, hold)
        if moved is None:  # deleted meanwhile: nothing left to rewrite
            return dropped
        dropped = dropped or (moved and body is not None)
        # moved (to the other State: next time round, home again), or lost to a writer: again
    raise StateConflictError(f"thread {thread_id!r}: {MAX_TRIES} rewrites in a row lost to other writers")


def _tidied(home: Home, state_id: str) -> Flow[None]:
    """Delete ``state_id`` if it exists (what a move cut short left): no delete otherwise."""
    if (yield from home.reading(state_id, SNAPSHOT_ONLY)) is not None:
        yield from home.deleting(state_id)


def _move(
    home: Home,
    heads: Heads,
    thread_id: str,
    here: str,
    old: dict[str, Any],
    there: str,
    bodies: list[dict[str, Any]],
    hold: Hold,
) -> Flow[bool | None]:
    """Move the thread from ``here`` (whose snapshot was ``old`` when read) to ``there``,
    with the history ``bodies``: True once moved, False when a writer got there first
    (nothing changed), None when the thread was deleted meanwhile."""
    own = state_id_for(thread_id)
    token = uuid.uuid4().hex
    # 1. whatever a move cut short left there goes (the thread is here, and the lease says no
    # other rewrite is under way: it is no part of it)
    yield from hold.renewed()
    yield from _tidied(home, there)
    # 2. the new history, whole, marked pending
    entries = [dict(item, seq=seq) for seq, item in enumerate(bodies)]
    moved_heads, early = advance({}, {}, bodies, 0)
    tip = tip_entry(len(bodies))
    more = {"gen": uuid.uuid4().hex, "known": {}, "bytes": sum(body_size(item) for item in bodies)}
    fresh = snapshot_for(thread_id, old, tip, moved_heads, early, 0, {**more, "pending": token})
    yield from _write(home, there, [*entries, tip], fresh, None)
    # 3. the commit: marked moved, unless written to since the read
    seq = old["seq"] + 1
    sealed_tip = tip_entry(seq + 1)
    sealed = dict(old, seq=seq + 1, updated_at=now_iso())
    sealed[MARK] = {
        **{key: value for key, value in old[MARK].items() if key != "pending"},
        "tip": sealed_tip,
        "moved": token,
    }
    moved = {"kind": "lg.moved", "at": now_iso(), "seq": seq, "to": there, "token": token}
    yield from hold.renewed()  # the copy is still there: no other rewrite can have removed it
    try:
        yield from _write(home, here, [*proof(old), moved, sealed_tip], sealed, seq)
    except StateConflictError:  # written to meanwhile: again, from a new read
        heads.forget(own)
        yield from home.deleting(there)
        return False
    except StateNotFoundError:  # deleted meanwhile
        heads.forget(own)
        yield from home.deleting(there)
        return None
    # 4. the mark cleared (a writer may have been first: its write clears it too); only then
    # 5. the old history goes (with the mark still there, it would be what says the move was
    # done): its space is reclaimed
    if not (yield from _settle(home, heads, thread_id, there, fresh)):
        # a writer was first (its write cleared the mark), or the thread was deleted meanwhile
        _, now = yield from located(home, thread_id, SNAPSHOT_ONLY)
        if now is not None and now.snapshot is not None and now.snapshot[MARK].get("pending"):
            return True  # not seen cleared: kept as the move's proof; the next rewrite tidies up
        left = yield from home.reading(here, SNAPSHOT_ONLY)
        if left is None or left.snapshot is None or (left.snapshot.get(MARK) or {}).get("moved") != token:
            return True  # gone already (deleted with the thread), or no longer this move's
    yield from home.deleting(here)
    return True


def _settle(home: Home, heads: Heads, thread_id: str, state_id: str, old: dict[str, Any]) -> Flow[bool]:
    """Clear the ``pending`` mark of ``state_id`` (whose snapshot is ``old``, the move to it
    done); False if a writer was first (it cleared the mark) or the thread was deleted."""
    own = state_id_for(thread_id)
    mark = old[MARK]
    more = {key: mark[key] for key in ("gen", "known", "bytes") if key in mark}
    tip = tip_entry(old["seq"] + 1)
    settled = snapshot_for(thread_id, old, tip, dict(mark["heads"]), dict(mark.get("early") or {}), 0, more)
    try:
        yield from _write(home, state_id, [*proof(old), tip], settled, old["seq"] + 1)
    except (StateConflictError, StateNotFoundError, ValueError):
        heads.forget(own)
        return False
    heads.remember(own, state_id, settled)
    return True

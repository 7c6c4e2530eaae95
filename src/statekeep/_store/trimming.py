"""Trimming a State in its store: the checks, the base record, and the engine's ``_trim``.

``store.trim(id, before=seq)`` runs :func:`trim` on the owner loop with the State's lock held:
(``store``: the :class:`~.backend.Backend`) it reads the State, checks ``before`` against its base and its latest compaction, builds the
base record (:mod:`statekeep._run.base`) from the entries it removes, encodes it as the store
encodes entries (:func:`base_line`: its large values as references to blobs, sealed on an
encrypted store) and hands it to the backend's ``_trim(state_id, before, base, first)``, which
writes it at seq ``before - 1`` and removes the entries before it, reclaiming their space.

The State's lock is per process: another process may trim the same State between this read
and the ``_trim`` (its base built from other entries, referring to other blobs, so its trim
may drop the State's reference to a blob this base refers to). So the trim is optimistic on
the State's first seq: ``_trim`` refuses (StateConflictError, nothing changed) when the State
no longer starts at the ``first`` this trim read, and the trim reads it again and retries, a
few times (:func:`_retried`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any

from .._core.errors import StaleLeaseError, StateConflictError
from .._core.leases import Lease, check_fence
from .._core.writes import missing_error
from .._run.base import build_base
from .._run.resume import first_seq
from .capabilities import IdWalk, Trims

#: How many times a trim reads the State again after another process trimmed it meanwhile.
TRIES = 5


def check_before(before: object) -> int:
    """``before`` if it is an int >= 1, else TypeError/ValueError saying so."""
    if type(before) is not int:
        raise TypeError(f"before must be an int seq, got {type(before).__name__}")
    if before < 1:
        raise ValueError(f"before must be a seq >= 1 (the entries before it are removed), got {before}")
    return before


def latest_compaction(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last ``compaction`` entry of ``entries``, or None."""
    found = [e for e in entries if e.get("kind") == "compaction" and type(e.get("through")) is int]
    return found[-1] if found else None


def removed_entries(state_id: str, entries: list[dict[str, Any]], before: int) -> list[dict[str, Any]] | None:
    """The entries ``trim(before=)`` removes (from the first held one to seq ``before - 1``), or
    None when there is nothing to remove (trimmed there already). ValueError saying why a trim
    is refused: nothing is changed then."""
    start = first_seq(entries)
    if before <= start:
        raise ValueError(
            f"State {state_id!r} is trimmed already: its entries before seq {start} are gone and its "
            f"base record is at seq {start}, so before={before} removes nothing more. To trim further "
            f"give a before above {start + 1}; nothing was changed"
        )
    compaction = latest_compaction(entries)
    if compaction is None:
        raise ValueError(
            f"State {state_id!r} has no compaction entry: trim removes only entries that a compaction's "
            "summary stands for. Compact it first (state.compact(summary, through=seq), then save it); "
            "nothing was changed"
        )
    if before == start + 1:
        return None
    through = compaction["through"]
    if before > through + 1:
        raise ValueError(
            f"before={before} is past State {state_id!r}'s latest compaction (seq {compaction['seq']}, "
            f"through seq {through}): trim may remove entries up to seq {through} only, so give a "
            f"before of at most {through + 1}; nothing was changed"
        )
    return entries[: before - start]


def base_line(
    store: Any, state_id: str, base: dict[str, Any], incarnation: str | None, held: Collection[str]
) -> bytes:
    """The encoded line of ``base`` for ``state_id``: redacted, its values above the store's
    ``offload=`` bound as references to blobs, and sealed, as any entry line (its blob names
    listed in clear, which gc and the trim's recount of the State's references read).

    A base refers only to blobs in ``held`` (those the State's stored lines list, read with
    it: they are stored, and the State refers to them until the trim swaps its lines): its
    data values were read from entries that hold them as those blobs, offloaded the same way.
    A value that is no such blob (written when the store kept values inline, or under a
    higher bound) makes the base keep its values inline, as it is handed to ``_trim`` with no
    blobs to store."""
    write = store._protection.write(
        store.namespace, state_id, [base], None, False, incarnation, offload=store._offload
    )
    if write.blobs and not set(write.blobs) <= set(held):
        write = store._protection.write(store.namespace, state_id, [base], None, False, incarnation)
    line: bytes = write.lines[0]
    return line


async def trim(store: Any, state_id: str, before: int, lease: Lease | None) -> None:
    """Trim ``state_id`` before seq ``before`` (on the owner loop, its lock held)."""
    check_fence(
        state_id,
        await store._current_lease(state_id),
        lease,
        await store._server_now(),
        "nothing was trimmed",
    )

    async def attempt() -> None:
        read = await store._read_with_blobs(state_id, 0)
        record = store._opened(state_id, read, 0)
        if record is None:
            raise missing_error(state_id)
        removed = removed_entries(state_id, record.entries, before)
        if removed is None:
            return
        line = base_line(store, state_id, build_base(removed), record.incarnation, read[1] or ())
        await store._trim(state_id, before, line, first_seq(record.entries))

    await _retried(state_id, attempt)


async def _retried(state_id: str, attempt: Callable[[], Awaitable[None]]) -> None:
    """Run ``attempt`` (a read of the State, then its ``_trim``) again while its ``_trim`` is
    refused because another process trimmed the State after the read; StateConflictError
    after :data:`TRIES` such refusals (nothing changed by this trim)."""
    for tries in range(1, TRIES + 1):
        try:
            await attempt()
            return
        except StaleLeaseError:
            raise
        except StateConflictError as error:
            if tries == TRIES:
                raise StateConflictError(
                    f"State {state_id!r} was trimmed by another process each of the {TRIES} times "
                    "this trim read it; nothing was changed by this trim. Try again once the other "
                    "trims are done"
                ) from error


async def keep_from(store: Any, state_id: str, seq: int) -> None:
    """Remove the entries of ``state_id`` (an agent memory key) up to ``seq``, a ``base``
    record taking the place of the change at ``seq`` (agent memory keeps each key's latest
    change, whose value is in the key's snapshot); nothing if the State holds no entry there
    any more or starts there already (on the owner loop, its lock held).

    The key's history then starts with its base at ``seq``, as a trimmed State's does, so
    copy, export and import carry it as they carry any trimmed State."""
    await _retried(state_id, lambda: _keep_from(store, state_id, seq))


async def _keep_from(store: Any, state_id: str, seq: int) -> None:
    record = store._opened(state_id, await store._read_with_blobs(state_id, 0), 0)
    entries = [] if record is None else record.entries
    if len(entries) < 2 or entries[0].get("seq") == seq:
        return
    kept = next((entry for entry in entries if entry.get("seq") == seq), None)
    if record is None or kept is None:
        return
    snapshot = record.snapshot or {}
    task = {"text": snapshot["task"]} if type(snapshot.get("task")) is str else {}
    base = {
        "seq": seq,
        "kind": "base",
        "at": kept.get("at"),
        "task": task,  # (the key)
        "trimmed": seq + 1,  # the changes it stands for, the key's revision after them
        "turn": seq + 1,
        "data": {},
        "answered": [],
        "open_calls": [],
    }
    write = store._protection.write(store.namespace, state_id, [base], None, False, record.incarnation)
    await store._trim(state_id, seq + 1, write.lines[0], first_seq(entries))


async def gc_and_trim(store: Any, limit: int | None) -> int:
    """``gc`` of a store opened with ``trim_compacted=True``: the expired States removed, then
    every other State trimmed up to its latest compaction; returns the States removed."""
    removed: int = await store._gc(limit)
    offered = isinstance(store, Trims)  # (a bool: no narrowing of ``store``)
    if not offered:
        return removed
    ids = await store._state_ids() if isinstance(store, IdWalk) else None
    if ids is None:
        ids = [row.id for row in (await store._list())[0]]
    for sid in ids:
        await store._locked(sid, _trim_compacted(store, sid))
    return removed


async def _trim_compacted(store: Any, sid: str) -> None:
    """Trim ``sid`` before ``through + 1`` of its latest compaction, if that removes anything;
    a State a worker holds (a live lease), or that cannot be read, is left as it is."""
    if await store._current_lease(sid) is not None:
        return
    try:
        await _retried(sid, lambda: _trim_latest(store, sid))
    except StaleLeaseError:
        raise
    except StateConflictError:
        return  # other processes keep trimming it (their gc): left to them


async def _trim_latest(store: Any, sid: str) -> None:
    try:
        read = await store._read_with_blobs(sid, 0)
        record = store._opened(sid, read, 0)
    except (ValueError, LookupError):
        return  # damaged, or sealed for a key this store lacks: left for its owner to see
    compaction = None if record is None else latest_compaction(record.entries)
    if record is None or compaction is None:
        return
    removed = removed_entries(sid, record.entries, compaction["through"] + 1)
    if removed is not None:
        line = base_line(store, sid, build_base(removed), record.incarnation, read[1] or ())
        await store._trim(sid, compaction["through"] + 1, line, first_seq(record.entries))

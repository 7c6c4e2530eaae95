"""Moving States between stores, idempotently: :func:`aput_state` puts one State read from
a source into a destination; :func:`acopy` does it for many (``statekeep copy``, ``import``).

A State is sent as its history plus its snapshot, exactly as the source's ``read`` gives
them (decrypted with the source's keys; a destination opened with ``encrypt=`` seals them
again with its own). Labels, expiry, ``parent`` and ``forked_from`` travel in the snapshot
untouched, but for a store's own retention stamp (see below). Large histories go in chunks
of :data:`CHUNK` entries with the snapshot on the last chunk only, so a copy killed part
way leaves, at worst, a prefix of the history without a snapshot (a State that no listing
shows) or a full history under an older snapshot; the next run finishes either.

The rule for a State the destination holds already: **histories must agree, and the
source's snapshot wins.** If the destination's entries are the source's (or a prefix of
them), the rest of the history is written and the destination's snapshot is replaced by
the source's when they differ: a resync, so what changed in the source (labels, an
explicit expiry, ...) reaches the destination, and what was changed in the destination's
snapshot alone (a label added there) is replaced. Any other history (a different entry at
some seq, a longer one) is a conflict: refused, naming the State, nothing of it changed.

A store with ``retention`` stamps ``expires_at`` (and ``"expiry": "retention"``) on a
snapshot that has no expiry of its own, and a ``ttl`` MemoryStore slides that stamp on every
read. That stamp is the source store's policy, not the State's: it is taken off before a
State is written (:func:`unstamped`), so the destination applies its own policy (none, or
its own ``retention``). An explicit expiry (``State.keep_for``) travels as it is.
Snapshots are compared with each side's stamp taken off: two stamps, or a stamp and no
expiry, are the same; an explicit expiry is compared like any other field (against a stamp
too: it differs, and the source's wins).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from .._core.errors import DecryptionError, StateExistsError
from .._core.ids import validate_id
from .._core.labels import memory_namespace, validate_namespace
from .._core.records import Record
from .._runtime.bridge import run_async
from .._store.capabilities import IdWalk, Namespaces
from .._store.contract import Store
from .._store.incarnations import incarnated
from .copycheck import (
    UNREADABLE,
    CopyConflictError,
    CopyKeysError,
    CopyVerifyError,
    CopyWriteError,
    behind,
    check_prefix,
    refusals,
    same_snapshot,
    unreadable,
    unstamped,
    verify_copy,
)
from .copyreport import CopyReport, Outcome
from .renaming import Rename, RenameError, check_renames, renamed

__all__ = [
    "CopyConflictError",
    "CopyKeysError",
    "CopyReport",
    "CopyVerifyError",
    "CopyWriteError",
    "Rename",
    "RenameError",
    "acopy",
    "aput_state",
    "check_renames",
    "unstamped",
]

#: Entries per write; the snapshot goes with the last one.
CHUNK = 1000
#: States copied at once (each its own chain of reads and writes).
CONCURRENCY = 8

#: Called after each State with (States done, States in all).
Progress = Callable[[int, int], None]


async def _send(
    dst: Store,
    state_id: str,
    entries: list[dict[str, Any]],
    snapshot: Any,
    start: int,
    create: bool,
    incarnation: str | None = None,
) -> None:
    """Write ``entries[start:]`` in chunks, the snapshot with the last one; a create gives
    the State ``incarnation`` (the source's: a copy keeps it) where ``dst`` keeps one."""
    kept = incarnated(dst, incarnation) if create else {}
    first = True
    while True:
        chunk = entries[start : start + CHUNK]
        start += len(chunk)
        last = start >= len(entries)
        with refusals(state_id):
            await dst.awrite(state_id, chunk, snapshot if last else None, create=create and first, **kept)
        kept = {}
        first = False
        if last:
            return


async def aput_state(dst: Store, state_id: str, record: Record) -> Outcome:
    """Put the State ``record`` (as a source's ``read`` returned it) into ``dst`` as
    ``state_id``; return ``"copied"`` (it was absent), ``"extended"`` (``dst`` held a
    prefix of its history, or all of it without the snapshot: the rest was written),
    ``"updated"`` (``dst`` held the whole history under another snapshot: the source's
    replaced it) or ``"same"`` (``dst`` holds it already; nothing written).

    The source's snapshot wins whenever the histories agree (see the module's rule); a
    different entry at some seq, or a longer history in ``dst``, is
    :class:`CopyConflictError` and ``dst`` is not changed. After writing, the State is read
    back: its last seq and snapshot must be what was sent, else :class:`CopyVerifyError`.
    Durable on return as ``dst.awrite`` is.
    """
    entries, snapshot = list(record.entries), unstamped(record.snapshot)
    record = Record(entries, snapshot, record.incarnation)
    # Create first (all or nothing), and read only if the State is there: a fresh copy
    # costs no read of the destination before its write.
    try:
        await _send(dst, state_id, entries, snapshot, 0, create=True, incarnation=record.incarnation)
    except StateExistsError:
        held = await dst.aread(state_id)  # there already (or another copier created it)
        if held is None:
            raise
    else:
        await verify_copy(dst, state_id, record)
        return "copied"
    check_prefix(state_id, held, entries)
    outcome: Outcome = "extended"
    if len(held.entries) == len(entries) and same_snapshot(held.snapshot, snapshot):
        return "same"
    if snapshot is None and held.snapshot is not None:  # a write cannot take a snapshot away
        raise CopyConflictError(state_id, "it holds a snapshot, the source none")
    if len(held.entries) == len(entries):
        assert snapshot is not None
        if held.snapshot is not None and not behind(held.snapshot, snapshot):
            outcome = "updated"  # not a copy killed before its snapshot: a resync
        with refusals(state_id):
            await dst.awrite(state_id, [], snapshot)
    else:
        await _send(dst, state_id, entries, snapshot, len(held.entries), create=False)
    await verify_copy(dst, state_id, record)
    return outcome


async def source_ids(src: Store, filters: Mapping[str, Any]) -> list[str]:
    """The ids of the States to move: without filters, every State the source holds (a
    walk of its ids where the store has one: States without a snapshot, which no listing
    shows, are moved too); else every State it lists with ``filters``, page by page (in
    one listing on a store that reads all its States for any page, as a FileStore does)."""
    if not filters and isinstance(src, IdWalk):
        walked = await run_async(src._state_ids())
        if walked is not None:
            return walked
    ids: list[str] = []
    async for row in src.aiter_states(**filters):
        ids.append(row.id)
    return ids


async def chosen_ids(src: Store, ids: Iterable[str] | None, filters: Mapping[str, Any] | None) -> list[str]:
    """The States to move, in order and once each: ``ids`` (each checked against the id
    rule), else :func:`source_ids` of ``filters``."""
    listed = [validate_id(i) for i in ids] if ids is not None else await source_ids(src, filters or {})
    return list(dict.fromkeys(listed))


def chosen_scopes(memory_scopes: Iterable[str]) -> list[str]:
    """The agent memory scopes to move too, each checked (before anything is written)."""
    if isinstance(memory_scopes, str):
        raise TypeError("memory_scopes takes a list of scope names, not one str")
    return [validate_namespace(scope) for scope in memory_scopes]


async def aput_one(
    dst: Store, state_id: str, record: Record, report: CopyReport, rename: Rename | None
) -> None:
    """Put one State, counting it in ``report`` (a conflict, a write the destination
    refused, a failed check or a damaged State there is counted as failed, and the copy
    goes on)."""
    if rename is not None:
        state_id, record = renamed(state_id, record, rename)
    try:
        report.count(await aput_state(dst, state_id, record))
    except DecryptionError as exc:  # the destination's records: it needs its keys
        raise CopyKeysError("destination", exc) from None
    except CopyConflictError as exc:
        report.failed[state_id] = str(exc)
        report.differ.append(state_id)
    except (CopyVerifyError, CopyWriteError) as exc:
        report.failed[state_id] = str(exc)
    except UNREADABLE as exc:  # the destination's copy is damaged: left as it is, for a person
        report.failed[state_id] = unreadable(state_id, str(exc), "destination")


async def acopy(
    src: Store,
    dst: Store,
    *,
    ids: Iterable[str] | None = None,
    filters: Mapping[str, Any] | None = None,
    rename_prefix: str | None = None,
    progress: Progress | None = None,
    concurrency: int = CONCURRENCY,
    memory_scopes: Iterable[str] = (),
) -> CopyReport:
    """Copy States from ``src`` to ``dst``: those of ``ids``, else every State ``src`` lists
    with ``filters`` (the keyword arguments of ``alist``, e.g. ``{"status": "finished"}``),
    else every State ``src`` holds (see :func:`source_ids`).

    Each State goes through :func:`aput_state`: new ones are created whole, a prefix left
    by an interrupted copy (or an older copy) is extended, a snapshot that differs is
    replaced by the source's, identical ones are skipped, and ones whose histories differ
    are left unchanged and named in ``report.failed``, as are States the source cannot read
    (damaged: see :data:`UNREADABLE`), while the others are copied. Run it again after a crash: it ends with
    every State equal in both stores. ``rename_prefix`` puts each State under
    ``rename_prefix + id`` (see :func:`renamed`); if that makes any id too long, nothing
    is written (:class:`RenameError`). ``progress(done, total)`` is called after
    each State. ``concurrency`` States are copied at once (under asyncio; one at a time
    under trio), so as many may be left part way by a crash. Each State is durable on
    return as ``dst.awrite`` is.

    ``memory_scopes``: the agent memory scopes (``store.memory(scope)``) copied too, after
    the States, key by key with the same rules (never renamed); their counts are in
    ``report.memory`` and their failures in ``report.failed`` as ``"memory SCOPE: key"``.
    """
    scopes = chosen_scopes(memory_scopes)
    wanted = await chosen_ids(src, ids, filters)
    check_renames(wanted, rename_prefix)
    rename = Rename(rename_prefix, frozenset(wanted)) if rename_prefix else None
    report = CopyReport()
    done = 0

    async def copy_one(state_id: str) -> None:
        nonlocal done
        try:
            record = await src.aread(state_id)
        except DecryptionError as exc:
            raise CopyKeysError("source", exc) from None
        except UNREADABLE as exc:  # this State only: the others go on
            report.failed[state_id] = unreadable(state_id, str(exc))
        else:
            await _put(state_id, record)
        done += 1
        if progress is not None:
            progress(done, len(wanted))

    async def _put(state_id: str, record: Record | None) -> None:
        if record is None and ids is None:
            report.gone += 1  # walked, then expired or deleted before this read
        elif record is None:
            report.missing.append(state_id)
        else:
            await aput_one(dst, state_id, record, report, rename)

    await _each(copy_one, wanted, concurrency)
    for scope in scopes:
        views = memory_views(src, dst, scope)
        if views is not None:
            kept = report.memory[scope] = await acopy(*views, concurrency=concurrency)
            for key, why in kept.failed.items():
                report.failed[f"memory {scope}: {key}"] = why
    return report


def memory_view(store: Store, scope: str) -> Store | None:
    """The agent memory of ``scope`` in ``store`` as a store of its own (read and sealed as
    ``store`` is), or None for a store of one's own, without agent memory."""
    if not isinstance(store, Namespaces):
        return None
    return store._sibling(memory_namespace(store.namespace, scope))  # redacted and sealed as the store is


def memory_views(src: Store, dst: Store, scope: str) -> tuple[Store, Store] | None:
    """The agent memory of ``scope`` in each store, or None if either has none."""
    mine, theirs = memory_view(src, scope), memory_view(dst, scope)
    return None if mine is None or theirs is None else (mine, theirs)


async def _each(work: Callable[[str], Awaitable[None]], ids: list[str], concurrency: int) -> None:
    """``work`` on each id: ``concurrency`` at a time under asyncio (a store's writes then
    share commits), one after another under another event loop (trio)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        concurrency = 1
    if concurrency <= 1:
        for state_id in ids:
            await work(state_id)
        return
    queue = iter(ids)

    async def worker() -> None:
        for state_id in queue:  # shared: each id goes to one worker
            await work(state_id)

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(min(concurrency, len(ids))):
                group.create_task(worker())
    except BaseExceptionGroup as failed:  # the first error, as one at a time would raise it
        raise failed.exceptions[0] from None

"""Re-sealing stored records with the keyring's current key (``statekeep rekey``).

After a rotation (a new key made ``current``), records sealed with an older key still
open, but the old key cannot leave the ring until every record is re-sealed. :func:`arekey`
walks every State of a store (expired ones too, where the store still holds them), reads
its stored records as they are, and replaces each one sealed with another key (and, with
``allow_plaintext=True``, each plaintext one) by the same plaintext sealed with the current
key, for the same place. The plaintext never changes, so it runs beside live writers: each
record is replaced only if it is still what was read. It can be stopped and run again: what
is done is skipped.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Collection, Coroutine, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import orjson

from .._core.blobs import REFS, refs_of, wanted, with_refs
from .._core.labels import memory_namespace
from .._core.query import ListQuery, Page, make_query
from .._core.records import Record
from .._runtime.bridge import run_async
from .protection import Protection
from .sealing import (
    SEALED,
    TASK_MARK,
    Keyring,
    aad,
    open_blob,
    open_snapshot,
    seal_blob,
    seal_entry,
    seal_snapshot,
)

#: Entries re-sealed per call of a store's ``_reseal`` (one transaction each).
BATCH = 500
#: States listed per page.
PAGE = 1000

T = TypeVar("T")

#: Called after each State with (States done, States in all).
Progress = Callable[[int, int], None]


@dataclass
class RekeyReport:
    """What a rekey did: ``states`` seen, ``records`` re-sealed (entries and snapshots),
    ``current`` States that needed nothing (already all sealed with the current key),
    ``plaintext`` States holding plaintext records left as they are (open the store with
    ``allow_plaintext=True`` to seal them too), ``unlisted`` States the store's listing
    leaves out (a snapshot that is not a listing row, as ``list()`` warns), which rekey
    cannot reach: it is not done while this is above 0."""

    states: int = 0
    records: int = 0
    current: int = 0
    plaintext: int = 0
    unlisted: int = 0
    #: Blobs (large values stored once) re-sealed with the current key.
    blobs: int = 0

    def __str__(self) -> str:
        text = (
            f"{self.states} States seen, {self.records} records re-sealed, "
            f"{self.current} States already on the current key"
        )
        if self.blobs:
            text += f", {self.blobs} blobs re-sealed"
        if self.plaintext:
            text += f", {self.plaintext} States with plaintext records left in clear (see --allow-plaintext)"
        if self.unlisted:
            text += (
                f"; {self.unlisted} States the listing leaves out were NOT reached (their snapshots are "
                "not listing rows: `statekeep list` warns about each; fix them, then run rekey again)"
            )
        return text


@runtime_checkable
class Reseal(Protocol):
    """What ``rekey`` needs of a store (the built-in stores' engine offers it; a capability
    group of :mod:`statekeep._store.capabilities`): its records replaced in place by
    :meth:`_reseal`, read raw, and listed with expired ones."""

    namespace: str
    _protection: Protection

    async def _reseal(
        self, state_id: str, entries: dict[int, tuple[bytes, bytes]], snapshot: tuple[bytes, bytes] | None
    ) -> int:
        """Replace stored records of ``state_id`` in place (the State's lock is held).

        ``entries`` maps a seq to ``(old, new)``: the stored entry as read (encoded JSON,
        no newline) and what replaces it; ``snapshot`` likewise (or None). Each record is
        replaced only where the store still holds ``old`` (compared as JSON), all in one
        transaction (or one atomic file replacement) under the store's cross-process lock,
        so a writer appending meanwhile loses nothing. No fence: the plaintext is unchanged.
        Returns how many records were replaced.
        """
        ...

    async def _read(self, state_id: str, since: int = 0) -> Record | Callable[[], Record] | None: ...

    async def _select(self, query: ListQuery) -> tuple[Page, list[str]]: ...

    def _locked(self, state_id: str, work: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]: ...


@runtime_checkable
class _Siblings(Protocol):
    """A store with agent memory (the ``Namespaces`` group's hook): only such a store has
    memory namespaces to re-seal."""

    def _sibling(self, namespace: str) -> Reseal: ...


def _resealable(store: object) -> tuple[Reseal, Protection, Keyring]:
    if not isinstance(store, Reseal):
        raise TypeError(f"rekey works on the built-in stores, not on a {type(store).__name__}")
    protection = store._protection
    ring = protection.keyring
    if ring is None:
        raise ValueError("rekey needs a store opened with encrypt=Keyring(...): its current key seals")
    return store, protection, ring


def reseal_entry(
    ring: Keyring,
    stored: dict[str, Any],
    namespace: str,
    state_id: str,
    seq: int,
    plaintext: bool,
    incarnation: str | None,
) -> bytes | None:
    """The stored entry sealed with the current key (no newline), or None if it is; bound
    to the State's ``incarnation`` as before (a rekey keeps it)."""
    if SEALED in stored:
        if not ring.rekeyed(stored[SEALED]):
            return None
        what = f"State {state_id!r} entry seq {seq}"
        line = ring.open(stored[SEALED], aad(namespace, state_id, seq, incarnation), what)
        if orjson.loads(line).get("seq") != seq or stored.get("seq") != seq:
            return None  # not this seq's record: leave it for a read to report
    elif plaintext:
        line = orjson.dumps({k: v for k, v in stored.items() if k != REFS})
    else:
        return None
    sealed = seal_entry(ring, line, stored, namespace, state_id, incarnation)
    return with_refs(sealed, refs_of(stored)).rstrip(b"\n")  # its blobs listed in clear, as before


def reseal_snapshot(
    ring: Keyring,
    stored: dict[str, Any],
    namespace: str,
    state_id: str,
    plaintext: bool,
    incarnation: str | None,
) -> bytes | None:
    """The stored snapshot sealed with the current key, or None if it is."""
    if SEALED in stored:
        task = stored.get("task")
        old_task = (
            isinstance(task, str) and task.startswith(TASK_MARK) and ring.rekeyed(task[len(TASK_MARK) :])
        )
        if not ring.rekeyed(stored[SEALED]) and not old_task:
            return None
        snapshot = open_snapshot(ring, stored, namespace, state_id, incarnation)
    elif plaintext:
        snapshot = stored
    else:
        return None
    return seal_snapshot(ring, snapshot, namespace, state_id, incarnation)


async def _ids(store: Reseal, report: RekeyReport) -> list[str]:
    """Every State id the listing holds, expired ones too; the States it leaves out are
    counted in ``report.unlisted`` (their ids are not known here)."""
    ids: list[str] = []
    after: str | None = None
    while True:
        query = dataclasses.replace(make_query(limit=PAGE, after=after), include_expired=True)
        page, left_out = await run_async(store._select(query))
        ids += [row.id for row in page]
        report.unlisted += len(left_out)
        if page.next is None:
            return ids
        after = page.next


def _batches(items: dict[int, tuple[bytes, bytes]]) -> Iterator[dict[int, tuple[bytes, bytes]]]:
    seqs = sorted(items)
    for start in range(0, len(seqs), BATCH):
        yield {seq: items[seq] for seq in seqs[start : start + BATCH]}


async def _rekey_state(
    store: Reseal, ring: Keyring, plaintext: bool, state_id: str, report: RekeyReport
) -> None:
    """Re-seal one State's old records, counting them in ``report``."""
    namespace = store.namespace
    raw = await run_async(store._read(state_id))
    record: Record | None = raw() if callable(raw) else raw
    report.states += 1
    if record is None:
        return  # deleted (or expired and gone) meanwhile
    clear = not plaintext and (
        any(SEALED not in e for e in record.entries)
        or (record.snapshot is not None and SEALED not in record.snapshot)
    )
    report.plaintext += clear
    entries: dict[int, tuple[bytes, bytes]] = {}
    for stored in record.entries:
        seq = stored.get("seq")
        if type(seq) is not int:
            continue  # not a record rekey can place: leave it for a read to report
        new = reseal_entry(ring, stored, namespace, state_id, seq, plaintext, record.incarnation)
        if new is not None:
            entries[seq] = (orjson.dumps(stored), new)
    snapshot = None
    if record.snapshot is not None:
        new = reseal_snapshot(ring, record.snapshot, namespace, state_id, plaintext, record.incarnation)
        if new is not None:
            snapshot = (orjson.dumps(record.snapshot), new)
    if not entries and snapshot is None:
        report.current += not clear
        # its blobs too: a rekey stopped after the records and before them resumes here
        await _rekey_blobs(store, ring, wanted(record.entries), report)
        return
    done = 0
    batches = list(_batches(entries)) or [{}]
    for i, batch in enumerate(batches):
        last = i == len(batches) - 1
        work = store._reseal(state_id, batch, snapshot if last else None)
        done += await run_async(store._locked(state_id, work))
    report.records += done
    await _rekey_blobs(store, ring, wanted(record.entries), report)


@runtime_checkable
class _BlobReseal(Protocol):
    """A store whose blobs rekey re-seals in place (the names stay: see the "Large values" page)."""

    async def _get_blobs(self, names: Collection[str]) -> dict[str, bytes]: ...

    async def _reseal_blobs(self, blobs: dict[str, tuple[bytes, bytes]]) -> int:
        """Replace each blob NAME -> (old, new) whose stored bytes are still ``old``, durably
        and atomically each; returns how many were replaced."""
        ...


async def _rekey_blobs(store: object, ring: Keyring, names: set[str], report: RekeyReport) -> None:
    """Re-seal the blobs a State's entries list that are sealed with another key."""
    if not names or not isinstance(store, _BlobReseal):
        return
    namespace = getattr(store, "namespace", "")
    held = await run_async(store._get_blobs(names))
    work = {}
    for name, old in held.items():
        sealed = old.decode("ascii", "replace")
        if old[:1] in (b'"', b"{", b"[") or not ring.rekeyed(sealed):
            continue  # in clear (written before encrypt=), or on the current key
        plain = open_blob(ring, old, namespace, name, f"blob {name!r}")
        work[name] = (old, seal_blob(ring, plain, namespace, name))
    if work:
        report.blobs += await run_async(store._reseal_blobs(work))


def _views(store: Reseal, memory_scopes: Iterable[str]) -> list[Reseal]:
    """The store, and its agent memory of each scope (sealed with the same keyring), if it
    has agent memory at all."""
    if not isinstance(store, _Siblings):
        return [store]
    return [store, *(store._sibling(memory_namespace(store.namespace, scope)) for scope in memory_scopes)]


async def arekey(
    store: Any, progress: Progress | None = None, *, memory_scopes: Iterable[str] = ("default",)
) -> RekeyReport:
    """Re-seal every record of ``store`` sealed with a key other than its keyring's
    ``current`` (and every plaintext one if it was opened with ``allow_plaintext=True``),
    in its namespace and in its agent memory of each of ``memory_scopes``.

    ``store`` is a built-in store opened with ``encrypt=`` a Keyring holding the current
    key and every key records were sealed with (a record whose key is missing is a
    :class:`DecryptionError` naming the key id, and nothing of its State is changed).
    ``progress(done, total)`` is called after each State. Each State's records are
    replaced in one transaction (or atomic file replacement) per batch, durable on return
    as the store's writes are; stopped part way, run it again: what is done is skipped.
    Expired States are re-sealed too where the store still holds them.
    """
    store, protection, ring = _resealable(store)
    if isinstance(memory_scopes, str):
        raise TypeError("memory_scopes takes a list of scope names, not one str")
    report = RekeyReport()
    work = [
        (view, state_id) for view in _views(store, memory_scopes) for state_id in await _ids(view, report)
    ]
    for done, (view, state_id) in enumerate(work, 1):
        await _rekey_state(view, ring, protection.allow_plaintext, state_id, report)
        if progress is not None:
            progress(done, len(work))
    return report


def rekey(
    store: Any, progress: Progress | None = None, *, memory_scopes: Iterable[str] = ("default",)
) -> RekeyReport:
    """Sync :func:`arekey` (run on an event loop of its own: the opening and sealing never
    hold up other callers' writes; ``progress`` is called in another thread if this one
    runs an event loop)."""
    work = arekey(store, progress, memory_scopes=memory_scopes)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    with ThreadPoolExecutor(1, thread_name_prefix="statekeep-rekey") as pool:
        return pool.submit(asyncio.run, work).result()

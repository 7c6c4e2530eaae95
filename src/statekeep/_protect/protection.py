"""What a store does to records on their way out and back in: redaction and sealing.

The built-in stores run every write through :meth:`Protection.write` in the caller's
thread (redacted, validated, sealed) and every read through :meth:`Protection.record`, so a
backend stores and returns what it is given and never sees a key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from .._core.blobs import REFS, check_own_refs, content_name, resolve, with_refs
from .._core.blobs import offload as offload_entry
from .._core.errors import CorruptStateError, DecryptionError
from .._core.labels import is_memory_namespace
from .._core.query import Page
from .._core.records import Entries, Record, SavedState, Snapshot
from .._core.redactor import Redactor
from .._core.writes import PreparedWrite, prepare_write
from .sealing import (
    SEALED,
    TASK_MARK,
    Keyring,
    is_sealed,
    open_blob,
    open_entry,
    open_snapshot,
    open_task,
    seal_blob,
    seal_entry,
    seal_snapshot,
)


class Protection:
    """A store's ``redact=``, ``encrypt=`` and ``allow_plaintext=`` (checked)."""

    __slots__ = ("allow_plaintext", "keyring", "redactor")

    def __init__(
        self, redact: object = None, encrypt: object = None, allow_plaintext: object = False
    ) -> None:
        if redact is not None and not isinstance(redact, Redactor):
            raise TypeError(f"redact= takes a statekeep.Redactor, got {type(redact).__name__}")
        if encrypt is not None and not isinstance(encrypt, Keyring):
            raise TypeError(f"encrypt= takes a statekeep.Keyring, got {type(encrypt).__name__}")
        if type(allow_plaintext) is not bool:
            raise TypeError(f"allow_plaintext must be a bool, got {allow_plaintext!r}")
        if allow_plaintext and encrypt is None:
            raise ValueError("allow_plaintext=True only means something with encrypt=: give a Keyring too")
        self.redactor: Redactor | None = redact
        self.keyring: Keyring | None = encrypt
        self.allow_plaintext: bool = allow_plaintext

    @property
    def active(self) -> bool:
        return self.redactor is not None or self.keyring is not None

    def write(
        self,
        namespace: str,
        state_id: str,
        entries: Entries,
        snapshot: Snapshot,
        create: bool,
        incarnation: str | None = None,
        bound: bool = False,
        offload: int | None = None,
    ) -> PreparedWrite:
        """A write redacted, validated (:func:`prepare_write`), its large values offloaded
        to blobs (``offload``: the bound, None for none; :mod:`statekeep._core.blobs`) and
        sealed for the State's ``incarnation`` (a create stores it; ``bound``: an append
        refused unless the State is still that incarnation)."""
        if snapshot is not None and isinstance(snapshot, dict):
            _check_own_keys(snapshot)
        write = prepare_write(state_id, entries, snapshot, create, incarnation, bound)
        for i, line in enumerate(write.lines):
            check_own_refs(line, f"entries[{i}]")
        redactor, ring = self.redactor, self.keyring
        large = offload is not None and any(len(line) > offload for line in write.lines)
        if redactor is None and ring is None and not large:
            return write
        # From here on the write's own encoding: plain dicts, lists and strs, checked.
        plain = [orjson.loads(line) for line in write.lines]
        snap = None if write.snapshot is None else orjson.loads(write.snapshot)
        if redactor is not None:
            plain = [redactor.entry(entry) for entry in plain]
            memory = is_memory_namespace(namespace)  # a memory key's value is judged by its name
            snap = None if snap is None else redactor.snapshot(snap, memory=memory)
            write = prepare_write(state_id, plain, snap, create, incarnation, bound)
        refs: list[list[str]] = [[] for _ in plain]
        blobs: dict[str, bytes] = {}
        if offload is not None and any(len(line) > offload for line in write.lines):
            name_of = content_name if ring is None else (lambda data: ring.blob_name(data, namespace))
            offloaded = list(write.lines)
            for i, line in enumerate(offloaded):
                if len(line) > offload:
                    plain[i], refs[i] = offload_entry(plain[i], offload, name_of, blobs)
                    offloaded[i] = orjson.dumps(plain[i]) + b"\n"
            write = dataclasses.replace(write, lines=tuple(offloaded))
        if ring is None:
            if not blobs and not any(refs):
                return write
            listed = tuple(with_refs(line, names) for line, names in zip(write.lines, refs, strict=True))
            return dataclasses.replace(write, lines=listed, blobs=blobs or None, blob_refs=_all(refs))
        entries = plain
        snapshot = snap
        lines = tuple(
            with_refs(seal_entry(ring, line, entry, namespace, state_id, incarnation), names)
            for line, entry, names in zip(write.lines, entries, refs, strict=True)
        )
        sealed = None if snapshot is None else seal_snapshot(ring, snapshot, namespace, state_id, incarnation)
        opener = self.opener(namespace, state_id, incarnation)
        sealed_blobs = {name: seal_blob(ring, data, namespace, name) for name, data in blobs.items()}
        return dataclasses.replace(
            write,
            lines=lines,
            snapshot=sealed,
            plain=write.lines,
            opener=opener,
            blobs=sealed_blobs or None,
            blob_refs=_all(refs),
        )

    def opener(
        self, namespace: str, state_id: str, incarnation: str | None
    ) -> Callable[[int, dict[str, Any]], dict[str, Any]]:
        """Opens a stored entry of ``state_id`` for comparing with a write's plaintext."""

        def open_stored(seq: int, stored: dict[str, Any]) -> dict[str, Any]:
            return self.entry(namespace, state_id, seq, stored, incarnation)

        return open_stored

    def entry(
        self, namespace: str, state_id: str, seq: int, stored: dict[str, Any], incarnation: str | None
    ) -> dict[str, Any]:
        ring = self.keyring
        if ring is not None and is_sealed(stored):
            return open_entry(ring, stored, namespace, state_id, seq, incarnation)
        if ring is not None and not self.allow_plaintext:
            raise _plaintext(state_id, f"entry seq {seq}")
        if ring is None and is_sealed(stored):
            raise _no_ring(state_id, f"entry seq {seq}", stored[SEALED])
        return stored

    def record(
        self,
        namespace: str,
        state_id: str,
        record: Record | None,
        since: int,
        blobs: Mapping[str, bytes] | None = None,
    ) -> Record | None:
        """A stored Record opened, its blob references resolved from ``blobs`` (the stored
        bytes of the blobs its entries list, fetched with the read); :class:`DecryptionError`
        for what cannot be opened, :class:`MissingBlobError` for a blob not found."""
        if record is None:
            return None
        incarnation = record.incarnation
        snapshot = self.snapshot(namespace, state_id, record.snapshot, incarnation)
        entries = record.entries
        first = entries[0].get("seq") if entries else None
        if type(first) is int and first > since:
            since = first  # a trimmed history read from below its base starts at the base
        if self.keyring is None:
            for i, stored in enumerate(entries):  # a dict lookup each: sealed ones are refused
                if SEALED in stored:
                    raise _no_ring(state_id, f"entry seq {since + i}", stored[SEALED])
            if blobs is None:
                return record
            opened = list(entries)
        else:
            opened = [
                self.entry(namespace, state_id, since + i, e, incarnation) for i, e in enumerate(entries)
            ]
        if blobs is not None:
            opened = self._resolved(namespace, state_id, entries, opened, since, blobs)
        return Record(opened, snapshot, incarnation)

    def _resolved(
        self,
        namespace: str,
        state_id: str,
        stored: list[dict[str, Any]],
        opened: list[dict[str, Any]],
        since: int,
        blobs: Mapping[str, bytes],
    ) -> list[dict[str, Any]]:
        """``opened`` entries with the values their references name put back."""
        plain: dict[str, bytes] = {}
        out = opened
        for i, entry in enumerate(stored):
            if REFS not in entry:
                continue
            seq = since + i

            def load(name: str, seq: int = seq) -> Any:
                data = plain.get(name)
                if data is None:
                    data = plain[name] = self._blob(namespace, state_id, seq, name, blobs)
                return orjson.loads(data)

            value = {k: v for k, v in opened[i].items() if k != REFS}
            if out is opened:
                out = list(opened)
            out[i] = resolve(value, load)
        return out

    def _blob(self, namespace: str, state_id: str, seq: int, name: str, blobs: Mapping[str, bytes]) -> bytes:
        """A blob's plaintext (opened if sealed)."""
        stored = blobs.get(name)
        if stored is None:
            raise MissingBlobError(
                f"State {state_id!r} entry seq {seq} refers to blob {name!r}, which this store does "
                "not hold: it was removed or never written (a damaged or partly copied store). "
                "Nothing was returned; restore the store's blobs from a backup, or delete the State"
            )
        if stored[:1] in _CLEAR_BLOB:
            return stored
        ring = self.keyring
        if ring is None:
            raise _no_ring(state_id, f"entry seq {seq} blob {name!r}", stored[:80].decode("ascii", "replace"))
        return open_blob(ring, stored, namespace, name, f"State {state_id!r} entry seq {seq} blob {name!r}")

    def snapshot(
        self, namespace: str, state_id: str, snapshot: dict[str, Any] | None, incarnation: str | None
    ) -> dict[str, Any] | None:
        if snapshot is None:
            return None
        ring = self.keyring
        if ring is None:
            if is_sealed(snapshot):
                raise _no_ring(state_id, "snapshot", snapshot[SEALED])
            return snapshot
        if is_sealed(snapshot):
            return open_snapshot(ring, snapshot, namespace, state_id, incarnation)
        if not self.allow_plaintext:
            raise _plaintext(state_id, "snapshot")
        return snapshot

    def rows(self, namespace: str, page: Page) -> Page:
        """A listing page with sealed tasks opened (with no keyring, shown as ``[sealed]``)."""
        if not any(row.task.startswith(TASK_MARK) for row in page):
            return page
        rows = [
            row
            if not row.task.startswith(TASK_MARK)
            else dataclasses.replace(row, task=self._task(namespace, row))
            for row in page
        ]
        return Page(rows, page.next)

    def _task(self, namespace: str, row: SavedState) -> str:
        """A listing row's sealed task, opened; ``[sealed]`` when this ring cannot open it
        (a key it lacks during a rotation, or a damaged record, which reads report)."""
        ring = self.keyring
        if ring is None:
            return "[sealed]"
        try:
            return open_task(ring, row.task, namespace, row.id)
        except DecryptionError:
            return "[sealed]"


def _all(refs: list[list[str]]) -> frozenset[str] | None:
    names = frozenset(name for names in refs for name in names)
    return names or None


def _check_own_keys(snapshot: dict[str, Any]) -> None:
    """Refuse a snapshot that would read back as a sealed one."""
    task = snapshot.get("task")
    if SEALED in snapshot or (isinstance(task, str) and task.startswith(TASK_MARK)):
        raise ValueError(
            f"the snapshot holds {SEALED!r} or a task starting with {TASK_MARK!r}, which are "
            "statekeep's marks of a sealed record; nothing was written. Rename the key or the task"
        )


#: The first byte of a blob stored in clear (its JSON); a sealed one starts with its key id.
_CLEAR_BLOB = (b'"', b"{", b"[")


class MissingBlobError(CorruptStateError):
    """An entry refers to a blob the store does not hold."""


class RefusedRecord(DecryptionError):
    """A record the store may not read as it was opened. The message says what to do in this
    API's words; ``fact`` says only what was found, for a caller that speaks in others (the
    command line, in its options)."""

    def __init__(self, message: str, fact: str) -> None:
        super().__init__(message)
        self.fact = fact


class InClearError(RefusedRecord):
    """A record stored in clear, read by a store opened with keys (and no allow_plaintext)."""


class NoKeysError(RefusedRecord):
    """A sealed record, read by a store opened without keys."""


def _plaintext(state_id: str, what: str) -> DecryptionError:
    return InClearError(
        f"State {state_id!r} {what} is plaintext, and this store was opened with encrypt=, which "
        "reads sealed records only: pass allow_plaintext=True to read it, or run "
        "`statekeep rekey` to seal it",
        f"State {state_id!r} {what} is stored in clear, not sealed",
    )


def _no_ring(state_id: str, what: str, sealed: object) -> DecryptionError:
    kid = sealed.partition(":")[0] if isinstance(sealed, str) else "?"
    return NoKeysError(
        f"State {state_id!r} {what} is sealed with key {kid!r}, and this store has no keyring: "
        "open it with encrypt=Keyring({...}) holding that key",
        f"State {state_id!r} {what} is sealed with key {kid!r}, and no keys were given",
    )
